"""ExpertSet: one stack allocation per linear, persistent per-expert views, loads, write hooks."""

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.experts import ExpertSet
from megatron_mxfp8_moe.tensor import MXFP8Tensor, quantize_mxfp8
from megatron_mxfp8_moe.testing import random_weights

E, H, I = 3, 64, 32


def _bf16(activation="swiglu"):
    rows = 2 * I if activation == "swiglu" else I
    return random_weights((E, rows, H)), random_weights((E, H, I))


def _bytes(tensor):
    return tensor.data.view(torch.uint8).clone(), tensor.scale.view(torch.uint8).clone()


@pytest.mark.parametrize("activation, fc1_rows", [("swiglu", 2 * I), ("squared_relu", I)])
def test_from_bf16_matches_standalone_quantization(activation, fc1_rows):
    fc1, fc2 = _bf16(activation)
    experts = ExpertSet.from_bf16(fc1, fc2, activation)
    assert tuple(experts.fc1.shape) == (E, fc1_rows, H) and tuple(experts.fc2.shape) == (E, H, I)
    assert (experts.num_experts, experts.hidden_size, experts.ffn_hidden_size) == (E, H, I)
    for ours, source in ((experts.fc1, fc1), (experts.fc2, fc2)):
        expected = quantize_mxfp8(source.contiguous())
        assert torch.equal(ours.data.view(torch.uint8), expected.data.view(torch.uint8))
        assert torch.equal(ours.scale.view(torch.uint8), expected.scale.view(torch.uint8))


def test_views_share_one_stack_allocation():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    for linear, stack in (("fc1", experts.fc1), ("fc2", experts.fc2)):
        for index in range(E):
            view = experts.expert_weight(linear, index)
            assert view.data.data_ptr() == stack.data[index].data_ptr()
            assert view.scale.data_ptr() == stack.scale[index].data_ptr()
            assert view.data.untyped_storage().data_ptr() == stack.data.untyped_storage().data_ptr()


def test_mxfp8_weights_names_and_identity():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    first, second = experts.mxfp8_weights(), experts.mxfp8_weights()
    assert list(first) == [f"linear_fc1.weight{i}" for i in range(E)] + [f"linear_fc2.weight{i}" for i in range(E)]
    assert all(first[name] is second[name] for name in first)
    assert first["linear_fc1.weight2"] is experts.fc1_expert(2)
    assert all(isinstance(value, MXFP8Tensor) and not value.is_stacked for value in first.values())


def test_write_through_a_view_lands_in_the_stack_and_reaches_hooks():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    seen = []
    removers = experts.register_write_hook(lambda linear, index, data, scale: seen.append((linear, index, data.shape)))
    before_other = _bytes(experts.fc2_expert(0))
    ptr = experts.fc2.data.data_ptr()
    new = random_weights((H, I))
    experts.mxfp8_weights()["linear_fc2.weight1"].quantize_(new)
    expected = quantize_mxfp8(new)
    assert torch.equal(experts.fc2.data[1].view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(experts.fc2.scale[1].view(torch.uint8), expected.scale.view(torch.uint8))
    assert all(torch.equal(a, b) for a, b in zip(_bytes(experts.fc2_expert(0)), before_other))
    assert experts.fc2.data.data_ptr() == ptr
    assert seen == [("fc2", 1, (H, I))]
    # A whole-stack write reaches the hook once per expert.
    seen.clear()
    experts.fc1.quantize_(random_weights(tuple(experts.fc1.shape)))
    assert seen == [("fc1", i, (2 * I, H)) for i in range(E)]
    for remove in removers:
        remove()
    experts.fc1_expert(0).quantize_(random_weights((2 * I, H)))
    assert len(seen) == E  # no hook after removal


@pytest.mark.parametrize("style", ["grouped", "sequential"])
def test_load_state_dict_both_naming_schemes(style):
    fc1, fc2 = _bf16()
    if style == "grouped":
        state = {f"mlp.experts.linear_fc1.weight{i}": fc1[i] for i in range(E)}
        state.update({f"mlp.experts.linear_fc2.weight{i}": fc2[i] for i in range(E)})
    else:
        state = {f"mlp.experts.local_experts.{i}.linear_fc1.weight": fc1[i] for i in range(E)}
        state.update({f"mlp.experts.local_experts.{i}.linear_fc2.weight": fc2[i] for i in range(E)})
    state["mlp.router.weight"] = torch.randn(8, H)  # ignored: not an expert weight
    experts = ExpertSet.empty(E, H, I, "swiglu").load_state_dict_(state, prefix="mlp.experts.")
    reference = ExpertSet.from_bf16(fc1, fc2, "swiglu")
    assert torch.equal(experts.fc1.data.view(torch.uint8), reference.fc1.data.view(torch.uint8))
    assert torch.equal(experts.fc2.scale.view(torch.uint8), reference.fc2.scale.view(torch.uint8))


def test_load_state_dict_rejects_before_writing():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    before = _bytes(experts.fc1)
    fc1, fc2 = _bf16()
    partial = {f"linear_fc1.weight{i}": fc1[i] for i in range(E)}
    with pytest.raises(MXFP8InputError, match="missing expert weights"):
        experts.load_state_dict_(partial)
    bad = dict(partial)
    bad.update({f"linear_fc2.weight{i}": fc2[i] for i in range(E)})
    bad["linear_fc2.weight2"] = torch.randn(H, I + 32)
    with pytest.raises(MXFP8InputError, match=r"linear_fc2.weight2: expected shape \(64, 32\)"):
        experts.load_state_dict_(bad)
    with pytest.raises(MXFP8InputError, match="out of range"):
        experts.load_state_dict_({**partial, "linear_fc1.weight7": fc1[0]})
    assert all(torch.equal(a, b) for a, b in zip(_bytes(experts.fc1), before))


def test_load_megatron_mxfp8_tensors_copies_bytes():
    fc1, fc2 = _bf16("squared_relu")
    source = ExpertSet.from_bf16(fc1, fc2, "squared_relu")
    megatron_weights = {
        name: MegatronMXFP8Tensor(data=value.data.clone(), scale=value.scale.view(torch.uint8).clone(), backend="flashinfer")
        for name, value in source.mxfp8_weights().items()
    }
    target = ExpertSet.empty(E, H, I, "squared_relu").load_state_dict_(megatron_weights)
    assert torch.equal(target.fc1.data.view(torch.uint8), source.fc1.data.view(torch.uint8))
    assert torch.equal(target.fc2.scale.view(torch.uint8), source.fc2.scale.view(torch.uint8))


class _Linear(torch.nn.Module):
    def __init__(self, weights):
        super().__init__()
        for index, weight in enumerate(weights):
            setattr(self, f"weight{index}", torch.nn.Parameter(weight.clone()))


class _GroupedLike(torch.nn.Module):  # TEGroupedMLP / InferenceGroupedMLP parameter layout
    def __init__(self, fc1, fc2):
        super().__init__()
        self.linear_fc1, self.linear_fc2 = _Linear(fc1), _Linear(fc2)


class _SequentialLike(torch.nn.Module):  # SequentialMLP parameter layout
    def __init__(self, fc1, fc2):
        super().__init__()
        self.local_experts = torch.nn.ModuleList()
        for index in range(fc1.shape[0]):
            expert = torch.nn.Module()
            expert.linear_fc1, expert.linear_fc2 = torch.nn.Linear(H, fc1.shape[1], bias=False), torch.nn.Linear(I, H, bias=False)
            expert.linear_fc1.weight.data.copy_(fc1[index])
            expert.linear_fc2.weight.data.copy_(fc2[index])
            self.local_experts.append(expert)


@pytest.mark.parametrize("module_type", [_GroupedLike, _SequentialLike])
def test_load_from_megatron_modules(module_type):
    fc1, fc2 = _bf16()
    module = module_type(fc1, fc2)
    experts = ExpertSet.empty(E, H, I, "swiglu").load_from_module_(module)
    reference = ExpertSet.from_bf16(fc1, fc2, "swiglu")
    assert torch.equal(experts.fc1.data.view(torch.uint8), reference.fc1.data.view(torch.uint8))
    assert torch.equal(experts.fc2.data.view(torch.uint8), reference.fc2.data.view(torch.uint8))
    copy = ExpertSet.empty(E, H, I, "swiglu").load_from_module_(type("M", (), {"mxfp8_weights": experts.mxfp8_weights})())
    assert torch.equal(copy.fc1.scale.view(torch.uint8), experts.fc1.scale.view(torch.uint8))


def test_constructor_checks():
    with pytest.raises(MXFP8InputError, match="multiple of 32"):
        ExpertSet.empty(E, 48, I, "swiglu")
    with pytest.raises(MXFP8InputError, match="num_experts"):
        ExpertSet.empty(0, H, I, "swiglu")
    fc1 = MXFP8Tensor.empty((E, I, H))
    fc2 = MXFP8Tensor.empty((E, H, I))
    with pytest.raises(MXFP8InputError, match="fc2: expected"):
        ExpertSet(fc1, fc2, "swiglu")  # gated needs fc2 [E, H, I/2]
    with pytest.raises(ValueError, match="unknown activation"):
        ExpertSet(fc1, fc2, "gelu")
    with pytest.raises(MXFP8InputError, match="index"):
        ExpertSet(fc1, fc2, "relu").expert_weight("fc1", E)


def _state(fc1, fc2):
    state = {f"linear_fc1.weight{i}": fc1[i] for i in range(E)}
    state.update({f"linear_fc2.weight{i}": fc2[i] for i in range(E)})
    return state


@pytest.mark.parametrize("bad, match", [
    (torch.full((H, I), float("nan")), "non-finite"),
    (torch.zeros(H, I, dtype=torch.int32), "dtype"),
    (MegatronMXFP8Tensor(torch.zeros(H, I, dtype=torch.uint8, device="meta").view(torch.float8_e4m3fn),
                         torch.zeros(128 * 4, dtype=torch.uint8, device="meta"), "triton"), "must be on"),
    (MegatronMXFP8Tensor(torch.full((H, I), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn),
                         torch.full((128 * 4,), 127, dtype=torch.uint8), "triton"), "non-finite"),
    ("not a tensor", "expected a tensor"),
])
def test_load_state_dict_checks_every_value_before_the_first_write(bad, match):
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    before = _bytes(experts.fc1) + _bytes(experts.fc2)
    seen = []
    experts.register_write_hook(lambda *args: seen.append(args[:2]))
    state = _state(*_bf16())
    state[f"linear_fc2.weight{E - 1}"] = bad  # the last entry written
    with pytest.raises(MXFP8InputError, match=rf"linear_fc2.weight{E - 1}.*{match}"):
        experts.load_state_dict_(state)
    assert all(torch.equal(a, b) for a, b in zip(_bytes(experts.fc1) + _bytes(experts.fc2), before)) and not seen


def test_load_bf16_checks_every_value_before_the_first_write():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    before = _bytes(experts.fc1)
    fc1, fc2 = _bf16()
    fc2[E - 1, 3, 5] = float("inf")
    with pytest.raises(MXFP8InputError, match=rf"fc2\[{E - 1}\].*non-finite"):
        experts.load_bf16_(fc1, fc2)
    with pytest.raises(MXFP8InputError, match=rf"fc2\[{E - 1}\].*dtype"):
        experts.load_bf16_(fc1, list(_bf16()[1][:E - 1]) + [torch.zeros(H, I, dtype=torch.int64)])
    assert all(torch.equal(a, b) for a, b in zip(_bytes(experts.fc1), before))


def test_release_canonical_checks_both_stacks_before_releasing_any():
    experts = ExpertSet.from_bf16(*_bf16(), "swiglu")
    for index in range(E):
        experts.fc1_expert(index).register_write_hook(lambda *args: None)  # fc2 has no hooks
    with pytest.raises(MXFP8InputError, match="fc2: no write hook.*nothing was released"):
        experts.release_canonical_()
    tensors = [experts.fc1, experts.fc2] + list(experts.mxfp8_weights().values())
    assert not experts.is_released and not any(tensor.is_released for tensor in tensors)
    new = random_weights((2 * I, H))
    experts.load_weight_("fc1", 0, new)  # the stack still serves the canonical bytes
    assert torch.equal(experts.fc1.data[0].view(torch.uint8), quantize_mxfp8(new).data.view(torch.uint8))
    experts.register_write_hook(lambda *args: None)
    assert experts.release_canonical_() > 0
    assert all(tensor.is_released for tensor in tensors)
