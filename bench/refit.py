"""Benchmark: refit_experts of one Qwen3-30B-A3B MoE layer against the device-copy bandwidth of the same run.

Layer: 128 local experts, fc1 ``[1536, 2048]`` (``[gate; up]``, I = 768, H = 2048), fc2 ``[2048, 768]``;
new weights are bf16 tensors on the device. Per weight element a refit moves 2 bytes read (bf16 source) and
1 + 1/32 bytes written (fp8 data + E8M0 scale), so

    refit bandwidth = N * (2 + 1 + 1/32) / t_refit,    fraction = refit bandwidth / copy bandwidth,

where the copy bandwidth is a device-to-device copy of the same N bf16 elements (read 2N + write 2N bytes): on a GPU
the fastest of ``bench.common.copy_gbps_by_method`` (since session 51; before, an eager ``copy_`` alone, within about
1% of the fastest on run 54's H100), on the CPU an eager ``copy_``.
Timing: CUDA events around each call (perf_counter on the CPU), median over ``--reps`` after ``--warmup``.

Targets: the real ``megatron_mxfp8_moe.layer.MXFP8ExpertLayer`` with its backend stack built (the Triton stack is
the canonical storage itself; other backends' write hooks repack theirs) when importable, and always the bare
canonical stacks (a module
exposing ``mxfp8_weights()`` over one ExpertSet-like stack pair, no hooks). Rows: refit from a mapping, from a
stream, a mapping of two stacked ``[E, M, K]`` tensors (``linear_fc1.weight`` without an index), and a
``quantize_`` loop without validation; a model of ``--layers`` such layers (bare stacks) refitted from one
stream (pipelined: one module written while the next is validated) and from one mapping; on CUDA also the GPU passes alone for stacked and per-expert sources
(NaN/Inf scan only, predicated quantize only, both = the floor of the fast path) and, with ``--knobs``, a sweep of their tuning
knobs.

Usage: ``python bench/refit.py --out DIR`` (default ``$OUT`` or ``./bench_out``); writes ``refit.md`` and
``refit.json``. ``--experts 4 --device cpu`` gives a quick smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import copy_bandwidth_gbps, copy_methods_text, versions  # noqa: E402
from megatron_mxfp8_moe import MXFP8Tensor  # noqa: E402
from megatron_mxfp8_moe.quant import triton as qt  # noqa: E402
from megatron_mxfp8_moe.refit import refit_experts  # noqa: E402

HIDDEN = 2048  # H
INTERMEDIATE = 768  # I (moe_intermediate_size); fc1 = [gate; up] = 2 * I rows


class CanonicalStacks(torch.nn.Module):
    """The bare refit contract over one fc1 and one fc2 stack allocation (per-expert views, no hooks)."""

    def __init__(self, experts: int, device):
        super().__init__()
        self.num_local_experts = experts
        self.local_expert_offset = 0
        self.fc1 = MXFP8Tensor.empty((experts, 2 * INTERMEDIATE, HIDDEN), device=device)
        self.fc2 = MXFP8Tensor.empty((experts, HIDDEN, INTERMEDIATE), device=device)
        self._views = {f"linear_fc1.weight{i}": self.fc1.expert(i) for i in range(experts)}
        self._views.update({f"linear_fc2.weight{i}": self.fc2.expert(i) for i in range(experts)})

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        return dict(self._views)


def real_layer(fc1: torch.Tensor, fc2: torch.Tensor):
    """MXFP8ExpertLayer with its backend stack built, or (None, reason) when the layer is not usable here."""
    try:
        from megatron_mxfp8_moe.experts import ExpertSet
        from megatron_mxfp8_moe.layer import MXFP8ExpertLayer
    except ImportError as error:
        return None, f"megatron_mxfp8_moe.layer not importable ({error})"
    try:
        layer = MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend="auto")
        layer.build_()
    except Exception as error:  # noqa: BLE001 - report why the real layer was skipped, keep the bench going
        return None, f"MXFP8ExpertLayer could not be built: {type(error).__name__}: {error}"
    return layer, f"MXFP8ExpertLayer, backend {layer.backend.value} ({layer.backend_reason})"


def time_ms(function, device: torch.device, reps: int, warmup: int) -> list[float]:
    """Milliseconds of ``function()`` per call: CUDA events on CUDA, perf_counter elsewhere."""
    for _ in range(warmup):
        function()
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            function()
            end.record()
            torch.cuda.synchronize(device)
            samples.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            function()
            samples.append((time.perf_counter() - begin) * 1e3)
    return samples


def _row(target: str, variant: str, samples: list[float], refit_bytes: float, copy_gbps: float) -> dict:
    median_ms = statistics.median(samples)
    refit_gbps = refit_bytes / (median_ms * 1e-3) / 1e9
    return {"target": target, "variant": variant, "median_ms": median_ms, "min_ms": min(samples),
            "max_ms": max(samples), "refit_GBps": refit_gbps, "fraction_of_copy": refit_gbps / copy_gbps}


def _host_validation_ms(module, sources, reps: int) -> float:
    """Median host time of building the refit plan (names, shapes, dtypes, devices; no GPU work)."""
    from megatron_mxfp8_moe.refit.validate import RefitValidator

    samples = []
    for _ in range(reps):
        begin = time.perf_counter()
        RefitValidator(module).plan(sources.items(), finite_on_device=True)
        samples.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(samples)


# Bytes per weight a GPU pass moves itself: the scan reads 2, the quantizer reads 2 and writes 1 + 1/32.
PASS_BYTES = {"scan": 2.0, "quantize": 2 + 1 + 1 / 32, "floor": 2 + 2 + 1 + 1 / 32}


def gpu_passes(stacks: "CanonicalStacks", fc1, fc2, device, args, refit_bytes: float, copy_gbps: float):
    """Rows timing the GPU passes without any validation, for stacked and per-expert (table) sources: the NaN/Inf
    scan alone, the abort-predicated quantize alone, and both (the floor); plus a sweep of the kernels' tuning
    knobs (rows of the second table). The start event is recorded before the first launch, so each row also holds
    that launch's host time (tens of us; a table launch's pinned pointer copy included)."""
    from megatron_mxfp8_moe.quant import triton as quant

    experts = fc1.shape[0]
    flags = torch.zeros(1 + 2 * experts, dtype=torch.int32, device=device)
    per_expert = (list(fc1.unbind(0)), list(fc2.unbind(0)))
    slots = list(range(experts))
    elements = fc1.numel() + fc2.numel()

    def scan(stacked: bool, **knob):
        flags.zero_()
        if stacked:
            quant.scan_nonfinite_triton([fc1], flags, **knob)
            quant.scan_nonfinite_triton([fc2], flags, first_entry=1, **knob)
        else:
            quant.scan_nonfinite_triton(per_expert[0], flags, **knob)
            quant.scan_nonfinite_triton(per_expert[1], flags, first_entry=experts, **knob)

    def write(stacked: bool, detect: bool = False, **knob):
        """The two quantize launches: predicated on the scan's flag, or (``detect``) flagging NaN/Inf themselves."""
        for first, (stack, source, sources) in enumerate(((stacks.fc1, fc1, per_expert[0]),
                                                          (stacks.fc2, fc2, per_expert[1]))):
            flag = ({"nonfinite": (flags, first if stacked else first * experts)} if detect
                    else {"abort": flags[:1]})
            if stacked:
                quant.quantize_into_triton(source, stack.data, stack.scale, **flag, **knob)
            else:
                quant.quantize_experts_into_triton(sources, slots, stack.data, stack.scale, **flag, **knob)

    def row(variant: str, kind: str, function) -> dict:
        samples = time_ms(function, device, args.reps, args.warmup)
        result = _row("", variant, samples, refit_bytes, copy_gbps)
        result["pass_GBps"] = elements * PASS_BYTES[kind] / (result["median_ms"] * 1e-3) / 1e9
        result["pass_fraction_of_copy"] = result["pass_GBps"] / copy_gbps
        if kind == "scan":  # writes nothing: a refit-bytes rate (above the copy rate) would mean nothing here
            del result["refit_GBps"], result["fraction_of_copy"]
        return result

    rows = []
    for stacked, label in ((True, "2 stacked [E, M, K] sources"), (False, f"{2 * experts} per-expert sources (tables)")):
        rows += [
            row(f"GPU floor, {label}: scan + 2 predicated quantize launches, no Python", "floor",
                lambda stacked=stacked: (scan(stacked), write(stacked))),
            row(f"GPU, {label}: 2 predicated quantize launches only", "quantize", lambda stacked=stacked: write(stacked)),
            row(f"GPU, {label}: NaN/Inf scan only (2 launches)", "scan", lambda stacked=stacked: scan(stacked)),
            row(f"GPU floor of nonfinite='detect', {label}: 2 quantize launches flagging NaN/Inf, no scan", "quantize",
                lambda stacked=stacked: write(stacked, detect=True)),
        ]
    sweep = []
    if not args.knobs:
        return rows, sweep
    for stacked in (True, False):
        for block in (1024, 2048, 4096):
            for iterations in (4, 8, 32):
                for warps in (4, 8):
                    knob = {"block": block, "iterations": iterations, "num_warps": warps}
                    sweep.append(dict(row(f"scan, {'stacked' if stacked else 'tables'}", "scan",
                                          lambda stacked=stacked, knob=knob: scan(stacked, **knob)), knobs=knob))
    for warps in (4, 8):
        knob = {"num_warps": warps}
        sweep.append(dict(row("quantize, stacked", "quantize", lambda knob=knob: write(True, **knob)), knobs=knob))
    for row_tiles in (1, 2, 4):
        for warps in (4, 8):
            knob = {"row_tiles": row_tiles, "num_warps": warps}
            sweep.append(dict(row("quantize, tables", "quantize", lambda knob=knob: write(False, **knob)), knobs=knob))
    return rows, sweep



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="output folder (default $OUT)")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--knobs", action="store_true", help="also sweep the GPU passes' tuning knobs (CUDA)")
    parser.add_argument("--layers", type=int, default=4,
                        help="also refit a model of this many such layers (bare stacks) from one stream / mapping")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    generator = torch.Generator(device=device).manual_seed(0)
    fc1 = torch.randn((args.experts, 2 * INTERMEDIATE, HIDDEN), device=device, generator=generator, dtype=torch.bfloat16)
    fc2 = torch.randn((args.experts, HIDDEN, INTERMEDIATE), device=device, generator=generator, dtype=torch.bfloat16)
    fc1.mul_(0.02)
    fc2.mul_(0.02)
    sources = {f"linear_fc1.weight{i}": fc1[i] for i in range(args.experts)}
    sources.update({f"linear_fc2.weight{i}": fc2[i] for i in range(args.experts)})
    stacked = {"linear_fc1.weight": fc1, "linear_fc2.weight": fc2}  # all local experts per entry
    elements = fc1.numel() + fc2.numel()
    refit_bytes = elements * (2 + 1 + 1 / 32)

    # device-copy bandwidth over the same N bf16 elements: read 2N + write 2N bytes
    if device.type == "cuda":  # the fastest of common's copy methods (bench/quantize.py's rule; run 54)
        copy_gbps, copy_by_method = copy_bandwidth_gbps(elements)
    else:  # no CUDA graphs here: an eager copy_ of the sources, timed by this benchmark's clock
        flat_source = torch.cat([fc1.reshape(-1), fc2.reshape(-1)])
        flat_target = torch.empty_like(flat_source)
        eager_ms = statistics.median(time_ms(lambda: flat_target.copy_(flat_source), device, args.reps, args.warmup))
        del flat_source, flat_target
        copy_gbps = 4 * elements / (eager_ms * 1e-3) / 1e9
        copy_by_method = {"copy_ eager": copy_gbps}
    copy_ms = 4 * elements / (copy_gbps * 1e9) * 1e3

    targets = [("canonical stacks (no hooks)", CanonicalStacks(args.experts, device))]
    layer, layer_note = real_layer(fc1, fc2)
    if layer is not None:
        hooked = "write hooks repack its stack" if not layer.stack_state.shares_canonical else "its stack is the canonical storage"
        targets.append((f"MXFP8ExpertLayer, {layer.backend.value} ({hooked})", layer))

    rows = []
    for target_name, module in targets:
        weights = module.mxfp8_weights()

        def quantize_loop():
            with torch.no_grad():
                for name, source in sources.items():
                    weights[name].quantize_(source)

        variants = [
            (f"refit_experts(mapping of {len(sources)} per-expert tensors)", lambda: refit_experts(module, sources, progress=False)),
            (f"refit_experts(stream of {len(sources)} per-expert tensors)",
             lambda: refit_experts(module, iter(sources.items()), progress=False)),
            ("refit_experts(mapping of 2 stacked [E, M, K] tensors)",
             lambda: refit_experts(module, stacked, progress=False)),
            ("quantize_ loop, no validation", quantize_loop),
            (f"nonfinite='detect': refit_experts(mapping of {len(sources)} per-expert tensors)",
             lambda: refit_experts(module, sources, progress=False, nonfinite="detect")),
            (f"nonfinite='detect': refit_experts(stream of {len(sources)} per-expert tensors)",
             lambda: refit_experts(module, iter(sources.items()), progress=False, nonfinite="detect")),
            ("nonfinite='detect': refit_experts(mapping of 2 stacked [E, M, K] tensors)",
             lambda: refit_experts(module, stacked, progress=False, nonfinite="detect")),
        ]
        for index, (variant, function) in enumerate(variants):
            samples = time_ms(function, device, args.reps, args.warmup)
            rows.append(_row(target_name, variant, samples, refit_bytes, copy_gbps))
            if index in (0, 2):  # the host plan of the mapping of per-expert tensors / of the stacked ones
                rows[-1]["host_validation_ms"] = _host_validation_ms(module, (sources, stacked)[index // 2], args.reps)

    if args.layers > 1:  # a whole-model sync: a stream is pipelined by one module, a mapping is one atomic batch
        model = torch.nn.ModuleDict({f"l{k}": CanonicalStacks(args.experts, device) for k in range(args.layers)})
        model_sources = {f"l{k}.{name}": source for k in range(args.layers) for name, source in sources.items()}
        for variant, function in (
            (f"refit_experts(stream of {args.layers} layers x {len(sources)} per-expert tensors)",
             lambda: refit_experts(model, iter(model_sources.items()), progress=False)),
            (f"refit_experts(mapping of {args.layers} layers x {len(sources)} per-expert tensors)",
             lambda: refit_experts(model, model_sources, progress=False)),
        ):
            samples = time_ms(function, device, args.reps, args.warmup)
            rows.append(_row(f"{args.layers} x canonical stacks (no hooks)", variant, samples,
                             args.layers * refit_bytes, copy_gbps))
        del model

    knobs = []
    if device.type == "cuda":  # the GPU passes of the fast path alone, on the bare stacks: its floor
        gpu_rows, knobs = gpu_passes(targets[0][1], fc1, fc2, device, args, refit_bytes, copy_gbps)
        rows += [dict(row, target=targets[0][0]) for row in gpu_rows]

    result = {
        "layer": {"experts": args.experts, "fc1": [2 * INTERMEDIATE, HIDDEN], "fc2": [HIDDEN, INTERMEDIATE],
                  "source_dtype": "bfloat16"},
        "elements": elements, "refit_bytes_per_call": refit_bytes,
        "copy": {"median_ms": copy_ms, "GBps": copy_gbps, "bytes_per_call": 4 * elements,
                 "GBps_by_method": copy_by_method},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": versions(), "reps": args.reps, "warmup": args.warmup, "real_layer": layer_note,
        "rows": rows, "knobs": knobs,
    }
    (out_dir / "refit.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# refit_experts: one Qwen3-30B-A3B MoE layer ({args.experts} experts, bf16 sources) on {result['device']}",
        "",
        f"Device copy: {copy_ms:.3f} ms for {4 * elements / 1e9:.2f} GB moved = **{copy_gbps:.1f} GB/s**, the "
        f"fastest of {copy_methods_text(copy_by_method)} GB/s. "
        f"Refit moves {refit_bytes / 1e9:.2f} GB per call (2 B read + 1 + 1/32 B written per weight).",
        "Versions: " + ", ".join(f"{key} {value}" for key, value in result["versions"].items()) + ".",
        f"Real layer: {layer_note}. Median of {args.reps} after {args.warmup} warm-up calls "
        f"({'CUDA events' if device.type == 'cuda' else 'perf_counter'}).",
        "",
        "The refit reads its source twice: the NaN/Inf scan (2 B per weight) runs before any byte is written "
        "(atomic), then the quantizer reads again and writes (3.03 B per weight). With both passes at the copy "
        "rate the fraction would be 3.03 / 5.03 = 0.60; the GPU rows below time the passes alone. \"pass GB/s\" "
        "counts the bytes a pass moves itself (scan 2 B, quantize 3.03 B, floor 5.03 B per weight). Rows marked "
        "nonfinite='detect' read the sources once: the quantize kernels flag NaN/Inf while writing, and a bad "
        "source is reported after its batch was written (opt-in; not atomic for NaN/Inf).",
        "",
        "| target | variant | median ms | min ms | refit GB/s | fraction of copy bandwidth | host plan ms | pass GB/s "
        "| pass / copy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(row, key, digits):
        return f"{row[key]:.{digits}f}" if key in row else ""

    lines += [
        f"| {row['target']} | {row['variant']} | {row['median_ms']:.3f} | {row['min_ms']:.3f} | "
        f"{cell(row, 'refit_GBps', 1)} | {cell(row, 'fraction_of_copy', 3)} | {cell(row, 'host_validation_ms', 3)} | "
        f"{cell(row, 'pass_GBps', 1)} | {cell(row, 'pass_fraction_of_copy', 3)} |"
        for row in rows
    ]
    if knobs:
        lines += [
            "",
            f"Tuning knobs of the GPU passes (`quant/triton.py`; defaults of this run: scan block {qt._SCAN_BLOCK} words, "
            f"{qt._SCAN_ITERATIONS} iterations, {qt._SCAN_WARPS} warps; quantize stacked {qt._STACK_WARPS} warps, tables "
            f"{qt._TABLE_ROW_TILES} row tiles and {qt._TABLE_WARPS} warps):",
            "",
            "| pass | knobs | median ms | pass GB/s | pass / copy |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [
            f"| {row['variant']} | {' '.join(f'{key}={value}' for key, value in row['knobs'].items())} | "
            f"{row['median_ms']:.3f} | {row['pass_GBps']:.1f} | {row['pass_fraction_of_copy']:.3f} |"
            for row in knobs
        ]
    (out_dir / "refit.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
