"""Host-only timing of ``refit_experts``: the per-entry Python work of one Qwen3-30B-A3B MoE layer, no GPU needed.

What is timed (perf_counter, median over ``--reps`` after ``--warmup``), per source form (256 per-expert bf16
tensors ``linear_fc{1,2}.weight{i}``, or 2 stacked ``[E, M, K]`` tensors ``linear_fc{1,2}.weight``):

- ``plan``: ``RefitValidator(layer).plan(sources.items(), finite_on_device=True)``, the host plan alone;
  ``plan-in-turn``: the same for fc1's 128 sources and fc2's in turn (one list per call);
- ``refit``: the whole ``refit_experts(layer, sources)`` (plan, launch path, the one host sync, cache refreshes,
  report and log line), from a mapping and, for per-expert sources, from a stream;
- ``detect``: the same from a mapping with ``nonfinite="detect"`` (no scan launches; the quantize launches carry
  the flags).

The GPU fast path is emulated on the CPU, so that what is measured is the Python overhead the H200 host pays and
not CPU kernels: ``TRITON_INTERPRET=1`` (Triton's checks accept CPU tensors), ``"auto"`` resolves to the triton
quantizer on any device (as on CUDA), and the two Triton kernels (NaN/Inf scan, table/stacked quantize) are
replaced by launchers that return at once. Everything around
the launches runs as on the GPU (scan chunking, pointer tables, abort-flag checks, flag readback, hooks and cache
refreshes). Not measured: the launches themselves and the pinned host-to-device copies of the pointer tables
(``device_table`` returns the host tensor off CUDA). The host NaN/Inf scan (``_check_finite``, taken only when
the device check is not possible) is not on this path, so it cannot dominate. Sources are ``torch.empty``: no
byte of them is read.

Target: ``MXFP8ExpertLayer`` over ``ExpertSet.empty`` (backend "reference", not built: no write hooks, like the
Triton layer whose stack is the canonical storage).

Usage: ``python bench/refit_host.py [--experts 128] [--reps 200] [--profile plan-experts]`` (cProfile of one
row, top functions by total time, instead of the table). ``--experts 8`` gives a quick smoke run.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import logging
import os
import platform
import pstats
import statistics
import time

import torch

from megatron_mxfp8_moe import tensor as tensor_module
from megatron_mxfp8_moe.experts import ExpertSet
from megatron_mxfp8_moe.layer import MXFP8ExpertLayer
from megatron_mxfp8_moe.quant import _triton_quant_kernel, backends
from megatron_mxfp8_moe.quant.backends import QuantBackend
from megatron_mxfp8_moe.refit import apply, refit_experts, validate

HIDDEN = 2048  # H
INTERMEDIATE = 768  # I; fc1 = [gate; up] = [2 * I, H]


class _NoLaunch:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **meta)`` returns at once."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def emulated_gpu_fast_path():
    """The refit's CUDA fast path on CPU tensors, with the kernel launches stubbed out (see module docstring)."""
    real_resolve = backends.resolve_quant_backend

    def resolve(name, device):
        return QuantBackend.TRITON if name == "auto" else real_resolve(name, device)

    patches = [
        (validate, "resolve_quant_backend", resolve),
        (backends, "resolve_quant_backend", resolve),
        (_triton_quant_kernel, "mxfp8_quantize_swizzle_kernel", _NoLaunch()),
        (_triton_quant_kernel, "nonfinite_scan_kernel", _NoLaunch()),
        (tensor_module, "resolve_quant_backend", resolve),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    interpret = os.environ.get("TRITON_INTERPRET")
    try:
        os.environ["TRITON_INTERPRET"] = "1"  # read at call time: Triton's device checks accept CPU tensors
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        if interpret is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = interpret


def build(experts: int):
    """(layer, per-expert sources, stacked sources) at the qwen3-30b-a3b expert shape."""
    layer = MXFP8ExpertLayer(ExpertSet.empty(experts, HIDDEN, INTERMEDIATE, "swiglu"), backend="reference")
    shapes = {"fc1": (2 * INTERMEDIATE, HIDDEN), "fc2": (HIDDEN, INTERMEDIATE)}
    per_expert = {f"linear_{linear}.weight{i}": torch.empty(shape, dtype=torch.bfloat16)
                  for linear, shape in shapes.items() for i in range(experts)}
    stacked = {f"linear_{linear}.weight": torch.empty((experts,) + shape, dtype=torch.bfloat16)
               for linear, shape in shapes.items()}
    return layer, per_expert, stacked


def rows(layer, per_expert, stacked):
    """name -> (entries, callable) of every timed row."""
    def plan(sources):
        return lambda: validate.RefitValidator(layer).plan(sources.items(), finite_on_device=True)

    halves = [{name: source for name, source in per_expert.items() if name.startswith(f"linear_{linear}.")}
              for linear in ("fc1", "fc2")]
    turn = itertools.cycle(halves)

    def plan_in_turn():  # fc1's sources, then fc2's, in turn (a loop that syncs the two linears separately)
        return validate.RefitValidator(layer).plan(next(turn).items(), finite_on_device=True)

    return {
        "plan-experts": (len(per_expert), plan(per_expert)),
        "plan-in-turn": (len(per_expert) // 2, plan_in_turn),
        "plan-stacked": (len(stacked), plan(stacked)),
        "refit-experts": (len(per_expert), lambda: refit_experts(layer, per_expert)),
        "refit-stream": (len(per_expert), lambda: refit_experts(layer, iter(per_expert.items()))),
        "refit-stacked": (len(stacked), lambda: refit_experts(layer, stacked)),
        "detect-experts": (len(per_expert), lambda: refit_experts(layer, per_expert, nonfinite="detect")),
        "detect-stacked": (len(stacked), lambda: refit_experts(layer, stacked, nonfinite="detect")),
    }


def time_ms(function, reps: int, warmup: int) -> tuple[float, float]:
    """(median, min) milliseconds per call of ``function()``."""
    for _ in range(warmup):
        function()
    samples = []
    for _ in range(reps):
        begin = time.perf_counter()
        function()
        samples.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(samples), min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rows", default=None, help="comma-separated rows to time (default: all)")
    parser.add_argument("--profile", default=None, help="cProfile this row instead of timing every row")
    args = parser.parse_args()
    logging.getLogger(apply.__name__).setLevel(logging.WARNING)  # as in a run without INFO logging
    torch.set_grad_enabled(False)
    layer, per_expert, stacked = build(args.experts)
    table = rows(layer, per_expert, stacked)
    with emulated_gpu_fast_path():
        plan = validate.RefitValidator(layer).plan(per_expert.items(), finite_on_device=True)
        assert plan.finite_on_device, "the emulated fast path did not take the device check"
        if args.profile:
            _, function = table[args.profile]
            for _ in range(args.warmup):
                function()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.reps):
                function()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            return
        print(f"host: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
              f"python {platform.python_version()}; {args.experts} experts, median of {args.reps}")
        print(f"{'row':<16}{'entries':>8}{'median ms':>11}{'min ms':>9}{'us/entry':>10}")
        for name, (entries, function) in table.items():
            if args.rows and name not in args.rows.split(","):
                continue
            median, fastest = time_ms(function, args.reps, args.warmup)
            print(f"{name:<16}{entries:>8}{median:>11.3f}{fastest:>9.3f}{median * 1e3 / entries:>10.2f}")


if __name__ == "__main__":
    main()
