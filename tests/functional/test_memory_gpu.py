"""On a GPU: after the Triton stack is built one copy of the expert bytes stays resident (the Triton kernel reads
the canonical stacks themselves, so nothing is repacked and nothing needs releasing)."""

import gc

import pytest
import torch

from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer
from megatron_mxfp8_moe.testing import random_weights

pytestmark = pytest.mark.gpu


def test_triton_layer_keeps_one_copy_of_the_expert_bytes():
    experts, hidden, ffn = 16, 2048, 768
    fc1 = random_weights((experts, 2 * ffn, hidden), device="cuda")
    fc2 = random_weights((experts, hidden, ffn), device="cuda")
    expert_set = ExpertSet.from_bf16(fc1, fc2, "swiglu")
    del fc1, fc2
    gc.collect()
    torch.cuda.synchronize()
    weights = experts * (2 * ffn * hidden + hidden * ffn)
    one_copy = weights + weights // 32  # fp8 bytes + one E8M0 byte per 32 weights (no padding at these shapes)
    canonical = sum(t.numel() for t in (expert_set.fc1.data, expert_set.fc1.scale, expert_set.fc2.data,
                                        expert_set.fc2.scale))
    assert canonical == one_copy
    before = torch.cuda.memory_allocated()
    layer = MXFP8ExpertLayer(expert_set, backend="triton")
    layer.build_()
    del expert_set
    gc.collect()
    torch.cuda.synchronize()
    growth = torch.cuda.memory_allocated() - before
    assert layer.stack_state.shares_canonical and not layer.expert_set.is_released
    assert layer.stack_state.fc1 is layer.expert_set.fc1 and layer.stack_state.fc2 is layer.expert_set.fc2
    assert layer.resident_bytes() == one_copy
    assert growth <= 0.01 * one_copy, f"building the stack grew allocated memory by {growth} bytes"
