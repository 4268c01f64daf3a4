"""The "flashinfer" quantizer backend's host logic on a CPU, with flashinfer.mxfp8_quantize replaced by an exact
quantizer (Megatron's rule): it must hand FlashInfer the source dtype as is and refuse fp32 before writing."""

import pathlib

import pytest
import torch

from megatron_mxfp8_moe import MXFP8InputError, MXFP8Tensor, RefitError, quantize_mxfp8, refit_experts
from megatron_mxfp8_moe.format.swizzle import swizzle_scales
from megatron_mxfp8_moe.quant.reference import quantize_logical_reference
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).parents[1] / "refit" / "_fake_experts.py", "quant_fake_experts")


@pytest.fixture
def exact_flashinfer(monkeypatch):
    flashinfer = pytest.importorskip("flashinfer", reason="flashinfer-python is not importable")
    from megatron_mxfp8_moe.quant import backends
    from megatron_mxfp8_moe.quant import flashinfer as quant_flashinfer

    seen = []

    def mxfp8_quantize(x, is_sf_swizzled_layout=True, *args, **kwargs):
        assert is_sf_swizzled_layout
        seen.append(x.dtype)
        data, scales = quantize_logical_reference(x)
        return data, swizzle_scales(scales)

    monkeypatch.setattr(flashinfer, "mxfp8_quantize", mxfp8_quantize)
    for module in (backends, quant_flashinfer):
        monkeypatch.setattr(module, "flashinfer_quantizer_support", lambda device: (True, "ok"))
    return seen


def test_sources_reach_flashinfer_in_their_own_dtype_and_fp32_is_refused(exact_flashinfer):
    for dtype in (torch.bfloat16, torch.float16):
        source = (torch.randn(64, 256) * 3).to(dtype)
        target = MXFP8Tensor.empty((64, 256)).quantize_(source, backend="flashinfer")
        expected = quantize_mxfp8(source, backend="reference")
        assert exact_flashinfer[-1] == dtype  # no cast on the way (bf16 would round fp16 sources)
        assert torch.equal(target.data.view(torch.uint8), expected.data.view(torch.uint8))
        assert torch.equal(target.scale.view(torch.uint8), expected.scale.view(torch.uint8))
    target = quantize_mxfp8(torch.randn(64, 256, dtype=torch.bfloat16), backend="reference")
    before = target.data.view(torch.uint8).clone(), target.scale.view(torch.uint8).clone()
    calls = len(exact_flashinfer)
    with pytest.raises(MXFP8InputError, match="flashinfer quantizer takes bf16/fp16 sources, got torch.float32"):
        target.quantize_(torch.randn(64, 256), backend="flashinfer")
    assert len(exact_flashinfer) == calls
    assert torch.equal(target.data.view(torch.uint8), before[0]) and torch.equal(target.scale.view(torch.uint8), before[1])


def test_refit_with_the_flashinfer_quantizer_refuses_fp32_before_writing(exact_flashinfer):
    model = fake.FakeModel()
    before = model.snapshot()
    path = fake.experts_path(0)
    sources = fake.new_sources(layers=(0,), experts=(0, 1), linears=("fc1",))
    sources[f"{path}.linear_fc1.weight1"] = sources[f"{path}.linear_fc1.weight1"].float()
    with pytest.raises(RefitError, match=rf"^refit entry '{path}.linear_fc1.weight1': the flashinfer quantizer takes"):
        refit_experts(model, sources, backend="flashinfer")
    assert fake.same(model.snapshot(), before) and exact_flashinfer == []
