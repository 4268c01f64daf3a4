"""RefitValidator._plan_views: a batch of expert views of one module checked in one piece, and the per-stack
layout of its names kept on the module's lookup table (``_Layout``) for the next call with the same names.

The one-piece plan must equal the entry-by-entry plan (``_columns`` patched to None) and give the same errors;
the kept layout must never be consulted for another module, another name mapping, another E or prefix, and
must not hide released storage or hooks attached since."""

import pathlib

import pytest
import torch

from megatron_mxfp8_moe import RefitError, quantize_mxfp8
from megatron_mxfp8_moe.refit import refit_experts, validate
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
M, K = 32, 64


def _stacks(experts: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    fc1 = quantize_mxfp8(torch.randn(experts, M, K, generator=generator), backend="reference")
    fc2 = quantize_mxfp8(torch.randn(experts, K, M, generator=generator), backend="reference")
    return fake.BareStacks(fc1, fc2)


def _source(linear: str, seed: int = 1, dtype=torch.bfloat16):
    shape = (M, K) if linear == "fc1" else (K, M)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _entries(experts=range(4), linears=("fc1", "fc2"), seed: int = 1) -> dict:
    return {f"linear_{linear}.weight{index}": _source(linear, seed + 10 * index + (linear == "fc2"))
            for linear in linears for index in experts}


def _one_piece(plan) -> bool:
    return isinstance(plan.writes, validate._LazyWrites)


def _describe(plan):
    """Everything a plan says, with targets and sources by identity."""
    writes = [(w.name, w.kind, w.linear, w.local_index, id(w.target), id(w.source), w.module_path)
              for w in plan.writes]
    batches = [([w.name for w in b.writes], id(b.stack), b.indices, b.whole,
                [(s is w.source, s.is_contiguous(), torch.equal(s, w.source)) for s, w in zip(b.sources, b.writes)])
               for b in plan.batches]
    return writes, batches, plan.finite_on_device, plan.modules, plan.skipped


def _both(monkeypatch, module, entries, **kwargs):
    """(one-piece result, entry-by-entry result) of ``plan(entries)``: a plan or the RefitError's message."""
    def run():
        try:
            return validate.RefitValidator(module, **kwargs).plan(entries)
        except RefitError as error:
            return str(error)

    first = run()
    with monkeypatch.context() as patch:
        patch.setattr(validate, "_columns", lambda entries: None)
        second = run()
    return first, second


def _interleaved():
    entries = _entries()
    return dict(sorted(entries.items(), key=lambda item: (item[0][-1], item[0])))


def _non_contiguous():
    entries = _entries()
    entries["linear_fc2.weight1"] = entries["linear_fc2.weight1"].t().contiguous().t()
    return entries


def _mixed_dtypes():
    entries = _entries()
    entries["linear_fc1.weight2"] = entries["linear_fc1.weight2"].float()
    return entries


GOOD = {
    "grouped": _entries,
    "interleaved": _interleaved,
    "partial, permuted": lambda: dict(reversed(list(_entries(experts=(3, 1), linears=("fc2", "fc1")).items()))),
    "non-contiguous source": _non_contiguous,
    "fp32 sources": lambda: {name: source.float() for name, source in _entries().items()},
    "mixed dtypes in a stack (entry by entry)": _mixed_dtypes,
    "whole stack entry (entry by entry)": lambda: {**_entries(linears=("fc2",)),
                                                   "linear_fc1.weight": torch.randn(4, M, K).bfloat16()},
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_the_one_piece_plan_equals_the_entry_by_entry_plan(monkeypatch, case):
    module = _stacks()
    entries = GOOD[case]()
    for form in (entries.items(), list(entries.items())):
        one_piece, per_entry = _both(monkeypatch, module, form)
        assert _describe(one_piece) == _describe(per_entry)
        assert _one_piece(one_piece) == ("entry by entry" not in case)
        assert not _one_piece(per_entry)


def _bad(name, source):
    def make():
        entries = _entries()
        entries[name] = source() if callable(source) else source
        return entries
    return make


BAD = {
    "dtype": _bad("linear_fc2.weight2", lambda: torch.zeros(K, M, dtype=torch.float64)),
    "shape": _bad("linear_fc1.weight3", lambda: torch.zeros(K, M, dtype=torch.bfloat16)),
    "device": _bad("linear_fc1.weight1", lambda: torch.empty(M, K, dtype=torch.bfloat16, device="meta")),
    "sparse": _bad("linear_fc1.weight1", lambda: _source("fc1").float().to_sparse()),
    "not a tensor": _bad("linear_fc2.weight0", [[0.0] * M] * K),
    "index out of range": _bad("linear_fc1.weight4", lambda: _source("fc1")),
    "unknown name": _bad("linear_fc3.weight0", lambda: _source("fc1")),
    "mxfp8 copy": _bad("linear_fc1.weight0", lambda: quantize_mxfp8(_source("fc1").float(), backend="reference")),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_batch_gives_the_entry_by_entry_error_and_a_later_call_is_planned_in_one_piece(monkeypatch, case):
    module = _stacks()
    entries = BAD[case]()
    one_piece, per_entry = _both(monkeypatch, module, entries.items())
    if isinstance(per_entry, str):
        assert one_piece == per_entry and per_entry.startswith("refit entry 'linear_fc")
    else:  # a valid batch the one-piece path leaves to the entry-by-entry path (an MXFP8 copy)
        assert _describe(one_piece) == _describe(per_entry) and not _one_piece(one_piece)
    good = _entries()
    assert _one_piece(validate.RefitValidator(module).plan(good.items()))


def test_duplicates_and_non_str_names_are_left_to_the_entry_by_entry_path(monkeypatch):
    module = _stacks()
    source = _source("fc1")
    twice = [("linear_fc1.weight0", source), ("linear_fc1.weight1", source), ("linear_fc1.weight0", source)]
    one_piece, per_entry = _both(monkeypatch, module, twice)
    assert one_piece == per_entry == ("refit entry 'linear_fc1.weight0': duplicate: entry 'linear_fc1.weight0' "
                                      "already writes this weight ('linear_fc1.weight0')")
    unhashable = [("linear_fc1.weight0", source), (["linear_fc1.weight1"], source)]
    one_piece, per_entry = _both(monkeypatch, module, unhashable)
    assert one_piece == per_entry and "a name must be a str" in one_piece
    validator = validate.RefitValidator(module)  # a stream: a second plan may not write what the first wrote
    validator.plan([("linear_fc1.weight0", source)])
    with pytest.raises(RefitError, match=r"^refit entry 'linear_fc1.weight0': duplicate: entry 'linear_fc1.weight0'"):
        validator.plan([("linear_fc1.weight1", source), ("linear_fc1.weight0", source)])


def test_writes_are_made_on_access_once_and_batches_share_them():
    module = _stacks()
    plan = validate.RefitValidator(module).plan(_interleaved().items())
    assert _one_piece(plan) and len(plan.writes) == 8
    by_position = list(plan.writes)
    assert all(write is plan.writes[position] for position, write in enumerate(by_position))
    assert [w.name for w in by_position] == list(_interleaved())
    for batch in plan.batches:
        assert [w.name for w in batch.writes] == [f"linear_{batch.writes[0].linear}.weight{i}" for i in range(4)]
        assert all(any(write is other for other in by_position) for write in batch.writes)
        assert batch.writes[1:3] == [batch.writes[1], batch.writes[2]]


# -- the kept layout ------------------------------------------------------------------------------------------


def _layout(module, **kwargs):
    validator = validate.RefitValidator(module, **kwargs)
    layouts = validator._experts_module("", "probe").lookups.layouts
    return layouts[0] if layouts else None


def _landed(stacks, entries) -> bool:
    """Whether every entry's expert holds the reference quantization of its source."""
    for name, source in entries.items():
        linear, index = name.split(".")[0][len("linear_"):], int(name.split("weight")[1])
        stack, expected = getattr(stacks, linear), quantize_mxfp8(source, backend="reference")
        if not (torch.equal(stack.data[index].view(torch.uint8), expected.data.view(torch.uint8))
                and torch.equal(stack.scale[index].view(torch.uint8), expected.scale.view(torch.uint8))):
            return False
    return True


def test_the_layout_is_kept_per_module_and_reused_only_for_the_same_names():
    first, second = _stacks(seed=1), _stacks(seed=2)
    names = _entries(seed=5)
    for round_ in range(2):
        for module in (first, second):
            before = second.stack_bytes() if module is first else first.stack_bytes()
            entries = _entries(seed=7 + round_)
            refit_experts(module, entries, backend="reference")
            assert _landed(module, entries)
            assert fake.same(second.stack_bytes() if module is first else first.stack_bytes(), before)
    kept = _layout(first)
    assert kept is not None and kept is not _layout(second) and kept.names == list(names)
    assert [id(group.stack) for group in kept.groups] == [id(first.fc1), id(first.fc2)]
    plan = validate.RefitValidator(first).plan(_entries(seed=8).items())
    assert _layout(first) is kept and all(w.target is first._views[w.name] for w in plan.writes)
    fewer = _entries(experts=(0, 1), seed=9)  # other names: a new layout, kept in front of the first
    plan = validate.RefitValidator(first).plan(fewer.items())
    assert [w.name for w in plan.writes] == list(fewer) and _layout(first).names == list(fewer)
    grown = dict(fewer)
    grown["linear_fc2.weight3"] = _source("fc2")  # the caller's dict changed: the kept names are a copy
    assert [w.name for w in validate.RefitValidator(first).plan(grown.items()).writes] == list(grown)


def test_layouts_of_names_refitted_in_turn_are_all_kept(monkeypatch):
    """fc1 then fc2 (or halves of the experts) in turn: each list of names keeps its layout (up to
    ``_LAYOUTS_KEPT``, least recently planned dropped first), and every plan lands its own entries."""
    module = _stacks()
    built = []
    monkeypatch.setattr(validate, "_build_layout", lambda *a, _b=validate._build_layout: built.append(a[0]) or _b(*a))
    specs = [dict(linears=("fc1",)), dict(linears=("fc2",)), dict(experts=(0, 1)), dict(experts=(2, 3))]
    for round_ in range(3):  # new sources every round, the same names
        lists = [_entries(seed=1 + 100 * round_ + 10 * position, **spec) for position, spec in enumerate(specs)]
        for entries in lists:
            refit_experts(module, entries, backend="reference")
            assert _landed(module, entries) and _layout(module).names == list(entries)
    assert built == [list(entries) for entries in lists]  # built once each, reused in rounds 2 and 3
    kept = validate.RefitValidator(module)._experts_module("", "probe").lookups.layouts
    assert len(kept) == validate._LAYOUTS_KEPT == 4
    fifth = _entries(experts=(1, 2), seed=5)
    refit_experts(module, fifth, backend="reference")
    assert _landed(module, fifth)
    assert [layout.names for layout in kept] == [list(fifth)] + [list(entries) for entries in lists[:0:-1]]
    refit_experts(module, lists[0], backend="reference")  # the dropped one is built again
    assert built[-1] == list(lists[0]) and len(built) == 6


def test_a_name_that_maps_elsewhere_now_is_planned_against_the_new_mapping():
    module = _stacks()
    entries = _entries(experts=(0,), linears=("fc1",), seed=3)
    refit_experts(module, entries, backend="reference")
    kept = _layout(module)
    assert kept.groups[0].indices == [0]
    swapped = dict(module._views)
    swapped["linear_fc1.weight0"], swapped["linear_fc1.weight1"] = swapped["linear_fc1.weight1"], \
        swapped["linear_fc1.weight0"]
    module._views = swapped
    before_expert0 = module.fc1.data[0].clone()
    new = {"linear_fc1.weight0": _source("fc1", seed=77)}
    plan = validate.RefitValidator(module).plan(new.items())
    assert _one_piece(plan) and plan.writes[0].target is swapped["linear_fc1.weight0"]
    assert plan.batches[0].indices == [1] and _layout(module) is not kept
    refit_experts(module, new, backend="reference")
    expected = quantize_mxfp8(new["linear_fc1.weight0"], backend="reference")
    assert torch.equal(module.fc1.data[1].view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(module.fc1.data[0], before_expert0)  # expert 0 (the name's old target) untouched


def test_fewer_local_experts_are_not_hidden_by_a_kept_layout(monkeypatch):
    module = _stacks()
    entries = _entries()
    assert _one_piece(validate.RefitValidator(module).plan(entries.items()))
    module.num_local_experts = 3
    one_piece, per_entry = _both(monkeypatch, module, entries.items())
    assert one_piece == per_entry and one_piece.startswith(
        "refit entry 'linear_fc1.weight3': local expert index 3 out of range [0, 3)")
    assert _one_piece(validate.RefitValidator(module).plan(_entries(experts=range(3)).items()))


def test_prefix_and_strict_rules_are_not_bypassed_by_a_kept_layout():
    """Names carrying the root module's path in the model are never planned in one piece without prefix=: a
    batch that a guessed prefix allowed under strict is refused with strict=False, whatever ran before."""
    model = fake.FakeModel()
    layer = model.experts(1)
    path = fake.experts_path(1)
    entries = {f"{path}.linear_fc1.weight{i}": fake.random_weights(fake.FC1_SHAPE) for i in range(fake.EXPERTS)}
    for _ in range(2):
        refit_experts(layer, iter(entries.items()))  # strict: the path is guessed from the first name
        refit_experts(layer, entries)
    before = model.snapshot()
    with pytest.raises(RefitError, match=rf"^refit entry '{path}.linear_fc1.weight0': .*strict=False.*prefix="):
        refit_experts(layer, entries, strict=False)
    assert fake.same(model.snapshot(), before)
    plan = validate.RefitValidator(layer, prefix=path, strict=False).plan(entries.items())
    assert _one_piece(plan) and [w.local_index for w in plan.writes] == [0, 1, 2, 3]
    with pytest.raises(RefitError, match=r"^refit entry 'linear_fc1.weight0': unknown name"):
        validate.RefitValidator(model).plan({"linear_fc1.weight0": entries[f"{path}.linear_fc1.weight0"]}.items())


def test_storage_released_after_a_kept_layout_still_reaches_the_hooks():
    """FakeExperts' views carry write hooks (derived copies): once the canonical views are released, a refit with
    the kept layout is checked on the host and lands in the derived copies, as a fresh plan would."""
    model = fake.FakeModel(layers=1)
    layer = model.experts(0)
    path = fake.experts_path(0)
    refit_experts(model, fake.new_sources(layers=(0,), seed=1))
    layer.release_canonical_()
    sources = fake.new_sources(layers=(0,), seed=2)
    plan = validate.RefitValidator(model).plan(sources.items(), finite_on_device=True)
    assert _one_piece(plan) and not plan.finite_on_device
    report = refit_experts(model, sources)
    assert report.tensors_updated == 2 * fake.EXPERTS
    for linear in ("fc1", "fc2"):
        derived_data, derived_scale = layer.derived[linear]
        for index in range(fake.EXPERTS):
            expected = quantize_mxfp8(sources[f"{path}.linear_{linear}.weight{index}"], backend="reference")
            assert torch.equal(derived_data[index], expected.data.view(torch.uint8).t())
            assert torch.equal(derived_scale[index], expected.scale.view(torch.uint8))


def _launches(scans):
    """(source count, first entry) per recorded scan launch."""
    return [(len(sources), first) for sources, first in scans]


def test_a_hook_attached_after_a_kept_layout_turns_the_device_check_off(scans):
    module = _stacks()
    entries = _entries()
    plan = validate.RefitValidator(module).plan(entries.items(), finite_on_device=True)
    assert _one_piece(plan) and plan.finite_on_device and _launches(scans) == [(4, 0), (4, 4)]
    calls = []
    module._views["linear_fc2.weight2"].register_write_hook(lambda tensor, data, scale: calls.append(data.clone()))
    plan = validate.RefitValidator(module).plan(entries.items(), finite_on_device=True)
    assert _one_piece(plan) and not plan.finite_on_device and plan.device_scan is None
    refit_experts(module, entries, backend="reference")
    expected = quantize_mxfp8(entries["linear_fc2.weight2"], backend="reference")
    assert len(calls) == 1 and torch.equal(calls[0].view(torch.uint8), expected.data.view(torch.uint8))


def test_the_first_bad_write_in_entry_order_is_found_through_the_one_piece_scans(scans):
    module = _stacks()
    entries = _interleaved()
    plan = validate.RefitValidator(module).plan(entries.items(), finite_on_device=True)
    scan = plan.device_scan
    assert _one_piece(plan) and _launches(scans) == [(4, 0), (4, 4)]  # one launch per stack
    assert [w.name for w in scan.order] == [f"linear_fc1.weight{i}" for i in range(4)] + [
        f"linear_fc2.weight{i}" for i in range(4)]
    late, early = plan.writes[6], plan.writes[3]  # fc1.weight3 (flag 4) and fc2.weight1 (flag 6)
    for write in (late, early):
        scan.flags[0] = 1
        scan.flags[1 + scan.order.index(write)] = 1
    assert scan.first_bad(plan.writes) is early


def test_quantize_experts_trusts_a_validated_list_but_still_checks_its_indices():
    stack = quantize_mxfp8(torch.randn(3, M, K), backend="reference")
    sources = [_source("fc1", seed) for seed in (1, 2)]
    stack.quantize_experts_((2, 0), sources, backend="reference", validated=True)  # a tuple: converted
    for index, source in zip((2, 0), sources):
        expected = quantize_mxfp8(source, backend="reference")
        assert torch.equal(stack.data[index].view(torch.uint8), expected.data.view(torch.uint8))
    for indices in ([0, 0], [3, 1]):
        with pytest.raises(Exception, match="distinct and in"):
            stack.quantize_experts_(indices, sources, backend="reference", validated=True)
