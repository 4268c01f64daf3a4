"""Releasing the canonical bytes after the kernel stack is built: reads raise, refits still land."""

import pytest
import torch

from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer, ReleasedWeightError, refit_experts
from megatron_mxfp8_moe.testing import random_routing, random_weights

E, H, I, T, TOPK = 4, 64, 32, 9, 2


def _layer(fc1, fc2, release):
    return MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend="reference", release_canonical=release)


def test_release_after_build_keeps_only_the_stack_and_refits_still_land():
    fc1, fc2 = random_weights((E, 2 * I, H)), random_weights((E, H, I))
    layer = _layer(fc1, fc2, release=True)
    x = torch.randn(T, H, dtype=torch.bfloat16)
    probs, ids = random_routing(T, E, TOPK)
    kept = _layer(fc1, fc2, release=False)
    resident_kept = (kept.build_(), kept.resident_bytes())[1]
    layer.build_()
    assert layer.expert_set.is_released and not kept.expert_set.is_released
    canonical_bytes = sum(t.numel() for t in (kept.expert_set.fc1.data, kept.expert_set.fc1.scale,
                                              kept.expert_set.fc2.data, kept.expert_set.fc2.scale))
    assert layer.resident_bytes() == resident_kept - canonical_bytes
    for read in (lambda: layer.expert_set.fc1.data, lambda: layer.mxfp8_weights()["linear_fc2.weight1"].dequantize(),
                 lambda: layer.expert_set.dequantize()):
        with pytest.raises(ReleasedWeightError, match="released"):
            read()

    new_fc1, new_fc2 = random_weights((E, 2 * I, H)), random_weights((E, H, I))
    weights = {f"linear_fc1.weight{i}": new_fc1[i] for i in range(E)}
    weights.update({f"linear_fc2.weight{i}": new_fc2[i] for i in range(E)})
    refit_experts(layer, weights)
    fresh = _layer(new_fc1, new_fc2, release=False)
    assert torch.equal(layer.forward_routed(x, probs, ids), fresh.forward_routed(x, probs, ids))
    assert torch.equal(layer.stack_state.fc1, fresh.build_().fc1)


def test_release_is_refused_before_a_stack_holds_the_bytes():
    expert_set = ExpertSet.from_bf16(random_weights((E, 2 * I, H)), random_weights((E, H, I)), "swiglu")
    with pytest.raises(Exception, match="no write hook"):
        expert_set.release_canonical_()
    assert not expert_set.is_released
