"""The Hopper (SM90) Triton MoE weight layout: canonical fp8 bytes shared zero-copy, scales unswizzled.

canonical stack (MXFP8Tensor, scales in the cuBLAS 128x4 swizzle) -> ``HopperMXFP8Weight``:

- ``data``: ``float8_e4m3fn`` ``[E, M, K]``, K contiguous. By default this *is* the canonical stack's
  storage (same ``data_ptr()``), so the fp8 bytes exist once in memory.
- ``scale``: ``uint8`` ``[E, M, K // 32]``, the logical E8M0 bytes (byte ``b`` means ``2 ** (b - 127)``),
  row-major. The Triton kernel loads a ``[BLOCK_N, BLOCK_K // 32]`` tile of it per weight tile; the 128x4
  swizzle is a Blackwell tcgen05 requirement and buys nothing on Hopper (see
  ``/work/shared/reference/hopper_mxfp8.md`` section 7.4).

Writeback: ``repack_hopper_expert_(weight, expert, data, scale)`` refreshes one expert in place and has the
shape of a ``MXFP8Tensor`` write hook once ``weight`` and ``expert`` are bound (``functools.partial``).
``unpack_hopper_mxfp8_weights`` is the inverse of ``prepare_hopper_mxfp8_weights`` (bit-exact).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..errors import MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE, SCALE_DTYPE
from ..format.swizzle import swizzle_scales, swizzled_scale_numel, unswizzle_scales
from ..tensor import MXFP8Tensor

LAYOUT_TAG = "hopper-logical-scales-v1"


@dataclasses.dataclass
class HopperMXFP8Weight:
    """A weight stack in the Hopper Triton layout. Not thread-safe; refresh it only between kernel launches."""

    data: torch.Tensor  # float8_e4m3fn [E, M, K], K contiguous (often the canonical storage itself)
    scale: torch.Tensor  # uint8 [E, M, K // 32], logical E8M0 bytes, row-major
    layout: str = LAYOUT_TAG  # explicit layout tag, checked by the kernel launcher

    @property
    def shape(self) -> torch.Size:
        """Logical ``[E, M, K]``."""
        return self.data.shape

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def num_experts(self) -> int:
        return self.data.shape[0]


def _check_stack(weight: MXFP8Tensor) -> tuple[int, int, int]:
    if not isinstance(weight, MXFP8Tensor):
        raise MXFP8InputError(f"weight: expected a canonical MXFP8Tensor stack, got {type(weight).__name__}")
    if not weight.is_stacked:
        raise MXFP8InputError(f"weight: expected a stack [E, M, K], got shape {tuple(weight.shape)}")
    experts, rows, cols = weight.shape
    return experts, rows, cols


def prepare_hopper_mxfp8_weights(
    weight: MXFP8Tensor, out: Optional[HopperMXFP8Weight] = None, *, share_data: bool = True
) -> HopperMXFP8Weight:
    """Build (or refresh ``out`` in place) the Hopper layout of a canonical stack ``[E, M, K]``; no requantizing.

    ``share_data=True`` (default) uses the canonical fp8 storage zero-copy; otherwise the bytes are copied.
    With ``out`` given, its ``data_ptr()``s stay the same; a changed shape raises ``MXFP8InputError``.
    """
    experts, rows, cols = _check_stack(weight)
    scales = unswizzle_scales(weight.scale_bytes(), rows, cols // BLOCK_SIZE)  # [E, M, K // 32] uint8
    if out is None:
        data = weight.data if share_data else weight.data.clone()
        return HopperMXFP8Weight(data=data, scale=scales.contiguous())
    if out.layout != LAYOUT_TAG:
        raise MXFP8InputError(f"out: layout {out.layout!r} is not {LAYOUT_TAG!r}")
    if tuple(out.data.shape) != (experts, rows, cols) or tuple(out.scale.shape) != tuple(scales.shape):
        raise MXFP8InputError(
            f"out: shape changed: stack is {(experts, rows, cols)}, out holds data {tuple(out.data.shape)} "
            f"and scales {tuple(out.scale.shape)}; build a new one instead of refreshing"
        )
    if out.data.data_ptr() != weight.data.data_ptr():
        out.data.copy_(weight.data)
    out.scale.copy_(scales)
    return out


def repack_hopper_expert_(
    weight: HopperMXFP8Weight, expert: int, data: torch.Tensor, scale: torch.Tensor
) -> None:
    """Refresh expert ``expert`` of ``weight`` in place from its canonical bytes.

    ``data``: float8_e4m3fn ``[M, K]``; ``scale``: the swizzled E8M0 bytes ``[Mp * Cp]`` (any 1-byte dtype).
    Bind ``weight`` and ``expert`` with ``functools.partial`` and pass the rest as an ``MXFP8Tensor`` write
    hook ``hook(tensor, data, scale)`` via ``lambda t, d, s: repack_hopper_expert_(weight, i, d, s)``.
    """
    experts, rows, cols = weight.data.shape
    if not 0 <= expert < experts:
        raise MXFP8InputError(f"expert: {expert} out of range [0, {experts})")
    if tuple(data.shape) != (rows, cols) or data.dtype != DATA_DTYPE:
        raise MXFP8InputError(
            f"data: expected float8_e4m3fn {(rows, cols)}, got {data.dtype} {tuple(data.shape)}"
        )
    if scale.numel() != swizzled_scale_numel(rows, cols // BLOCK_SIZE):
        raise MXFP8InputError(
            f"scale: expected {swizzled_scale_numel(rows, cols // BLOCK_SIZE)} swizzled bytes, got {scale.numel()}"
        )
    target = weight.data[expert]
    if target.data_ptr() != data.data_ptr():
        target.copy_(data)
    weight.scale[expert].copy_(unswizzle_scales(scale.reshape(-1).view(torch.uint8), rows, cols // BLOCK_SIZE))


def unpack_hopper_mxfp8_weights(weight: HopperMXFP8Weight) -> MXFP8Tensor:
    """The inverse of ``prepare_hopper_mxfp8_weights``: a new canonical stack (copies, swizzled scales)."""
    if weight.layout != LAYOUT_TAG:
        raise MXFP8InputError(f"weight: layout {weight.layout!r} is not {LAYOUT_TAG!r}")
    swizzled = swizzle_scales(weight.scale.view(torch.uint8))  # [E, Mp * Cp]
    return MXFP8Tensor(weight.data.clone(), swizzled.view(SCALE_DTYPE))


__all__ = [
    "HopperMXFP8Weight",
    "LAYOUT_TAG",
    "prepare_hopper_mxfp8_weights",
    "repack_hopper_expert_",
    "unpack_hopper_mxfp8_weights",
]
