"""@triton.jit code of the fused MXFP8 quantize + 128x4 swizzle (host side in triton.py)."""

import triton
import triton.language as tl


@triton.jit
def mxfp8_quantize_swizzle_kernel(
    source_ptr,  # [E, M, K] bf16/fp16/fp32, last dim contiguous (with USE_TABLE: any tensor of the source dtype)
    source_table_ptr,  # USE_TABLE: int64 [n] addresses of n separate contiguous [M, K] sources
    target_table_ptr,  # USE_TABLE: int32 [n] expert slot each source is written to
    data_ptr,  # [E, M, K] float8_e4m3fn, contiguous
    scale_ptr,  # [E, scale_bytes_per_expert] uint8, swizzled 128x4
    M,
    K,
    source_expert_stride,
    source_row_stride,
    scale_bytes_per_expert,
    col_tiles,  # ceil(K / 32 / 4)
    abort_ptr,  # CHECK_ABORT: int32 [1]; nonzero = write nothing (a scan found a bad source)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_TABLE: tl.constexpr,
    CHECK_ABORT: tl.constexpr,
    ALIGNED: tl.constexpr = False,  # USE_TABLE: every table address is 16-byte aligned (vector loads)
):
    """One program quantizes a [BLOCK_M, BLOCK_K] tile of one expert and writes its swizzled scales.

    Without a table, program axis 2 is the expert of a stacked source. With USE_TABLE, axis 2 indexes a
    table of separate source tensors and their target expert slots (one launch for a whole refit batch).
    With CHECK_ABORT every store is masked off while ``abort_ptr[0] != 0``: a refit validates on the device
    (``nonfinite_scan_kernel``) and writes in the same stream without a host sync in between.
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

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    row_mask = rows < M
    if CHECK_ABORT:
        row_mask = row_mask & (tl.load(abort_ptr) == 0)
    mask = row_mask[:, None] & (cols < K)[None, :]

    source = tl.load(
        source_ptr + expert * source_expert_stride + rows[:, None].to(tl.int64) * source_row_stride + cols[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    blocks = tl.reshape(source, [BLOCK_M, GROUPS, 32])
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
        mask=mask,
    )

    scale_cols = pid_k * GROUPS + tl.arange(0, GROUPS)
    scale_mask = row_mask[:, None] & (scale_cols < K // 32)[None, :]
    tile = (rows[:, None] // 128) * col_tiles + scale_cols[None, :] // 4
    offsets = tile * 512 + (rows[:, None] % 32) * 16 + ((rows[:, None] % 128) // 32) * 4 + scale_cols[None, :] % 4
    tl.store(
        scale_ptr + expert * scale_bytes_per_expert + offsets,
        (dequant_bits >> 23).to(tl.uint8),
        mask=scale_mask,
    )


@triton.jit
def nonfinite_scan_kernel(
    source_ptr,  # any tensor of the sources' dtype (bf16/fp16/fp32): gives the element type
    source_table_ptr,  # int64 [n] addresses of n contiguous sources of NUMEL elements each
    flags_ptr,  # int32 [1 + entries]: [0] = any source bad, [1 + first_entry + i] = source i bad
    NUMEL,
    first_entry,
    BLOCK: tl.constexpr,
    ALIGNED: tl.constexpr = False,  # every table address is 16-byte aligned (vector loads)
):
    """Program (b, i) checks elements [b * BLOCK, (b + 1) * BLOCK) of source i for NaN/Inf; it only ever stores
    1 (flags start at 0), so the flags are the same whatever the program order."""
    entry = tl.program_id(1)
    source = tl.load(source_table_ptr + entry).to(tl.pointer_type(source_ptr.dtype.element_ty))
    if ALIGNED:
        source = tl.multiple_of(source, 16)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(source + offsets, mask=offsets < NUMEL, other=0.0).to(tl.float32)
    bad = tl.max(((values * 0.0) != 0.0).to(tl.int32), axis=0) != 0  # x * 0 is NaN exactly for NaN and +-Inf
    tl.store(flags_ptr, 1, mask=bad)
    tl.store(flags_ptr + 1 + first_entry + entry, 1, mask=bad)
