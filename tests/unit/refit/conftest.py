"""Shared fixtures of the refit unit tests."""

import pytest

from megatron_mxfp8_moe.refit import validate


@pytest.fixture
def scans(monkeypatch):
    """The device-check path on the CPU: "auto" resolves to the triton quantizer, and each NaN/Inf scan launch is
    recorded as ``(list of its sources, first_entry)`` instead of run."""
    import megatron_mxfp8_moe.quant.triton as triton_quant
    from megatron_mxfp8_moe.quant.backends import QuantBackend

    monkeypatch.setattr(validate, "resolve_quant_backend", lambda backend, device: QuantBackend.TRITON)
    launched = []
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton",
                        lambda sources, flags, first_entry=0, **knobs: launched.append((list(sources), first_entry)))
    return launched
