"""The refit fast path: NaN/Inf checked on the device, writes predicated on the result, one host sync.

``scan_nonfinite_triton`` and the abort-predicated quantize kernel run here under the Triton interpreter
(``TRITON_INTERPRET=1`` must be set before Triton is imported, so those checks run in a subprocess that executes
this file). The interpreter's fp8 casts do not round like a GPU's, so there only scale bytes are compared
with the reference quantizer and data bytes are compared as "unchanged"; ``tests/functional/test_refit_gpu.py``
checks every byte on a GPU.
"""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from megatron_mxfp8_moe import MXFP8Tensor, RefitError, quantize_mxfp8, refit_experts, validate_refit
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E, M, K = 3, 64, 96  # K/32 = 3 scale columns: the swizzle's column padding is exercised


def _bytes(stack: MXFP8Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return stack.data.view(torch.uint8).clone(), stack.scale.view(torch.uint8).clone()


def _module(generator):
    fc1 = torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16)
    fc2 = torch.randn(E, K, M, generator=generator, dtype=torch.bfloat16)
    return fake.BareStacks(quantize_mxfp8(fc1, backend="reference"), quantize_mxfp8(fc2, backend="reference"))


def test_device_check_is_not_used_on_the_cpu_reference_path():
    module = _module(torch.Generator().manual_seed(0))
    weights = {"linear_fc1.weight0": torch.randn(M, K, dtype=torch.bfloat16)}
    plan = validate_refit(module, weights)
    assert not plan.finite_on_device  # the public validator checks on the host, always
    bad = {"linear_fc1.weight1": torch.full((M, K), float("nan"), dtype=torch.bfloat16)}
    before = _bytes(module.fc1)
    with pytest.raises(RefitError, match="linear_fc1.weight1"):
        refit_experts(module, bad)
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(module.fc1)))


def test_device_check_only_where_an_aborted_write_cannot_leak(monkeypatch):
    """Eligible: quantize writes into hook-free stacks with storage, triton quantizer. A write hook, an MXFP8
    copy entry or another quantizer sends the plan to the host check (a hook would repack unwritten bytes)."""
    import megatron_mxfp8_moe.quant.triton as triton_quant
    from megatron_mxfp8_moe.quant.backends import QuantBackend
    from megatron_mxfp8_moe.refit import validate

    monkeypatch.setattr(validate, "resolve_quant_backend", lambda backend, device: QuantBackend.TRITON)
    scanned = []  # the scans a plan launches while validating (recorded here; no kernel runs on this CPU)
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton", lambda sources, flags, first_entry=0, **knobs:
                        scanned.append((len(sources), first_entry)))
    generator = torch.Generator().manual_seed(3)
    module = _module(generator)
    logical = {"linear_fc1.weight0": torch.randn(M, K, dtype=torch.bfloat16),
               "linear_fc2.weight2": torch.randn(K, M, dtype=torch.bfloat16)}

    def plan(weights):
        return validate.RefitValidator(module).plan(validate.as_entries(weights), finite_on_device=True)

    planned = plan(logical)
    assert planned.finite_on_device and scanned == [(1, 0), (1, 1)]  # one scan per stack, flags in order
    assert planned.device_scan.order == [planned.writes[0], planned.writes[1]]
    scanned.clear()
    assert not validate.RefitValidator(module).plan(validate.as_entries(logical)).finite_on_device  # not asked
    assert scanned == []
    copy = dict(logical, **{"linear_fc1.weight1": quantize_mxfp8(torch.randn(M, K), backend="reference")})
    assert not plan(copy).finite_on_device
    remove = module.mxfp8_weights()["linear_fc2.weight1"].register_write_hook(lambda *args: None)
    assert not plan(logical).finite_on_device  # a hook anywhere on the written stack
    remove()
    assert plan(logical).finite_on_device
    monkeypatch.setattr(validate, "resolve_quant_backend", lambda backend, device: QuantBackend.REFERENCE)
    assert not plan(logical).finite_on_device


def test_detect_plans_launch_no_scan_and_give_each_batch_its_flags(monkeypatch):
    """nonfinite="detect": a device-checked plan launches no scan and hands batch k the flags of its writes (in
    plan order); where the device path does not apply (a write hook) it is checked on the host, as "reject";
    an unknown mode is a ValueError before anything else."""
    import megatron_mxfp8_moe.quant.triton as triton_quant
    from megatron_mxfp8_moe.quant.backends import QuantBackend
    from megatron_mxfp8_moe.refit import validate

    monkeypatch.setattr(validate, "resolve_quant_backend", lambda backend, device: QuantBackend.TRITON)
    scanned = []
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton", lambda *args, **kwargs: scanned.append(args))
    module = _module(torch.Generator().manual_seed(8))
    logical = {"linear_fc1.weight0": torch.randn(M, K, dtype=torch.bfloat16),
               "linear_fc2.weight2": torch.randn(K, M, dtype=torch.bfloat16),
               "linear_fc1.weight2": torch.randn(M, K, dtype=torch.bfloat16)}
    for entries in (logical, list(logical.items()), iter(list(logical.items()))):  # the column path and entry by entry
        items = entries.items() if isinstance(entries, dict) else entries
        plan = validate.RefitValidator(module, nonfinite="detect").plan(items, finite_on_device=True)
        assert plan.finite_on_device and plan.detects_nonfinite and scanned == []
        assert [batch.flag_entry for batch in plan.batches] == [0, 2]  # fc1's two writes, then fc2's one
        assert plan.device_scan.order == [write for batch in plan.batches for write in batch.writes]
    remove = module.mxfp8_weights()["linear_fc2.weight1"].register_write_hook(lambda *args: None)
    bad = dict(logical, **{"linear_fc2.weight2": logical["linear_fc2.weight2"].clone()})
    bad["linear_fc2.weight2"][3, 4] = float("nan")
    before = _bytes(module.fc1) + _bytes(module.fc2)
    with pytest.raises(RefitError, match="linear_fc2.weight2': source holds 1 NaN .*nothing was written"):
        refit_experts(module, bad, nonfinite="detect")
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(module.fc1) + _bytes(module.fc2)))
    remove()
    with pytest.raises(ValueError, match="nonfinite: expected one of"):
        refit_experts(module, logical, nonfinite="skip")


# -- run under the Triton interpreter (subprocess) -------------------------------------------------------

def _interpreted_scan_flags_exactly_the_bad_sources():
    from megatron_mxfp8_moe.quant.triton import scan_nonfinite_triton

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        sources = [torch.randn(M, K, dtype=dtype) for _ in range(5)]
        sources[1][M - 1, K - 1] = float("nan")  # the last element: the tail of the last scan block
        sources[3][0, 0] = float("-inf")
        sources[4][7, 3] = float("inf")
        flags = torch.zeros(1 + 2 + 5, dtype=torch.int32)
        scan_nonfinite_triton(sources, flags, first_entry=2)
        assert flags.tolist() == [1, 0, 0, 0, 1, 0, 1, 1], (dtype, flags.tolist())
        clean = torch.zeros(1 + 2, dtype=torch.int32)
        scan_nonfinite_triton([torch.randn(M, K, dtype=dtype) * 1e4 for _ in range(2)], clean)
        assert clean.tolist() == [0, 0, 0], (dtype, clean.tolist())


def _interpreted_scan_edges():
    """The scan on raw bits: one source without a table, loops of several blocks (small ``block``), the partial
    last block, the very last element and the last table entry, sources not 4-byte aligned (16-bit words), and
    the largest finite values and subnormals, which are not flagged."""
    from megatron_mxfp8_moe.quant.triton import scan_nonfinite_triton

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        finfo = torch.finfo(dtype)
        shape = (E, 40, K)  # 11520 values: whole blocks and a partial last one, for both knob sets
        numel = E * 40 * K
        # one source (read through its own pointer) with the default knobs; a table with several blocks per program
        for count, knobs in ((1, {}), (3, {"block": 256, "iterations": 3})):
            sources = [torch.randn(shape, dtype=dtype) for _ in range(count)]
            for position, value in ((0, float("-inf")), (numel // 2 + 5, float("inf")), (numel - 1, float("nan"))):
                bad = [source.clone() for source in sources]
                bad[-1].view(-1)[position] = value
                flags = torch.zeros(1 + count, dtype=torch.int32)
                scan_nonfinite_triton(bad, flags, **knobs)
                assert flags.tolist() == [1] + [0] * (count - 1) + [1], (dtype, knobs, count, position, value)
            edge = torch.full(shape, finfo.max, dtype=dtype)
            edge[0, 0, 1], edge[1, 2, 3], edge[2, 3, 4] = -finfo.max, finfo.tiny / 4, -0.0
            flags = torch.zeros(1 + count, dtype=torch.int32)
            scan_nonfinite_triton([edge] * count, flags, **knobs)
            assert flags.tolist() == [0] * (1 + count), (dtype, knobs, flags.tolist())
        storage = torch.randn(2 * M * K + 1, dtype=dtype)
        odd = [storage[1:1 + M * K], storage[1 + M * K:]]  # odd element offsets: 2-byte aligned only
        odd[1][-1] = float("nan")
        for sources, expected in ((odd, [1, 0, 1]), (odd[1:], [1, 1])):
            flags = torch.zeros(len(expected), dtype=torch.int32)
            scan_nonfinite_triton(sources, flags)
            assert flags.tolist() == expected, (dtype, flags.tolist())


def _interpreted_quantize_knobs_and_abort():
    """Both quantize forms, every ``row_tiles`` (rows not a multiple of a program's rows): an abort flag leaves
    every byte as it was; without it the scale bytes equal the reference quantizer's."""
    from megatron_mxfp8_moe.quant.triton import quantize_experts_into_triton, quantize_into_triton

    generator = torch.Generator().manual_seed(4)
    rows = 160  # 5 tiles of 32 rows; the scale layout pads it to 256
    stack = quantize_mxfp8(torch.randn(E, rows, K, generator=generator, dtype=torch.bfloat16), backend="reference")
    sources = [torch.randn(rows, K, generator=generator, dtype=torch.bfloat16) for _ in range(E)]
    for row_tiles in (1, 2, 4):  # (num_warps means nothing to the interpreter)
        before = _bytes(stack)
        quantize_experts_into_triton(sources, [2, 0, 1], stack.data, stack.scale,
                                     abort=torch.ones(1, dtype=torch.int32), row_tiles=row_tiles)
        assert all(torch.equal(a, b) for a, b in zip(before, _bytes(stack))), f"aborted write: {row_tiles}"
        quantize_experts_into_triton(sources, [2, 0, 1], stack.data, stack.scale,
                                     abort=torch.zeros(1, dtype=torch.int32), row_tiles=row_tiles)
        for slot, source in zip((2, 0, 1), sources):
            reference = quantize_mxfp8(source, backend="reference")
            assert torch.equal(stack.scale[slot].view(torch.uint8), reference.scale.view(torch.uint8)), row_tiles
        stack.data.view(torch.uint8).zero_()
        stack.scale.view(torch.uint8).zero_()
    stacked = torch.randn(E, rows, K, generator=generator, dtype=torch.bfloat16)
    before = _bytes(stack)
    quantize_into_triton(stacked, stack.data, stack.scale, abort=torch.ones(1, dtype=torch.int32))
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(stack))), "an aborted stacked write wrote bytes"
    quantize_into_triton(stacked, stack.data, stack.scale, abort=torch.zeros(1, dtype=torch.int32))
    reference = quantize_mxfp8(stacked, backend="reference")
    assert torch.equal(stack.scale.view(torch.uint8), reference.scale.view(torch.uint8))


def _interpreted_abort_flag_predicates_every_store():
    generator = torch.Generator().manual_seed(1)
    stack = quantize_mxfp8(torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16), backend="reference")
    sources = [torch.randn(M, K, generator=generator, dtype=torch.bfloat16) for _ in range(2)]
    before = _bytes(stack)
    stack.quantize_experts_([2, 0], sources, backend="triton", abort_flag=torch.ones(1, dtype=torch.int32))
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(stack))), "an aborted kernel wrote bytes"
    stack.quantize_experts_([2, 0], sources, backend="triton", abort_flag=torch.zeros(1, dtype=torch.int32))
    for slot, source in zip((2, 0), sources):
        reference = quantize_mxfp8(source, backend="reference")
        assert torch.equal(stack.scale[slot].view(torch.uint8), reference.scale.view(torch.uint8))
    assert torch.equal(stack.data[1].view(torch.uint8), before[0][1]), "an expert outside the batch changed"
    assert not torch.equal(stack.data[2].view(torch.uint8), before[0][2])


def _interpreted_refit_checks_on_the_device_and_changes_nothing_on_nan():
    generator = torch.Generator().manual_seed(2)
    module = _module(generator)
    weights = {f"linear_fc1.weight{i}": torch.randn(M, K, generator=generator, dtype=torch.bfloat16) for i in range(E)}
    weights.update({f"linear_fc2.weight{i}": torch.randn(K, M, generator=generator, dtype=torch.float32)
                    for i in range(E)})
    from megatron_mxfp8_moe.refit.validate import RefitValidator, as_entries

    # "auto" is the reference quantizer on a CPU; "triton" runs here because the interpreter accepts CPU tensors

    plan = RefitValidator(module, backend="triton").plan(as_entries(weights), finite_on_device=True)
    assert plan.finite_on_device and len(plan.writes) == 2 * E

    for poisoned in ("linear_fc2.weight1", "linear_fc1.weight2"):
        bad = dict(weights)
        bad[poisoned] = weights[poisoned].clone()
        bad[poisoned][5, 9] = float("inf")
        before = _bytes(module.fc1) + _bytes(module.fc2)
        try:
            refit_experts(module, bad, backend="triton")
        except RefitError as error:
            assert poisoned in str(error) and "nothing was written" in str(error), str(error)
        else:
            raise AssertionError("a refit with an Inf source did not raise")
        after = _bytes(module.fc1) + _bytes(module.fc2)
        assert all(torch.equal(a, b) for a, b in zip(before, after)), f"{poisoned}: bytes changed"

    stacked = {"linear_fc1.weight": torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16)}
    stacked["linear_fc1.weight"][E - 1, M - 1, K - 1] = float("nan")
    before = _bytes(module.fc1) + _bytes(module.fc2)
    try:
        refit_experts(module, stacked, backend="triton")
    except RefitError as error:
        assert "'linear_fc1.weight'" in str(error) and "nothing was written" in str(error), str(error)
    else:
        raise AssertionError("a stacked refit with a NaN source did not raise")
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(module.fc1) + _bytes(module.fc2)))
    stacked["linear_fc1.weight"][E - 1, M - 1, K - 1] = 1.0
    refit_experts(module, stacked, backend="triton")
    reference = quantize_mxfp8(stacked["linear_fc1.weight"], backend="reference")
    assert torch.equal(module.fc1.scale.view(torch.uint8), reference.scale.view(torch.uint8))

    report = refit_experts(module, weights, backend="triton")
    assert report.tensors_updated == 2 * E
    for name, source in weights.items():
        target = module.mxfp8_weights()[name]
        reference = quantize_mxfp8(source, backend="reference")
        assert torch.equal(target.scale.view(torch.uint8), reference.scale.view(torch.uint8)), name


def _interpreted_stream_with_device_scans_is_atomic_per_module():
    """A stream over two hook-free modules, device scans, pipelined by one module (module 0 is written while
    module 1 is validated): a NaN in module 1 leaves module 1 untouched and module 0 written; a NaN in module 0
    wins over a bad name in module 1 and nothing is written."""
    generator = torch.Generator().manual_seed(5)
    model = torch.nn.ModuleDict({"l0": _module(generator), "l1": _module(generator)})
    weights = {f"l{layer}.linear_fc{fc}.weight{i}": torch.randn(*((M, K) if fc == 1 else (K, M)), generator=generator,
                                                                dtype=torch.bfloat16)
               for layer in (0, 1) for fc in (1, 2) for i in range(E)}

    def stack_bytes():
        return [tensor for layer in ("l0", "l1") for stack in (model[layer].fc1, model[layer].fc2)
                for tensor in _bytes(stack)]

    def expect_error(stream_weights, match, applied):
        try:
            refit_experts(model, iter(list(stream_weights.items())), backend="triton")
        except RefitError as error:
            assert match in str(error) and error.applied_modules == applied, (str(error), error.applied_modules)
        else:
            raise AssertionError(f"no RefitError ({match})")

    from megatron_mxfp8_moe.refit.validate import RefitValidator

    on_device = []  # plan.finite_on_device of every plan the stream builds: the device path must be the one tested
    real_plan = RefitValidator.plan

    def plan(self, entries, **kwargs):
        result = real_plan(self, entries, **kwargs)
        on_device.append(result.finite_on_device)
        return result

    RefitValidator.plan = plan
    refit_experts(model, iter(list(weights.items())), backend="triton")
    assert on_device == [True, True], on_device

    bad = dict(weights)
    bad["l1.linear_fc2.weight0"] = weights["l1.linear_fc2.weight0"].clone()
    bad["l1.linear_fc2.weight0"][1, 2] = float("nan")
    before = stack_bytes()
    expect_error(bad, "'l1.linear_fc2.weight0': source holds 1 NaN", ("l0",))
    after = stack_bytes()
    assert all(torch.equal(a, b) for a, b in zip(before[4:], after[4:])), "module l1 changed"
    for name in ("l0.linear_fc1.weight2", "l0.linear_fc2.weight1"):
        reference = quantize_mxfp8(weights[name], backend="reference")
        assert torch.equal(model.l0.mxfp8_weights()[name[3:]].scale.view(torch.uint8),
                           reference.scale.view(torch.uint8)), name

    worse = {name: torch.randn_like(source) for name, source in weights.items()}
    worse["l0.linear_fc1.weight1"][0, 0] = float("inf")
    worse[f"l1.linear_fc1.weight{E}"] = torch.randn(M, K, dtype=torch.bfloat16)  # index out of range
    before = stack_bytes()
    expect_error(worse, "'l0.linear_fc1.weight1': source holds 0 NaN and 1 Inf", ())
    assert all(torch.equal(a, b) for a, b in zip(before, stack_bytes())), "a stack changed"
    RefitValidator.plan = real_plan
    assert on_device == [True, True, True, True, True], on_device  # l0 launched before l1's bad name was seen


def _interpreted_quantize_flags_nonfinite_sources_while_writing():
    """``nonfinite=(flags, first)``: both quantize forms set flags[0] and exactly the bad sources' flags (a NaN in
    the last row tile and column, beside larger finite values, an Inf, a -Inf; 96 rows and K=96, so masked lanes
    and, at 2 row tiles per program, a half-empty program exist) and write every source all the same; clean
    sources (the largest finite bf16 values included) set nothing and write what the plain kernel writes."""
    from megatron_mxfp8_moe.quant.triton import quantize_experts_into_triton, quantize_into_triton

    generator = torch.Generator().manual_seed(6)
    rows = 96
    sources = [torch.randn(rows, K, generator=generator, dtype=torch.bfloat16) for _ in range(4)]
    sources[1][rows - 1, K - 32:] = 1e4  # a NaN-dropping maximum would see 1e4 and pass the block
    sources[1][rows - 1, K - 1] = float("nan")
    sources[3][0, 0] = float("-inf")
    sources[3][77, 40] = float("inf")
    for row_tiles in (1, 2):
        stack = quantize_mxfp8(torch.zeros(4, rows, K), backend="reference")
        flags = torch.zeros(1 + 2 + 4, dtype=torch.int32)
        quantize_experts_into_triton(sources, [3, 2, 1, 0], stack.data, stack.scale, nonfinite=(flags, 2),
                                     row_tiles=row_tiles)
        assert flags.tolist() == [1, 0, 0, 0, 1, 0, 1], (row_tiles, flags.tolist())
        for slot, source in ((3, sources[0]), (1, sources[2])):  # the clean ones: the plain kernel's bytes
            plain = quantize_mxfp8(torch.zeros(rows, K), backend="reference")
            quantize_into_triton(source, plain.data, plain.scale)
            assert torch.equal(stack.scale[slot].view(torch.uint8), plain.scale.view(torch.uint8)), slot
            assert torch.equal(stack.data[slot].view(torch.uint8), plain.data.view(torch.uint8)), slot
        assert stack.data[2].view(torch.uint8).any(), "a flagged source was not written"
    clean = torch.full((2, rows, K), torch.finfo(torch.bfloat16).max, dtype=torch.bfloat16)
    clean[1] = torch.randn(rows, K, generator=generator)
    stack = quantize_mxfp8(torch.zeros(2, rows, K), backend="reference")
    flags = torch.zeros(3, dtype=torch.int32)
    quantize_into_triton(clean, stack.data, stack.scale, nonfinite=(flags, 1))
    assert flags.tolist() == [0, 0, 0], flags.tolist()
    clean[1, 70, 95] = float("nan")  # an expert other than the first of a stacked source: the one entry's flag
    quantize_into_triton(clean, stack.data, stack.scale, nonfinite=(flags, 1))
    assert flags.tolist() == [1, 0, 1], flags.tolist()


def _refit_error_message(*args, **kwargs) -> str:
    """The message of the RefitError that ``refit_experts(*args, **kwargs)`` raises (AssertionError if none)."""
    try:
        refit_experts(*args, **kwargs)
    except RefitError as error:
        return str(error)
    raise AssertionError(f"refit_experts did not raise ({kwargs})")


def _interpreted_refit_detect_writes_then_reports():
    """``refit_experts(nonfinite="detect")``: no scan runs; a clean batch writes what "reject" writes; a NaN / Inf
    source raises after its batch was written (mapping, stacked, stream: the bad module is written and listed as
    applied, the modules after it are untouched); other bad input still changes nothing."""
    import megatron_mxfp8_moe.quant.triton as triton_quant

    generator = torch.Generator().manual_seed(7)
    weights = {f"linear_fc1.weight{i}": torch.randn(M, K, generator=generator, dtype=torch.bfloat16) for i in range(E)}
    weights.update({f"linear_fc2.weight{i}": torch.randn(K, M, generator=generator, dtype=torch.bfloat16)
                    for i in range(E)})
    rejected, detected = _module(generator), _module(generator)
    refit_experts(rejected, weights, backend="triton")
    real_scan, scans = triton_quant.scan_nonfinite_triton, []
    triton_quant.scan_nonfinite_triton = lambda *args, **kwargs: scans.append(args) or real_scan(*args, **kwargs)
    try:
        report = refit_experts(detected, weights, backend="triton", nonfinite="detect")
    finally:
        triton_quant.scan_nonfinite_triton = real_scan
    assert scans == [] and report.tensors_updated == 2 * E
    assert all(torch.equal(a, b) for a, b in zip(_bytes(rejected.fc1) + _bytes(rejected.fc2),
                                                 _bytes(detected.fc1) + _bytes(detected.fc2)))

    bad = dict(weights)
    bad["linear_fc2.weight1"] = weights["linear_fc2.weight1"].clone()
    bad["linear_fc2.weight1"][5, 9] = float("nan")
    bad["linear_fc1.weight0"] = torch.randn(M, K, generator=generator, dtype=torch.bfloat16)  # a clean new value
    try:
        refit_experts(detected, bad, backend="triton", nonfinite="detect")
    except RefitError as error:
        assert "'linear_fc2.weight1': source holds 1 NaN" in str(error) and "WAS written" in str(error), str(error)
        assert error.applied_modules == ("",), error.applied_modules
    else:
        raise AssertionError("a detect refit with a NaN source did not raise")
    reference = quantize_mxfp8(bad["linear_fc1.weight0"], backend="reference")
    assert torch.equal(detected.fc1.scale[0].view(torch.uint8), reference.scale.view(torch.uint8)), "not written"

    stacked = {"linear_fc1.weight": torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16)}
    stacked["linear_fc1.weight"][E - 1, M - 1, K - 1] = float("inf")
    message = _refit_error_message(detected, stacked, backend="triton", nonfinite="detect")
    assert "'linear_fc1.weight': source holds 0 NaN and 1 Inf" in message, message

    before = _bytes(detected.fc1) + _bytes(detected.fc2)
    wrong = dict(weights, **{"linear_fc2.weight2": torch.randn(K + 1, M, dtype=torch.bfloat16)})
    wrong["linear_fc1.weight1"] = torch.full((M, K), float("nan"), dtype=torch.bfloat16)
    message = _refit_error_message(detected, wrong, backend="triton", nonfinite="detect")
    assert "linear_fc2.weight2" in message, message
    assert all(torch.equal(a, b) for a, b in zip(before, _bytes(detected.fc1) + _bytes(detected.fc2)))

    model = torch.nn.ModuleDict({"l0": _module(generator), "l1": _module(generator), "l2": _module(generator)})
    stream = [(f"l{layer}.{name}", source) for layer in range(3) for name, source in weights.items()]
    stream[len(weights) + 1] = (stream[len(weights) + 1][0], torch.full((M, K), float("nan"), dtype=torch.bfloat16))
    untouched = _bytes(model.l2.fc1) + _bytes(model.l2.fc2)
    try:
        refit_experts(model, iter(stream), backend="triton", nonfinite="detect")
    except RefitError as error:
        assert f"'l1.linear_fc1.weight1': source holds {M * K} NaN" in str(error), str(error)
        assert error.applied_modules == ("l0", "l1"), error.applied_modules
    else:
        raise AssertionError("a detect stream with a NaN source did not raise")
    assert all(torch.equal(a, b) for a, b in zip(untouched, _bytes(model.l2.fc1) + _bytes(model.l2.fc2)))


def _interpreted_validated_quantize_with_mixed_dtypes():
    """``quantize_experts_(validated=True)`` with bf16 and fp32 sources for one stack writes what quantizing each
    source alone writes (one Triton launch reads every source as the first one's dtype, so mixed dtypes must not
    take it: session 9 review)."""
    generator = torch.Generator().manual_seed(5)
    sources = [torch.randn(M, K, generator=generator).bfloat16(), torch.randn(M, K, generator=generator)]
    alone = [quantize_mxfp8(source, backend="triton") for source in sources]
    stack = quantize_mxfp8(torch.zeros(E, M, K), backend="reference")
    stack.quantize_experts_([0, 1], sources, backend="triton", finite_checked=True, validated=True)
    for index in (0, 1):
        assert torch.equal(stack.data[index].view(torch.uint8), alone[index].data.view(torch.uint8)), index


def test_device_check_kernels_under_the_triton_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in ("scan", "scan edges", "quantize knobs", "abort", "refit", "stream", "validated mixed dtypes",
                 "detect flags", "detect refit"):
        assert f"ok {name}" in result.stdout, result.stdout


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_device_check_kernels_under_the_triton_interpreter"
    _interpreted_scan_flags_exactly_the_bad_sources()
    print("ok scan")
    _interpreted_scan_edges()
    print("ok scan edges")
    _interpreted_quantize_knobs_and_abort()
    print("ok quantize knobs")
    _interpreted_abort_flag_predicates_every_store()
    print("ok abort")
    _interpreted_refit_checks_on_the_device_and_changes_nothing_on_nan()
    print("ok refit")
    _interpreted_stream_with_device_scans_is_atomic_per_module()
    print("ok stream")
    _interpreted_validated_quantize_with_mixed_dtypes()
    print("ok validated mixed dtypes")
    _interpreted_quantize_flags_nonfinite_sources_while_writing()
    print("ok detect flags")
    _interpreted_refit_detect_writes_then_reports()
    print("ok detect refit")


def test_scan_ahead_launches_chunks_and_maps_flags_back_to_entries(monkeypatch):
    """DeviceScan: a launch per CHUNK sources of one key while entries arrive, the rest at finish(); flag k+1 is
    order[k]; first_bad() returns the bad write that comes first in entry order, whatever the launch order."""
    import megatron_mxfp8_moe.quant.triton as triton_quant
    from megatron_mxfp8_moe.refit.device_check import CHUNK, DeviceScan

    launches = []
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton",
                        lambda sources, flags, first_entry=0, **knobs: launches.append((len(sources), first_entry)))
    entries = [f"w{i}" for i in range(2 * CHUNK + 20)]
    scan = DeviceScan(len(entries), torch.device("cpu"))
    source = torch.zeros(2)
    for position, write in enumerate(entries):
        scan.add("fc1" if position % 2 else "fc2", write, source)  # two stacks, interleaved
        if position == 2 * CHUNK - 2:
            assert launches == [(CHUNK, 0)]  # fc2 (even entries) filled its first chunk, launched at once
        if position == 2 * CHUNK - 1:
            assert launches == [(CHUNK, 0), (CHUNK, CHUNK)]  # then fc1
    assert scan.finish() is scan.flags and scan.valid
    assert sum(count for count, _ in launches) == len(entries) and [first for _, first in launches] == [0, 64, 128, 138]
    assert sorted(scan.order) == sorted(entries)
    late, early = entries[-1], entries[3]  # mark two writes bad: the one earlier in entry order must win
    for write in (late, early):
        scan.flags[0] = 1
        scan.flags[1 + scan.order.index(write)] = 1
    assert scan.first_bad(entries) == early
    assert DeviceScan(2, torch.device("cpu")).first_bad(entries) is None  # no flag: nothing bad

    other = DeviceScan(4, torch.device("cpu"))
    other.add("k", "a", torch.zeros(2, device="meta"))  # a source on another device: the host check takes over
    assert not other.valid and other.finish() is None


def test_a_large_source_is_scanned_at_once_and_idle_flags_are_reused(monkeypatch):
    """A source of EAGER_NUMEL elements or more (a stacked [E, M, K] one) launches its scan when it is added, not
    at finish(); a flags buffer comes back for reuse (still zero) only when the host sync found nothing."""
    import megatron_mxfp8_moe.quant.triton as triton_quant
    from megatron_mxfp8_moe.refit import device_check

    launches = []
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton",
                        lambda sources, flags, first_entry=0, **knobs: launches.append((len(sources), first_entry)))
    monkeypatch.setattr(device_check, "EAGER_NUMEL", 8)
    monkeypatch.setattr(device_check, "_IDLE_FLAGS", {})
    cpu = torch.device("cpu")
    scan = device_check.DeviceScan(3, cpu)
    scan.add("small", "a", torch.zeros(4))
    assert launches == []
    scan.add("stack", "b", torch.zeros(2, 4))  # 8 elements: launched at once
    assert launches == [(1, 0)] and scan.order == ["b"]
    assert scan.finish() is scan.flags and launches == [(1, 0), (1, 1)] and scan.order == ["b", "a"]
    buffer = scan.flags
    assert scan.first_bad(["a", "b"]) is None  # nothing flagged: the buffer is idle again
    again = device_check.DeviceScan(5, cpu)
    assert again.flags.data_ptr() == buffer.data_ptr() and again.flags.shape == (6,) and not again.flags.any()
    again.add("small", "x", torch.zeros(4))
    again.finish()
    again.flags[0] = again.flags[1] = 1  # a bad source: this buffer is not reused
    assert again.first_bad(["x"]) == "x"
    fresh = device_check.DeviceScan(2, cpu)
    assert fresh.flags.data_ptr() != buffer.data_ptr() and not fresh.flags.any()
