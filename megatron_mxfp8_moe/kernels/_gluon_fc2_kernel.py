"""FC2 of the "sx4" plane tiles in Gluon (Triton's explicit-layout dialect), with asynchronous wgmma (session 18).

The Triton FC2 (``_triton_moe_kernel._fc2_kernel``) dequantizes a K step and then runs its MMAs; Triton makes each
``tl.dot`` whose result feeds the next step wait for it, so the dequant of step k + 1 never overlaps the MMAs of
step k. This kernel issues the 4 byte-plane MMAs of a step with ``is_async=True`` and waits for them only after the
next step's dequant (``warpgroup_mma_wait(num_outstanding=4)``); the weight words and the token planes come by TMA
into a ring of shared-memory stages (one mbarrier each), the E8M0 bytes by plain loads one step ahead, straight into
the planes' register layout. The dequantized planes are the wgmmas' A operands, read from registers while the MMAs
run, so even and odd steps use two register sets (``_planes_step``): a set is rewritten only after the wait that
retires its MMAs. Session 20's kernel kept one set, so its next dequant overwrote registers that in-flight wgmmas
still read: the likely cause of run 24's NaN outputs at 64-token blocks (3-5% of calls). The CPU compile test checks
the SASS for such writes; on an H200 the two-set form passed 300 fresh calls in each of 9 race-probe cases (run 25).
Same values and the same MMA order per output element as ``_fc2_kernel`` with 128-deep K steps, hence the same bits
(GPU tests, run 25). Session 26: ``CHAINS`` = 2 sums each step's planes 0-1 and 2-3 on two accumulators
(``mma_step``), added after the K loop: shorter dependent wgmma chains, another summation order. Session 27: the
planes come from one cross-word ``prmt`` per register and one scale factor (``_gluon_planes``); a program that met
an E8M0 byte > 134 runs its K loop again with both factors (``_k_loop``); ``PLANES_3D`` loads a stage's 4 token
planes with one TMA copy of a 3D view.
Hopper only (sm_90 wgmma); needs ``triton.experimental.gluon`` (Triton 3.6 was tested).

Layouts: weights ``[E, H, I]`` fp8 seen as int32 words ``[E * H, I // 4]`` (byte ``i`` of word ``j`` is weight
``k = 4j + i``); inter rows ``[rows, I]`` bf16 plane-major per 128-deep K step (``planes_of``); scales ``[E, Mp * Cp]``
uint8 in the cuBLAS 128x4 layout; output: each pair's unweighted bf16 row of ``slots`` ``[pairs, H]``.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._gluon_planes import mma_step, stage_barriers, step_scales, two_factor_steps, wgmma_layout

GLUON_FC2_BLOCK_K = 128  # K per step: one 128-byte TMA row of weight words, 4 planes of 32 tokens' values


@gluon.jit
def _issue(w_desc, a_desc, w_smem, x_dst, bars, k, k0, w_row, a_row, STAGES: gl.constexpr, BLOCK_K: gl.constexpr,
           PLANES_3D: gl.constexpr):
    """Start the copies of ring step ``k`` (K step ``k - k0`` of the loop that started at ring step ``k0``) into
    stage ``k % STAGES``: the weight words, and the 4 token planes (4 copies into ``x_dst`` ``[STAGES * 4, BLOCK_T,
    Q]``, or with ``PLANES_3D`` one copy of a ``[4, BLOCK_T, Q]`` box of the ``[I / Q, positions, Q]`` view into
    ``x_dst`` ``[STAGES, 4, BLOCK_T, Q]``)."""
    Q: gl.constexpr = BLOCK_K // 4
    st = k % STAGES
    kk = k - k0
    if PLANES_3D:
        mbarrier.expect(bars.index(st), w_desc.block_type.nbytes + a_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, kk * Q], bars.index(st), w_smem.index(st))
        tma.async_copy_global_to_shared(a_desc, [kk * 4, a_row, 0], bars.index(st), x_dst.index(st))
    else:
        mbarrier.expect(bars.index(st), w_desc.block_type.nbytes + 4 * a_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, kk * Q], bars.index(st), w_smem.index(st))
        for p in gl.static_range(4):
            tma.async_copy_global_to_shared(a_desc, [a_row, kk * BLOCK_K + p * Q], bars.index(st),
                                            x_dst.index(st * 4 + p))


@gluon.jit
def _planes_step(k, k0, k_end, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base, rows, cols, scale_tiles, s, smax,
                 acc, acc2, q0, q1, q2, q3, w_row, a_row, STAGES: gl.constexpr, BLOCK_K: gl.constexpr,
                 a_layout: gl.constexpr, CHAINS: gl.constexpr, ONE_FACTOR: gl.constexpr, PLANES_3D: gl.constexpr):
    """Ring step ``k`` of the loop over ``[k0, k_end)``: wait for its stage, dequantize its weight words into new
    planes, issue their 4 MMAs, then (``ONE_FACTOR``) retire the previous step's (planes ``q*``, the other register
    set) or (two factors) this step's, and refill the freed stage. Returns the accumulators, this step's planes, the
    retired planes, the next step's E8M0 bytes and the running maximum ``smax`` of the bytes seen."""
    Q: gl.constexpr = BLOCK_K // 4
    st = k % STAGES
    mbarrier.wait(bars.index(st), (k // STAGES) & 1)
    words = w_smem.index(st).load(a_layout)
    s_next = step_scales(s_base, rows, cols, gl.minimum(k + 1, k_end - 1) - k0, scale_tiles, Q)
    acc, acc2, p0, p1, p2, p3 = mma_step(words, x_smem, st, s, acc, acc2, CHAINS, ONE_FACTOR)
    smax = gl.maximum(smax, s)
    # the previous step's 4 MMAs (one factor) or all (two) are done past this wait: the stage and the planes are free
    acc, acc2, q0, q1, q2, q3 = warpgroup_mma_wait(num_outstanding=4 * ONE_FACTOR, deps=(acc, acc2, q0, q1, q2, q3))
    if k + STAGES - 1 < k_end:
        _issue(w_desc, a_desc, w_smem, x_dst, bars, k + STAGES - 1, k0, w_row, a_row, STAGES, BLOCK_K, PLANES_3D)
    return acc, acc2, p0, p1, p2, p3, q0, q1, q2, q3, s_next, smax


@gluon.jit
def _k_loop(acc, acc2, zero, k0, k_end, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base, rows, cols, scale_tiles,
            w_row, a_row, STAGES: gl.constexpr, BLOCK_K: gl.constexpr, a_layout: gl.constexpr, CHAINS: gl.constexpr,
            ONE_FACTOR: gl.constexpr, PLANES_3D: gl.constexpr):
    """The K loop over ring steps ``[k0, k_end)`` (none when equal), its first ``STAGES - 1`` already issued: the
    accumulators with every MMA retired, and the largest E8M0 byte each element's scales had (for ``ONE_FACTOR``'s
    check). ``ONE_FACTOR``: one scale factor, the previous step's MMAs in flight over this step's dequant (two register
    sets of planes); else both factors, each step's MMAs waited for (one set, fewer registers: this loop only runs
    where a byte is > 134)."""
    Q: gl.constexpr = BLOCK_K // 4
    s_next = step_scales(s_base, rows, cols, 0, scale_tiles, Q)
    smax = s_next
    # Two register sets of planes, even steps in a*, odd steps in b*: an in-flight wgmma reads its A planes from
    # registers, and a set is written again only after the wait that retires its MMAs (``_planes_step``).
    a0, a1, a2, a3, b0, b1, b2, b3 = zero, zero, zero, zero, zero, zero, zero, zero
    for k in range(k0, k_end - 1, 2):
        acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3, s_next, smax = _planes_step(
            k, k0, k_end, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base, rows, cols, scale_tiles, s_next, smax,
            acc, acc2, b0, b1, b2, b3, w_row, a_row, STAGES, BLOCK_K, a_layout, CHAINS, ONE_FACTOR, PLANES_3D)
        acc, acc2, b0, b1, b2, b3, a0, a1, a2, a3, s_next, smax = _planes_step(
            k + 1, k0, k_end, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base, rows, cols, scale_tiles, s_next,
            smax, acc, acc2, a0, a1, a2, a3, w_row, a_row, STAGES, BLOCK_K, a_layout, CHAINS, ONE_FACTOR, PLANES_3D)
    if (k_end - k0) % 2 == 1:
        acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3, s_next, smax = _planes_step(
            k_end - 1, k0, k_end, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base, rows, cols, scale_tiles, s_next,
            smax, acc, acc2, b0, b1, b2, b3, w_row, a_row, STAGES, BLOCK_K, a_layout, CHAINS, ONE_FACTOR, PLANES_3D)
    acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3 = warpgroup_mma_wait(
        num_outstanding=0, deps=(acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3))
    return acc, acc2, smax


@gluon.jit
def _fc2_gluon_kernel(w_desc, a_desc, s_ptr, slot_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N, K,
                      stride_se, scale_tiles, stride_slot, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                      BLOCK_K: gl.constexpr, STAGES: gl.constexpr, CHAINS: gl.constexpr, ONE_FACTOR: gl.constexpr,
                      PLANES_3D: gl.constexpr, num_warps: gl.constexpr):
    Q: gl.constexpr = BLOCK_K // 4
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        expert = gl.load(block_expert_ptr + pid_b)
        mma: gl.constexpr = wgmma_layout(BLOCK_T, num_warps)
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, Q], w_desc.layout)
        if PLANES_3D:  # the TMA's [STAGES, 4, BLOCK_T, Q] view and the wgmmas' [STAGES * 4, BLOCK_T, Q] one
            x_dst = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 4, BLOCK_T, Q], a_desc.layout)
            x_smem = x_dst._reinterpret(gl.bfloat16, [STAGES * 4, BLOCK_T, Q],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_T, Q], gl.bfloat16))
        else:
            x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, BLOCK_T, Q], a_desc.layout)
            x_dst = x_smem
        bars = stage_barriers(STAGES, 1)
        n_first = pid_n * BLOCK_N
        w_row = expert * N + n_first
        a_row = pid_b * BLOCK_T
        steps = K // BLOCK_K
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                _issue(w_desc, a_desc, w_smem, x_dst, bars, i, 0, w_row, a_row, STAGES, BLOCK_K, PLANES_3D)
        rows = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_layout))
        cols = gl.arange(0, Q, layout=gl.SliceLayout(0, a_layout))
        s_base = s_ptr + expert.to(gl.int64) * stride_se
        acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        acc2 = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        zero = gl.zeros([BLOCK_N, Q], gl.bfloat16, a_layout)
        acc, acc2, smax = _k_loop(acc, acc2, zero, 0, steps, w_desc, a_desc, w_smem, x_smem, x_dst, bars, s_base,
                                  rows, cols, scale_tiles, w_row, a_row, STAGES, BLOCK_K, a_layout, CHAINS,
                                  ONE_FACTOR, PLANES_3D)
        if ONE_FACTOR:
            # A byte > 134 anywhere in the program's scales makes that loop's planes wrong (one factor cannot reach
            # them): the program then runs K again with both factors, from zero (ring steps continue past ``steps``).
            # A second loop in a row, empty in the common case (under an if / else ptxas serializes the wgmmas).
            redo = two_factor_steps(smax, steps)
            acc = gl.where(redo > 0, 0.0, acc)
            acc2 = gl.where(redo > 0, 0.0, acc2)
            for i in gl.static_range(STAGES - 1):
                if i < redo:
                    _issue(w_desc, a_desc, w_smem, x_dst, bars, steps + i, steps, w_row, a_row, STAGES, BLOCK_K,
                           PLANES_3D)
            acc, acc2, smax = _k_loop(acc, acc2, zero, steps, steps + redo, w_desc, a_desc, w_smem, x_smem, x_dst,
                                      bars, s_base, rows, cols, scale_tiles, w_row, a_row, STAGES, BLOCK_K, a_layout,
                                      CHAINS, False, PLANES_3D)
        if CHAINS == 2:
            acc = acc + acc2
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))
        positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
        pairs = gl.load(sorted_pairs_ptr + positions)
        offs_n = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        ptrs = slot_ptr + gl.where(pairs >= 0, pairs, 0).to(gl.int64)[None, :] * stride_slot + offs_n[:, None]
        gl.store(ptrs, acc.to(gl.bfloat16), mask=(pairs >= 0)[None, :] & (offs_n < N)[:, None])


def launch_gluon_fc2(inter: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int, slots: torch.Tensor,
                     sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_blocks: torch.Tensor, grid_blocks: int,
                     *, block_n: int, block_t: int, stages: int, num_warps: int, chains: int = 1,
                     one_factor: bool = True, planes_3d: bool = False) -> None:
    """One ``_fc2_gluon_kernel`` launch over ``grid_blocks`` token blocks (blocks past ``num_blocks[0]`` exit):
    ``inter`` ``[positions, I]`` bf16 plane-major per 128-deep step (row stride a multiple of 8), ``w`` ``[E, H, I]``
    fp8 contiguous, ``scales`` ``[E, Mp * Cp]`` uint8 with ``scale_tiles`` = Cp // 4 (``triton_moe._scale_args``;
    4-byte aligned), ``slots`` ``[pairs, H]`` bf16 (row stride ``slots.stride(0)``). The caller checks
    ``I % 128 == 0`` and ``H % block_n == 0``. ``one_factor=False`` always multiplies by both scale factors (the
    pre-session-27 path; for tests and probes)."""
    experts, hidden, inner = w.shape
    q = GLUON_FC2_BLOCK_K // 4
    words = w.view(torch.uint8).view(experts * hidden, inner).view(torch.int32)
    w_desc = TensorDescriptor.from_tensor(words, [block_n, q],
                                          gl.NVMMASharedLayout.get_default_for([block_n, q], gl.int32))
    if planes_3d:
        view = inter.view(inter.shape[0], inter.shape[1] // q, q).permute(1, 0, 2)
        a_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), [4, block_t, q],
                                  gl.NVMMASharedLayout.get_default_for([4, block_t, q], gl.bfloat16))
    else:
        a_desc = TensorDescriptor.from_tensor(inter, [block_t, q],
                                              gl.NVMMASharedLayout.get_default_for([block_t, q], gl.bfloat16))
    _fc2_gluon_kernel[(triton.cdiv(hidden, block_n), grid_blocks)](
        w_desc, a_desc, scales, slots, sorted_pairs, block_expert, num_blocks, hidden, inner, scales.stride(0),
        scale_tiles, slots.stride(0), BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=GLUON_FC2_BLOCK_K, STAGES=stages,
        CHAINS=chains, ONE_FACTOR=one_factor, PLANES_3D=planes_3d, num_warps=num_warps)
