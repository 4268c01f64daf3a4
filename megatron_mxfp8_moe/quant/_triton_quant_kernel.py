"""@triton.jit code of the fused MXFP8 quantize + 128x4 swizzle (host side in triton.py)."""

import triton
import triton.language as tl


@triton.jit
def _maximum_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit(do_not_specialize=["first_entry"])
def mxfp8_quantize_swizzle_kernel(
    source_ptr,  # [E, M, K] bf16/fp16/fp32, last dim contiguous (with USE_TABLE: any tensor of the source dtype)
    source_table_ptr,  # USE_TABLE: int64 [n] addresses of n separate contiguous [M, K] sources
    target_table_ptr,  # USE_TABLE: int64 [n] expert slot each source is written to
    data_ptr,  # [E, M, K] float8_e4m3fn, contiguous
    scale_ptr,  # [E, scale_bytes_per_expert] uint8, swizzled 128x4
    M,
    K,
    source_expert_stride,
    source_row_stride,
    scale_bytes_per_expert,
    col_tiles,  # ceil(K / 32 / 4)
    abort_ptr,  # CHECK_ABORT: int32 [1]; nonzero = write nothing (a scan found a bad source)
    nonfinite_ptr,  # FLAG_NONFINITE: int32 [1 + entries]: [0] = any source bad, [1 + first_entry + i] = source i bad
    first_entry,  # FLAG_NONFINITE: the flag of this launch's first source (the stacked / single source: its only one)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_TABLE: tl.constexpr,
    CHECK_ABORT: tl.constexpr,
    ALIGNED: tl.constexpr = False,  # USE_TABLE: every table address is 16-byte aligned (vector loads)
    ROW_TILES: tl.constexpr = 1,  # row tiles per program (a table's address is loaded once for all of them)
    FLAG_NONFINITE: tl.constexpr = False,  # flag the sources holding NaN/Inf while writing them (nothing is held back)
):
    """One program quantizes ROW_TILES [BLOCK_M, BLOCK_K] tiles (rows ``pid_m * ROW_TILES * BLOCK_M`` on) of one
    expert and writes their swizzled scales.

    Without a table, program axis 2 is the expert of a stacked source. With USE_TABLE, axis 2 indexes a
    table of separate source tensors and their target expert slots (one launch for a whole refit batch).
    With CHECK_ABORT every STORE is masked off while ``abort_ptr[0] != 0``: a refit validates on the device
    (``nonfinite_scan_kernel``) and writes in the same stream without a host sync in between. The loads do
    not depend on the flag (it is loaded alongside them), so only the stores wait for it.
    With FLAG_NONFINITE a program that reads a NaN/Inf sets ``nonfinite_ptr[0]`` and its source's flag (stores
    of 1 only, so the flags do not depend on the program order); its stores are not held back: a refit that
    asked for ``nonfinite="detect"`` reads the flags after the write and reports what was written.
    """
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    GROUPS: tl.constexpr = BLOCK_K // 32
    if USE_TABLE:
        entry = tl.program_id(2)
        source_ptr = tl.load(source_table_ptr + entry).to(tl.pointer_type(source_ptr.dtype.element_ty))
        if ALIGNED:  # a pointer loaded from memory carries no alignment facts: say it, or loads stay scalar
            source_ptr = tl.multiple_of(source_ptr, 16)
        expert = tl.load(target_table_ptr + entry).to(tl.int64)
        source_expert_stride = 0
    else:
        expert = tl.program_id(2).to(tl.int64)
    if CHECK_ABORT:
        write = tl.load(abort_ptr) == 0
    else:
        write = True

    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    col_mask = cols < K
    scale_cols = pid_k * GROUPS + tl.arange(0, GROUPS)
    scale_col_mask = scale_cols < K // 32
    for tile in tl.static_range(ROW_TILES):
        rows = (pid_m * ROW_TILES + tile) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        source = tl.load(
            source_ptr + expert * source_expert_stride + rows[:, None].to(tl.int64) * source_row_stride
            + cols[None, :],
            mask=mask,
            other=0.0,
        ).to(tl.float32)
        blocks = tl.reshape(source, [BLOCK_M, GROUPS, 32])
        if FLAG_NONFINITE:
            # NaN-propagating block maxima (masked lanes hold 0.0): a NaN / Inf one fails the bound. Each program
            # stores 1 where its blocks are bad, lane by lane: no reduction across warps, no store when all are good
            amax = tl.reduce(tl.abs(blocks), 2, _maximum_keeping_nan)  # [BLOCK_M, GROUPS]
            bad = ~(amax <= 3.4028234663852886e38)
            lanes = tl.zeros([BLOCK_M, GROUPS], dtype=tl.int32)
            tl.store(nonfinite_ptr + lanes, 1, mask=bad)
            tl.store(nonfinite_ptr + 1 + first_entry + (tl.program_id(2) if USE_TABLE else 0) + lanes, 1, mask=bad)
        else:
            amax = tl.max(tl.abs(blocks), axis=2)  # [BLOCK_M, GROUPS]
        dequant_bits = ((amax / 448.0).to(tl.uint32, bitcast=True) + 0x007FFFFF) & 0x7F800000
        dequant = dequant_bits.to(tl.float32, bitcast=True)
        multiplier = tl.where(dequant == 0, 0.0, 1.0 / dequant)
        scaled = blocks * multiplier[:, :, None]
        scaled = tl.minimum(tl.maximum(scaled, -448.0), 448.0)
        quantized = tl.reshape(scaled, [BLOCK_M, BLOCK_K]).to(tl.float8e4nv)
        tl.store(
            data_ptr + expert * M * K + rows[:, None].to(tl.int64) * K + cols[None, :],
            quantized,
            mask=mask & write,
        )
        tile_index = (rows[:, None] // 128) * col_tiles + scale_cols[None, :] // 4
        offsets = (tile_index * 512 + (rows[:, None] % 32) * 16 + ((rows[:, None] % 128) // 32) * 4
                   + scale_cols[None, :] % 4)
        tl.store(
            scale_ptr + expert * scale_bytes_per_expert + offsets,
            (dequant_bits >> 23).to(tl.uint8),
            mask=row_mask[:, None] & scale_col_mask[None, :] & write,
        )


@triton.jit(do_not_specialize=["first_entry", "iterations"])
def nonfinite_scan_kernel(
    source_ptr,  # USE_TABLE=False: the one source, as int32 (or int16) words; else any tensor of that word type
    source_table_ptr,  # USE_TABLE: int64 [n] addresses of n contiguous sources of WORDS words each
    flags_ptr,  # int32 [1 + entries]: [0] = any source bad, [1 + first_entry + i] = source i bad
    WORDS,  # words per source
    first_entry,
    iterations,  # full blocks per program (the grid's axis 0 covers cdiv(WORDS // BLOCK, iterations))
    EXPONENT: tl.constexpr,  # the exponent field of every value in a word (bf16 pair 0x7F807F80, fp32 0x7F800000)
    EXPONENT_ONE: tl.constexpr,  # the lowest exponent bit of every value (bf16 pair 0x00800080)
    CARRY: tl.constexpr,  # the bit above every exponent field, as a signed int32 (bf16 pair 0x80008000)
    BLOCK: tl.constexpr,  # words per program and iteration
    USE_TABLE: tl.constexpr,
    ALIGNED: tl.constexpr = False,  # USE_TABLE: every table address is 16-byte aligned (vector loads)
):
    """Program (p, i) checks full blocks ``[p * iterations, (p + 1) * iterations)`` of source i for NaN/Inf
    (program 0 also the partial last block) on the raw bits: a value is NaN/Inf exactly when its exponent field
    is all ones, i.e. when ``(bits & EXPONENT) + EXPONENT_ONE`` carries into the bit above the field (the
    fields of the values sharing a word never carry into each other). The carries are OR-ed in registers;
    one reduction at the end, and a program stores its two flags (1; flags start at 0) only when it found
    one, so the flags are the same whatever the program order."""
    entry = tl.program_id(1)
    program = tl.program_id(0)
    if USE_TABLE:
        source = tl.load(source_table_ptr + entry).to(tl.pointer_type(source_ptr.dtype.element_ty))
        if ALIGNED:  # a pointer loaded from memory carries no alignment facts: say it, or loads stay scalar
            source = tl.multiple_of(source, 16)
    else:
        source = source_ptr
    lanes = tl.arange(0, BLOCK)
    carries = tl.zeros([BLOCK], dtype=tl.int32)
    full = WORDS // BLOCK
    first = program * iterations
    for block in range(first, tl.minimum(first + iterations, full)):
        words = tl.load(source + (lanes.to(tl.int64) + block * BLOCK)).to(tl.int32)  # unmasked: a full block
        carries = carries | ((words & EXPONENT) + EXPONENT_ONE)
    tail = lanes.to(tl.int64) + full * BLOCK  # the partial last block: program 0 only (a masked load elsewhere)
    words = tl.load(source + tail, mask=(tail < WORDS) & (program == 0), other=0).to(tl.int32)
    carries = carries | ((words & EXPONENT) + EXPONENT_ONE)
    bad = tl.max(((carries & CARRY) != 0).to(tl.int32), axis=0) != 0
    tl.store(flags_ptr, 1, mask=bad)
    tl.store(flags_ptr + 1 + first_entry + entry, 1, mask=bad)
