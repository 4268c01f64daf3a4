"""FC1 (+ activation) of the "f8x2" tiles in Gluon (session 31; ungated run on the H200 in session 32, where it became
the squared-ReLU decode tiles' FC1; gated since session 32, run in session 33, where it became the SwiGLU ones').

Session 31 found the dequantizing Gluon kernels bound by their consumer (each warpgroup's dequant and wgmma chain),
not by their copies: their TMA rings alone stream at 95-98% of HBM read, the kernels at 81-85%. The "f8x2" tiles
have no dequant: the fp8 weights go from shared memory straight into fp8 wgmmas against the activations split in two
e4m3 terms (``hi + lo``, ``split_rows_reference``), and each 32-deep block's sum is scaled by its E8M0 weight scale
and the token's block scale. Until now only their FC2 ran in Gluon (``_gluon_f8x2_fc2_kernel``); the Triton f8x2 FC1
took 270.9 us against the dequantizing FC1's 140.1 (run 28, 256 tokens). This is that FC1 in Gluon, for the squared-ReLU
target (ungated): the block MMAs pipelined against the scale FMAs as in the Gluon f8x2 FC2 (``_step_blocks``: even
and odd blocks in two accumulator tiles; the scales a step ahead, ``_f8x2_step_scales``), the weights by TMA and the
token rows gathered by cp.async into the same stage (Hopper's TMA cannot gather; every thread's copies counted by the stage's mbarrier, as
in ``_gluon_fc1_kernel``). The activated rows are stored in bf16 by sorted position and the caller splits them for FC2
(``triton_launch._split_into``); the Triton f8x2 FC1 splits the fp32 activations instead, so the two are held to the
float64 oracle, not to each other's bits.
Hopper only (sm_90 wgmma); needs ``triton.experimental.gluon`` (compiled with Triton 3.6 and 3.8).

Since session 32 it also serves the plane tiles (``TritonMoEConfig.fc1_f8x2``): there it writes its rows plane-major
(``_plane_cols``) for their dequantizing FC2, with no split of its output. Gated (``GATED``): a program's ``BLOCK_N``
MMA rows are ``BLOCK_N / 2`` gate rows and their up rows (two TMA boxes per stage, one accumulator, the scales of both
row sets), paired through shared memory after the K loop.

Layouts: split x rows ``[T, 2 * KP]`` e4m3 (``_split_cols``: block ``b``'s hi values in columns ``[64 b, 64 b + 32)``,
its lo values in the next 32) and their fp32 scales ``[T, KP // 32]``; weights ``[E, N1, H]`` fp8 seen as ``[E * N1,
H]``; scales ``[E, Mp * Cp]`` uint8 in the cuBLAS 128x4 layout; output ``inter`` ``[positions, >= N1]`` bf16 (K order,
or plane-major per ``PLANE_K2``-deep step), or FC2's split rows (their scales row-major or transposed).
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from ._gluon_f8x2_fc2_kernel import (
    SKIP_SPLIT_ROWS,
    SKIP_STORE,
    SKIP_WEIGHTS,
    _f8x2_step_scales,
    _step_blocks,
    f8x2_mma_layout,
)
from ._gluon_fc1_kernel import _gathered_rows
from ._gluon_fc2_kernel import nvmma_descriptor, stage_barriers
from ._triton_f8x2_kernel import _split_cols, _split_scale, _split_terms
from ._triton_moe_kernel import _activate, _plane_cols, _scale_rows


@gluon.jit
def _issue(w_desc, w_smem, x_smem, bars, q_rows, token_mask, k, w_row, up_row, STAGES: gl.constexpr,
           GATED: gl.constexpr, HALF: gl.constexpr, SKIP: gl.constexpr):
    """Start step ``k``'s copies into stage ``k % STAGES``: the weights ``[BLOCK_N, 128]`` by TMA (gated: the gate
    rows from ``w_row`` into the stage's first ``HALF`` rows, the up rows from ``up_row`` into the rest), the gathered
    split rows of its 4 blocks (two ``[BLOCK_T, 128]`` halves) by cp.async, all counted by the stage's mbarrier (one
    arrival per thread once its copies have landed, besides the TMA's expect). ``SKIP``: ``TIMING_SKIP``."""
    st = k % STAGES
    bar = bars.index(st)
    if SKIP & SKIP_WEIGHTS:
        mbarrier.arrive(bar)  # the expect's arrival, with no bytes
    elif GATED:
        mbarrier.expect(bar, 2 * w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * 128], bar, w_smem.index(st).slice(0, HALF, dim=0))
        tma.async_copy_global_to_shared(w_desc, [up_row, k * 128], bar, w_smem.index(st).slice(HALF, HALF, dim=0))
    else:
        mbarrier.expect(bar, w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * 128], bar, w_smem.index(st))
    if not SKIP & SKIP_SPLIT_ROWS:
        async_copy.async_copy_global_to_shared(x_smem.index(2 * st), q_rows + k * 256, mask=token_mask)
        async_copy.async_copy_global_to_shared(x_smem.index(2 * st + 1), q_rows + (k * 256 + 128), mask=token_mask)
    async_copy.mbarrier_arrive(bar, increment_count=False)


@gluon.jit
def _activated_tile(w_desc, q_ptr, qs_ptr, s_ptr, sorted_pairs_ptr, block_expert_ptr, pid_n, pid_b, N1, K, stride_q,
                    stride_qs, stride_se, scale_tiles, TOPK: gl.constexpr, ACTIVATION: gl.constexpr,
                    BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, STAGES: gl.constexpr, X_LAYOUT: gl.constexpr,
                    GATED: gl.constexpr, SKIP: gl.constexpr, STEP_SCALE: gl.constexpr, num_warps: gl.constexpr):
    """Token block ``pid_b``'s activated FC1 rows of this program (``pid_n``): ``(h, rows, n_out, positions, pairs)``
    with ``h`` ``[rows, BLOCK_T]`` fp32 in the MMA layout (``BLOCK_N`` rows, gated ``BLOCK_N / 2``), ``rows`` their
    output columns, ``positions`` / ``pairs`` the block's sorted positions and their pairs (-1: padding)."""
    expert = gl.load(block_expert_ptr + pid_b)
    HALF: gl.constexpr = BLOCK_N // 2  # gated: gate rows, then as many up rows
    mma: gl.constexpr = f8x2_mma_layout(BLOCK_T, num_warps)
    # cp.async pieces: 16 bytes (16 e4m3 values) per thread, 8 threads per 128-byte half row
    copy_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[4, 8],
                                                 warps_per_cta=[num_warps, 1], order=[1, 0])
    w_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], w_desc.layout)
    x_smem = gl.allocate_shared_memory(gl.float8e4nv, [2 * STAGES, BLOCK_T, 128], X_LAYOUT)
    bars = stage_barriers(STAGES, 1 + 32 * num_warps)  # arrivals: the expect, every thread's cp.async copies
    if GATED:  # FC1 rows [gate; up], N1 = 2 I; this program's I-columns [n_first, n_first + HALF)
        n_out = N1 // 2
        n_first = pid_n * HALF
    else:
        n_out = N1
        n_first = pid_n * BLOCK_N
    w_row = expert * N1 + n_first
    up_row = w_row + n_out
    q_rows, token_mask = _gathered_rows(q_ptr, stride_q, sorted_pairs_ptr, pid_b, TOPK, BLOCK_T, 128, copy_layout)
    steps = K // 128
    for i in gl.static_range(STAGES - 1):
        if i < steps:
            _issue(w_desc, w_smem, x_smem, bars, q_rows, token_mask, i, w_row, up_row, STAGES, GATED, HALF, SKIP)
    r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    if GATED:  # accumulator rows: HALF gate rows, then their up rows (the scales' rows too)
        rows = gl.where(r < HALF, n_first + r, n_out + n_first + r - HALF)
    else:
        rows = n_first + r
    s_rows = _scale_rows(s_ptr + expert.to(gl.int64) * stride_se, rows, scale_tiles)
    positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
    pairs = gl.load(sorted_pairs_ptr + positions)
    tokens = gl.where(pairs >= 0, pairs // TOPK, 0).to(gl.int64)
    qs_rows = qs_ptr + tokens * stride_qs
    acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
    zero = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
    sw, sx0, sx1, sx2, sx3 = _f8x2_step_scales(s_rows, qs_rows, 0, 1, STEP_SCALE)
    for k in range(0, steps):
        st = k % STAGES
        mbarrier.wait(bars.index(st), (k // STAGES) & 1)
        fence_async_shared()  # the cp.async (generic proxy) token rows, read by wgmma (async proxy)
        acc, sw, sx0, sx1, sx2, sx3 = _step_blocks(w_smem, x_smem, st, k, steps, s_rows, qs_rows, 1, sw, sx0, sx1,
                                                   sx2, sx3, acc, zero, STEP_SCALE)
        # every wgmma of the warpgroup up to this step is retired: the previous step's stage is free
        if k + STAGES - 1 < steps:
            _issue(w_desc, w_smem, x_smem, bars, q_rows, token_mask, k + STAGES - 1, w_row, up_row, STAGES,
                   GATED, HALF, SKIP)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    if GATED:  # gate rows [0, HALF) and up rows [HALF, BLOCK_N) apart, through shared memory (once a program)
        pair_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_N, BLOCK_T],
                                              gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        pair_smem.store(acc)
        gate = pair_smem.slice(0, HALF, dim=0).load(mma)
        up = pair_smem.slice(HALF, HALF, dim=0).load(mma)
        h = _activate(gate, up, ACTIVATION)  # the Triton kernels' own (a @triton.jit function)
        rows = n_first + gl.arange(0, HALF, layout=gl.SliceLayout(1, mma))
    else:
        h = _activate(acc, acc, ACTIVATION)
    return h, rows, n_out, positions, pairs


@gluon.jit
def _f8x2_fc1_gluon_kernel(w_desc, q_ptr, qs_ptr, s_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr,
                           num_blocks_ptr, N1, K, stride_q, stride_qs, stride_se, scale_tiles, stride_inter,
                           TOPK: gl.constexpr, ACTIVATION: gl.constexpr, BLOCK_N: gl.constexpr,
                           BLOCK_T: gl.constexpr, STAGES: gl.constexpr, PLANE_K2: gl.constexpr,
                           X_LAYOUT: gl.constexpr, GATED: gl.constexpr, TIMING_SKIP: gl.constexpr,
                           STEP_SCALE: gl.constexpr, num_warps: gl.constexpr):
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        h, rows, n_out, positions, pairs = _activated_tile(
            w_desc, q_ptr, qs_ptr, s_ptr, sorted_pairs_ptr, block_expert_ptr, pid_n, pid_b, N1, K, stride_q,
            stride_qs, stride_se, scale_tiles, TOPK, ACTIVATION, BLOCK_N, BLOCK_T, STAGES, X_LAYOUT, GATED,
            TIMING_SKIP, STEP_SCALE, num_warps)
        if TIMING_SKIP & SKIP_STORE:  # a store that never happens (K > 0) but keeps the sums alive
            pairs = gl.where(K < 0, pairs, -1)
        ptrs = inter_ptr + positions.to(gl.int64)[None, :] * stride_inter + _plane_cols(rows, PLANE_K2)[:, None]
        gl.store(ptrs, h.to(gl.bfloat16), mask=(pairs >= 0)[None, :] & (rows < n_out)[:, None])


@gluon.jit
def _f8x2_fc1_split_gluon_kernel(w_desc, q_ptr, qs_ptr, s_ptr, q2_ptr, qs2_ptr, sorted_pairs_ptr, block_expert_ptr,
                                 num_blocks_ptr, N1, K, stride_q, stride_qs, stride_se, scale_tiles, stride_q2,
                                 stride_qs2, stride_qs2b, TOPK: gl.constexpr, ACTIVATION: gl.constexpr,
                                 BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, STAGES: gl.constexpr,
                                 X_LAYOUT: gl.constexpr, GATED: gl.constexpr, STEP_SCALE: gl.constexpr,
                                 num_warps: gl.constexpr):
    """``_f8x2_fc1_gluon_kernel`` writing FC2's split rows itself (session 32; run 36: the bits of the split launch,
    no layer gain, opt-in): the activated rows rounded to bf16 (the values the other tiles' ``inter`` holds), then per
    position and 32-column block the power-of-two scale and the hi / lo e4m3 terms of ``split_rows_reference`` into
    ``q2`` (``_split_cols``) and ``qs2``; padding positions are not written (FC2 reads each token column from its own
    row only)."""
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        h, rows, n_out, positions, pairs = _activated_tile(
            w_desc, q_ptr, qs_ptr, s_ptr, sorted_pairs_ptr, block_expert_ptr, pid_n, pid_b, N1, K, stride_q,
            stride_qs, stride_se, scale_tiles, TOPK, ACTIVATION, BLOCK_N, BLOCK_T, STAGES, X_LAYOUT, GATED, 0,
            STEP_SCALE, num_warps)
        OUT: gl.constexpr = BLOCK_N // 2 if GATED else BLOCK_N
        # each warp holds whole 32-row blocks: SPT rows of one token per thread, TPR threads per block and token
        WARPS_ROWS: gl.constexpr = OUT // 32
        TPR: gl.constexpr = 32 * (num_warps // WARPS_ROWS) // BLOCK_T
        split_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[32 // TPR, 1], threads_per_warp=[TPR, 32 // TPR],
                                                      warps_per_cta=[WARPS_ROWS, num_warps // WARPS_ROWS],
                                                      order=[0, 1])
        v = gl.reshape(gl.convert_layout(h.to(gl.bfloat16).to(gl.float32), split_layout), [OUT // 32, 32, BLOCK_T])
        scale, inv = _split_scale(gl.max(gl.abs(v), axis=1))
        hi, lo = _split_terms(v * gl.expand_dims(inv, 1))
        hi = gl.convert_layout(gl.reshape(hi, [OUT, BLOCK_T]), split_layout)
        lo = gl.convert_layout(gl.reshape(lo, [OUT, BLOCK_T]), split_layout)
        cols = gl.convert_layout(rows, gl.SliceLayout(1, split_layout))
        pos = gl.convert_layout(positions, gl.SliceLayout(0, split_layout))
        live = gl.convert_layout(pairs, gl.SliceLayout(0, split_layout)) >= 0
        ptrs = q2_ptr + pos.to(gl.int64)[None, :] * stride_q2 + _split_cols(cols)[:, None]
        mask = live[None, :] & (cols < n_out)[:, None]
        gl.store(ptrs, hi, mask=mask)
        gl.store(ptrs + 32, lo, mask=mask)
        scale_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[1, 32],
                                                      warps_per_cta=[num_warps, 1], order=[1, 0])
        blocks = pid_n * (OUT // 32) + gl.arange(0, OUT // 32, layout=gl.SliceLayout(1, scale_layout))
        pos_b = gl.convert_layout(positions, gl.SliceLayout(0, scale_layout))
        live_b = gl.convert_layout(pairs, gl.SliceLayout(0, scale_layout)) >= 0
        gl.store(qs2_ptr + pos_b.to(gl.int64)[None, :] * stride_qs2 + blocks[:, None] * stride_qs2b,
                 gl.convert_layout(scale, scale_layout), mask=live_b[None, :] & (blocks < n_out // 32)[:, None])


def launch_gluon_f8x2_fc1(q: torch.Tensor, qs: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int,
                          inter: torch.Tensor, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                          num_blocks: torch.Tensor, grid_blocks: int, *, activation: int, topk: int, block_n: int,
                          block_t: int, stages: int, num_warps: int, plane_k2: int = 0, gated: bool = False,
                          split_out: tuple = (), timing_skip: int = 0, step_scale: bool = False) -> None:
    """One ``_f8x2_fc1_gluon_kernel`` launch over ``grid_blocks`` token blocks (blocks past ``num_blocks[0]`` exit):
    ``q`` / ``qs`` the split rows of x by token (``split_rows_buffers``; ``q``'s row stride a multiple of 16), ``w``
    ``[E, N1, H]`` fp8 contiguous (ungated: N1 output columns; ``gated``: ``[gate; up]`` rows, N1 / 2 output
    columns, each program ``block_n`` gate rows and their up rows), ``scales`` ``[E, Mp * Cp]`` uint8 with
    ``scale_tiles`` = Cp // 4, ``inter`` ``[positions, >= n_out]`` bf16 (written at the routed positions, columns
    ``< n_out``; plane-major per ``plane_k2``-deep FC2 step where ``plane_k2`` > 0, ``_plane_cols``, for a plane tile's
    FC2); ``activation`` an ACT_* code. With ``split_out`` = ``(q2, qs2)`` (``split_rows_buffers`` of the positions)
    it writes FC2's split rows there instead of ``inter`` (``_f8x2_fc1_split_gluon_kernel``). The caller checks ``H %
    128 == 0`` and ``n_out % block_n == 0``. ``timing_skip`` (``SKIP_*`` flags of ``_gluon_f8x2_fc2_kernel``; probes
    only, the output is then wrong; not with ``split_out``): leave out the weight copies, the split-row gathers or the
    store, to time what each costs. ``step_scale``: ``qs`` holds one scale per token and 128-value step
    (``split_rows_buffers(..., group=128)``)."""
    experts, n1, hidden = w.shape
    flat = w.view(experts * n1, hidden)
    w_desc = nvmma_descriptor(flat, [block_n, 128])
    x_layout = gl.NVMMASharedLayout.get_default_for([block_t, 128], gl.float8e4nv)
    n_out = n1 // 2 if gated else n1
    grid = (triton.cdiv(n_out, block_n), grid_blocks)
    tile = dict(TOPK=topk, ACTIVATION=activation, BLOCK_N=2 * block_n if gated else block_n, BLOCK_T=block_t,
                STAGES=stages, X_LAYOUT=x_layout, GATED=gated, STEP_SCALE=step_scale, num_warps=num_warps)
    if split_out:
        if timing_skip:
            raise ValueError("launch_gluon_f8x2_fc1: timing_skip is not supported with split_out")
        q2, qs2 = split_out
        _f8x2_fc1_split_gluon_kernel[grid](
            w_desc, q, qs, scales, q2, qs2, sorted_pairs, block_expert, num_blocks, n1, hidden, q.stride(0),
            qs.stride(0), scales.stride(0), scale_tiles, q2.stride(0), qs2.stride(0), qs2.stride(1), **tile)
        return
    _f8x2_fc1_gluon_kernel[grid](
        w_desc, q, qs, scales, inter, sorted_pairs, block_expert, num_blocks, n1, hidden, q.stride(0), qs.stride(0),
        scales.stride(0), scale_tiles, inter.stride(0), PLANE_K2=plane_k2, TIMING_SKIP=timing_skip, **tile)
