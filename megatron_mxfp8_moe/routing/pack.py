"""Packed routing words for FlashInfer's routed MoE, and global -> local expert ids.

Packed word (int32, FlashInfer ``PackedScoreIdx {bf16 score; int16 idx}``): bits 0-15 hold the bf16 bits of the
routing weight, bits 16-31 the int16 global expert id: ``(expert_id << 16) | (bf16_bits & 0xFFFF)``.
The mask matters: a negative weight's bf16 bits sign-extend to int32 and would overwrite the id otherwise.
Id ``-1`` (or any id outside the local range) means "skip this slot"; it packs to a high half of ``0xFFFF``
and unpacks back to -1 (arithmetic shift).

No value checks here (they would sync the host and break CUDA-graph capture): ids must lie in
``[-32768, 32767]``; the weight is rounded to bf16 (round to nearest even), the kernel's routing dtype.
"""

import torch

from ..errors import MXFP8InputError

_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def pack_routed_mxfp8_routing(expert_ids: torch.Tensor, probabilities: torch.Tensor) -> torch.Tensor:
    """``expert_ids`` int ``[T, topk]`` (global, -1 = skip) + ``probabilities`` float ``[T, topk]`` -> int32 ``[T, topk]``.

    Word = ``(expert_id << 16) | (bf16(probability) bits & 0xFFFF)``; same device as the inputs.
    """
    if not isinstance(expert_ids, torch.Tensor) or expert_ids.dtype not in _INTEGER_DTYPES:
        got = expert_ids.dtype if isinstance(expert_ids, torch.Tensor) else type(expert_ids).__name__
        raise MXFP8InputError(f"expert_ids: expected an integer tensor [T, topk], got {got}")
    if not isinstance(probabilities, torch.Tensor) or not probabilities.is_floating_point():
        got = probabilities.dtype if isinstance(probabilities, torch.Tensor) else type(probabilities).__name__
        raise MXFP8InputError(f"probabilities: expected a floating tensor [T, topk], got {got}")
    if expert_ids.shape != probabilities.shape or expert_ids.dim() != 2:
        raise MXFP8InputError(
            f"expert_ids / probabilities: both must be [T, topk] of one shape, got {tuple(expert_ids.shape)} "
            f"and {tuple(probabilities.shape)}"
        )
    if expert_ids.device != probabilities.device:
        raise MXFP8InputError(
            f"probabilities: must be on expert_ids' device {expert_ids.device}, got {probabilities.device}"
        )
    weight_bits = probabilities.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    return (expert_ids.to(torch.int32) << 16) | weight_bits


def unpack_routed_mxfp8_routing(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int32 ``[T, topk]`` packed words -> (expert ids int32 ``[T, topk]``, weights bf16 ``[T, topk]``)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        got = packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise MXFP8InputError(f"packed: expected int32 packed routing words, got {got}")
    expert_ids = packed >> 16  # arithmetic shift: 0xFFFF.... -> -1
    low = packed & 0xFFFF
    signed = torch.where(low >= 0x8000, low - 0x10000, low)  # [-32768, 32767], fits int16 exactly
    return expert_ids, signed.to(torch.int16).view(torch.bfloat16)


def global_to_local_ids(expert_ids: torch.Tensor, local_expert_offset: int, num_local_experts: int) -> torch.Tensor:
    """Global ids ``[T, topk]`` -> local ids ``id - local_expert_offset`` (int64); non-local ids and -1 become -1."""
    if local_expert_offset < 0 or num_local_experts <= 0:
        raise MXFP8InputError(
            f"local_expert_offset / num_local_experts: expected >= 0 and > 0, got {local_expert_offset} "
            f"and {num_local_experts}"
        )
    local = expert_ids.to(torch.int64) - local_expert_offset
    is_local = (expert_ids >= 0) & (local >= 0) & (local < num_local_experts)
    return torch.where(is_local, local, torch.full_like(local, -1))
