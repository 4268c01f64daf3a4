"""Run GPU tests on a machine without CUDA to find defects in their host-side part (config lookups, patches, names).

Each test runs with its ``gpu`` skip lifted: a test that stops at its first CUDA call reached the device part (counted,
not a pass); any other failure comes before the device and is a defect of the test or of the code it calls on the
host. Prints one line per such failure and returns 1 if there is any (``make test`` runs it on ``tests/functional``
with ``-m gpu``; where CUDA is visible it does nothing: run the tests themselves). Usage:

    python tools/host_side_of_gpu_tests.py tests/functional/test_triton_moe_gpu.py [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

import pytest
import torch

_NO_CUDA = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "No CUDA GPUs are available",
            "CUDA driver initialization failed", "CUDA driver version is insufficient", "0 active drivers")


class _LiftGpuSkips:
    """Drops the conftest's "needs a CUDA GPU" skips and sorts each failure by whether it came from the missing GPU."""

    def __init__(self):
        self.reached, self.host_failures = 0, []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        from megatron_mxfp8_moe.kernels import triton_policy

        triton_policy._gpu_tested_triton = lambda: True  # the GPUs' Triton, whatever this machine has: the same picks
        for item in items:
            item.own_markers = [mark for mark in item.own_markers if not (
                mark.name == "skip" and str(mark.kwargs.get("reason", "")).startswith("needs a CUDA GPU"))]
            module = getattr(item, "module", None)
            if hasattr(module, "triton_moe_support"):  # the modules' Hopper-only fixtures ask it at each test
                module.triton_moe_support = lambda capability: (True, "")

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown" or not report.failed:
            return
        text = str(report.longrepr)
        if any(marker in text for marker in _NO_CUDA):
            self.reached += 1
        else:
            last = text.strip().splitlines()[-1:] or ["?"]  # --tb=line: "path:line: Error: message"
            self.host_failures.append(f"{report.nodeid}: {last[0].strip()[:240]}")


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)  # as `python -m pytest` from the checkout: `tests` importable, in spawned workers too
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
    if torch.cuda.is_available():
        print("host_side_of_gpu_tests: CUDA is visible here; run the GPU tests themselves")
        return 0
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    plugin = _LiftGpuSkips()
    # pytest's report kept aside (it counts every CUDA stop as a failure: a line each); "line" tracebacks are fast
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        status = pytest.main(["-p", "no:cacheprovider", "-q", "--tb=line", "-rN", "--no-header", *argv[:cut],
                              *argv[cut + 1:]], plugins=[plugin])
    if status in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        print(report.getvalue()[-4000:] + f"\nhost_side_of_gpu_tests: pytest stopped ({status.name})")
        return 1
    print(f"host_side_of_gpu_tests: {plugin.reached} stopped at their first CUDA call, "
          f"{len(plugin.host_failures)} failed before it")
    for line in plugin.host_failures:
        print("  " + line)
    return 1 if plugin.host_failures or not plugin.reached else 0  # none reached: nothing was checked


if __name__ == "__main__":
    sys.exit(main())
