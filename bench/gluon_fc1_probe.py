"""Probe (session 18, compile-only there; not run on a GPU yet): FC1 of the "sx4" plane tiles in Gluon.

The same scheme as the package's Gluon FC2 (``megatron_mxfp8_moe/kernels/_gluon_fc2_kernel.py``): the byte-plane
wgmmas of a 128-deep K step are issued asynchronously and waited for only after the next step's dequant. FC1 differs
in its token operand, which is gathered: sorted position -> pair -> token row of x (plane-major per 128-deep step),
so Hopper's TMA (no gather) cannot fetch it. Each thread issues cp.async copies of its 16-byte pieces into the stage,
and ``async_copy.mbarrier_arrive`` makes the stage's mbarrier (which also counts the weight TMA bytes) complete only
when every thread's copies have landed. Gated layers take two accumulators, gate rows and up rows (``BLOCK_N`` each,
``N_OUT`` apart), not the Triton tiles' merged 8 + 8 rows. The activation and the plane-major write of inter for
FC2 follow ``_fc1_kernel``.

The harness builds one FC1 problem shaped like a 256-token decode step (every expert with ``--pairs`` pairs in one
32-token block), checks the Gluon FC1 against a float64 reference and bit for bit against the Triton FC1 with the
same 128-deep steps and two gate / up tiles, and times both (and the Triton default tile) as CUDA-graph medians
(``bench.common.time_variants``):

    python3 bench/gluon_fc1_probe.py --hidden 2048 --inter 768 --activation swiglu
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import time_variants  # noqa: E402
from megatron_mxfp8_moe.kernels._gluon_fc2_kernel import _step_scales, _sx4_planes  # noqa: E402

ACT_SWIGLU = gl.constexpr(0)  # the codes of _triton_moe_kernel
ACT_SQUARED_RELU = gl.constexpr(2)


@gluon.jit
def _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, k, w_row, N_OUT, GATED: gl.constexpr,
           STAGES: gl.constexpr, BLOCK_K: gl.constexpr):
    Q: gl.constexpr = BLOCK_K // 4
    st = k % STAGES
    bar = bars.index(st)
    if GATED:
        mbarrier.expect(bar, 2 * w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * Q], bar, wg_smem.index(st))
        tma.async_copy_global_to_shared(w_desc, [w_row + N_OUT, k * Q], bar, wu_smem.index(st))
    else:
        mbarrier.expect(bar, w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * Q], bar, wg_smem.index(st))
    for p in gl.static_range(4):
        async_copy.async_copy_global_to_shared(x_smem.index(st * 4 + p), x_rows + (k * BLOCK_K + p * Q),
                                               mask=token_mask)
    async_copy.mbarrier_arrive(bar)  # the phase completes once this thread's copies have landed too


@gluon.jit
def _fc1_gluon_kernel(w_desc, x_ptr, s_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N_OUT,
                      N1, K, stride_x, stride_se, scale_tiles, stride_inter, TOPK: gl.constexpr,
                      GATED: gl.constexpr, ACTIVATION: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                      BLOCK_K: gl.constexpr, STAGES: gl.constexpr, PLANE_K2: gl.constexpr,
                      X_LAYOUT: gl.constexpr, num_warps: gl.constexpr):
    Q: gl.constexpr = BLOCK_K // 4
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        expert = gl.load(block_expert_ptr + pid_b)
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BLOCK_T, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        # cp.async pieces: 16 bytes (8 bf16) per thread per row piece
        copy_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[32 // (Q // 8), Q // 8],
                                                     warps_per_cta=[num_warps, 1], order=[1, 0])
        wg_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, Q], w_desc.layout)
        if GATED:
            wu_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, Q], w_desc.layout)
        else:
            wu_smem = wg_smem
        x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, BLOCK_T, Q], X_LAYOUT)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        n_first = pid_n * BLOCK_N
        w_row = expert * N1 + n_first
        positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, copy_layout))
        pairs = gl.load(sorted_pairs_ptr + positions)
        tokens = gl.where(pairs >= 0, pairs // TOPK, 0).to(gl.int64)
        x_rows = x_ptr + tokens[:, None] * stride_x + gl.arange(0, Q, layout=gl.SliceLayout(0, copy_layout))[None, :]
        token_mask = pairs[:, None] >= 0
        steps = K // BLOCK_K
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, i, w_row, N_OUT, GATED, STAGES,
                       BLOCK_K)
        rows = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_layout))
        cols = gl.arange(0, Q, layout=gl.SliceLayout(0, a_layout))
        s_base = s_ptr + expert.to(gl.int64) * stride_se
        sg_next = _step_scales(s_base, rows, cols, 0, scale_tiles, Q)
        su_next = sg_next
        if GATED:
            su_next = _step_scales(s_base, rows + N_OUT, cols, 0, scale_tiles, Q)
        acc_g = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        acc_u = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        zero = gl.zeros([BLOCK_N, Q], gl.bfloat16, a_layout)
        g0, g1, g2, g3, u0, u1, u2, u3 = zero, zero, zero, zero, zero, zero, zero, zero  # previous step's planes
        for k in range(steps):
            st = k % STAGES
            mbarrier.wait(bars.index(st), (k // STAGES) & 1)
            fence_async_shared()  # the cp.async (generic proxy) token planes, read by wgmma (async proxy)
            sg = sg_next
            su = su_next
            nxt = gl.minimum(k + 1, steps - 1)
            sg_next = _step_scales(s_base, rows, cols, nxt, scale_tiles, Q)
            if GATED:
                su_next = _step_scales(s_base, rows + N_OUT, cols, nxt, scale_tiles, Q)
            p0, p1, p2, p3 = _sx4_planes(wg_smem.index(st).load(a_layout), sg)
            acc_g = warpgroup_mma(p0, x_smem.index(st * 4 + 0).permute((1, 0)), acc_g, is_async=True)
            acc_g = warpgroup_mma(p1, x_smem.index(st * 4 + 1).permute((1, 0)), acc_g, is_async=True)
            acc_g = warpgroup_mma(p2, x_smem.index(st * 4 + 2).permute((1, 0)), acc_g, is_async=True)
            acc_g = warpgroup_mma(p3, x_smem.index(st * 4 + 3).permute((1, 0)), acc_g, is_async=True)
            if GATED:
                r0, r1, r2, r3 = _sx4_planes(wu_smem.index(st).load(a_layout), su)
                acc_u = warpgroup_mma(r0, x_smem.index(st * 4 + 0).permute((1, 0)), acc_u, is_async=True)
                acc_u = warpgroup_mma(r1, x_smem.index(st * 4 + 1).permute((1, 0)), acc_u, is_async=True)
                acc_u = warpgroup_mma(r2, x_smem.index(st * 4 + 2).permute((1, 0)), acc_u, is_async=True)
                acc_u = warpgroup_mma(r3, x_smem.index(st * 4 + 3).permute((1, 0)), acc_u, is_async=True)
                acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3 = warpgroup_mma_wait(
                    num_outstanding=8, deps=(acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3))
                u0, u1, u2, u3 = r0, r1, r2, r3
            else:
                acc_g, g0, g1, g2, g3 = warpgroup_mma_wait(num_outstanding=4, deps=(acc_g, g0, g1, g2, g3))
            g0, g1, g2, g3 = p0, p1, p2, p3
            if k + STAGES - 1 < steps:
                _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, k + STAGES - 1, w_row, N_OUT,
                       GATED, STAGES, BLOCK_K)
        acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3 = warpgroup_mma_wait(
            num_outstanding=0, deps=(acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3))
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))
        if ACTIVATION == ACT_SWIGLU:
            h = acc_g * (1 / (1 + gl.exp(-acc_g))) * acc_u
        else:
            r = gl.maximum(acc_g, 0.0)
            h = r * r
        out_pos = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
        out_pairs = gl.load(sorted_pairs_ptr + out_pos)
        offs_n = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        rem = offs_n % PLANE_K2
        plane_cols = offs_n - rem + (rem % 4) * (PLANE_K2 // 4) + rem // 4
        ptrs = inter_ptr + out_pos.to(gl.int64)[None, :] * stride_inter + plane_cols[:, None]
        gl.store(ptrs, h.to(gl.bfloat16), mask=(out_pairs >= 0)[None, :] & (offs_n < N_OUT)[:, None])


def gluon_fc1(x_planes, w, scales, scale_tiles, inter, sorted_pairs, block_expert, num_blocks, *, n_out, gated,
              activation, topk, block_n=64, block_t=32, stages=3, num_warps=4):
    """Launch ``_fc1_gluon_kernel``: ``x_planes`` [T, H] bf16 plane-major per 128, ``w`` [E, N1, H] fp8, ``scales``
    [E, Mp * Cp] uint8 with ``scale_tiles`` = Cp // 4 (``_scale_args``), ``inter`` [positions, I] bf16 out
    (plane-major per 128)."""
    experts, n1, k = w.shape
    q = 32
    words = w.view(torch.uint8).view(experts * n1, k).view(torch.int32)
    w_desc = TensorDescriptor.from_tensor(words, [block_n, q], gl.NVMMASharedLayout.get_default_for([block_n, q],
                                                                                                    gl.int32))
    x_layout = gl.NVMMASharedLayout.get_default_for([block_t, q], gl.bfloat16)
    _fc1_gluon_kernel[(triton.cdiv(n_out, block_n), block_expert.numel())](
        w_desc, x_planes, scales, inter, sorted_pairs, block_expert, num_blocks, n_out, n1, k, x_planes.stride(0),
        scales.stride(0), scale_tiles, inter.stride(0), TOPK=topk, GATED=gated, ACTIVATION=activation,
        BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=128, STAGES=stages, PLANE_K2=128, X_LAYOUT=x_layout,
        num_warps=num_warps)


def main() -> None:
    from megatron_mxfp8_moe.kernels import _triton_moe_kernel as kernels
    from megatron_mxfp8_moe.kernels.triton_moe import TILES, _scale_args, planes_of
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import relative_error

    parser = argparse.ArgumentParser()
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--inter", type=int, default=768)
    parser.add_argument("--activation", choices=["swiglu", "squared_relu"], default="swiglu")
    parser.add_argument("--pairs", type=int, default=16, help="pairs per expert (one 32-token block each)")
    parser.add_argument("--gluon", default="64:3:4", help="comma-separated block_n:stages:warps of the Gluon runs")
    args = parser.parse_args()
    torch.manual_seed(0)
    e, topk, hidden, inner, bt = args.experts, args.topk, args.hidden, args.inter, 32
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
    result = {"experts": e, "hidden": hidden, "inter": inner, "activation": args.activation, "pairs": args.pairs}

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
        block_n, stages, warps = (int(v) for v in spec.split(":"))
        planes = planes_of(x, 128)
        inter = torch.full((e * bt, inner), float("nan"), device="cuda", dtype=torch.bfloat16)
        return (lambda: gluon_fc1(planes, fc1.data, scales, scale_tiles, inter, sorted_pairs, block_expert, num_blocks,
                                  n_out=inner, gated=gated, activation=act, topk=topk, block_n=block_n,
                                  stages=stages, num_warps=warps)), inter

    default = "m32l4_sx4p_m" if gated else "m32k_sx4p_f4"
    runs = [("triton_default", triton_fc1(default, 256)),
            ("triton_k128_split", triton_fc1(default, 128, block_n=64, merge=False, maxnreg=None))]
    runs += [(f"gluon_{spec}", gluon_run(spec)) for spec in args.gluon.split(",")]
    runs += [("triton_default_again", triton_fc1(default, 256))]
    keep = planes_of(valid[:, None].expand(-1, inner).contiguous(), 128)

    def check(name, inter, outs):
        result[name + "_err"] = relative_error(torch.where(keep, inter.double(), 0.0), ref)
        if name.startswith("gluon"):
            result[name + "_equals_triton_k128_split"] = bool(torch.equal(inter[keep], outs["triton_k128_split"][keep]))

    time_variants(runs, check, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
