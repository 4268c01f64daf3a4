"""MXFP8Experts: Megatron-Core 0.19.2's experts interface around ``MXFP8ExpertLayer``.

MoELayer -> (inference dispatcher) x [T, H] bf16, probs [T, topk] fp32, routing_map [T, topk] global ids
         -> MXFP8Experts.forward -> MXFP8ExpertLayer.forward_routed -> backend -> (out, None) -> combine
MoELayer -> (standard dispatcher, eval) x [R, H] permuted, tokens_per_expert [E], probs [R]
         -> MXFP8ExpertLayer.forward_permuted -> (out [R, H], None)

Built by MoELayer as ``experts(num_local_experts, config, pg_collection=..., name=...)``; the spec binds
``backend`` / ``token_capacity`` with ``functools.partial``. An inference layer: no parameters, no gradients.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn.functional as F
from megatron.core.activations import squared_relu
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.moe.moe_utils import get_default_pg_collection
from megatron.core.transformer.moe.token_dispatcher_inference import (
    InferenceAllGatherDispatcherBase,
    NVLSAllGatherVDispatcher,
)
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import get_pg_rank, get_pg_size

from ..activations import Activation, parse_activation
from ..errors import BackendUnavailableError, MXFP8InputError
from ..experts import ExpertSet
from ..kernels.base import Backend
from ..kernels.caps import DeviceCaps
from ..layer import MXFP8ExpertLayer
from ..tensor import MXFP8Tensor
from .context import use_bounded_rows

logger = logging.getLogger(__name__)

# Megatron config (activation_func, gated_linear_unit) -> expert activation. Megatron's GeGLU uses erf-GELU,
# this package's GEGLU tanh-GELU, so gated F.gelu is not mapped.
_ACTIVATIONS = {
    (squared_relu, False): Activation.SQUARED_RELU,
    (F.relu, False): Activation.RELU,
    (F.silu, False): Activation.SILU,
    (F.silu, True): Activation.SWIGLU,
}


def activation_from_config(config: TransformerConfig) -> Activation:
    """The expert activation of ``config`` (``activation_func`` + ``gated_linear_unit``); raises if unsupported."""
    key = (config.activation_func, bool(config.gated_linear_unit))
    if key not in _ACTIVATIONS:
        name = getattr(config.activation_func, "__name__", repr(config.activation_func))
        raise MXFP8InputError(
            f"config.activation_func: {name} with gated_linear_unit={config.gated_linear_unit} is not supported by "
            f"MXFP8Experts; supported: squared_relu, relu, silu (non-gated) and silu with gated_linear_unit (SwiGLU)"
        )
    return _ACTIVATIONS[key]


def _check_config(config: TransformerConfig) -> None:
    unsupported = {
        "add_bias_linear": (bool(config.add_bias_linear), "expert biases"),
        "moe_apply_probs_on_input": (bool(getattr(config, "moe_apply_probs_on_input", False)), "probs applied on input"),
        "activation_func_clamp_value": (getattr(config, "activation_func_clamp_value", None) is not None, "clamped activations"),
        "glu_linear_offset": (bool(getattr(config, "glu_linear_offset", 0.0)), "a GLU linear offset"),
        "moe_mlp_glu_interleave_size": (getattr(config, "moe_mlp_glu_interleave_size", None) is not None, "interleaved GLU rows"),
    }
    for field, (bad, what) in unsupported.items():
        if bad:
            raise MXFP8InputError(f"config.{field}: MXFP8Experts does not support {what}; got {getattr(config, field)!r}")


def _default_device(config: TransformerConfig) -> torch.device:
    if config.use_cpu_initialization or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


class MXFP8Experts(MegatronModule):
    """Drop-in MXFP8 routed experts for ``MoELayer`` (inference only).

    Args:
        num_local_experts: E, experts on this EP rank.
        config: the TransformerConfig (hidden_size or moe_latent_size = H, moe_ffn_hidden_size = I,
            activation_func + gated_linear_unit, init_method / output_layer_init_method).
        submodules: accepted for spec compatibility and ignored (no linear submodules here).
        pg_collection: process groups; ``pg_collection.ep`` gives the EP rank/size (default collection if None).
        name: module name (unused).
        backend: ``"auto"``, ``"reference"``, ``"triton"`` or ``"flashinfer_routed"``.
        token_capacity: bounded-decode row capacity C (default: ``config.inference_flashinfer_token_capacity``
            when that field exists, else None = always full rows).
        caps: device capabilities for the backend choice (detected when None).
        initialize: quantize freshly initialized weights (``config.init_method`` for fc1,
            ``config.output_layer_init_method`` for fc2) when ``config.perform_initialization``; False leaves zeros
            for a checkpoint load to fill.
        release_canonical: drop the canonical bytes once a repacked kernel stack is built (default: GPU backends;
            ignored for the Triton backend, whose stack is the canonical storage).
        activation: the expert activation (``"swiglu"``, ``"squared_relu"``, ...) overriding the config's; this is
            how gated SwiGLU experts run behind 0.19.2's inference-optimized dispatcher (graph-capturable,
            bounded rows), whose config validation rejects gated linear units. Router and dispatcher never read it.

    Weights: ``mxfp8_weights()`` -> ``{"linear_fc1.weight{i}": MXFP8Tensor, ...}``; writes to them (refit) reach
    the backend stack directly (Triton) or through write hooks (repacked stacks). ``load_state_dict`` accepts BF16 or MXFP8 values under Megatron's
    expert names (``linear_fc1.weight{i}`` or ``local_experts.{i}.linear_fc1.weight``), quantizing BF16.
    """

    def __init__(
        self,
        num_local_experts: int,
        config: TransformerConfig,
        submodules=None,
        pg_collection=None,
        name: Optional[str] = None,
        *,
        backend="auto",
        token_capacity: Optional[int] = None,
        caps: Optional[DeviceCaps] = None,
        initialize: bool = True,
        release_canonical: Optional[bool] = None,
        activation=None,
    ):
        super().__init__(config=config)
        _check_config(config)
        if pg_collection is None:
            pg_collection = get_default_pg_collection()
        self.ep_group = pg_collection.ep
        expert_tp = getattr(pg_collection, "expt_tp", None)
        if expert_tp is not None and get_pg_size(expert_tp) != 1:
            raise MXFP8InputError(
                f"pg_collection.expt_tp: MXFP8Experts needs expert tensor parallel size 1, got {get_pg_size(expert_tp)}"
            )
        self.ep_size = get_pg_size(self.ep_group)
        self.ep_rank = get_pg_rank(self.ep_group)
        self.num_local_experts = int(num_local_experts)
        self.local_expert_offset = self.ep_rank * self.num_local_experts
        self.name = name
        # An explicit activation lets gated experts (SwiGLU) sit behind 0.19.2's inference-optimized dispatcher,
        # whose config validation rejects gated linear units; the router and dispatcher never read it.
        activation = activation_from_config(config) if activation is None else parse_activation(activation)
        hidden = config.moe_latent_size if getattr(config, "moe_latent_size", None) else config.hidden_size
        ffn = config.moe_ffn_hidden_size if config.moe_ffn_hidden_size is not None else config.ffn_hidden_size
        if token_capacity is None:
            token_capacity = getattr(config, "inference_flashinfer_token_capacity", None)
        self._nvls_dispatcher = getattr(config, "inference_moe_token_dispatcher_type", "nccl") == "nvls"

        expert_set = ExpertSet.empty(self.num_local_experts, hidden, ffn, activation, device=_default_device(config))
        if initialize and config.perform_initialization:
            self._initialize_(expert_set, config)
        self.layer = MXFP8ExpertLayer(
            expert_set,
            backend=backend,
            caps=caps,
            token_capacity=token_capacity,
            local_expert_offset=self.local_expert_offset,
            num_global_experts=self.num_local_experts * self.ep_size,
            release_canonical=release_canonical,
        )

    @staticmethod
    @torch.no_grad()
    def _initialize_(expert_set: ExpertSet, config: TransformerConfig) -> None:
        """Initialize like Megatron's experts (fc1: init_method, fc2: output_layer_init_method), then quantize.

        Uses the default torch generator (Megatron forks an expert-parallel CUDA RNG tracker instead).
        """
        device = expert_set.device
        for index in range(expert_set.num_experts):
            for linear, init in (("fc1", config.init_method), ("fc2", config.output_layer_init_method)):
                view = expert_set.expert_weight(linear, index)
                weight = torch.empty(tuple(view.shape), dtype=torch.float32, device=device)
                init(weight)
                view.quantize_(weight.to(config.params_dtype).contiguous())

    # -- weights -----------------------------------------------------------------------------------
    @property
    def expert_set(self) -> ExpertSet:
        return self.layer.expert_set

    @property
    def backend(self) -> Backend:
        return self.layer.backend

    @property
    def token_capacity(self) -> Optional[int]:
        return self.layer.token_capacity

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        """The refit targets ``{"linear_fc1.weight{i}": MXFP8Tensor, ...}`` (same objects on every call)."""
        return self.layer.mxfp8_weights()

    def load_from_module_(self, module: torch.nn.Module, backend: str = "auto") -> "MXFP8Experts":
        """Quantize/copy the weights of a Megatron experts module (TEGroupedMLP, InferenceGroupedMLP, SequentialMLP)."""
        self.layer.expert_set.load_from_module_(module, backend=backend)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        ours = {key: value for key, value in state_dict.items() if key.startswith(prefix)}
        if not ours:
            return  # nothing for this module (e.g. a state dict saved from an MXFP8Experts model)
        try:
            self.layer.expert_set.load_state_dict_(ours, prefix=prefix)
        except MXFP8InputError as error:
            error_msgs.append(f"{prefix}: {error}")

    def backward_dw(self) -> None:
        """No weight gradients: an inference layer."""

    # -- forward -----------------------------------------------------------------------------------
    def _output_buffer(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """The NVLS reduce-scatter-V buffer (fp32 ``[global_max, H]``) when it matches ``x``; else None."""
        if not self._nvls_dispatcher or self.ep_size == 1:
            return None
        rsv = NVLSAllGatherVDispatcher._get_rsv_tensor()
        if rsv is None or rsv.shape[0] != x.shape[0] or rsv.shape[1] != x.shape[1] or rsv.device != x.device:
            return None
        return rsv

    def forward(
        self,
        permuted_local_hidden_states: torch.Tensor,
        tokens_per_expert: Optional[torch.Tensor],
        permuted_probs: torch.Tensor,
        routing_map: Optional[torch.Tensor] = None,
        output_buffer: Optional[torch.Tensor] = None,
        grad_input_buffer: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, None]:
        """Both MoELayer contracts (module docstring); returns ``(out, None)``.

        Inference (``routing_map`` given): rows at or past ``InferenceAllGatherDispatcherBase._valid_tokens()``
        are ignored on the device; output fp32 ``[T, H]`` (the NVLS RSV buffer itself when it applies).
        Standard dispatcher: output ``[R, H]`` in the input dtype (into ``output_buffer`` when given).
        """
        if self.training and torch.is_grad_enabled():
            raise BackendUnavailableError(
                "MXFP8Experts is an inference-only layer: it has no trainable parameters and no backward. "
                "Call model.eval() or run under torch.no_grad()/torch.inference_mode()."
            )
        x = permuted_local_hidden_states
        if routing_map is not None:
            bounded = use_bounded_rows(
                self.layer.token_capacity, ep_size=self.ep_size, nccl_dispatcher=not self._nvls_dispatcher
            )
            out = self.layer.forward_routed(
                x,
                permuted_probs,
                routing_map,
                valid_tokens=InferenceAllGatherDispatcherBase._valid_tokens(),
                use_bounded_rows=bounded,
                out=self._output_buffer(x),
            )
            return out, None
        if tokens_per_expert is None:
            raise MXFP8InputError("tokens_per_expert: required when routing_map is None (standard dispatcher contract)")
        return self.layer.forward_permuted(x, tokens_per_expert, permuted_probs, out=output_buffer), None


__all__ = ["MXFP8Experts", "activation_from_config"]
