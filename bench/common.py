"""Timing helpers shared by the benchmarks: CUDA-graph medians and the device-copy ceiling."""

import datetime
import json
import os
import platform

import torch


def graph_median_us(fn, iters: int = 100, warmup: int = 3) -> float:
    """Median time in microseconds of ``fn`` captured once in a CUDA graph and replayed ``iters`` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


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
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth_gbps(nbytes: int = 4 * 1024**3) -> float:
    """Device-to-device copy bandwidth in GB/s counting bytes read plus bytes written (a bf16 copy)."""
    source = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    target = torch.empty_like(source)
    microseconds = graph_median_us(lambda: target.copy_(source), iters=30)
    del target, source
    torch.cuda.empty_cache()
    return 2 * nbytes / (microseconds * 1e-6) / 1e9


def read_bandwidth_gbps(nbytes: int = 4 * 1024**3) -> float:
    """HBM read bandwidth in GB/s from a large float32 sum of bf16 data (reads dominate)."""
    source = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    microseconds = graph_median_us(lambda: torch.sum(source.view(64, -1), dim=1, dtype=torch.float32), iters=30)
    del source
    torch.cuda.empty_cache()
    return nbytes / (microseconds * 1e-6) / 1e9


def environment() -> dict:
    """GPU, versions and date for the report header."""
    import triton

    try:
        import megatron.core

        megatron_version = megatron.core.__version__
    except Exception:  # noqa: BLE001 - report whatever is there
        megatron_version = "not installed"
    properties = torch.cuda.get_device_properties(0)
    return {
        "gpu": properties.name,
        "sm": f"{properties.major}.{properties.minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "megatron_core": megatron_version,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def write_outputs(out_dir: str, stem: str, payload: dict, markdown: str) -> None:
    """Write ``stem.json`` and ``stem.md`` into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as handle:
        json.dump(payload, handle, indent=1)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as handle:
        handle.write(markdown)
