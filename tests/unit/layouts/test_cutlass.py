"""CUTLASS MXFP8 weights (layouts/cutlass.py): zero-copy views, int32-packed scales, gated [up; gate] copy."""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.format.swizzle import swizzle_offset
from megatron_mxfp8_moe.layouts.cutlass import (
    attach_cutlass_mxfp8_writeback,
    prepare_cutlass_mxfp8_weights,
    unpack_cutlass_mxfp8_weights,
)
from megatron_mxfp8_moe.testing import random_weights

H = 256


def _stack(experts, rows, cols):
    return quantize_mxfp8(random_weights((experts, rows, cols)), backend="reference")


@pytest.mark.parametrize("rows,cols", [(H, 96), (96, H), (H, 128)])
def test_non_gated_is_zero_copy_with_int32_scale_view(rows, cols):
    weight = _stack(3, rows, cols)
    cutlass = prepare_cutlass_mxfp8_weights(weight, gated=False)
    assert cutlass.data.data_ptr() == weight.data.data_ptr() and cutlass.data.shape == (3, rows, cols)
    assert cutlass.scale.data_ptr() == weight.scale.data_ptr()
    assert cutlass.scale.dtype == torch.int32
    assert cutlass.scale.shape == (3, -(-rows // 128) * 128, -(-cols // 128))  # [E, round_up(M,128), round_up(K,128)/128]
    assert cutlass.input_scale.dtype == torch.float32 and torch.equal(cutlass.input_scale, torch.ones(3))
    weight.quantize_(random_weights((3, rows, cols)), backend="reference")  # views see writes
    assert torch.equal(cutlass.scale.view(torch.uint8).reshape(3, -1), weight.scale.view(torch.uint8))


def test_each_int32_holds_four_adjacent_k_blocks_of_one_row():
    weight = _stack(2, H, 256)  # K/32 = 8 scale columns -> 2 int32 per row
    cutlass = prepare_cutlass_mxfp8_weights(weight, gated=False)
    logical = weight.logical_scales().to(torch.int64)  # [E, 256, 8]
    words = cutlass.scale.reshape(2, -1).to(torch.int64) & 0xFFFFFFFF  # [E, 256 * 8 / 4]
    rows, blocks = torch.meshgrid(torch.arange(H), torch.arange(2), indexing="ij")
    word_index = swizzle_offset(rows, blocks * 4, 8) // 4
    for expert in range(2):
        expected = sum(logical[expert][:, byte::4] << (8 * byte) for byte in range(4))  # little endian
        assert torch.equal(words[expert][word_index], expected)


@pytest.mark.parametrize("intermediate", [96, 128])
def test_gated_fc1_is_an_up_gate_copy_that_unpacks_bit_for_bit(intermediate):
    weight = _stack(2, 2 * intermediate, H)
    cutlass = prepare_cutlass_mxfp8_weights(weight, gated=True)
    raw = weight.data.view(torch.uint8)
    assert cutlass.data.data_ptr() != weight.data.data_ptr()
    assert torch.equal(cutlass.data.view(torch.uint8)[:, :intermediate], raw[:, intermediate:])  # up first
    assert torch.equal(cutlass.data.view(torch.uint8)[:, intermediate:], raw[:, :intermediate])  # gate second
    assert cutlass.scale.shape == (2, 2 * 128 * (-(-intermediate // 128)), H // 128)
    data, scales = unpack_cutlass_mxfp8_weights(cutlass)
    assert torch.equal(data.view(torch.uint8), raw)
    assert torch.equal(scales, weight.logical_scales())


@pytest.mark.parametrize("rows,cols", [(H, 96), (96, H)])
def test_non_gated_unpack_round_trips(rows, cols):
    weight = _stack(2, rows, cols)
    data, scales = unpack_cutlass_mxfp8_weights(prepare_cutlass_mxfp8_weights(weight, gated=False))
    assert torch.equal(data.view(torch.uint8), weight.data.view(torch.uint8))
    assert torch.equal(scales, weight.logical_scales())


def test_gated_fc1_rejects_intermediate_whose_padded_halves_disagree():
    with pytest.raises(MXFP8InputError, match="I % 128 == 0"):
        prepare_cutlass_mxfp8_weights(_stack(1, 2 * 32, H), gated=True)  # round_up(64)=128 != 2*128


def test_out_refresh_keeps_pointers_and_rejects_changed_shape():
    weight = _stack(2, 192, H)
    cutlass = prepare_cutlass_mxfp8_weights(weight, gated=True)
    pointers = (cutlass.data.data_ptr(), cutlass.scale.data_ptr(), cutlass.input_scale.data_ptr())
    weight.quantize_(random_weights((2, 192, H)), backend="reference")
    assert prepare_cutlass_mxfp8_weights(weight, cutlass, gated=True) is cutlass
    fresh = prepare_cutlass_mxfp8_weights(weight, gated=True)
    assert (cutlass.data.data_ptr(), cutlass.scale.data_ptr(), cutlass.input_scale.data_ptr()) == pointers
    assert torch.equal(cutlass.data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(cutlass.scale, fresh.scale)
    with pytest.raises(MXFP8InputError, match="cannot change the shape"):
        prepare_cutlass_mxfp8_weights(_stack(2, 256, H), cutlass, gated=True)


def test_zero_copy_out_refresh_copies_when_storage_differs():
    first, second = _stack(2, H, 96), _stack(2, H, 96)
    cutlass = prepare_cutlass_mxfp8_weights(first, gated=False)
    prepare_cutlass_mxfp8_weights(second, cutlass, gated=False)
    assert cutlass.data.data_ptr() == first.data.data_ptr()
    assert torch.equal(cutlass.data.view(torch.uint8), second.data.view(torch.uint8))
    assert torch.equal(cutlass.scale.view(torch.uint8).reshape(2, -1), second.scale.view(torch.uint8))


def test_gated_copy_writeback_matches_fresh_prepare():
    stack = _stack(3, 192, H)
    cutlass = prepare_cutlass_mxfp8_weights(stack, gated=True)
    expert_weight = stack.expert(2)
    detach = attach_cutlass_mxfp8_writeback(expert_weight, cutlass, 2)
    expert_weight.quantize_(random_weights((192, H)), backend="reference")
    fresh = prepare_cutlass_mxfp8_weights(stack, gated=True)
    assert torch.equal(cutlass.data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(cutlass.scale, fresh.scale)
    detach()
    expert_weight.quantize_(random_weights((192, H)), backend="reference")
    assert torch.equal(cutlass.scale, fresh.scale)


def test_zero_copy_writeback_after_release_reaches_the_view():
    stack = _stack(2, H, 96)
    cutlass = prepare_cutlass_mxfp8_weights(stack, gated=False)
    expert_weight = stack.expert(1)
    attach_cutlass_mxfp8_writeback(expert_weight, cutlass, 1)
    expert_weight.release_storage_()
    source = random_weights((H, 96))
    expert_weight.quantize_(source, backend="reference")
    expected = quantize_mxfp8(source, backend="reference")
    assert torch.equal(cutlass.data[1].view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(cutlass.scale[1].view(torch.uint8).reshape(-1), expected.scale.view(torch.uint8))


def test_prepare_requires_a_stack():
    with pytest.raises(MXFP8InputError, match="stack"):
        prepare_cutlass_mxfp8_weights(_stack(1, 64, 64).expert(0), gated=False)
