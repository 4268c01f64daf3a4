"""Triton backend adapter: the Hopper weight-only MXFP8 kernel (``kernels/triton_moe.py``); graph-safe.

canonical experts -> build: nothing to prepare (the kernel reads the canonical ``MXFP8Tensor`` stacks in place:
fp8 bytes and 128x4-swizzled scales; ``StackState.shares_canonical``, no write hooks) -> run: ``triton_mxfp8_moe``

A refit (``quantize_experts_`` / ``copy_`` on the canonical stacks) writes straight into the bytes the kernel
reads, at the same addresses, so captured CUDA graphs replay with the new weights.

``triton`` and the kernel module are imported inside ``check_support``/``run`` only, so this module imports on
any machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..activations import Activation
from .base import Backend, MoEBackend, StackState, Support, ValidTokens, check_routed_inputs, write_result
from .caps import DeviceCaps

if TYPE_CHECKING:
    from ..experts import ExpertSet


class TritonBackend(MoEBackend):
    """Hopper Triton MXFP8 MoE on the canonical stacks. Not thread-safe: a refit must not overlap a forward."""

    backend = Backend.TRITON
    graph_safe = True

    @classmethod
    def check_support(cls, caps: DeviceCaps) -> Support:
        if caps.device_type != "cuda" or caps.capability is None:
            return Support(False, f"the Triton MXFP8 MoE needs a CUDA GPU; this device is {caps.describe()}")
        if caps.triton_version is None:
            return Support(False, "the Triton MXFP8 MoE needs the 'triton' package, which is not installed")
        try:
            from .triton_moe import triton_moe_support, warn_untested_triton
        except ImportError as error:  # the kernel module or one of its dependencies is missing
            return Support(False, f"megatron_mxfp8_moe.kernels.triton_moe cannot be imported: {error}")
        ok, reason = triton_moe_support(caps.capability, caps.triton_version)
        if ok:
            warn_untested_triton(caps.triton_version)
        return Support(bool(ok), reason)

    def build(self, expert_set: "ExpertSet") -> StackState:
        """The canonical stacks themselves (zero copy, no hooks): the kernel reads their bytes in place."""
        return StackState(backend=self.backend, fc1=expert_set.fc1, fc2=expert_set.fc2, shares_canonical=True)

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
        from .triton_moe import triton_mxfp8_moe

        rows = check_routed_inputs(x, probs, routing_map, hidden_size=state.fc1.shape[2], rows=rows, out=out)
        if not isinstance(valid_tokens, torch.Tensor):
            # The kernel reads the count on the device; a host value becomes a (capturable) constant fill.
            limit = rows if valid_tokens is None else int(valid_tokens)
            valid_tokens = torch.full((1,), limit, dtype=torch.int32, device=x.device)
        if out is None:
            out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        if probs.dtype != torch.float32:
            probs = probs.to(torch.float32)
        result = triton_mxfp8_moe(
            x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16),
            probs,
            routing_map,
            state.fc1,
            state.fc2,
            activation=activation,
            local_expert_offset=local_expert_offset,
            valid_tokens=valid_tokens,
            rows=rows,
            out=out,
            route_experts=route_experts or num_global_experts,
        )
        return write_result(result[:rows], x.shape[0], out) if result is not out else out


__all__ = ["TritonBackend"]
