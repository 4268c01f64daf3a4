"""Megatron-Core's REAL MoELayer + router + dispatchers with MXFP8Experts (reference backend) on the CPU.

CPU shim (megatron_core.md §6), applied by the ``cpu_megatron`` fixture / in each spawned worker and undone
after: ``torch.cuda.current_device -> "cpu"`` (the router moves its weight there), a CPU int32 ``[1]``
``InferenceAllGatherDispatcherBase._valid_tokens_tensor``, and ``torch._dynamo.config.disable = True`` so
``InferenceTopKRouter``'s ``@torch.compile`` runs eagerly (same math; compiling takes ~30 s on this CPU).

Error bounds (relative Frobenius error vs a float64 oracle on the dequantized weights, same routing):
- MXFP8Experts' own output (fp32, exact dequantized weights, fp32 math): <= 1e-5.
- MoELayer output: the inference dispatchers cast to bf16 (2**-8 relative rounding): <= 1e-2.
- Megatron's BF16 SequentialMLP on the same dequantized weights rounds its intermediates to bf16 too:
  <= 2e-2 vs the oracle, and MXFP8 MoELayer vs Megatron BF16 MoELayer <= 2e-2.
"""

import contextlib
import importlib.util
import json
import os
import socket
from functools import partial

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.activations import squared_relu
from megatron.core.inference.utils import InferenceMode
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.mlp import MLPSubmodules
from megatron.core.transformer.moe.experts import SequentialMLP
from megatron.core.transformer.moe.moe_layer import MoELayer, MoESubmodules
from megatron.core.transformer.moe.router import InferenceTopKRouter, TopKRouter
from megatron.core.transformer.moe.shared_experts import SharedExpertMLP
from megatron.core.transformer.moe.token_dispatcher_inference import InferenceAllGatherDispatcherBase
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron_mxfp8_moe.errors import BackendUnavailableError, MXFP8InputError
from megatron_mxfp8_moe.kernels.base import Backend
from megatron_mxfp8_moe.kernels.caps import DeviceCaps
from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.kernels.reference_backend import ReferenceBackend
from megatron_mxfp8_moe.megatron import (
    MXFP8Experts,
    bounded_decode_rows,
    get_mxfp8_moe_layer_spec,
    swap_experts_to_mxfp8_,
)
from megatron_mxfp8_moe.tensor import quantize_mxfp8
from megatron_mxfp8_moe.testing import relative_error

H, I, EXPERTS, TOPK = 64, 32, 4, 2
EXPERT_BOUND, LAYER_BOUND, BF16_MEGATRON_BOUND = 1e-5, 1e-2, 2e-2


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(gated: bool, **overrides):
    common = dict(
        num_layers=1, hidden_size=H, num_attention_heads=4, ffn_hidden_size=2 * H, moe_ffn_hidden_size=I,
        num_moe_experts=EXPERTS, moe_router_topk=TOPK, moe_router_dtype="fp32", add_bias_linear=False,
        normalization="RMSNorm", params_dtype=torch.bfloat16, bf16=True, use_cpu_initialization=True,
        moe_token_dispatcher_type="allgather",
    )
    if gated:  # 0.19.2's inference_optimized rejects gated units: SwiGLU runs through the standard dispatcher
        common.update(transformer_impl="local", activation_func=F.silu, gated_linear_unit=True)
    else:
        common.update(transformer_impl="inference_optimized", activation_func=squared_relu, gated_linear_unit=False,
                      inference_moe_token_dispatcher_type="nccl")
    common.update(overrides)
    return TransformerConfig(**common)


def _apply_cpu_shim():
    """Returns an undo function (used directly in spawned workers)."""
    import torch._dynamo

    saved = (torch.cuda.current_device, InferenceAllGatherDispatcherBase._valid_tokens_tensor, torch._dynamo.config.disable)
    torch.cuda.current_device = lambda: "cpu"
    InferenceAllGatherDispatcherBase._valid_tokens_tensor = torch.zeros(1, dtype=torch.int32)
    torch._dynamo.config.disable = True

    def undo():
        torch.cuda.current_device, InferenceAllGatherDispatcherBase._valid_tokens_tensor, torch._dynamo.config.disable = saved

    return undo


@pytest.fixture(scope="module")
def process_groups():
    """A one-process gloo world with EP = 1 (torn down after the module)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    yield ProcessGroupCollection.use_mpu_process_groups()
    parallel_state.destroy_model_parallel()
    if owns:
        dist.destroy_process_group()


@pytest.fixture
def cpu_megatron(process_groups, monkeypatch):
    import torch._dynamo

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(InferenceAllGatherDispatcherBase, "_valid_tokens_tensor", torch.zeros(1, dtype=torch.int32))
    with torch._dynamo.config.patch(disable=True):
        yield process_groups


def _bf16_megatron_layer(config, pg_collection, router):
    """Megatron's own MoELayer with BF16 SequentialMLP experts."""
    experts = partial(SequentialMLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear))
    return MoELayer(config, MoESubmodules(experts=experts, router=router), pg_collection=pg_collection).eval()


def _load_dequantized_into_sequential(sequential, mxfp8_experts):
    fc1, fc2 = mxfp8_experts.expert_set.dequantize(torch.float32)
    with torch.no_grad():
        for index, expert in enumerate(sequential.local_experts):
            expert.linear_fc1.weight.copy_(fc1[index].to(torch.bfloat16))  # exact: e4m3 * 2**k fits bf16
            expert.linear_fc2.weight.copy_(fc2[index].to(torch.bfloat16))


class _Recorder:
    """Forward hook on the experts: inputs and output of each call."""

    def __init__(self, module):
        self.calls = []
        module.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs, output):
        self.calls.append((args, kwargs, output))


def _route(x, router_weight):
    """Megatron's default top-k routing (moe_router_pre_softmax=False): softmax over the top-k logits."""
    logits = x.view(-1, H).float() @ router_weight.detach().float().T
    top_logits, ids = torch.topk(logits, TOPK, dim=-1)
    return torch.softmax(top_logits, dim=-1), ids


def _oracle(x, routing_map, probs, experts_module, activation):
    return moe_reference(x, experts_module.expert_set.fc1, experts_module.expert_set.fc2, probs, routing_map, activation,
                         local_expert_offset=experts_module.local_expert_offset)


@pytest.mark.parametrize("gated", [False, True], ids=["squared_relu-inference-dispatcher", "swiglu-standard-dispatcher"])
def test_mxfp8_moe_layer_matches_megatron_bf16_experts(cpu_megatron, gated):
    config = _config(gated)
    router = TopKRouter if gated else InferenceTopKRouter
    bf16_layer = _bf16_megatron_layer(config, cpu_megatron, router)
    mxfp8_layer = _bf16_megatron_layer(config, cpu_megatron, router)
    with torch.no_grad():
        mxfp8_layer.router.weight.copy_(bf16_layer.router.weight)  # same routing
    assert swap_experts_to_mxfp8_(mxfp8_layer, backend="reference") == ["experts"]
    experts = mxfp8_layer.experts
    assert isinstance(experts, MXFP8Experts) and experts.backend.value == "reference"
    _load_dequantized_into_sequential(bf16_layer.experts, experts)
    recorder = _Recorder(experts)

    x = torch.randn(7, 1, H, dtype=torch.bfloat16)
    with torch.no_grad():
        if gated:
            out, _ = mxfp8_layer(x)
        else:
            with InferenceMode.active():
                out, _ = mxfp8_layer(x)
        reference_out, _ = bf16_layer(x)  # Megatron's BF16 experts, standard dispatcher, same router weights

    (args, kwargs, (expert_out, bias)), = recorder.calls
    assert bias is None
    hidden, tokens_per_expert, probs = args[:3]
    if gated:  # standard contract: permuted rows, 1-D probs, no routing map
        assert "routing_map" not in kwargs and tokens_per_expert.shape == (EXPERTS,) and probs.dim() == 1
        ids = torch.repeat_interleave(torch.arange(EXPERTS), tokens_per_expert).unsqueeze(-1)
        expert_oracle = _oracle(hidden, ids, probs.unsqueeze(-1), experts, "swiglu")
        assert relative_error(expert_out, expert_oracle) <= LAYER_BOUND  # permuted output is bf16
    else:  # inference contract: unpermuted rows, [T, topk] fp32 probs and int64 global ids
        routing_map = kwargs["routing_map"]
        assert tokens_per_expert is None and routing_map.shape == (7, TOPK) and routing_map.dtype == torch.int64
        assert probs.dtype == torch.float32 and expert_out.dtype == torch.float32
        expert_oracle = _oracle(hidden, routing_map, probs, experts, "squared_relu")
        assert relative_error(expert_out, expert_oracle) <= EXPERT_BOUND

    # Whole-layer oracle: the same routing (router re-run in float), float64 experts.
    probs_full, ids_full = _route(x, mxfp8_layer.router.weight)
    layer_oracle = _oracle(x.view(-1, H), ids_full, probs_full, experts, "swiglu" if gated else "squared_relu")
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert relative_error(out.view(-1, H), layer_oracle) <= LAYER_BOUND
    assert relative_error(reference_out.view(-1, H), layer_oracle) <= BF16_MEGATRON_BOUND
    assert relative_error(out, reference_out) <= BF16_MEGATRON_BOUND


def test_spec_builds_initialized_layer_and_refit_reaches_it(cpu_megatron):
    config = _config(False)
    spec = get_mxfp8_moe_layer_spec(backend="reference", token_capacity=4, shared_experts=None)
    layer = spec(config=config, pg_collection=cpu_megatron).eval()
    assert isinstance(layer.router, InferenceTopKRouter) and isinstance(layer.experts, MXFP8Experts)
    assert layer.experts.token_capacity == 4
    fc1, _ = layer.experts.expert_set.dequantize(torch.float32)
    assert fc1.abs().sum() > 0 and 0.5 * config.init_method_std < fc1.std() < 2 * config.init_method_std

    x = torch.randn(5, 1, H, dtype=torch.bfloat16)
    with torch.no_grad(), InferenceMode.active():
        before, _ = layer(x)
        # refit as other code does it: every module with mxfp8_weights(), then quantize_ in place
        targets = [m for m in layer.modules() if hasattr(m, "mxfp8_weights")]
        assert targets == [layer.experts, layer.experts.layer]
        weights = targets[0].mxfp8_weights()
        for tensor in weights.values():
            tensor.quantize_(torch.randn(tuple(tensor.shape)) * 0.05)
        after, _ = layer(x)
    assert layer.experts.layer.stack_state.repacks == len(weights)
    probs, ids = _route(x, layer.router.weight)
    oracle = _oracle(x.view(-1, H), ids, probs, layer.experts, "squared_relu")
    assert relative_error(after.view(-1, H), oracle) <= LAYER_BOUND
    assert relative_error(before, after) > 0.1  # the new weights are in use


def test_spec_router_follows_transformer_impl_and_standard_path_runs_under_inference_mode(cpu_megatron):
    """Megatron's engines make ``InferenceMode`` active, where ``InferenceTopKRouter`` returns ``[T, topk]`` ids: the
    standard dispatchers (any ``transformer_impl`` but "inference_optimized") need the training router's dense map, so
    the spec builds ``TopKRouter`` there. Before, this layer raised inside Megatron's dispatcher under InferenceMode."""
    config = _config(True)  # transformer_impl="local": the standard (allgather) dispatcher, SwiGLU
    layer = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None)(config=config, pg_collection=cpu_megatron).eval()
    assert type(layer.router) is TopKRouter
    x = torch.randn(6, 1, H, dtype=torch.bfloat16)
    with torch.no_grad():
        eager, _ = layer(x)
        with InferenceMode.active():
            engine, _ = layer(x)
    probs, ids = _route(x, layer.router.weight)
    oracle = _oracle(x.view(-1, H), ids, probs, layer.experts, "swiglu")
    assert relative_error(engine.view(-1, H), oracle) <= LAYER_BOUND
    assert torch.equal(engine, eager)
    optimized = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None)(
        config=_config(False), pg_collection=cpu_megatron)
    assert type(optimized.router) is InferenceTopKRouter


def test_an_activation_override_is_refused_where_shared_experts_would_keep_the_config_one(cpu_megatron):
    """Shared experts are built from the config, so an override that differs from it would leave them on the
    placeholder activation (squared ReLU here) beside SwiGLU routed experts: refused, naming the way out."""
    shared = partial(SharedExpertMLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear))
    config = _config(False, moe_shared_expert_intermediate_size=I)
    with pytest.raises(MXFP8InputError, match="activation='swiglu'.*shared experts.*Set the activation in the config"):
        get_mxfp8_moe_layer_spec(backend="reference", shared_experts=shared, activation="swiglu")(
            config=config, pg_collection=cpu_megatron)
    layer = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=shared, activation="squared_relu")(
        config=config, pg_collection=cpu_megatron)  # the config's own activation: fine
    assert layer.experts.expert_set.activation.value == "squared_relu" and layer.shared_experts is not None


def test_gated_swiglu_through_the_inference_dispatcher_with_an_activation_override(cpu_megatron):
    """0.19.2's inference_optimized config rejects gated units; MXFP8Experts(activation="swiglu") runs them
    behind the inference dispatcher anyway (the router and dispatcher never read the activation)."""
    config = _config(False)  # inference_optimized, squared_relu placeholder for the config validation
    spec = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None, activation="swiglu")
    layer = spec(config=config, pg_collection=cpu_megatron).eval()
    experts = layer.experts
    assert experts.expert_set.activation.value == "swiglu" and experts.expert_set.fc1.shape[1] == 2 * I
    recorder = _Recorder(experts)
    x = torch.randn(6, 1, H, dtype=torch.bfloat16)
    with torch.no_grad(), InferenceMode.active():
        out, _ = layer(x)
    (args, kwargs, (expert_out, _)), = recorder.calls
    assert args[1] is None and kwargs["routing_map"].shape == (6, TOPK)  # the inference contract
    expert_oracle = _oracle(args[0], kwargs["routing_map"], args[2], experts, "swiglu")
    assert relative_error(expert_out, expert_oracle) <= EXPERT_BOUND
    probs, ids = _route(x, layer.router.weight)
    assert relative_error(out.view(-1, H), _oracle(x.view(-1, H), ids, probs, experts, "swiglu")) <= LAYER_BOUND


def test_training_with_autograd_is_refused(cpu_megatron):
    experts = MXFP8Experts(EXPERTS, _config(False), pg_collection=cpu_megatron, backend="reference")
    x = torch.randn(3, H, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(BackendUnavailableError, match="inference-only"):
        experts(x, torch.tensor([1, 1, 1, 0]), torch.rand(3))
    experts.eval()
    out, bias = experts(x, torch.tensor([1, 1, 1, 0]), torch.rand(3))
    assert bias is None and out.shape == (3, H)
    experts.backward_dw()  # no-op


def test_ep1_bound_below_the_dispatcher_rows_gives_full_rows(cpu_megatron, monkeypatch, caplog):
    """EP = 1: every row the dispatcher hands over can be valid (it fills valid_tokens with the row count), so a
    bound of 3 for a 12-row step (e.g. real tokens instead of the padded graph rows) must not truncate rows 3.."""
    experts = MXFP8Experts(EXPERTS, _config(False), pg_collection=cpu_megatron, backend="reference",
                           token_capacity=4).eval()
    seen_rows = []
    original = ReferenceBackend.run

    def spy(self, state, x, probs, routing_map, **kwargs):
        seen_rows.append(kwargs["rows"])
        return original(self, state, x, probs, routing_map, **kwargs)

    monkeypatch.setattr(ReferenceBackend, "run", spy)
    x = torch.randn(12, H, dtype=torch.bfloat16)
    probs = torch.rand(12, TOPK)
    ids = torch.randint(0, EXPERTS, (12, TOPK))
    InferenceAllGatherDispatcherBase._valid_tokens_tensor.fill_(12)
    with torch.no_grad(), bounded_decode_rows(decode_only=True, ep_token_bound=3):
        assert not experts.uses_bounded_rows(12)
        out, _ = experts(x, None, probs, routing_map=ids)
    assert seen_rows == [12]
    assert relative_error(out, _oracle(x, ids, probs, experts, "squared_relu")) <= EXPERT_BOUND
    assert "ep_token_bound=3 is below the 12 dispatcher rows" in caplog.text


def test_prefill_over_capacity_gives_full_rows(cpu_megatron, monkeypatch):
    config = _config(False)
    layer = get_mxfp8_moe_layer_spec(backend="reference", token_capacity=4, shared_experts=None)(
        config=config, pg_collection=cpu_megatron).eval()
    seen_rows = []
    original = ReferenceBackend.run
    monkeypatch.setattr(ReferenceBackend, "run",
                        lambda self, *a, **k: seen_rows.append(k["rows"]) or original(self, *a, **k))
    x = torch.randn(9, 1, H, dtype=torch.bfloat16)
    probs, ids = _route(x, layer.router.weight)
    oracle = _oracle(x.view(-1, H), ids, probs, layer.experts, "squared_relu")
    with torch.no_grad(), InferenceMode.active():
        for decode_only, bound in ((False, 9), (True, 9)):  # prefill; decode-only but over capacity
            with bounded_decode_rows(decode_only=decode_only, ep_token_bound=bound):
                out, _ = layer(x)
            assert relative_error(out.view(-1, H), oracle) <= LAYER_BOUND
        with bounded_decode_rows(decode_only=True, ep_token_bound=4):  # within capacity: the prefix only
            out, _ = layer(x[:4])
    assert seen_rows == [9, 9, 4]
    assert relative_error(out.view(-1, H), oracle[:4]) <= LAYER_BOUND


# ---- checkpoints (state_dict / sharded_state_dict) --------------------------------------------------------

def _two_spec_layers(pg_collection, **kwargs):
    spec = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None, **kwargs)
    torch.manual_seed(0)
    a = spec(config=_config(False), pg_collection=pg_collection).eval()
    torch.manual_seed(1)
    b = spec(config=_config(False), pg_collection=pg_collection).eval()
    return a, b


def test_state_dict_saves_bf16_experts_and_strict_load_round_trips(cpu_megatron):
    a, b = _two_spec_layers(cpu_megatron)
    state = a.state_dict()
    names = [f"experts.linear_fc{n}.weight{i}" for n in (1, 2) for i in range(EXPERTS)]
    assert set(names) <= set(state)
    assert all(state[name].dtype == torch.bfloat16 for name in names)
    assert state["experts.linear_fc1.weight0"].shape == (I, H) and state["experts.linear_fc2.weight3"].shape == (H, I)
    fc1, fc2 = a.experts.expert_set.dequantize(torch.float32)
    assert torch.equal(state["experts.linear_fc1.weight2"].float(), fc1[2])  # exact: e4m3 * 2**k fits bf16
    assert not torch.equal(b.experts.expert_set.dequantize(torch.float32)[0], fc1)
    result = b.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    for mine, theirs in zip(b.experts.expert_set.dequantize(torch.float32), (fc1, fc2)):
        assert torch.equal(mine, theirs)
    x = torch.randn(5, 1, H, dtype=torch.bfloat16)
    with torch.no_grad(), InferenceMode.active():
        assert torch.equal(a(x)[0], b(x)[0])
    assert b.state_dict()["experts.linear_fc2.weight1"].equal(state["experts.linear_fc2.weight1"])  # stable


def test_strict_load_without_expert_weights_reports_them_missing(cpu_megatron):
    a, b = _two_spec_layers(cpu_megatron)
    before = b.experts.expert_set.dequantize(torch.float32)[0].clone()
    router_only = {"router.weight": a.state_dict()["router.weight"]}
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*experts\.linear_fc1\.weight0.*experts\.linear_fc2\.weight3"):
        b.load_state_dict(router_only, strict=True)
    assert torch.equal(b.experts.expert_set.dequantize(torch.float32)[0], before)  # nothing half-loaded
    state = a.state_dict()
    partial_state = {"router.weight": state["router.weight"], "experts.linear_fc1.weight1": state["experts.linear_fc1.weight1"],
                     "experts.linear_fc1.weight9": state["experts.linear_fc1.weight1"]}  # 9: not a local expert
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*weight9"):
        b.load_state_dict(partial_state, strict=True)
    result = b.load_state_dict(partial_state, strict=False)  # non-strict: loads what is there
    assert torch.equal(b.experts.expert_set.dequantize(torch.float32)[0][1], a.experts.expert_set.dequantize(torch.float32)[0][1])
    assert torch.equal(b.experts.expert_set.dequantize(torch.float32)[0][0], before[0])
    assert len(result.missing_keys) == 2 * EXPERTS - 1 and "experts.linear_fc1.weight1" not in result.missing_keys
    assert result.unexpected_keys == ["experts.linear_fc1.weight9"]  # reported, as torch does for parameters


def test_strict_load_reports_foreign_expert_keys_and_accepts_extra_state(cpu_megatron):
    """Keys under the experts prefix that name no expert weight (a biased checkpoint's expert biases, a typo) are
    unexpected, as Megatron's BF16 experts report them (torch raises for them under strict, after loading, and returns
    them otherwise); Megatron's / TE's ``_extra_state`` is not."""
    a, b = _two_spec_layers(cpu_megatron)
    state = dict(a.state_dict())
    foreign = {"experts.local_experts.0.linear_fc1.bias": torch.ones(I), "experts.linear_fc2.bias1": torch.ones(H),
               "experts.bogus": torch.ones(1)}
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*linear_fc1\.bias.*linear_fc2\.bias1.*experts\.bogus"):
        b.load_state_dict({**state, **foreign}, strict=True)
    result = b.load_state_dict({**state, **foreign}, strict=False)
    assert result.unexpected_keys == list(foreign) and not result.missing_keys
    assert torch.equal(b.experts.expert_set.dequantize(torch.float32)[0], a.experts.expert_set.dequantize(torch.float32)[0])
    state["experts.linear_fc1._extra_state"] = None  # as TEGroupedMLP / Megatron's linears save it
    state["experts.local_experts.0.linear_fc2._extra_state"] = None
    result = b.load_state_dict(state, strict=True)
    assert not result.unexpected_keys and not result.missing_keys


def test_sharded_state_dict_is_refused_with_the_documented_path(cpu_megatron):
    a, _ = _two_spec_layers(cpu_megatron)
    with pytest.raises(MXFP8InputError, match="distributed checkpoints.*swap_experts_to_mxfp8_"):
        a.sharded_state_dict(prefix="decoder.layers.0.mlp.")


def test_state_dict_after_the_canonical_bytes_were_released(cpu_megatron):
    a, _ = _two_spec_layers(cpu_megatron, release_canonical=True)
    expected = a.experts.expert_set.dequantize(torch.float32)
    a.experts.layer.build_()
    assert a.experts.expert_set.is_released
    state = a.state_dict()  # read back from the reference backend's fp32 stack
    for index in range(EXPERTS):
        assert torch.equal(state[f"experts.linear_fc1.weight{index}"].float(), expected[0][index])
        assert torch.equal(state[f"experts.linear_fc2.weight{index}"].float(), expected[1][index])


@pytest.mark.parametrize("activation", ["squared_relu", "swiglu"])
def test_state_dict_reads_back_a_released_flashinfer_routed_stack(cpu_megatron, monkeypatch, activation):
    """The routed layout is pure tensor work: built on the CPU (launch requirement bypassed), canonical released."""
    monkeypatch.setattr("megatron_mxfp8_moe.kernels.flashinfer_compat.require_flashinfer_routed_mxfp8",
                        lambda *args, **kwargs: None)
    experts = MXFP8Experts(EXPERTS, _config(False), pg_collection=cpu_megatron, backend="flashinfer_routed",
                           caps=DeviceCaps("cpu", (10, 0), "0.7.2.post1", "3.6.0"), activation=activation).eval()
    expected = experts.expert_set.dequantize(torch.float32)
    experts.layer.build_()
    assert experts.backend is Backend.FLASHINFER_ROUTED and experts.expert_set.is_released
    state = experts.state_dict()
    for index in range(EXPERTS):
        assert torch.equal(state[f"linear_fc1.weight{index}"].float(), expected[0][index])
        assert torch.equal(state[f"linear_fc2.weight{index}"].float(), expected[1][index])


def test_requantizing_saved_bf16_weights_gives_the_same_weights():
    """The claim 'same bytes' holds for the VALUES: a block whose max rounded down to 224 * 2**s is stored again
    as 448 * 2**(s-1) (scale byte one lower, data doubled), the same numbers. A second round trip is byte-stable."""
    torch.manual_seed(0)
    first = quantize_mxfp8((torch.randn(64, 128) * 0.05).to(torch.bfloat16), backend="reference")
    second = quantize_mxfp8(first.dequantize(torch.bfloat16), backend="reference")
    third = quantize_mxfp8(second.dequantize(torch.bfloat16), backend="reference")
    assert torch.equal(first.dequantize(torch.float32), second.dequantize(torch.float32))
    changed = first.logical_scales() != second.logical_scales()
    assert changed.any()  # the byte claim is false in general ...
    block_max = first.data.float().abs().reshape(64, 4, 32).amax(-1)
    assert torch.equal(block_max[changed], torch.full_like(block_max[changed], 224.0))  # ... only for these blocks
    assert torch.equal(second.data.view(torch.uint8), third.data.view(torch.uint8))
    assert torch.equal(second.scale_bytes(), third.scale_bytes())


# ---- construction edge cases ---------------------------------------------------------------------------------

def test_cpu_initialization_with_an_explicit_gpu_backend_resolves_for_the_gpu(cpu_megatron, monkeypatch):
    """use_cpu_initialization builds on the CPU and model.cuda() moves later: an explicit backend is checked
    against the current CUDA device (here a simulated Hopper), not the CPU it is built on."""
    hopper = DeviceCaps("cuda", (9, 0), "0.7.2.post1", "3.8.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr("megatron_mxfp8_moe.megatron.experts.detect_caps",
                        lambda device=None: hopper if torch.device(device).type == "cuda" else DeviceCaps("cpu"))
    config = _config(False, use_cpu_initialization=True)
    experts = MXFP8Experts(EXPERTS, config, pg_collection=cpu_megatron, backend="triton").eval()
    assert experts.backend is Backend.TRITON and experts.expert_set.device.type == "cpu"
    assert experts.layer.caps == hopper
    with pytest.raises(BackendUnavailableError, match="still on cpu.*model.cuda"):
        experts(torch.randn(3, H, dtype=torch.bfloat16), None, torch.rand(3, TOPK), routing_map=torch.zeros(3, TOPK, dtype=torch.int64))
    with pytest.raises(BackendUnavailableError, match="flashinfer_routed. cannot run here"):  # truly cannot run on that GPU
        MXFP8Experts(EXPERTS, config, pg_collection=cpu_megatron, backend="flashinfer_routed")
    assert MXFP8Experts(EXPERTS, config, pg_collection=cpu_megatron, backend="auto").backend is Backend.REFERENCE


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None, reason="needs Transformer Engine absent")
def test_default_shared_experts_without_transformer_engine_fail_clearly(cpu_megatron):
    spec = get_mxfp8_moe_layer_spec(backend="reference")
    spec(config=_config(False), pg_collection=cpu_megatron)  # no shared experts configured: builds
    with pytest.raises(MXFP8InputError, match="shared_experts.*Transformer Engine"):
        spec(config=_config(False, moe_shared_expert_intermediate_size=32), pg_collection=cpu_megatron)


# ---- EP = 2 over two gloo processes --------------------------------------------------------------------

def _ep2_case(pgc, gated):
    config = _config(gated)
    torch.manual_seed(0)  # same router weights on both ranks
    layer = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None,
                                     router=TopKRouter if gated else InferenceTopKRouter)(config=config, pg_collection=pgc).eval()
    torch.manual_seed(100 + layer.experts.ep_rank)  # different experts and tokens per rank
    for tensor in layer.experts.mxfp8_weights().values():
        tensor.quantize_(torch.randn(tuple(tensor.shape)) * 0.05)
    recorder = _Recorder(layer.experts)
    x = torch.randn(3, 1, H, dtype=torch.bfloat16)
    with torch.no_grad():
        if gated:
            out, _ = layer(x)
        else:
            with InferenceMode.active():
                out, _ = layer(x)
    # all experts' dequantized weights, gathered: [4, N1, H] and [4, H, I]
    local_fc1, local_fc2 = layer.experts.expert_set.dequantize(torch.float32)
    gathered = [[torch.empty_like(local_fc1) for _ in range(2)], [torch.empty_like(local_fc2) for _ in range(2)]]
    dist.all_gather(gathered[0], local_fc1)
    dist.all_gather(gathered[1], local_fc2)
    fc1, fc2 = torch.cat(gathered[0]), torch.cat(gathered[1])
    probs, ids = _route(x, layer.router.weight)
    activation = "swiglu" if gated else "squared_relu"
    oracle = moe_reference(x.view(-1, H), fc1.double(), fc2.double(), probs, ids, activation)
    (args, kwargs, (expert_out, _)), = recorder.calls
    result = {
        "ep_rank": layer.experts.ep_rank, "ep_size": layer.experts.ep_size,
        "offset": layer.experts.local_expert_offset,
        "layer_error": relative_error(out.view(-1, H), oracle),
        "rows_seen": int(args[0].shape[0]),
    }
    if not gated:
        expert_oracle = _oracle(args[0], kwargs["routing_map"], args[2], layer.experts, activation)
        result["expert_error"] = relative_error(expert_out, expert_oracle)
    return result


def _ep2_rows_cases(pgc):
    """Bounded rows at EP = 2 (findings: padded rows, un-agreed flags). Max |full - bounded| over the real rows."""
    from megatron.core.transformer.moe.token_dispatcher_inference import NCCLAllGatherDispatcher

    rank = dist.get_rank()
    results = {}

    def layer_with(capacity):
        torch.manual_seed(0)
        layer = get_mxfp8_moe_layer_spec(backend="reference", shared_experts=None, token_capacity=capacity)(
            config=_config(False, num_moe_experts=8), pg_collection=pgc).eval()
        torch.manual_seed(100 + rank)
        for tensor in layer.experts.mxfp8_weights().values():
            tensor.quantize_(torch.randn(tuple(tensor.shape)) * 0.05)
        return layer

    # NCCL graph path: a 4-row bucket per rank with 3 real tokens; bound 3 * 2 = 6 from REAL counts (rows: 8).
    layer = layer_with(6)
    torch.manual_seed(7 + rank)
    x = torch.randn(4, 1, H, dtype=torch.bfloat16)
    with torch.no_grad(), InferenceMode.active():
        full, _ = layer(x)
        with bounded_decode_rows(decode_only=True, ep_token_bound=3 * 2, ep_group=pgc.ep) as rows:
            bounded, _ = layer(x)
    results["padded_bound"] = (full.float() - bounded.float()).abs().max().item()
    results["group_size"] = rows.group_size
    # NCCL eager path, un-agreed flag: rank 0 decodes 2 tokens under bounded_decode_rows WITHOUT ep_group,
    # rank 1 prefills 6 tokens; 8 gathered rows, capacity 4.
    layer = layer_with(4)
    torch.manual_seed(7 + rank)
    x = torch.randn(2 if rank == 0 else 6, 1, H, dtype=torch.bfloat16)
    NCCLAllGatherDispatcher._use_allgather_v = True
    try:
        with torch.no_grad(), InferenceMode.active():
            full, _ = layer(x)
            block = bounded_decode_rows(True, 2 * 2) if rank == 0 else contextlib.nullcontext()
            with block:
                bounded, _ = layer(x)
    finally:
        NCCLAllGatherDispatcher._use_allgather_v = False
    results["unagreed"] = (full.float() - bounded.float()).abs().max().item()
    # NVLS-like buffer (the experts called directly): 12 rows, rank 0 hands 2 padded rows, rank 1 3, so rows
    # [0, 5) are valid; capacity 6. Rows 6.. are poison, row 5 is stale inside the prefix.
    config = _config(False, num_moe_experts=8, inference_moe_token_dispatcher_type="nvls")
    torch.manual_seed(100 + rank)
    experts = MXFP8Experts(4, config, pg_collection=pgc, backend="reference", token_capacity=6).eval()
    torch.manual_seed(5)  # the same gathered buffer on both ranks
    x = torch.randn(12, H, dtype=torch.bfloat16)
    probs = torch.rand(12, TOPK)
    ids = torch.randint(0, 8, (12, TOPK))
    x[6:], probs[6:] = float("nan"), float("nan")
    x[5] = 1e4
    local = 2 if rank == 0 else 3
    saved = InferenceAllGatherDispatcherBase._host_valid_tokens_estimate
    InferenceAllGatherDispatcherBase._host_valid_tokens_estimate = local * 2  # what update_metadata publishes
    InferenceAllGatherDispatcherBase._valid_tokens_tensor.fill_(5)
    seen_rows = []
    original = ReferenceBackend.run
    ReferenceBackend.run = lambda self, *a, **k: seen_rows.append(k["rows"]) or original(self, *a, **k)
    try:
        with torch.no_grad(), bounded_decode_rows(True, local * 2, ep_group=pgc.ep):  # padded rows x EP: agreed 6
            out, _ = experts(x, None, probs, routing_map=ids)
        results["nvls_rows"] = seen_rows
        results["nvls_finite"] = bool(torch.isfinite(out).all())
        results["nvls_error"] = relative_error(out[:5], _oracle(x[:5], ids[:5], probs[:5], experts, "squared_relu"))
        try:
            with torch.no_grad(), bounded_decode_rows(True, local, ep_group=pgc.ep):  # tokens, not rows: agreed 3
                experts(x, None, probs, routing_map=ids)
            results["nvls_short_bound"] = "accepted"
        except MXFP8InputError as error:
            results["nvls_short_bound"] = str(error)
    finally:
        ReferenceBackend.run = original
        InferenceAllGatherDispatcherBase._host_valid_tokens_estimate = saved
    return results


def _ep2_worker(rank, port, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    undo = _apply_cpu_shim()
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=2)
        pgc = ProcessGroupCollection.use_mpu_process_groups()
        results = {str(gated): _ep2_case(pgc, gated) for gated in (False, True)}
        results["rows"] = _ep2_rows_cases(pgc)
        with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as handle:
            json.dump(results, handle)
        parallel_state.destroy_model_parallel()
    finally:
        dist.destroy_process_group()
        undo()


def test_ep2_over_gloo(tmp_path):
    """Both cases in one spawn (startup dominates): squared ReLU through the inference NCCL-path dispatcher
    (each rank sees the 2 x 3 gathered rows) and SwiGLU through the standard allgather dispatcher."""
    mp.spawn(_ep2_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    per_rank = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank, gated, result in ((rank, gated, per_rank[rank][str(gated)]) for rank in range(2) for gated in (False, True)):
        assert (result["ep_rank"], result["ep_size"], result["offset"]) == (rank, 2, 2 * rank)
        assert result["layer_error"] <= LAYER_BOUND
        if not gated:
            assert result["rows_seen"] == 6  # 2 ranks x 3 tokens gathered by the NCCL-path dispatcher
            assert result["expert_error"] <= EXPERT_BOUND
    for rank in range(2):
        rows = per_rank[rank]["rows"]
        # a bound from real tokens (below the padded dispatcher rows) and an un-agreed flag give full rows
        assert rows["padded_bound"] == 0.0 and rows["unagreed"] == 0.0 and rows["group_size"] == 2
        # NVLS-like buffer: the agreed padded-row bound gives the prefix only, exactly
        assert rows["nvls_rows"] == [6] and rows["nvls_finite"] and rows["nvls_error"] <= EXPERT_BOUND
        assert "below the" in rows["nvls_short_bound"] and "dispatcher rows" in rows["nvls_short_bound"]
