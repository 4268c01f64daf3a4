"""MXFP8Experts: Megatron-Core 0.19.2's experts interface around ``MXFP8ExpertLayer``.

MoELayer -> (inference dispatcher) x [T, H] bf16, probs [T, topk] fp32, routing_map [T, topk] global ids
         -> MXFP8Experts.forward -> MXFP8ExpertLayer.forward_routed -> backend -> (out, None) -> combine
MoELayer -> (standard dispatcher, eval) x [R, H] permuted, tokens_per_expert [E], probs [R]
         -> MXFP8ExpertLayer.forward_permuted -> (out [R, H], None)

Built by MoELayer as ``experts(num_local_experts, config, pg_collection=..., name=...)``; the spec binds
``backend`` / ``token_capacity`` with ``functools.partial``. An inference layer: no parameters, no gradients.

Checkpoints: ``state_dict()`` holds the expert weights as BF16 CPU tensors ``linear_fc1.weight{i}`` /
``linear_fc2.weight{i}`` (local index, as TEGroupedMLP names them; dequantized exactly, so quantizing them again
gives the same values) and ``load_state_dict`` reads them back. Megatron's distributed checkpoints
(``sharded_state_dict``) are not supported: load the BF16 checkpoint into the BF16 model and convert it
(``swap_experts_to_mxfp8_``).
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
from ..errors import BackendUnavailableError, MXFP8InputError, ReleasedWeightError
from ..experts import ExpertSet, is_expert_weight_name
from ..format.scales import dequantize_from_bytes
from ..kernels.base import Backend
from ..kernels.caps import DeviceCaps, detect_caps
from ..kernels.select import parse_backend_request
from ..layer import MXFP8ExpertLayer
from ..layouts.cutlass import FlashInferCutlassMXFP8Weight, unpack_cutlass_mxfp8_weights
from ..layouts.routed import FlashInferRoutedMXFP8Weight, unpack_routed_mxfp8_weights
from ..names import local_weight_name
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


def _routed_only_activation(activation, config: TransformerConfig) -> Activation:
    """An explicit ``activation`` for the routed experts; refused where it differs from the config's and the layer
    has shared experts, which Megatron builds from the config (they would silently run the config's activation)."""
    activation = parse_activation(activation)
    if getattr(config, "moe_shared_expert_intermediate_size", None):
        try:
            configured = activation_from_config(config)
        except MXFP8InputError:
            configured = None
        if activation is not configured:
            raise MXFP8InputError(
                f"activation={activation.value!r}: the override reaches the routed experts only, but this layer has "
                f"shared experts (config.moe_shared_expert_intermediate_size), which Megatron builds from "
                f"config.activation_func / gated_linear_unit; they would run another activation than a "
                f"{activation.value} checkpoint holds. Set the activation in the config instead (SwiGLU: the "
                f"standard dispatcher, since 0.19.2's inference-optimized one rejects gated units)"
            )
    return activation


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


def _run_caps(config: TransformerConfig, backend, caps: Optional[DeviceCaps]) -> Optional[DeviceCaps]:
    """Caps to resolve ``backend`` against. Under ``use_cpu_initialization`` on a CUDA host the experts are built
    on the CPU and moved by ``model.cuda()`` later, so an explicit GPU backend is checked against the current
    CUDA device (the one it will run on), not the CPU; None keeps the layer's default (the build device)."""
    if caps is not None or not (config.use_cpu_initialization and torch.cuda.is_available()):
        return caps
    wanted = parse_backend_request(backend)
    if wanted is None or wanted is Backend.REFERENCE:  # "auto" is re-selected after the move; reference runs anywhere
        return None
    return detect_caps(torch.device("cuda", torch.cuda.current_device()))


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
        caps: device capabilities for the backend choice (detected when None: for the build device, or for the
            current CUDA device when ``config.use_cpu_initialization`` builds an explicit GPU backend on the CPU
            of a CUDA host; such a layer must be moved to that GPU before its first forward).
        initialize: quantize freshly initialized weights (``config.init_method`` for fc1,
            ``config.output_layer_init_method`` for fc2) when ``config.perform_initialization``; False leaves zeros
            for a checkpoint load to fill.
        release_canonical: drop the canonical bytes once a repacked kernel stack is built (default: GPU backends;
            ignored for the Triton backend, whose stack is the canonical storage).
        activation: the expert activation (``"swiglu"``, ``"squared_relu"``, ...) overriding the config's; this is
            how gated SwiGLU experts run behind 0.19.2's inference-optimized dispatcher (graph-capturable,
            bounded rows), whose config validation rejects gated linear units. Router and dispatcher never read it.

    Weights: ``mxfp8_weights()`` -> ``{"linear_fc1.weight{i}": MXFP8Tensor, ...}``; writes to them (refit) reach
    the backend stack directly (Triton) or through write hooks (repacked stacks). ``state_dict()`` saves them
    dequantized as BF16 under ``linear_fc1.weight{i}`` / ``linear_fc2.weight{i}`` (local ``i``);
    ``load_state_dict`` accepts BF16 or MXFP8 values under Megatron's expert names (``linear_fc1.weight{i}`` or
    ``local_experts.{i}.linear_fc1.weight``), quantizing BF16; with ``strict`` absent experts are missing keys.
    ``sharded_state_dict()`` raises: distributed checkpoints are not supported (module docstring).

    Bounded rows (inference contract): the bound published by ``bounded_decode_rows`` is checked against the
    rows this rank's dispatcher can fill (``_required_rows``) and the agreement's group size against the EP size.
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
        activation = activation_from_config(config) if activation is None else _routed_only_activation(activation, config)
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
            caps=_run_caps(config, backend, caps),
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

    def derived_tensors(self) -> list[torch.Tensor]:
        """The kernel stack's tensors that write hooks rewrite (``MXFP8ExpertLayer.derived_tensors``)."""
        return self.layer.derived_tensors()

    def load_from_module_(self, module: torch.nn.Module, backend: str = "auto") -> "MXFP8Experts":
        """Quantize/copy the weights of a Megatron experts module (TEGroupedMLP, InferenceGroupedMLP, SequentialMLP)."""
        self.layer.expert_set.load_from_module_(module, backend=backend)
        return self

    # -- checkpoints --------------------------------------------------------------------------------
    def logical_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 ``(fc1 [E, N1, H], fc2 [E, H, I])``, the exact dequantized weights (Megatron row order).

        Read from the canonical bytes, or from the kernel stack once they were released (reference, FlashInfer
        routed and CUTLASS stacks can be read back); raises ReleasedWeightError when neither is possible.
        """
        expert_set = self.layer.expert_set
        if not expert_set.is_released:
            return expert_set.dequantize(torch.float32)
        state = self.layer.stack_state
        stacks = (state.fc1, state.fc2) if state is not None else ()
        if stacks and all(isinstance(stack, torch.Tensor) for stack in stacks):  # reference: fp32 logical values
            return stacks[0].float().clone(), stacks[1].float().clone()
        if stacks and all(isinstance(stack, FlashInferRoutedMXFP8Weight) for stack in stacks):
            return tuple(dequantize_from_bytes(*unpack_routed_mxfp8_weights(stack)) for stack in stacks)
        if stacks and all(isinstance(stack, FlashInferCutlassMXFP8Weight) for stack in stacks):
            return tuple(dequantize_from_bytes(*unpack_cutlass_mxfp8_weights(stack)) for stack in stacks)
        raise ReleasedWeightError(
            f"{self.name or 'MXFP8Experts'}: the canonical expert bytes were released after the "
            f"{self.backend.value} stack was built (release_canonical) and that stack cannot be read back, so the "
            f"expert weights cannot be saved; build the experts with release_canonical=False to save state dicts"
        )

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Adds ``prefix + "linear_fc{1,2}.weight{i}"``: BF16 dequantized weights (``[N1, H]`` / ``[H, I]``) on the
        CPU (a BF16 copy of every expert of a model would not fit beside its MXFP8 weights on the GPU), computed
        one expert at a time from the canonical bytes (one stack at a time when read back from a kernel stack)."""
        super()._save_to_state_dict(destination, prefix, keep_vars)
        expert_set = self.layer.expert_set
        cpu = torch.device("cpu")
        if not expert_set.is_released:
            for linear in ("fc1", "fc2"):
                for index in range(self.num_local_experts):
                    weight = expert_set.expert_weight(linear, index).dequantize(torch.bfloat16)  # exact in bf16
                    destination[prefix + local_weight_name(linear, index)] = weight.to(cpu)
            return
        for linear, stack in zip(("fc1", "fc2"), self.logical_weights()):
            for index in range(self.num_local_experts):
                destination[prefix + local_weight_name(linear, index)] = stack[index].to(cpu, torch.bfloat16)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        """Loads every expert found under ``prefix`` (names in the class docstring); under ``strict``, absent
        experts go to ``missing_keys`` (``linear_fc{1,2}.weight{i}``), and to ``unexpected_keys`` go out-of-range
        experts and every other key under ``prefix`` (expert biases, say) except Megatron's / TE's ``_extra_state``
        and the keys of child modules, as torch's own loader reports them."""
        expert_set = self.layer.expert_set
        found, out_of_range, missing = expert_set.expert_keys(state_dict, prefix)
        if strict:
            unexpected_keys.extend(key for key, _ in out_of_range)
            unexpected_keys.extend(self._foreign_keys(state_dict, prefix))
            missing_keys.extend(missing)
        if not found:
            return
        try:  # every value is checked before the first write
            expert_set.load_state_dict_({key: state_dict[key] for key in found.values()}, prefix=prefix, partial=True)
        except MXFP8InputError as error:
            error_msgs.append(f"{prefix}: {error}")

    def _foreign_keys(self, state_dict, prefix: str) -> list[str]:
        """Keys under ``prefix`` that name no expert weight, no ``_extra_state`` and nothing of a child module."""
        foreign = []
        for key in state_dict:
            if not key.startswith(prefix):
                continue
            local = key[len(prefix):]
            if is_expert_weight_name(local) or local.rsplit(".", 1)[-1] == "_extra_state":
                continue
            if local.split(".", 1)[0] not in self._modules:
                foreign.append(key)
        return foreign

    def sharded_state_dict(self, prefix: str = "", sharded_offsets=(), metadata=None):
        """Not supported: raises MXFP8InputError (a silent empty result would leave the experts unloaded)."""
        raise MXFP8InputError(
            f"{prefix or 'MXFP8Experts'}: distributed checkpoints (sharded_state_dict) of MXFP8Experts are not "
            f"supported. Load the BF16 checkpoint into the BF16 model, then convert it with "
            f"swap_experts_to_mxfp8_(model) (README, 'Convert an existing model'); state_dict()/load_state_dict() "
            f"save and load the experts as BF16 tensors"
        )

    def backward_dw(self) -> None:
        """No weight gradients: an inference layer."""

    # -- forward -----------------------------------------------------------------------------------
    def _required_rows(self, rows: int) -> Optional[int]:
        """Dispatcher rows of a ``rows``-row input that can hold a valid token, as this rank knows on the host.

        EP = 1 and the NCCL dispatcher (graph path: ``ep_size`` equal padded blocks; eager: compact real rows):
        every row, the same number on every rank. NVLS with EP > 1: the buffer has ``global_max`` rows, the
        valid ones are every rank's padded rows concatenated, and this rank's share is
        ``InferenceAllGatherDispatcherBase._get_host_valid_tokens_estimate()`` (its padded rows times the EP
        size, set by the step's first MoE layer); None (full rows) before the dispatcher has set it.
        """
        if self.ep_size == 1 or not self._nvls_dispatcher:
            return rows
        return InferenceAllGatherDispatcherBase._get_host_valid_tokens_estimate()

    def uses_bounded_rows(self, rows: int) -> bool:
        """Whether a routed forward over a ``rows``-row buffer now processes only the bounded prefix (host only)."""
        required = self._required_rows(rows)
        if required is None:
            return False
        return use_bounded_rows(
            self.layer.token_capacity,
            ep_size=self.ep_size,
            nccl_dispatcher=not self._nvls_dispatcher,
            required_rows=required,
        )

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
        if not self.layer.is_built and self.layer.caps.is_cuda and self.expert_set.device.type != "cuda":
            raise BackendUnavailableError(
                f"the {self.backend.value} backend was selected for {self.layer.caps.describe()}, but the experts are "
                f"still on {self.expert_set.device} (use_cpu_initialization); move the model to the GPU "
                f"(model.cuda()) before the first forward"
            )
        if routing_map is not None:
            bounded = self.uses_bounded_rows(x.shape[0])
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
