"""Helpers for examples/decode.py: a small MoE decoder whose MoE blocks are Megatron-Core's real MoELayer.

Demo code, not part of the package. Everything Megatron-specific the demo needs lives here:

- ``PRESETS`` and ``build_config``: Megatron TransformerConfigs for the MoE blocks;
- ``setup_megatron`` / ``apply_cpu_shim``: a one-rank process group (EP = 1) and the minimal CPU shim;
- ``MoEDecoder``: embedding -> per layer [RMSNorm -> decayed running-state mixer, RMSNorm -> MoELayer] ->
  RMSNorm -> LM head, with a full-sequence forward (prefill, comparisons) and a one-token decode step that
  updates per-layer state buffers in place (graph-friendly: fixed shapes and addresses);
- ``BF16RoutedExperts``: the BF16 twin's experts (``moe_reference`` on the BF16 weights, fp32 math), same
  routed contract as ``MXFP8Experts``, swapped in with ``use_experts`` to compute the reference logits;
- ``DecodeRunner``: eager or CUDA-graph decode steps per batch bucket;
- metrics: ``logits_agreement``, ``delta_alignment``, ``expert_memory``; ``perturbed_stream`` for the refit.

Gated SwiGLU and the inference dispatcher (see decode.py's docstring for the reasoning): the MoELayer's own
config is ``transformer_impl="inference_optimized"`` with a non-gated activation, because 0.19.2 rejects
gated units there (its own ``InferenceGroupedMLP`` has none). The router, the NCCL inference dispatcher and
the combine never read the activation. ``MXFP8Experts(activation="swiglu")`` makes the experts run SwiGLU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from typing import Optional

import torch
import torch.nn.functional as F

from megatron_mxfp8_moe.format.swizzle import swizzled_scale_numel

# Shapes of the two presets. qwen3-30b-a3b: Qwen3-30B-A3B's MoE geometry (hidden 2048, 128 experts, top-8,
# expert intermediate 768, vocab 151936, SwiGLU) with 4 layers instead of 48 and a toy token mixer.
PRESETS = {
    "tiny": dict(hidden=128, experts=8, topk=2, intermediate=64, layers=2, vocab=512,
                 batch=4, prompt_len=8, steps=16),
    "qwen3-30b-a3b": dict(hidden=2048, experts=128, topk=8, intermediate=768, layers=4, vocab=151936,
                          batch=8, prompt_len=32, steps=64),
}

DECODE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def decode_bucket(batch: int) -> int:
    """The smallest decode batch bucket holding ``batch`` rows (``batch`` itself past the largest bucket)."""
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    return next((bucket for bucket in DECODE_BUCKETS if bucket >= batch), batch)


# ---- Megatron set-up ------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def apply_cpu_shim() -> None:
    """The smallest change that runs Megatron's MoELayer forward on a CPU (megatron_core.md section 6).

    ``torch.cuda.current_device -> "cpu"`` (``Router.gating`` moves its weight there), a CPU int32 ``[1]``
    ``InferenceAllGatherDispatcherBase._valid_tokens_tensor``, and ``torch._dynamo.config.disable = True`` so
    ``InferenceTopKRouter``'s ``@torch.compile`` runs eagerly (same math; compiling costs ~30 s on a small CPU).
    Process-wide and not undone: the demo is a script.
    """
    import torch._dynamo
    from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase

    torch.cuda.current_device = lambda: "cpu"
    InferenceAllGatherDispatcherBase._valid_tokens_tensor = torch.zeros(1, dtype=torch.int32)
    torch._dynamo.config.disable = True


def setup_megatron(device: torch.device):
    """One-rank world (gloo on the CPU, NCCL on a GPU), TP = PP = EP = 1; returns the ProcessGroupCollection."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.token_dispatcher_inference import NCCLAllGatherDispatcher

    if device.type == "cuda":
        torch.cuda.set_device(device.index if device.index is not None else torch.cuda.current_device())
    else:
        apply_cpu_shim()
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    if device.type == "cuda":
        # What DynamicInferenceContext does at model init: the device int32 [1] valid-token count that the
        # dispatcher fill_s and the experts read (allocated outside any capture: a stable graph address).
        NCCLAllGatherDispatcher.allocate_buffers()
    return ProcessGroupCollection.use_mpu_process_groups()


def teardown_megatron() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def build_config(preset: dict, device: torch.device):
    """The MoE blocks' TransformerConfig (inference-optimized, NCCL inference dispatcher, fp32 router)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=preset["layers"], hidden_size=preset["hidden"], num_attention_heads=8,
        ffn_hidden_size=4 * preset["hidden"], moe_ffn_hidden_size=preset["intermediate"],
        num_moe_experts=preset["experts"], moe_router_topk=preset["topk"], moe_router_dtype="fp32",
        add_bias_linear=False, normalization="RMSNorm", params_dtype=torch.bfloat16, bf16=True,
        use_cpu_initialization=device.type != "cuda", perform_initialization=False,  # weights: init_weights_
        moe_token_dispatcher_type="allgather", transformer_impl="inference_optimized",
        inference_moe_token_dispatcher_type="nccl",
        activation_func=F.silu, gated_linear_unit=False,  # placeholder: 0.19.2 rejects gated units here
    )


def moe_layer_builder(backend: str, token_capacity: Optional[int]):
    """The package's spec (real ``MoELayer`` + ``InferenceTopKRouter`` + MXFP8 experts) with SwiGLU experts.

    ``activation="swiglu"`` overrides the (non-gated placeholder) activation of the inference-optimized config
    for the experts only; the router, dispatcher and combine never read it (see the demo's docstring).
    """
    from megatron_mxfp8_moe.megatron import get_mxfp8_moe_layer_spec

    spec = get_mxfp8_moe_layer_spec(backend=backend, token_capacity=token_capacity, shared_experts=None,
                                    activation="swiglu", initialize=False)
    return lambda config, pg_collection: spec(config=config, pg_collection=pg_collection)


# ---- the model ----------------------------------------------------------------------------------------------

class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6, device=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class DecayMixer(torch.nn.Module):
    """Causal token mixer with a per-channel decayed running state (fp32 ``[rows, H]``), updated in place.

    ``s_t = a * s_{t-1} + (1 - a) * v_t``, ``y_t = W_o (s_t * silu(g_t))`` with ``[v; g] = W_in x_t``.
    """

    def __init__(self, hidden: int, device=None):
        super().__init__()
        self.in_proj = torch.nn.Linear(hidden, 2 * hidden, bias=False, dtype=torch.bfloat16, device=device)
        self.out_proj = torch.nn.Linear(hidden, hidden, bias=False, dtype=torch.bfloat16, device=device)
        self.register_buffer("decay", torch.linspace(0.5, 0.97, hidden, dtype=torch.float32, device=device))

    def step_(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """One token per row: ``x [N, H]`` bf16; ``state [N, H]`` fp32 is updated in place."""
        value, gate = self.in_proj(x).chunk(2, dim=-1)
        state.mul_(self.decay).add_((1.0 - self.decay) * value.float())
        return self.out_proj(state.to(x.dtype) * F.silu(gate))


class Block(torch.nn.Module):
    def __init__(self, hidden: int, moe_layer: torch.nn.Module, device=None):
        super().__init__()
        self.norm1 = RMSNorm(hidden, device=device)
        self.mixer = DecayMixer(hidden, device=device)
        self.norm2 = RMSNorm(hidden, device=device)
        self.mlp = moe_layer  # Megatron-Core MoELayer: refit names are layers.{i}.mlp.experts.linear_fc*.weight{e}

    def moe(self, h: torch.Tensor) -> torch.Tensor:
        """``h [N, H]`` -> MoELayer on ``[N, 1, H]`` (Megatron's [S, B, H]) -> ``[N, H]`` bf16."""
        out, bias = self.mlp(self.norm2(h).unsqueeze(1))
        assert bias is None
        return out.squeeze(1)


class MoEDecoder(torch.nn.Module):
    """embedding -> layers -> RMSNorm -> LM head; ``forward_sequence`` and ``decode_step_`` share the math."""

    def __init__(self, preset: dict, config, pg_collection, *, backend: str, token_capacity: Optional[int],
                 device=None):
        super().__init__()
        hidden, vocab = preset["hidden"], preset["vocab"]
        self.hidden, self.vocab = hidden, vocab
        self.embedding = torch.nn.Embedding(vocab, hidden, dtype=torch.bfloat16, device=device)
        build_moe = moe_layer_builder(backend, token_capacity)
        self.layers = torch.nn.ModuleList(
            Block(hidden, build_moe(config, pg_collection), device=device) for _ in range(preset["layers"])
        )
        self.final_norm = RMSNorm(hidden, device=device)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False, dtype=torch.bfloat16, device=device)

    def moe_layers(self):
        return [block.mlp for block in self.layers]

    def new_states(self, rows: int, device) -> list[torch.Tensor]:
        return [torch.zeros(rows, self.hidden, dtype=torch.float32, device=device) for _ in self.layers]

    def forward_sequence(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Full rows: ``tokens [B, T]`` -> fp32 logits ``[B, T, V]`` and the final mixer states (fresh start)."""
        batch, length = tokens.shape
        h = self.embedding(tokens)  # [B, T, H]
        states = self.new_states(batch, tokens.device)
        for block, state in zip(self.layers, states):
            mixed = self._mix_sequence(block, block.norm1(h), state)
            h = h + mixed
            h = h + block.moe(h.reshape(batch * length, self.hidden)).view(batch, length, self.hidden)
        return self.lm_head(self.final_norm(h)).float(), states

    @staticmethod
    def _mix_sequence(block: Block, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return torch.stack([block.mixer.step_(x[:, t], state) for t in range(x.shape[1])], dim=1)

    def decode_step_(self, tokens: torch.Tensor, states: list[torch.Tensor]) -> torch.Tensor:
        """One token per row: ``tokens [N]`` -> fp32 logits ``[N, V]``; ``states`` updated in place."""
        h = self.embedding(tokens)
        for block, state in zip(self.layers, states):
            h = h + block.mixer.step_(block.norm1(h), state)
            h = h + block.moe(h)
        return self.lm_head(self.final_norm(h)).float()


@torch.no_grad()
def init_weights_(model: MoEDecoder, preset: dict, generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random weights (seeded) for every module; returns the BF16 expert stacks ``[(fc1 [E, 2I, H], fc2 [E, H, I])]``
    per layer, which are also quantized into each layer's MXFP8Experts (the BF16 originals are kept)."""
    device = model.embedding.weight.device
    hidden, inter, experts = preset["hidden"], preset["intermediate"], preset["experts"]

    def randn(*shape, std):
        return (torch.randn(*shape, generator=generator, device=device) * std).to(torch.bfloat16)

    model.embedding.weight.copy_(randn(*model.embedding.weight.shape, std=1.0))
    model.lm_head.weight.copy_(randn(*model.lm_head.weight.shape, std=hidden ** -0.5))
    stacks = []
    for block in model.layers:
        block.mixer.in_proj.weight.copy_(randn(2 * hidden, hidden, std=hidden ** -0.5))
        block.mixer.out_proj.weight.copy_(randn(hidden, hidden, std=hidden ** -0.5))
        router = block.mlp.router
        router.weight.copy_(randn(experts, hidden, std=2.0 * hidden ** -0.5).to(router.weight.dtype))
        fc1 = randn(experts, 2 * inter, hidden, std=hidden ** -0.5)  # [gate; up] rows, Megatron's order
        fc2 = randn(experts, hidden, inter, std=inter ** -0.5)
        block.mlp.experts.expert_set.load_bf16_(fc1, fc2)  # quantize into the canonical MXFP8 storage
        stacks.append((fc1, fc2))
    return stacks


# ---- the BF16 twin's experts ------------------------------------------------------------------------------

class BF16RoutedExperts(torch.nn.Module):
    """Reference experts for the BF16 twin: ``moe_reference`` on the BF16 weights (fp32 math), routed contract.

    Eager only (``moe_reference`` syncs on the host). Rows at or past the dispatcher's valid count are zero,
    as in ``MXFP8Experts``.
    """

    def __init__(self, fc1: torch.Tensor, fc2: torch.Tensor):
        super().__init__()
        self.fc1, self.fc2 = fc1, fc2

    def forward(self, x, tokens_per_expert, probs, routing_map=None, **_):
        from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase

        from megatron_mxfp8_moe import moe_reference

        if routing_map is None:
            raise RuntimeError("BF16RoutedExperts serves the inference dispatcher (routing_map) only")
        valid = InferenceAllGatherDispatcherBase._valid_tokens()
        valid = None if valid is None else int(valid.reshape(-1)[0])
        out = moe_reference(x, self.fc1, self.fc2, probs, routing_map, "swiglu", valid_tokens=valid,
                            compute_dtype=torch.float32)
        return out, None


@contextlib.contextmanager
def use_experts(model: MoEDecoder, experts: list[torch.nn.Module]):
    """Temporarily swap each MoELayer's ``experts`` (the BF16 twin shares every other weight)."""
    layers = model.moe_layers()
    saved = [layer.experts for layer in layers]
    try:
        for layer, module in zip(layers, experts):
            layer.experts = module
        yield model
    finally:
        for layer, module in zip(layers, saved):
            layer.experts = module


# ---- decode steps: eager or CUDA graphs per bucket ----------------------------------------------------------

class DecodeRunner:
    """Decode steps over ``bucket`` rows (the first ``batch`` are requests, the rest padding).

    Static buffers: ``tokens [bucket]`` int64, the per-layer mixer states, and (with graphs) the logits and
    greedy next tokens written by the captured step. ``step_(next_tokens)`` returns greedy next tokens ``[batch]``.
    ``step_context()`` is entered around every eager step and around the capture: Megatron's InferenceMode
    (the inference dispatcher) and ``bounded_decode_rows(True, bucket)`` (the padded rows) when a token capacity
    is set.
    """

    def __init__(self, model: MoEDecoder, batch: int, device: torch.device, *, use_graphs: bool,
                 token_capacity: Optional[int]):
        self.model, self.batch, self.device = model, batch, device
        self.bucket = decode_bucket(batch)
        self.token_capacity = token_capacity
        self.tokens = torch.zeros(self.bucket, dtype=torch.int64, device=device)
        self.states = model.new_states(self.bucket, device)
        self.use_graphs = use_graphs
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.static_next: Optional[torch.Tensor] = None

    @contextlib.contextmanager
    def step_context(self):
        from megatron.core.inference.utils import InferenceMode

        from megatron_mxfp8_moe.megatron import bounded_decode_rows

        with torch.no_grad(), InferenceMode.active(), contextlib.ExitStack() as stack:
            if self.token_capacity is not None:
                stack.enter_context(bounded_decode_rows(True, self.bucket))  # padded rows, not requests
            yield

    def load_states_(self, states: list[torch.Tensor]) -> None:
        """Copy prefill states (``[batch, H]`` each) into the static buffers; padding rows are zeroed."""
        for static, state in zip(self.states, states):
            static.zero_()
            static[: state.shape[0]].copy_(state)

    def _forward(self) -> torch.Tensor:
        logits = self.model.decode_step_(self.tokens, self.states)
        return logits.argmax(-1)

    def capture_(self) -> None:
        """Capture the whole decode step for this bucket (after warm-up on a side stream; states restored)."""
        snapshot = [state.clone() for state in self.states]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with self.step_context():
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up: compiles the router, allocates workspaces, settles the caches
                    self._forward()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.static_next = self._forward()
        for state, saved in zip(self.states, snapshot):  # warm-up advanced the states; capture ran nothing
            state.copy_(saved)
        torch.cuda.synchronize()
        self.graphs[self.bucket] = graph

    def step_(self, next_tokens: torch.Tensor) -> torch.Tensor:
        self.tokens[: self.batch].copy_(next_tokens)
        if self.use_graphs:
            self.graphs[self.bucket].replay()
            return self.static_next[: self.batch]
        with self.step_context():
            return self._forward()[: self.batch]


# ---- metrics ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Agreement:
    """Per-position statistics of two logits tensors. The median cosine is the typical position; the mean and
    min include the few positions where a near-tied router picked a different expert in the two models."""

    cosine_median: float
    cosine_mean: float
    cosine_min: float
    top1: float
    positions: int


def logits_agreement(a: torch.Tensor, b: torch.Tensor) -> Agreement:
    """Per-position cosine similarity and top-1 agreement of two logits tensors ``[..., V]``."""
    a2, b2 = a.reshape(-1, a.shape[-1]).double(), b.reshape(-1, b.shape[-1]).double()
    cosine = F.cosine_similarity(a2, b2, dim=-1)
    top1 = (a2.argmax(-1) == b2.argmax(-1)).double().mean()
    return Agreement(float(cosine.median()), float(cosine.mean()), float(cosine.min()), float(top1), a2.shape[0])


def delta_alignment(new: torch.Tensor, old: torch.Tensor, ref_new: torch.Tensor, ref_old: torch.Tensor) -> float:
    """Median over positions of the cosine between the MXFP8 model's logits change and the BF16 reference's
    (about 0 if the refit had not reached the MXFP8 experts, 1 if both moved alike)."""
    delta = (new - old).reshape(-1, new.shape[-1]).double()
    ref_delta = (ref_new - ref_old).reshape(-1, new.shape[-1]).double()
    return float(F.cosine_similarity(delta, ref_delta, dim=-1).median())


@dataclasses.dataclass(frozen=True)
class ExpertMemory:
    weights: int  # logical expert weights (elements)
    bf16_bytes: int  # 2 bytes per weight
    canonical_bytes: int  # MXFP8 canonical: fp8 data + swizzled E8M0 scales
    stack_extra_bytes: int  # backend kernel stack storage not shared with the canonical bytes

    @property
    def ratio(self) -> float:
        return self.canonical_bytes / self.bf16_bytes


def expert_memory(model: MoEDecoder) -> ExpertMemory:
    """Resident expert-weight bytes (canonical + kernel stacks, each storage once) vs BF16 (2 bytes a weight).

    ``canonical_bytes``: what one MXFP8 copy needs (fp8 data + swizzled E8M0 scales, from the shapes);
    ``stack_extra_bytes``: what the layer keeps resident beyond that (``MXFP8ExpertLayer.resident_bytes()``; the
    Triton stack is the canonical storage, repacking backends release the canonical bytes once their stack holds
    them).
    """
    weights = canonical = resident = 0
    for layer in model.moe_layers():
        expert_layer = layer.experts.layer
        for stack in (expert_layer.expert_set.fc1, expert_layer.expert_set.fc2):
            experts, rows, cols = stack.shape
            weights += experts * rows * cols
            canonical += experts * (rows * cols + swizzled_scale_numel(rows, cols // 32))
        resident += expert_layer.resident_bytes()
    return ExpertMemory(weights, 2 * weights, canonical, resident - canonical)


@torch.no_grad()
def perturbed_stream(stacks: list[tuple[torch.Tensor, torch.Tensor]], scale: float, generator: torch.Generator):
    """A simulated training update, ``W += scale * std(W) * randn`` per expert weight, applied to ``stacks`` in
    place (the BF16 reference follows it) and yielded as ``(Megatron name, bf16 tensor)`` pairs, one layer's
    experts contiguous (what ``refit_experts`` needs for a stream)."""
    for index, (fc1, fc2) in enumerate(stacks):
        for linear, stack in (("linear_fc1", fc1), ("linear_fc2", fc2)):
            for expert in range(stack.shape[0]):
                weight = stack[expert]
                noise = torch.randn(weight.shape, generator=generator, device=weight.device)
                weight.add_((noise * (scale * weight.float().std())).to(weight.dtype))
                yield f"layers.{index}.mlp.experts.{linear}.weight{expert}", weight
