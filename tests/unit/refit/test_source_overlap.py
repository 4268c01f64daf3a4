"""A logical (bf16/fp16/fp32) source whose bytes overlap a weight the same refit writes is refused: writes run
grouped per stack, not in entry order, so it could be read after it was overwritten. The error names the entry,
nothing is written, on both plan paths (one piece and entry by entry), for mappings, lists of pairs and streams.
A source in the bytes of an expert that the batch does not write is fine (as for MXFP8 copies)."""

import pathlib
import re

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe import MXFP8Tensor, RefitError, quantize_mxfp8
from megatron_mxfp8_moe.refit import refit_experts, validate
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E0, E1 = fake.experts_path(0), fake.experts_path(1)
M, K = fake.FC1_SHAPE
EXPERT_BYTES = M * K  # fp8 data bytes of one fc1 expert; a bf16 [M, K] source spans two of them
OVERLAP = re.escape("overlaps the bytes of a weight this refit writes")


def _bf16_on(flat: torch.Tensor, offset: int, shape=(M, K)) -> torch.Tensor:
    """A bf16 tensor of ``shape`` on the bytes of the 1-D uint8 ``flat`` from ``offset`` (shares its storage)."""
    return flat[offset:offset + 2 * shape[0] * shape[1]].view(torch.bfloat16).view(shape)


def _fc1_bytes(model, layer: int = 0) -> torch.Tensor:
    return model.experts(layer).stacks["fc1"].data.view(torch.uint8).reshape(-1)


def _on_experts_2_and_3(model, layer: int = 0) -> torch.Tensor:
    """A bf16 ``[M, K]`` source on the fp8 data bytes of fc1 experts 2 and 3 of ``layer``."""
    return _bf16_on(_fc1_bytes(model, layer), 2 * EXPERT_BYTES)


def _plan(monkeypatch, module, entries, path: str):
    """``plan(entries)`` on the one-piece path or entry by entry (``_columns`` patched to None)."""
    if path == "entry by entry":
        monkeypatch.setattr(validate, "_columns", lambda entries: None)
    plan = validate.RefitValidator(module).plan(entries)
    assert isinstance(plan.writes, validate._LazyWrites) == (path == "one piece")
    return plan


def _forms(batch: dict) -> dict:
    return {"mapping": batch.items(), "pairs": list(batch.items())}


@pytest.mark.parametrize("path", ["one piece", "entry by entry"])
@pytest.mark.parametrize("form", ["mapping", "pairs"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed view"])
def test_a_source_on_a_written_weights_data_is_rejected_on_both_plan_paths(monkeypatch, path, form, layout):
    model = fake.FakeModel()
    before = model.snapshot()
    batch = fake.new_sources(layers=(0,))
    source = _on_experts_2_and_3(model)
    if layout == "transposed view":  # checked as given, though the plan reads a contiguous copy
        source = _bf16_on(_fc1_bytes(model), 2 * EXPERT_BYTES, (K, M)).t()
        assert not source.is_contiguous()
    batch[f"{E0}.linear_fc1.weight0"] = source
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': the source {OVERLAP} "
                                         rf"\(the target of entry '{E0}.linear_fc1.weight[23]'\)"):
        _plan(monkeypatch, model, _forms(batch)[form], path)
    assert fake.same(model.snapshot(), before)


@pytest.mark.parametrize("path", ["one piece", "entry by entry"])
@pytest.mark.parametrize("form", ["mapping", "pairs"])
def test_a_source_on_an_expert_the_batch_does_not_write_is_fine(monkeypatch, path, form):
    """The control: the same source while experts 2 and 3 are not written."""
    model = fake.FakeModel()
    source = _on_experts_2_and_3(model)
    expected = quantize_mxfp8(source.clone(), backend="reference")
    untouched = [model.experts(0).expert_bytes("fc1", index) for index in (2, 3)]
    batch = fake.new_sources(layers=(0,), experts=(0, 1))
    batch[f"{E0}.linear_fc1.weight0"] = source
    plan = _plan(monkeypatch, model, _forms(batch)[form], path)
    assert [write.name for write in plan.writes] == list(batch)
    refit_experts(model, batch)
    written = model.experts(0).mxfp8_weights()["linear_fc1.weight0"]
    assert torch.equal(written.data.view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(written.scale.view(torch.uint8), expected.scale.view(torch.uint8))
    assert all(fake.same(model.experts(0).expert_bytes("fc1", index), old) for index, old in zip((2, 3), untouched))


@pytest.mark.parametrize("path", ["one piece", "entry by entry"])
def test_the_check_per_write_runs_only_for_a_source_inside_a_written_stack(monkeypatch, path):
    """The cheap filter rules ordinary sources out, so the plan makes no write for the check (the one-piece plan
    makes its writes on access); a source inside a stack is checked per write."""
    checked = []
    check = validate._check_sources_alias_no_target
    monkeypatch.setattr(validate, "_check_sources_alias_no_target",
                        lambda writes: (checked.append(type(writes).__name__), check(writes)))
    model = fake.FakeModel()
    _plan(monkeypatch, model, fake.new_sources(layers=(0,)).items(), path)
    assert checked == []
    batch = fake.new_sources(layers=(0,), experts=(0, 1))
    batch[f"{E0}.linear_fc1.weight0"] = _on_experts_2_and_3(model)
    plan = _plan(monkeypatch, model, batch.items(), path)
    assert checked == ["_LazyWrites" if path == "one piece" else "list"]
    assert len(plan.writes) == len(batch)


@pytest.mark.parametrize("as_stream", ["mapping", "list", "iterator"])
def test_refit_experts_rejects_it_atomically(as_stream):
    """Through refit_experts: a mapping, a list of pairs and an iterator (both streams): no canonical or derived
    byte, hook or refresh."""
    model = fake.FakeModel()
    before = model.snapshot()
    batch = fake.new_sources()  # layer 0 first
    batch[f"{E0}.linear_fc1.weight0"] = _on_experts_2_and_3(model)
    weights = {"mapping": batch, "list": list(batch.items()), "iterator": iter(batch.items())}[as_stream]
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': the source {OVERLAP}"):
        refit_experts(model, weights)
    assert fake.same(model.snapshot(), before)
    assert [(experts.hook_calls, experts.refresh_calls) for experts in model.all_experts()] == [([], 0), ([], 0)]


def test_a_stream_checks_each_module_against_its_own_writes():
    """A stream is validated and written per experts module: a bad source in module 1 leaves module 0 written
    (``applied_modules``) and module 1 untouched; a source of module 1 on bytes module 0 wrote earlier in the
    stream reads them after that write, in stream order, and is accepted (in a mapping it is refused)."""
    model = fake.FakeModel()
    layer1_before = model.experts(1).stack_bytes()
    batch = fake.new_sources()
    batch[f"{E1}.linear_fc1.weight1"] = _on_experts_2_and_3(model, layer=1)
    with pytest.raises(RefitError, match=rf"^refit entry '{E1}.linear_fc1.weight1': the source {OVERLAP}") as caught:
        refit_experts(model, iter(batch.items()))
    assert caught.value.applied_modules == (E0,)
    assert fake.same(model.experts(1).stack_bytes(), layer1_before)
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 0]

    model = fake.FakeModel()
    batch = fake.new_sources()
    batch[f"{E1}.linear_fc1.weight1"] = _on_experts_2_and_3(model, layer=0)
    with pytest.raises(RefitError, match=rf"^refit entry '{E1}.linear_fc1.weight1': the source {OVERLAP}"):
        refit_experts(model, batch)
    refit_experts(model, iter(batch.items()))
    expected = quantize_mxfp8(_on_experts_2_and_3(model, layer=0).clone(), backend="reference")  # the new bytes
    assert torch.equal(model.experts(1).expert_bytes("fc1", 1)[0], expected.data.view(torch.uint8))


def _packed(seed: int = 0):
    """BareStacks over ONE uint8 buffer: [fc1 data | spare | fc1 scale | fc2 data | fc2 scale | spare], each
    spare the size of a bf16 [M, K] source; returns (module, buffer, the offset of each part)."""
    generator = torch.Generator().manual_seed(seed)
    fc1 = quantize_mxfp8(torch.randn(fake.EXPERTS, *fake.FC1_SHAPE, generator=generator), backend="reference")
    fc2 = quantize_mxfp8(torch.randn(fake.EXPERTS, *fake.FC2_SHAPE, generator=generator), backend="reference")
    spare = torch.zeros(2 * M * K, dtype=torch.uint8)
    parts = [fc1.data.view(torch.uint8), spare, fc1.scale.view(torch.uint8), fc2.data.view(torch.uint8),
             fc2.scale.view(torch.uint8), spare]
    buffer = torch.cat([part.reshape(-1) for part in parts])
    offsets = [0]
    for part in parts[:-1]:
        offsets.append(offsets[-1] + part.numel())
    piece = [buffer[offset:offset + part.numel()] for offset, part in zip(offsets, parts)]
    stacks = [MXFP8Tensor(piece[data].view(torch.float8_e4m3fn).view(like.shape), piece[scale])
              for data, scale, like in ((0, 2, fc1), (3, 4, fc2))]
    return fake.BareStacks(*stacks), buffer, offsets


def _logical(linear: str, seed: int) -> torch.Tensor:
    return fake.random_weights(fake.SHAPES[linear], generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("path", ["one piece", "entry by entry"])
def test_a_source_on_a_written_weights_scale_bytes_is_rejected(monkeypatch, scans, path):
    """A source ending in the first bytes of fc1 expert 0's swizzled scales (the stacks share one buffer)."""
    module, buffer, offsets = _packed()
    before = module.stack_bytes()
    source = _bf16_on(buffer, offsets[2] + 512 - 2 * M * K)  # the spare, then 512 scale bytes of expert 0
    batch = {"linear_fc1.weight0": _logical("fc1", 1), "linear_fc1.weight1": source,
             "linear_fc2.weight2": _logical("fc2", 2)}
    with pytest.raises(RefitError, match=rf"^refit entry 'linear_fc1.weight1': the source {OVERLAP} "
                                         r"\(the target of entry 'linear_fc1.weight0'\)"):
        _plan(monkeypatch, module, batch.items(), path)
    with pytest.raises(RefitError, match="overlaps"):
        refit_experts(module, batch)
    assert fake.same(module.stack_bytes(), before)  # (NaN/Inf scans may have run: they write only flags)


def test_a_whole_stack_source_overlapping_the_stack_is_rejected(scans):
    module, buffer, _ = _packed()
    before = module.stack_bytes()
    with pytest.raises(RefitError, match=rf"^refit entry 'linear_fc1.weight': the source {OVERLAP}"):
        refit_experts(module, {"linear_fc1.weight": _bf16_on(buffer, 0, (fake.EXPERTS * M, K)).view(-1, M, K)})
    assert fake.same(module.stack_bytes(), before)


def test_released_views_still_land_in_their_stack():
    """Views released while their stack keeps the storage write into the stack: a logical or an MXFP8 source on
    those bytes is refused too."""
    model = fake.FakeModel()
    layer = model.experts(0)
    layer.release_canonical_()
    before = model.snapshot()
    stack = layer.stacks["fc1"]
    batch = fake.new_sources(layers=(0,))
    batch[f"{E0}.linear_fc1.weight0"] = _on_experts_2_and_3(model)
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': the source {OVERLAP}"):
        refit_experts(model, batch)
    batch[f"{E0}.linear_fc1.weight0"] = MegatronMXFP8Tensor(stack.data[2], stack.scale[2].view(torch.uint8),
                                                            "triton")
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': the MXFP8 source {OVERLAP}"):
        refit_experts(model, batch)
    assert fake.same(model.snapshot(), before)


class _LoneExperts(torch.nn.Module):
    """Two fc1 experts as LONE canonical tensors (not views of a stack) on one uint8 buffer:
    [w0 data | w1 data | spare (a bf16 [M, K] source) | w0 scale | w1 scale]."""

    def __init__(self):
        super().__init__()
        self.num_local_experts, self.local_expert_offset = 2, 0
        generator = torch.Generator().manual_seed(5)
        weights = [quantize_mxfp8(torch.randn(M, K, generator=generator), backend="reference") for _ in range(2)]
        data = [w.data.view(torch.uint8).reshape(-1) for w in weights]
        scale = [w.scale.view(torch.uint8).reshape(-1) for w in weights]
        self.buffer = torch.cat([*data, torch.zeros(2 * M * K, dtype=torch.uint8), *scale])
        starts = [0, M * K, 4 * M * K, 4 * M * K + scale[0].numel()]
        self.spare = 2 * M * K
        self.views = {
            f"linear_fc1.weight{i}": MXFP8Tensor(
                self.buffer[starts[i]:starts[i] + M * K].view(torch.float8_e4m3fn).view(M, K),
                self.buffer[starts[2 + i]:starts[2 + i] + scale[i].numel()])
            for i in range(2)}

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        return dict(self.views)


def test_lone_canonical_tensors_are_checked_too():
    """Targets that are not views of a stack: a source on their bytes is refused before any write; a source on
    the spare bytes of the same buffer is written."""
    module = _LoneExperts()
    before = module.buffer.clone()
    good = torch.randn(M, K)
    on_weights = _bf16_on(module.buffer, 0)  # the data bytes of both lone weights
    with pytest.raises(RefitError, match=rf"^refit entry 'linear_fc1.weight1': the source {OVERLAP}"):
        refit_experts(module, {"linear_fc1.weight0": good, "linear_fc1.weight1": on_weights})
    assert torch.equal(module.buffer, before)
    spare = _bf16_on(module.buffer, module.spare)
    spare.copy_(torch.randn(M, K))
    expected = quantize_mxfp8(spare.clone(), backend="reference")
    refit_experts(module, {"linear_fc1.weight0": good, "linear_fc1.weight1": spare})
    assert torch.equal(module.views["linear_fc1.weight1"].data.view(torch.uint8), expected.data.view(torch.uint8))
