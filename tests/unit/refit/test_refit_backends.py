"""Refit through every backend whose stack builds on a CPU: the bytes equal a freshly built layer's.

The FlashInfer routed and CUTLASS stacks are pure tensor layout work, so it is built here on the CPU (its requirement check,
which needs an SM100 GPU to launch the kernel, is bypassed for the build only); the Hopper Triton layout and
the reference backend's fp32 stack likewise. Canonical weights are released after the build for the GPU
backends whose stack is a repacked copy, as on a GPU, so the refit reaches those stacks through the write hooks
alone.
"""

import dataclasses

import pytest
import torch

from megatron_mxfp8_moe import DeviceCaps, ExpertSet, MXFP8ExpertLayer, refit_experts
from megatron_mxfp8_moe.errors import RefitError
from megatron_mxfp8_moe.testing import random_weights

E, H, I = 4, 256, 128
BLACKWELL = DeviceCaps("cpu", (10, 0), "0.7.2.post1", "3.6.0")  # build-only: the layouts are device-independent


def _stack_tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value):
        return [t for field in dataclasses.fields(value) for t in _stack_tensors(getattr(value, field.name))]
    return []


def _layer(backend, fc1, fc2, monkeypatch):
    if backend.startswith("flashinfer"):
        kernel = backend.split("_")[1]  # routed | cutlass
        monkeypatch.setattr(f"megatron_mxfp8_moe.kernels.flashinfer_compat.require_flashinfer_{kernel}_mxfp8", lambda *args, **kwargs: None)
        layer = MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend=backend, caps=BLACKWELL)
    elif backend == "triton":
        hopper = DeviceCaps("cuda", (9, 0), None, "3.6.0")  # build-only, as above
        layer = MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend=backend, caps=hopper)
    else:
        layer = MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend=backend)
    layer.build_()
    return layer


@pytest.mark.parametrize("backend", ["reference", "triton", "flashinfer_routed", "flashinfer_cutlass"])
@pytest.mark.parametrize("partial", [False, True], ids=["all-experts", "two-experts"])
def test_refit_equals_a_fresh_layer_byte_for_byte(backend, partial, monkeypatch):
    fc1, fc2 = random_weights((E, 2 * I, H)), random_weights((E, H, I))
    layer = _layer(backend, fc1, fc2, monkeypatch)
    # GPU backends drop the canonical bytes, unless their stack IS the canonical storage (shares_canonical).
    assert layer.expert_set.is_released == (backend != "reference" and not layer.stack_state.shares_canonical)
    pointers = [t.data_ptr() for t in _stack_tensors(layer.stack_state.fc1) + _stack_tensors(layer.stack_state.fc2)]
    new_fc1, new_fc2 = fc1.clone(), fc2.clone()
    experts = (1, 3) if partial else range(E)
    for index in experts:
        new_fc1[index], new_fc2[index] = random_weights((2 * I, H)), random_weights((H, I))
    weights = {f"linear_fc1.weight{i}": new_fc1[i].contiguous() for i in experts}
    weights.update({f"linear_fc2.weight{i}": new_fc2[i].contiguous() for i in experts})
    report = refit_experts(layer, weights)
    assert report.tensors_updated == 2 * len(experts)
    fresh = _layer(backend, new_fc1, new_fc2, monkeypatch)
    for mine, theirs in ((layer.stack_state.fc1, fresh.stack_state.fc1), (layer.stack_state.fc2, fresh.stack_state.fc2)):
        mine_tensors, their_tensors = _stack_tensors(mine), _stack_tensors(theirs)
        assert mine_tensors and len(mine_tensors) == len(their_tensors)
        for a, b in zip(mine_tensors, their_tensors):
            assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    after = [t.data_ptr() for t in _stack_tensors(layer.stack_state.fc1) + _stack_tensors(layer.stack_state.fc2)]
    assert after == pointers


def _all_bytes(layer) -> list[torch.Tensor]:
    """Clones of every canonical and kernel-stack byte of ``layer``."""
    tensors = _stack_tensors(layer.stack_state.fc1) + _stack_tensors(layer.stack_state.fc2)
    for stack in (layer.expert_set.fc1, layer.expert_set.fc2):
        if not stack.is_released:
            tensors += [stack.data, stack.scale]
    return [tensor.contiguous().view(torch.uint8).clone() for tensor in tensors]


@pytest.mark.parametrize("backend", ["reference", "flashinfer_routed", "flashinfer_cutlass"])
def test_a_source_inside_a_rewritten_kernel_stack_is_refused(backend, monkeypatch):
    """A source lying in a kernel stack that the written layer's hooks rewrite could be overwritten before it is
    read (writes run grouped per stack, each followed by its hooks): refused, naming the entry, nothing written.
    The Triton layer has no such stack (it reads the canonical storage): ``derived_tensors()`` is empty."""
    fc1, fc2 = random_weights((E, 2 * I, H)), random_weights((E, H, I))
    layer = _layer(backend, fc1, fc2, monkeypatch)
    derived = layer.derived_tensors()
    assert derived
    largest = max(derived, key=lambda tensor: tensor.nbytes)
    inside = largest.view(-1).view(torch.uint8)[: 2 * I * H * 4].view(torch.float32).view(2 * I, H)
    fresh = random_weights((2 * I, H))
    before = _all_bytes(layer)
    with pytest.raises(RefitError, match=r"^refit entry 'linear_fc1.weight2': the source overlaps the kernel stack"):
        refit_experts(layer, {"linear_fc1.weight0": fresh, "linear_fc1.weight2": inside})
    after = _all_bytes(layer)
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after))
    refit_experts(layer, {"linear_fc1.weight2": inside.clone().nan_to_num(0.0, 0.0, 0.0)})  # a copy is fine


def test_the_triton_layer_has_no_rewritten_stack(monkeypatch):
    layer = _layer("triton", random_weights((E, 2 * I, H)), random_weights((E, H, I)), monkeypatch)
    assert layer.stack_state.shares_canonical and layer.derived_tensors() == []
