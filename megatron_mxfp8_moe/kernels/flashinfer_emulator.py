"""Pure-torch MoE evaluated FROM prepared FlashInfer stacks: the CPU proof that preparing loses nothing.

prepared stack -> unpack (undo interleave, shuffle, reorder; keep FlashInfer order and padding) -> float64 MoE
with FlashInfer's semantics (fc1 rows ``[up; gate]``, ``out = act(second half) * first half``) -> ``[:, :H]``.

It reads the prepared bytes back through the package's own unpack (the inverse of prepare), so agreeing with
``moe_reference`` on the canonical experts shows that the gate/up order, the padding, the routing words and the
MoE semantics are right and that nothing is lost; it cannot show that the row shuffles and the scale interleave
are FlashInfer's, since a wrong shuffle and its own inverse cancel. Those bytes are checked against FlashInfer's
own helpers and an independent offset formula in ``tests/unit/layouts``. It does not model the kernels'
internal arithmetic (accumulation order, fc1-output re-quantization), except for the optional MXFP8
re-quantization of the activations (``quantize_input`` / ``quantize_intermediate``), used to state error
bounds for the real kernels.
"""

from typing import Optional, Union

import torch
import torch.nn.functional as F

from ..activations import Activation, apply_activation, parse_activation
from ..format.scales import dequantize_from_bytes
from ..layouts.cutlass import (
    FlashInferCutlassMXFP8Weight,
    unpack_cutlass_mxfp8_weights_flashinfer_order,
)
from ..layouts.routed import FlashInferRoutedMXFP8Weight, unpack_routed_mxfp8_weights
from ..quant.reference import quantize_logical_reference
from ..routing.pack import unpack_routed_mxfp8_routing

Prepared = Union[FlashInferRoutedMXFP8Weight, FlashInferCutlassMXFP8Weight]


def _mxfp8_round_trip(values: torch.Tensor) -> torch.Tensor:
    """MXFP8-quantize ``[..., K]`` (K % 32 == 0) along K and dequantize back (float64)."""
    data, scales = quantize_logical_reference(values.to(torch.float32))
    return dequantize_from_bytes(data, scales, torch.float64)


def _flashinfer_weights(stack: Prepared) -> torch.Tensor:
    """float64 ``[E, R, C]`` as the kernel reads it (padded for routed, ``[up; gate]`` for gated fc1)."""
    if isinstance(stack, FlashInferRoutedMXFP8Weight):
        data, scales = unpack_routed_mxfp8_weights(stack, flashinfer_order=True)
    else:
        data, scales = unpack_cutlass_mxfp8_weights_flashinfer_order(stack)
    return dequantize_from_bytes(data, scales, torch.float64)


def _flashinfer_activation(fc1_out: torch.Tensor, activation: Activation) -> torch.Tensor:
    """FlashInfer's fc1 output is ``[up; gate]``: first half linear (up), second half gated."""
    return apply_activation(fc1_out, activation, up_first=True)


def emulate_flashinfer_mxfp8_moe(
    hidden_states: torch.Tensor,
    expert_ids: torch.Tensor,
    weights: torch.Tensor,
    fc1: Prepared,
    fc2: Prepared,
    *,
    local_expert_offset: int,
    activation,
    quantize_input: bool = False,
    quantize_intermediate: bool = False,
) -> torch.Tensor:
    """MoE from prepared stacks; returns float64 ``[T, H]``.

    ``hidden_states`` float ``[T, H]``; ``expert_ids`` int ``[T, topk]`` global (-1 / non-local: skipped, as the
    kernels do); ``weights`` float ``[T, topk]``. ``fc1``/``fc2``: both routed or both CUTLASS stacks.
    ``quantize_input``: MXFP8 round trip of the (zero-padded) activations first, as the launchers do;
    ``quantize_intermediate``: MXFP8 round trip of the fc2 input, as the kernels do internally.
    """
    activation = parse_activation(activation)
    fc1_weights, fc2_weights = _flashinfer_weights(fc1), _flashinfer_weights(fc2)  # [E, N1p, Hp], [E, Hp, Ip]
    rows, hidden = hidden_states.shape
    padded_hidden = fc1_weights.shape[-1]
    x = F.pad(hidden_states.to(torch.float64), (0, padded_hidden - hidden))  # [T, Hp]
    if quantize_input:
        x = _mxfp8_round_trip(x)
    local_ids = expert_ids.to(torch.int64) - local_expert_offset
    out = torch.zeros(rows, fc2_weights.shape[1], dtype=torch.float64, device=hidden_states.device)
    for expert in range(fc1_weights.shape[0]):
        token_index, slot = torch.nonzero(local_ids == expert, as_tuple=True)
        if token_index.numel() == 0:
            continue
        inner = _flashinfer_activation(x[token_index] @ fc1_weights[expert].T, activation)  # [n, Ip]
        if quantize_intermediate:
            inner = _mxfp8_round_trip(inner)
        expert_out = inner @ fc2_weights[expert].T  # [n, Hp]
        out.index_add_(0, token_index, expert_out * weights[token_index, slot].to(torch.float64).unsqueeze(-1))
    return out[:, :hidden]


def emulate_routed_mxfp8_moe(
    hidden_states: torch.Tensor,
    packed_routing: torch.Tensor,
    fc1: FlashInferRoutedMXFP8Weight,
    fc2: FlashInferRoutedMXFP8Weight,
    *,
    local_expert_offset: int,
    activation,
    quantize_input: bool = False,
    quantize_intermediate: bool = False,
    valid_tokens: Optional[int] = None,
) -> torch.Tensor:
    """The routed kernel's inputs (packed int32 routing words ``[T, topk]``) -> float64 ``[T, H]``."""
    expert_ids, weights = unpack_routed_mxfp8_routing(packed_routing)
    if valid_tokens is not None:
        expert_ids = expert_ids.clone()
        expert_ids[valid_tokens:] = -1
    return emulate_flashinfer_mxfp8_moe(
        hidden_states, expert_ids, weights, fc1, fc2, local_expert_offset=local_expert_offset,
        activation=activation, quantize_input=quantize_input, quantize_intermediate=quantize_intermediate,
    )
