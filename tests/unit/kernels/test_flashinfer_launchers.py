"""The FlashInfer launchers' host-side logic on a CPU: empty batches, input scale shapes, stack checks.

The kernels need an SM100 GPU; here the availability check is stubbed and anything past the early return is
made to fail, so these tests show what the launchers decide before a kernel would run.
"""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.activations import Activation
from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.kernels import flashinfer_cutlass, flashinfer_routed
from megatron_mxfp8_moe.layouts.cutlass import prepare_cutlass_mxfp8_weights
from megatron_mxfp8_moe.layouts.routed import prepare_routed_mxfp8_weights
from megatron_mxfp8_moe.testing import random_weights

E, H, I = 4, 256, 128


def _canonical(intermediate=I, hidden=H):
    fc1 = quantize_mxfp8(random_weights((E, 2 * intermediate, hidden)), backend="reference")
    fc2 = quantize_mxfp8(random_weights((E, hidden, intermediate)), backend="reference")
    return fc1, fc2


def _fail(*args, **kwargs):
    raise AssertionError("nothing may be launched or quantized for an empty batch")


@pytest.mark.parametrize("with_out", [False, True])
def test_an_empty_batch_launches_nothing(monkeypatch, with_out):
    """An EP rank that received no tokens: both launchers return an empty [0, H] bf16 result (or ``out``)."""
    fc1, fc2 = _canonical()
    monkeypatch.setattr(flashinfer_routed, "require_flashinfer_routed_mxfp8", lambda *args, **kwargs: None)
    monkeypatch.setattr(flashinfer_routed, "quantize_routed_mxfp8_input", _fail)
    monkeypatch.setattr(flashinfer_routed, "flashinfer_routed_mxfp8_moe_prequantized", _fail)
    monkeypatch.setattr(flashinfer_cutlass, "require_flashinfer_cutlass_mxfp8", lambda *args, **kwargs: None)
    monkeypatch.setattr(flashinfer_cutlass, "quantize_cutlass_mxfp8_input", _fail)
    x = torch.zeros(0, H, dtype=torch.bfloat16)
    probs, ids = torch.zeros(0, 2), torch.zeros(0, 2, dtype=torch.int64)
    out = torch.full((3, H), 7.0, dtype=torch.bfloat16) if with_out else None
    routed = flashinfer_routed.flashinfer_routed_mxfp8_moe(
        x, probs, ids, prepare_routed_mxfp8_weights(fc1, gated=True), prepare_routed_mxfp8_weights(fc2, gated=False),
        num_experts=E, top_k=2, local_expert_offset=0, activation="swiglu", out=out,
    )
    cutlass = flashinfer_cutlass.flashinfer_cutlass_mxfp8_moe(
        x, probs, ids, prepare_cutlass_mxfp8_weights(fc1, gated=True), prepare_cutlass_mxfp8_weights(fc2, gated=False),
        num_experts=E, local_expert_offset=0, activation="swiglu", out=out,
    )
    for result in (routed, cutlass):
        if with_out:
            assert result is out and bool((out == 7.0).all())  # untouched
        else:
            assert result.shape == (0, H) and result.dtype == torch.bfloat16


@pytest.mark.parametrize("tokens", [0, 3])
def test_routed_input_scales_are_token_major_for_any_batch(monkeypatch, tokens):
    """flashinfer.mxfp8_quantize(x, False) returns its scales flat; the launcher shapes them [T, Hp/32], T = 0 too."""
    flashinfer = pytest.importorskip("flashinfer", reason="flashinfer-python is not importable")

    def mxfp8_quantize(x, is_sf_swizzled_layout=True, *args, **kwargs):
        assert not is_sf_swizzled_layout
        rows, cols = x.shape
        return (torch.zeros(rows, cols, dtype=torch.float8_e4m3fn),
                torch.arange(rows * cols // 32, dtype=torch.int64).to(torch.uint8))

    monkeypatch.setattr(flashinfer, "mxfp8_quantize", mxfp8_quantize)
    data, scale = flashinfer_routed.quantize_routed_mxfp8_input(torch.ones(tokens, 224, dtype=torch.bfloat16), 256)
    assert data.shape == (tokens, 256) and scale.shape == (tokens, 8) and scale.dtype == torch.uint8
    assert torch.equal(scale.reshape(-1), torch.arange(tokens * 8).to(torch.uint8))


def test_routed_stacks_must_chain_in_their_real_shapes_not_only_padded():
    """fc1 (I = 96, H = 224) and fc2 (H = 256, I = 128) pad to the same shapes; the kernel would run them."""
    fc1, _ = _canonical(intermediate=96, hidden=224)
    _, fc2 = _canonical()
    routed1 = prepare_routed_mxfp8_weights(fc1, gated=True)
    routed2 = prepare_routed_mxfp8_weights(fc2, gated=False)
    assert (routed1.padded_rows, routed1.padded_cols) == (256, 256) and routed2.padded_cols == 128
    with pytest.raises(MXFP8InputError, match=r"fc1/fc2: shapes do not chain: fc1 \[192, 224\]"):
        flashinfer_routed._check_stacks(routed1, routed2, Activation.SWIGLU)
    fc1, fc2 = _canonical()
    flashinfer_routed._check_stacks(prepare_routed_mxfp8_weights(fc1, gated=True),
                                    prepare_routed_mxfp8_weights(fc2, gated=False), Activation.SWIGLU)


def test_ids_outside_the_expert_range_reach_the_kernels_as_minus_one(monkeypatch):
    """CUTLASS reads ids as int32 and the routed packing keeps 16 bits, so an int64 id 2**32 + 1 or 2**16 + 1 would
    reach the kernel as expert 1. Both launchers hand -1 for every id outside [0, num_experts), and for rows past
    ``valid_tokens``; in-range ids pass unchanged (the kernel drops those of other EP ranks)."""
    from types import SimpleNamespace

    from megatron_mxfp8_moe.kernels.flashinfer_cutlass import quantize_cutlass_mxfp8_input_reference
    from megatron_mxfp8_moe.routing.pack import unpack_routed_mxfp8_routing

    fc1, fc2 = _canonical()
    seen = {}

    def routed_kernel(data, scale, packed, *args, **kwargs):
        seen["routed"] = unpack_routed_mxfp8_routing(packed)[0]
        return torch.zeros(data.shape[0], H, dtype=torch.bfloat16)

    def cutlass_kernel(**kwargs):
        seen["cutlass"] = kwargs["token_selected_experts"]
        return torch.zeros(kwargs["input"].shape[0], H, dtype=torch.bfloat16)

    monkeypatch.setattr(flashinfer_routed, "require_flashinfer_routed_mxfp8", lambda *args, **kwargs: None)
    monkeypatch.setattr(flashinfer_routed, "quantize_routed_mxfp8_input",
                        lambda x, cols: (torch.zeros(x.shape[0], cols, dtype=torch.float8_e4m3fn),
                                         torch.zeros(x.shape[0], cols // 32, dtype=torch.uint8)))
    monkeypatch.setattr(flashinfer_routed, "flashinfer_routed_mxfp8_moe_prequantized", routed_kernel)
    monkeypatch.setattr(flashinfer_cutlass, "require_flashinfer_cutlass_mxfp8",
                        lambda *args, **kwargs: SimpleNamespace(cutlass_fused_moe=cutlass_kernel))
    monkeypatch.setattr(flashinfer_cutlass, "quantize_cutlass_mxfp8_input", quantize_cutlass_mxfp8_input_reference)
    ids = torch.tensor([[1, 2 ** 32 + 1], [2 ** 16 + 1, 3], [-1, 2 ** 15 + 2], [2, 7], [0, 1]], dtype=torch.int64)
    expected = torch.tensor([[1, -1], [-1, 3], [-1, -1], [2, 7], [-1, -1]], dtype=torch.int32)  # 8 experts; 4 valid
    x, probs = torch.randn(5, H).to(torch.bfloat16), torch.rand(5, 2)
    valid = torch.tensor(4)
    flashinfer_routed.flashinfer_routed_mxfp8_moe(
        x, probs, ids, prepare_routed_mxfp8_weights(fc1, gated=True), prepare_routed_mxfp8_weights(fc2, gated=False),
        num_experts=2 * E, top_k=2, local_expert_offset=0, activation="swiglu", valid_tokens=valid)
    flashinfer_cutlass.flashinfer_cutlass_mxfp8_moe(
        x, probs, ids, prepare_cutlass_mxfp8_weights(fc1, gated=True), prepare_cutlass_mxfp8_weights(fc2, gated=False),
        num_experts=2 * E, local_expert_offset=0, activation="swiglu", valid_tokens=valid)
    assert torch.equal(seen["routed"], expected), seen["routed"]
    assert torch.equal(seen["cutlass"], expected), seen["cutlass"]
