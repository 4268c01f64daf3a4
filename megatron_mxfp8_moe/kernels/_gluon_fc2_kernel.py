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
(``_mma_step_chains``), added after the K loop: shorter dependent wgmma chains, another summation order. Session 27:
the planes come from one cross-word ``prmt`` per register (``_fp8x4_pair_planes``): the same values, fewer
instructions.
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
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.language.extra.cuda import gdc_wait

from ._triton_moe_kernel import _scale_rows, _sx_factors

GLUON_FC2_BLOCK_K = 128  # K per step: one 128-byte TMA row of weight words, 4 planes of 32 tokens' values


@gluon.constexpr_function
def wgmma_layout(block_t, num_warps):
    """The accumulator layout of a ``[rows, block_t]`` tile of Hopper wgmmas, ``num_warps`` warps stacked by rows."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_t, 16])


_GL_DTYPES = {torch.int32: gl.int32, torch.bfloat16: gl.bfloat16, torch.float8_e4m3fn: gl.float8e4nv}


def nvmma_descriptor(tensor: torch.Tensor, block: list) -> TensorDescriptor:
    """A TMA descriptor over the 2-D ``tensor`` copying ``block`` boxes into the default NVMMA shared layout of its
    dtype (int32 words, bf16 or fp8 e4m3): the layout the wgmmas read."""
    return TensorDescriptor.from_tensor(tensor, block,
                                        gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[tensor.dtype]))


@gluon.jit
def stage_barriers(STAGES: gl.constexpr, count: gl.constexpr):
    """One mbarrier per stage of a copy ring, each expecting ``count`` arrivals per phase, initialised and made
    visible to the async proxy (TMA's complete_tx) before any use."""
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=count)
    fence_async_shared()
    return bars


@gluon.jit
def _fp8x4_pair_planes(words):
    """int32 words of 4 e4m3 bytes in the wgmma A-operand layout -> the 4 bf16 plane tiles ``e4m3 * 2 ** -120`` (byte
    i in the i-th; the values of ``_fp8x4_sx_to_bf16``). One asm instance takes a register pair, words j and j + 1 of
    a row (``k_width`` 2), and plane i's bf16x2 register is byte i of both: one sign-extending cross-word ``prmt``,
    a shift by 4 and a mask (e4m3's exponent and mantissa into bf16's low exponent and high mantissa bits, the sign
    kept). Session 27: 3 instructions per plane register where the per-word form and its repacking took 4. Triton
    leaves unspecified which elements one asm instance gets; on this layout they are the register pair (Triton 3.6 on
    an H200: outputs bit-equal to the per-word form's in every configuration probed)."""
    return gl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 a, b, c, d;
        prmt.b32 a, $4, $5, 0xC480;
        prmt.b32 b, $4, $5, 0xD591;
        prmt.b32 c, $4, $5, 0xE6A2;
        prmt.b32 d, $4, $5, 0xF7B3;
        shl.b32 a, a, 4;
        shl.b32 b, b, 4;
        shl.b32 c, c, 4;
        shl.b32 d, d, 4;
        and.b32 $0, a, 0x87F087F0;
        and.b32 $1, b, 0x87F087F0;
        and.b32 $2, c, 0x87F087F0;
        and.b32 $3, d, 0x87F087F0;
        }
        """,
        constraints="=r,=r,=r,=r,r,r",
        args=[words],
        dtype=(gl.bfloat16, gl.bfloat16, gl.bfloat16, gl.bfloat16),
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _e8m0_word_factors(s, sel):
    """``_sx_factors`` from scale words (session 28, ``SCALE_WORDS``): ``s`` int32, a row's 4 E8M0 bytes of one K
    step (byte b: K block b, the 128x4 layout keeps them adjacent), broadcast along the row; ``sel`` int32 per column,
    ``0x4040 + 0x0101 * (column // 8)``. Per register pair (one K block: ``_fp8x4_pair_planes``' pairing) one ``prmt``
    puts the block's byte in both 16-bit halves, then a 16x2 min / max with 134 and one multiply-add each give the
    bf16x2 factors ``(min(s, 134) + 120) << 7`` and ``(max(s, 134) - 7) << 7``: 5 instructions per pair, as ptxas
    makes of the per-byte path. The saving is in the loads: per thread and K step 2 int32 loads instead of 8 byte
    loads with their 64-bit address arithmetic."""
    return gl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t, l, h, c;
        mov.b32 c, 0x00860086;
        prmt.b32 t, $2, 0, $4;
        min.u16x2 l, t, c;
        max.u16x2 h, t, c;
        mad.lo.u32 $0, l, 128, 0x3C003C00;
        mad.lo.u32 $1, h, 128, 0xFC7FFC80;
        }
        """,
        constraints="=r,=r,r,r,r,r",
        args=[s, sel],
        dtype=(gl.bfloat16, gl.bfloat16),
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _e8m0_word_factor(s, sel):
    """``_e8m0_word_factors``' first factor alone, ``(s + 120) << 7`` (one ``prmt`` and one multiply-add per register
    pair): the whole scale where the block's E8M0 byte is <= 134 (the second factor is then exactly 1). Session 29
    (``ONE_FACTOR``): used where a program's bytes are all below 128 (``_scales_below_2_pow_1``)."""
    return gl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t;
        prmt.b32 t, $1, 0, $3;
        mad.lo.u32 $0, t, 128, 0x3C003C00;
        }
        """,
        constraints="=r,r,r,r,r",
        args=[s, sel],
        dtype=gl.bfloat16,
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _scales_below_2_pow_1(s_base, rows, steps, scale_tiles, STEPS_P2: gl.constexpr, num_warps: gl.constexpr):
    """Whether every E8M0 byte of rows ``rows`` (``[BLOCK_N]``, any layout) over the ``steps`` 128-deep K steps is
    below 128 (scales at most 2 ** 0, as for any weights with |w| <= 448): all of them read as int32 words
    (``_scale_rows``, one word per row and step; ``STEPS_P2`` >= steps a power of two), one test of the
    4 bytes' top bits per word, then a CTA-wide maximum (a scalar, the same in every thread). A conservative test of
    ``_e8m0_word_factor``'s exactness (bytes <= 134)."""
    CHUNK: gl.constexpr = 4 if STEPS_P2 > 4 else STEPS_P2  # steps per load tile (fewer live pointers)
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32 // CHUNK, CHUNK],
                                            warps_per_cta=[num_warps, 1], order=[1, 0])
    r = gl.convert_layout(rows, gl.SliceLayout(1, layout))
    k = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))
    base = (_scale_rows(s_base, r, scale_tiles)[:, None] + k[None, :] * 512).to(gl.pointer_type(gl.int32),
                                                                               bitcast=True)
    seen = gl.zeros([rows.shape[0], CHUNK], gl.int32, layout)
    for c in gl.static_range(0, STEPS_P2, CHUNK):
        seen = seen | gl.load(base + c * 128, mask=(k + c < steps)[None, :], other=0)
    top = ((seen & -2139062144) != 0).to(gl.int32)  # -2139062144: 0x80808080, the 4 bytes' top bits
    return gl.max(gl.max(top, axis=1), axis=0) == 0


@gluon.jit
def _sx4_planes(words, s, sel, SCALE_WORDS: gl.constexpr, ONE: gl.constexpr, one):
    """int32 words of 4 e4m3 bytes (A-operand layout) and their E8M0 bytes ``s`` (same shape and layout; with
    ``SCALE_WORDS`` the scale words and selectors of ``_e8m0_word_factors``) -> the 4 exact bf16 plane tiles (byte i
    in the i-th): the Triton kernel's "sx4" values (``_sx_factors``), ``(e4m3 * 2 ** -120) * lo * hi``, from
    ``_fp8x4_pair_planes``. ``ONE`` (with ``SCALE_WORDS``, session 29): where the runtime scalar ``one`` holds (the
    program's bytes all below 128), the first factor alone (``_e8m0_word_factor``; the second is then exactly 1, so
    the same values), else both; a branch uniform over the program, outside the MMAs."""
    v0, v1, v2, v3 = _fp8x4_pair_planes(words)
    if ONE:
        if one:
            f = _e8m0_word_factor(s, sel)
            p0, p1, p2, p3 = v0 * f, v1 * f, v2 * f, v3 * f
        else:
            lo, hi = _e8m0_word_factors(s, sel)
            p0, p1, p2, p3 = v0 * lo * hi, v1 * lo * hi, v2 * lo * hi, v3 * lo * hi
        return p0, p1, p2, p3
    if SCALE_WORDS:
        lo, hi = _e8m0_word_factors(s, sel)
    else:
        lo, hi = _sx_factors(s)
    return v0 * lo * hi, v1 * lo * hi, v2 * lo * hi, v3 * lo * hi


@gluon.jit
def _mma_step(words, x_smem, st, s, acc, sel, SCALE_WORDS: gl.constexpr, ONE: gl.constexpr, one):
    """Dequantize one K step's weight words with their E8M0 bytes ``s`` and issue its 4 plane MMAs against stage
    ``st``'s token planes (asynchronous); returns the accumulator and the planes, which must stay alive until those
    MMAs are waited for. ``ONE`` / ``one``: ``_sx4_planes``."""
    p0, p1, p2, p3 = _sx4_planes(words, s, sel, SCALE_WORDS, ONE, one)
    acc = warpgroup_mma(p0, x_smem.index(st * 4 + 0).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma(p1, x_smem.index(st * 4 + 1).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma(p2, x_smem.index(st * 4 + 2).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma(p3, x_smem.index(st * 4 + 3).permute((1, 0)), acc, is_async=True)
    return acc, p0, p1, p2, p3


@gluon.jit
def _mma_step_chains(words, x_smem, st, s, acc, acc2, sel, CHAINS: gl.constexpr, SCALE_WORDS: gl.constexpr,
                     ONE: gl.constexpr, one):
    """``_mma_step`` with ``CHAINS`` = 2 accumulators: planes 0-1 into ``acc``, 2-3 into ``acc2`` (summed after the K
    loop), so each step's MMAs form two dependent chains of half the length that the tensor cores can overlap
    (session 26: a single warpgroup's FC2 is bound by its one chain's latency). Not the Triton FC2's summation order,
    hence not its bits. ``CHAINS`` = 1: ``_mma_step`` (``acc2`` untouched)."""
    if CHAINS == 2:
        p0, p1, p2, p3 = _sx4_planes(words, s, sel, SCALE_WORDS, ONE, one)
        acc = warpgroup_mma(p0, x_smem.index(st * 4 + 0).permute((1, 0)), acc, is_async=True)
        acc2 = warpgroup_mma(p2, x_smem.index(st * 4 + 2).permute((1, 0)), acc2, is_async=True)
        acc = warpgroup_mma(p1, x_smem.index(st * 4 + 1).permute((1, 0)), acc, is_async=True)
        acc2 = warpgroup_mma(p3, x_smem.index(st * 4 + 3).permute((1, 0)), acc2, is_async=True)
    else:
        acc, p0, p1, p2, p3 = _mma_step(words, x_smem, st, s, acc, sel, SCALE_WORDS, ONE, one)
    return acc, acc2, p0, p1, p2, p3


@gluon.jit
def _step_scales(s_base, rows, cols, k, scale_tiles, Q: gl.constexpr, SCALE_WORDS: gl.constexpr):
    """E8M0 bytes of K step ``k`` for every element of a ``[BLOCK_N, Q]`` plane tile (column j: block j // 8), read
    straight into the plane tiles' layout from the 128x4-swizzled scales; with ``SCALE_WORDS`` one int32 per row
    instead, ``[BLOCK_N, 1]``: a 128-deep step covers 4 K blocks, which the 128x4 layout keeps in 4 adjacent bytes of
    the row (``_e8m0_word_factors``; the scales 4-byte aligned)."""
    offs = (rows // 128) * (scale_tiles * 512) + (rows % 32) * 16 + ((rows % 128) // 32) * 4
    if SCALE_WORDS:
        return gl.load((s_base + offs + k * 512).to(gl.pointer_type(gl.int32), bitcast=True))[:, None]
    else:
        c = k * (Q // 8) + cols // 8
        return gl.load(s_base + offs[:, None] + ((c // 4) * 512 + c % 4)[None, :])


@gluon.jit
def _word_selectors(cols):
    """The ``prmt`` selectors of ``_e8m0_word_factors`` for plane-tile columns ``cols``: byte ``cols // 8`` into both
    16-bit halves, ``[1, Q]``."""
    return (0x4040 + 0x0101 * (cols // 8))[None, :]


@gluon.jit
def _stage(k, STAGES: gl.constexpr, ST: gl.constexpr):
    """The ring stage of K step ``k``: ``k % STAGES``, or ``ST`` where the caller knows it at compile time (>= 0)."""
    if ST < 0:
        return k % STAGES
    else:
        return ST


@gluon.jit
def _issue(w_desc, a_desc, w_smem, x_smem, bars, k, w_row, a_row, STAGES: gl.constexpr, BLOCK_K: gl.constexpr,
           ST: gl.constexpr):
    """The TMA copies of K step ``k`` into its stage (``_stage``)."""
    st = _stage(k, STAGES, ST)
    _issue_weights(w_desc, a_desc, w_smem, bars, st, k, w_row, BLOCK_K)
    _issue_planes(a_desc, x_smem, bars, st, k, a_row, BLOCK_K)


@gluon.jit
def _issue_weights(w_desc, a_desc, w_smem, bars, st, k, w_row, BLOCK_K: gl.constexpr):
    """K step ``k``'s weight copy into stage ``st``, the stage expecting the token planes' bytes too
    (``_issue_planes``)."""
    Q: gl.constexpr = BLOCK_K // 4
    mbarrier.expect(bars.index(st), w_desc.block_type.nbytes + 4 * a_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(w_desc, [w_row, k * Q], bars.index(st), w_smem.index(st))


@gluon.jit
def _issue_planes(a_desc, x_smem, bars, st, k, a_row, BLOCK_K: gl.constexpr):
    """K step ``k``'s 4 token-plane copies into stage ``st``."""
    Q: gl.constexpr = BLOCK_K // 4
    for p in gl.static_range(4):
        tma.async_copy_global_to_shared(a_desc, [a_row, k * BLOCK_K + p * Q], bars.index(st), x_smem.index(st * 4 + p))


@gluon.jit
def _planes_step(k, steps, w_desc, a_desc, w_smem, x_smem, bars, s_base, rows, cols, scale_tiles, s, acc, acc2, q0, q1,
                 q2, q3, w_row, a_row, sel, STAGES: gl.constexpr, BLOCK_K: gl.constexpr, a_layout: gl.constexpr,
                 CHAINS: gl.constexpr, OVERLAP: gl.constexpr, SCALE_WORDS: gl.constexpr, RING_ST: gl.constexpr,
                 ONE: gl.constexpr, one):
    """K step ``k``: wait for its stage, dequantize its weight words into new planes, issue their 4 MMAs, retire the
    previous step's (planes ``q*``, the other register set), then refill the freed stage. Returns the accumulator,
    this step's planes (in flight), the retired planes and the next step's E8M0 bytes. ``RING_ST`` >= 0: the stage,
    known at compile time (``RING``: one loop iteration per turn of the ring); -1: ``k % STAGES``. ``ONE`` /
    ``one``: ``_sx4_planes``."""
    Q: gl.constexpr = BLOCK_K // 4
    st = _stage(k, STAGES, RING_ST)
    mbarrier.wait(bars.index(st), (k // STAGES) & 1)
    words = w_smem.index(st).load(a_layout)
    s_next = _step_scales(s_base, rows, cols, gl.minimum(k + 1, steps - 1), scale_tiles, Q, SCALE_WORDS)
    acc, acc2, p0, p1, p2, p3 = _mma_step_chains(words, x_smem, st, s, acc, acc2, sel, CHAINS, SCALE_WORDS, ONE,
                                                 one)
    # the previous step's 4 MMAs are done past this wait: its stage and its register planes are free
    # (without OVERLAP this step's too: one register set suffices, fewer registers, more programs per SM)
    acc, acc2, q0, q1, q2, q3 = warpgroup_mma_wait(num_outstanding=4 * OVERLAP, deps=(acc, acc2, q0, q1, q2, q3))
    if k + STAGES - 1 < steps:
        _issue(w_desc, a_desc, w_smem, x_smem, bars, k + STAGES - 1, w_row, a_row, STAGES, BLOCK_K,
               -1 if RING_ST < 0 else (RING_ST + STAGES - 1) % STAGES)
    return acc, acc2, p0, p1, p2, p3, q0, q1, q2, q3, s_next


@gluon.jit
def _fc2_gluon_kernel(w_desc, a_desc, s_ptr, slot_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N, K,
                      stride_se, scale_tiles, stride_slot, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                      BLOCK_K: gl.constexpr, STAGES: gl.constexpr, CHAINS: gl.constexpr, OVERLAP: gl.constexpr,
                      SCALE_WORDS: gl.constexpr, RING: gl.constexpr, ONE_FACTOR: gl.constexpr,
                      STEPS_P2: gl.constexpr, PDL: gl.constexpr, num_warps: gl.constexpr):
    Q: gl.constexpr = BLOCK_K // 4
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    if pid_b < gl.load(num_blocks_ptr):
        expert = gl.load(block_expert_ptr + pid_b)
        mma: gl.constexpr = wgmma_layout(BLOCK_T, num_warps)
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, Q], w_desc.layout)
        x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, BLOCK_T, Q], a_desc.layout)
        bars = stage_barriers(STAGES, 1)
        n_first = pid_n * BLOCK_N
        w_row = expert * N + n_first
        a_row = pid_b * BLOCK_T
        steps = K // BLOCK_K
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                if PDL:  # the weights now; the token planes (the FC1's output) once the FC1 is done
                    _issue_weights(w_desc, a_desc, w_smem, bars, i, i, w_row, BLOCK_K)
                else:
                    _issue(w_desc, a_desc, w_smem, x_smem, bars, i, w_row, a_row, STAGES, BLOCK_K, -1)
        rows = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_layout))
        cols = gl.arange(0, Q, layout=gl.SliceLayout(0, a_layout))
        s_base = s_ptr + expert.to(gl.int64) * stride_se
        s_next = _step_scales(s_base, rows, cols, 0, scale_tiles, Q, SCALE_WORDS)
        sel = _word_selectors(cols)
        one = False
        if ONE_FACTOR:  # one factor where the program's bytes are all below 128 (every step), else two
            one = _scales_below_2_pow_1(s_base, rows, steps, scale_tiles, STEPS_P2, num_warps)
        if PDL:
            gdc_wait()  # the FC1 (a programmatic dependent launch: the stream's previous kernel) is done
            for i in gl.static_range(STAGES - 1):
                if i < steps:
                    _issue_planes(a_desc, x_smem, bars, i, i, a_row, BLOCK_K)
        acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        acc2 = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
        zero = gl.zeros([BLOCK_N, Q], gl.bfloat16, a_layout)
        # Two register sets of planes, even steps in a*, odd steps in b*: an in-flight wgmma reads its A planes from
        # registers, and a set is written again only after the wait that retires its MMAs (``_planes_step``).
        a0, a1, a2, a3, b0, b1, b2, b3 = zero, zero, zero, zero, zero, zero, zero, zero
        if RING:  # without the overlap, K // BLOCK_K a multiple of STAGES (the launcher checks): constant stages
            for k0 in range(0, steps, STAGES):
                for i in gl.static_range(STAGES):
                    acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3, s_next = _planes_step(
                        k0 + i, steps, w_desc, a_desc, w_smem, x_smem, bars, s_base, rows, cols, scale_tiles, s_next,
                        acc, acc2, b0, b1, b2, b3, w_row, a_row, sel, STAGES, BLOCK_K, a_layout, CHAINS, OVERLAP,
                        SCALE_WORDS, i, ONE_FACTOR, one)
        else:
            for k in range(0, steps - 1, 2):
                acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3, s_next = _planes_step(
                    k, steps, w_desc, a_desc, w_smem, x_smem, bars, s_base, rows, cols, scale_tiles, s_next, acc,
                    acc2, b0, b1, b2, b3, w_row, a_row, sel, STAGES, BLOCK_K, a_layout, CHAINS, OVERLAP,
                    SCALE_WORDS, -1, ONE_FACTOR, one)
                acc, acc2, b0, b1, b2, b3, a0, a1, a2, a3, s_next = _planes_step(
                    k + 1, steps, w_desc, a_desc, w_smem, x_smem, bars, s_base, rows, cols, scale_tiles, s_next, acc,
                    acc2, a0, a1, a2, a3, w_row, a_row, sel, STAGES, BLOCK_K, a_layout, CHAINS, OVERLAP,
                    SCALE_WORDS, -1, ONE_FACTOR, one)
            if steps % 2 == 1:
                acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3, s_next = _planes_step(
                    steps - 1, steps, w_desc, a_desc, w_smem, x_smem, bars, s_base, rows, cols, scale_tiles, s_next,
                    acc, acc2, b0, b1, b2, b3, w_row, a_row, sel, STAGES, BLOCK_K, a_layout, CHAINS, OVERLAP,
                    SCALE_WORDS, -1, ONE_FACTOR, one)
        acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3 = warpgroup_mma_wait(
            num_outstanding=0, deps=(acc, acc2, a0, a1, a2, a3, b0, b1, b2, b3))
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
                     overlap: bool = True, scale_words: bool = False, ring: bool = False,
                     one_factor: bool = False, pdl: bool = False) -> None:
    """One ``_fc2_gluon_kernel`` launch over ``grid_blocks`` token blocks (blocks past ``num_blocks[0]`` exit):
    ``inter`` ``[positions, I]`` bf16 plane-major per 128-deep step (row stride a multiple of 8), ``w`` ``[E, H, I]``
    fp8 contiguous, ``scales`` ``[E, Mp * Cp]`` uint8 with ``scale_tiles`` = Cp // 4 (``triton_launch._scale_args``),
    ``slots`` ``[pairs, H]`` bf16 (row stride ``slots.stride(0)``). The caller checks ``I % 128 == 0`` and
    ``H % block_n == 0``. ``overlap=False`` waits for each step's MMAs before the next step's dequant (the same bits;
    fewer registers, so more programs per SM; session 28's 32-token gated defaults). ``scale_words=True`` reads the
    E8M0 bytes as one int32 per row and step (``_e8m0_word_factors``; the same factors, so the same bits; needs the
    scales 4-byte aligned; session 28). ``ring=True`` (with ``overlap=False`` and I a multiple of
    128 * ``stages``) runs one loop iteration per turn of the stage ring, so every stage index is a constant (the
    same steps in the same order; session 28). ``one_factor=True`` (with ``scale_words``): a program whose E8M0 bytes
    are all below 128 (scales at most 1, as for any weights with |w| <= 448) multiplies by one factor instead of two
    (``_sx4_planes``), the others by both; the same values, so the same bits (session 29). ``pdl=True`` launches it
    as a programmatic dependent of the stream's previous kernel (the FC1, which lets it start early:
    ``gdc_launch_dependents``): each program issues its prologue's weight copies and loads its scales, then waits for
    the FC1 to finish (``gdc_wait``, ``griddepcontrol.wait``) before the token planes' copies; the same bits (session
    30)."""
    if one_factor and not scale_words:
        raise ValueError("launch_gluon_fc2: one_factor=True needs scale_words=True")
    if ring and (overlap or w.shape[2] // GLUON_FC2_BLOCK_K % stages):
        raise ValueError(f"launch_gluon_fc2: ring=True needs overlap=False and I ({w.shape[2]}) a multiple of 128 * "
                         f"stages ({128 * stages})")
    experts, hidden, inner = w.shape
    q = GLUON_FC2_BLOCK_K // 4
    words = w.view(torch.uint8).view(experts * hidden, inner).view(torch.int32)
    w_desc = nvmma_descriptor(words, [block_n, q])
    a_desc = nvmma_descriptor(inter, [block_t, q])
    _fc2_gluon_kernel[(triton.cdiv(hidden, block_n), grid_blocks)](
        w_desc, a_desc, scales, slots, sorted_pairs, block_expert, num_blocks, hidden, inner, scales.stride(0),
        scale_tiles, slots.stride(0), BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=GLUON_FC2_BLOCK_K, STAGES=stages,
        CHAINS=chains, OVERLAP=overlap, SCALE_WORDS=scale_words, RING=ring, ONE_FACTOR=one_factor,
        STEPS_P2=triton.next_power_of_2(inner // GLUON_FC2_BLOCK_K) if one_factor else 1, PDL=pdl,
        num_warps=num_warps, launch_pdl=pdl)
