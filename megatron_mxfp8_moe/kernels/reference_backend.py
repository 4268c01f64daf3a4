"""Reference backend: pure torch on dequantized weights; any device, the CPU included; graph-safe.

canonical experts -> build: fp32 dequantized stacks fc1 [E, N1, H], fc2 [E, H, I] (+ write hooks that
re-dequantize expert i in place) -> run: dense masked loop over local experts in fp32 -> out

The math is ``kernels/reference.py``'s oracle, written without ``nonzero`` so it needs no host sync and
can be captured in a CUDA graph (every local expert runs over all processed rows; rows not routed to it get
weight zero). That costs E times the FLOPs of a routed kernel: it is the correctness path, not a fast one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..activations import Activation, apply_activation
from ..tensor import MXFP8Tensor
from .base import (
    Backend,
    MoEBackend,
    StackState,
    Support,
    ValidTokens,
    check_routed_inputs,
    valid_row_mask,
    write_result,
)
from .caps import DeviceCaps

if TYPE_CHECKING:
    from ..experts import ExpertSet


class ReferenceBackend(MoEBackend):
    """Dense fp32 reference MoE. Not thread-safe (a refit hook rewrites the fp32 stacks in place)."""

    backend = Backend.REFERENCE
    graph_safe = True

    @classmethod
    def check_support(cls, caps: DeviceCaps) -> Support:
        return Support(True, f"reference backend runs on any device ({caps.describe()})")

    @torch.inference_mode(False)  # the stacks must stay mutable by later refits outside inference mode
    @torch.no_grad()
    def build(self, expert_set: "ExpertSet") -> StackState:
        """fp32 ``fc1 [E, N1, H]``, ``fc2 [E, H, I]`` dequantized from the canonical bytes; hooks attached."""
        fc1, fc2 = expert_set.dequantize(torch.float32)
        state = StackState(backend=self.backend, fc1=fc1.contiguous(), fc2=fc2.contiguous())

        state.attach_repack_hooks_(
            expert_set,
            lambda stack, index, data, scale: stack[index].copy_(MXFP8Tensor(data, scale).dequantize(torch.float32)),
        )
        return state

    def run(
        self,
        state: StackState,
        x: torch.Tensor,
        probs: torch.Tensor,
        routing_map: torch.Tensor,
        *,
        activation: Activation,
        local_expert_offset: int,
        num_global_experts: int,
        valid_tokens: ValidTokens = None,
        rows: Optional[int] = None,
        out: Optional[torch.Tensor] = None,
        route_experts: Optional[int] = None,
    ) -> torch.Tensor:
        fc1, fc2 = state.fc1, state.fc2
        rows = check_routed_inputs(x, probs, routing_map, hidden_size=fc1.shape[2], rows=rows, out=out)
        total = x.shape[0]
        hidden = x[:rows].to(torch.float32)
        local_ids = routing_map[:rows].to(torch.int64) - local_expert_offset  # [rows, topk]
        weights = probs[:rows].to(torch.float32)  # [rows, topk]
        valid = valid_row_mask(valid_tokens, rows, x.device)  # [rows, 1] or None
        if valid is not None:
            local_ids = torch.where(valid, local_ids, torch.full_like(local_ids, -1))
            hidden = torch.where(valid, hidden, torch.zeros_like(hidden))  # stale rows may hold inf/NaN
        result = torch.zeros(rows, fc2.shape[1], dtype=torch.float32, device=x.device)
        for expert in range(fc1.shape[0]):
            selected = local_ids == expert  # [rows, topk]
            row_weight = torch.where(selected, weights, torch.zeros_like(weights)).sum(-1, keepdim=True)  # [rows, 1]
            routed = selected.any(-1, keepdim=True)  # [rows, 1]
            expert_out = apply_activation(hidden @ fc1[expert].T, activation) @ fc2[expert].T  # [rows, H]
            result += torch.where(routed, expert_out * row_weight, torch.zeros_like(expert_out))
        return write_result(result, total, out)


__all__ = ["ReferenceBackend"]
