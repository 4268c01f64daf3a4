"""@triton.jit bodies of the v5 "f8" Hopper MoE path: fp8 x fp8 tensor-core MMA, no weight dequant.

The weights stay fp8 e4m3 in shared memory and feed SM90's fp8 wgmma directly (K step 32 = one MXFP8 scale
block). Activations are bf16 by contract; each (row, 32-block) of them is written EXACTLY as ``scale * (hi + lo)``
with ``hi``, ``lo`` e4m3 and ``scale`` a power of two (``_split_rows_kernel`` / ``_store_split``): a bf16 value has 8
significant bits, ``hi`` keeps the top 4 (round to nearest) and the remainder is a multiple of bf16's ulp of at most
half ``hi``'s ulp, so it fits ``lo``'s 4 bits. The split is exact for every element at least ``2 ** -10`` times its
block's max magnitude (smaller ones: absolute error below ``2 ** -18`` of that max, the e4m3 subnormal floor).

One MMA per 32-K step takes both terms as 2 x BLOCK_T columns of B (column ``term * BLOCK_T + t``); the fp32
accumulator ``[BLOCK_N, 2 * BLOCK_T]`` is scaled per step by ``w_scale[n] * x_scale[t]`` (both exact powers of two)
and the two term halves are added once after the K loop. So per weight byte the loop does no conversion and
no register dequant: an fp8 MMA, and per output element one multiply-add per 32 K.

Layouts: weights are the canonical stacks (fp8 ``[E, M, K]``, cuBLAS 128x4-swizzled E8M0 ``[E, Mp * Cp]``; the
4 scale bytes of a 128-wide K step of one row are one aligned int32). Split activations: ``q`` ``[2, R, K]`` e4m3
(term-major) and ``qs`` ``[R, K // 32]`` fp32 scales. Route kernel and combine: ``_triton_moe_kernel.py``.
"""

import triton
import triton.language as tl

from ._triton_moe_kernel import _activate


@triton.jit
def _split_scales(amax):
    """(scale, 1 / scale) per block: powers of two that put ``amax`` in [128, 256) (never past e4m3's 448)."""
    biased = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    exp_bits = tl.maximum(biased - 7, 1)
    scale = (exp_bits << 23).to(tl.float32, bitcast=True)
    inverse = ((254 - exp_bits) << 23).to(tl.float32, bitcast=True)
    return scale, inverse


@triton.jit
def _to_e4m3(v, SOFT_ROUND: tl.constexpr):
    """fp32 ``|v| < 448`` -> e4m3, round to nearest even. ``SOFT_ROUND`` rounds in fp32 arithmetic first (to 4
    significant bits, ulp ``2 ** (max(e, -6) - 3)``), for the Triton interpreter, whose own cast does not round
    to nearest even; on the GPU the cast is ``cvt.rn`` and both give the same bytes."""
    if SOFT_ROUND:
        exponent = tl.maximum(((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
        ulp = ((exponent + 124) << 23).to(tl.float32, bitcast=True)
        inverse_ulp = ((130 - exponent) << 23).to(tl.float32, bitcast=True)
        v = ((v * inverse_ulp + 12582912.0) - 12582912.0) * ulp  # 1.5 * 2 ** 23: round half to even
    return v.to(tl.float8e4nv)


@triton.jit
def _split(v, SOFT_ROUND: tl.constexpr):
    """``v`` (fp32, already divided by its block scale) -> e4m3 (hi, lo) with ``hi + lo == v`` (module docstring)."""
    hi = _to_e4m3(v, SOFT_ROUND)
    return hi, _to_e4m3(v - hi.to(tl.float32), SOFT_ROUND)


@triton.jit
def _split_rows_kernel(
    x_ptr,  # [R, K] bf16, unit column stride
    q_ptr,  # [2, R, K] e4m3 out: hi, lo
    qs_ptr,  # [R, K // 32] fp32 out: block scales
    K,
    stride_x,
    stride_qterm,
    stride_q,
    stride_qs,
    BLOCK_K: tl.constexpr,
    SOFT_ROUND: tl.constexpr,
):
    """Program (row, K chunk): ``x = qs * (hi + lo)`` per 32-block (exact, see the module docstring)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    in_k = offs < K
    v = tl.load(x_ptr + row * stride_x + offs, mask=in_k, other=0.0).to(tl.float32)
    v = tl.reshape(v, [BLOCK_K // 32, 32])
    scale, inverse = _split_scales(tl.max(tl.abs(v), axis=1))
    hi, lo = _split(v * inverse[:, None], SOFT_ROUND)
    offs2 = tl.reshape(offs, [BLOCK_K // 32, 32])
    mask2 = tl.reshape(in_k, [BLOCK_K // 32, 32])
    tl.store(q_ptr + row * stride_q + offs2, hi, mask=mask2)
    tl.store(q_ptr + stride_qterm + row * stride_q + offs2, lo, mask=mask2)
    blocks = tl.program_id(1) * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
    tl.store(qs_ptr + row * stride_qs + blocks, scale, mask=blocks * 32 < K)


@triton.jit
def _store_split(h, q_ptr, qs_ptr, rows, col_mask, n0, N_OUT, stride_qterm, stride_q, stride_qs,
                 BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, SOFT_ROUND: tl.constexpr):
    """Round ``h`` ``[BLOCK_N, BLOCK_T]`` (fp32, column t = destination row ``rows[t]``, row i = column
    ``n0 + i``, ``n0`` a multiple of 32) to bf16, then store it split: ``q[:, rows[t], n]`` and ``qs[rows[t], n // 32]``."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    v = tl.reshape(h.to(tl.bfloat16).to(tl.float32), [BLOCK_N // 32, 32, BLOCK_T])
    scale, inverse = _split_scales(tl.max(tl.abs(v), axis=1))  # [BLOCK_N // 32, BLOCK_T]
    hi, lo = _split(v * inverse[:, None, :], SOFT_ROUND)
    ptrs = q_ptr + rows[None, :] * stride_q + offs_n[:, None]
    mask = col_mask[None, :] & (offs_n[:, None] < N_OUT)
    tl.store(ptrs, tl.reshape(hi, [BLOCK_N, BLOCK_T]), mask=mask)
    tl.store(ptrs + stride_qterm, tl.reshape(lo, [BLOCK_N, BLOCK_T]), mask=mask)
    blocks = n0 // 32 + tl.arange(0, BLOCK_N // 32)
    tl.store(qs_ptr + rows[None, :] * stride_qs + blocks[:, None], scale,
             mask=col_mask[None, :] & (blocks[:, None] * 32 < N_OUT))


@triton.jit
def _w_scale(word, j: tl.constexpr):
    """fp32 ``2 ** (byte - 127)`` of byte ``j`` of each int32 scale word (byte 0 is the subnormal 2 ** -127)."""
    byte = (word >> (8 * j)) & 0xFF
    return tl.where(byte == 0, 0x00400000, byte << 23).to(tl.float32, bitcast=True)


@triton.jit
def _dot8(w, b, FP32_DOT: tl.constexpr):
    """``w [BLOCK_N, 32] @ b [32, 2 * BLOCK_T]`` of e4m3 operands, fp32 result (fp32 ieee under the interpreter)."""
    if FP32_DOT:
        return tl.dot(w.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(w, b)


@triton.jit
def _k_step(acc, w_row_ptrs, s_word, b_col_ptrs, bs_col_ptrs, b_mask, k0, j: tl.constexpr, K,
            EVEN_K: tl.constexpr, FP32_DOT: tl.constexpr):
    """Scale block ``k0 // 32 + j``: ``acc += (W_blk @ B_blk) * w_scale[:, None] * x_scale[None, :]``."""
    kj = k0 + 32 * j
    offs32 = tl.arange(0, 32)
    if EVEN_K:
        w = tl.load(w_row_ptrs[:, None] + (kj + offs32)[None, :])
        b = tl.load(b_col_ptrs[None, :] + (kj + offs32)[:, None], mask=b_mask[None, :], other=0.0)
        bs = tl.load(bs_col_ptrs + kj // 32, mask=b_mask, other=0.0)
    else:
        live = kj < K
        w = tl.load(w_row_ptrs[:, None] + (kj + offs32)[None, :], mask=live, other=0.0)
        b = tl.load(b_col_ptrs[None, :] + (kj + offs32)[:, None], mask=b_mask[None, :] & live, other=0.0)
        bs = tl.load(bs_col_ptrs + kj // 32, mask=b_mask & live, other=0.0)
    return acc + _dot8(w, b, FP32_DOT) * (_w_scale(s_word, j)[:, None] * bs[None, :])


@triton.jit
def _gemm_f8(acc, w_row_ptrs, s_word_ptrs, b_col_ptrs, bs_col_ptrs, b_mask, K,
             EVEN_K: tl.constexpr, FP32_DOT: tl.constexpr, STAGES: tl.constexpr):
    """``acc [M, 2T] += sum_k W[m, k] * B[k, c] * w_scale[m, k // 32] * bs[c, k // 32]`` over all of K.

    ``w_row_ptrs`` [M] e4m3 row starts; ``s_word_ptrs`` [M] int32 pointers to each row's first scale word
    (4 scale columns = 128 K); ``b_col_ptrs`` / ``bs_col_ptrs`` [2T] column starts of the split activations and
    their scales; ``b_mask`` [2T] columns in use. Each MMA's result is scaled before the next one is issued
    (Triton waits on it), so rows per MMA (M) are what amortizes that wait.
    """
    for kk in tl.range(0, tl.cdiv(K, 128), num_stages=STAGES):
        k0 = kk * 128
        s_word = tl.load(s_word_ptrs + kk * 128)  # 512 swizzled bytes between 4-column groups
        acc = _k_step(acc, w_row_ptrs, s_word, b_col_ptrs, bs_col_ptrs, b_mask, k0, 0, K, EVEN_K, FP32_DOT)
        acc = _k_step(acc, w_row_ptrs, s_word, b_col_ptrs, bs_col_ptrs, b_mask, k0, 1, K, EVEN_K, FP32_DOT)
        acc = _k_step(acc, w_row_ptrs, s_word, b_col_ptrs, bs_col_ptrs, b_mask, k0, 2, K, EVEN_K, FP32_DOT)
        acc = _k_step(acc, w_row_ptrs, s_word, b_col_ptrs, bs_col_ptrs, b_mask, k0, 3, K, EVEN_K, FP32_DOT)
    return acc


@triton.jit
def _row_pointers(w_base, s_base, rows_n, stride_wn, scale_tiles):
    """e4m3 row starts and int32 first-scale-word pointers of weight rows ``rows_n`` (int64) of one expert."""
    s_rows = s_base + (rows_n // 128) * (scale_tiles * 512) + (rows_n % 32) * 16 + ((rows_n % 128) // 32) * 4
    return w_base + rows_n * stride_wn, s_rows.to(tl.pointer_type(tl.int32))


@triton.jit
def _term_sum(acc, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr):
    """``[BLOCK_N, 2T]`` (columns term * T + t) -> ``[BLOCK_N, T]``: hi and lo contributions added."""
    return tl.sum(tl.reshape(acc, [BLOCK_N, 2, BLOCK_T]), axis=1)


@triton.jit
def _fc1_f8_tile(b_col_ptrs, bs_col_ptrs, b_mask, w_base, s_base, n0, N_OUT, K, stride_wn, scale_tiles,
                 GATED: tl.constexpr, ACTIVATION: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr,
                 EVEN_K: tl.constexpr, FP32_DOT: tl.constexpr, STAGES: tl.constexpr):
    """``act(W_gate x) [* W_up x]`` ``[BLOCK_N, BLOCK_T]`` fp32 for output columns ``n0 + i`` of one expert.
    Gated: the gate rows and the up rows are ONE ``[2 * BLOCK_N, 32]`` MMA operand (half the waits)."""
    if GATED:
        r = tl.arange(0, 2 * BLOCK_N)
        rows = ((n0 + r % BLOCK_N) % N_OUT + (r // BLOCK_N) * N_OUT).to(tl.int64)  # [gate rows; up rows]
        w_rows, s_words = _row_pointers(w_base, s_base, rows, stride_wn, scale_tiles)
        acc = tl.zeros([2 * BLOCK_N, 2 * BLOCK_T], dtype=tl.float32)
        acc = _gemm_f8(acc, w_rows, s_words, b_col_ptrs, bs_col_ptrs, b_mask, K, EVEN_K, FP32_DOT, STAGES)
        gu = tl.permute(tl.reshape(_term_sum(acc, 2 * BLOCK_N, BLOCK_T), [2, BLOCK_N, BLOCK_T]), [1, 2, 0])
        g, u = tl.split(gu)
        h = _activate(g, u, ACTIVATION)
    else:
        rows = ((n0 + tl.arange(0, BLOCK_N)) % N_OUT).to(tl.int64)
        w_rows, s_words = _row_pointers(w_base, s_base, rows, stride_wn, scale_tiles)
        acc = tl.zeros([BLOCK_N, 2 * BLOCK_T], dtype=tl.float32)
        acc = _gemm_f8(acc, w_rows, s_words, b_col_ptrs, bs_col_ptrs, b_mask, K, EVEN_K, FP32_DOT, STAGES)
        g = _term_sum(acc, BLOCK_N, BLOCK_T)
        h = _activate(g, g, ACTIVATION)
    return h


@triton.jit
def _fc1_f8_kernel(
    xq_ptr,  # [2, T, H] e4m3: split x
    xs_ptr,  # [T, H // 32] fp32
    w_ptr,  # [E, N1, H] e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    iq_ptr,  # [2, max_sorted, I] e4m3 out: split inter, row = padded position
    is_ptr,  # [max_sorted, I // 32] fp32 out
    sorted_pairs_ptr,
    block_expert_ptr,
    num_blocks_ptr,
    N_OUT,
    K,
    stride_xqterm,
    stride_xq,
    stride_xs,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_iqterm,
    stride_iq,
    stride_is,
    TOPK: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    EVEN_K: tl.constexpr,
    FP32_DOT: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Routed FC1 + activation for one ``[BLOCK_N, BLOCK_T]`` tile; writes the split inter rows."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    if pid_b < tl.load(num_blocks_ptr):
        expert = tl.load(block_expert_ptr + pid_b).to(tl.int64)
        positions = pid_b * BLOCK_T + tl.arange(0, BLOCK_T)
        token_mask = tl.load(sorted_pairs_ptr + positions) >= 0
        cols = tl.arange(0, 2 * BLOCK_T)
        col_pairs = tl.load(sorted_pairs_ptr + pid_b * BLOCK_T + cols % BLOCK_T)  # both term halves
        b_mask = col_pairs >= 0
        tok = tl.where(b_mask, col_pairs // TOPK, 0).to(tl.int64)
        b_cols = xq_ptr + (cols // BLOCK_T) * stride_xqterm + tok * stride_xq
        bs_cols = xs_ptr + tok * stride_xs
        h = _fc1_f8_tile(b_cols, bs_cols, b_mask, w_ptr + expert * stride_we, s_ptr + expert * stride_se,
                         pid_n * BLOCK_N, N_OUT, K, stride_wn, scale_tiles, GATED, ACTIVATION, BLOCK_N, BLOCK_T, EVEN_K, FP32_DOT,
                         STAGES)
        _store_split(h, iq_ptr, is_ptr, positions.to(tl.int64), token_mask, pid_n * BLOCK_N, N_OUT, stride_iqterm, stride_iq,
                     stride_is, BLOCK_N, BLOCK_T, FP32_DOT)


@triton.jit
def _fc2_f8_kernel(
    iq_ptr,  # [2, max_sorted, I] e4m3 split inter
    is_ptr,  # [max_sorted, I // 32] fp32
    w_ptr,  # [E, H, I] e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    slot_ptr,  # [rows * topk, H] bf16 out: one row per (token, k) pair
    sorted_pairs_ptr,
    block_expert_ptr,
    num_blocks_ptr,
    N,
    K,
    stride_iqterm,
    stride_iq,
    stride_is,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_slot,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    EVEN_K: tl.constexpr,
    FP32_DOT: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Routed FC2 for one ``[BLOCK_N, BLOCK_T]`` tile; writes each pair's unweighted bf16 row (combine adds)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    if pid_b < tl.load(num_blocks_ptr):
        expert = tl.load(block_expert_ptr + pid_b).to(tl.int64)
        cols = tl.arange(0, 2 * BLOCK_T)
        positions = (pid_b * BLOCK_T + cols % BLOCK_T).to(tl.int64)
        b_mask = tl.load(sorted_pairs_ptr + positions) >= 0
        b_cols = iq_ptr + (cols // BLOCK_T) * stride_iqterm + positions * stride_iq
        bs_cols = is_ptr + positions * stride_is
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_n = (offs_n % N).to(tl.int64)
        w_rows, s_words = _row_pointers(w_ptr + expert * stride_we, s_ptr + expert * stride_se, rows_n, stride_wn,
                                        scale_tiles)
        acc = tl.zeros([BLOCK_N, 2 * BLOCK_T], dtype=tl.float32)
        acc = _gemm_f8(acc, w_rows, s_words, b_cols, bs_cols, b_mask, K, EVEN_K, FP32_DOT, STAGES)
        out = _term_sum(acc, BLOCK_N, BLOCK_T)
        pairs = tl.load(sorted_pairs_ptr + pid_b * BLOCK_T + tl.arange(0, BLOCK_T))
        token_mask = pairs >= 0
        safe_pairs = tl.where(token_mask, pairs, 0).to(tl.int64)
        out_ptrs = slot_ptr + safe_pairs[None, :] * stride_slot + offs_n[:, None]
        tl.store(out_ptrs, out.to(slot_ptr.dtype.element_ty), mask=token_mask[None, :] & (offs_n[:, None] < N))


@triton.jit
def _fc1_f8_direct_kernel(
    xq_ptr,  # [2, T, H] e4m3
    xs_ptr,  # [T, H // 32] fp32
    w_ptr,
    s_ptr,
    iq_ptr,  # [2, rows * topk, I] e4m3 out: row = pair index, already times probs[t, k]
    is_ptr,  # [rows * topk, I // 32] fp32 out
    routing_map_ptr,
    probs_ptr,
    valid_tokens_ptr,
    rows,
    N_OUT,
    K,
    stride_xqterm,
    stride_xq,
    stride_xs,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_iqterm,
    stride_iq,
    stride_is,
    stride_probs,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    EVEN_K: tl.constexpr,
    FP32_DOT: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Small-T FC1, program ``(n tile, pair)``: column 0 of each term half holds the pair's token; writes
    ``probs[t, k] * act(...)`` split into the pair's inter row. Invalid / non-local pairs write nothing."""
    pid_n = tl.program_id(0)
    pair = tl.program_id(1)
    t = pair // TOPK
    valid = tl.minimum(tl.load(valid_tokens_ptr), rows)
    expert = tl.load(routing_map_ptr + pair).to(tl.int32) - local_expert_offset
    if (t < valid) & (expert >= 0) & (expert < E):
        cols = tl.arange(0, 2 * BLOCK_T)
        b_mask = (cols % BLOCK_T) == 0
        b_cols = xq_ptr + (cols // BLOCK_T) * stride_xqterm + t.to(tl.int64) * stride_xq
        bs_cols = xs_ptr + t.to(tl.int64) * stride_xs + cols * 0
        e64 = expert.to(tl.int64)
        h = _fc1_f8_tile(b_cols, bs_cols, b_mask, w_ptr + e64 * stride_we, s_ptr + e64 * stride_se, pid_n * BLOCK_N,
                         N_OUT, K, stride_wn, scale_tiles, GATED, ACTIVATION, BLOCK_N, BLOCK_T, EVEN_K, FP32_DOT, STAGES)
        p = tl.load(probs_ptr + t.to(tl.int64) * stride_probs + pair % TOPK)
        out_cols = tl.arange(0, BLOCK_T)
        _store_split(h * p, iq_ptr, is_ptr, pair.to(tl.int64) + out_cols * 0, out_cols == 0, pid_n * BLOCK_N, N_OUT,
                     stride_iqterm, stride_iq, stride_is, BLOCK_N, BLOCK_T, FP32_DOT)


@triton.jit
def _fc2_f8_combine_kernel(
    iq_ptr,  # [2, rows * topk, I] e4m3 from _fc1_f8_direct_kernel
    is_ptr,  # [rows * topk, I // 32] fp32
    w_ptr,  # [E, H, I] e4m3
    s_ptr,
    out_ptr,  # [>= rows, H] bf16 or fp32
    routing_map_ptr,
    valid_tokens_ptr,
    rows,
    N,
    K,
    stride_iqterm,
    stride_iq,
    stride_is,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_out,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    EVEN_K: tl.constexpr,
    FP32_DOT: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Small-T FC2 + combine, program ``(n tile, token t)``: its top-k experts in fixed order, each a full K
    loop into one fp32 accumulator; ``out[t]`` written directly. Skipped pairs load nothing (exact zeros)."""
    pid_n = tl.program_id(0)
    t = tl.program_id(1)
    valid = t < tl.minimum(tl.load(valid_tokens_ptr), rows)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_n = (offs_n % N).to(tl.int64)
    cols = tl.arange(0, 2 * BLOCK_T)
    col0 = (cols % BLOCK_T) == 0
    acc = tl.zeros([BLOCK_N, 2 * BLOCK_T], dtype=tl.float32)
    for slot in range(0, TOPK):
        pair = t.to(tl.int64) * TOPK + slot
        expert = tl.load(routing_map_ptr + pair).to(tl.int32) - local_expert_offset
        if valid & (expert >= 0) & (expert < E):  # skipped pairs load nothing
            e64 = expert.to(tl.int64)
            w_rows, s_words = _row_pointers(w_ptr + e64 * stride_we, s_ptr + e64 * stride_se, rows_n, stride_wn,
                                            scale_tiles)
            b_cols = iq_ptr + (cols // BLOCK_T) * stride_iqterm + pair * stride_iq
            bs_cols = is_ptr + pair * stride_is + cols * 0
            acc = _gemm_f8(acc, w_rows, s_words, b_cols, bs_cols, col0, K, EVEN_K, FP32_DOT, STAGES)
    out = _term_sum(acc, BLOCK_N, BLOCK_T)
    out_cols = tl.arange(0, BLOCK_T)
    out_ptrs = out_ptr + t.to(tl.int64) * stride_out + offs_n[:, None] + out_cols[None, :] * 0
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=(out_cols == 0)[None, :] & (offs_n[:, None] < N))
