"""@triton.jit bodies of the "f8x2" MMA tiles: native fp8 x fp8 wgmmas on an exact two-term fp8 split of the
activations (host side: ``triton_moe.py``, ``TritonMoEConfig.dequant == "f8x2"``). Experimental: correct, but 1.5-1.7x
slower than the dequantizing defaults on the H200 (session 24, bench/NOTES_triton_moe.md); ``choose_config`` never
picks these Triton kernels (its f8x2 picks run the Gluon ones, ``_gluon_f8x2_fc1_kernel`` / ``_gluon_f8x2_fc2_kernel``,
with this module's split launch and helpers).

Hopper has no bf16 x fp8 MMA, so the other tiles dequantize every weight on CUDA cores. Here the weights are never
dequantized: each activation row is split per 32-value block ``b`` into a power-of-two scale ``s`` and two e4m3
terms, ``x = s * (hi + lo)`` with ``hi = e4m3(x / s)`` and ``lo = e4m3(x / s - hi)``. For bf16 ``x`` (8 significant
bits) the residual ``x / s - hi`` has at most 4 significant bits, so ``hi + lo`` is exact wherever ``lo`` stays in
e4m3's grid (``|x|`` at least ``2 ** -9`` of the block's largest value; below that ``lo`` rounds to e4m3's
subnormal grid, an absolute error of at most ``2 ** -17`` of the block's largest value). Per weight block
``(row n, block b)`` and token ``t``::

    out[n, t] += 2 ** (e_w[n, b] - 127) * s[t, b] * ([W8 | W8][n, b-block] . [hi; lo][t, b-block])

as one 64-deep fp8 wgmma per block (the block's 32 weights twice along K against its hi then lo values) into a fresh
fp32 accumulator, then one scale product and one FMA per output element (CUDA cores). Hopper's fp8 wgmma adds its
products with reduced precision (about 14 bits, DeepSeek-V3's report); the block sums are then rounded into fp32. So
the results are not bit-equal to the dequantizing tiles (the float64 oracle: the same relative error, GPU tests;
``bench/fp8_split_numerics.py`` on the CPU).

Split activation buffers (``split_rows_buffers``): fp8 e4m3 ``[R, 2 * KP]`` (``KP`` = K rounded up to 128; block
``b``'s 32 ``hi`` values in columns ``[64 b, 64 b + 32)``, its ``lo`` values in the next 32) and fp32 scales
``[R, KP // 32]``. The split of x is one launch (``_split_rows_kernel``); FC1 writes FC2's input this way (the
activation rounded to bf16 first, so FC2 sees the bf16 values of the other tiles' ``inter``).
Shape legend as ``_triton_moe_kernel.py``.
"""

import triton
import triton.language as tl

from ._triton_moe_kernel import _activate, _e8m0_f32, _routed_block, _scale_rows


@triton.jit
def _split_scale(amax):
    """Per block: the power of two ``s`` with ``amax / s`` in ``[128, 256)`` and its inverse, from amax's exponent
    bits (both normal fp32 for every finite amax; amax below ``2 ** -119`` takes ``s = 2 ** -126``)."""
    e = tl.maximum((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF, 8)
    s = ((e - 7) << 23).to(tl.float32, bitcast=True)  # 2 ** (e - 134)
    inv = ((261 - e) << 23).to(tl.float32, bitcast=True)  # 2 ** (134 - e)
    return s, inv


@triton.jit
def _e4m3_round(y):
    """fp32 ``y`` (``|y| < 464``) rounded to the nearest e4m3 value, ties to even, still as fp32: bits for normal
    values (keep 3 mantissa bits), ``(y + 1.5 * 2 ** 14) - 1.5 * 2 ** 14`` on the subnormal grid of ``2 ** -9``.
    The split casts only exact values to e4m3 and never casts e4m3 back: on the H200 (Triton 3.6) ``lo = e4m3(y -
    float(e4m3(y)))`` came out wrong (bench/f8x2_check.py, session 24), and the interpreter's own cast drops the
    carry of a rounding up (124 -> 64)."""
    bits = y.to(tl.int32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & -0x100000).to(tl.float32, bitcast=True)
    grid = (y + 24576.0) - 24576.0
    return tl.where(tl.abs(y) < 0.015625, grid, normal)


@triton.jit
def _split_terms(y):
    """``(hi, lo)`` e4m3 with ``hi + lo`` = ``y`` (exact for 8-bit-significand ``y`` with ``|y| >= 1 / 4``: then
    ``lo`` is a multiple of ``2 ** -9``, on e4m3's grid)."""
    hi = _e4m3_round(y)
    lo = _e4m3_round(y - hi)
    return hi.to(tl.float8e4nv), lo.to(tl.float8e4nv)


@triton.jit
def _split_cols(k):
    """Column of ``hi`` for logical column ``k`` in the split rows: block ``b = k // 32`` holds ``hi`` in columns
    ``[64 b, 64 b + 32)`` and ``lo`` in the 32 after (so one 64-deep MMA takes both terms of a block)."""
    return k + (k // 32) * 32


@triton.jit
def _split_rows_kernel(x_ptr, q_ptr, s_ptr, rows, K, stride_x, stride_q, stride_s, stride_sb, BLOCK_R: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP: tl.constexpr = 32):
    """``x`` ``[rows, K]`` (bf16) -> ``q`` ``[rows, 2 * KP]`` e4m3 (``_split_cols``) and ``s`` ``[rows, KP // GROUP]``
    fp32, one scale per ``GROUP`` values (32, or 128: one per K step; strides ``stride_s`` / ``stride_sb``: row-major,
    or transposed, ``split_rows_buffers``). Grid: (row blocks, KP // BLOCK_K); zeros (scale ``2 ** -126``) past K."""
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = (r < rows)[:, None]
    v = tl.load(x_ptr + r[:, None] * stride_x + k[None, :], mask=row_ok & (k < K)[None, :], other=0.0)
    v = tl.reshape(v.to(tl.float32), [BLOCK_R, BLOCK_K // GROUP, GROUP])
    s, inv = _split_scale(tl.max(tl.abs(v), axis=2))
    hi, lo = _split_terms(v * inv[:, :, None])
    q_ptrs = q_ptr + r[:, None] * stride_q + _split_cols(k)[None, :]
    tl.store(q_ptrs, tl.reshape(hi, [BLOCK_R, BLOCK_K]), mask=row_ok)
    tl.store(q_ptrs + 32, tl.reshape(lo, [BLOCK_R, BLOCK_K]), mask=row_ok)
    b = tl.program_id(1) * (BLOCK_K // GROUP) + tl.arange(0, BLOCK_K // GROUP)
    tl.store(s_ptr + r[:, None] * stride_s + b[None, :] * stride_sb, s, mask=row_ok)


@triton.jit
def _columns4(v):
    """The 4 columns of ``v`` ``[R, 4]`` as 4 tensors ``[R]``."""
    even, odd = tl.split(tl.reshape(v, [v.shape[0], 2, 2]))  # columns 0, 2 / 1, 3
    c0, c2 = tl.split(even)
    c1, c3 = tl.split(odd)
    return c0, c1, c2, c3


@triton.jit
def _block_fma(acc, w, x, sw, sx):
    """``acc += 2 ** (sw - 127) * sx * ([w | w] @ [hi; lo])`` for one 32-deep block: ``w`` ``[BLOCK_N, 64]`` (the
    block's 32 weights twice), ``x`` ``[64, BLOCK_T]`` e4m3 (hi rows, then lo rows), ``sw`` ``[BLOCK_N]`` E8M0 bytes,
    ``sx`` ``[BLOCK_T]`` fp32: one 64-deep dot (two k32 wgmmas issued back to back)."""
    d = tl.dot(w, x)
    return acc + d * (_e8m0_f32(sw)[:, None] * sx[None, :])


@triton.jit
def _f8x2_steps(acc_a, acc_b, q_rows, s_rows_x, token_mask, w_base, s_base, rows_a, rows_b, k_first, k_end, K,
                stride_wn, scale_tiles, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """K steps ``[k_first, k_end)`` of two accumulators ``[R, BLOCK_T]``: ``acc_a += W[rows_a] x^T`` and ``acc_b +=
    W[rows_b] x^T`` (gate and up rows, or two halves of a tile), BLOCK_K deep (32, 64 or 128). ``q_rows`` /
    ``s_rows_x`` [BLOCK_T]: each token column's split row and scale row; ``rows_a`` / ``rows_b`` [R] int64. Each
    32-block loads its hi / lo tile once (``[64, BLOCK_T]``) for both, and each weight tile twice over (``[R, 64]``, the
    same 32 bytes per row), straight into the MMA's shared layout; the two chains' wgmmas are independent, so one's
    FMAs overlap the other's MMA. The step's scale bytes are loaded once (4 contiguous per 128-deep step and row)."""
    NB: tl.constexpr = BLOCK_K // 32
    c64 = tl.arange(0, 64)
    c32 = c64 % 32
    wa_ptrs = w_base + rows_a[:, None] * stride_wn + c32[None, :] + k_first * BLOCK_K
    wb_ptrs = w_base + rows_b[:, None] * stride_wn + c32[None, :] + k_first * BLOCK_K
    x_ptrs = q_rows[None, :] + c64[:, None] + k_first * (2 * BLOCK_K)
    sa_rows = _scale_rows(s_base, rows_a, scale_tiles)
    sb_rows = _scale_rows(s_base, rows_b, scale_tiles)
    scale_cols = tl.arange(0, 4)
    for k in range(k_first, k_end):
        b0 = k * NB
        cols = b0 + scale_cols  # 4 scale columns (the ones past this step's NB unused)
        col_ok = (scale_cols < NB)[None, :] & (cols * 32 < K)[None, :]
        col_offs = ((cols // 4) * 512 + cols % 4)[None, :]
        sa0, sa1, sa2, sa3 = _columns4(tl.load(sa_rows[:, None] + col_offs, mask=col_ok, other=0))
        sb0, sb1, sb2, sb3 = _columns4(tl.load(sb_rows[:, None] + col_offs, mask=col_ok, other=0))
        sx0, sx1, sx2, sx3 = _columns4(tl.load(s_rows_x[:, None] + cols[None, :],
                                               mask=token_mask[:, None] & (cols * 32 < K)[None, :], other=0.0))
        for j in tl.static_range(NB):
            if EVEN_K:
                x = tl.load(x_ptrs + j * 64, mask=token_mask[None, :], other=0.0)
                wa = tl.load(wa_ptrs + j * 32)
                wb = tl.load(wb_ptrs + j * 32)
            else:
                k_left = K - (b0 + j) * 32
                x = tl.load(x_ptrs + j * 64, mask=token_mask[None, :] & (c32[:, None] < k_left), other=0.0)
                wa = tl.load(wa_ptrs + j * 32, mask=c32[None, :] < k_left, other=0.0)
                wb = tl.load(wb_ptrs + j * 32, mask=c32[None, :] < k_left, other=0.0)
            if j == 0:
                acc_a = _block_fma(acc_a, wa, x, sa0, sx0)
                acc_b = _block_fma(acc_b, wb, x, sb0, sx0)
            elif j == 1:
                acc_a = _block_fma(acc_a, wa, x, sa1, sx1)
                acc_b = _block_fma(acc_b, wb, x, sb1, sx1)
            elif j == 2:
                acc_a = _block_fma(acc_a, wa, x, sa2, sx2)
                acc_b = _block_fma(acc_b, wb, x, sb2, sx2)
            else:
                acc_a = _block_fma(acc_a, wa, x, sa3, sx3)
                acc_b = _block_fma(acc_b, wb, x, sb3, sx3)
        wa_ptrs += BLOCK_K
        wb_ptrs += BLOCK_K
        x_ptrs += 2 * BLOCK_K
    return acc_a, acc_b


@triton.jit
def _store_split(h, positions, token_mask, n_first, offs_n, N_OUT, q_ptr, s_ptr, stride_q, stride_s,
                 BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr):
    """FC1's tile ``h`` ``[BLOCK_N, BLOCK_T]`` fp32 (rounded to bf16 first) into FC2's split rows at ``positions``:
    per token and 32 output columns one scale (``offs_n`` = ``n_first`` + arange, ``n_first`` a multiple of 32)."""
    v = tl.reshape(h.to(tl.bfloat16).to(tl.float32), [BLOCK_N // 32, 32, BLOCK_T])
    s, inv = _split_scale(tl.max(tl.abs(v), axis=1))
    hi, lo = _split_terms(v * inv[:, None, :])
    rows = positions.to(tl.int64)[None, :]
    ok = token_mask[None, :] & (offs_n[:, None] < N_OUT)
    q_ptrs = q_ptr + rows * stride_q + _split_cols(offs_n)[:, None]
    tl.store(q_ptrs, tl.reshape(hi, [BLOCK_N, BLOCK_T]), mask=ok)
    tl.store(q_ptrs + 32, tl.reshape(lo, [BLOCK_N, BLOCK_T]), mask=ok)
    b = n_first // 32 + tl.arange(0, BLOCK_N // 32)
    tl.store(s_ptr + rows * stride_s + b[:, None], s, mask=token_mask[None, :] & (b[:, None] * 32 < N_OUT))


@triton.jit
def _f8x2_fc1_kernel(
    q_ptr,  # [T, 2 * KP1] e4m3: x split (``_split_rows_kernel``)
    qs_ptr,  # [T, KP1 // 32] fp32 scales
    w_ptr,  # [E, N1, H] fp8 e4m3, H contiguous
    s_ptr,  # [E, Mp * Cp] uint8: the canonical 128x4-swizzled E8M0 bytes of each expert
    q2_ptr,  # [max_sorted, 2 * KP2] e4m3 out: FC2's split input, row = padded position
    qs2_ptr,  # [max_sorted, KP2 // 32] fp32 out
    sorted_pairs_ptr,  # [max_sorted] int32
    block_expert_ptr,  # [max_blocks] int32
    num_blocks_ptr,  # [1] int32
    N_OUT,  # I (gated) or N1
    K,  # H
    stride_q,
    stride_qs,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_q2,
    stride_qs2,
    TOPK: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """FC1 + activation for BLOCK_N output columns of one block of BLOCK_T tokens (gated: gate and up rows, else two
    halves of BLOCK_N rows: two independent accumulator chains); tokens gathered by pair index; the result split for
    FC2 (``_store_split``)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    if pid_b < tl.load(num_blocks_ptr):
        expert, positions, pairs, token_mask = _routed_block(sorted_pairs_ptr, block_expert_ptr, pid_b, BLOCK_T)
        tokens = tl.where(token_mask, pairs // TOPK, 0).to(tl.int64)
        q_rows = q_ptr + tokens * stride_q
        s_rows_x = qs_ptr + tokens * stride_qs
        w_base = w_ptr + expert * stride_we
        s_base = s_ptr + expert * stride_se
        steps = tl.cdiv(K, BLOCK_K)
        if GATED:  # the gate and up rows of BLOCK_N output columns
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            rows_n = (offs_n % N_OUT).to(tl.int64)
            acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
            acc_g, acc_u = _f8x2_steps(acc, acc, q_rows, s_rows_x, token_mask, w_base, s_base, rows_n, rows_n + N_OUT,
                                       0, steps, K, stride_wn, scale_tiles, BLOCK_T, BLOCK_K, EVEN_K)
            _store_split(_activate(acc_g, acc_u, ACTIVATION), positions, token_mask, pid_n * BLOCK_N, offs_n, N_OUT,
                         q2_ptr, qs2_ptr, stride_q2, stride_qs2, BLOCK_N, BLOCK_T)
        else:  # two halves of BLOCK_N output columns
            HALF: tl.constexpr = BLOCK_N // 2
            offs_a = pid_n * BLOCK_N + tl.arange(0, HALF)
            offs_b = offs_a + HALF
            acc = tl.zeros([HALF, BLOCK_T], dtype=tl.float32)
            acc_a, acc_b = _f8x2_steps(acc, acc, q_rows, s_rows_x, token_mask, w_base, s_base,
                                       (offs_a % N_OUT).to(tl.int64), (offs_b % N_OUT).to(tl.int64), 0, steps, K,
                                       stride_wn, scale_tiles, BLOCK_T, BLOCK_K, EVEN_K)
            _store_split(_activate(acc_a, acc_a, ACTIVATION), positions, token_mask, pid_n * BLOCK_N, offs_a, N_OUT,
                         q2_ptr, qs2_ptr, stride_q2, stride_qs2, HALF, BLOCK_T)
            _store_split(_activate(acc_b, acc_b, ACTIVATION), positions, token_mask, pid_n * BLOCK_N + HALF, offs_b,
                         N_OUT, q2_ptr, qs2_ptr, stride_q2, stride_qs2, HALF, BLOCK_T)


@triton.jit
def _f8x2_fc2_kernel(
    q_ptr,  # [max_sorted, 2 * KP2] e4m3: FC1's split output, row = padded position
    qs_ptr,  # [max_sorted, KP2 // 32] fp32
    w_ptr,  # [E, H, I] fp8 e4m3, I contiguous
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    slot_ptr,  # [rows * topk, H] bf16 out: one row per (token, k) pair
    sorted_pairs_ptr,
    block_expert_ptr,
    num_blocks_ptr,
    N,  # H
    K,  # I
    stride_q,
    stride_qs,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_slot,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """FC2 for one ``[BLOCK_N, BLOCK_T]`` tile of ``out^T`` (two halves of BLOCK_N rows: two independent accumulator
    chains); writes each pair's unweighted row (bf16)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    if pid_b < tl.load(num_blocks_ptr):
        expert, positions, pairs, token_mask = _routed_block(sorted_pairs_ptr, block_expert_ptr, pid_b, BLOCK_T)
        HALF: tl.constexpr = BLOCK_N // 2
        offs_a = pid_n * BLOCK_N + tl.arange(0, HALF)
        offs_b = offs_a + HALF
        rows = positions.to(tl.int64)
        acc = tl.zeros([HALF, BLOCK_T], dtype=tl.float32)
        acc_a, acc_b = _f8x2_steps(acc, acc, q_ptr + rows * stride_q, qs_ptr + rows * stride_qs, token_mask,
                                   w_ptr + expert * stride_we, s_ptr + expert * stride_se, (offs_a % N).to(tl.int64),
                                   (offs_b % N).to(tl.int64), 0, tl.cdiv(K, BLOCK_K), K, stride_wn, scale_tiles,
                                   BLOCK_T, BLOCK_K, EVEN_K)
        out_rows = slot_ptr + tl.where(token_mask, pairs, 0).to(tl.int64)[None, :] * stride_slot
        tl.store(out_rows + offs_a[:, None], acc_a.to(slot_ptr.dtype.element_ty),
                 mask=token_mask[None, :] & (offs_a[:, None] < N))
        tl.store(out_rows + offs_b[:, None], acc_b.to(slot_ptr.dtype.element_ty),
                 mask=token_mask[None, :] & (offs_b[:, None] < N))
