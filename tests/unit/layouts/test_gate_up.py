"""Megatron [gate; up] <-> FlashInfer [up; gate] row swap and exact zero padding (layouts/gate_up.py)."""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.format.scales import dequant_multiplier_from_bytes
from megatron_mxfp8_moe.layouts.gate_up import (
    from_flashinfer_rows,
    gate_up_swap_row_indices,
    padded_fc_rows,
    round_up,
    swap_gate_up_rows,
    to_flashinfer_rows,
)
from megatron_mxfp8_moe.testing import random_weights


def _random_bytes(*shape):
    return torch.randint(0, 256, shape, dtype=torch.uint8)


def test_swap_moves_gate_half_behind_up_half_and_is_self_inverse():
    values = _random_bytes(3, 192, 8)
    swapped = swap_gate_up_rows(values)
    assert torch.equal(swapped[:, :96], values[:, 96:])  # up first
    assert torch.equal(swapped[:, 96:], values[:, :96])  # gate second
    assert torch.equal(swap_gate_up_rows(swapped), values)
    assert torch.equal(values[:, gate_up_swap_row_indices(192)], swapped)


def test_swap_works_on_fp8_and_e8m0_dtypes():
    weight = quantize_mxfp8(random_weights((2, 64, 64)), backend="reference")
    swapped = swap_gate_up_rows(weight.data)
    assert swapped.dtype == torch.float8_e4m3fn
    assert torch.equal(swapped.view(torch.uint8)[:, :32], weight.data.view(torch.uint8)[:, 32:])


@pytest.mark.parametrize("rows", [0, 2, 192, 256])
def test_to_and_from_flashinfer_rows_round_trip_gated(rows):
    values = _random_bytes(2, rows, 8)
    padded_rows = padded_fc_rows(rows, gated=True) if rows else 0
    packed = to_flashinfer_rows(values, gated=True, padded_rows=padded_rows, padded_cols=12)
    assert packed.shape == (2, padded_rows, 12)
    assert torch.equal(from_flashinfer_rows(packed, gated=True, rows=rows, cols=8), values)


def test_gated_padding_places_up_at_zero_and_gate_at_padded_half_with_zero_fill():
    intermediate, cols = 96, 8
    values = _random_bytes(intermediate * 2, cols) | 1  # no zero bytes, so any zero below is padding
    packed = to_flashinfer_rows(values, gated=True, padded_rows=256, padded_cols=16)
    assert torch.equal(packed[:96, :8], values[96:])  # up
    assert torch.equal(packed[128:224, :8], values[:96])  # gate
    zero_mask = torch.ones(256, 16, dtype=torch.bool)
    zero_mask[:96, :8] = False
    zero_mask[128:224, :8] = False
    assert int(packed[zero_mask].count_nonzero()) == 0


def test_non_gated_padding_keeps_order():
    values = _random_bytes(96, 4)
    packed = to_flashinfer_rows(values, gated=False, padded_rows=128, padded_cols=8)
    assert torch.equal(packed[:96, :4], values)
    assert int(packed[96:].count_nonzero()) == 0 and int(packed[:, 4:].count_nonzero()) == 0
    assert torch.equal(from_flashinfer_rows(packed, gated=False, rows=96, cols=4), values)


def test_zero_padding_is_exact_for_a_dequantized_gemm():
    """Padded fp8 rows/cols are 0.0 whatever the scale byte: the padded product equals the unpadded one."""
    weight = quantize_mxfp8(random_weights((192, 96)), backend="reference")
    data, scales = weight.data, weight.logical_scales()
    padded_data = to_flashinfer_rows(data, gated=True, padded_rows=256, padded_cols=128)
    padded_scales = to_flashinfer_rows(scales, gated=True, padded_rows=256, padded_cols=4)
    padded_scales[padded_scales == 0] = 200  # any scale byte: zeros stay zeros
    dense = padded_data.to(torch.float64) * dequant_multiplier_from_bytes(padded_scales).double().repeat_interleave(
        32, dim=-1
    )
    x = torch.randn(5, 96, dtype=torch.float64)
    padded_out = torch.nn.functional.pad(x, (0, 32)) @ dense.T  # [5, 256] = [up (128); gate (128)]
    reference = x @ weight.dequantize(torch.float64).T  # [5, 192] = [gate; up]
    assert torch.equal(padded_out[:, :96], reference[:, 96:])
    assert torch.equal(padded_out[:, 128:224], reference[:, :96])
    assert int(padded_out[:, 96:128].count_nonzero()) == 0


def test_bad_arguments_raise_input_errors():
    with pytest.raises(MXFP8InputError, match="even row count"):
        swap_gate_up_rows(_random_bytes(5, 4))
    with pytest.raises(MXFP8InputError, match="padded_rows"):
        to_flashinfer_rows(_random_bytes(8, 4), gated=True, padded_rows=6, padded_cols=4)
    with pytest.raises(MXFP8InputError, match="1-byte dtype"):
        to_flashinfer_rows(torch.zeros(4, 4), gated=False, padded_rows=4, padded_cols=4)
    assert round_up(96) == 128 and round_up(128) == 128 and padded_fc_rows(192, gated=True) == 256
    assert padded_fc_rows(352, gated=True) == 512 and padded_fc_rows(352, gated=False) == 384
