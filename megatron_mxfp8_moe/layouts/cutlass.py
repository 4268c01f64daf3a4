"""FlashInfer CUTLASS MXFP8xMXFP8 MoE weights: zero-copy views of the canonical stack where possible.

canonical stack ``[E, M, K]`` + 128x4 scales ``[E, Mp * Cp]`` -> ``FlashInferCutlassMXFP8Weight``:
data fp8 ``[E, M, K]`` plain row-major, scales the same 128x4-swizzled bytes viewed as int32
``[E, Mp, Cp // 4]`` = ``[E, round_up(M, 128), round_up(K, 128) // 128]`` (one int32 = 4 adjacent swizzled bytes
= 4 consecutive K blocks of one row; what FlashInfer's binding checks and ``getOffsetWeightSF`` strides over).

Gate/up order: CUTLASS reads gated fc1 as ``[up; gate]`` (the gate at ``+inter_size``), Megatron stores
``[gate; up]``. So:

- fc2 and non-gated fc1 (squared ReLU): **zero-copy** views; canonical writes are seen immediately.
- gated fc1: a zero-copy view cannot swap the halves, so the least-copy correct choice is **one swapped copy**
  of data and scales (``[E, 2I, K]`` fp8 + ``[E, round_up(2I, 128) * Cp]`` swizzled bytes, the canonical
  size): the logical scale rows are swapped with the data rows and re-interleaved, nothing is re-quantized.
  ``attach_cutlass_mxfp8_writeback`` refreshes an expert's slot of the copy from each canonical write.
  FlashInfer checks gated fc1 scales as ``[E, 2 * round_up(I, 128), ...]`` while the kernel strides experts by
  ``round_up(2I, 128)`` rows; the two agree only when ``I % 128 == 0`` or ``I % 128 > 64`` (e.g. I = 96), so
  other ``I`` are rejected for gated fc1.

Alignment: CUTLASS needs ``H`` and ``I`` multiples of 16 (TMA); canonical tensors already have ``K % 32 == 0``.
"""

import dataclasses
from typing import Callable, Optional

import torch

from ..errors import MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE
from ..format.swizzle import padded_scale_shape, swizzle_scales, unswizzle_scales
from ..tensor import MXFP8Tensor
from .gate_up import round_up, swap_gate_up_rows
from .writeback import attach_expert_writeback, check_canonical


@dataclasses.dataclass(frozen=True)
class FlashInferCutlassMXFP8Weight:
    """A CUTLASS MXFP8 weight stack (fc1 or fc2 of ``E`` local experts). Not thread-safe.

    Frozen fields, mutable storage: a refresh (``out=`` or the writeback hook) rewrites bytes in place.
    """

    data: torch.Tensor  # fp8 e4m3 [E, M, K]: canonical view, or the [up; gate] copy for gated fc1
    scale: torch.Tensor  # int32 [E, round_up(M, 128), round_up(K, 128) // 128]: 128x4-swizzled E8M0 bytes, 4 per int32
    input_scale: torch.Tensor  # fp32 [E], all ones: CUTLASS's per-expert "global scale" (GEMM alpha)
    logical_rows: int  # canonical M: 2I gated fc1, I non-gated fc1, H fc2
    logical_cols: int  # canonical K: H fc1, I fc2
    gated: bool = False  # True: rows are [up; gate] (a copy); False: zero-copy view of the canonical stack

    @property
    def num_experts(self) -> int:
        """Local experts ``E``."""
        return self.data.shape[0]


def _check_gated_rows(rows: int) -> None:
    if rows % 2:
        raise MXFP8InputError(f"weight: a gated fc1 [gate; up] has an even row count, got {rows}")
    intermediate = rows // 2
    if round_up(rows) != 2 * round_up(intermediate):
        raise MXFP8InputError(
            f"weight: gated fc1 with I = {intermediate}: FlashInfer CUTLASS checks 2 * round_up(I, 128) = "
            f"{2 * round_up(intermediate)} scale rows but strides experts by round_up(2I, 128) = {round_up(rows)}; "
            f"use I % 128 == 0 (or I % 128 > 64), e.g. pad I to {round_up(intermediate)}"
        )


def _int32_view(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Swizzled bytes ``[E, Mp * Cp]`` (any 1-byte dtype) -> int32 ``[E, Mp, Cp // 4]`` (a view)."""
    padded_rows, padded_cols = padded_scale_shape(rows, cols // BLOCK_SIZE)
    return swizzled.view(torch.uint8).view(swizzled.shape[0], padded_rows, padded_cols).view(torch.int32)


def _swapped_copy(data: torch.Tensor, logical_scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 ``[E, 2I, K]`` + uint8 ``[E, 2I, K/32]`` (``[gate; up]``) -> ``[up; gate]`` data, swizzled ``[E, Mp*Cp]``."""
    swapped_data = swap_gate_up_rows(data.view(torch.uint8))  # [E, 2I, K]
    swapped_scales = swizzle_scales(swap_gate_up_rows(logical_scales.view(torch.uint8)))  # [E, Mp * Cp]
    return swapped_data, swapped_scales


def prepare_cutlass_mxfp8_weights(
    weight: MXFP8Tensor, out: Optional[FlashInferCutlassMXFP8Weight] = None, *, gated: bool
) -> FlashInferCutlassMXFP8Weight:
    """CUTLASS MXFP8 weights from a canonical stack (data fp8 ``[E, M, K]``, swizzled E8M0 ``[E, Mp * Cp]``).

    ``gated=False`` (fc2, non-gated fc1): zero-copy; ``data`` is the canonical data and ``scale`` an int32 view of
    the canonical scale bytes. ``gated=True`` (SwiGLU/GeGLU fc1, Megatron ``[gate; up]``): a swapped ``[up; gate]``
    copy (see the module docstring). ``out``: a previous result of the same shape; bytes are refreshed in its
    storage (``data_ptr()`` kept; a no-op for views of this same stack). A changed shape raises MXFP8InputError.
    """
    check_canonical(weight, "weight", stacked=True)
    experts, rows, cols = weight.shape
    if gated:
        _check_gated_rows(rows)
    if out is not None:
        if not isinstance(out, FlashInferCutlassMXFP8Weight):
            raise MXFP8InputError(f"out: expected a FlashInferCutlassMXFP8Weight, got {type(out).__name__}")
        got = (out.num_experts, out.logical_rows, out.logical_cols, out.gated)
        if got != (experts, rows, cols, gated):
            raise MXFP8InputError(
                f"out: prepared for (experts, rows, cols, gated) = {got}, but the weight is "
                f"{(experts, rows, cols, gated)}; an in-place refresh cannot change the shape"
            )
        if out.data.device != weight.device:
            raise MXFP8InputError(f"out: lives on {out.data.device}, the weight on {weight.device}")
    if gated:
        data, swizzled = _swapped_copy(weight.data, weight.logical_scales())
        data = data.view(DATA_DTYPE)
    else:
        data, swizzled = weight.data, weight.scale
    scale = _int32_view(swizzled, rows, cols)
    if out is None:
        input_scale = torch.ones(experts, dtype=torch.float32, device=weight.device)
        return FlashInferCutlassMXFP8Weight(data, scale, input_scale, rows, cols, gated)
    if out.data.data_ptr() != data.data_ptr():
        out.data.copy_(data)
    if out.scale.data_ptr() != scale.data_ptr():
        out.scale.copy_(scale)
    out.input_scale.fill_(1.0)
    return out


def unpack_cutlass_mxfp8_weights(cutlass: FlashInferCutlassMXFP8Weight) -> tuple[torch.Tensor, torch.Tensor]:
    """Invert ``prepare_cutlass_mxfp8_weights``: (data fp8 ``[E, M, K]``, logical scales uint8 ``[E, M, K // 32]``).

    Megatron order (``[gate; up]`` for gated fc1), bit-identical to the canonical bytes (always a copy).
    """
    experts = cutlass.num_experts
    scales = unswizzle_scales(cutlass.scale.view(torch.uint8).reshape(experts, -1), cutlass.logical_rows,
                              cutlass.logical_cols // BLOCK_SIZE)  # [E, M, K/32]
    data = cutlass.data.view(torch.uint8)
    if cutlass.gated:
        data, scales = swap_gate_up_rows(data), swap_gate_up_rows(scales)
    return data.clone().view(DATA_DTYPE), scales


def unpack_cutlass_mxfp8_weights_flashinfer_order(cutlass: FlashInferCutlassMXFP8Weight):
    """The bytes as the kernel reads them: (fp8 ``[E, M, K]`` ``[up; gate]`` for gated fc1, uint8 ``[E, M, K // 32]``)."""
    scales = unswizzle_scales(cutlass.scale.view(torch.uint8).reshape(cutlass.num_experts, -1),
                              cutlass.logical_rows, cutlass.logical_cols // BLOCK_SIZE)
    return cutlass.data.clone(), scales


def refresh_cutlass_mxfp8_expert_(
    cutlass: FlashInferCutlassMXFP8Weight, expert: int, data: torch.Tensor, scale: torch.Tensor
) -> None:
    """Rewrite expert ``expert`` of ``cutlass`` from canonical bytes (fp8 ``[M, K]``, swizzled ``[Mp * Cp]``).

    For a zero-copy view whose storage already holds these bytes this is a no-op.
    """
    if not 0 <= expert < cutlass.num_experts:
        raise MXFP8InputError(f"expert: must be in [0, {cutlass.num_experts}), got {expert}")
    if tuple(data.shape) != (cutlass.logical_rows, cutlass.logical_cols):
        raise MXFP8InputError(
            f"data: shape must be ({cutlass.logical_rows}, {cutlass.logical_cols}), got {tuple(data.shape)}"
        )
    target_data = cutlass.data[expert]
    target_scale = cutlass.scale[expert].view(torch.uint8).reshape(-1)
    if cutlass.gated:
        logical = unswizzle_scales(scale.view(torch.uint8).reshape(-1), cutlass.logical_rows,
                                   cutlass.logical_cols // BLOCK_SIZE)
        swapped_data, swapped_scales = _swapped_copy(data.unsqueeze(0), logical.unsqueeze(0))
        target_data.view(torch.uint8).copy_(swapped_data[0])
        target_scale.copy_(swapped_scales[0])
        return
    if target_data.data_ptr() != data.data_ptr():
        target_data.copy_(data)
    if target_scale.data_ptr() != scale.data_ptr():
        target_scale.copy_(scale.view(torch.uint8).reshape(-1))


def attach_cutlass_mxfp8_writeback(
    weight: MXFP8Tensor, cutlass: FlashInferCutlassMXFP8Weight, expert: int
) -> Callable[[], None]:
    """Keep expert ``expert`` of ``cutlass`` in sync with canonical ``weight`` (``[M, K]``, one expert).

    Needed for the gated fc1 copy; for zero-copy views it only matters after ``release_storage_()``
    (writes then land in temporaries). Returns a function that detaches the hook.
    """
    return attach_expert_writeback(weight, cutlass, expert, refresh_cutlass_mxfp8_expert_, "CUTLASS")
