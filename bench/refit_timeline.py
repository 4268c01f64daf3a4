"""Where the time of one ``refit_experts`` call goes on the host: a timeline of its phases, in microseconds from
the call's start (perf_counter), median over ``--reps`` calls after ``--warmup``.

Phases (wrapped, not changed): building the ``RefitValidator``, ``plan`` (validation; scans launched inside it
with ``"reject"``), ``_launch_plan`` (the quantize launches; each launch's own host time is listed too),
``_finish_plan`` (the one host sync: mostly waiting for the GPU; then cache refreshes), and the rest up to the
return. ``gpu`` is the CUDA-event time of the whole call; ``host_before_gpu`` ~ the time until the first kernel
launch returns (the GPU idles before it unless a scan was launched in ``plan``).

Targets: ``MXFP8ExpertLayer`` (Triton backend) and the bare canonical stacks of ``bench/refit.py``; sources: one
qwen3-30b-a3b layer, 2 stacked ``[E, M, K]`` bf16 tensors or 256 per-expert ones; ``nonfinite`` both modes.

Usage: ``python bench/refit_timeline.py --out DIR`` (CUDA; writes ``refit_timeline.json`` / ``.md``).
``--profile`` instead prints cProfile's top functions (own time, then cumulative) over ``--reps`` calls of the
layer's per-expert and stacked refits in both modes, phases unwrapped.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import sys
import time

import refit as refit_bench  # bench/refit.py (this script's folder is sys.path[0]): the layer and the bare stacks
import torch

from megatron_mxfp8_moe.quant import triton as quant_triton
from megatron_mxfp8_moe.refit import apply, validate

_marks: list[tuple[str, float]] = []


def _wrap(owner, name: str, label: str):
    """Record (label + ' start' / ' end', perf_counter) around ``owner.name``; returns the restore callable."""
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        _marks.append((label + " start", time.perf_counter()))
        try:
            return original(*args, **kwargs)
        finally:
            _marks.append((label + " end", time.perf_counter()))

    setattr(owner, name, wrapped)
    return lambda: setattr(owner, name, original)


def timeline(function, device, reps: int, warmup: int) -> dict:
    """Median microseconds from the call's start to each mark (the k-th occurrence of a label kept apart), the
    median call time on the host and on CUDA events."""
    for _ in range(warmup):
        function()
    per_mark = collections.defaultdict(list)
    host, gpu = [], []
    cuda = device.type == "cuda"
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize(device)
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _marks.clear()
        begin = time.perf_counter()
        if cuda:
            start_event.record()
        function()
        if cuda:
            end_event.record()
        end = time.perf_counter()
        if cuda:
            torch.cuda.synchronize(device)
        seen = collections.Counter()
        for label, stamp in _marks:
            seen[label] += 1
            key = label if seen[label] == 1 else f"{label} #{seen[label]}"
            per_mark[key].append((stamp - begin) * 1e6)
        host.append((end - begin) * 1e6)
        gpu.append(start_event.elapsed_time(end_event) * 1e3 if cuda else float("nan"))
    marks = sorted(((key, statistics.median(values)) for key, values in per_mark.items()), key=lambda kv: kv[1])
    return {"marks": marks, "host_us": statistics.median(host), "events_us": statistics.median(gpu)}


def profile_calls(function, title: str, reps: int, warmup: int) -> None:
    """Print cProfile's top 25 functions by own time and by cumulative time over ``reps`` calls."""
    import cProfile
    import pstats

    for _ in range(warmup):
        function()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(reps):
        function()
    profiler.disable()
    sys.stdout.write(f"\n### {title}: {reps} calls\n")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="cuda; cpu only as a smoke run (no Triton there)")
    parser.add_argument("--profile", action="store_true", help="cProfile the layer's refits instead of the timeline")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator(device=device).manual_seed(0)
    shape1, shape2 = (2 * refit_bench.INTERMEDIATE, refit_bench.HIDDEN), (refit_bench.HIDDEN, refit_bench.INTERMEDIATE)
    fc1 = torch.randn((args.experts,) + shape1, device=device, generator=generator, dtype=torch.bfloat16) * 0.02
    fc2 = torch.randn((args.experts,) + shape2, device=device, generator=generator, dtype=torch.bfloat16) * 0.02
    stacked = {"linear_fc1.weight": fc1, "linear_fc2.weight": fc2}
    per_expert = {f"linear_fc1.weight{i}": fc1[i] for i in range(args.experts)}
    per_expert.update({f"linear_fc2.weight{i}": fc2[i] for i in range(args.experts)})
    layer, note = refit_bench.real_layer(fc1, fc2)
    targets = [("canonical stacks", refit_bench.CanonicalStacks(args.experts, device))]
    if layer is not None:
        targets.append(("MXFP8ExpertLayer", layer))
    if args.profile:
        module = targets[-1][1]
        for label, sources in (("per-expert", per_expert), ("stacked", stacked)):
            for mode in ("reject", "detect"):
                profile_calls(lambda: apply.refit_experts(module, sources, progress=False, nonfinite=mode),
                              f"{targets[-1][0]}, {label} sources, nonfinite={mode!r}", args.reps, args.warmup)
        return 0
    restore = [
        _wrap(validate.RefitValidator, "__init__", "validator"),
        _wrap(validate.RefitValidator, "plan", "plan"),
        _wrap(apply, "_launch_plan", "launch"),
        _wrap(quant_triton, "quantize_into_triton", "quantize launch"),
        _wrap(quant_triton, "quantize_experts_into_triton", "quantize launch"),
        _wrap(quant_triton, "scan_nonfinite_triton", "scan launch"),
        _wrap(apply, "_finish_plan", "finish (sync, refresh)"),
    ]
    rows = []
    try:
        for target, module in targets:
            for label, sources in (("2 stacked", stacked), (f"{len(per_expert)} per-expert", per_expert)):
                for mode in ("reject", "detect"):
                    result = timeline(lambda: apply.refit_experts(module, sources, progress=False, nonfinite=mode),
                                      device, args.reps, args.warmup)
                    rows.append(dict(result, target=target, sources=label, nonfinite=mode))
    finally:
        for undo in restore:
            undo()
    (out_dir / "refit_timeline.json").write_text(json.dumps({"real_layer": note, "rows": rows}, indent=2))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lines = [f"# refit_experts host timeline ({name}, torch {torch.__version__}, "
             f"median of {args.reps})", ""]
    for row in rows:
        lines.append(f"## {row['target']}, {row['sources']} sources, nonfinite={row['nonfinite']!r}: "
                     f"CUDA events {row['events_us']:.0f} us, host {row['host_us']:.0f} us")
        lines.append("")
        lines += [f"- {us:8.1f} us  {key}" for key, us in row["marks"]]
        lines.append("")
    (out_dir / "refit_timeline.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
