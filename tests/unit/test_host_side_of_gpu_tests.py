"""``tools/host_side_of_gpu_tests.py`` (run by ``make test``) fails on a GPU test that breaks before its first CUDA
call and passes one that reaches it."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools",
                    "host_side_of_gpu_tests.py")


def _run(tmp_path, body):
    path = tmp_path / "test_sample_gpu.py"
    path.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, TOOL, str(path), "--", "--rootdir", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the tool runs the GPU tests' host side only without CUDA")
def test_host_side_failures_fail_the_check(tmp_path):
    reaches = """
        import pytest
        import torch

        pytestmark = pytest.mark.gpu


        def test_reaches_cuda():
            torch.empty(1, device="cuda")
        """
    ok = _run(tmp_path, reaches)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 stopped at their first CUDA call, 0 failed before it" in ok.stdout
    broken = _run(tmp_path, reaches + """

        def test_looks_up_a_missing_tile():
            {"s16": 1}["s16_eg2_pdl"]
            torch.empty(1, device="cuda")
        """)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "1 stopped at their first CUDA call, 1 failed before it" in broken.stdout
    assert "test_looks_up_a_missing_tile" in broken.stdout and "KeyError" in broken.stdout
    nothing = _run(tmp_path, "def test_nothing():\n    pass\n")  # no test reached CUDA: nothing was checked
    assert nothing.returncode == 1
