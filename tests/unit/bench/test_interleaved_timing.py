"""bench/common.py: the variants of one measurement are replayed in rounds, in an order rotated each round, and each
gets the median of its own replays."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
from bench import common  # noqa: E402


def test_replays_interleave_in_rotating_order_and_medians_stay_per_variant(monkeypatch):
    captured, order = [], []
    # stand-ins for the CUDA parts: a "graph" is its variant's name; variant a takes 1, 2, 3, ... us on its
    # successive replays, b always 10 us, c 100 us, so a wrong assignment of times to names shows in the medians
    monkeypatch.setattr(common, "_captured", lambda fn, warmup: (captured.append(fn()), fn())[1])
    counts = {"a": 0}

    def replay_us(graph):
        order.append(graph)
        if graph == "a":
            counts["a"] += 1
            return float(counts["a"])
        return {"b": 10.0, "c": 100.0}[graph]

    monkeypatch.setattr(common, "_replay_us", replay_us)
    medians = common.graph_medians_interleaved({"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}, iters=5)
    assert captured == ["a", "b", "c"]  # every variant captured before any replay
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c", "b", "c", "a"]
    assert medians == {"a": 3.0, "b": 10.0, "c": 100.0}


def test_single_variant_median(monkeypatch):
    times = iter([5.0, 1.0, 9.0])
    monkeypatch.setattr(common, "_captured", lambda fn, warmup: "g")
    monkeypatch.setattr(common, "_replay_us", lambda graph: next(times))
    assert common.graph_median_us(lambda: None, iters=3) == 5.0


def test_no_variants_time_nothing(monkeypatch):
    # run 60: `triton_moe_probe.py --profile` left no variant to time and the rotation divided by zero
    monkeypatch.setattr(common, "_replay_us", lambda graph: (_ for _ in ()).throw(AssertionError("replayed")))
    assert common.graph_medians_interleaved({}, iters=5) == {}
