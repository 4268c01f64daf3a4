"""Packed routing words (routing/pack.py): (expert_id << 16) | bf16 bits, negative weights and -1 ids."""

import pytest
import torch

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.routing.pack import (
    global_to_local_ids,
    pack_routed_mxfp8_routing,
    unpack_routed_mxfp8_routing,
)


def test_known_words():
    ids = torch.tensor([[5, -1], [3, 0]])
    weights = torch.tensor([[0.5, 0.25], [-0.25, 1.0]])
    packed = pack_routed_mxfp8_routing(ids, weights)
    assert packed.dtype == torch.int32
    assert int(packed[0, 0]) == (5 << 16) | 0x3F00  # bf16(0.5) = 0x3F00
    assert int(packed[0, 1]) == -65536 | 0x3E80  # id -1 -> high half 0xFFFF, bf16(0.25) = 0x3E80
    assert int(packed[1, 0]) == (3 << 16) | 0xBE80  # bf16(-0.25) = 0xBE80: the sign bit must not reach the id
    assert int(packed[1, 1]) == 0x3F80


def test_negative_weights_keep_their_id_unlike_sign_extended_packing():
    ids = torch.tensor([[7, 2]])
    weights = torch.tensor([[-0.75, -3.0]])
    unpacked_ids, unpacked_weights = unpack_routed_mxfp8_routing(pack_routed_mxfp8_routing(ids, weights))
    assert torch.equal(unpacked_ids, ids.to(torch.int32))
    assert torch.equal(unpacked_weights, weights.to(torch.bfloat16))
    naive = (ids.to(torch.int32) << 16) | weights.to(torch.bfloat16).view(torch.int16).to(torch.int32)
    assert not torch.equal(naive >> 16, ids.to(torch.int32))  # the upstream-test pitfall this module avoids


def test_random_round_trip_including_minus_one_and_large_ids():
    ids = torch.randint(-1, 32768, (64, 8))
    ids[::3, 0] = -1
    weights = torch.randn(64, 8) * 4
    unpacked_ids, unpacked_weights = unpack_routed_mxfp8_routing(pack_routed_mxfp8_routing(ids, weights))
    assert torch.equal(unpacked_ids, ids.to(torch.int32))
    assert torch.equal(unpacked_weights.view(torch.int16), weights.to(torch.bfloat16).view(torch.int16))


def test_zero_rows():
    packed = pack_routed_mxfp8_routing(torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0, 2))
    assert packed.shape == (0, 2) and packed.dtype == torch.int32


def test_bad_inputs_raise_naming_the_argument():
    with pytest.raises(MXFP8InputError, match="expert_ids"):
        pack_routed_mxfp8_routing(torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(MXFP8InputError, match="probabilities"):
        pack_routed_mxfp8_routing(torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(MXFP8InputError, match=r"\(2, 2\) and \(2, 3\)"):
        pack_routed_mxfp8_routing(torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 3))
    with pytest.raises(MXFP8InputError, match="packed"):
        unpack_routed_mxfp8_routing(torch.zeros(2, 2, dtype=torch.int64))


def test_global_to_local_ids():
    ids = torch.tensor([[4, 7, 8, -1, 3, 0]])
    assert torch.equal(global_to_local_ids(ids, 4, 4), torch.tensor([[0, 3, -1, -1, -1, -1]]))
    assert torch.equal(global_to_local_ids(ids, 0, 8), torch.tensor([[4, 7, -1, -1, 3, 0]]))
    with pytest.raises(MXFP8InputError, match="num_local_experts"):
        global_to_local_ids(ids, 0, 0)
