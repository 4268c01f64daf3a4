"""refit/validate.py: the whole batch is checked first, the bad entry is named, and nothing is written."""

import pathlib
import re

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe import MXFP8Tensor, RefitError, quantize_mxfp8
from megatron_mxfp8_moe.refit import refit_experts, validate_refit
from megatron_mxfp8_moe.refit.validate import COPY, QUANTIZE, canonical_nbytes
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E0 = fake.experts_path(0)
E1 = fake.experts_path(1)


def _megatron_copy(tensor: MXFP8Tensor, scale=None) -> MegatronMXFP8Tensor:
    """Megatron-Core's MXFP8Tensor holding a copy of ``tensor``'s bytes (uint8 scales, as FlashInfer returns)."""
    scale = tensor.scale.view(torch.uint8).clone() if scale is None else scale
    return MegatronMXFP8Tensor(data=tensor.data.clone(), scale=scale, backend="flashinfer")


def _fc1(seed=5, **kwargs):
    return fake.random_weights(fake.FC1_SHAPE, generator=torch.Generator().manual_seed(seed), **kwargs)


def _fc2(seed=6, **kwargs):
    return fake.random_weights(fake.FC2_SHAPE, generator=torch.Generator().manual_seed(seed), **kwargs)


def _with_nan(tensor, value):
    tensor = tensor.clone()
    tensor[3, 5] = value
    return tensor


def _nan_scale_byte():
    good = quantize_mxfp8(_fc1(), backend="reference")
    scale = good.scale.view(torch.uint8).clone()
    scale[17] = 0xFF
    return _megatron_copy(good, scale)


def _huge_scale_byte():
    """A scale byte of 2 ** 127 (0xFE): no finite source quantizes to it, and it times e4m3 448 is Inf in fp32."""
    good = quantize_mxfp8(_fc1(), backend="reference")
    scale = good.scale.view(torch.uint8).clone()
    scale[17] = 0xFE
    return _megatron_copy(good, scale)


def _short_scale():
    good = quantize_mxfp8(_fc1(), backend="reference")
    return _megatron_copy(good, good.scale.view(torch.uint8)[:-512].clone())


def _nan_fp8_data():
    good = quantize_mxfp8(_fc2(), backend="reference")
    data = good.data.clone()
    data.view(torch.uint8)[2, 40] = 0x7F  # e4m3 NaN
    return MegatronMXFP8Tensor(data=data, scale=good.scale.clone(), backend="triton")


# (name, source factory, words the message must contain)
BAD_ENTRIES = {
    "unknown_layer": ("decoder.layers.7.mlp.experts.linear_fc1.weight0", _fc1, "unknown name"),
    "non_expert_strict": ("decoder.layers.0.self_attention.linear_qkv.weight", lambda: torch.randn(192, 64), "not an expert weight"),
    "expert_name_on_non_experts_module": ("decoder.layers.0.mlp.linear_fc1.weight0", _fc1, "not an experts module"),
    "index_out_of_range": (f"{E1}.linear_fc2.weight4", _fc2, "out of range [0, 4)"),
    "wrong_shape": (f"{E0}.linear_fc1.weight2", lambda: _fc1().t().contiguous(), "shape must be (192, 64)"),
    "wrong_shape_3d": (f"{E0}.linear_fc2.weight2", lambda: _fc2().unsqueeze(0), "shape must be (64, 96)"),
    "int_dtype": (f"{E0}.linear_fc2.weight1", lambda: torch.randint(-5, 5, fake.FC2_SHAPE, dtype=torch.int32), "dtype"),
    "float64": (f"{E1}.linear_fc1.weight3", lambda: _fc1(dtype=torch.float64), "torch.float64"),
    "raw_fp8": (f"{E1}.linear_fc1.weight0", lambda: _fc1().to(torch.float8_e4m3fn), "pass an MXFP8Tensor"),
    "meta_device": (f"{E0}.linear_fc1.weight1", lambda: torch.empty(fake.FC1_SHAPE, dtype=torch.bfloat16, device="meta"), "must be on cpu"),
    "nan": (f"{E1}.linear_fc2.weight2", lambda: _with_nan(_fc2(), float("nan")), "1 NaN"),
    "inf": (f"{E0}.linear_fc1.weight3", lambda: _with_nan(_fc1(dtype=torch.float32), float("-inf")), "1 Inf"),
    "mxfp8_short_scale": (f"{E0}.linear_fc1.weight0", _short_scale, "swizzled bytes"),
    "mxfp8_nan_scale_byte": (f"{E1}.linear_fc1.weight1", _nan_scale_byte, "NaN byte 0xFF"),
    "mxfp8_nan_data": (f"{E1}.linear_fc2.weight1", _nan_fp8_data, "non-finite"),
    "mxfp8_huge_scale_byte": (f"{E0}.linear_fc1.weight2", _huge_scale_byte, "scale bytes above 247"),
    "name_with_trailing_newline": (f"{E0}.linear_fc1.weight1\n", _fc1, "not an expert weight"),
    "mxfp8_wrong_shape": (f"{E1}.linear_fc2.weight3", lambda: _megatron_copy(quantize_mxfp8(_fc1(), backend="reference")), "shape"),
    "mxfp8_meta": (f"{E0}.linear_fc2.weight0", lambda: MXFP8Tensor.empty(fake.FC2_SHAPE, device="meta"), "must be on cpu"),
    "not_a_tensor": (f"{E0}.linear_fc2.weight3", lambda: [[1.0] * 96] * 64, "expected a torch.Tensor"),
    "sparse": (f"{E0}.linear_fc2.weight3", lambda: _fc2().float().to_sparse(), "dense"),
}


def _batch_with(bad_name, bad_source, *, seed=11):
    """Valid new sources for every expert of both layers, with the bad entry LAST (all good ones first)."""
    batch = fake.new_sources(seed=seed)
    batch.pop(bad_name, None)
    batch[bad_name] = bad_source
    return batch


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_bad_entry_is_named_and_nothing_is_written(case):
    bad_name, factory, words = BAD_ENTRIES[case]
    model = fake.FakeModel()
    before = model.snapshot()
    with pytest.raises(RefitError) as caught:
        validate_refit(model, _batch_with(bad_name, factory()))
    message = str(caught.value)
    assert message.startswith(f"refit entry {bad_name!r}:"), message
    assert words in message, message
    assert fake.same(model.snapshot(), before)
    assert all(not experts.hook_calls for experts in model.all_experts())


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_refit_experts_rejects_the_same_batches_atomically(case):
    """The same bad batches through refit_experts (a mapping): no canonical or derived byte, hook or refresh."""
    bad_name, factory, words = BAD_ENTRIES[case]
    model = fake.FakeModel()
    before = model.snapshot()
    with pytest.raises(RefitError, match=f"^refit entry {re.escape(repr(bad_name))}:") as caught:
        refit_experts(model, _batch_with(bad_name, factory()))
    assert words in str(caught.value)
    assert fake.same(model.snapshot(), before)
    assert [(experts.hook_calls, experts.refresh_calls) for experts in model.all_experts()] == [([], 0), ([], 0)]


def test_valid_plan_describes_every_write_and_writes_nothing():
    model = fake.FakeModel()
    before = model.snapshot()
    batch = fake.new_sources(layers=(1,), experts=(0, 3), linears=("fc2",))
    copied = quantize_mxfp8(_fc1(), backend="reference")
    batch[f"{E0}.linear_fc1.weight2"] = _megatron_copy(copied)
    batch["decoder.layers.0.self_attention.linear_qkv.weight"] = torch.randn(192, 64)
    plan = validate_refit(model, batch, strict=False)
    assert [(w.name, w.kind, w.global_index, w.module_path) for w in plan.writes] == [
        (f"{E1}.linear_fc2.weight0", QUANTIZE, 4, E1),
        (f"{E1}.linear_fc2.weight3", QUANTIZE, 7, E1),
        (f"{E0}.linear_fc1.weight2", COPY, 6, E0),
    ]
    assert plan.skipped == ("decoder.layers.0.self_attention.linear_qkv.weight",)
    assert plan.module_paths == (E1, E0)
    assert plan.writes[2].target is model.experts(0).mxfp8_weights()["linear_fc1.weight2"]
    # fc2 [64, 96]: 6144 data + 128 rows x 4 scale columns; fc1 [192, 64]: 12288 + 256 x 4
    assert plan.canonical_bytes == 2 * (6144 + 512) + (12288 + 1024)
    assert canonical_nbytes((192, 64)) == 12288 + 1024
    assert fake.same(model.snapshot(), before)


def test_validation_runs_over_the_whole_batch_before_finiteness():
    """Cheap checks run over every entry before the NaN/Inf reductions, so a later shape error wins."""
    model = fake.FakeModel()
    batch = {f"{E0}.linear_fc1.weight0": _with_nan(_fc1(), float("nan")), f"{E0}.linear_fc2.weight0": _fc1()}
    with pytest.raises(RefitError, match=r"linear_fc2.weight0': source: shape"):
        validate_refit(model, batch)
    # finiteness failures name the FIRST bad entry in entry order
    batch = {f"{E0}.linear_fc1.weight0": _fc1(), f"{E0}.linear_fc1.weight1": _with_nan(_fc1(), float("inf")),
             f"{E1}.linear_fc1.weight1": _with_nan(_fc1(), float("nan"))}
    with pytest.raises(RefitError, match=r"^refit entry 'decoder.layers.0.mlp.experts.linear_fc1.weight1'"):
        validate_refit(model, batch)


def test_finiteness_across_source_dtypes_names_the_first_bad_entry():
    """Sources of several dtypes are scanned per (device, dtype) group; the error still names the first bad entry."""
    model = fake.FakeModel()
    batch = {
        f"{E0}.linear_fc1.weight0": _fc1(dtype=torch.float32),
        f"{E0}.linear_fc1.weight1": _with_nan(_fc1(dtype=torch.float16), float("-inf")),
        f"{E1}.linear_fc1.weight0": _with_nan(_fc1(dtype=torch.float32), float("nan")),
        f"{E1}.linear_fc1.weight1": _fc1(),
    }
    with pytest.raises(RefitError, match=r"^refit entry 'decoder.layers.0.mlp.experts.linear_fc1.weight1'.*1 Inf"):
        validate_refit(model, batch)
    del batch[f"{E0}.linear_fc1.weight1"]
    with pytest.raises(RefitError, match=r"^refit entry 'decoder.layers.1.mlp.experts.linear_fc1.weight0'.*1 NaN"):
        validate_refit(model, batch)


def test_strict_false_skips_non_expert_and_unknown_names_but_not_bad_indices():
    model = fake.FakeModel()
    batch = {"decoder.layers.0.self_attention.linear_qkv.weight": torch.randn(3, 3),
             "decoder.layers.9.mlp.experts.linear_fc1.weight0": _fc1(),
             f"{E0}.linear_fc1.weight1": _fc1()}
    plan = validate_refit(model, batch, strict=False)
    assert plan.skipped == ("decoder.layers.0.self_attention.linear_qkv.weight",
                            "decoder.layers.9.mlp.experts.linear_fc1.weight0")
    assert [w.name for w in plan.writes] == [f"{E0}.linear_fc1.weight1"]
    with pytest.raises(RefitError, match="out of range"):
        validate_refit(model, {f"{E0}.linear_fc1.weight4": _fc1()}, strict=False)


def test_duplicates_through_aliases_are_rejected():
    """On an experts module, a relative name and its full-prefix twin address the same weight."""
    model = fake.FakeModel()
    layer = model.experts(0)
    before = model.snapshot()
    batch = {"linear_fc1.weight1": _fc1(1), f"{E0}.linear_fc1.weight1": _fc1(2)}
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight1': duplicate: entry 'linear_fc1.weight1'"):
        validate_refit(layer, batch)
    # a stream may repeat a name outright
    with pytest.raises(RefitError, match="duplicate"):
        validate_refit(model, [(f"{E1}.linear_fc2.weight0", _fc2(1)), (f"{E1}.linear_fc2.weight0", _fc2(2))])
    assert fake.same(model.snapshot(), before)


def test_layer_root_accepts_relative_and_prefixed_names_but_one_prefix_only():
    model = fake.FakeModel()
    layer = model.experts(1)
    plan = validate_refit(layer, {"linear_fc2.weight1": _fc2(), f"{E1}.linear_fc1.weight0": _fc1()})
    assert [(w.module_path, w.linear, w.local_index, w.global_index) for w in plan.writes] == [
        ("", "fc2", 1, 5), ("", "fc1", 0, 4)]
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0'.*prefix"):
        validate_refit(layer, {f"{E1}.linear_fc1.weight0": _fc1(), f"{E0}.linear_fc1.weight0": _fc1()})
    # an explicit prefix settles it: names of other layers are unknown (skipped when not strict)
    plan = validate_refit(layer, {f"{E0}.linear_fc1.weight0": _fc1(), f"{E1}.linear_fc1.weight2": _fc1()},
                          prefix=E1, strict=False)
    assert plan.skipped == (f"{E0}.linear_fc1.weight0",)
    assert [w.local_index for w in plan.writes] == [2]


def test_layer_root_never_guesses_its_path_where_a_wrong_guess_would_pass():
    """With strict=False (a whole model's names) or an index-less name (a dense MLP's 'mlp.linear_fc1.weight'
    looks the same), the first path-carrying name must not become the layer's prefix: another layer's weights
    would be written into this one. A clear error asks for prefix=; with it, the same batch is right."""
    model = fake.FakeModel()
    layer = model.experts(1)
    before = model.snapshot()
    whole_model = {f"{E0}.linear_fc1.weight0": _fc1(1), f"{E1}.linear_fc1.weight1": _fc1(2)}
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': .*strict=False.*prefix='{E0}'"):
        refit_experts(layer, whole_model, strict=False)
    with pytest.raises(RefitError, match=r"^refit entry 'decoder.layers.0.mlp.linear_fc1.weight': .*index-less"):
        refit_experts(layer, iter([("decoder.layers.0.mlp.linear_fc1.weight", torch.randn(512, 64))]))
    assert fake.same(model.snapshot(), before)
    report = refit_experts(layer, whole_model, strict=False, prefix=E1)
    assert report.skipped == (f"{E0}.linear_fc1.weight0",) and report.experts == (("", (5,)),)
    expected = quantize_mxfp8(whole_model[f"{E1}.linear_fc1.weight1"], backend="reference")
    assert torch.equal(layer.expert_bytes("fc1", 1)[0], expected.data.view(torch.uint8))
    assert fake.same(model.experts(0).stack_bytes(), before[:len(before) // 2])  # layer 0 untouched


def test_an_mxfp8_source_aliasing_a_written_weight_is_rejected():
    """Writes run grouped per stack, not in entry order: copying expert 2's current bytes into expert 0 while
    expert 2 is rewritten in the same batch could read the new bytes. A source whose bytes overlap a written
    weight is refused (nothing written); a copy of them, or a source the batch does not write, is accepted."""
    model = fake.FakeModel()
    layer = model.experts(0)
    before = model.snapshot()
    view2 = layer.mxfp8_weights()["linear_fc1.weight2"]
    batch = {f"{E0}.linear_fc1.weight1": _fc1(1), f"{E0}.linear_fc1.weight0": view2,
             f"{E0}.linear_fc1.weight2": _fc1(2)}
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': the MXFP8 source overlaps"):
        refit_experts(model, batch)
    # the same memory reached through another storage object (DLPack interop) is caught by address ranges
    aliased = MegatronMXFP8Tensor(torch.utils.dlpack.from_dlpack(view2.data), torch.utils.dlpack.from_dlpack(
        view2.scale.view(torch.uint8)), "triton")
    assert aliased.data.untyped_storage().data_ptr() != view2.data.untyped_storage().data_ptr()
    with pytest.raises(RefitError, match="overlaps"):
        refit_experts(model, dict(batch, **{f"{E0}.linear_fc1.weight0": aliased}))
    assert fake.same(model.snapshot(), before)
    # a copy from an expert of the same stack that the batch does not write is fine
    refit_experts(model, {f"{E0}.linear_fc1.weight0": view2})
    assert torch.equal(layer.expert_bytes("fc1", 0)[0], layer.expert_bytes("fc1", 2)[0])
    before = model.snapshot()
    old2 = MXFP8Tensor(view2.data.clone(), view2.scale.clone())
    refit_experts(model, dict(batch, **{f"{E0}.linear_fc1.weight0": old2}))
    written = layer.mxfp8_weights()["linear_fc1.weight0"]
    assert torch.equal(written.data.view(torch.uint8), old2.data.view(torch.uint8))
    assert torch.equal(written.scale.view(torch.uint8), old2.scale.view(torch.uint8))
    assert not torch.equal(layer.mxfp8_weights()["linear_fc1.weight2"].data.view(torch.uint8),
                           old2.data.view(torch.uint8))  # expert 2 was rewritten in the same batch


def test_explicit_prefix_strips_names_for_a_model_chunk():
    model = fake.FakeModel()
    plan = validate_refit(model.decoder, {f"{E1}.linear_fc1.weight3": _fc1()}, prefix="decoder")
    assert [(w.module_path, w.global_index) for w in plan.writes] == [("layers.1.mlp.experts", 7)]


def test_bad_names_backend_and_weights_types():
    model = fake.FakeModel()
    with pytest.raises(RefitError, match=r"^refit entry 3: a name must be a str"):
        validate_refit(model, {3: _fc1()})
    with pytest.raises(RefitError, match="backend 'cuda-magic'"):
        validate_refit(model, {f"{E0}.linear_fc1.weight0": _fc1()}, backend="cuda-magic")
    with pytest.raises(RefitError, match=r"^refit entry '<item 1>': stream items must be"):
        validate_refit(model, [(f"{E0}.linear_fc1.weight0", _fc1()), _fc1()])
    with pytest.raises(TypeError, match="weights"):
        validate_refit(model, _fc1())


def test_experts_module_contract_violations_are_named():
    class Broken(torch.nn.Module):
        num_local_experts = 2
        local_expert_offset = 0

        def mxfp8_weights(self):
            return {"linear_fc1.weight0": torch.zeros(4, 32)}

    root = torch.nn.Module()
    root.experts = Broken()
    with pytest.raises(RefitError, match=r"mxfp8_weights\(\)\['linear_fc1.weight0'\] must be"):
        validate_refit(root, {"experts.linear_fc1.weight0": torch.randn(4, 32)})
    with pytest.raises(RefitError, match="exposes no canonical weight 'linear_fc2.weight1'"):
        Broken.mxfp8_weights = lambda self: {}
        validate_refit(root, {"experts.linear_fc2.weight1": torch.randn(4, 32)})


def test_the_lookup_table_follows_the_objects_mxfp8_weights_returns():
    """The per-module lookup table is reused only while ``mxfp8_weights()`` returns the same names, in the same
    order, mapped to the same objects; a swapped or replaced weight is seen at once."""
    stack = quantize_mxfp8(_fc1().unsqueeze(0).repeat(2, 1, 1), backend="reference")

    class Experts(torch.nn.Module):
        num_local_experts = 2
        local_expert_offset = 0

        def __init__(self):
            super().__init__()
            self.views = {f"linear_fc1.weight{i}": stack.expert(i) for i in range(2)}

        def mxfp8_weights(self):
            return dict(self.views)

    module = Experts()
    source = _fc1(seed=9)
    first = validate_refit(module, {"linear_fc1.weight0": source}).writes[0]
    assert first.target is module.views["linear_fc1.weight0"]
    module.views = {"linear_fc1.weight0": module.views["linear_fc1.weight1"],
                    "linear_fc1.weight1": module.views["linear_fc1.weight0"]}  # same objects, swapped names
    assert validate_refit(module, {"linear_fc1.weight0": source}).writes[0].target is module.views["linear_fc1.weight0"]
    module.views = dict(reversed(list(module.views.items())))  # same mapping, other order: rebuilt, same answer
    assert validate_refit(module, {"linear_fc1.weight0": source}).writes[0].target is module.views["linear_fc1.weight0"]
    module.views["linear_fc1.weight1"] = torch.zeros(3)  # no longer an MXFP8Tensor: checked again
    with pytest.raises(RefitError, match=r"mxfp8_weights\(\)\['linear_fc1.weight1'\] must be"):
        validate_refit(module, {"linear_fc1.weight0": source})


def test_a_released_lone_tensor_is_not_keyed_by_its_old_address():
    """A lone canonical tensor (not a stack view) is keyed by its storage address for duplicate detection; once
    released, that address can be reused by another tensor, so the cached table is rebuilt and keys it by object."""
    from megatron_mxfp8_moe.refit import validate

    lone = quantize_mxfp8(_fc1(), backend="reference")

    class Experts(torch.nn.Module):
        num_local_experts = 1
        local_expert_offset = 0

        def mxfp8_weights(self):
            return {"linear_fc1.weight0": lone}

    module = Experts()
    address = lone.data.data_ptr()
    validate_refit(module, {"linear_fc1.weight0": _fc1(seed=3)})
    assert validate._TABLES[module].targets["linear_fc1.weight0"].key == ("storage", "cpu", address)
    lone.register_write_hook(lambda *args: None)  # a released tensor's writes must reach a hook
    lone.release_storage_()
    validate_refit(module, {"linear_fc1.weight0": _fc1(seed=4)})
    assert validate._TABLES[module].targets["linear_fc1.weight0"].key == ("object", id(lone))


def test_mxfp8_nan_bytes_are_read_once_per_plan_and_name_the_first_bad_entry(monkeypatch):
    """The NaN-byte scans of all MXFP8 copy sources are read with one host sync at the end of the plan (like the
    logical NaN/Inf check); the error names the first non-finite entry of either kind, in entry order."""
    model = fake.FakeModel()
    good = _megatron_copy(quantize_mxfp8(_fc1(), backend="reference"))
    reads = []
    real_stack = torch.stack

    def counting_stack(tensors, *args, **kwargs):  # _nan_byte_copies stacks the per-source flags once per device
        if len(tensors) and all(t.dtype == torch.bool and t.shape == (3,) for t in tensors):
            reads.append(len(tensors))
        return real_stack(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "stack", counting_stack)
    batch = {f"{E0}.linear_fc1.weight{i}": good for i in range(3)}
    validate_refit(model, batch)
    assert reads == [3]  # three copy sources, one read
    batch = {f"{E0}.linear_fc1.weight0": good, f"{E0}.linear_fc1.weight1": _nan_scale_byte(),
             f"{E0}.linear_fc1.weight2": _with_nan(_fc1(), float("nan"))}
    with pytest.raises(RefitError, match=r"linear_fc1.weight1': source.scale: holds the E8M0 NaN byte 0xFF \(target"):
        validate_refit(model, batch)
    batch = {f"{E0}.linear_fc1.weight0": _with_nan(_fc1(), float("inf")), f"{E0}.linear_fc1.weight1": _nan_scale_byte()}
    with pytest.raises(RefitError, match=r"linear_fc1.weight0'.*1 Inf"):
        validate_refit(model, batch)
    batch = {f"{E0}.linear_fc2.weight0": _nan_fp8_data()}
    with pytest.raises(RefitError, match=r"linear_fc2.weight0': source.data: holds non-finite value\(s\)"):
        validate_refit(model, batch)
