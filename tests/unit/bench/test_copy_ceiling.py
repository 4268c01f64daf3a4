"""bench/common.py: the device-copy ceiling is the fastest of three copy methods, each timed on its own operation."""

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
from bench import common  # noqa: E402


@pytest.fixture
def stand_in_timers(monkeypatch):
    """Timers that run the timed function once (so each method's operation is observable) and return fixed
    microseconds: graph-captured calls 1000 us unless the call negated its source (an elementwise kernel), 700 us
    then; eager calls 800 us."""
    seen = []

    def timer(kind):
        def median_us(fn, iters=30, warmup=3):
            fn()
            target, source = seen_tensors[-1]
            negated = torch.equal(target, -source)
            seen.append((kind, "neg" if negated else "copy"))
            return 700.0 if (kind == "graph" and negated) else (1000.0 if kind == "graph" else 800.0)
        return median_us

    seen_tensors = []
    real_empty_like = torch.empty_like

    def empty_like(source, *args, **kwargs):
        target = real_empty_like(source, *args, **kwargs)
        seen_tensors.append((target, source))
        return target

    monkeypatch.setattr(common, "graph_median_us", timer("graph"))
    monkeypatch.setattr(common, "eager_median_us", timer("eager"))
    monkeypatch.setattr(common.torch, "empty_like", empty_like)
    return seen


def test_each_method_times_its_own_operation(stand_in_timers):
    elements = 4096
    by_method = common.copy_gbps_by_method(elements, device="cpu")
    assert stand_in_timers == [("graph", "copy"), ("eager", "copy"), ("graph", "neg")]
    moved = 4 * elements  # 2 bytes read + 2 written per bf16 element
    assert by_method == {
        "copy_ in a CUDA graph": pytest.approx(moved / 1000e-6 / 1e9),
        "copy_ eager": pytest.approx(moved / 800e-6 / 1e9),
        "elementwise kernel in a CUDA graph": pytest.approx(moved / 700e-6 / 1e9),
    }


def test_the_ceiling_is_the_fastest_method(stand_in_timers):
    ceiling, by_method = common.copy_bandwidth_gbps(4096, device="cpu")
    assert ceiling == max(by_method.values()) == by_method["elementwise kernel in a CUDA graph"]
    assert ceiling > by_method["copy_ eager"] > by_method["copy_ in a CUDA graph"]
