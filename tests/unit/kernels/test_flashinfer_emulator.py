"""MoE evaluated from prepared FlashInfer stacks == moe_reference from the canonical experts (CPU proof).

Also: input quantization layout/padding, invalid-row masking and launcher argument checks on the CPU.
"""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.errors import BackendUnavailableError, MXFP8InputError
from megatron_mxfp8_moe.flashinfer_mxfp8 import (
    flashinfer_cutlass_mxfp8_moe,
    flashinfer_routed_mxfp8_moe,
    pack_routed_mxfp8_routing,
    prepare_cutlass_mxfp8_weights,
    prepare_routed_mxfp8_weights,
    select_routed_mxfp8_active_rows,
)
from megatron_mxfp8_moe.kernels.flashinfer_emulator import (
    emulate_flashinfer_mxfp8_moe,
    emulate_routed_mxfp8_moe,
)
from megatron_mxfp8_moe.kernels.flashinfer_routed import (
    mask_invalid_rows,
    quantize_routed_mxfp8_input,
    quantize_routed_mxfp8_input_reference,
)
from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.quant.reference import quantize_logical_reference
from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error

H, TOKENS, TOP_K, LOCAL_EXPERTS, NUM_EXPERTS = 256, 40, 3, 4, 12
EXACT = 1e-12  # float64 sums of the same exact products; only the summation order may differ


def _experts(activation, intermediate):
    rows = 2 * intermediate if activation == "swiglu" else intermediate
    fc1 = quantize_mxfp8(random_weights((LOCAL_EXPERTS, rows, H)), backend="reference")
    fc2 = quantize_mxfp8(random_weights((LOCAL_EXPERTS, H, intermediate)), backend="reference")
    return fc1, fc2


def _routing(offset):
    probs, ids = random_routing(TOKENS, NUM_EXPERTS, TOP_K)
    probs = torch.where(torch.rand(TOKENS, TOP_K) < 0.2, -probs, probs)  # negative weights too
    ids[::5, 0] = -1  # skipped slots
    ids[1, :] = (offset + LOCAL_EXPERTS) % NUM_EXPERTS  # a token routed only to another rank
    return probs.to(torch.bfloat16).to(torch.float32), ids  # the routed kernel sees bf16 weights


CASES = [(activation, intermediate, offset) for activation in ("swiglu", "squared_relu")
         for intermediate in (96, 128) for offset in (0, 4)]


@pytest.mark.parametrize("activation,intermediate,offset", CASES)
def test_routed_stacks_evaluate_to_the_reference(activation, intermediate, offset):
    fc1, fc2 = _experts(activation, intermediate)
    probs, ids = _routing(offset)
    x = torch.randn(TOKENS, H)
    reference = moe_reference(x, fc1, fc2, probs, ids, activation, local_expert_offset=offset)
    routed1 = prepare_routed_mxfp8_weights(fc1, gated=activation == "swiglu")
    routed2 = prepare_routed_mxfp8_weights(fc2, gated=False)
    packed = pack_routed_mxfp8_routing(ids, probs)
    emulated = emulate_routed_mxfp8_moe(x, packed, routed1, routed2, local_expert_offset=offset,
                                        activation=activation)
    assert reference.abs().sum() > 0
    assert relative_error(emulated, reference) <= EXACT
    assert int(emulated[1].count_nonzero()) == 0  # non-local only


@pytest.mark.parametrize("activation,intermediate,offset", CASES)
def test_cutlass_stacks_evaluate_to_the_reference(activation, intermediate, offset):
    fc1, fc2 = _experts(activation, intermediate)
    probs, ids = _routing(offset)
    x = torch.randn(TOKENS, H)
    reference = moe_reference(x, fc1, fc2, probs, ids, activation, local_expert_offset=offset)
    cutlass1 = prepare_cutlass_mxfp8_weights(fc1, gated=activation == "swiglu")
    cutlass2 = prepare_cutlass_mxfp8_weights(fc2, gated=False)
    emulated = emulate_flashinfer_mxfp8_moe(x, ids, probs, cutlass1, cutlass2, local_expert_offset=offset,
                                            activation=activation)
    assert relative_error(emulated, reference) <= EXACT


def test_valid_tokens_zero_the_tail_rows():
    fc1, fc2 = _experts("swiglu", 96)
    probs, ids = _routing(0)
    x = torch.randn(TOKENS, H)
    reference = moe_reference(x, fc1, fc2, probs, ids, "swiglu", valid_tokens=17)
    routed1, routed2 = prepare_routed_mxfp8_weights(fc1, gated=True), prepare_routed_mxfp8_weights(fc2, gated=False)
    masked = mask_invalid_rows(ids, torch.tensor(17))
    assert bool((masked[17:] == -1).all()) and torch.equal(masked[:17], ids[:17])
    emulated = emulate_routed_mxfp8_moe(x, pack_routed_mxfp8_routing(masked, probs), routed1, routed2,
                                        local_expert_offset=0, activation="swiglu")
    assert relative_error(emulated, reference) <= EXACT
    assert int(emulated[17:].count_nonzero()) == 0


def test_wrong_gate_up_order_is_detected():
    """The check can fail: a stack built from [up; gate] (no swap) is far from the reference."""
    fc1, fc2 = _experts("swiglu", 96)
    swapped = quantize_mxfp8(torch.cat([fc1.dequantize(torch.float32)[:, 96:], fc1.dequantize(torch.float32)[:, :96]],
                                       dim=1), backend="reference")
    probs, ids = _routing(0)
    x = torch.randn(TOKENS, H)
    reference = moe_reference(x, fc1, fc2, probs, ids, "swiglu")
    wrong = emulate_flashinfer_mxfp8_moe(x, ids, probs, prepare_routed_mxfp8_weights(swapped, gated=True),
                                         prepare_routed_mxfp8_weights(fc2, gated=False),
                                         local_expert_offset=0, activation="swiglu")
    assert relative_error(wrong, reference) > 0.3


def test_one_corrupted_scale_byte_is_detected():
    fc1, fc2 = _experts("squared_relu", 128)
    probs, ids = _routing(0)
    ids[:, 0] = 0  # every token uses expert 0
    x = torch.randn(TOKENS, H)
    routed1, routed2 = prepare_routed_mxfp8_weights(fc1, gated=False), prepare_routed_mxfp8_weights(fc2, gated=False)
    reference = moe_reference(x, fc1, fc2, probs, ids, "squared_relu")
    routed1.scale[0, 5, 3] += 1  # one block of one row doubled
    emulated = emulate_flashinfer_mxfp8_moe(x, ids, probs, routed1, routed2, local_expert_offset=0,
                                            activation="squared_relu")
    assert relative_error(emulated, reference) > EXACT


def test_quantized_emulation_stays_within_the_blackwell_bound():
    """Documents the 8e-2 bound used in test_flashinfer_blackwell.py: fc1-output re-quantization alone."""
    fc1, fc2 = _experts("swiglu", 96)
    probs, ids = _routing(0)
    x = torch.randn(TOKENS, H)
    data, scales = quantize_routed_mxfp8_input_reference(x, 256)
    x_quantized = data.to(torch.float64) * torch.exp2(scales.double() - 127).repeat_interleave(32, dim=-1)
    reference = moe_reference(x_quantized, fc1, fc2, probs, ids, "swiglu")
    routed1, routed2 = prepare_routed_mxfp8_weights(fc1, gated=True), prepare_routed_mxfp8_weights(fc2, gated=False)
    emulated = emulate_flashinfer_mxfp8_moe(x, ids, probs, routed1, routed2, local_expert_offset=0,
                                            activation="swiglu", quantize_input=True, quantize_intermediate=True)
    assert 0 < relative_error(emulated, reference) < 8e-2


def test_routed_input_quantization_layout_and_padding():
    x = torch.randn(7, 200).to(torch.bfloat16)  # H = 200 -> Hp = 256
    data, scales = quantize_routed_mxfp8_input_reference(x, 256)
    assert data.shape == (7, 256) and data.dtype == torch.float8_e4m3fn
    assert scales.shape == (7, 8) and scales.dtype == torch.uint8  # linear token-major [T, Hp/32]
    assert int(data[:, 200:].view(torch.uint8).count_nonzero()) == 0
    assert int(scales[:, 7].count_nonzero()) == 0  # block 7 covers columns 224..255: all padding
    expected_data, expected_scales = quantize_logical_reference(x[:, :192])  # blocks 0..5 are unpadded
    assert torch.equal(scales[:, :6], expected_scales) and torch.equal(data[:, :192].view(torch.uint8),
                                                                        expected_data.view(torch.uint8))
    with pytest.raises(MXFP8InputError, match="padded_hidden_size"):
        quantize_routed_mxfp8_input_reference(x, 192)


def test_routed_input_quantization_refuses_fp32_before_flashinfer(monkeypatch):
    """FlashInfer's mxfp8_quantize takes bf16/fp16 only: fp32 activations are refused here, before any call."""
    import sys
    import types

    calls = []
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(mxfp8_quantize=lambda *a: calls.append(a)))
    with pytest.raises(MXFP8InputError, match="dtype must be bf16/fp16 for flashinfer.mxfp8_quantize"):
        quantize_routed_mxfp8_input(torch.randn(3, 256), 256)
    assert calls == []


def test_select_active_rows_wraps_the_row_policy():
    rows, policy = select_routed_mxfp8_active_rows(64, token_capacity=16, use_bounded_rows=True)
    assert rows == 16 and policy.bounded
    rows, policy = select_routed_mxfp8_active_rows(64, token_capacity=16, use_bounded_rows=False)
    assert rows == 64 and not policy.bounded
    with pytest.raises(MXFP8InputError, match="token_capacity"):
        select_routed_mxfp8_active_rows(64, token_capacity=0, use_bounded_rows=True)


def test_launchers_check_arguments_then_name_the_missing_backend_on_cpu():
    fc1, fc2 = _experts("swiglu", 128)
    routed1, routed2 = prepare_routed_mxfp8_weights(fc1, gated=True), prepare_routed_mxfp8_weights(fc2, gated=False)
    probs, ids = _routing(0)
    x = torch.randn(TOKENS, H).to(torch.bfloat16)
    kwargs = dict(num_experts=NUM_EXPERTS, top_k=TOP_K, local_expert_offset=0)
    with pytest.raises(MXFP8InputError, match="gated"):
        flashinfer_routed_mxfp8_moe(x, probs, ids, routed1, routed2, activation="squared_relu", **kwargs)
    with pytest.raises(MXFP8InputError, match="hidden_states"):
        flashinfer_routed_mxfp8_moe(x[:, :128], probs, ids, routed1, routed2, activation="swiglu", **kwargs)
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailableError, match="SM100/SM103|flashinfer-python"):
            flashinfer_routed_mxfp8_moe(x, probs, ids, routed1, routed2, activation="swiglu", **kwargs)
        cutlass1, cutlass2 = prepare_cutlass_mxfp8_weights(fc1, gated=True), prepare_cutlass_mxfp8_weights(fc2,
                                                                                                           gated=False)
        with pytest.raises(BackendUnavailableError, match="SM100/SM103|flashinfer-python"):
            flashinfer_cutlass_mxfp8_moe(x, probs, ids, cutlass1, cutlass2, num_experts=NUM_EXPERTS,
                                         local_expert_offset=0, activation="swiglu")
