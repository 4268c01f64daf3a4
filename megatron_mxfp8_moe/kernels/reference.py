"""Pure-torch MoE, the oracle every backend is compared with. Runs anywhere, the CPU included.

Shapes: ``x [T, H]``, fc1 ``[E, N1, H]`` (``N1 = 2I`` gated, ``[gate; up]``; else ``I``), fc2 ``[E, H, I]``,
``probs [T, topk]``, ``routing_map [T, topk]`` global expert ids (-1 or non-local: skipped).
``out[t] = sum_k probs[t, k] * fc2[e] @ act(fc1[e] @ x[t])`` over local ``e = routing_map[t, k] - offset``;
rows ``t >= valid_tokens`` are zero.
"""

from typing import Optional, Union

import torch

from ..activations import Activation, apply_activation, parse_activation
from ..tensor import MXFP8Tensor

Weights = Union[MXFP8Tensor, torch.Tensor]


def _as_float(weights: Weights, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(weights, MXFP8Tensor):
        return weights.dequantize(torch.float64 if dtype == torch.float64 else torch.float32).to(dtype)
    return weights.to(dtype)


def moe_reference(
    x: torch.Tensor,
    fc1: Weights,
    fc2: Weights,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    activation="swiglu",
    *,
    local_expert_offset: int = 0,
    valid_tokens: Optional[int] = None,
    compute_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Reference MoE (see module docstring); returns ``[T, H]`` in ``compute_dtype``."""
    activation = parse_activation(activation) if not isinstance(activation, Activation) else activation
    fc1_weights = _as_float(fc1, compute_dtype).to(x.device)
    fc2_weights = _as_float(fc2, compute_dtype).to(x.device)
    local_experts = fc1_weights.shape[0]
    rows = x.shape[0]
    valid = rows if valid_tokens is None else max(0, min(int(valid_tokens), rows))  # < 0: no valid rows
    hidden = x[:valid].to(compute_dtype)
    local_ids = routing_map[:valid].to(torch.int64) - local_expert_offset
    out = torch.zeros(rows, fc2_weights.shape[1], dtype=compute_dtype, device=x.device)
    for expert in range(local_experts):
        token_index, slot = torch.nonzero(local_ids == expert, as_tuple=True)
        if token_index.numel() == 0:
            continue
        inner = apply_activation(hidden[token_index] @ fc1_weights[expert].T, activation)
        expert_out = inner @ fc2_weights[expert].T
        weight = probs[token_index, slot].to(compute_dtype).unsqueeze(-1)
        out.index_add_(0, token_index, expert_out * weight)
    return out
