"""The source addresses a refit plan reads (``WriteBatch.addresses``) reach the one-launch triton quantizer.

On this CPU the quantizer is replaced by a recorder that checks what it is given and writes with the reference
quantizer (so the refit's bytes can be compared); ``"auto"`` resolves to the triton quantizer as on CUDA, and the
NaN/Inf scan launches are recorded instead of run (the ``scans`` fixture).
"""

import pathlib

import pytest
import torch

from megatron_mxfp8_moe import quantize_mxfp8, refit_experts
from megatron_mxfp8_moe import tensor as tensor_module
from megatron_mxfp8_moe.quant import triton as triton_quant
from megatron_mxfp8_moe.quant.backends import QuantBackend, quantize_into
from megatron_mxfp8_moe.refit import validate
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E, M, K = 4, 64, 96


@pytest.fixture
def launches(monkeypatch):
    """``quantize_experts_`` takes the triton one-launch path on the CPU; each launch is recorded as
    ``(sources, experts, pointers)`` and written with the reference quantizer."""
    real_resolve = tensor_module.resolve_quant_backend

    def resolve(backend, device):
        return QuantBackend.TRITON if backend == "auto" else real_resolve(backend, device)

    monkeypatch.setattr(tensor_module, "resolve_quant_backend", resolve)
    recorded = []

    def quantize_experts_into_triton(sources, experts, data, scale, *, abort=None, pointers=None, **knobs):
        recorded.append((list(sources), list(experts), None if pointers is None else list(pointers)))
        for slot, source in zip(experts, sources):
            quantize_into(source, data[slot], scale[slot], QuantBackend.REFERENCE)

    monkeypatch.setattr(triton_quant, "quantize_experts_into_triton", quantize_experts_into_triton)
    return recorded


def _module(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    fc1 = torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16)
    fc2 = torch.randn(E, K, M, generator=generator, dtype=torch.bfloat16)
    return fake.BareStacks(quantize_mxfp8(fc1, backend="reference"), quantize_mxfp8(fc2, backend="reference"))


def _weights(experts=(2, 0, 3), seed: int = 1) -> dict:
    """Per-expert bf16 sources of fc1 and fc2, experts out of order; fc2's expert 0 is not contiguous."""
    generator = torch.Generator().manual_seed(seed)
    weights = {f"linear_fc1.weight{i}": torch.randn(M, K, generator=generator, dtype=torch.bfloat16) for i in experts}
    weights.update({f"linear_fc2.weight{i}": torch.randn(K, M, generator=generator, dtype=torch.bfloat16)
                    for i in experts})
    weights["linear_fc2.weight0"] = torch.randn(M, K, generator=generator, dtype=torch.bfloat16).t()
    return weights


def _check_refit(module, weights, launches, *, forwarded: bool) -> None:
    """One launch per linear, of its entries in entry order; its pointers are its sources' data_ptr()s (None
    where the plan did not read them); every written weight equals the reference quantizer's."""
    assert [experts for _, experts, _ in launches] == [[2, 0, 3], [2, 0, 3]]
    for linear, (sources, experts, pointers) in zip(("fc1", "fc2"), launches):
        given = [weights[f"linear_{linear}.weight{i}"] for i in experts]
        for source, original in zip(sources, given):
            assert source is original if original.is_contiguous() else torch.equal(source, original)
        assert pointers == ([source.data_ptr() for source in sources] if forwarded else None)
    for name, source in weights.items():
        target, reference = module.mxfp8_weights()[name], quantize_mxfp8(source.contiguous(), backend="reference")
        assert torch.equal(target.data.view(torch.uint8), reference.data.view(torch.uint8)), name
        assert torch.equal(target.scale.view(torch.uint8), reference.scale.view(torch.uint8)), name


@pytest.mark.parametrize("form", ["mapping", "stream"])
def test_refit_forwards_the_planned_source_addresses(scans, launches, form):
    module, weights = _module(), _weights()
    plans = []
    real_plan = validate.RefitValidator.plan

    def plan(self, entries, **kwargs):
        plans.append(real_plan(self, entries, **kwargs))
        return plans[-1]

    validate.RefitValidator.plan = plan
    try:
        refit_experts(module, weights if form == "mapping" else iter(list(weights.items())))
    finally:
        validate.RefitValidator.plan = real_plan
    assert [p.finite_on_device for p in plans] == [True]  # the device-check path (abort flag) was the one taken
    assert all(batch.addresses is not None for batch in plans[0].batches)
    _check_refit(module, weights, launches, forwarded=True)


def test_a_plan_without_addresses_lets_the_quantizer_read_them(scans, launches, monkeypatch):
    """Entry by entry (no one-piece plan) the batches have no addresses: None is passed on."""
    monkeypatch.setattr(validate, "_columns", lambda entries: None)
    module, weights = _module(), _weights()
    refit_experts(module, weights)
    _check_refit(module, weights, launches, forwarded=False)


def test_released_stacks_get_the_addresses_too(launches, monkeypatch):
    """Write hooks and released canonical stacks: no device check, writes into a scratch stack that the hooks read;
    the same sources, so the same addresses."""
    monkeypatch.setattr(validate, "resolve_quant_backend", lambda backend, device: QuantBackend.TRITON)
    model = fake.FakeModel(layers=1)
    layer = model.experts(0)
    for stack in layer.stacks.values():
        stack.release_storage_()  # and its views
        assert stack.is_released
    sources = fake.new_sources(layers=(0,), experts=(3, 1))
    refit_experts(model, sources)
    assert len(launches) == 2
    for sources_given, slots, pointers in launches:
        assert slots == [0, 1]  # a scratch stack of the two experts
        assert pointers == [source.data_ptr() for source in sources_given]
    monkeypatch.undo()  # "auto" is the reference quantizer on the CPU again
    fresh = fake.FakeModel(layers=1)
    refit_experts(fresh, sources)
    assert len(launches) == 2
    assert all(torch.equal(a, b) for linear in ("fc1", "fc2")
               for a, b in zip(layer.derived[linear], fresh.experts(0).derived[linear]))


def test_source_pointers_are_ignored_unless_validated(launches):
    generator = torch.Generator().manual_seed(2)
    stack = quantize_mxfp8(torch.randn(E, M, K, generator=generator, dtype=torch.bfloat16), backend="reference")
    sources = [torch.randn(M, K, generator=generator, dtype=torch.bfloat16) for _ in range(2)]
    wrong = [16, 32]  # not the sources' addresses
    stack.quantize_experts_([2, 0], sources, finite_checked=True, source_pointers=wrong)
    assert launches[-1][2] is None  # the quantizer reads the addresses itself
    stack.quantize_experts_([2, 0], sources, finite_checked=True, validated=True, source_pointers=wrong)
    assert launches[-1][2] == wrong  # honoured: the caller vouches for them
    stack.quantize_experts_([2, 0], sources, finite_checked=True, validated=True)
    assert launches[-1][2] is None


def test_the_table_quantizer_launches_with_the_given_pointers(monkeypatch):
    """``quantize_experts_into_triton`` builds the kernel's address table (and its alignment flag) from
    ``pointers`` when given, from the sources otherwise, and rejects a list of another length; the expert slots
    travel in the same table (one host-to-device copy)."""
    pytest.importorskip("triton")
    from megatron_mxfp8_moe.quant import _triton_quant_kernel

    calls = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **meta: calls.append((grid, args, meta))

    monkeypatch.setattr(triton_quant, "triton_quantizer_support", lambda device: (True, ""))
    monkeypatch.setattr(_triton_quant_kernel, "mxfp8_quantize_swizzle_kernel", Kernel())
    stack = quantize_mxfp8(torch.zeros(E, M, K), backend="reference")
    sources = [torch.zeros(M, K, dtype=torch.bfloat16) for _ in range(3)]
    triton_quant.quantize_experts_into_triton(sources, [1, 3, 0], stack.data, stack.scale)
    (grid, args, meta), = calls
    assert grid[2] == 3 and args[1].tolist() == [source.data_ptr() for source in sources] and meta["ALIGNED"]
    assert args[2].tolist() == [1, 3, 0] and args[2].dtype == torch.int64
    assert args[2].untyped_storage().data_ptr() == args[1].untyped_storage().data_ptr()  # one table
    given = [4096, 8192 + 8, 12288]  # one 8-byte aligned address: the kernel may not vectorize
    triton_quant.quantize_experts_into_triton(sources, [1, 3, 0], stack.data, stack.scale, pointers=given)
    assert calls[-1][1][1].tolist() == given and not calls[-1][2]["ALIGNED"]
    with pytest.raises(ValueError, match="2 pointers for 3 sources"):
        triton_quant.quantize_experts_into_triton(sources, [1, 3, 0], stack.data, stack.scale, pointers=given[:2])
    assert len(calls) == 2
