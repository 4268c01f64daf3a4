"""FlashInfer backend adapters on SM100/SM103: routed trtllm-gen MXFP8 MoE and CUTLASS MXFP8 MoE.

routed:  canonical experts -> build: ``layouts/routed.py`` Major-K shuffled stacks (repacked, never
         re-quantized) + per-expert writeback hooks -> run: rows >= valid_tokens get id -1, pack, quantize x, kernel
cutlass: canonical experts -> build: ``layouts/cutlass.py`` zero-copy views (fc2, non-gated fc1) or the
         ``[up; gate]`` copy (gated fc1) + per-expert writeback hooks -> run: ``kernels/flashinfer_cutlass.py``

flashinfer is imported inside ``build``/``run`` only (through the package's launcher modules), so this
module imports on any machine. Graph-safe per the launcher's contract (no host sync).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..activations import Activation
from .base import (
    Backend,
    MoEBackend,
    StackState,
    Support,
    ValidTokens,
    check_routed_inputs,
    write_result,
)
from .caps import DeviceCaps

if TYPE_CHECKING:
    from ..experts import ExpertSet

# Activations the FlashInfer MXFP8 kernels implement (keep in sync with flashinfer_compat._ACTIVATION_NAMES).
_FLASHINFER_ACTIVATIONS = (Activation.SQUARED_RELU, Activation.SWIGLU)


class _FlashInferBackend(MoEBackend):
    """What the routed and CUTLASS adapters share: support checks, the build with per-expert writeback hooks,
    and the run around the launcher. Subclasses name the kernel and its layout, writeback and launcher."""

    kernel: str  # "routed" | "cutlass" (flashinfer_compat's kernel key)
    graph_safe = True

    @classmethod
    def check_support(cls, caps: DeviceCaps) -> Support:
        from .flashinfer_compat import flashinfer_support  # pure; imports no flashinfer

        ok, reason = flashinfer_support(caps, cls.kernel)
        return Support(bool(ok), reason)

    @classmethod
    def supports_activation(cls, activation: Activation, caps: Optional[DeviceCaps] = None) -> Support:
        if activation in _FLASHINFER_ACTIVATIONS:
            from .flashinfer_compat import flashinfer_activation_support

            ok, reason = flashinfer_activation_support(getattr(caps, "flashinfer_version", None), cls.kernel,
                                                       activation)
            if not ok:
                return Support(False, reason)
            return Support(True, f"{activation.value} supported by the FlashInfer {cls.kernel} MXFP8 MoE")
        return Support(
            False,
            f"the FlashInfer {cls.kernel} MXFP8 MoE supports {[a.value for a in _FLASHINFER_ACTIVATIONS]}, "
            f"not {activation.value!r}",
        )

    @staticmethod
    def _layout():
        """(require, prepare(stack, gated=), attach_writeback(weight, stack, expert)) of this kernel."""
        raise NotImplementedError

    @staticmethod
    def _launch(x, probs, routing_map, fc1, fc2, **kwargs) -> torch.Tensor:
        """The launcher: bf16 ``[rows, H]`` (``out[:rows]`` when ``out`` is given)."""
        raise NotImplementedError

    @torch.inference_mode(False)
    @torch.no_grad()
    def build(self, expert_set: "ExpertSet") -> StackState:
        """Stacks for fc1 (``gated`` per the activation) and fc2, plus one writeback hook per expert and linear.

        A whole-stack write fans out to these per-expert hooks (MXFP8Tensor._after_write), so it needs none.
        """
        require, prepare, attach = self._layout()
        require(activation=expert_set.activation)
        state = StackState(
            backend=self.backend,
            fc1=prepare(expert_set.fc1, gated=expert_set.activation.gated),
            fc2=prepare(expert_set.fc2, gated=False),
        )
        for index in range(expert_set.num_experts):
            state.hook_removers.append(attach(expert_set.fc1_expert(index), state.fc1, index))
            state.hook_removers.append(attach(expert_set.fc2_expert(index), state.fc2, index))
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
        rows = check_routed_inputs(x, probs, routing_map, hidden_size=state.fc1.logical_cols, rows=rows, out=out)
        total = x.shape[0]
        bounded = rows < total
        direct = out is not None and out.dtype == torch.bfloat16
        result = self._launch(
            x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16),
            probs if probs.dtype == torch.float32 else probs.to(torch.float32),
            routing_map,
            state.fc1,
            state.fc2,
            num_experts=num_global_experts,
            local_expert_offset=local_expert_offset,
            activation=activation,
            out=out if direct else None,
            token_capacity=rows if bounded else None,
            use_bounded_rows=bounded,
            valid_tokens=valid_tokens,
        )
        if direct:
            return out
        return write_result(result[:rows], total, out)


class FlashInferRoutedBackend(_FlashInferBackend):
    """FlashInfer routed (trtllm-gen) MXFP8 MoE. Not thread-safe (refit hooks rewrite the routed stacks in place)."""

    backend = Backend.FLASHINFER_ROUTED
    kernel = "routed"

    @staticmethod
    def _layout():
        from ..layouts.routed import attach_routed_mxfp8_writeback, prepare_routed_mxfp8_weights
        from .flashinfer_compat import require_flashinfer_routed_mxfp8

        return require_flashinfer_routed_mxfp8, prepare_routed_mxfp8_weights, attach_routed_mxfp8_writeback

    @staticmethod
    def _launch(x, probs, routing_map, fc1, fc2, **kwargs) -> torch.Tensor:
        from .flashinfer_routed import flashinfer_routed_mxfp8_moe

        return flashinfer_routed_mxfp8_moe(x, probs, routing_map, fc1, fc2, top_k=routing_map.shape[1], **kwargs)


class FlashInferCutlassBackend(_FlashInferBackend):
    """FlashInfer CUTLASS MXFP8xMXFP8 MoE; its weights are views of the canonical stacks where the layouts agree.
    Not thread-safe (refit hooks rewrite the gated fc1 copy in place)."""

    backend = Backend.FLASHINFER_CUTLASS
    kernel = "cutlass"

    @staticmethod
    def _layout():
        from ..layouts.cutlass import attach_cutlass_mxfp8_writeback, prepare_cutlass_mxfp8_weights
        from .flashinfer_compat import require_flashinfer_cutlass_mxfp8

        return require_flashinfer_cutlass_mxfp8, prepare_cutlass_mxfp8_weights, attach_cutlass_mxfp8_writeback

    @staticmethod
    def _launch(x, probs, routing_map, fc1, fc2, **kwargs) -> torch.Tensor:
        from .flashinfer_cutlass import flashinfer_cutlass_mxfp8_moe

        return flashinfer_cutlass_mxfp8_moe(x, probs, routing_map, fc1, fc2, **kwargs)


__all__ = ["FlashInferCutlassBackend", "FlashInferRoutedBackend"]
