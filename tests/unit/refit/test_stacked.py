"""Whole-stack refit entries: ``<experts path>.linear_fc1.weight`` (no index) = all local experts ``[E, M, K]``."""

import pathlib

import pytest
import torch

from megatron_mxfp8_moe import RefitError, quantize_mxfp8
from megatron_mxfp8_moe.names import parse_expert_stack_name
from megatron_mxfp8_moe.refit import refit_experts
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E0 = fake.experts_path(0)


def test_stack_names_parse():
    assert parse_expert_stack_name("decoder.layers.0.mlp.experts.linear_fc1.weight") == ("decoder.layers.0.mlp.experts", "fc1")
    assert parse_expert_stack_name("linear_fc2.weight") == ("", "fc2")
    assert parse_expert_stack_name("linear_fc2.weight0") is None
    assert parse_expert_stack_name("linear_fc3.weight") is None


def test_a_stacked_entry_equals_its_per_expert_entries():
    generator = torch.Generator().manual_seed(4)
    new_fc1, new_fc2 = fake.random_logical(generator=generator)
    stacked, per_expert = fake.FakeModel(seed=1), fake.FakeModel(seed=1)
    report = refit_experts(stacked, {f"{E0}.linear_fc1.weight": new_fc1, f"{E0}.linear_fc2.weight": new_fc2})
    sources = {f"{E0}.linear_fc1.weight{i}": new_fc1[i] for i in range(fake.EXPERTS)}
    sources.update({f"{E0}.linear_fc2.weight{i}": new_fc2[i] for i in range(fake.EXPERTS)})
    expected = refit_experts(per_expert, sources)
    assert all(torch.equal(a, b) for a, b in zip(stacked.snapshot(), per_expert.snapshot()))  # derived copies too
    assert report.tensors_updated == expected.tensors_updated == 2 * fake.EXPERTS
    assert report.experts == expected.experts and report.bytes_written == expected.bytes_written
    assert report.experts_updated == fake.EXPERTS
    fresh = quantize_mxfp8(new_fc1, backend="reference")  # and the canonical stack equals a fresh quantization
    assert torch.equal(stacked.experts(0).stacks["fc1"].data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(stacked.experts(0).stacks["fc1"].scale.view(torch.uint8), fresh.scale.view(torch.uint8))


@pytest.mark.parametrize("case", ["shape", "nan", "duplicate", "relative"])
def test_bad_stacked_entries_change_nothing(case):
    model = fake.FakeModel(seed=2)
    new_fc1, new_fc2 = fake.random_logical(generator=torch.Generator().manual_seed(5))
    weights = {f"{E0}.linear_fc1.weight": new_fc1, f"{E0}.linear_fc2.weight": new_fc2}
    match = "linear_fc2.weight"
    if case == "shape":
        weights[f"{E0}.linear_fc2.weight"] = new_fc2[1:]
        match = r"linear_fc2\.weight'.*shape"
    elif case == "nan":
        weights[f"{E0}.linear_fc2.weight"] = new_fc2.clone()
        weights[f"{E0}.linear_fc2.weight"][2, 3, 4] = float("nan")
        match = r"linear_fc2\.weight'.*NaN"
    elif case == "duplicate":
        weights[f"{E0}.linear_fc2.weight3"] = new_fc2[3]
        match = r"linear_fc2\.weight3'.*duplicate"
    else:  # a stacked name on a module path that is not an experts module
        weights["decoder.layers.0.mlp.linear_fc2.weight"] = new_fc2
        match = "unknown name"
    before = model.snapshot()
    with pytest.raises(RefitError, match=match):
        refit_experts(model, weights)
    assert all(torch.equal(a, b) for a, b in zip(before, model.snapshot()))


def test_views_of_different_stacks_have_no_stacked_name():
    """A module whose per-expert weights are separate tensors (not views 0..E-1 of one stack) has no stacked name."""
    fc1, fc2 = fake.random_logical(generator=torch.Generator().manual_seed(6))
    module = torch.nn.Module()
    module.num_local_experts, module.local_expert_offset = fake.EXPERTS, 0
    weights = {f"linear_fc1.weight{i}": quantize_mxfp8(fc1[i], backend="reference") for i in range(fake.EXPERTS)}
    module.mxfp8_weights = lambda: dict(weights)
    with pytest.raises(RefitError, match="no canonical weight 'linear_fc1.weight' as one stack"):
        refit_experts(module, {"linear_fc1.weight": fc1})


def test_a_released_stack_has_no_stacked_name_whenever_the_name_table_was_built():
    """The name table is cached per module; releasing the canonical stack afterwards must drop its stacked
    name just as a table built after the release has none (the per-expert names keep working)."""
    from megatron_mxfp8_moe.experts import ExpertSet

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.num_local_experts, self.local_expert_offset = 2, 0
            self.experts = ExpertSet.from_bf16(torch.randn(2, 64, 64), torch.randn(2, 64, 64), "squared_relu",
                                               backend="reference")
            self.derived = []  # a write hook, as kernel stacks have, so that the canonical storage may go
            self.experts.register_write_hook(lambda *args: self.derived.append(args))

        def mxfp8_weights(self):
            return self.experts.mxfp8_weights()

    for warm in (True, False):
        layer = Layer()
        if warm:  # builds and caches the table while the stack still holds its storage
            refit_experts(layer, {"linear_fc1.weight": torch.randn(2, 64, 64)}, backend="reference")
        layer.experts.release_canonical_()
        with pytest.raises(RefitError, match="exposes no canonical weight 'linear_fc1.weight'"):
            refit_experts(layer, {"linear_fc1.weight": torch.randn(2, 64, 64)}, backend="reference")
        report = refit_experts(layer, {"linear_fc1.weight1": torch.randn(64, 64)}, backend="reference")
        assert report.tensors_updated == 1, warm
