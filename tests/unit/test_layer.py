"""MXFP8ExpertLayer on the CPU with the reference backend: both contracts, valid rows, bounded rows, refit.

Bound: the reference backend computes in fp32 on the exactly dequantized weights, so against the float64
oracle (kernels/reference.py on the same dequantized weights) the relative error is fp32 rounding only;
we require <= 1e-5.
"""

import logging

import pytest
import torch

from megatron_mxfp8_moe.errors import BackendUnavailableError, MXFP8InputError
from megatron_mxfp8_moe.experts import ExpertSet
from megatron_mxfp8_moe.kernels.base import Backend
from megatron_mxfp8_moe.kernels.caps import DeviceCaps
from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.layer import MXFP8ExpertLayer
from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error

E, H, I, TOPK = 4, 64, 32, 2
GLOBAL, OFFSET = 8, 4  # EP=2 view: this rank holds experts 4..7
FP32_BOUND = 1e-5


def _layer(activation="squared_relu", **kwargs):
    rows = 2 * I if activation == "swiglu" else I
    experts = ExpertSet.from_bf16(random_weights((E, rows, H)), random_weights((E, H, I)), activation)
    kwargs.setdefault("local_expert_offset", OFFSET)
    kwargs.setdefault("num_global_experts", GLOBAL)
    return MXFP8ExpertLayer(experts, backend="reference", **kwargs)


def _inputs(rows):
    x = torch.randn(rows, H, dtype=torch.bfloat16)
    probs, ids = random_routing(rows, GLOBAL, TOPK)
    ids[0, 0] = -1  # NVLS-style skip slot
    return x, probs, ids


def _oracle(layer, x, probs, ids, valid=None):
    experts = layer.expert_set
    return moe_reference(x, experts.fc1, experts.fc2, probs, ids, experts.activation,
                         local_expert_offset=layer.local_expert_offset, valid_tokens=valid)


@pytest.mark.parametrize("activation", ["squared_relu", "swiglu", "relu"])
def test_routed_matches_oracle(activation):
    layer = _layer(activation)
    x, probs, ids = _inputs(11)
    out = layer(x, None, probs, ids)
    assert out.dtype == torch.float32 and out.shape == (11, H)
    assert relative_error(out, _oracle(layer, x, probs, ids)) <= FP32_BOUND
    assert layer.backend is Backend.REFERENCE and layer.is_built


def test_rows_past_valid_tokens_are_ignored_on_device():
    layer = _layer()
    x, probs, ids = _inputs(10)
    valid = torch.tensor([6], dtype=torch.int32)
    x[6:] = float("nan")  # stale rows: must not be read into any result
    ids[6:] = OFFSET  # stale ids that route to a local expert
    out = layer(x, None, probs, ids, valid_tokens=valid)
    assert torch.isfinite(out).all()
    assert torch.equal(out[6:], torch.zeros(4, H))
    assert relative_error(out[:6], _oracle(layer, x[:6], probs[:6], ids[:6])) <= FP32_BOUND
    valid.fill_(3)  # same tensor, new value: read on the device at call time
    out = layer(x, None, probs, ids, valid_tokens=valid)
    assert torch.equal(out[3:], torch.zeros(7, H))
    assert relative_error(out[:3], _oracle(layer, x[:3], probs[:3], ids[:3])) <= FP32_BOUND
    valid.fill_(-1)  # negative: no valid row, in the layer and in the oracle (which sliced x[:-1] before)
    assert torch.equal(layer(x, None, probs, ids, valid_tokens=valid), torch.zeros(10, H))
    assert torch.equal(_oracle(layer, x, probs, ids, valid=-1), torch.zeros(10, H, dtype=torch.float64))


def test_bounded_rows_read_only_the_prefix(monkeypatch):
    layer = _layer(token_capacity=4)
    x, probs, ids = _inputs(9)
    x[4:] = float("nan")
    probs[4:] = float("nan")
    ids[4:] = 10**6  # out of every range: a read of these would be visible
    seen = []
    original = type(layer._impl).run

    def spy(self, state, x_, probs_, ids_, **kwargs):
        seen.append(kwargs["rows"])
        return original(self, state, x_, probs_, ids_, **kwargs)

    monkeypatch.setattr(type(layer._impl), "run", spy)
    out_buffer = torch.full((9, H), 7.0)
    out = layer(x, None, probs, ids, use_bounded_rows=True, out=out_buffer)
    assert out is out_buffer and seen == [4]
    assert torch.equal(out[4:], torch.full((5, H), 7.0))  # rows past the prefix untouched
    assert relative_error(out[:4], _oracle(layer, x[:4], probs[:4], ids[:4])) <= FP32_BOUND
    fresh = layer(x, None, probs, ids, use_bounded_rows=True)
    assert torch.equal(fresh[4:], torch.zeros(5, H)) and torch.equal(fresh[:4], out[:4])


def test_full_rows_when_not_bounded_or_no_capacity():
    x, probs, ids = _inputs(9)
    for layer, bounded in ((_layer(token_capacity=4), False), (_layer(), True)):
        out = layer(x, None, probs, ids, use_bounded_rows=bounded)
        assert relative_error(out, _oracle(layer, x, probs, ids)) <= FP32_BOUND
    assert _layer(token_capacity=16).row_policy(9, True).rows == 9  # capacity above the buffer: min(C, T)


def test_row_policy_logged_once(caplog, monkeypatch):
    from megatron_mxfp8_moe.routing import rows

    monkeypatch.setattr(rows, "_LOGGED", set())  # what earlier tests logged does not count here
    layer = _layer(token_capacity=3)
    x, probs, ids = _inputs(5)
    with caplog.at_level(logging.INFO, logger="megatron_mxfp8_moe.routing.rows"):
        for _ in range(3):
            layer(x, None, probs, ids, use_bounded_rows=True)
            layer(x, None, probs, ids)
    messages = [r.getMessage() for r in caplog.records if "row policy" in r.getMessage()]
    assert messages == ["MoE row policy bounded-decode: processing 3 of 5 rows (token capacity 3)",
                        "MoE row policy full-rows: processing 5 of 5 rows (token capacity 3)"]


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
def test_permuted_contract(activation):
    layer = _layer(activation)
    tokens_per_expert = torch.tensor([3, 0, 4, 2])
    x = torch.randn(9, H, dtype=torch.bfloat16)
    probs = torch.rand(9)
    out = layer(x, tokens_per_expert, probs)
    assert out.dtype == torch.bfloat16 and out.shape == (9, H)
    fc1, fc2 = layer.expert_set.dequantize(torch.float64)
    from megatron_mxfp8_moe.activations import apply_activation

    expected = torch.empty(9, H, dtype=torch.float64)
    start = 0
    for expert, count in enumerate(tokens_per_expert.tolist()):
        rows = x[start:start + count].double()
        inner = apply_activation(rows @ fc1[expert].T, layer.activation)
        expected[start:start + count] = probs[start:start + count, None].double() * (inner @ fc2[expert].T)
        start += count
    assert relative_error(out, expected) <= 2**-8  # bf16 output rounding dominates (measured 1.5-2e-3)
    with pytest.raises(MXFP8InputError, match="sums to 10"):
        layer(x, torch.tensor([3, 0, 4, 3]), probs)  # more rows than x has
    with pytest.raises(MXFP8InputError, match="must be >= 0"):
        layer(x, torch.tensor([3, 0, 7, -1]), probs)


def test_permuted_rows_past_the_counts_are_padding():
    """The flex dispatcher's static-shape (NCCL-EP zero-copy) mode hands its whole [recv_capacity, H] buffer with
    tokens_per_expert summing to fewer rows: those rows belong to no expert and come out as zeros (Megatron's combine
    ignores them), the others as for x cut to the counted rows."""
    layer = _layer()
    tokens_per_expert = torch.tensor([2, 0, 3, 0])
    x = torch.randn(8, H, dtype=torch.bfloat16)
    probs = torch.rand(8)
    counted = layer(x[:5], tokens_per_expert, probs[:5])
    x[5:], probs[5:] = float("nan"), float("nan")  # a receive buffer's padding rows may hold anything
    padded = layer(x, tokens_per_expert, probs)
    assert padded.shape == (8, H)
    assert torch.equal(padded[:5], counted) and torch.equal(padded[5:], torch.zeros(3, H, dtype=torch.bfloat16))
    buffer = torch.full((8, H), 7.0, dtype=torch.bfloat16)  # zero copy: x is the dispatcher's buffer itself
    buffer.copy_(x)
    assert layer(buffer, tokens_per_expert, probs, out=buffer).data_ptr() == buffer.data_ptr()
    assert torch.equal(buffer, padded)
    x[5:], probs[5:] = torch.randn(3, H, dtype=torch.bfloat16), torch.rand(3)
    assert layer(x, torch.tensor([2, 0, 3, 3]), probs)[5:].float().abs().sum() > 0  # counted, those rows are computed


def test_permuted_cpu_counts_are_refused_during_graph_capture(monkeypatch):
    """A graph captured with CPU counts would replay the first call's counts: refused with a clear error before
    anything runs (a pageable copy synchronizes the stream, which capture forbids; a pinned one would replay the
    captured counts)."""
    layer = _layer()
    x, counts = torch.randn(5, H, dtype=torch.bfloat16), torch.tensor([2, 0, 3, 0])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(layer._impl, "run", lambda *a, **k: pytest.fail("the backend ran"))
    with pytest.raises(MXFP8InputError, match="CUDA graph is captured"):
        layer(x, counts, torch.rand(5))


def test_permuted_out_buffer_longer_than_x_gets_the_prefix():
    """The flex dispatcher's NCCL-EP zero-copy mode hands a persistent [recv_capacity, H] buffer for x [R, H]."""
    layer = _layer()
    tokens_per_expert = torch.tensor([2, 0, 3, 0])
    x = torch.randn(5, H, dtype=torch.bfloat16)
    probs = torch.rand(5)
    expected = layer(x, tokens_per_expert, probs)
    buffer = torch.full((8, H), 7.0, dtype=torch.bfloat16)
    result = layer(x, tokens_per_expert, probs, out=buffer)
    assert result.shape == (5, H) and result.data_ptr() == buffer.data_ptr()
    assert torch.equal(buffer[:5], expected) and torch.equal(buffer[5:], torch.full((3, H), 7.0, dtype=torch.bfloat16))
    aliased = torch.zeros(8, H, dtype=torch.bfloat16)  # zero copy: x is a view of the buffer itself
    aliased[:5].copy_(x)
    layer(aliased[:5], tokens_per_expert, probs, out=aliased)
    assert torch.equal(aliased[:5], expected)
    with pytest.raises(MXFP8InputError, match="out: expected a buffer"):
        layer(x, tokens_per_expert, probs, out=torch.zeros(4, H, dtype=torch.bfloat16))
    with pytest.raises(MXFP8InputError, match="out: expected a buffer"):
        layer(x, tokens_per_expert, probs, out=torch.zeros(8, H + 1, dtype=torch.bfloat16))


def test_refit_writes_reach_the_built_stack_in_place():
    layer = _layer("swiglu")
    x, probs, ids = _inputs(8)
    with torch.inference_mode():  # first forward (and build) inside inference mode, like Megatron's engine
        layer(x, None, probs, ids)
    state = layer.stack_state
    pointers = (state.fc1.data_ptr(), state.fc2.data_ptr())
    weights = layer.mxfp8_weights()
    for name in ("linear_fc1.weight1", "linear_fc2.weight3"):  # refit outside inference mode
        weights[name].quantize_(random_weights(tuple(weights[name].shape)))
    assert state.repacks == 2
    assert (state.fc1.data_ptr(), state.fc2.data_ptr()) == pointers
    out = layer(x, None, probs, ids)
    assert relative_error(out, _oracle(layer, x, probs, ids)) <= FP32_BOUND
    # the built stack equals a fresh dequantization of the canonical bytes
    fc1, fc2 = layer.expert_set.dequantize(torch.float32)
    assert torch.equal(state.fc1, fc1) and torch.equal(state.fc2, fc2)


def test_input_errors_name_the_argument():
    layer = _layer()
    x, probs, ids = _inputs(6)
    with pytest.raises(MXFP8InputError, match="routing_map"):
        layer(x, None, probs, ids[:, :1].contiguous().float())
    with pytest.raises(MXFP8InputError, match="probs"):
        layer(x, None, probs[:, :1], ids)
    with pytest.raises(MXFP8InputError, match="x: expected"):
        layer(x[:, :32], None, probs, ids)
    with pytest.raises(MXFP8InputError, match="out"):
        layer(x, None, probs, ids, out=torch.zeros(6, H + 1))
    with pytest.raises(MXFP8InputError, match="token_capacity"):
        _layer(token_capacity=0)
    with pytest.raises(MXFP8InputError, match="local_expert_offset"):
        _layer(local_expert_offset=6)


def test_explicit_backend_unavailable_on_this_machine():
    experts = ExpertSet.empty(E, H, I, "squared_relu")
    with pytest.raises(BackendUnavailableError, match="CUDA GPU"):
        MXFP8ExpertLayer(experts, backend="triton", caps=DeviceCaps("cpu", None, None, "3.8.0"))
    layer = MXFP8ExpertLayer(experts, backend="auto")
    assert layer.backend is Backend.REFERENCE and "no CUDA" in layer.backend_reason


def test_to_before_build_keeps_weights_and_after_build_is_refused_for_other_devices():
    layer = _layer()
    before = layer.expert_set.fc1.data.view(torch.uint8).clone()
    layer.to("cpu")
    assert torch.equal(layer.expert_set.fc1.data.view(torch.uint8), before)
    layer.to(torch.float16)  # dtype casts never touch the fp8 bytes
    assert torch.equal(layer.expert_set.fc1.data.view(torch.uint8), before)
    layer.build_()
    with pytest.raises(MXFP8InputError, match="after its reference stack was built"):
        layer.to("meta")


def test_backend_gets_the_experts_the_pairs_spread_over(monkeypatch):
    """Tile-choice hint: the routed contract's map spreads pairs over all GLOBAL experts (every EP rank's tokens,
    global ids); the permuted contract's rows all belong to this rank's E local experts."""
    layer = _layer()
    calls = []
    real_run = layer._impl.run

    def spy(*args, **kwargs):
        calls.append((kwargs["route_experts"], kwargs["num_global_experts"]))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(layer._impl, "run", spy)
    x, probs, ids = _inputs(6)
    layer.forward_routed(x, probs, ids)
    counts = torch.tensor([2, 0, 3, 1])
    layer.forward_permuted(torch.randn(6, H, dtype=torch.bfloat16), counts, torch.rand(6))
    assert calls == [(GLOBAL, GLOBAL), (E, GLOBAL)]
