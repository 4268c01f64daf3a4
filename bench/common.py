"""Timing helpers shared by the benchmarks: CUDA-graph medians and the device-copy ceiling."""

import datetime
import json
import os
import platform

import torch

from megatron_mxfp8_moe.testing import capture_cuda_graph


def graph_median_us(fn, iters: int = 100, warmup: int = 3) -> float:
    """Median time in microseconds of ``fn`` captured once in a CUDA graph and replayed ``iters`` times."""
    return graph_medians_interleaved({"fn": fn}, iters, warmup)["fn"]


def graph_medians_interleaved(fns: dict, iters: int = 100, warmup: int = 3) -> dict:
    """Median time in microseconds of each ``fns[name]``, each captured once in a CUDA graph; the graphs are then
    replayed in rounds, one replay of each per round, the order rotated by one each round (so no variant always
    runs first, or always after the same other one, and a drift of the card's clocks or temperature over the
    measurement lands on every variant alike). ``{name: us}``; ``{}`` for no variants (a probe whose configs all
    printed their own lines, as ``--profile`` does)."""
    if not fns:
        return {}
    graphs = {name: _captured(fn, warmup) for name, fn in fns.items()}
    names = list(graphs)
    times = {name: [] for name in names}
    for i in range(iters):
        for name in names[i % len(names):] + names[:i % len(names)]:
            times[name].append(_replay_us(graphs[name]))
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def _captured(fn, warmup: int):
    """``fn`` warmed up ``warmup`` times and captured (``testing.capture_cuda_graph``), replayed 3 times; the graph."""
    graph = capture_cuda_graph(fn, warmup)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return graph


def _replay_us(graph) -> float:
    """Microseconds of one replay of ``graph``."""
    return _timed_us(graph.replay)


def _timed_us(fn) -> float:
    """Microseconds of one call of ``fn`` on the GPU (CUDA events around it, waited for)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def time_variants(runs, check, result: dict) -> None:
    """Probes: for each ``(name, (run, out))`` run once, then ``check(name, out, outs)`` (``outs``: the earlier
    variants' outputs by name; it writes its findings into ``result``), then ``graph_median_us(run)`` into
    ``result["us"]``. A variant that raises is reported as ``result[name + "_error"]`` and the others go on."""
    outs, times = {}, {}
    for name, (run, out) in runs:
        try:
            run()
            torch.cuda.synchronize()
            outs[name] = out.clone()
            check(name, out, outs)
            times[name] = graph_median_us(run)
        except Exception as exc:  # a probe: report and go on
            result[name + "_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    result["us"] = {name: round(t, 1) for name, t in times.items()}


def eager_median_us(fn, iters: int = 30, warmup: int = 3) -> float:
    """Median time in microseconds of eager calls of ``fn`` (CUDA events), for work a graph cannot capture."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = sorted(_timed_us(fn) for _ in range(iters))
    return times[len(times) // 2]


def copy_gbps_by_method(elements: int = 2**31, iters: int = 30, device: str = "cuda") -> dict:
    """Device-to-device bandwidth of a bf16 copy of ``elements`` values, in GB/s counting bytes read plus written,
    by method: ``copy_`` captured in a CUDA graph (a graph memcpy node), ``copy_`` called eagerly, and an
    elementwise kernel (``torch.neg(out=)``, same bytes) captured in a CUDA graph. Run 54 (H100): the graph memcpy
    node moved 2443-2449 GB/s at every size from 0.6 to 2.1 G elements, the eager ``copy_`` 3001-3044."""
    source = torch.randn(elements, dtype=torch.bfloat16, device=device)
    target = torch.empty_like(source)
    methods = {
        "copy_ in a CUDA graph": (graph_median_us, lambda: target.copy_(source)),
        "copy_ eager": (eager_median_us, lambda: target.copy_(source)),
        "elementwise kernel in a CUDA graph": (graph_median_us, lambda: torch.neg(source, out=target)),
    }
    result = {name: 4 * elements / (timer(fn, iters=iters) * 1e-6) / 1e9 for name, (timer, fn) in methods.items()}
    del target, source
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def copy_bandwidth_gbps(elements: int = 2**31, device: str = "cuda") -> tuple[float, dict]:
    """The device-copy ceiling in GB/s (read + write): the fastest of ``copy_gbps_by_method``, and that table."""
    by_method = copy_gbps_by_method(elements, device=device)
    return max(by_method.values()), by_method


def copy_methods_text(by_method: dict) -> str:
    """``copy_gbps_by_method``'s table as one line for a benchmark's header: "name GB/s, name GB/s, ..."."""
    return ", ".join(f"{name} {gbps:.0f}" for name, gbps in by_method.items())


def read_bandwidth_gbps(nbytes: int = 4 * 1024**3) -> float:
    """HBM read bandwidth in GB/s from a large float32 sum of bf16 data (reads dominate)."""
    source = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    microseconds = graph_median_us(lambda: torch.sum(source.view(64, -1), dim=1, dtype=torch.float32), iters=30)
    del source
    torch.cuda.empty_cache()
    return nbytes / (microseconds * 1e-6) / 1e9


def versions() -> dict:
    """torch, Triton, Megatron-Core and Python versions and today's date (no GPU needed), for report headers."""
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - report whatever is there
        triton_version = "not installed"
    try:
        import megatron.core

        megatron_version = megatron.core.__version__
    except Exception:  # noqa: BLE001 - report whatever is there
        megatron_version = "not installed"
    return {
        "torch": torch.__version__,
        "triton": triton_version,
        "megatron_core": megatron_version,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def environment() -> dict:
    """GPU, versions and date for the report header."""
    properties = torch.cuda.get_device_properties(0)
    return {"gpu": properties.name, "sm": f"{properties.major}.{properties.minor}", **versions()}


def write_outputs(out_dir: str, stem: str, payload: dict, markdown: str) -> None:
    """Write ``stem.json`` and ``stem.md`` into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as handle:
        json.dump(payload, handle, indent=1)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as handle:
        handle.write(markdown)
