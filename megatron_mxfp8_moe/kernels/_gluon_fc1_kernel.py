"""FC1 (+ activation) of the "sx4" plane tiles in Gluon, with asynchronous wgmma (session 19).

The same scheme as the Gluon FC2 (``_gluon_fc2_kernel``): the 4 byte-plane wgmmas of a 128-deep K step are issued
asynchronously and waited for only after the next step's dequant, even and odd steps in two register sets of
planes (``_fc1_step``; why: ``_gluon_fc2_kernel``). FC1's token operand is gathered (sorted position
-> pair -> token row of x), which Hopper's TMA cannot do: each thread issues cp.async copies of its 16-byte pieces of
the plane-major x rows into the stage, and ``async_copy.mbarrier_arrive`` makes the stage's mbarrier (which also
counts the weight TMA bytes) complete only once every thread's copies have landed: the mbarrier expects one arrival
per thread besides the TMA's expect, so no thread can arrive late into the next phase. Gated activations take two
accumulators, gate rows and up rows (``BLOCK_N`` each, ``N_OUT`` apart). Same values and the same MMA order per output
element as ``_triton_moe_kernel._fc1_kernel`` with 128-deep K steps and separate gate / up tiles (``GATE_MERGE``
off), and the activation is the Triton kernel's own ``_activate``, hence the same bits (GPU tests). Hopper only
(sm_90 wgmma); needs ``triton.experimental.gluon`` (Triton 3.6 was tested). Session 26 tried two accumulator chains
for the ungated FC1 too; slower in session 27's layer probes (bench/NOTES), so removed.

Layouts: x ``[R, Kp]`` bf16 plane-major per 128-deep K step (``planes_of``; row stride a multiple of 8), weights
``[E, N1, H]`` fp8 seen as int32 words ``[E * N1, H // 4]`` (N1 = 2 * N_OUT gated: gate rows then up rows), scales
``[E, Mp * Cp]`` uint8 in the cuBLAS 128x4 layout; output: ``inter`` rows by sorted position, bf16, plane-major per
``PLANE_K2``-deep FC2 step (``_plane_cols``).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma_wait,
)
from triton.language.extra.cuda import gdc_launch_dependents

from ._gluon_fc2_kernel import (
    _mma_step,
    _scales_below_2_pow_1,
    _step_scales,
    _word_selectors,
    nvmma_descriptor,
    stage_barriers,
    wgmma_layout,
)
from ._triton_moe_kernel import _activate, _plane_cols

GLUON_FC1_BLOCK_K = 128  # K per step: one 128-byte TMA row of weight words, 4 planes of 32 values per token


@gluon.jit
def _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, k, w_row, N_OUT, GATED: gl.constexpr,
           STAGES: gl.constexpr, BLOCK_K: gl.constexpr):
    """Start K step ``k``'s copies into its stage: the weight words by TMA (gate and up tiles), the 4 token planes
    by cp.async, all counted by the stage's mbarrier."""
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
    # one of the phase's expected arrivals per thread, once this thread's copies have landed (no count increment:
    # with one, a thread arriving after the TMA bytes landed would be counted in the next phase, and the stage read
    # before its token planes were there, as run 23 saw at 64-token blocks)
    async_copy.mbarrier_arrive(bar, increment_count=False)


@gluon.jit
def _gathered_rows(x_ptr, stride_x, sorted_pairs_ptr, pid_b, TOPK: gl.constexpr, BLOCK_T: gl.constexpr,
                   COLS: gl.constexpr, copy_layout: gl.constexpr):
    """The cp.async sources of block ``pid_b``'s token rows: ``[BLOCK_T, COLS]`` pointers into x by token (sorted
    position -> pair -> token; padding positions read token 0) and the ``[BLOCK_T, 1]`` mask of real pairs."""
    positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, copy_layout))
    pairs = gl.load(sorted_pairs_ptr + positions)
    tokens = gl.where(pairs >= 0, pairs // TOPK, 0).to(gl.int64)
    x_rows = x_ptr + tokens[:, None] * stride_x + gl.arange(0, COLS, layout=gl.SliceLayout(0, copy_layout))[None, :]
    return x_rows, pairs[:, None] >= 0


@gluon.jit
def _fc1_step(k, steps, w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, w_row, N_OUT, s_base, rows, cols,
              scale_tiles, sg, su, acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3, sel, GATED: gl.constexpr,
              STAGES: gl.constexpr, BLOCK_K: gl.constexpr, a_layout: gl.constexpr, OVERLAP: gl.constexpr,
              SCALE_WORDS: gl.constexpr, ONE: gl.constexpr, one):
    """K step ``k``: wait for its stage, dequantize its gate (and up) weight words into new planes (``ONE`` / ``one``:
    ``_gluon_fc2_kernel._sx4_planes``), issue their MMAs, retire the previous step's (planes ``g*`` / ``u*``, the
    other register set), then refill the freed stage. Returns the accumulators, this step's planes (in flight), the
    retired planes and the next step's E8M0 bytes."""
    Q: gl.constexpr = BLOCK_K // 4
    st = k % STAGES
    mbarrier.wait(bars.index(st), (k // STAGES) & 1)
    fence_async_shared()  # the cp.async (generic proxy) token planes, read by wgmma (async proxy)
    nxt = gl.minimum(k + 1, steps - 1)
    sg_next = _step_scales(s_base, rows, cols, nxt, scale_tiles, Q, SCALE_WORDS)
    su_next = sg_next
    if GATED:
        su_next = _step_scales(s_base, rows + N_OUT, cols, nxt, scale_tiles, Q, SCALE_WORDS)
    r0, r1, r2, r3 = u0, u1, u2, u3
    if GATED:
        acc_g, p0, p1, p2, p3 = _mma_step(wg_smem.index(st).load(a_layout), x_smem, st, sg, acc_g, sel, SCALE_WORDS,
                                          ONE, one)
        acc_u, r0, r1, r2, r3 = _mma_step(wu_smem.index(st).load(a_layout), x_smem, st, su, acc_u, sel, SCALE_WORDS,
                                          ONE, one)
        # the previous step's 8 MMAs are done past this wait (without OVERLAP this step's too): its stage and its
        # register planes are free
        acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3 = warpgroup_mma_wait(
            num_outstanding=8 * OVERLAP, deps=(acc_g, acc_u, g0, g1, g2, g3, u0, u1, u2, u3))
    else:
        acc_g, p0, p1, p2, p3 = _mma_step(wg_smem.index(st).load(a_layout), x_smem, st, sg, acc_g, sel, SCALE_WORDS,
                                          ONE, one)
        acc_g, g0, g1, g2, g3 = warpgroup_mma_wait(num_outstanding=4 * OVERLAP, deps=(acc_g, g0, g1, g2, g3))
    if k + STAGES - 1 < steps:
        _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, k + STAGES - 1, w_row, N_OUT, GATED,
               STAGES, BLOCK_K)
    return acc_g, acc_u, p0, p1, p2, p3, r0, r1, r2, r3, g0, g1, g2, g3, u0, u1, u2, u3, sg_next, su_next


@gluon.jit
def _fc1_gluon_kernel(w_desc, x_ptr, s_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N_OUT,
                      N1, K, stride_x, stride_se, scale_tiles, stride_inter, TOPK: gl.constexpr,
                      GATED: gl.constexpr, ACTIVATION: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                      BLOCK_K: gl.constexpr, STAGES: gl.constexpr, PLANE_K2: gl.constexpr,
                      X_LAYOUT: gl.constexpr, OVERLAP: gl.constexpr, SCALE_WORDS: gl.constexpr,
                      ONE_FACTOR: gl.constexpr, STEPS_P2: gl.constexpr, LAUNCH_DEPENDENTS: gl.constexpr,
                      num_warps: gl.constexpr):
    Q: gl.constexpr = BLOCK_K // 4
    if LAUNCH_DEPENDENTS:  # the FC2 behind it (a programmatic dependent launch) may start its programs now
        gdc_launch_dependents()
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        expert = gl.load(block_expert_ptr + pid_b)
        mma: gl.constexpr = wgmma_layout(BLOCK_T, num_warps)
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
        bars = stage_barriers(STAGES, 1 + 32 * num_warps)  # arrivals: the expect, every thread's cp.async copies
        n_first = pid_n * BLOCK_N
        w_row = expert * N1 + n_first
        x_rows, token_mask = _gathered_rows(x_ptr, stride_x, sorted_pairs_ptr, pid_b, TOPK, BLOCK_T, Q, copy_layout)
        steps = K // BLOCK_K
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                _issue(w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, i, w_row, N_OUT, GATED, STAGES,
                       BLOCK_K)
        rows = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_layout))
        cols = gl.arange(0, Q, layout=gl.SliceLayout(0, a_layout))
        s_base = s_ptr + expert.to(gl.int64) * stride_se
        sg_next = _step_scales(s_base, rows, cols, 0, scale_tiles, Q, SCALE_WORDS)
        su_next = sg_next
        if GATED:
            su_next = _step_scales(s_base, rows + N_OUT, cols, 0, scale_tiles, Q, SCALE_WORDS)
        sel = _word_selectors(cols)
        one = False
        if ONE_FACTOR:  # one factor where the program's bytes (gate and up rows) are all below 128, else two
            one = _scales_below_2_pow_1(s_base, rows, steps, scale_tiles, STEPS_P2, num_warps)
            if GATED:
                one = one & _scales_below_2_pow_1(s_base, rows + N_OUT, steps, scale_tiles, STEPS_P2, num_warps)
        acc_g = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        acc_u = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        z = gl.zeros([BLOCK_N, Q], gl.bfloat16, a_layout)
        # Two register sets of gate / up planes, even steps in *a, odd steps in *b: an in-flight wgmma reads its A
        # planes from registers, and a set is written again only after the wait that retires its MMAs.
        ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3 = z, z, z, z, z, z, z, z
        gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3 = z, z, z, z, z, z, z, z
        for k in range(0, steps - 1, 2):
            (acc_g, acc_u, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3, sg_next,
             su_next) = _fc1_step(
                k, steps, w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, w_row, N_OUT, s_base, rows,
                cols, scale_tiles, sg_next, su_next, acc_g, acc_u, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3,
                sel, GATED, STAGES, BLOCK_K, a_layout, OVERLAP, SCALE_WORDS, ONE_FACTOR, one)
            (acc_g, acc_u, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3, sg_next,
             su_next) = _fc1_step(
                k + 1, steps, w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, w_row, N_OUT, s_base, rows,
                cols, scale_tiles, sg_next, su_next, acc_g, acc_u, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3,
                sel, GATED, STAGES, BLOCK_K, a_layout, OVERLAP, SCALE_WORDS, ONE_FACTOR, one)
        if steps % 2 == 1:
            (acc_g, acc_u, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3, sg_next,
             su_next) = _fc1_step(
                steps - 1, steps, w_desc, wg_smem, wu_smem, x_smem, bars, x_rows, token_mask, w_row, N_OUT, s_base,
                rows, cols, scale_tiles, sg_next, su_next, acc_g, acc_u, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3,
                sel, GATED, STAGES, BLOCK_K, a_layout, OVERLAP, SCALE_WORDS, ONE_FACTOR, one)
        acc_g, acc_u, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3, gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3 = \
            warpgroup_mma_wait(num_outstanding=0, deps=(acc_g, acc_u, ga0, ga1, ga2, ga3, ua0, ua1, ua2, ua3,
                                                        gb0, gb1, gb2, gb3, ub0, ub1, ub2, ub3))
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))
        h = _activate(acc_g, acc_u, ACTIVATION)  # the Triton FC1's own (a @triton.jit function): the same PTX
        out_pos = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
        out_pairs = gl.load(sorted_pairs_ptr + out_pos)
        offs_n = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        ptrs = inter_ptr + out_pos.to(gl.int64)[None, :] * stride_inter + _plane_cols(offs_n, PLANE_K2)[:, None]
        gl.store(ptrs, h.to(gl.bfloat16), mask=(out_pairs >= 0)[None, :] & (offs_n < N_OUT)[:, None])


def launch_gluon_fc1(x_planes: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int,
                     inter: torch.Tensor, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                     num_blocks: torch.Tensor, grid_blocks: int, *, n_out: int, gated: bool, activation: int,
                     topk: int, block_n: int, block_t: int, stages: int, num_warps: int, plane_k2: int,
                     overlap: bool = True, scale_words: bool = False, one_factor: bool = False,
                     maxnreg: Optional[int] = None, launch_dependents: bool = False) -> None:
    """One ``_fc1_gluon_kernel`` launch over ``grid_blocks`` token blocks (blocks past ``num_blocks[0]`` exit):
    ``x_planes`` ``[R, Kp]`` bf16 plane-major per 128 (row stride a multiple of 8), ``w`` ``[E, N1, H]`` fp8
    contiguous, ``scales`` ``[E, Mp * Cp]`` uint8 with ``scale_tiles`` = Cp // 4 (``triton_launch._scale_args``),
    ``inter`` ``[positions, >= n_out]`` bf16 written plane-major per ``plane_k2``; ``activation`` an ACT_* code.
    The caller checks ``H % 128 == 0`` and ``n_out % block_n == 0``. ``overlap=False`` waits for each step's MMAs
    before the next step's dequant, ``scale_words=True`` reads the E8M0 bytes as one int32 per row and step (both as
    in ``launch_gluon_fc2``), and so does ``one_factor=True`` (with ``scale_words``). ``maxnreg``: a register cap
    (session 29: the squared-ReLU FC1 with one factor, 128). ``launch_dependents=True``: each program lets the next
    kernel of the stream start first (``gdc_launch_dependents``; the FC2 launched with ``pdl=True``)."""
    if one_factor and not scale_words:
        raise ValueError("launch_gluon_fc1: one_factor=True needs scale_words=True")
    experts, n1, hidden = w.shape
    q = GLUON_FC1_BLOCK_K // 4
    words = w.view(torch.uint8).view(experts * n1, hidden).view(torch.int32)
    w_desc = nvmma_descriptor(words, [block_n, q])
    x_layout = gl.NVMMASharedLayout.get_default_for([block_t, q], gl.bfloat16)
    _fc1_gluon_kernel[(triton.cdiv(n_out, block_n), grid_blocks)](
        w_desc, x_planes, scales, inter, sorted_pairs, block_expert, num_blocks, n_out, n1, hidden,
        x_planes.stride(0), scales.stride(0), scale_tiles, inter.stride(0), TOPK=topk, GATED=gated,
        ACTIVATION=activation, BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=GLUON_FC1_BLOCK_K, STAGES=stages,
        PLANE_K2=plane_k2, X_LAYOUT=x_layout, OVERLAP=overlap,
        SCALE_WORDS=scale_words, ONE_FACTOR=one_factor,
        STEPS_P2=triton.next_power_of_2(hidden // GLUON_FC1_BLOCK_K) if one_factor else 1,
        LAUNCH_DEPENDENTS=launch_dependents, num_warps=num_warps,
        **({} if maxnreg is None else dict(maxnreg=maxnreg)))
