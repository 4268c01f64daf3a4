"""Markers applied once: gpu (CUDA), blackwell (SM100/SM103), multigpu (>= 2 GPUs). Each skip names the need."""

import pytest
import torch


def _cuda_capability():
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    capability = _cuda_capability()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needs = {
        "gpu": (capability is not None, "needs a CUDA GPU (none visible)"),
        "blackwell": (
            capability is not None and capability[0] == 10,
            f"needs an SM100/SM103 Blackwell GPU (this machine: {'no CUDA' if capability is None else 'SM%d%d' % capability})",
        ),
        "multigpu": (gpus >= 2, f"needs two or more CUDA GPUs (this machine: {gpus})"),
    }
    for item in items:
        for marker, (available, reason) in needs.items():
            if marker in item.keywords and not available:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
