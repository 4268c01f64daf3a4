"""Routed trtllm-gen MXFP8 MoE launcher (``flashinfer.fused_moe.trtllm_fp8_block_scale_routed_moe``).

hidden_states -> pad H to Hp + MXFP8 quantize (linear token-major scales) ; (probs, routing_map) -> invalid rows
get id -1 -> packed int32 words -> kernel(prepared fc1/fc2 stacks) -> bf16 [rows, Hp] -> [:, :H] -> out[:rows].

Contract (shared/reference/flashinfer_mxfp8.md §1): ``use_shuffled_weight=True``, ``weight_layout=MajorK``,
``fp8_quantization_type=MxFp8``, ``routing_method_type=Renormalize`` with ``n_group = topk_group = None`` and
``routed_scaling_factor=None`` (precomputed weights are used as given), ``intermediate_size`` = padded I,
``num_experts`` global, ``local_expert_offset`` / ``local_num_experts`` for EP, ids global, -1 skipped.
"""

import logging
from typing import Optional, Union

import torch
import torch.nn.functional as F

from ..activations import Activation, parse_activation
from ..errors import MXFP8InputError
from ..format.constants import BLOCK_SIZE
from ..layouts.routed import FlashInferRoutedMXFP8Weight
from ..quant.reference import quantize_logical_reference
from ..routing.pack import pack_routed_mxfp8_routing
from ..routing.rows import RowPolicy, select_active_rows
from .flashinfer_compat import (
    enum_value,
    first_output,
    flashinfer_activation_type,
    flashinfer_enum,
    require_flashinfer_routed_mxfp8,
)

logger = logging.getLogger(__name__)

MAX_ROUTED_TOP_K = 32  # Renormalize family limit in the launcher


def select_routed_mxfp8_active_rows(
    full_rows: int, *, token_capacity: Optional[int], use_bounded_rows: bool
) -> tuple[int, RowPolicy]:
    """Rows the kernel processes (a prefix of the dispatcher buffer) and the policy; see ``routing.rows``."""
    try:
        policy = select_active_rows(full_rows, token_capacity=token_capacity, use_bounded_rows=use_bounded_rows)
    except ValueError as error:
        raise MXFP8InputError(str(error)) from error
    return policy.rows, policy


def _check_hidden(name: str, hidden_states: torch.Tensor, padded_hidden_size: int) -> None:
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 2:
        got = tuple(hidden_states.shape) if isinstance(hidden_states, torch.Tensor) else type(hidden_states).__name__
        raise MXFP8InputError(f"{name}: expected [T, H], got {got}")
    if hidden_states.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise MXFP8InputError(f"{name}: dtype must be bf16/fp16/fp32, got {hidden_states.dtype}")
    hidden = hidden_states.shape[1]
    if padded_hidden_size < hidden or padded_hidden_size % 128:
        raise MXFP8InputError(
            f"padded_hidden_size: must be a multiple of 128 and >= H = {hidden}, got {padded_hidden_size}"
        )


def _pad_hidden(hidden_states: torch.Tensor, padded_hidden_size: int) -> torch.Tensor:
    extra = padded_hidden_size - hidden_states.shape[1]
    return F.pad(hidden_states, (0, extra)) if extra else hidden_states.contiguous()


def quantize_routed_mxfp8_input(
    hidden_states: torch.Tensor, padded_hidden_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8-quantize activations for the routed kernel with ``flashinfer.mxfp8_quantize(x, False)``.

    ``hidden_states``: bf16/fp16 ``[T, H]`` on CUDA. Columns ``H..Hp`` are zero-padded first.
    Returns (fp8 e4m3 ``[T, Hp]``, uint8 E8M0 ``[T, Hp // 32]`` LINEAR token-major scales; the routed GEMM
    misreads a 128x4-swizzled buffer silently, FlashInfer issue #3455).
    """
    _check_hidden("hidden_states", hidden_states, padded_hidden_size)
    if hidden_states.dtype not in (torch.bfloat16, torch.float16):  # FlashInfer's "cuda" mxfp8_quantize: no fp32
        raise MXFP8InputError(f"hidden_states: dtype must be bf16/fp16 for flashinfer.mxfp8_quantize, got {hidden_states.dtype}")
    import flashinfer

    padded = _pad_hidden(hidden_states, padded_hidden_size)
    data, scale = flashinfer.mxfp8_quantize(padded, False)
    rows = padded.shape[0]
    scale = scale.view(torch.uint8).reshape(rows, padded_hidden_size // BLOCK_SIZE)  # FlashInfer returns it flat
    return data.view(torch.float8_e4m3fn)[:, :padded_hidden_size], scale


def quantize_routed_mxfp8_input_reference(
    hidden_states: torch.Tensor, padded_hidden_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-torch twin of ``quantize_routed_mxfp8_input`` (any device): same shapes, layout and padding.

    Uses Megatron's scale rule (``quant.reference``); FlashInfer's own rounding of the scale may differ.
    Returns (fp8 e4m3 ``[T, Hp]``, uint8 ``[T, Hp // 32]`` linear token-major; padded blocks have byte 0).
    """
    _check_hidden("hidden_states", hidden_states, padded_hidden_size)
    padded = _pad_hidden(hidden_states, padded_hidden_size)
    return quantize_logical_reference(padded)


def _check_stacks(fc1: FlashInferRoutedMXFP8Weight, fc2: FlashInferRoutedMXFP8Weight, activation: Activation):
    for name, stack in (("fc1", fc1), ("fc2", fc2)):
        if not isinstance(stack, FlashInferRoutedMXFP8Weight):
            raise MXFP8InputError(f"{name}: expected a FlashInferRoutedMXFP8Weight, got {type(stack).__name__}")
    if fc1.gated != activation.gated:
        raise MXFP8InputError(
            f"fc1: prepared with gated={fc1.gated}, but activation {activation.value!r} needs gated={activation.gated}"
        )
    if fc2.gated:
        raise MXFP8InputError("fc2: must be prepared with gated=False")
    padded_intermediate = fc2.padded_cols
    expected_rows = 2 * padded_intermediate if activation.gated else padded_intermediate
    if fc1.padded_rows != expected_rows or fc1.padded_cols != fc2.padded_rows:
        raise MXFP8InputError(
            f"fc1/fc2: padded shapes do not chain: fc1 [{fc1.padded_rows}, {fc1.padded_cols}], "
            f"fc2 [{fc2.padded_rows}, {fc2.padded_cols}] (expected fc1 rows {expected_rows}, fc1 cols == fc2 rows)"
        )
    if fc1.num_experts != fc2.num_experts:
        raise MXFP8InputError(f"fc1/fc2: expert counts differ, {fc1.num_experts} vs {fc2.num_experts}")
    intermediate = fc1.logical_rows // 2 if activation.gated else fc1.logical_rows
    if fc1.logical_cols != fc2.logical_rows or intermediate != fc2.logical_cols:
        # the padded shapes can chain while the real ones do not; the kernel checks neither
        raise MXFP8InputError(
            f"fc1/fc2: shapes do not chain: fc1 [{fc1.logical_rows}, {fc1.logical_cols}] (hidden "
            f"{fc1.logical_cols}, intermediate {intermediate}), fc2 [{fc2.logical_rows}, {fc2.logical_cols}] "
            f"(expected [{fc1.logical_cols}, {intermediate}])"
        )


def _check_expert_range(num_experts: int, top_k: int, local_expert_offset: int, local_num_experts: int) -> None:
    if num_experts % 4 or num_experts <= top_k:
        raise MXFP8InputError(f"num_experts: must be a multiple of 4 and > top_k = {top_k}, got {num_experts}")
    if not 0 < top_k <= MAX_ROUTED_TOP_K:
        raise MXFP8InputError(f"top_k: must be in [1, {MAX_ROUTED_TOP_K}], got {top_k}")
    if local_expert_offset < 0 or local_expert_offset + local_num_experts > num_experts:
        raise MXFP8InputError(
            f"local_expert_offset: [{local_expert_offset}, {local_expert_offset + local_num_experts}) must lie "
            f"in [0, num_experts = {num_experts})"
        )


def flashinfer_routed_mxfp8_moe_prequantized(
    hidden_data: torch.Tensor,
    hidden_scale: torch.Tensor,
    packed_routing: torch.Tensor,
    fc1: FlashInferRoutedMXFP8Weight,
    fc2: FlashInferRoutedMXFP8Weight,
    *,
    num_experts: int,
    top_k: int,
    local_expert_offset: int,
    activation,
    output: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Run the routed kernel on pre-quantized activations; returns bf16 ``[T, Hp]`` (``output`` when given).

    ``hidden_data`` fp8 e4m3 ``[T, Hp]``; ``hidden_scale`` uint8 ``[T, Hp // 32]`` linear token-major;
    ``packed_routing`` int32 ``[T, top_k]`` (``pack_routed_mxfp8_routing``, global ids, -1 skipped);
    ``fc1`` / ``fc2`` prepared stacks of the ``E_loc`` experts ``[local_expert_offset, +E_loc)``;
    ``output`` bf16 ``[T, Hp]`` contiguous, written in place.
    """
    activation = parse_activation(activation)
    _check_stacks(fc1, fc2, activation)
    rows = hidden_data.shape[0]
    if hidden_data.dtype != torch.float8_e4m3fn or tuple(hidden_data.shape) != (rows, fc1.padded_cols):
        raise MXFP8InputError(
            f"hidden_data: expected float8_e4m3fn [T, {fc1.padded_cols}], got {hidden_data.dtype} "
            f"{tuple(hidden_data.shape)}"
        )
    if hidden_scale.dtype != torch.uint8 or tuple(hidden_scale.shape) != (rows, fc1.padded_cols // BLOCK_SIZE):
        raise MXFP8InputError(
            f"hidden_scale: expected uint8 linear [T, {fc1.padded_cols // BLOCK_SIZE}], got {hidden_scale.dtype} "
            f"{tuple(hidden_scale.shape)}"
        )
    if packed_routing.dtype != torch.int32 or tuple(packed_routing.shape) != (rows, top_k):
        raise MXFP8InputError(
            f"packed_routing: expected int32 [{rows}, {top_k}], got {packed_routing.dtype} "
            f"{tuple(packed_routing.shape)}"
        )
    _check_expert_range(num_experts, top_k, local_expert_offset, fc1.num_experts)
    if output is not None and (output.dtype != torch.bfloat16 or tuple(output.shape) != (rows, fc2.padded_rows)
                               or not output.is_contiguous()):
        raise MXFP8InputError(
            f"output: expected contiguous bf16 [{rows}, {fc2.padded_rows}], got {output.dtype} {tuple(output.shape)}"
        )
    fused_moe = require_flashinfer_routed_mxfp8(device=hidden_data.device)
    if output is None:
        output = torch.empty(rows, fc2.padded_rows, dtype=torch.bfloat16, device=hidden_data.device)
    result = fused_moe.trtllm_fp8_block_scale_routed_moe(
        topk_ids=packed_routing,
        routing_bias=None,
        hidden_states=hidden_data,
        hidden_states_scale=hidden_scale,
        gemm1_weights=fc1.data,
        gemm1_weights_scale=fc1.scale,
        gemm2_weights=fc2.data,
        gemm2_weights_scale=fc2.scale,
        num_experts=num_experts,
        top_k=top_k,
        n_group=None,
        topk_group=None,
        intermediate_size=fc2.padded_cols,
        local_expert_offset=local_expert_offset,
        local_num_experts=fc1.num_experts,
        routed_scaling_factor=None,
        routing_method_type=enum_value(flashinfer_enum("RoutingMethodType", "Renormalize")),
        use_shuffled_weight=True,
        weight_layout=enum_value(flashinfer_enum("WeightLayout", "MajorK")),
        do_finalize=True,
        output=output,
        fp8_quantization_type=flashinfer_enum("Fp8QuantizationType", "MxFp8"),
        activation_type=enum_value(flashinfer_activation_type(activation)),
    )
    result = first_output(result)
    if result.data_ptr() != output.data_ptr():  # defensive: a build that ignores output= (fixed in 0.6.8)
        output.copy_(result)
    return output


def mask_invalid_rows(routing_map: torch.Tensor, valid_tokens: Union[int, torch.Tensor, None],
                      num_experts: Optional[int] = None) -> torch.Tensor:
    """``routing_map`` ``[T, topk]`` with rows ``t >= valid_tokens`` set to -1 (graph-safe: no host sync), and with
    ``num_experts`` every id outside ``[0, num_experts)`` too: the kernels read ids as int32 (CUTLASS) or int16
    (the routed packing), where an int64 id such as 2**32 + k or 2**16 + k would wrap onto expert k.

    ``valid_tokens``: int, a 0-d integer tensor on ``routing_map``'s device, or None (all rows valid).
    """
    keep = None  # [T, 1] or [T, topk]
    if valid_tokens is not None:
        keep = (torch.arange(routing_map.shape[0], device=routing_map.device) < valid_tokens).unsqueeze(-1)
    if num_experts is not None:
        in_range = (routing_map >= 0) & (routing_map < num_experts)
        keep = in_range if keep is None else keep & in_range
    return routing_map if keep is None else torch.where(keep, routing_map, torch.full_like(routing_map, -1))


def flashinfer_routed_mxfp8_moe(
    hidden_states: torch.Tensor,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    fc1: FlashInferRoutedMXFP8Weight,
    fc2: FlashInferRoutedMXFP8Weight,
    *,
    num_experts: int,
    top_k: int,
    local_expert_offset: int,
    activation,
    out: Optional[torch.Tensor] = None,
    token_capacity: Optional[int] = None,
    use_bounded_rows: bool = False,
    valid_tokens: Union[int, torch.Tensor, None] = None,
) -> torch.Tensor:
    """Megatron-facing routed MXFP8 MoE: bf16 ``[T, H]`` in, bf16 ``[rows, H]`` out (``out`` when given).

    ``hidden_states`` bf16 ``[T, H]``; ``probs`` float ``[T, top_k]``; ``routing_map`` int ``[T, top_k]`` global
    expert ids. ``rows`` comes from ``select_routed_mxfp8_active_rows(T, token_capacity, use_bounded_rows)``;
    rows ``>= valid_tokens`` get id -1 (zero output). With ``out`` (bf16 ``[>= rows, H]``) the result goes to
    ``out[:rows]`` (rows beyond are not touched) and ``out`` is returned.
    """
    activation = parse_activation(activation)
    _check_stacks(fc1, fc2, activation)
    if hidden_states.dim() != 2 or hidden_states.shape[1] != fc1.logical_cols:
        raise MXFP8InputError(
            f"hidden_states: expected [T, {fc1.logical_cols}], got {tuple(hidden_states.shape)}"
        )
    full_rows, hidden = hidden_states.shape
    if tuple(routing_map.shape) != (full_rows, top_k) or tuple(probs.shape) != (full_rows, top_k):
        raise MXFP8InputError(
            f"probs / routing_map: expected [{full_rows}, {top_k}], got {tuple(probs.shape)} and "
            f"{tuple(routing_map.shape)}"
        )
    if out is not None and (out.dim() != 2 or out.shape[1] != hidden or out.dtype != torch.bfloat16):
        raise MXFP8InputError(f"out: expected bf16 [>= rows, {hidden}], got {out.dtype} {tuple(out.shape)}")
    rows, _policy = select_routed_mxfp8_active_rows(
        full_rows, token_capacity=token_capacity, use_bounded_rows=use_bounded_rows
    )
    if out is not None and out.shape[0] < rows:
        raise MXFP8InputError(f"out: needs at least {rows} rows, got {out.shape[0]}")
    _check_expert_range(num_experts, top_k, local_expert_offset, fc1.num_experts)
    require_flashinfer_routed_mxfp8(device=hidden_states.device)  # before quantizing: the quantizer also needs the GPU
    if rows == 0:  # an EP rank that received no tokens: nothing to launch
        return out if out is not None else hidden_states.new_empty(0, hidden, dtype=torch.bfloat16)
    ids = mask_invalid_rows(routing_map[:rows], valid_tokens, num_experts)
    packed = pack_routed_mxfp8_routing(ids, probs[:rows])
    data, scale = quantize_routed_mxfp8_input(hidden_states[:rows].to(torch.bfloat16), fc1.padded_cols)
    direct = out is not None and fc2.padded_rows == hidden and out[:rows].is_contiguous()
    output = out[:rows] if direct else None
    result = flashinfer_routed_mxfp8_moe_prequantized(
        data, scale, packed, fc1, fc2, num_experts=num_experts, top_k=top_k,
        local_expert_offset=local_expert_offset, activation=activation, output=output,
    )
    if out is None:
        return result[:, :hidden]
    if not direct:
        out[:rows].copy_(result[:, :hidden])
    return out
