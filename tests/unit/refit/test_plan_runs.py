"""RefitValidator.plan's inline path: an entry that continues a run (an expert view of the stack and source dtype
of an earlier entry) is checked inline, every other entry by the general path. Both must give the same plan and
the same errors, and the scan-ahead must cover every write exactly once, whatever the entry order."""

import pathlib

import pytest
import torch

from megatron_mxfp8_moe import RefitError, quantize_mxfp8
from megatron_mxfp8_moe.refit import validate
from megatron_mxfp8_moe.refit.device_check import CHUNK
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
M, K = 32, 64


def _module(experts: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    fc1 = quantize_mxfp8(torch.randn(experts, M, K, generator=generator), backend="reference")
    fc2 = quantize_mxfp8(torch.randn(experts, K, M, generator=generator), backend="reference")
    return fake.BareStacks(fc1, fc2)


def _source(linear: str, dtype=torch.bfloat16, seed: int = 1):
    shape = (M, K) if linear == "fc1" else (K, M)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _plan(module, entries, **kwargs):
    return validate.RefitValidator(module).plan(entries, **kwargs)


def _error(module, entries) -> str:
    with pytest.raises(RefitError) as caught:
        _plan(module, entries)
    return str(caught.value)


BAD_SOURCES = {
    "shape": lambda: _source("fc1").t().contiguous(),
    "float64": lambda: _source("fc1", torch.float64),
    "int": lambda: torch.zeros(M, K, dtype=torch.int32),
    "meta": lambda: torch.empty(M, K, dtype=torch.bfloat16, device="meta"),
    "sparse": lambda: _source("fc1").float().to_sparse(),
    "not_a_tensor": lambda: [[0.0] * K] * M,
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_a_bad_source_inside_a_run_gives_the_general_paths_error(case):
    module = _module()
    alone = _error(module, [("linear_fc1.weight2", BAD_SOURCES[case]())])
    in_run = _error(module, [("linear_fc1.weight0", _source("fc1")), ("linear_fc1.weight1", _source("fc1")),
                             ("linear_fc1.weight2", BAD_SOURCES[case]())])
    assert in_run == alone and in_run.startswith("refit entry 'linear_fc1.weight2': source:"), in_run


def test_duplicates_inside_runs_and_against_whole_stacks_are_named():
    """A whole-stack entry that clashes names the first expert it shares with an earlier entry."""
    module = _module()
    fc1 = [("linear_fc1.weight0", _source("fc1")), ("linear_fc1.weight1", _source("fc1"))]
    whole_fc1 = ("linear_fc1.weight", torch.randn(4, M, K).to(torch.bfloat16))
    whole_fc2 = ("linear_fc2.weight", torch.randn(4, K, M).to(torch.bfloat16))
    assert _error(module, fc1 + [("linear_fc1.weight0", _source("fc1"))]) == (
        "refit entry 'linear_fc1.weight0': duplicate: entry 'linear_fc1.weight0' already writes this weight "
        "('linear_fc1.weight0')")
    assert _error(module, fc1 + [whole_fc1]) == (
        "refit entry 'linear_fc1.weight': duplicate: entry 'linear_fc1.weight0' already writes an expert of this "
        "weight ('linear_fc1.weight0')")
    assert _error(module, fc1 + [whole_fc2, ("linear_fc1.weight2", _source("fc1")), ("linear_fc2.weight3",
                                                                                    _source("fc2"))]) == (
        "refit entry 'linear_fc2.weight3': duplicate: entry 'linear_fc2.weight' already writes this weight "
        "('linear_fc2.weight3')")
    assert _error(module, [("linear_fc1.weight2", _source("fc1")), whole_fc1]) == (
        "refit entry 'linear_fc1.weight': duplicate: entry 'linear_fc1.weight2' already writes an expert of this "
        "weight ('linear_fc1.weight2')")
    assert _error(module, [whole_fc1, whole_fc1]) == (
        "refit entry 'linear_fc1.weight': duplicate: entry 'linear_fc1.weight' already writes an expert of this "
        "weight ('linear_fc1.weight0')")
    plan = _plan(module, fc1 + [whole_fc2, ("linear_fc1.weight2", _source("fc1"))])  # the fc1 run resumes
    assert [(batch.whole, batch.indices) for batch in plan.batches] == [(False, [0, 1, 2]), (True, [0, 1, 2, 3])]


def test_runs_of_interleaved_stacks_and_dtypes_batch_like_the_general_path():
    """Entries alternating between stacks and source dtypes land in one batch per (stack, dtype), in entry order,
    with contiguous sources; the writes keep entry order."""
    module = _module(experts=6)
    entries = []
    for index in range(6):
        dtype = torch.float32 if index in (2, 3) else torch.bfloat16
        entries.append((f"linear_fc1.weight{index}", _source("fc1", dtype, seed=index)))
        entries.append((f"linear_fc2.weight{index}", _source("fc2", seed=10 + index).t().contiguous().t()
                        if index == 4 else _source("fc2", seed=10 + index)))
    plan = _plan(module, entries)
    assert [write.name for write in plan.writes] == [name for name, _ in entries]
    layout = [(batch.writes[0].linear, batch.sources[0].dtype, batch.indices) for batch in plan.batches]
    assert layout == [("fc1", torch.bfloat16, [0, 1, 4, 5]), ("fc2", torch.bfloat16, list(range(6))),
                      ("fc1", torch.float32, [2, 3])]
    for batch in plan.batches:
        assert [write.local_index for write in batch.writes] == batch.indices
        assert all(source.is_contiguous() for source in batch.sources)
        assert all(torch.equal(source, write.source) for source, write in zip(batch.sources, batch.writes))


@pytest.mark.parametrize("order", ["grouped", "interleaved", "generator", "grouped-per-entry",
                                   "interleaved-per-entry"])
def test_the_scan_ahead_covers_every_write_once(scans, monkeypatch, order):
    """Per entry: scans of at most CHUNK sources of one batch, launched while entries arrive (grouped or
    interleaved) or all at the end (entries without a length). A list checked in one piece (``_plan_views``): one
    scan per stack, launched before the plan returns. Flag k + 1 belongs to ``order[k]``; every write is there
    once."""
    experts = CHUNK + 6
    module = _module(experts=experts)
    fc1 = [(f"linear_fc1.weight{i}", _source("fc1", seed=i)) for i in range(experts)]
    fc2 = [(f"linear_fc2.weight{i}", _source("fc2", seed=i)) for i in range(experts)]
    entries = [pair for both in zip(fc1, fc2) for pair in both] if order.startswith("interleaved") else fc1 + fc2
    if order.endswith("per-entry"):
        monkeypatch.setattr(validate, "_columns", lambda entries: None)  # no one-piece check: entry by entry
    ahead = []  # scans launched before the plan returned, when they were launched
    original = validate._PlanBuilder.finish

    def finish(builder, *args):
        ahead.extend(scans)
        return original(builder, *args)

    monkeypatch.setattr(validate._PlanBuilder, "finish", finish)
    plan = _plan(module, iter(entries) if order == "generator" else entries, finite_on_device=True)
    assert plan.finite_on_device
    scan = plan.device_scan
    assert sorted(map(id, scan.order)) == sorted(map(id, plan.writes)) and len(scan.order) == 2 * experts
    assert [first for _, first in scans] == [sum(len(s) for s, _ in scans[:k]) for k in range(len(scans))]
    flat = [source for sources, _ in scans for source in sources]
    by_write = {id(write): source for batch in plan.batches for write, source in zip(batch.writes, batch.sources)}
    assert all(source is by_write[id(write)] for source, write in zip(flat, scan.order))
    if order == "generator" or order.endswith("per-entry"):
        assert all(len(sources) <= CHUNK for sources, _ in scans)
    if order == "generator":
        assert ahead == []  # no length: no scan-ahead, everything is scanned at the end
    elif order.endswith("per-entry"):
        assert [len(sources) for sources, _ in ahead] == [CHUNK, CHUNK]  # one full chunk per stack, early
    else:
        assert [len(sources) for sources, _ in ahead] == [experts, experts]  # each stack at once, early


def test_a_copy_after_a_run_rules_out_the_device_check(scans):
    module = _module()
    copy = quantize_mxfp8(_source("fc2").float(), backend="reference")
    entries = [("linear_fc1.weight0", _source("fc1")), ("linear_fc2.weight1", copy),
               ("linear_fc1.weight1", _source("fc1"))]
    plan = _plan(module, entries, finite_on_device=True)
    assert not plan.finite_on_device and plan.device_scan is None
    assert [write.kind for write in plan.writes] == [validate.QUANTIZE, validate.COPY, validate.QUANTIZE]
    assert [batch.indices for batch in plan.batches if batch.stack is not None and not batch.whole] == [[0, 1]]


def test_full_name_lookups_follow_the_prefix_and_the_expert_count():
    """Names are looked up by full name per (module path, prefix, E), cached across calls: a name resolves the
    same way with or without ``prefix=``, and an index that E no longer covers is an error again."""
    model = torch.nn.Module()
    model.decoder = torch.nn.Module()
    model.decoder.experts = _module()
    full, local = "decoder.experts.linear_fc1.weight3", "experts.linear_fc1.weight3"
    for _ in range(2):  # the second round reuses the cached lookups
        assert _plan(model, [(full, _source("fc1"))]).writes[0].local_index == 3
        with_prefix = validate.RefitValidator(model.decoder, prefix="decoder").plan
        assert [w.global_index for w in with_prefix([(full, _source("fc1")), ("experts.linear_fc1.weight2",
                                                                                _source("fc1"))]).writes] == [3, 2]
        assert validate.RefitValidator(model.decoder).plan([(local, _source("fc1"))]).writes[0].local_index == 3
    model.decoder.experts.num_local_experts = 3
    with pytest.raises(RefitError, match=r"^refit entry 'decoder.experts.linear_fc1.weight3': local expert index 3 "
                                         r"out of range \[0, 3\)"):
        _plan(model, [("decoder.experts.linear_fc1.weight0", _source("fc1")), (full, _source("fc1"))])
