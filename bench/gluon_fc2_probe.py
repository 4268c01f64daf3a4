"""Probe (session 18): the Gluon FC2 (``megatron_mxfp8_moe/kernels/_gluon_fc2_kernel.py``: asynchronous wgmma, TMA
stages) against the Triton FC2 (``_fc2_kernel``) on one FC2 problem shaped like a 256-token decode step.

``E`` experts, one ``--block-t``-token block each with ``--pairs`` pairs (the rest padding), inter rows plane-major
per K step, weights canonical MXFP8. Prints one JSON line: the relative error of every kernel against a float64
reference, whether each Gluon run is bit-equal to the Triton FC2 at 128-deep K steps, and CUDA-graph medians
(``bench.common.time_variants``, us) of the Gluon runs and of Triton at 128- and 256-deep K steps. Session 18's
call 6 timed with ``triton.testing.do_bench_cudagraph`` (median) instead. Session 26: a fourth field ``:2`` runs the
kernel on two accumulator chains (``fc2_chains``; another summation order, so not bit-equal to the Triton FC2).

    python3 bench/gluon_fc2_probe.py --hidden 2048 --inter 1536 --gluon 64:3:4,128:3:4
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


def main() -> None:
    from megatron_mxfp8_moe.kernels import _triton_moe_kernel as kernels
    from megatron_mxfp8_moe.kernels._gluon_fc2_kernel import launch_gluon_fc2
    from megatron_mxfp8_moe.kernels.triton_launch import _scale_args
    from megatron_mxfp8_moe.kernels.triton_moe import TILES, planes_of
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import relative_error

    parser = argparse.ArgumentParser()
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--inter", type=int, default=1536)
    parser.add_argument("--block-t", type=int, default=32, help="tokens per block (16 / 32 / 64: the tiles' widths)")
    parser.add_argument("--pairs", type=int, default=16, help="pairs per block")
    parser.add_argument("--gluon", default="64:3:4",
                        help="comma-separated block_n:stages:warps[:chains[:overlap[:scale_words[:ring[:one]]]]] of "
                             "the Gluon runs (chains 2: fc2_chains; overlap 0: each step's MMAs waited for, session "
                             "27; scale_words 1: the E8M0 bytes read as one int32 per row and step; ring 1: one loop "
                             "iteration per turn of the stage ring, with overlap 0; session 28; one 1: one scale "
                             "factor where a program's bytes are all below 128, with scale_words; session 29)")
    args = parser.parse_args()
    torch.manual_seed(0)
    e, n, k, bt = args.experts, args.hidden, args.inter, args.block_t
    fc2 = quantize_mxfp8(torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.05)
    scales, stride_se, scale_tiles = _scale_args(fc2)
    h = torch.randn(e * bt, k, device="cuda", dtype=torch.bfloat16)
    lane = torch.arange(e * bt, device="cuda", dtype=torch.int32)
    sorted_pairs = torch.where(lane % bt < args.pairs, (lane // bt) * args.pairs + lane % bt, -1).to(torch.int32)
    block_expert = torch.arange(e, device="cuda", dtype=torch.int32)
    num_blocks = torch.tensor([e], device="cuda", dtype=torch.int32)
    pairs = e * args.pairs
    valid = sorted_pairs >= 0
    ref = torch.empty(pairs, n, dtype=torch.float64, device="cuda")
    w64 = fc2.dequantize().double()
    for x in range(e):
        rows = valid[x * bt:(x + 1) * bt].nonzero().squeeze(1) + x * bt
        ref[sorted_pairs[rows].long()] = h[rows].double() @ w64[x].t()
    result = {"experts": e, "hidden": n, "inter": k, "block_t": bt, "pairs_per_block": args.pairs,
              "weight_bytes": e * n * k * (1 + 1 / 32)}

    def triton_fc2(block_k):
        cfg = TILES["m32k_sx4p_f4"]
        planes = planes_of(h, block_k)
        slots = torch.full((pairs, n), float("nan"), device="cuda", dtype=torch.bfloat16)

        def run():
            kernels._fc2_kernel[(triton.cdiv(n, cfg.fc2_block_n), e, 1)](
                planes, fc2.data, scales, slots, sorted_pairs, block_expert, num_blocks, n, k, planes.stride(0),
                fc2.data.stride(0), fc2.data.stride(1), stride_se, scale_tiles, slots.stride(0), 0,
                BLOCK_N=cfg.fc2_block_n, BLOCK_T=bt, BLOCK_K=block_k, EVEN_K=k % block_k == 0, DEQUANT=8,
                FP32_DOT=False, SPLIT_K=1, X_PLANES=True, num_warps=cfg.fc2_warps, num_stages=cfg.fc2_stages,
                maxnreg=cfg.fc2_maxnreg)
        return run, slots

    def gluon_run(spec):
        fields = [int(v) for v in spec.split(":")]
        block_n, stages, warps, chains, overlap, scale_words, ring, one = fields + [1, 1, 0, 0, 0][len(fields) - 3:]
        planes = planes_of(h, 128)
        slots = torch.full((pairs, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        return (lambda: launch_gluon_fc2(planes, fc2.data, scales, scale_tiles, slots, sorted_pairs, block_expert,
                                         num_blocks, e, block_n=block_n, block_t=bt, stages=stages,
                                         num_warps=warps, chains=chains, overlap=bool(overlap),
                                         scale_words=bool(scale_words), ring=bool(ring),
                                         one_factor=bool(one))), slots

    runs = [("triton_k256", triton_fc2(256)), ("triton_k128", triton_fc2(128))]
    runs += [(f"gluon_k128_{spec}", gluon_run(spec)) for spec in args.gluon.split(",") if spec]
    runs += [("triton_k256_again", triton_fc2(256))]

    def check(name, slots, outs):
        result[name + "_err"] = relative_error(slots.double(), ref)
        if name.startswith("gluon"):
            result[name + "_equals_triton_k128"] = bool(torch.equal(slots, outs["triton_k128"]))

    time_variants(runs, check, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
