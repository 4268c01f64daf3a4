"""CUTLASS MXFP8xMXFP8 MoE launcher (``flashinfer.fused_moe.cutlass_fused_moe(use_mxfp8_act_scaling=True)``).

hidden_states -> MXFP8 quantize (128x4-swizzled scales) ; (probs, routing_map) -> invalid rows get id -1 ->
kernel(zero-copy fc2 / non-gated fc1 views, [up; gate] fc1 copy) -> bf16 [rows, H] -> out[:rows].

Contract (shared/reference/flashinfer_mxfp8.md §2): ``quant_scales`` is exactly
``[fc1 int32 block scales, fc1 fp32 [E] ones, fc2 int32 block scales, fc2 fp32 [E] ones]``; ids are global;
``ep_size = num_experts / E_loc`` and ``ep_rank = local_expert_offset / E_loc`` (equal contiguous partitions);
ids outside the rank's range, -1 included, are dropped by the kernel.
"""

from typing import Optional, Union

import torch

from ..activations import parse_activation
from ..errors import MXFP8InputError
from ..format.swizzle import swizzle_scales
from ..layouts.cutlass import FlashInferCutlassMXFP8Weight
from ..quant.reference import quantize_logical_reference
from .flashinfer_compat import (
    first_output,
    flashinfer_activation_type,
    require_flashinfer_cutlass_mxfp8,
)
from .flashinfer_routed import mask_invalid_rows, select_routed_mxfp8_active_rows


def quantize_cutlass_mxfp8_input(hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``flashinfer.mxfp8_quantize(x, True)``: (fp8 ``[T, H]``, uint8 flat 128x4-swizzled ``[pad128(T) * pad4(H/32)]``)."""
    import flashinfer

    data, scale = flashinfer.mxfp8_quantize(hidden_states.contiguous(), True)
    return data.view(torch.float8_e4m3fn), scale.view(torch.uint8).reshape(-1)


def quantize_cutlass_mxfp8_input_reference(hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-torch twin of ``quantize_cutlass_mxfp8_input`` (Megatron's scale rule): same shapes and layout."""
    data, logical = quantize_logical_reference(hidden_states)
    return data, swizzle_scales(logical)


def flashinfer_cutlass_mxfp8_moe(
    hidden_states: torch.Tensor,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    fc1: FlashInferCutlassMXFP8Weight,
    fc2: FlashInferCutlassMXFP8Weight,
    *,
    num_experts: int,
    local_expert_offset: int,
    activation,
    out: Optional[torch.Tensor] = None,
    token_capacity: Optional[int] = None,
    use_bounded_rows: bool = False,
    valid_tokens: Union[int, torch.Tensor, None] = None,
) -> torch.Tensor:
    """CUTLASS MXFP8 MoE: bf16 ``[T, H]`` in, bf16 ``[rows, H]`` out (``out[:rows]`` and ``out`` when given).

    ``probs`` float ``[T, topk]``; ``routing_map`` int ``[T, topk]`` global ids; ``fc1``/``fc2`` from
    ``prepare_cutlass_mxfp8_weights`` (fc1 ``gated`` must match ``activation``). Rows are chosen as in the
    routed launcher; rows ``>= valid_tokens`` get id -1.
    """
    activation = parse_activation(activation)
    for name, stack in (("fc1", fc1), ("fc2", fc2)):
        if not isinstance(stack, FlashInferCutlassMXFP8Weight):
            raise MXFP8InputError(f"{name}: expected a FlashInferCutlassMXFP8Weight, got {type(stack).__name__}")
    if fc1.gated != activation.gated or fc2.gated:
        raise MXFP8InputError(
            f"fc1/fc2: prepared with gated={fc1.gated}/{fc2.gated}, activation {activation.value!r} needs "
            f"{activation.gated}/False"
        )
    local_experts = fc1.num_experts
    if num_experts % local_experts or local_expert_offset % local_experts or local_expert_offset >= num_experts:
        raise MXFP8InputError(
            f"num_experts / local_expert_offset: CUTLASS needs equal contiguous EP partitions of {local_experts} "
            f"experts, got num_experts={num_experts}, local_expert_offset={local_expert_offset}"
        )
    full_rows, hidden = hidden_states.shape
    if hidden != fc1.logical_cols or fc2.logical_rows != hidden:
        raise MXFP8InputError(f"hidden_states: expected [T, {fc1.logical_cols}], got {tuple(hidden_states.shape)}")
    if routing_map.shape != probs.shape or routing_map.shape[0] != full_rows:
        raise MXFP8InputError(
            f"probs / routing_map: expected one shape [{full_rows}, topk], got {tuple(probs.shape)} and "
            f"{tuple(routing_map.shape)}"
        )
    rows, _policy = select_routed_mxfp8_active_rows(
        full_rows, token_capacity=token_capacity, use_bounded_rows=use_bounded_rows
    )
    if out is not None and (out.dtype != torch.bfloat16 or out.dim() != 2 or out.shape[1] != hidden
                            or out.shape[0] < rows):
        raise MXFP8InputError(f"out: expected bf16 [>= {rows}, {hidden}], got {out.dtype} {tuple(out.shape)}")
    fused_moe = require_flashinfer_cutlass_mxfp8(activation=activation, device=hidden_states.device)
    if rows == 0:  # an EP rank that received no tokens: nothing to launch
        return out if out is not None else hidden_states.new_empty(0, hidden, dtype=torch.bfloat16)
    ids = mask_invalid_rows(routing_map[:rows], valid_tokens, num_experts).to(torch.int32).contiguous()
    data, input_sf = quantize_cutlass_mxfp8_input(hidden_states[:rows].to(torch.bfloat16))
    direct = out is not None and out[:rows].is_contiguous()
    result = fused_moe.cutlass_fused_moe(
        input=data,
        token_selected_experts=ids,
        token_final_scales=probs[:rows].to(torch.float32).contiguous(),
        fc1_expert_weights=fc1.data,
        fc2_expert_weights=fc2.data,
        output_dtype=torch.bfloat16,
        quant_scales=[fc1.scale, fc1.input_scale, fc2.scale, fc2.input_scale],
        input_sf=input_sf,
        ep_size=num_experts // local_experts,
        ep_rank=local_expert_offset // local_experts,
        output=out[:rows] if direct else None,
        use_mxfp8_act_scaling=True,
        activation_type=flashinfer_activation_type(activation),
        swizzled_input_sf=True,
    )
    result = first_output(result)
    if out is None:
        return result
    if not direct or result.data_ptr() != out.data_ptr():
        out[:rows].copy_(result)
    return out
