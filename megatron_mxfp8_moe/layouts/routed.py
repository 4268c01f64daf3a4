"""TRT-LLM (trtllm-gen) Major-K MXFP8 weight layout, built from canonical bytes without re-quantizing.

canonical stack ``[E, M, K]`` + 128x4 scales -> ``[up; gate]`` + zero pad (``gate_up.py``) -> gated row reorder
-> ``shuffle_matrix_a`` row shuffle (epilogue_tile_m = 128, block 32) on data AND logical scale rows
-> 128x4 interleave of the permuted scales -> ``FlashInferRoutedMXFP8Weight``.

Index math (FlashInfer ``flashinfer/utils.py`` ``get_shuffle_matrix_a_row_indices`` and
``flashinfer/fused_moe/core.py`` ``get_reorder_rows_for_gated_act_gemm_row_indices``; reimplemented here, and
tested against those functions where flashinfer imports). Output row ``p`` takes input row ``src(p)``:

- gated reorder (``M`` even): ``out[2i] = in[i]``, ``out[2i + 1] = in[M/2 + i]`` -> ``[up0, gate0, up1, gate1, ...]``;
- shuffle, block ``B = 32`` (``epilogue_tile_m % 128 == 0``, else 16): ``out[bB + q] = in[bB + (q % 8)(B/8) + q // 8]``;
- combined: ``final = in[reorder[shuffle]]`` (reorder first, then shuffle); non-gated uses ``arange`` for reorder.

The scales get exactly the same row permutation as the data, and are then 128x4-interleaved (permute first,
then interleave: FlashInfer bug #4087). Because padded rows are a multiple of 128 and padded ``K / 32`` a
multiple of 4, the interleaved buffer has exactly the logical size and is stored viewed as
``[E, padded_rows, padded_cols // 32]`` (the ``reshape_as`` FlashInfer's own preparation does).

Refit: ``attach_routed_mxfp8_writeback`` registers a write hook on one canonical expert weight; each
``quantize_`` / ``copy_`` repacks that expert's slot in place (same storage, same bytes as a fresh prepare).
"""

import dataclasses
import functools
from typing import Callable, Optional

import torch

from ..errors import MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE
from ..format.swizzle import swizzle_scales, unswizzle_scales
from ..tensor import MXFP8Tensor
from .gate_up import from_flashinfer_rows, padded_fc_rows, round_up, to_flashinfer_rows
from .writeback import attach_expert_writeback, check_canonical

EPILOGUE_TILE_M = 128  # MXFP8 uses 128 (64 is DeepSeekFp8's); "depends on the kernel internals" upstream


def shuffle_block_size(epilogue_tile_m: int = EPILOGUE_TILE_M) -> int:
    """Rows per shuffle block: 32 when ``epilogue_tile_m % 128 == 0``, else 16."""
    return 32 if epilogue_tile_m % 128 == 0 else 16


def gated_reorder_row_indices(rows: int) -> torch.Tensor:
    """int64 ``[rows]`` source rows of the gated reorder: ``out[2i] = i``, ``out[2i + 1] = rows / 2 + i``."""
    if rows % 2:
        raise MXFP8InputError(f"rows: the gated reorder needs an even row count, got {rows}")
    half = torch.arange(rows // 2, dtype=torch.int64)
    return torch.stack([half, half + rows // 2], dim=1).reshape(-1)  # [rows]


def shuffle_row_indices(rows: int, epilogue_tile_m: int = EPILOGUE_TILE_M) -> torch.Tensor:
    """int64 ``[rows]`` source rows of ``shuffle_matrix_a``: ``out[bB + q] = in[bB + (q % 8)(B / 8) + q // 8]``."""
    block = shuffle_block_size(epilogue_tile_m)
    if rows % block:
        raise MXFP8InputError(f"rows: shuffle_matrix_a needs a multiple of {block} rows, got {rows}")
    position = torch.arange(rows, dtype=torch.int64)
    inner = position % block
    return position - inner + (inner % 8) * (block // 8) + inner // 8  # [rows]


@functools.lru_cache(maxsize=64)
def _routed_row_indices_cpu(rows: int, gated: bool, epilogue_tile_m: int) -> torch.Tensor:
    reorder = gated_reorder_row_indices(rows) if gated else torch.arange(rows, dtype=torch.int64)
    return reorder[shuffle_row_indices(rows, epilogue_tile_m)]


def routed_row_indices(rows: int, *, gated: bool, epilogue_tile_m: int = EPILOGUE_TILE_M, device=None) -> torch.Tensor:
    """int64 ``[rows]``: prepared row ``p`` holds padded ``[up; gate]`` row ``routed_row_indices(...)[p]``."""
    return _routed_row_indices_cpu(rows, gated, epilogue_tile_m).to(device or "cpu")


@dataclasses.dataclass(frozen=True)
class FlashInferRoutedMXFP8Weight:
    """A prepared trtllm-gen MXFP8 weight stack (fc1 or fc2 of ``E`` local experts).

    Frozen fields, mutable storage: refits rewrite ``data`` / ``scale`` in place (``out=`` or the writeback
    hook), so CUDA graphs that captured their addresses stay valid. Not thread-safe.
    """

    data: torch.Tensor  # fp8 e4m3 [E, padded_rows, padded_cols]: [up; gate] (gated), reordered + shuffled rows
    scale: torch.Tensor  # uint8 E8M0 [E, padded_rows, padded_cols // 32]: same row permutation, then 128x4 interleave
    logical_rows: int  # canonical M: 2I for gated fc1 ([gate; up]), I for non-gated fc1, H for fc2
    logical_cols: int  # canonical K: H for fc1, I for fc2
    padded_rows: int  # 2 * round_up(I, 128) (gated fc1) or round_up(M, 128)
    padded_cols: int  # round_up(K, 128)
    gated: bool = False  # True for a gated fc1: halves swapped to [up; gate] and gated-reordered

    @property
    def num_experts(self) -> int:
        """Local experts ``E`` (dim 0 of ``data``)."""
        return self.data.shape[0]


def _pack_routed(data: torch.Tensor, logical_scales: torch.Tensor, *, gated: bool, padded_rows: int,
                 padded_cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """data fp8 ``[E, M, K]`` + uint8 ``[E, M, K/32]`` -> (uint8 ``[E, Pr, Pc]``, uint8 ``[E, Pr, Pc/32]``)."""
    experts = data.shape[0]
    padded_data = to_flashinfer_rows(data.view(torch.uint8), gated=gated, padded_rows=padded_rows,
                                     padded_cols=padded_cols)  # [E, Pr, Pc]
    padded_scales = to_flashinfer_rows(logical_scales.view(torch.uint8), gated=gated, padded_rows=padded_rows,
                                       padded_cols=padded_cols // BLOCK_SIZE)  # [E, Pr, Pc/32]
    index = routed_row_indices(padded_rows, gated=gated, device=data.device)
    shuffled_data = padded_data.index_select(-2, index)  # [E, Pr, Pc]
    shuffled_scales = padded_scales.index_select(-2, index)  # [E, Pr, Pc/32]
    interleaved = swizzle_scales(shuffled_scales)  # [E, Pr * Pc/32], no padding since Pr%128 == (Pc/32)%4 == 0
    return shuffled_data, interleaved.view(experts, padded_rows, padded_cols // BLOCK_SIZE)


def prepare_routed_mxfp8_weights(
    weight: MXFP8Tensor, out: Optional[FlashInferRoutedMXFP8Weight] = None, *, gated: bool
) -> FlashInferRoutedMXFP8Weight:
    """Repack a canonical stack into the trtllm-gen Major-K layout (no re-quantization).

    ``weight``: MXFP8Tensor stack, data fp8 e4m3 ``[E, M, K]``, scales 128x4-swizzled E8M0 ``[E, Mp * Cp]``.
    Megatron order: gated fc1 is ``[gate; up]`` with ``M = 2I``. ``gated``: True only for the fc1 of a gated
    activation (SwiGLU / GeGLU); fc2 and non-gated fc1 pass False.
    ``out``: a previous result for the same shapes; its storage is rewritten in place (``data_ptr()`` kept).
    A different expert count, shape, ``gated`` or device raises MXFP8InputError before any byte is written.
    Returns data fp8 ``[E, Pr, Pc]`` and scale uint8 ``[E, Pr, Pc / 32]`` (see the module docstring).
    """
    check_canonical(weight, "weight", stacked=True)
    experts, rows, cols = weight.shape
    padded_rows = padded_fc_rows(rows, gated=gated)
    padded_cols = round_up(cols)
    if out is not None:
        _check_routed_out(out, experts, rows, cols, gated, weight.device)
    data, scale = _pack_routed(weight.data, weight.logical_scales(), gated=gated, padded_rows=padded_rows,
                               padded_cols=padded_cols)
    if out is not None:
        out.data.view(torch.uint8).copy_(data)
        out.scale.copy_(scale)
        return out
    return FlashInferRoutedMXFP8Weight(
        data=data.view(DATA_DTYPE), scale=scale, logical_rows=rows, logical_cols=cols,
        padded_rows=padded_rows, padded_cols=padded_cols, gated=gated,
    )


def _check_routed_out(out, experts: int, rows: int, cols: int, gated: bool, device) -> None:
    if not isinstance(out, FlashInferRoutedMXFP8Weight):
        raise MXFP8InputError(f"out: expected a FlashInferRoutedMXFP8Weight, got {type(out).__name__}")
    got = (out.num_experts, out.logical_rows, out.logical_cols, out.gated)
    want = (experts, rows, cols, gated)
    if got != want:
        raise MXFP8InputError(
            f"out: prepared for (experts, rows, cols, gated) = {got}, but the weight is {want}; "
            f"an in-place refresh cannot change the shape, build a new stack instead"
        )
    if out.data.device != torch.device(device):
        raise MXFP8InputError(f"out: lives on {out.data.device}, the weight on {device}")


def unpack_routed_mxfp8_weights(
    routed: FlashInferRoutedMXFP8Weight, *, flashinfer_order: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Invert ``prepare_routed_mxfp8_weights``: undo the 128x4 interleave, the row permutation and the padding.

    Returns (data fp8 e4m3 ``[E, M, K]``, logical scales uint8 ``[E, M, K // 32]``) in Megatron order
    (``[gate; up]`` for gated fc1), bit-identical to the canonical bytes. With ``flashinfer_order=True``,
    returns the padded FlashInfer-order bytes instead: ``[E, Pr, Pc]`` and ``[E, Pr, Pc // 32]`` with rows
    ``[up (Ip rows); gate (Ip rows)]`` for gated fc1 (what the kernel computes with).
    """
    experts, padded_rows, padded_cols = routed.num_experts, routed.padded_rows, routed.padded_cols
    index = routed_row_indices(padded_rows, gated=routed.gated, device=routed.data.device)
    inverse = torch.argsort(index)
    data = routed.data.view(torch.uint8).index_select(-2, inverse)  # [E, Pr, Pc]
    shuffled_scales = unswizzle_scales(routed.scale.reshape(experts, -1), padded_rows, padded_cols // BLOCK_SIZE)
    scales = shuffled_scales.index_select(-2, inverse)  # [E, Pr, Pc/32]
    if not flashinfer_order:
        data = from_flashinfer_rows(data, gated=routed.gated, rows=routed.logical_rows, cols=routed.logical_cols)
        scales = from_flashinfer_rows(scales, gated=routed.gated, rows=routed.logical_rows,
                                      cols=routed.logical_cols // BLOCK_SIZE)
    return data.view(DATA_DTYPE), scales


def repack_routed_mxfp8_expert_(
    routed: FlashInferRoutedMXFP8Weight, expert: int, data: torch.Tensor, scale: torch.Tensor
) -> None:
    """Rewrite expert ``expert``'s slot of ``routed`` in place from one canonical expert.

    ``data``: fp8 e4m3 ``[M, K]``; ``scale``: 128x4-swizzled E8M0 bytes ``[Mp * Cp]`` (any 1-byte dtype).
    The result equals that expert's slice of a fresh ``prepare_routed_mxfp8_weights`` of the whole stack.
    """
    if not 0 <= expert < routed.num_experts:
        raise MXFP8InputError(f"expert: must be in [0, {routed.num_experts}), got {expert}")
    if tuple(data.shape) != (routed.logical_rows, routed.logical_cols):
        raise MXFP8InputError(
            f"data: shape must be ({routed.logical_rows}, {routed.logical_cols}), got {tuple(data.shape)}"
        )
    logical = unswizzle_scales(scale.view(torch.uint8).reshape(-1), routed.logical_rows,
                               routed.logical_cols // BLOCK_SIZE)  # [M, K/32]
    packed_data, packed_scale = _pack_routed(
        data.unsqueeze(0), logical.unsqueeze(0), gated=routed.gated, padded_rows=routed.padded_rows,
        padded_cols=routed.padded_cols,
    )
    routed.data[expert].view(torch.uint8).copy_(packed_data[0])
    routed.scale[expert].copy_(packed_scale[0])


def attach_routed_mxfp8_writeback(
    weight: MXFP8Tensor, routed: FlashInferRoutedMXFP8Weight, expert: int
) -> Callable[[], None]:
    """Keep expert ``expert`` of ``routed`` in sync with canonical ``weight`` (``[M, K]``, one expert).

    Registers a write hook: after every ``weight.quantize_`` / ``weight.copy_`` the expert's slot is repacked in
    place (same ``data_ptr()``s, same bytes as a fresh prepare). Works after ``weight.release_storage_()`` too
    (the hook gets the temporaries). Returns a function that detaches the hook.
    """
    return attach_expert_writeback(weight, routed, expert, repack_routed_mxfp8_expert_, "routed")
