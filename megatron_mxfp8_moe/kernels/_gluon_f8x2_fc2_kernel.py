"""FC2 of the "f8x2" tiles in Gluon, with the block MMAs pipelined against the scale FMAs (session 24; run on the H200
since session 25, run 28; since session 36 the squared-ReLU default at 1-8 pairs per expert on large H, in
``s16_f8q_s2_gf_g1_f128_st``; from H 3072 and 0.75 pairs per expert since session 37).

The Triton f8x2 FC2 (``_triton_f8x2_kernel._f8x2_fc2_kernel``) waits for every 32-deep block's wgmma before that
block's scale FMAs (Triton 3.6 puts ``wgmma.wait_group 0`` after each ``tl.dot`` whose result is used), so each block
pays the MMA latency, and the layer ran 1.4-1.7x slower than the dequantizing tiles (run 27). Here block ``b``'s two
fp8 wgmmas (its weights against its hi values into a fresh accumulator, then against its lo values) are issued
asynchronously, and only then is block ``b - 1`` retired (``warpgroup_mma_wait(num_outstanding=2)``) and added:
``acc += 2 ** (e_w - 127) * s_x * d``. Even and odd blocks use two accumulator tiles, so a tile is read only after
the wait that retires its MMAs and written only by the MMAs issued after that. The last block of each 128-deep step is
waited for down to 0: with a wgmma in flight across the loop's back edge, ptxas serialized every wgmma of the kernel
(its C7514 note; compile-only, Triton 3.6), and without it the SASS keeps ``WARPGROUP.DEPBAR.LE gsb0, 0x2`` for 3 of
the 4 blocks. Weights and split rows come by TMA into a ring of stages (one mbarrier each), refilled once a step's
blocks are retired. The scale bytes (one int32 word per row and step) and token scales are plain loads straight into
the accumulator's slice layouts, a step ahead of their use (session 31).
Same block sums added in the same order as the Triton f8x2 FC2 (with ``STEP_SCALE``, session 35, prepared: one token
scale per 128-deep step, applied once to the step's sum; other bits; opt-in, run 39 found it no faster).
Hopper only (sm_90 wgmma); needs ``triton.experimental.gluon`` (compiled with Triton 3.6).

Layouts: weights ``[E, H, I]`` fp8 seen as ``[E * H, I]``; split rows ``[positions, 2 * KP]`` e4m3 (``_split_cols``:
block ``b``'s hi values in columns ``[64 b, 64 b + 32)``, its lo values in the next 32) and their fp32 scales
``[positions, KP // 32]`` (row-major, or a transposed view, ``split_rows_buffers``); scales ``[E, Mp * Cp]`` uint8 in
the cuBLAS 128x4 layout; output: each pair's unweighted bf16 row of ``slots`` ``[pairs, H]``.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._gluon_fc2_kernel import nvmma_descriptor, stage_barriers
from ._triton_moe_kernel import _e8m0_f32, _scale_rows

# ``TIMING_SKIP`` flags of the f8x2 Gluon FC2 / FC1 (session 34, for timing probes only; 0 in the layer): leave out
# the weight TMA copies, the split-row copies or the bf16 store, or (FC2) read every token column's block scales from
# the block's first position (one row, so L1 hits). The results are then wrong.
SKIP_WEIGHTS = gl.constexpr(1)
SKIP_SPLIT_ROWS = gl.constexpr(2)
SKIP_STORE = gl.constexpr(4)
SKIP_TOKEN_SCALE_ROWS = gl.constexpr(8)


@gluon.constexpr_function
def f8x2_mma_layout(block_t, num_warps):
    """The accumulator layout of a ``[rows, block_t]`` tile of fp8 wgmmas (k32), ``num_warps`` warps stacked by rows."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_t, 32])


@gluon.jit
def _issue(w_desc, x_desc, w_smem, x_smem, bars, k, w_row, x_row, STAGES: gl.constexpr, SKIP: gl.constexpr):
    """TMA copies of step ``k`` into stage ``k % STAGES``: the weights ``[BLOCK_N, 128]`` and the split rows of its 4
    blocks as two ``[BLOCK_T, 128]`` halves (``SKIP``: ``TIMING_SKIP``)."""
    st = k % STAGES
    nbytes: gl.constexpr = ((0 if SKIP & SKIP_WEIGHTS else w_desc.block_type.nbytes)
                            + (0 if SKIP & SKIP_SPLIT_ROWS else 2 * x_desc.block_type.nbytes))
    mbarrier.expect(bars.index(st), nbytes)
    if not SKIP & SKIP_WEIGHTS:
        tma.async_copy_global_to_shared(w_desc, [w_row, k * 128], bars.index(st), w_smem.index(st))
    if not SKIP & SKIP_SPLIT_ROWS:
        tma.async_copy_global_to_shared(x_desc, [x_row, k * 256], bars.index(st), x_smem.index(2 * st))
        tma.async_copy_global_to_shared(x_desc, [x_row, k * 256 + 128], bars.index(st), x_smem.index(2 * st + 1))


@gluon.jit
def _f8x2_step_scales(s_rows, qs_rows, k, stride_qsb, STEP_SCALE: gl.constexpr):
    """The scale operands of K step ``k``, loaded a step before their use (session 31; until then each block loaded its
    bytes after issuing its wgmmas, so every block waited for a global load): each row's 4 E8M0 bytes as one int32
    (``[BLOCK_N]``; the 128x4 layout keeps a 128-deep step's 4 blocks adjacent, the scales 4-byte aligned) and each
    token column's 4 block scales (4 x ``[BLOCK_T]`` fp32; ``stride_qsb`` between a row's blocks: 1 row-major, the
    rows' count where the scales are transposed, ``split_rows_buffers``). ``STEP_SCALE`` (session 35, prepared): the
    split rows hold one scale per 128-value step (``split_rows_buffers(..., group=128)``), loaded once, 4 times the
    same value."""
    sw = gl.load((s_rows + k * 512).to(gl.pointer_type(gl.int32), bitcast=True))
    if STEP_SCALE:
        sx = gl.load(qs_rows + k * stride_qsb)
        return sw, sx, sx, sx, sx
    qs_step = qs_rows + 4 * k * stride_qsb
    return (sw, gl.load(qs_step), gl.load(qs_step + stride_qsb), gl.load(qs_step + 2 * stride_qsb),
            gl.load(qs_step + 3 * stride_qsb))


@gluon.jit
def _block_factor(sw, sx, b: gl.constexpr, STEP_SCALE: gl.constexpr):
    """``2 ** (e_w - 127) * s_x`` of block ``b`` of a step for the tile, from the rows' scale words ``sw`` and the
    block's token scales ``sx``: ``[BLOCK_N, BLOCK_T]`` fp32; with ``STEP_SCALE`` only ``2 ** (e_w - 127)``,
    ``[BLOCK_N, 1]`` (the step's token scale is applied once to the step's sum, ``_step_blocks``)."""
    factor = _e8m0_f32((sw >> (8 * b)) & 0xFF)[:, None]
    if not STEP_SCALE:
        factor = factor * sx[None, :]
    return factor


@gluon.jit
def _issue_block(w_smem, x_smem, st, b: gl.constexpr, d):
    """Block ``b`` of stage ``st``: its weights against its hi values into a fresh ``d``, then against its lo values
    (both asynchronous)."""
    w = w_smem.index(st).slice(32 * b, 32, dim=1)
    x = x_smem.index(2 * st + b // 2)
    hi = x.slice((b % 2) * 64, 32, dim=1).permute((1, 0))
    lo = x.slice((b % 2) * 64 + 32, 32, dim=1).permute((1, 0))
    d = warpgroup_mma(w, hi, d, use_acc=False, is_async=True)
    return warpgroup_mma(w, lo, d, is_async=True)


@gluon.jit
def _step_blocks(w_smem, x_smem, st, k, steps, s_rows, qs_rows, stride_qsb, sw, sx0, sx1, sx2, sx3, acc, zero,
                 STEP_SCALE: gl.constexpr):
    """The 4 blocks of K step ``k`` (stage ``st``; its scale operands ``sw`` / ``sx*``, ``_f8x2_step_scales``) added
    into ``acc``, after starting the loads of step ``k + 1``'s scale operands, which it returns with ``acc``. Even
    blocks in ``d0``, odd ones in ``d1``; each wait retires the block before the one just issued, whose sum is then
    scaled and added while the newer block's wgmmas run. The last block is waited for down to 0: with a wgmma in
    flight across the loop's back edge ptxas serializes every wgmma of the kernel (session 24), and past this wait
    the stage is free. ``STEP_SCALE``: the blocks' sums times their weight factors summed from ``zero``, the step's
    token scale applied once to that sum (per accumulator element 5 operations a step instead of 8)."""
    nw, nx0, nx1, nx2, nx3 = _f8x2_step_scales(s_rows, qs_rows, gl.minimum(k + 1, steps - 1), stride_qsb,
                                               STEP_SCALE)
    if STEP_SCALE:
        part = zero
    else:
        part = acc
    d0 = _issue_block(w_smem, x_smem, st, 0, zero)
    f0 = _block_factor(sw, sx0, 0, STEP_SCALE)
    d1 = _issue_block(w_smem, x_smem, st, 1, zero)
    d0 = warpgroup_mma_wait(num_outstanding=2, deps=(d0,))
    part = part + d0 * f0
    f1 = _block_factor(sw, sx1, 1, STEP_SCALE)
    d0 = _issue_block(w_smem, x_smem, st, 2, d0)
    d1 = warpgroup_mma_wait(num_outstanding=2, deps=(d1,))
    part = part + d1 * f1
    f2 = _block_factor(sw, sx2, 2, STEP_SCALE)
    d1 = _issue_block(w_smem, x_smem, st, 3, d1)
    d0 = warpgroup_mma_wait(num_outstanding=2, deps=(d0,))
    part = part + d0 * f2
    f3 = _block_factor(sw, sx3, 3, STEP_SCALE)
    d1 = warpgroup_mma_wait(num_outstanding=0, deps=(d1,))
    part = part + d1 * f3
    if STEP_SCALE:
        return acc + part * sx0[None, :], nw, nx0, nx1, nx2, nx3
    return part, nw, nx0, nx1, nx2, nx3


@gluon.jit
def _f8x2_fc2_gluon_kernel(w_desc, x_desc, qs_ptr, s_ptr, slot_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr,
                           N, K, stride_qs, stride_qsb, stride_se, scale_tiles, stride_slot, BLOCK_N: gl.constexpr,
                           BLOCK_T: gl.constexpr, STAGES: gl.constexpr, TIMING_SKIP: gl.constexpr,
                           STEP_SCALE: gl.constexpr, num_warps: gl.constexpr):
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        expert = gl.load(block_expert_ptr + pid_b)
        mma: gl.constexpr = f8x2_mma_layout(BLOCK_T, num_warps)
        w_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_N, 128], w_desc.layout)
        x_smem = gl.allocate_shared_memory(gl.float8e4nv, [2 * STAGES, BLOCK_T, 128], x_desc.layout)
        bars = stage_barriers(STAGES, 1)
        n_first = pid_n * BLOCK_N
        w_row = expert * N + n_first
        x_row = pid_b * BLOCK_T
        steps = K // 128
        for i in gl.static_range(STAGES):
            if i < steps:
                _issue(w_desc, x_desc, w_smem, x_smem, bars, i, w_row, x_row, STAGES, TIMING_SKIP)
        rows = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        s_rows = _scale_rows(s_ptr + expert.to(gl.int64) * stride_se, rows, scale_tiles)
        positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
        pairs = gl.load(sorted_pairs_ptr + positions)
        token_mask = pairs >= 0
        if TIMING_SKIP & SKIP_TOKEN_SCALE_ROWS:
            qs_rows = qs_ptr + (pid_b * BLOCK_T + 0 * positions).to(gl.int64) * stride_qs
        else:
            qs_rows = qs_ptr + positions.to(gl.int64) * stride_qs
        acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        zero = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        sw, sx0, sx1, sx2, sx3 = _f8x2_step_scales(s_rows, qs_rows, 0, stride_qsb, STEP_SCALE)
        for k in range(0, steps):
            st = k % STAGES
            mbarrier.wait(bars.index(st), (k // STAGES) & 1)
            acc, sw, sx0, sx1, sx2, sx3 = _step_blocks(w_smem, x_smem, st, k, steps, s_rows, qs_rows, stride_qsb, sw,
                                                       sx0, sx1, sx2, sx3, acc, zero, STEP_SCALE)  # stage free after
            if k + STAGES < steps:
                _issue(w_desc, x_desc, w_smem, x_smem, bars, k + STAGES, w_row, x_row, STAGES, TIMING_SKIP)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))
        if TIMING_SKIP & SKIP_STORE:  # a store that never happens (K > 0) but keeps the sums alive
            token_mask = token_mask & (K < 0)
        ptrs = slot_ptr + gl.where(token_mask, pairs, 0).to(gl.int64)[None, :] * stride_slot + rows[:, None]
        gl.store(ptrs, acc.to(gl.bfloat16), mask=token_mask[None, :] & (rows < N)[:, None])


def launch_gluon_f8x2_fc2(q: torch.Tensor, qs: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int,
                          slots: torch.Tensor, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                          num_blocks: torch.Tensor, grid_blocks: int, *, block_n: int, block_t: int, stages: int,
                          num_warps: int, timing_skip: int = 0, step_scale: bool = False) -> None:
    """One ``_f8x2_fc2_gluon_kernel`` launch over ``grid_blocks`` token blocks (blocks past ``num_blocks[0]`` exit):
    ``q`` / ``qs`` the split rows of FC2's input by position (``split_rows_buffers``), ``w`` ``[E, H, I]`` fp8
    contiguous, ``scales`` ``[E, Mp * Cp]`` uint8 with ``scale_tiles`` = Cp // 4, ``slots`` ``[pairs, H]`` bf16. The
    caller checks ``I % 128 == 0`` and ``H % block_n == 0``. Padding positions are read as whatever their rows hold:
    each token column of the tile depends on its own row only, and those columns are never stored. ``timing_skip``
    (``SKIP_*`` flags; probes only, the output is then wrong): leave out the weight copies, the split-row copies or
    the store, or read the token scales from one row per block, to time what each costs. ``step_scale``: ``qs`` holds
    one scale per 128-value step (``split_rows_buffers(..., group=128)``)."""
    experts, hidden, inner = w.shape
    flat = w.view(experts * hidden, inner)
    w_desc = nvmma_descriptor(flat, [block_n, 128])
    x_desc = nvmma_descriptor(q, [block_t, 128])
    _f8x2_fc2_gluon_kernel[(triton.cdiv(hidden, block_n), grid_blocks)](
        w_desc, x_desc, qs, scales, slots, sorted_pairs, block_expert, num_blocks, hidden, inner, qs.stride(0),
        qs.stride(1), scales.stride(0), scale_tiles, slots.stride(0), BLOCK_N=block_n, BLOCK_T=block_t,
        STAGES=stages, TIMING_SKIP=timing_skip, STEP_SCALE=step_scale, num_warps=num_warps)
