"""Refit under CUDA graphs: a graph captured BEFORE refit_experts, replayed after it, computes with the new
weights, bit-exactly like a freshly built layer, and no storage address moves. Needs a CUDA GPU."""

import dataclasses
import pathlib

import pytest
import torch

from megatron_mxfp8_moe.format.constants import BLOCK_SIZE
from megatron_mxfp8_moe.format.swizzle import swizzle_offset
from megatron_mxfp8_moe.refit import refit_experts
from megatron_mxfp8_moe.testing import capture_cuda_graph, load_file_module, random_weights, spy_nonfinite_scans

pytestmark = pytest.mark.gpu


fake = load_file_module(pathlib.Path(__file__).parents[1] / "unit" / "refit" / "_fake_experts.py",
                        "refit_fake_experts")


def _pointers(value, seen=None) -> list[int]:
    """Every storage address reachable from ``value`` (tensors, MXFP8 data/scale, dataclasses, containers)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value.data_ptr()]
    if isinstance(value, (list, tuple)):
        return [p for item in value for p in _pointers(item, seen)]
    if isinstance(value, dict):
        return [p for item in value.values() for p in _pointers(item, seen)]
    if getattr(value, "is_released", False):  # a released canonical weight holds no storage
        return []
    if dataclasses.is_dataclass(value):
        return [p for field in dataclasses.fields(value) for p in _pointers(getattr(value, field.name, None), seen)]
    out = []
    for attribute in ("data", "scale"):
        inner = getattr(value, attribute, None)
        if isinstance(inner, torch.Tensor):
            out.append(inner.data_ptr())
    return out


# -- the real layer ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("backend", "nonfinite"), [("reference", "reject"), ("auto", "reject"), ("auto", "detect")])
def test_graph_captured_before_refit_replays_new_weights_of_the_real_layer(backend, nonfinite):
    layer_module = pytest.importorskip("megatron_mxfp8_moe.layer", reason="needs megatron_mxfp8_moe/layer.py")
    experts_module = pytest.importorskip("megatron_mxfp8_moe.experts", reason="needs megatron_mxfp8_moe/experts.py")
    device = torch.device("cuda")
    experts, hidden, ffn, offset, rows, topk = 8, 256, 128, 8, 64, 2
    generator = torch.Generator().manual_seed(7)

    def logical():
        return (random_weights((experts, 2 * ffn, hidden), device=device, generator=generator),
                random_weights((experts, hidden, ffn), device=device, generator=generator))

    def make_layer(fc1, fc2):
        expert_set = experts_module.ExpertSet.from_bf16(fc1, fc2, "swiglu", backend="reference")
        layer = layer_module.MXFP8ExpertLayer(expert_set, backend=backend, local_expert_offset=offset,
                                              num_global_experts=2 * experts)
        layer.build_()
        return layer

    layer = make_layer(*logical())
    x = torch.randn(rows, hidden, generator=generator).to(device=device, dtype=torch.bfloat16)
    probs = torch.rand(rows, topk, generator=generator).to(device)
    routing_map = torch.randint(0, 2 * experts, (rows, topk), generator=generator).to(device)  # half remote
    out = torch.full((rows, hidden), float("nan"), device=device)
    graph = capture_cuda_graph(lambda: layer.forward_routed(x, probs, routing_map, out=out))
    pointers = _pointers([layer.expert_set.fc1, layer.expert_set.fc2, layer.stack_state.fc1, layer.stack_state.fc2])
    graph.replay()
    torch.cuda.synchronize()
    before = out.clone()

    new_fc1, new_fc2 = logical()
    sources = {f"linear_fc1.weight{i}": new_fc1[i] for i in range(experts)}
    sources.update({f"linear_fc2.weight{i}": new_fc2[i] for i in range(experts)})
    report = refit_experts(layer, sources, nonfinite=nonfinite)
    assert report.tensors_updated == 2 * experts
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()

    fresh = make_layer(new_fc1, new_fc2)
    expected = fresh.forward_routed(x, probs, routing_map, out=torch.full_like(out, float("nan")))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    assert not torch.equal(out, before)
    assert torch.equal(out, expected)
    assert _pointers([layer.expert_set.fc1, layer.expert_set.fc2, layer.stack_state.fc1, layer.stack_state.fc2]) == pointers
    # One copy on the GPU: a repacked stack replaces the released canonical bytes, or the stack IS them.
    assert layer.expert_set.is_released == (backend != "reference" and not layer.stack_state.shares_canonical)
    for mine, theirs in ((layer.stack_state.fc1, fresh.stack_state.fc1), (layer.stack_state.fc2, fresh.stack_state.fc2)):
        mine_tensors, their_tensors = _tensors(mine), _tensors(theirs)
        assert mine_tensors and len(mine_tensors) == len(their_tensors)
        for a, b in zip(mine_tensors, their_tensors):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _tensors(value) -> list[torch.Tensor]:
    """The tensors of a backend stack (a tensor, an MXFP8Tensor or a dataclass of tensors), in field order."""
    if isinstance(value, torch.Tensor):
        return [value.contiguous()]
    if dataclasses.is_dataclass(value):
        return [t for field in dataclasses.fields(value) for t in _tensors(getattr(value, field.name, None))]
    return []


# -- the fake experts module + a graph-captured matmul over its DERIVED copy ------------------------------

def _unswizzle_index(rows: int, cols: int, device) -> torch.Tensor:
    """int64 ``[M * C]``: swizzled byte offset of logical scale (row, col), row-major."""
    row = torch.arange(rows).repeat_interleave(cols)
    col = torch.arange(cols).repeat(rows)
    return swizzle_offset(row, col, cols).to(device)


def _derived_matmul(experts, x: torch.Tensor, out: dict, index: dict):
    """``out[linear] = x_linear @ W_e^T`` per expert, W dequantized from the derived copy (graph-capturable)."""
    for linear, (rows, cols) in fake.SHAPES.items():
        derived_data, derived_scale = experts.derived[linear]  # uint8 [E, K, M], uint8 [E, Mp*Cp]
        scale = derived_scale[:, index[linear]].view(-1, rows, cols // BLOCK_SIZE)  # [E, M, K/32]
        multiplier = torch.exp2(scale.to(torch.float32) - 127.0).repeat_interleave(BLOCK_SIZE, dim=-1)  # [E, M, K]
        weight = derived_data.view(torch.float8_e4m3fn).to(torch.float32).transpose(1, 2) * multiplier
        out[linear].copy_(torch.matmul(x[linear], weight.transpose(1, 2)))  # [E, T, M]


def test_graph_captured_before_refit_replays_new_weights_of_the_fake_module():
    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(11)
    old = fake.random_logical(generator=generator, device=device)
    new = fake.random_logical(generator=generator, device=device)
    experts = fake.FakeExperts(*old, local_expert_offset=0)
    fresh = fake.FakeExperts(*new, local_expert_offset=0)
    index = {linear: _unswizzle_index(rows, cols // BLOCK_SIZE, device) for linear, (rows, cols) in fake.SHAPES.items()}
    x = {linear: torch.randn(fake.EXPERTS, 16, cols, generator=generator).to(device) for linear, (_, cols) in fake.SHAPES.items()}

    def outputs():
        return {linear: torch.full((fake.EXPERTS, 16, rows), float("nan"), device=device)
                for linear, (rows, _) in fake.SHAPES.items()}

    out, fresh_out = outputs(), outputs()
    graph = capture_cuda_graph(lambda: _derived_matmul(experts, x, out, index))
    fresh_graph = capture_cuda_graph(lambda: _derived_matmul(fresh, x, fresh_out, index))
    pointers = experts.data_ptrs()
    graph.replay()
    torch.cuda.synchronize()
    before = {linear: tensor.clone() for linear, tensor in out.items()}

    sources = {}
    for linear, stack in zip(("fc1", "fc2"), new):
        sources.update({f"linear_{linear}.weight{i}": stack[i] for i in range(fake.EXPERTS)})
    refit_experts(experts, sources)  # backend "auto": the Triton quantizer on CUDA, the reference one built `fresh`
    graph.replay()
    fresh_graph.replay()
    torch.cuda.synchronize()
    assert experts.data_ptrs() == pointers
    assert fake.same(experts.stack_bytes(), fresh.stack_bytes())
    for linear in out:
        assert torch.isfinite(out[linear]).all()
        assert not torch.equal(out[linear], before[linear])
        assert torch.equal(out[linear], fresh_out[linear])


# -- the fast path: NaN/Inf checked on the device, writes predicated on it --------------------------------

EXPERTS, ROWS, COLS = 8, 384, 512  # the fake module's stacks: fc1 [E, ROWS, COLS], fc2 [E, COLS, ROWS]


def _spied_bare_stacks(monkeypatch, seed: int):
    """(scans, module, generator): hook-free fake stacks on the GPU from random fp32 weights, and the list that
    records the source count of every ``scan_nonfinite_triton`` launch from now on."""
    from megatron_mxfp8_moe import quantize_mxfp8

    scans = spy_nonfinite_scans(monkeypatch)
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(seed)
    module = fake.BareStacks(quantize_mxfp8(torch.randn(EXPERTS, ROWS, COLS, device=device, generator=generator)),
                             quantize_mxfp8(torch.randn(EXPERTS, COLS, ROWS, device=device, generator=generator)))
    return scans, module, generator


def test_device_checked_refit_equals_fresh_quantization_and_rejects_nan_without_writing(monkeypatch):
    """Hook-free stacks (like the Triton backend's): the refit scans on the device (spied), its bytes equal a
    fresh reference quantization, and a NaN or Inf source anywhere leaves every byte as it was."""
    from megatron_mxfp8_moe import RefitError, quantize_mxfp8

    scans, module, generator = _spied_bare_stacks(monkeypatch, 5)
    stacks, device = [module.fc1, module.fc2], torch.device("cuda")
    experts, rows, cols = EXPERTS, ROWS, COLS
    pointers = [t.data_ptr() for stack in stacks for t in (stack.data, stack.scale)]
    weights = {f"linear_fc1.weight{i}": torch.randn(rows, cols, device=device, generator=generator, dtype=torch.bfloat16)
               for i in range(experts)}
    weights.update({f"linear_fc2.weight{i}": torch.randn(cols, rows, device=device, generator=generator) * 3
                    for i in range(0, experts, 2)})  # fp32 sources, half the experts: a partial refit

    for poisoned, value in (("linear_fc2.weight6", float("nan")), ("linear_fc1.weight0", float("-inf"))):
        bad = dict(weights)
        bad[poisoned] = weights[poisoned].clone()
        bad[poisoned][rows // 2, 17] = value
        before = module.stack_bytes()
        with pytest.raises(RefitError, match=poisoned + ".*nothing was written"):
            refit_experts(module, bad)
        assert all(torch.equal(a, b) for a, b in zip(before, module.stack_bytes()))
    scans.clear()
    before = module.stack_bytes()
    report = refit_experts(module, weights)
    assert sorted(scans) == [4, 8] and report.tensors_updated == 12  # one scan per (dtype, size) group
    for name, source in weights.items():
        mine = module.mxfp8_weights()[name]
        reference = quantize_mxfp8(source, backend="reference")
        assert torch.equal(mine.data.view(torch.uint8), reference.data.view(torch.uint8)), name
        assert torch.equal(mine.scale.view(torch.uint8), reference.scale.view(torch.uint8)), name
    after = module.stack_bytes()  # [fc1 data, fc1 scale, fc2 data, fc2 scale]
    assert torch.equal(after[2][1], before[2][1]) and torch.equal(after[3][1], before[3][1])  # fc2 expert 1: not given
    assert [t.data_ptr() for stack in stacks for t in (stack.data, stack.scale)] == pointers


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("stacked", [False, True])
def test_detect_refit_writes_in_one_pass_and_reports_nan_after_writing(monkeypatch, stacked, value):
    """nonfinite="detect" on hook-free stacks: no scan runs (spied), the bytes equal a fresh reference
    quantization; a NaN / Inf source raises after its batch was written, naming it (the other entries of the
    batch hold their new bytes)."""
    from megatron_mxfp8_moe import RefitError, quantize_mxfp8

    scans, module, generator = _spied_bare_stacks(monkeypatch, 9)
    stacks, device = [module.fc1, module.fc2], torch.device("cuda")
    experts, rows, cols = EXPERTS, ROWS, COLS
    pointers = [t.data_ptr() for stack in stacks for t in (stack.data, stack.scale)]
    fc1 = torch.randn(experts, rows, cols, device=device, generator=generator, dtype=torch.bfloat16)
    fc2 = torch.randn(experts, cols, rows, device=device, generator=generator, dtype=torch.bfloat16)
    if stacked:
        weights = {"linear_fc1.weight": fc1, "linear_fc2.weight": fc2}
    else:
        weights = {f"linear_fc{fc}.weight{i}": (fc1, fc2)[fc - 1][i] for fc in (1, 2) for i in range(experts)}
    report = refit_experts(module, weights, nonfinite="detect")
    assert scans == [] and report.tensors_updated == 2 * experts
    for stack, source in ((module.fc1, fc1), (module.fc2, fc2)):
        reference = quantize_mxfp8(source, backend="reference")
        assert torch.equal(stack.data.view(torch.uint8), reference.data.view(torch.uint8))
        assert torch.equal(stack.scale.view(torch.uint8), reference.scale.view(torch.uint8))
    new_fc1 = fc1 * 2  # new clean values for fc1; fc2's last expert gets a NaN / Inf beside larger finite values
    bad_fc2 = fc2.clone()
    bad_fc2[experts - 1, cols - 1, rows - 32:] = 1e4
    bad_fc2[experts - 1, cols - 1, rows - 1] = value
    if stacked:
        bad, name = {"linear_fc1.weight": new_fc1, "linear_fc2.weight": bad_fc2}, "linear_fc2.weight"
    else:
        bad = {f"linear_fc{fc}.weight{i}": (new_fc1, bad_fc2)[fc - 1][i] for fc in (1, 2) for i in range(experts)}
        name = f"linear_fc2.weight{experts - 1}"
    counts = "1 NaN and 0 Inf" if value != value else "0 NaN and 1 Inf"
    with pytest.raises(RefitError, match=f"'{name}': source holds {counts}.*WAS written"):
        refit_experts(module, bad, nonfinite="detect")
    reference = quantize_mxfp8(new_fc1, backend="reference")
    assert torch.equal(module.fc1.data.view(torch.uint8), reference.data.view(torch.uint8))
    assert scans == [] and [t.data_ptr() for stack in stacks for t in (stack.data, stack.scale)] == pointers


def test_device_checked_refit_of_whole_stacks(monkeypatch):
    """``linear_fc1.weight`` = all experts [E, M, K] in one entry: each stack scanned once on the device (spied);
    the bytes equal a fresh reference quantization, and a NaN anywhere leaves every byte as it was."""
    from megatron_mxfp8_moe import RefitError, quantize_mxfp8

    scans = spy_nonfinite_scans(monkeypatch)

    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(6)
    experts, rows, cols = 8, 384, 512
    module = fake.BareStacks(quantize_mxfp8(torch.randn(experts, rows, cols, device=device, generator=generator)),
                             quantize_mxfp8(torch.randn(experts, cols, rows, device=device, generator=generator)))
    weights = {"linear_fc1.weight": torch.randn(experts, rows, cols, device=device, generator=generator,
                                                dtype=torch.bfloat16),
               "linear_fc2.weight": torch.randn(experts, cols, rows, device=device, generator=generator,
                                                dtype=torch.bfloat16)}
    bad = dict(weights, **{"linear_fc2.weight": weights["linear_fc2.weight"].clone()})
    bad["linear_fc2.weight"][experts - 1, cols - 1, rows - 1] = float("inf")
    before = module.stack_bytes()
    with pytest.raises(RefitError, match="'linear_fc2.weight'.*nothing was written"):
        refit_experts(module, bad)
    assert all(torch.equal(a, b) for a, b in zip(before, module.stack_bytes()))
    scans.clear()
    report = refit_experts(module, weights)
    assert sum(scans) == 2  # the device check ran: each of the two stacked sources scanned once
    assert report.tensors_updated == 2 * experts and report.experts_updated == experts
    for stack, name in ((module.fc1, "linear_fc1.weight"), (module.fc2, "linear_fc2.weight")):
        reference = quantize_mxfp8(weights[name], backend="reference")
        assert torch.equal(stack.data.view(torch.uint8), reference.data.view(torch.uint8)), name
        assert torch.equal(stack.scale.view(torch.uint8), reference.scale.view(torch.uint8)), name

