"""The cuBLAS / CUTLASS 128x4 block-scale layout ("SWIZZLE_32_4_4") as pure tensor ops.

Source: the block-scaling factors layout section of the cuBLAS documentation
(https://docs.nvidia.com/cuda/cublas/#d-block-scaling-factors-layout).

A logical scale matrix ``[M, C]`` (``C = K // 32``) is zero-padded to ``[Mp, Cp]``
(``Mp = ceil(M / 128) * 128``, ``Cp = ceil(C / 4) * 4``) and stored as 512-byte tiles of 128 rows x 4
columns, tiles in row-major tile order. Byte of logical scale ``(row, col)``::

    tile = (row // 128) * (Cp // 4) + col // 4
    offset = tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4

Stacks ``[E, M, C]`` swizzle each expert on its own: result ``[E, Mp * Cp]``.
"""

import torch

from .constants import SWIZZLE_COLS, SWIZZLE_ROWS


def _ceil_to(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def padded_scale_shape(rows: int, scale_cols: int) -> tuple[int, int]:
    """Logical ``[rows, scale_cols]`` -> padded ``(Mp, Cp)`` of the 128x4 layout."""
    return _ceil_to(rows, SWIZZLE_ROWS), _ceil_to(scale_cols, SWIZZLE_COLS)


def swizzled_scale_numel(rows: int, scale_cols: int) -> int:
    """Bytes of one expert's swizzled scales: ``Mp * Cp``."""
    padded_rows, padded_cols = padded_scale_shape(rows, scale_cols)
    return padded_rows * padded_cols


def swizzle_offset(row, col, scale_cols: int):
    """Flat byte offset of logical scale ``(row, col)``; works on ints and integer tensors."""
    col_tiles = _ceil_to(scale_cols, SWIZZLE_COLS) // SWIZZLE_COLS
    tile = (row // 128) * col_tiles + col // 4
    return tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Logical scales ``[M, C]`` or ``[E, M, C]`` -> swizzled ``[Mp * Cp]`` or ``[E, Mp * Cp]``.

    Works on any 1-byte dtype (uint8, float8_e8m0fnu); padding bytes are zero.
    """
    if scales.dim() not in (2, 3):
        raise ValueError(f"scales must be [M, C] or [E, M, C], got shape {tuple(scales.shape)}")
    stacked = scales if scales.dim() == 3 else scales.unsqueeze(0)
    experts, rows, cols = stacked.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols)
    padded = stacked.new_zeros((experts, padded_rows, padded_cols))
    padded[:, :rows, :cols] = stacked
    tiles = padded.view(experts, padded_rows // 128, 4, 32, padded_cols // 4, 4)
    # [E, row_tile, row_group(4), sub_row(32), col_tile, col(4)] -> [E, row_tile, col_tile, sub_row, row_group, col]
    out = tiles.permute(0, 1, 4, 3, 2, 5).reshape(experts, padded_rows * padded_cols)
    return out if scales.dim() == 3 else out[0]


def unswizzle_scales(swizzled: torch.Tensor, rows: int, scale_cols: int) -> torch.Tensor:
    """Swizzled ``[Mp * Cp]`` or ``[E, Mp * Cp]`` -> logical ``[rows, scale_cols]`` or ``[E, rows, scale_cols]``."""
    padded_rows, padded_cols = padded_scale_shape(rows, scale_cols)
    if swizzled.dim() not in (1, 2) or swizzled.shape[-1] != padded_rows * padded_cols:
        raise ValueError(
            f"swizzled scales for [{rows}, {scale_cols}] must have last dim {padded_rows * padded_cols}, "
            f"got shape {tuple(swizzled.shape)}"
        )
    stacked = swizzled if swizzled.dim() == 2 else swizzled.unsqueeze(0)
    experts = stacked.shape[0]
    tiles = stacked.reshape(experts, padded_rows // 128, padded_cols // 4, 32, 4, 4)
    # [E, row_tile, col_tile, sub_row, row_group, col] -> [E, row_tile, row_group, sub_row, col_tile, col]
    logical = tiles.permute(0, 1, 4, 3, 2, 5).reshape(experts, padded_rows, padded_cols)[:, :rows, :scale_cols]
    logical = logical.contiguous()
    return logical if swizzled.dim() == 2 else logical[0]
