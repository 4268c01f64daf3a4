"""The 128x4 swizzle: offset formula, round trips, padding, awkward shapes, stacks."""

import pytest
import torch

from megatron_mxfp8_moe import swizzle_scales, unswizzle_scales
from megatron_mxfp8_moe.format.swizzle import padded_scale_shape, swizzle_offset, swizzled_scale_numel

SHAPES = [(1, 1), (5, 3), (128, 4), (130, 5), (257, 7), (64, 64), (300, 1)]


def _random_scales(*shape):
    return torch.randint(1, 255, shape, dtype=torch.uint8)


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_every_byte_lands_at_the_documented_offset(rows, cols):
    logical = _random_scales(rows, cols)
    swizzled = swizzle_scales(logical)
    assert swizzled.shape == (swizzled_scale_numel(rows, cols),)
    expected = torch.zeros_like(swizzled)
    for row in range(rows):
        for col in range(cols):
            # written out independently of the module's helper
            tile = (row // 128) * ((cols + 3) // 4) + col // 4
            offset = tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4
            assert offset == swizzle_offset(row, col, cols)
            expected[offset] = logical[row, col]
    assert torch.equal(swizzled, expected)


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_padding_bytes_are_zero(rows, cols):
    swizzled = swizzle_scales(_random_scales(rows, cols))
    padded_rows, padded_cols = padded_scale_shape(rows, cols)
    assert swizzled.numel() == padded_rows * padded_cols
    assert int((swizzled != 0).sum()) == rows * cols  # logical bytes are nonzero, padding is zero


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("experts", [1, 3])
def test_stack_round_trip_and_per_expert_independence(rows, cols, experts):
    logical = _random_scales(experts, rows, cols)
    swizzled = swizzle_scales(logical)
    assert swizzled.shape == (experts, swizzled_scale_numel(rows, cols))
    assert torch.equal(unswizzle_scales(swizzled, rows, cols), logical)
    for expert in range(experts):
        assert torch.equal(swizzled[expert], swizzle_scales(logical[expert]))


def test_e8m0_dtype_is_preserved():
    logical = _random_scales(130, 5).view(torch.float8_e8m0fnu)
    swizzled = swizzle_scales(logical)
    assert swizzled.dtype == torch.float8_e8m0fnu
    assert torch.equal(unswizzle_scales(swizzled, 130, 5).view(torch.uint8), logical.view(torch.uint8))


def test_zero_rows_round_trip():
    empty = torch.zeros(2, 0, 3, dtype=torch.uint8)
    assert torch.equal(unswizzle_scales(swizzle_scales(empty), 0, 3), empty)


def test_bad_shapes_raise_clearly():
    with pytest.raises(ValueError, match="scales must be"):
        swizzle_scales(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="last dim 512"):
        unswizzle_scales(torch.zeros(100, dtype=torch.uint8), 5, 3)
