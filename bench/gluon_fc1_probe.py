"""Probe (session 18; the kernel moved into the package in session 19): the Gluon FC1 of the "sx4" plane tiles
(``megatron_mxfp8_moe/kernels/_gluon_fc1_kernel.py``) at kernel level.

The harness builds one FC1 problem shaped like a 256-token decode step (every expert with ``--pairs`` pairs in one
32-token block), checks the Gluon FC1 against a float64 reference and bit for bit against the Triton FC1 with the
same 128-deep steps and two gate / up tiles, and times both (and the Triton default tile) as CUDA-graph medians
(``bench.common.time_variants``). Squared ReLU layers of bench/moe_layer.py have twice the gated ``--inter``:

    python3 bench/gluon_fc1_probe.py --hidden 2048 --inter 768 --activation swiglu
    python3 bench/gluon_fc1_probe.py --hidden 2048 --inter 1536 --activation squared_relu
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import time_variants  # noqa: E402
from megatron_mxfp8_moe.kernels._gluon_fc1_kernel import launch_gluon_fc1  # noqa: E402

ACT_SWIGLU, ACT_SQUARED_RELU = 0, 2  # the codes of _triton_moe_kernel


def main() -> None:
    from megatron_mxfp8_moe.kernels import _triton_moe_kernel as kernels
    from megatron_mxfp8_moe.kernels.triton_launch import _scale_args
    from megatron_mxfp8_moe.kernels.triton_moe import TILES, planes_of
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import relative_error

    parser = argparse.ArgumentParser()
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--inter", type=int, default=768)
    parser.add_argument("--activation", choices=["swiglu", "squared_relu"], default="swiglu")
    parser.add_argument("--pairs", type=int, default=16, help="pairs per expert (one --block-t-token block each)")
    parser.add_argument("--block-t", type=int, default=32, choices=[16, 32, 64],
                        help="tokens per block; the Triton default tile of that width is the baseline")
    parser.add_argument("--gluon", default="64:3:4",
                        help="comma-separated block_n:stages:warps[:overlap[:scale_words[:one[:maxnreg]]]] of the "
                             "Gluon runs (overlap 0: each step's MMAs waited for, session 27; scale_words 1: the E8M0 "
                             "bytes read as one int32 per row and step, session 28; one 1: one scale factor where a "
                             "program's bytes are all below 128, with scale_words; maxnreg: a register cap, 0 none; "
                             "session 29)")
    args = parser.parse_args()
    torch.manual_seed(0)
    e, topk, hidden, inner, bt = args.experts, args.topk, args.hidden, args.inter, args.block_t
    if not 0 < args.pairs <= bt:
        parser.error(f"--pairs must be in 1..{bt} (one block per expert)")
    gated = args.activation == "swiglu"
    n1 = 2 * inner if gated else inner
    fc1 = quantize_mxfp8(torch.randn(e, n1, hidden, device="cuda", dtype=torch.bfloat16) * 0.05)
    scales, stride_se, scale_tiles = _scale_args(fc1)
    pairs = e * args.pairs
    tokens = -(-pairs // topk)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    pair = torch.arange(pairs, device="cuda", dtype=torch.int32)  # pair p: token p // topk, expert p % e
    sorted_pairs = torch.full((e * bt,), -1, device="cuda", dtype=torch.int32)
    for expert in range(e):
        mine = pair[pair % e == expert]
        sorted_pairs[expert * bt:expert * bt + mine.numel()] = mine
    block_expert = torch.arange(e, device="cuda", dtype=torch.int32)
    num_blocks = torch.tensor([e], device="cuda", dtype=torch.int32)
    w64 = fc1.dequantize().double()
    ref = torch.zeros(e * bt, inner, dtype=torch.float64, device="cuda")
    valid = sorted_pairs >= 0
    for expert in range(e):
        pos = valid[expert * bt:(expert + 1) * bt].nonzero().squeeze(1) + expert * bt
        y = x[(sorted_pairs[pos] // topk).long()].double() @ w64[expert].t()
        ref[pos] = (torch.nn.functional.silu(y[:, :inner]) * y[:, inner:]) if gated else torch.relu(y) ** 2
    ref = planes_of(ref, 128)
    act = ACT_SWIGLU if gated else ACT_SQUARED_RELU
    result = {"experts": e, "hidden": hidden, "inter": inner, "activation": args.activation, "pairs": args.pairs,
              "block_t": bt}

    def triton_fc1(name, block_k, **tile):
        cfg = dict(block_n=TILES[name].fc1_block_n, warps=TILES[name].fc1_warps, stages=TILES[name].fc1_stages,
                   maxnreg=TILES[name].fc1_maxnreg, merge=TILES[name].fc1_gate_merge)
        cfg.update(tile)
        planes = planes_of(x, block_k)
        inter = torch.full((e * bt, inner), float("nan"), device="cuda", dtype=torch.bfloat16)
        options = dict(num_warps=cfg["warps"], num_stages=cfg["stages"])
        if cfg["maxnreg"]:
            options["maxnreg"] = cfg["maxnreg"]

        def run():
            kernels._fc1_kernel[(triton.cdiv(inner, cfg["block_n"]), e)](
                planes, fc1.data, scales, inter, sorted_pairs, block_expert, num_blocks, inner, hidden,
                planes.stride(0), fc1.data.stride(0), fc1.data.stride(1), stride_se, scale_tiles, inter.stride(0),
                TOPK=topk, GATED=gated, ACTIVATION=act, BLOCK_N=cfg["block_n"], BLOCK_T=bt, BLOCK_K=block_k,
                EVEN_K=hidden % block_k == 0, DEQUANT=8, FP32_DOT=False, GATE_MERGE=cfg["merge"], X_PLANES=True,
                PLANE_K2=128, **options)
        return run, inter

    def gluon_run(spec):
        fields = [int(v) for v in spec.split(":")]
        block_n, stages, warps, overlap, scale_words, one, maxnreg = fields + [1, 0, 0, 0][len(fields) - 3:]
        planes = planes_of(x, 128)
        inter = torch.full((e * bt, inner), float("nan"), device="cuda", dtype=torch.bfloat16)
        return (lambda: launch_gluon_fc1(planes, fc1.data, scales, scale_tiles, inter, sorted_pairs, block_expert,
                                         num_blocks, e, n_out=inner, gated=gated, activation=act, topk=topk,
                                         block_n=block_n, block_t=bt, stages=stages, num_warps=warps,
                                         plane_k2=128, overlap=bool(overlap),
                                         scale_words=bool(scale_words), one_factor=bool(one),
                                         maxnreg=maxnreg or None)), inter

    default = {16: "s16k4_sx4p_m3", 32: "m32l4_sx4p_m", 64: "l64_sx4p_mu"}[bt] if gated else \
        {32: "m32k_sx4p_f4", 64: "l64k2_sx4p_f4"}[bt]  # the 16-token squared-ReLU tile has no planes
    depth = TILES[default].fc1_block_k
    runs = [("triton_default", triton_fc1(default, depth)),
            ("triton_k128_split", triton_fc1(default, 128, block_n=64, merge=False, maxnreg=None))]
    runs += [(f"gluon_{spec}", gluon_run(spec)) for spec in args.gluon.split(",")]
    runs += [("triton_default_again", triton_fc1(default, depth))]
    keep = planes_of(valid[:, None].expand(-1, inner).contiguous(), 128)

    def check(name, inter, outs):
        result[name + "_err"] = relative_error(torch.where(keep, inter.double(), 0.0), ref)
        if name.startswith("gluon"):
            result[name + "_equals_triton_k128_split"] = bool(torch.equal(inter[keep], outs["triton_k128_split"][keep]))

    time_variants(runs, check, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
