"""trtllm-gen Major-K MXFP8 layout (layouts/routed.py): index math, FlashInfer oracles, round trips, refresh."""

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8
from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.format.swizzle import swizzle_offset, swizzle_scales, unswizzle_scales
from megatron_mxfp8_moe.layouts.gate_up import (
    round_up,
    swap_gate_up_rows,
    to_flashinfer_rows,
)
from megatron_mxfp8_moe.layouts.routed import (
    attach_routed_mxfp8_writeback,
    gated_reorder_row_indices,
    prepare_routed_mxfp8_weights,
    routed_row_indices,
    shuffle_row_indices,
    unpack_routed_mxfp8_weights,
)
from megatron_mxfp8_moe.testing import random_weights

H = 256


def _stack(experts, rows, cols):
    return quantize_mxfp8(random_weights((experts, rows, cols)), backend="reference")


def _loop_gated_reorder(rows):
    out = [0] * rows
    for i in range(rows // 2):
        out[2 * i], out[2 * i + 1] = i, rows // 2 + i
    return torch.tensor(out)


def _loop_shuffle(rows, block=32):
    """Documented formula: input row j of a block moves to (j % (B/8)) * 8 + j // (B/8)."""
    out = [0] * rows
    for start in range(0, rows, block):
        for j in range(block):
            out[start + (j % (block // 8)) * 8 + j // (block // 8)] = start + j
    return torch.tensor(out)


@pytest.mark.parametrize("rows", [2, 64, 256])
def test_gated_reorder_matches_documented_formula(rows):
    assert torch.equal(gated_reorder_row_indices(rows), _loop_gated_reorder(rows))


@pytest.mark.parametrize("rows", [32, 128, 512])
def test_shuffle_matches_documented_formula_both_directions(rows):
    index = shuffle_row_indices(rows)
    assert torch.equal(index, _loop_shuffle(rows))
    position = torch.arange(rows)
    block = position // 32 * 32
    assert torch.equal(index, block + (position % 32 % 8) * 4 + position % 32 // 8)  # out[bB+q] = in[bB+(q%8)*4+q//8]
    assert torch.equal(shuffle_row_indices(rows, epilogue_tile_m=64), _loop_shuffle(rows, block=16))


def test_combined_index_is_reorder_then_shuffle():
    assert torch.equal(routed_row_indices(256, gated=True), _loop_gated_reorder(256)[_loop_shuffle(256)])
    assert torch.equal(routed_row_indices(256, gated=False), _loop_shuffle(256))


@pytest.mark.parametrize("rows", [128, 256])
def test_index_math_matches_flashinfer_helpers(rows):
    pytest.importorskip("flashinfer", reason="flashinfer-python is not importable; FlashInfer oracle skipped")
    import flashinfer
    from flashinfer.fused_moe.core import reorder_rows_for_gated_act_gemm
    from flashinfer.utils import get_shuffle_matrix_a_row_indices

    matrix = torch.randint(0, 256, (rows, 64), dtype=torch.uint8)
    assert torch.equal(get_shuffle_matrix_a_row_indices(matrix, epilogue_tile_m=128), shuffle_row_indices(rows))
    assert torch.equal(flashinfer.shuffle_matrix_a(matrix, 128), matrix[shuffle_row_indices(rows)])
    assert torch.equal(reorder_rows_for_gated_act_gemm(matrix), matrix[gated_reorder_row_indices(rows)])


@pytest.mark.parametrize("intermediate", [96, 128])
def test_prepare_gated_fc1_matches_flashinfer_pipeline(intermediate):
    """Oracle: swap halves, pad, FlashInfer reorder + shuffle_matrix_a(128) per expert; scales then 128x4."""
    pytest.importorskip("flashinfer", reason="flashinfer-python is not importable; FlashInfer oracle skipped")
    import flashinfer
    from flashinfer.fused_moe.core import reorder_rows_for_gated_act_gemm

    weight = _stack(3, 2 * intermediate, H)
    routed = prepare_routed_mxfp8_weights(weight, gated=True)
    padded_rows = 2 * round_up(intermediate)
    data = to_flashinfer_rows(weight.data.view(torch.uint8), gated=True, padded_rows=padded_rows, padded_cols=H)
    scales = to_flashinfer_rows(weight.logical_scales(), gated=True, padded_rows=padded_rows, padded_cols=H // 32)
    for expert in range(3):
        expected_data = flashinfer.shuffle_matrix_a(reorder_rows_for_gated_act_gemm(data[expert]), 128)
        expected_rows = flashinfer.shuffle_matrix_a(reorder_rows_for_gated_act_gemm(scales[expert]), 128)
        assert torch.equal(routed.data[expert].view(torch.uint8), expected_data)
        assert torch.equal(routed.scale[expert].reshape(-1), swizzle_scales(expected_rows))


def test_prepare_fc2_matches_flashinfer_pipeline():
    pytest.importorskip("flashinfer", reason="flashinfer-python is not importable; FlashInfer oracle skipped")
    import flashinfer

    weight = _stack(2, H, 96)  # fc2 [E, H, I], I = 96 -> K padded to 128
    routed = prepare_routed_mxfp8_weights(weight, gated=False)
    assert routed.data.shape == (2, H, 128) and routed.scale.shape == (2, H, 4)
    data = to_flashinfer_rows(weight.data.view(torch.uint8), gated=False, padded_rows=H, padded_cols=128)
    scales = to_flashinfer_rows(weight.logical_scales(), gated=False, padded_rows=H, padded_cols=4)
    for expert in range(2):
        assert torch.equal(routed.data[expert].view(torch.uint8), flashinfer.shuffle_matrix_a(data[expert], 128))
        shuffled = flashinfer.shuffle_matrix_a(scales[expert], 128)
        assert torch.equal(routed.scale[expert].reshape(-1), swizzle_scales(shuffled))


def test_scale_interleave_follows_offset_formula_after_the_row_permutation():
    """Independent of swizzle_scales: byte of permuted logical scale (r, c) sits at the 128x4 offset."""
    intermediate = 96
    weight = _stack(2, 2 * intermediate, H)
    routed = prepare_routed_mxfp8_weights(weight, gated=True)
    # Independent path: explicit [up; gate] padding by hand, then the documented index loops.
    logical = weight.logical_scales()
    padded = torch.zeros(2, 256, H // 32, dtype=torch.uint8)
    padded[:, :96] = logical[:, 96:]
    padded[:, 128:224] = logical[:, :96]
    permuted = padded[:, _loop_gated_reorder(256)[_loop_shuffle(256)]]
    rows, cols = torch.meshgrid(torch.arange(256), torch.arange(H // 32), indexing="ij")
    offsets = swizzle_offset(rows, cols, H // 32)
    flat = routed.scale.reshape(2, -1)
    for expert in range(2):
        assert torch.equal(flat[expert][offsets], permuted[expert])
    assert routed.scale.dtype == torch.uint8


def test_prepared_layout_differs_from_permute_only_scales():
    """Guard against FlashInfer bug #4087: scales swapped to [up; gate] and row-permuted exactly as prepare does,
    but not 128x4-interleaved, must not be what prepare stores (while un-interleaving gives exactly them)."""
    weight = _stack(1, 256, H)  # gated, I = 128: no padding
    routed = prepare_routed_mxfp8_weights(weight, gated=True)
    logical = weight.logical_scales()
    up_gate = torch.cat([logical[:, 128:], logical[:, :128]], dim=1)
    permute_only = up_gate[:, routed_row_indices(256, gated=True)]
    assert torch.equal(unswizzle_scales(routed.scale.reshape(1, -1), 256, H // 32), permute_only)
    assert not torch.equal(routed.scale, permute_only.reshape(routed.scale.shape))


@pytest.mark.parametrize("gated,rows,cols", [(True, 192, H), (True, 256, H), (False, 96, H), (False, H, 96),
                                             (False, H, 128)])
def test_unpack_inverts_prepare_bit_for_bit(gated, rows, cols):
    weight = _stack(3, rows, cols)
    routed = prepare_routed_mxfp8_weights(weight, gated=gated)
    data, scales = unpack_routed_mxfp8_weights(routed)
    assert data.dtype == torch.float8_e4m3fn and scales.dtype == torch.uint8
    assert torch.equal(data.view(torch.uint8), weight.data.view(torch.uint8))
    assert torch.equal(scales, weight.logical_scales())


def test_unpack_flashinfer_order_keeps_up_first_and_zero_padding():
    weight = _stack(2, 192, H)
    routed = prepare_routed_mxfp8_weights(weight, gated=True)
    data, scales = unpack_routed_mxfp8_weights(routed, flashinfer_order=True)
    assert data.shape == (2, 256, H) and scales.shape == (2, 256, H // 32)
    assert torch.equal(data[:, :96].view(torch.uint8), weight.data.view(torch.uint8)[:, 96:])  # up
    assert torch.equal(data[:, 128:224].view(torch.uint8), weight.data.view(torch.uint8)[:, :96])  # gate
    assert int(data[:, 96:128].view(torch.uint8).count_nonzero()) == 0
    assert torch.equal(scales[:, :96], swap_gate_up_rows(weight.logical_scales())[:, :96])


def test_out_refresh_keeps_data_ptrs_and_equals_fresh_prepare():
    weight = _stack(2, 192, H)
    routed = prepare_routed_mxfp8_weights(weight, gated=True)
    pointers = (routed.data.data_ptr(), routed.scale.data_ptr())
    weight.quantize_(random_weights((2, 192, H)), backend="reference")
    refreshed = prepare_routed_mxfp8_weights(weight, routed, gated=True)
    fresh = prepare_routed_mxfp8_weights(weight, gated=True)
    assert refreshed is routed
    assert (routed.data.data_ptr(), routed.scale.data_ptr()) == pointers
    assert torch.equal(routed.data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(routed.scale, fresh.scale)


def test_out_refresh_rejects_changed_shape_before_writing():
    routed = prepare_routed_mxfp8_weights(_stack(2, 192, H), gated=True)
    before = routed.data.view(torch.uint8).clone()
    with pytest.raises(MXFP8InputError, match="cannot change the shape"):
        prepare_routed_mxfp8_weights(_stack(2, 256, H), routed, gated=True)
    with pytest.raises(MXFP8InputError, match="gated"):
        prepare_routed_mxfp8_weights(_stack(2, 192, H), routed, gated=False)
    assert torch.equal(routed.data.view(torch.uint8), before)


def test_writeback_quantize_on_one_expert_matches_fresh_prepare():
    stack = _stack(3, 192, H)
    routed = prepare_routed_mxfp8_weights(stack, gated=True)
    pointers = (routed.data.data_ptr(), routed.scale.data_ptr())
    expert_weight = stack.expert(1)
    detach = attach_routed_mxfp8_writeback(expert_weight, routed, 1)
    untouched = routed.data[0].view(torch.uint8).clone()
    expert_weight.quantize_(random_weights((192, H)), backend="reference")
    fresh = prepare_routed_mxfp8_weights(stack, gated=True)
    assert (routed.data.data_ptr(), routed.scale.data_ptr()) == pointers
    assert torch.equal(routed.data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(routed.scale, fresh.scale)
    assert torch.equal(routed.data[0].view(torch.uint8), untouched)
    detach()
    expert_weight.quantize_(random_weights((192, H)), backend="reference")
    assert torch.equal(routed.scale, fresh.scale)  # detached: no longer refreshed


def test_writeback_after_release_reaches_the_stack():
    stack = _stack(2, H, 96)
    routed = prepare_routed_mxfp8_weights(stack, gated=False)
    expert_weight = stack.expert(0)
    attach_routed_mxfp8_writeback(expert_weight, routed, 0)
    source = random_weights((H, 96))
    expert_weight.release_storage_()
    expert_weight.quantize_(source, backend="reference")
    expected = prepare_routed_mxfp8_weights(quantize_mxfp8(source.unsqueeze(0), backend="reference"), gated=False)
    assert torch.equal(routed.data[0].view(torch.uint8), expected.data[0].view(torch.uint8))
    assert torch.equal(routed.scale[0], expected.scale[0])


def test_writeback_rejects_mismatched_weight_and_expert():
    stack = _stack(2, 192, H)
    routed = prepare_routed_mxfp8_weights(stack, gated=True)
    with pytest.raises(MXFP8InputError, match="shape must be"):
        attach_routed_mxfp8_writeback(_stack(1, 128, H).expert(0), routed, 0)
    with pytest.raises(MXFP8InputError, match="expert"):
        attach_routed_mxfp8_writeback(stack.expert(0), routed, 2)
    with pytest.raises(MXFP8InputError, match="one expert"):
        attach_routed_mxfp8_writeback(stack, routed, 0)


def test_prepare_rejects_bad_inputs():
    with pytest.raises(MXFP8InputError, match="MXFP8Tensor"):
        prepare_routed_mxfp8_weights(torch.zeros(2, 64, 64), gated=False)
    with pytest.raises(MXFP8InputError, match="even row count"):
        prepare_routed_mxfp8_weights(_stack(1, 33, 64), gated=True)
    with pytest.raises(MXFP8InputError, match="stack"):
        prepare_routed_mxfp8_weights(_stack(1, 64, 64).expert(0), gated=False)
