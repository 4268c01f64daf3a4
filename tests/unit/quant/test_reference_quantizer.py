"""The reference quantizer against the rule, on adversarial and fuzzed inputs."""


import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron_mxfp8_moe import MXFP8InputError, quantize_mxfp8
from megatron_mxfp8_moe.format.constants import E4M3_MAX
from megatron_mxfp8_moe.quant.reference import quantize_logical_reference
from megatron_mxfp8_moe.testing import random_weights


def _e4m3_half_ulp(magnitude: torch.Tensor) -> torch.Tensor:
    """Half the e4m3 spacing at each |value| (normal binades have 3 mantissa bits; subnormal step 2**-9)."""
    exponent = torch.floor(torch.log2(magnitude.clamp_min(2.0**-6))).clamp_min(-6)
    return torch.exp2(exponent - 3) / 2


def _check_block_rule(source: torch.Tensor):
    data, scales = quantize_logical_reference(source)
    blocks = source.to(torch.float64).unflatten(-1, (-1, 32))
    amax = blocks.abs().amax(-1)
    # scale: the smallest power of two s with amax / s <= 448 (byte 0 for zero blocks)
    for block_amax, byte in zip(amax.flatten().tolist(), scales.flatten().tolist()):
        if block_amax == 0:
            assert byte == 0
            continue
        scale = 2.0 ** (byte - 127)
        assert block_amax / scale <= E4M3_MAX
        assert block_amax / (scale / 2) > E4M3_MAX or byte == 1
    # elements: round to nearest e4m3 of value / scale (within half an e4m3 ulp), sign kept
    scale = torch.exp2(scales.to(torch.float64) - 127).unsqueeze(-1)
    target = torch.where(scale > 2.0**-127, blocks / scale, torch.zeros_like(blocks))
    got = data.to(torch.float64).unflatten(-1, (-1, 32))
    assert torch.all((got - target).abs() <= _e4m3_half_ulp(target.abs()) * (1 + 1e-12))
    assert torch.all((got == 0) | (torch.sign(got) == torch.sign(target)))
    return data, scales


def test_adversarial_blocks():
    rows = []
    rows.append(torch.zeros(32))  # all zero
    rows.append(torch.full((32,), 2.0**-130))  # fp32 subnormals
    rows.append(torch.linspace(-448, 448, 32))  # exactly +-448
    rows.append(torch.linspace(-1000, 1000, 32))  # past 448
    rows.append(torch.full((32,), 1.75 * 2.0**3))  # significand exactly 1.75
    rows.append(torch.full((32,), (1.75 + 2.0**-7) * 2.0**3))  # just above 1.75
    rows.append(torch.full((32,), (1.75 - 2.0**-7) * 2.0**3))  # just below 1.75
    rows.append(-torch.rand(32))  # negatives
    outlier = torch.randn(32) * 1e-3
    outlier[7] = 1e4
    rows.append(outlier)  # one huge outlier
    source = torch.stack(rows)
    _check_block_rule(source)
    data, scales = quantize_logical_reference(source)
    assert torch.equal(data[0].to(torch.float32), torch.zeros(32)) and int(scales[0, 0]) == 0
    assert float(data[2].to(torch.float32).abs().max() * 2.0 ** (int(scales[2, 0]) - 127)) == 448.0
    # 1.75 * 8 = 14: 14/448 = 2**-5 exactly, so amax maps to 448 exactly; just above rounds the scale up
    assert int(scales[4, 0]) == 127 - 5 and int(scales[5, 0]) == 127 - 4 and int(scales[6, 0]) == 127 - 5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_random_weights_follow_the_rule(dtype):
    _check_block_rule(random_weights((3, 40, 128), dtype=dtype))


def test_dequantization_error_per_element_within_e4m3_rounding_of_the_block_scale():
    source = random_weights((64, 256), dtype=torch.float32)
    tensor = quantize_mxfp8(source, backend="reference")
    values = tensor.dequantize(torch.float64)
    scale = torch.exp2(tensor.logical_scales().to(torch.float64) - 127).repeat_interleave(32, -1)
    bound = _e4m3_half_ulp((source.to(torch.float64) / scale).abs()) * scale
    assert torch.all((values - source.to(torch.float64)).abs() <= bound * (1 + 1e-12))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 140),
    blocks=st.integers(1, 6),
    log_scale=st.integers(-30, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_fuzzed_shapes_and_magnitudes(rows, blocks, log_scale, seed):
    generator = torch.Generator().manual_seed(seed)
    source = torch.randn(rows, blocks * 32, generator=generator) * 2.0**log_scale
    data, scales = _check_block_rule(source.to(torch.bfloat16))
    tensor = quantize_mxfp8(source.to(torch.bfloat16), backend="reference")
    assert torch.equal(tensor.data.view(torch.uint8), data.view(torch.uint8))
    assert torch.equal(tensor.logical_scales(), scales)


def test_bad_inputs_raise_clearly():
    with pytest.raises(MXFP8InputError, match="non-finite"):
        quantize_mxfp8(torch.tensor([[float("nan")] * 32]))
    with pytest.raises(MXFP8InputError, match="non-finite"):
        quantize_mxfp8(torch.tensor([[float("inf")] * 32]))
    with pytest.raises(MXFP8InputError, match="multiple of 32"):
        quantize_mxfp8(torch.randn(4, 48))
    with pytest.raises(MXFP8InputError, match="dtype"):
        quantize_mxfp8(torch.ones(4, 32, dtype=torch.int32))
    with pytest.raises(MXFP8InputError, match=r"\[M, K\] or \[E, M, K\]"):
        quantize_mxfp8(torch.randn(2, 2, 2, 32))
    with pytest.raises(MXFP8InputError, match="contiguous"):
        quantize_mxfp8(torch.randn(64, 32).T)
    with pytest.raises(ValueError, match="unknown quantizer backend"):
        quantize_mxfp8(torch.randn(4, 32), backend="fast")


def test_unavailable_backends_name_the_requirement():
    from megatron_mxfp8_moe import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="CUDA"):
        quantize_mxfp8(torch.randn(4, 32), backend="triton")
    with pytest.raises(BackendUnavailableError, match="CUDA"):
        quantize_mxfp8(torch.randn(4, 32), backend="flashinfer")
