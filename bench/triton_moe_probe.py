"""Probe: time (CUDA-graph medians) or run once (for ncu) named tile configurations of the Triton MoE.

``python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 16,64 --configs s16k_sx,s_f8_64`` prints one
JSON line per (tokens, config): us per layer (4 routings rotated, as ``bench/moe_layer.py``); the configs of one token
count are captured first, then timed interleaved (``bench.common.graph_medians_interleaved``: one replay of each per
round, the order rotated), so a drift of the card's clocks lands on all of them alike. ``--once`` runs each
call once after a warm-up instead (to sit under ``ncu``). Config names are ``bench/moe_layer.py``'s CANDIDATES,
optionally with ``@<dequant>`` (``s16k_sx_r@sx_auto``: that tile with another dequant mode) and ``+field=value``
overrides of ``TritonMoEConfig`` fields (``l128a_sa+fc1_block_k=128+fc1_stages=2``). ``--profile`` prints the mean
duration of each kernel of one call instead (torch profiler, eager calls after a warm-up). ``--dims
EXPERTS,TOPK,HIDDEN,INTER`` replaces the shape's sizes (session 33: ``128,8,1536,1024`` gives squared ReLU the 30b
FC1's weight shape in FC2 and its FC2's in FC1, the same bytes). Session 34: a config name ending in ``~N`` (or
``~fc2=N``) runs the Gluon f8x2 FC2 with ``timing_skip=N``, ``~fc1=N`` the Gluon f8x2 FC1 (``SKIP_*`` flags of
``_gluon_f8x2_fc2_kernel``; timing only, wrong output); both may be given (``name~fc1=1~fc2=1``). Session 56:
``name~route`` takes the route launches out of the captured graph (``routes_outside``: each routing map's route
tables are computed once, by the eager calls before the capture, and the graph reads them): timed beside ``name``,
an upper bound on what a route-free launch sequence (the FC programs planning their own expert's pairs) could save.
The name ``default`` is the layer's own pick (``choose_config``), e.g. ``--configs default,default~route``.
"""

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import graph_medians_interleaved  # noqa: E402
from bench.moe_layer import CANDIDATES, ROTATE, SHAPES, rotated_inputs  # noqa: E402
from megatron_mxfp8_moe.kernels import triton_route  # noqa: E402
from megatron_mxfp8_moe.kernels.triton_moe import triton_mxfp8_moe  # noqa: E402
from megatron_mxfp8_moe.tensor import quantize_mxfp8  # noqa: E402


def parse_config(name: str):
    """``base[@dequant][+field=value...]`` -> a ``TritonMoEConfig`` (``base`` from ``CANDIDATES``)."""
    head, *overrides = name.split("+")
    base, _, dequant = head.partition("@")
    cfg = CANDIDATES[base]
    fields = {"dequant": dequant} if dequant else {}
    for item in overrides:
        key, _, value = item.partition("=")
        current = getattr(cfg, key)  # AttributeError names an unknown field
        if value.lower() == "none":
            fields[key] = None
        elif isinstance(current, bool):
            fields[key] = value in ("1", "True", "true")
        else:
            fields[key] = value if isinstance(current, str) else int(value)
    return dataclasses.replace(cfg, **fields)


def routes_outside(route, cache: dict):
    """``route`` (``triton_launch._route``) memoized in ``cache`` by the routing map's and valid count's addresses and
    the other arguments: the first call per key launches it, later calls (a graph capture) return its tables and
    launch nothing. The cache holds the two tensors too, so their addresses are not reused for other data; valid only
    while their values stay (the probe's fixed inputs)."""
    def memoized(routing_map, valid_tokens, *args):
        key = (routing_map.data_ptr(), tuple(routing_map.shape), valid_tokens.data_ptr(), args)
        if key not in cache:
            cache[key] = (routing_map, valid_tokens, route(routing_map, valid_tokens, *args))
        return cache[key][2]

    return memoized


_ROUTES: dict = {}  # the "~route" probes' route tables (kept alive: the graphs read them)


@contextlib.contextmanager
def suffix_patches(suffixes: list):
    """Within the block the launch path carries the patches that a config name's ``~`` suffixes ask for: ``"fc1=N"``
    / ``"fc2=N"`` / ``"N"`` (the FC2's) launch the Gluon f8x2 FC1 / FC2 with ``timing_skip=N``; ``"route"`` memoizes
    the routes (``routes_outside``)."""
    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc1_kernel as fc1_module
    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc2_kernel as fc2_module
    from megatron_mxfp8_moe.kernels import triton_launch

    launchers = {"fc1": (fc1_module, "launch_gluon_f8x2_fc1"), "fc2": (fc2_module, "launch_gluon_f8x2_fc2")}
    saved = []
    try:
        for item in suffixes:
            if item == "route":
                module, attr = triton_launch, "_route"
                patched = routes_outside(triton_launch._route, _ROUTES)
            else:
                kernel, _, value = item.rpartition("=")
                module, attr = launchers[kernel or "fc2"]
                patched = functools.partial(getattr(module, attr), timing_skip=int(value))
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, patched)
        yield
    finally:
        for module, attr, launch in reversed(saved):
            setattr(module, attr, launch)


def kernel_means_us(run, reps: int = 5) -> dict:
    """Mean CUDA time per call of each kernel ``run(ROTATE)`` launches (``reps`` profiled rounds)."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
    calls = reps * ROTATE
    totals = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.time_range.elapsed_us()
    return {name: round(us / calls, 1) for name, us in sorted(totals.items(), key=lambda kv: -kv[1])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="qwen3-30b-a3b")
    parser.add_argument("--dims", default=None, help="EXPERTS,TOPK,HIDDEN,INTER in place of --shape's sizes")
    parser.add_argument("--tokens", default="16")
    parser.add_argument("--configs", required=True)
    parser.add_argument("--activation", default="swiglu")
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--route-one-program-max", type=int, default=None,
                        help="override the pair count up to which one program runs the whole route")
    args = parser.parse_args()
    if args.route_one_program_max is not None:
        triton_route._ROUTE_ONE_PROGRAM_PAIRS = args.route_one_program_max
    device = torch.device("cuda")
    experts, topk, hidden, inter = SHAPES[args.shape] if args.dims is None else map(int, args.dims.split(","))
    if args.dims is not None:
        args.shape = f"H{hidden}I{inter}"  # fits the 10 characters gpu_next.sh's summaries print
    gated = args.activation == "swiglu"
    gen = torch.Generator(device="cpu").manual_seed(0)
    fc1 = quantize_mxfp8((torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.02).to(device, torch.bfloat16))
    inner = inter if gated else 2 * inter
    fc2 = quantize_mxfp8((torch.randn(experts, hidden, inner, generator=gen) * 0.02).to(device, torch.bfloat16))
    for tokens in map(int, args.tokens.split(",")):
        xs, probs, maps, valid = rotated_inputs(tokens, hidden, experts, topk, device)
        outs = [torch.empty(tokens, hidden, device=device, dtype=torch.bfloat16) for _ in range(ROTATE)]
        timed = {}
        for name in args.configs.split(","):
            base, *suffixes = name.split("~")
            with suffix_patches(suffixes):
                cfg = None if base == "default" else parse_config(base)  # None: the layer's own pick
                run = probe_config(args, name, cfg, tokens, xs, probs, maps, valid, outs, fc1, fc2)
            if run is not None:
                timed[name] = functools.partial(_with_suffixes, suffixes, run)
        for name, us in graph_medians_interleaved(timed).items():  # one replay of each per round, order rotated
            print(json.dumps(dict(shape=args.shape, activation=args.activation, tokens=tokens, config=name,
                                  us=round(us / ROTATE, 1), timing="interleaved",
                                  mma_v3=os.environ.get("DISABLE_MMA_V3") != "1")), flush=True)


def _with_suffixes(suffixes: list, run) -> None:
    """``run()`` with the patches of ``suffixes`` in force (they act when the launch is captured)."""
    with suffix_patches(suffixes):
        run()


def probe_config(args, name, cfg, tokens, xs, probs, maps, valid, outs, fc1, fc2):
    """``--profile``: print ``cfg``'s kernel times at ``tokens``; ``--once``: run it twice. Otherwise compile it and
    return the function that runs it on the ``ROTATE`` inputs, for the interleaved timing (None, with the error
    printed, where it does not compile or run)."""
    def run(count=ROTATE):
        for i in range(count):
            triton_mxfp8_moe(xs[i], probs[i], maps[i], fc1, fc2, activation=args.activation,
                             valid_tokens=valid, out=outs[i], config=cfg)

    if args.profile:
        print(json.dumps(dict(shape=args.shape, activation=args.activation, tokens=tokens, config=name,
                              route_one_program_max=triton_route._ROUTE_ONE_PROGRAM_PAIRS,
                              kernels_us=kernel_means_us(run))), flush=True)
        return None
    try:
        run(1)  # compile; a tile that does not fit (registers, shared memory) is reported, not fatal
    except Exception as exc:  # noqa: BLE001 - a probe reports every failure and goes on
        print(json.dumps(dict(shape=args.shape, activation=args.activation, tokens=tokens, config=name,
                              error=f"{type(exc).__name__}: {str(exc)[:200]}")), flush=True)
        return None
    if args.once:
        run(1)
        torch.cuda.synchronize()
        run(1)
        torch.cuda.synchronize()
        return None
    return run


if __name__ == "__main__":
    main()
