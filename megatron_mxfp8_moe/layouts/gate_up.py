"""Megatron fc1 ``[gate; up]`` rows <-> FlashInfer fc1 ``[up; gate]`` rows, with exact zero padding.

Megatron-Core 0.19 splits the fc1 output with ``x_glu, x_linear = chunk(x, 2)``, so its gated fc1 weight is
``[gate; up]`` (``[2I, H]``). FlashInfer's trtllm-gen and CUTLASS MoE kernels read ``[up; gate]`` (``[w3; w1]``):
the linear half first, the gated half second. Swapping the halves is a row permutation, applied identically to
the fp8 data rows and to the logical E8M0 scale rows, so nothing is re-quantized.

Padding (the trtllm-gen layouts need ``I`` and ``H`` to be multiples of 128): each half is zero-padded from
``I`` to ``Ip = ceil(I / 128) * 128`` rows and ``K`` to ``Kp = ceil(K / 128) * 128`` columns. A zero fp8 byte
is exactly 0.0 whatever its block scale, so the padded GEMMs produce the same values (the padded fc1 outputs are
0, ``act(0) * 0 == 0`` and ``relu(0) ** 2 == 0``, and they meet zero fc2 columns). Padding scale bytes are 0.

Every function works on any 1-byte dtype (fp8 e4m3 data, uint8 / float8_e8m0fnu scales) and on ``[R, C]`` or
stacks ``[E, R, C]``; rows are dim -2.
"""

import torch

from ..errors import MXFP8InputError

ALIGNMENT = 128  # trtllm-gen MXFP8 needs H % 128 == 0 and I % 128 == 0 (scale shuffle asserts M % 128 == 0)


def round_up(value: int, multiple: int = ALIGNMENT) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value``."""
    return (value + multiple - 1) // multiple * multiple


def padded_fc_rows(rows: int, *, gated: bool) -> int:
    """Padded row count: ``2 * round_up(rows // 2)`` for gated fc1 (each half padded), else ``round_up(rows)``."""
    if gated:
        if rows % 2:
            raise MXFP8InputError(f"rows: a gated fc1 has an even row count [gate; up], got {rows}")
        return 2 * round_up(rows // 2)
    return round_up(rows)


def gate_up_swap_row_indices(rows: int, device=None) -> torch.Tensor:
    """int64 ``[rows]`` source rows of the half swap: ``out[p] = in[(p + rows / 2) % rows]`` (self-inverse)."""
    if rows % 2:
        raise MXFP8InputError(f"rows: a gated fc1 has an even row count [gate; up], got {rows}")
    return (torch.arange(rows, device=device) + rows // 2) % max(rows, 1)


def swap_gate_up_rows(values: torch.Tensor) -> torch.Tensor:
    """``[..., 2I, C]`` ``[gate; up]`` -> ``[..., 2I, C]`` ``[up; gate]`` (a new contiguous tensor).

    The same call maps ``[up; gate]`` back to ``[gate; up]``.
    """
    rows = values.shape[-2]
    if rows % 2:
        raise MXFP8InputError(f"values: a gated fc1 has an even row count [gate; up], got shape {tuple(values.shape)}")
    half = rows // 2
    return torch.cat([values[..., half:, :], values[..., :half, :]], dim=-2)


def to_flashinfer_rows(values: torch.Tensor, *, gated: bool, padded_rows: int, padded_cols: int) -> torch.Tensor:
    """Megatron-ordered ``[..., R, C]`` -> FlashInfer-ordered, zero-padded ``[..., padded_rows, padded_cols]``.

    Gated (``R = 2I``, ``padded_rows = 2 * Ip``): ``out[:I] = up``, ``out[Ip:Ip + I] = gate``, rest 0.
    Non-gated: ``out[:R, :C] = values``, rest 0. ``values`` is data bytes (``C = K``) or logical scale bytes
    (``C = K // 32``). The result has ``values``' dtype (1-byte dtypes only).
    """
    rows, cols = values.shape[-2], values.shape[-1]
    if values.element_size() != 1:
        raise MXFP8InputError(f"values: expected a 1-byte dtype (fp8 / uint8 / e8m0), got {values.dtype}")
    if padded_cols < cols:
        raise MXFP8InputError(f"padded_cols: must be >= {cols}, got {padded_cols}")
    raw = values.view(torch.uint8)
    out = raw.new_zeros((*values.shape[:-2], padded_rows, padded_cols))
    if gated:
        if rows % 2 or padded_rows % 2 or padded_rows // 2 < rows // 2:
            raise MXFP8InputError(
                f"padded_rows: a gated fc1 [gate; up] of {rows} rows needs an even padded_rows >= {rows}, "
                f"got {padded_rows}"
            )
        half, padded_half = rows // 2, padded_rows // 2
        out[..., :half, :cols] = raw[..., half:, :]  # up
        out[..., padded_half : padded_half + half, :cols] = raw[..., :half, :]  # gate
    else:
        if padded_rows < rows:
            raise MXFP8InputError(f"padded_rows: must be >= {rows}, got {padded_rows}")
        out[..., :rows, :cols] = raw
    return out.view(values.dtype)


def from_flashinfer_rows(values: torch.Tensor, *, gated: bool, rows: int, cols: int) -> torch.Tensor:
    """Inverse of ``to_flashinfer_rows``: ``[..., Pr, Pc]`` ``[up; gate]`` padded -> ``[..., rows, cols]`` Megatron order."""
    padded_rows = values.shape[-2]
    if values.shape[-1] < cols or padded_rows < rows:
        raise MXFP8InputError(
            f"values: shape {tuple(values.shape)} is smaller than the logical [{rows}, {cols}]"
        )
    if not gated:
        return values[..., :rows, :cols].contiguous()
    if rows % 2 or padded_rows % 2:
        raise MXFP8InputError(f"rows: a gated fc1 has even row counts, got rows={rows}, padded rows={padded_rows}")
    half, padded_half = rows // 2, padded_rows // 2
    up = values[..., :half, :cols]
    gate = values[..., padded_half : padded_half + half, :cols]
    return torch.cat([gate, up], dim=-2).contiguous()
