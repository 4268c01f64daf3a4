"""The pieces the Gluon FC1 and FC2 kernels share: MXFP8 weight words -> the register-A bf16 planes of their
asynchronous wgmmas, the E8M0 bytes of a K step, the one-factor check, the stage mbarriers.

Layouts: a ``[rows, Q]`` int32 tile of weight words (``Q`` = 32 per 128-deep K step; byte ``i`` of word ``j`` is weight
``k = 4j + i``) loaded into the wgmma A-operand layout (``k_width`` 2: words ``j``, ``j + 1`` of a row are a register
pair); plane ``i`` is the ``[rows, Q]`` bf16 tile of the words' byte ``i``. Scales ``[E, Mp * Cp]`` uint8 in the
cuBLAS 128x4 layout.

Dequant (session 27): weight ``e4m3 * 2 ** (s - 127)`` is ``(e4m3 * 2 ** -120) * lo * hi`` with ``lo = 2 ** (min(s,
134) - 7)`` and ``hi = 2 ** (max(s, 134) - 134)``, all exact in bf16 (``_sx_factors``). ``hi`` is 1 for every byte
``s <= 134`` (any weight with amax below ``448 * 2 ** 7``), so the kernels' K loop multiplies by ``lo`` only (the same
bits, half the multiplies) and keeps the largest byte it saw; a program that saw one > 134 (``two_factor_steps``)
runs its K loop again with both factors.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma

from ._triton_moe_kernel import _sx_factors

ONE_FACTOR_MAX_SCALE = gl.constexpr(134)  # E8M0 bytes up to this have hi = 1 (``_sx_factors``)


@gluon.constexpr_function
def wgmma_layout(block_t, num_warps):
    """The accumulator layout of a ``[rows, block_t]`` tile of Hopper wgmmas, ``num_warps`` warps stacked by rows."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_t, 16])


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
    """int32 words of 4 e4m3 bytes in the A-operand layout -> the 4 bf16 plane tiles ``e4m3 * 2 ** -120`` (byte i in
    the i-th). One asm instance takes a register pair (words j, j + 1 of a row); plane i's bf16x2 register is byte i
    of both, built by one sign-extending cross-word ``prmt``, a shift by 4 and a mask (e4m3's exponent and mantissa
    into bf16's low exponent and high mantissa bits, the sign kept): 3 instructions per plane register."""
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
def _sx4_planes(words, s, ONE_FACTOR: gl.constexpr):
    """Weight words and their E8M0 bytes ``s`` (same shape and layout) -> the 4 exact bf16 planes, ``(e4m3 * 2 **
    -120) * lo * hi``; with ``ONE_FACTOR`` (every byte <= 134, checked by the caller) ``* lo`` only, ``lo = 2 ** (s -
    7)``: the same values."""
    v0, v1, v2, v3 = _fp8x4_pair_planes(words)
    if ONE_FACTOR:
        lo = ((s.to(gl.int16) + 120) << 7).to(gl.bfloat16, bitcast=True)
        return v0 * lo, v1 * lo, v2 * lo, v3 * lo
    lo, hi = _sx_factors(s)
    return v0 * lo * hi, v1 * lo * hi, v2 * lo * hi, v3 * lo * hi


@gluon.jit
def mma_step(words, x_smem, st, s, acc, acc2, CHAINS: gl.constexpr, ONE_FACTOR: gl.constexpr):
    """Dequantize one K step's weight words with their E8M0 bytes ``s`` and issue its 4 plane MMAs (asynchronous)
    against stage ``st``'s token planes ``x_smem.index(st * 4 + i)``. ``CHAINS`` = 1: all into ``acc`` (the Triton
    kernels' order; ``acc2`` untouched). ``CHAINS`` = 2: planes 0-1 into ``acc``, 2-3 into ``acc2`` (summed after the
    K loop), two dependent chains of half the length that the tensor cores overlap (session 26); another summation
    order. Returns the accumulators and the planes, which must stay alive until those MMAs are waited for."""
    p0, p1, p2, p3 = _sx4_planes(words, s, ONE_FACTOR)
    acc = warpgroup_mma(p0, x_smem.index(st * 4 + 0).permute((1, 0)), acc, is_async=True)
    if CHAINS == 2:
        acc2 = warpgroup_mma(p2, x_smem.index(st * 4 + 2).permute((1, 0)), acc2, is_async=True)
        acc = warpgroup_mma(p1, x_smem.index(st * 4 + 1).permute((1, 0)), acc, is_async=True)
        acc2 = warpgroup_mma(p3, x_smem.index(st * 4 + 3).permute((1, 0)), acc2, is_async=True)
    else:
        acc = warpgroup_mma(p1, x_smem.index(st * 4 + 1).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(p2, x_smem.index(st * 4 + 2).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(p3, x_smem.index(st * 4 + 3).permute((1, 0)), acc, is_async=True)
    return acc, acc2, p0, p1, p2, p3


@gluon.jit
def step_scales(s_base, rows, cols, k, scale_tiles, Q: gl.constexpr):
    """E8M0 bytes of K step ``k`` for every element of a ``[BLOCK_N, Q]`` plane tile (column j: block j // 8), read
    straight into the plane tiles' layout from the 128x4-swizzled scales."""
    c = k * (Q // 8) + cols // 8
    offs = (rows // 128) * (scale_tiles * 512) + (rows % 32) * 16 + ((rows % 128) // 32) * 4
    return gl.load(s_base + offs[:, None] + ((c // 4) * 512 + c % 4)[None, :])


@gluon.jit
def two_factor_steps(smax, steps):
    """``steps`` where the largest E8M0 byte of ``smax`` (a ``[rows, Q]`` tile of running maxima, one per element) is
    > 134, else 0: how many K steps a program must run again with both factors. One CTA-wide maximum."""
    return gl.where(gl.max(gl.max(smax, axis=1), axis=0) > ONE_FACTOR_MAX_SCALE, steps, 0)
