"""On a CUDA GPU: the Triton quantizer's bytes equal the reference's and Megatron-Core's ``mxfp8_quantize``."""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.testing import random_weights

pytestmark = pytest.mark.gpu

SHAPES = [(128, 256), (130, 96), (1, 32), (777, 2080), (4, 384, 512), (3, 1536, 2048), (2, 200, 160)]


def _bytes(tensor):
    return tensor.data.view(torch.uint8), tensor.scale.view(torch.uint8)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_triton_bytes_equal_reference_bytes(shape, dtype):
    source = random_weights(shape, dtype=dtype, device="cuda")
    triton_data, triton_scale = _bytes(quantize_mxfp8(source, backend="triton"))
    reference_data, reference_scale = _bytes(quantize_mxfp8(source, backend="reference"))
    assert torch.equal(triton_data, reference_data)
    assert torch.equal(triton_scale, reference_scale)


@pytest.mark.parametrize("shape", SHAPES)
def test_triton_bytes_equal_megatron_core_mxfp8_quantize(shape):
    from megatron.core.inference.quantization.mxfp8_quantize import mxfp8_quantize

    source = random_weights(shape, dtype=torch.bfloat16, device="cuda")
    ours_data, ours_scale = _bytes(quantize_mxfp8(source, backend="triton"))
    stacked = source if source.dim() == 3 else source.unsqueeze(0)
    for expert in range(stacked.shape[0]):
        megatron_data, megatron_scale = mxfp8_quantize(stacked[expert].contiguous())
        expected_data = ours_data if source.dim() == 2 else ours_data[expert]
        expected_scale = ours_scale if source.dim() == 2 else ours_scale[expert]
        assert torch.equal(expected_data, megatron_data.view(torch.uint8))
        assert torch.equal(expected_scale, megatron_scale.view(torch.uint8))


def test_quantize_in_place_keeps_data_ptrs_on_gpu():
    tensor = quantize_mxfp8(random_weights((8, 256, 512), device="cuda"))
    pointers = (tensor.data.data_ptr(), tensor.scale.data_ptr())
    new = random_weights((8, 256, 512), device="cuda")
    tensor.quantize_(new)
    assert (tensor.data.data_ptr(), tensor.scale.data_ptr()) == pointers
    fresh = quantize_mxfp8(new, backend="reference")
    assert torch.equal(_bytes(tensor)[0], _bytes(fresh)[0]) and torch.equal(_bytes(tensor)[1], _bytes(fresh)[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_launch_batched_quantize_equals_per_expert_quantize(dtype):
    stack = quantize_mxfp8(random_weights((6, 384, 512), device="cuda"))
    pointers = (stack.data.data_ptr(), stack.scale.data_ptr())
    before = _bytes(stack)[0].clone()
    sources = [random_weights((384, 512), dtype=dtype, device="cuda") for _ in range(3)]
    stack.quantize_experts_([4, 0, 2], sources, backend="triton")
    assert (stack.data.data_ptr(), stack.scale.data_ptr()) == pointers
    for index, source in zip([4, 0, 2], sources):
        expected = quantize_mxfp8(source, backend="reference")
        assert torch.equal(_bytes(stack)[0][index], _bytes(expected)[0])
        assert torch.equal(_bytes(stack)[1][index], _bytes(expected)[1])
    for index in (1, 3, 5):
        assert torch.equal(_bytes(stack)[0][index], before[index])
