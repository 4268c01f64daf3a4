"""refit/apply.py: refit_experts writes in place, atomically, fires hooks and refreshes, and reports right."""

import logging
import pathlib

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe import RefitError, ReleasedWeightError, quantize_mxfp8
from megatron_mxfp8_moe.refit import RefitReport, refit_experts
from megatron_mxfp8_moe.testing import load_file_module

fake = load_file_module(pathlib.Path(__file__).with_name("_fake_experts.py"), "refit_fake_experts")
E0 = fake.experts_path(0)
E1 = fake.experts_path(1)
FC1_BYTES = 192 * 64 + 256 * 4  # fc1 [192, 64]: fp8 data + 128x4-padded scales (256 rows x 4 columns)
FC2_BYTES = 64 * 96 + 128 * 4  # fc2 [64, 96]: 96 / 32 = 3 scale columns padded to 4, 64 rows padded to 128


def _fresh_layer(sources: dict, layer: int, offset: int = fake.EXPERTS) -> "fake.FakeExperts":
    """A FakeExperts built directly from the full set of new logical weights of ``layer``."""
    path = fake.experts_path(layer)
    fc1 = torch.stack([sources[f"{path}.linear_fc1.weight{i}"] for i in range(fake.EXPERTS)])
    fc2 = torch.stack([sources[f"{path}.linear_fc2.weight{i}"] for i in range(fake.EXPERTS)])
    return fake.FakeExperts(fc1, fc2, local_expert_offset=offset)


def _stream(mapping: dict):
    return ((name, tensor) for name, tensor in mapping.items())  # a one-pass generator


def test_full_refit_equals_a_freshly_built_layer_byte_for_byte():
    model = fake.FakeModel()
    pointers = [experts.data_ptrs() for experts in model.all_experts()]
    sources = fake.new_sources()
    report = refit_experts(model, sources)
    for layer in (0, 1):
        assert fake.same(model.experts(layer).stack_bytes(), _fresh_layer(sources, layer).stack_bytes())
        assert model.experts(layer).data_ptrs() == pointers[layer]
    assert report == RefitReport(
        experts_updated=8, tensors_updated=16, bytes_written=8 * (FC1_BYTES + FC2_BYTES), seconds=report.seconds,
        modules_touched=(E0, E1), skipped=(), experts=((E0, (4, 5, 6, 7)), (E1, (4, 5, 6, 7))),
    )
    assert report.seconds > 0


def test_partial_refit_changes_exactly_the_named_experts():
    model = fake.FakeModel()
    before = {(layer, linear, index): model.experts(layer).expert_bytes(linear, index)
              for layer in (0, 1) for linear in ("fc1", "fc2") for index in range(fake.EXPERTS)}
    named = [(0, "fc1", 1), (1, "fc2", 3), (1, "fc1", 3)]
    sources = {f"{fake.experts_path(layer)}.linear_{linear}.weight{index}":
               fake.random_weights(fake.SHAPES[linear], generator=torch.Generator().manual_seed(31 + seed))
               for seed, (layer, linear, index) in enumerate(named)}
    report = refit_experts(model, sources)
    for key, old in before.items():
        now = model.experts(key[0]).expert_bytes(key[1], key[2])
        if key in named:
            source = sources[f"{fake.experts_path(key[0])}.linear_{key[1]}.weight{key[2]}"]
            expected = quantize_mxfp8(source, backend="reference")
            assert torch.equal(now[0], expected.data.view(torch.uint8))
            assert torch.equal(now[1], expected.scale.view(torch.uint8))
            assert torch.equal(now[2], now[0].t())  # the derived copy followed
            assert torch.equal(now[3], now[1])
            assert not torch.equal(now[0], old[0])
        else:
            assert fake.same(now, old), key
    assert (report.experts_updated, report.tensors_updated) == (2, 3)
    assert report.bytes_written == 2 * FC1_BYTES + FC2_BYTES
    assert report.experts == ((E0, (5,)), (E1, (7,)))


@pytest.mark.parametrize("order", ["sorted", "interleaved_linears"])
def test_mapping_and_stream_give_identical_results(order):
    sources = fake.new_sources()
    if order == "interleaved_linears":  # still contiguous per experts module
        sources = dict(sorted(sources.items(), key=lambda item: (item[0].split(".linear")[0], item[0][-1])))
    by_mapping, by_stream = fake.FakeModel(), fake.FakeModel()
    assert fake.same(by_mapping.snapshot(), by_stream.snapshot())
    mapping_report = refit_experts(by_mapping, sources)
    stream_report = refit_experts(by_stream, _stream(sources))
    assert fake.same(by_mapping.snapshot(), by_stream.snapshot())
    assert mapping_report == RefitReport(**{**stream_report.__dict__, "seconds": mapping_report.seconds})
    for model in (by_mapping, by_stream):
        assert [sorted(experts.hook_calls) for experts in model.all_experts()] == [
            sorted((linear, index) for linear in ("fc1", "fc2") for index in range(fake.EXPERTS))] * 2


def test_hooks_fire_once_per_written_weight_and_refresh_runs_on_touched_modules_only():
    model = fake.FakeModel()
    sources = fake.new_sources(layers=(1,), experts=(2, 0), linears=("fc2",))
    refit_experts(model, sources)
    assert model.experts(1).hook_calls == [("fc2", 2), ("fc2", 0)]
    assert model.experts(0).hook_calls == []
    assert (model.experts(0).refresh_calls, model.experts(1).refresh_calls) == (0, 1)


def test_upstream_refresh_module_caches_is_used_when_megatron_has_it(monkeypatch):
    import megatron.core.resharding.execution as execution

    from megatron_mxfp8_moe.refit import apply

    calls = []
    monkeypatch.setattr(execution, "refresh_module_caches", lambda modules: calls.append(list(modules)), raising=False)
    apply._upstream_refresh_module_caches.cache_clear()  # the lookup is cached per process
    model = fake.FakeModel()
    refit_experts(model, fake.new_sources(layers=(0, 1), experts=(1,), linears=("fc1",)))
    assert len(calls) == 1 and calls[0][0] is model.experts(0) and calls[0][1] is model.experts(1)
    # our modules are not MegatronModules, so their own refresh_cache() still runs, once each
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 1]
    monkeypatch.undo()
    apply._upstream_refresh_module_caches.cache_clear()


@pytest.mark.parametrize("as_stream", [False, True])
def test_bad_batch_changes_nothing_via_refit_experts(as_stream):
    model = fake.FakeModel()
    before = model.snapshot()
    sources = fake.new_sources(layers=(0,))
    sources[f"{E0}.linear_fc2.weight9"] = fake.random_weights(fake.FC2_SHAPE)
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc2.weight9': local expert index 9 out of range") as caught:
        refit_experts(model, _stream(sources) if as_stream else sources)
    assert caught.value.applied_modules == ()
    assert fake.same(model.snapshot(), before)
    assert [experts.refresh_calls for experts in model.all_experts()] == [0, 0]


def test_stream_is_atomic_per_experts_module():
    model = fake.FakeModel()
    before_layer1 = model.experts(1).stack_bytes()
    sources = fake.new_sources()
    bad = f"{E1}.linear_fc1.weight2"
    sources[bad] = sources[bad].clone()
    sources[bad][0, 0] = float("nan")
    with pytest.raises(RefitError, match=rf"^refit entry '{bad}': source holds 1 NaN") as caught:
        refit_experts(model, _stream(sources))
    assert caught.value.applied_modules == (E0,)
    assert fake.same(model.experts(0).stack_bytes(), _fresh_layer(sources, 0).stack_bytes())
    assert fake.same(model.experts(1).stack_bytes(), before_layer1)  # entries before the bad one not written
    assert model.experts(1).hook_calls == []


def test_stream_validates_the_next_module_before_finishing_the_last(monkeypatch):
    """Pipelined stream: module k's writes are launched, module k+1 is validated, then k is finished (flags
    read, caches refreshed) and only then are k+1's writes launched."""
    from megatron_mxfp8_moe.refit import apply, validate

    events = []
    real_plan, real_launch, real_finish = validate.RefitValidator.plan, apply._launch_plan, apply._finish_plan

    def plan(self, entries, **kwargs):
        result = real_plan(self, entries, **kwargs)
        events.append(("validate",) + result.module_paths)
        return result

    def launch(plan, progress, applied_modules):
        events.append(("launch",) + plan.module_paths)
        real_launch(plan, progress, applied_modules)

    def finish(plan, applied_modules):
        events.append(("finish",) + plan.module_paths)
        real_finish(plan, applied_modules)

    monkeypatch.setattr(validate.RefitValidator, "plan", plan)
    monkeypatch.setattr(apply, "_launch_plan", launch)
    monkeypatch.setattr(apply, "_finish_plan", finish)
    model = fake.FakeModel()
    sources = fake.new_sources()
    report = refit_experts(model, _stream(sources))
    assert events == [("validate", E0), ("launch", E0), ("validate", E1), ("finish", E0), ("launch", E1),
                      ("finish", E1)]
    assert report.modules_touched == (E0, E1) and report.tensors_updated == 16
    for layer in (0, 1):
        assert fake.same(model.experts(layer).stack_bytes(), _fresh_layer(sources, layer).stack_bytes())
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 1]


def test_stream_finishes_the_launched_module_when_the_next_one_fails(monkeypatch):
    """A bad entry in module k+1 still completes module k, which was launched before it (and is reported as
    applied); a failure while finishing k (a NaN found by its device scan) wins over k+1's error, since k
    comes first in the stream."""
    from megatron_mxfp8_moe.refit import apply

    model = fake.FakeModel()
    sources = fake.new_sources()
    sources[f"{E1}.linear_fc2.weight9"] = fake.random_weights(fake.FC2_SHAPE)
    with pytest.raises(RefitError, match=rf"^refit entry '{E1}.linear_fc2.weight9': local expert index 9") as caught:
        refit_experts(model, _stream(sources))
    assert caught.value.applied_modules == (E0,)
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 0]

    real_finish = apply._finish_plan

    def finish_fails_for_e0(plan, applied_modules):
        if plan.module_paths == (E0,):
            raise apply.refit_error(f"{E0}.linear_fc1.weight0", "found bad by the device scan",
                                    applied_modules=tuple(applied_modules))
        real_finish(plan, applied_modules)

    monkeypatch.setattr(apply, "_finish_plan", finish_fails_for_e0)
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc1.weight0': found bad") as caught:
        refit_experts(fake.FakeModel(), _stream(sources))
    assert caught.value.applied_modules == ()


def test_stream_interrupted_mid_module_still_finishes_the_module_written_before():
    """A KeyboardInterrupt from the trainer's generator while module k+1 is buffered: module k, whose writes were
    launched, is still finished (refreshed once); module k+1 is untouched; the interrupt propagates."""
    model = fake.FakeModel()
    before_layer1 = model.experts(1).stack_bytes()
    sources = fake.new_sources()

    def interrupted():
        for name, tensor in sources.items():
            if name.startswith(E1) and name.endswith("weight2"):
                raise KeyboardInterrupt
            yield name, tensor

    with pytest.raises(KeyboardInterrupt):
        refit_experts(model, interrupted())
    assert fake.same(model.experts(0).stack_bytes(), _fresh_layer(sources, 0).stack_bytes())
    assert fake.same(model.experts(1).stack_bytes(), before_layer1)
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 0]


def test_stream_rejects_a_module_whose_entries_are_not_contiguous():
    model = fake.FakeModel()
    before_layer1 = model.experts(1).stack_bytes()
    sources = fake.new_sources(experts=(0, 1), linears=("fc1",))
    names = list(sources)  # E0 w0, E0 w1, E1 w0, E1 w1
    order = [names[0], names[2], names[3], names[1]]
    with pytest.raises(RefitError, match=rf"^refit entry '{names[1]}': the entries of experts module '{E0}' are not contiguous") as caught:
        refit_experts(model, ((name, sources[name]) for name in order))
    assert caught.value.applied_modules == (E0, E1)
    assert not fake.same(model.experts(1).stack_bytes(), before_layer1)


def test_strict_false_skips_and_reports_non_expert_names_in_a_stream():
    model = fake.FakeModel()
    stream = [
        ("decoder.layers.0.self_attention.linear_qkv.weight", torch.randn(192, 64)),
        (f"{E0}.linear_fc1.weight0", fake.random_weights(fake.FC1_SHAPE)),
        ("decoder.layers.0.mlp.router.weight", torch.randn(8, 64)),
        (f"{E0}.linear_fc2.weight0", fake.random_weights(fake.FC2_SHAPE)),
    ]
    report = refit_experts(model, iter(stream), strict=False)
    assert report.skipped == ("decoder.layers.0.self_attention.linear_qkv.weight", "decoder.layers.0.mlp.router.weight")
    assert (report.tensors_updated, report.experts_updated, report.modules_touched) == (2, 1, (E0,))
    assert model.experts(0).refresh_calls == 1  # one group: the skipped name did not split it
    with pytest.raises(RefitError, match="not an expert weight name"):
        refit_experts(model, iter(stream))


def test_refit_into_released_canonical_weights_reaches_the_derived_copies():
    model = fake.FakeModel()
    layer = model.experts(0)
    layer.release_canonical_()
    sources = fake.new_sources(layers=(0,))
    report = refit_experts(model, sources)
    fresh = _fresh_layer(sources, 0)
    for linear in ("fc1", "fc2"):
        assert torch.equal(layer.derived[linear][0], fresh.derived[linear][0])
        assert torch.equal(layer.derived[linear][1], fresh.derived[linear][1])
    with pytest.raises(ReleasedWeightError):
        _ = layer.mxfp8_weights()["linear_fc1.weight0"].data
    assert report.bytes_written == 4 * (FC1_BYTES + FC2_BYTES)


def test_mxfp8_sources_are_copied_bytes_for_bytes():
    model = fake.FakeModel()
    sources = fake.new_sources(layers=(1,), experts=(0, 1, 2, 3))
    quantized = {name: quantize_mxfp8(tensor, backend="reference") for name, tensor in sources.items()}
    batch = {}
    for position, (name, tensor) in enumerate(quantized.items()):
        if position % 2:  # Megatron-Core's MXFP8Tensor with FlashInfer's uint8 scales
            batch[name] = MegatronMXFP8Tensor(data=tensor.data.clone(), scale=tensor.scale.view(torch.uint8).clone(),
                                              backend="flashinfer")
        else:
            batch[name] = tensor
    report = refit_experts(model, batch)
    assert fake.same(model.experts(1).stack_bytes(), _fresh_layer(sources, 1).stack_bytes())
    assert report.tensors_updated == 8


def test_experts_module_as_root_with_relative_or_prefixed_names():
    sources = fake.new_sources(layers=(1,), experts=(1, 2))
    relative = {name.split("experts.")[1]: tensor for name, tensor in sources.items()}
    by_relative, by_prefixed, by_model = fake.FakeModel(), fake.FakeModel(), fake.FakeModel()
    report = refit_experts(by_relative.experts(1), relative)
    refit_experts(by_prefixed.experts(1), sources)
    refit_experts(by_model, sources)
    assert fake.same(by_relative.snapshot(), by_model.snapshot())
    assert fake.same(by_prefixed.snapshot(), by_model.snapshot())
    assert report.modules_touched == ("",) and report.experts == (("", (5, 6)),)


def test_non_contiguous_and_grad_sources_and_inference_tensors():
    with torch.inference_mode():
        model = fake.FakeModel()
    assert model.experts(0).stacks["fc1"].data.is_inference()
    source = fake.random_weights((64, 192)).t().requires_grad_()  # [192, 64], not contiguous
    assert not source.is_contiguous()
    refit_experts(model, {f"{E0}.linear_fc1.weight3": source})
    expected = quantize_mxfp8(source.detach().contiguous(), backend="reference")
    target = model.experts(0).mxfp8_weights()["linear_fc1.weight3"]
    assert torch.equal(target.data.view(torch.uint8), expected.data.view(torch.uint8))
    assert torch.equal(target.scale.view(torch.uint8), expected.scale.view(torch.uint8))
    assert not target.data.requires_grad


def test_fp16_and_fp32_sources_quantize_like_bf16_would():
    model = fake.FakeModel()
    for dtype in (torch.float16, torch.float32):
        source = fake.random_weights(fake.FC2_SHAPE, dtype=dtype)
        refit_experts(model, {f"{E1}.linear_fc2.weight0": source})
        expected = quantize_mxfp8(source, backend="reference")
        assert torch.equal(model.experts(1).expert_bytes("fc2", 0)[0], expected.data.view(torch.uint8))


def test_summary_is_logged_once_at_info(caplog):
    model = fake.FakeModel()
    with caplog.at_level(logging.INFO, logger="megatron_mxfp8_moe.refit.apply"):
        refit_experts(model, fake.new_sources(layers=(0,), experts=(0,)))
    lines = [record.getMessage() for record in caplog.records if record.name == "megatron_mxfp8_moe.refit.apply"]
    assert len(lines) == 1 and lines[0].startswith("refit_experts: 2 tensors of 1 experts in 1 module(s)")


def test_forced_progress_bar_and_empty_batches():
    model = fake.FakeModel()
    report = refit_experts(model, fake.new_sources(layers=(0,), experts=(0,)), progress=True)
    assert report.tensors_updated == 2
    empty = refit_experts(model, {})
    assert (empty.tensors_updated, empty.bytes_written, empty.modules_touched) == (0, 0, ())
    assert refit_experts(model, iter(())).tensors_updated == 0


def test_a_hook_failing_after_validation_is_reported_not_hidden():
    model = fake.FakeModel()
    target = model.experts(0).mxfp8_weights()["linear_fc2.weight1"]

    def boom(tensor, data, scale):
        raise RuntimeError("kernel stack is gone")

    target.register_write_hook(boom)
    sources = fake.new_sources(layers=(0,), experts=(0, 1), linears=("fc2",))
    # both fc2 experts of layer 0 are quantized in one batch: the error names the batch and its members
    with pytest.raises(RefitError, match=r"weight0': writing failed after validation \(RuntimeError: kernel stack is "
                                         r"gone\); 0 earlier .* together with 1 more entries .*weight1'"):
        refit_experts(model, sources)


def _real_layer(fc1, fc2, offset=4):
    """megatron_mxfp8_moe.layer.MXFP8ExpertLayer (reference backend) with its stack built; skipped when absent."""
    layer_module = pytest.importorskip("megatron_mxfp8_moe.layer", reason="needs megatron_mxfp8_moe/layer.py")
    experts_module = pytest.importorskip("megatron_mxfp8_moe.experts", reason="needs megatron_mxfp8_moe/experts.py")
    expert_set = experts_module.ExpertSet.from_bf16(fc1, fc2, "swiglu", backend="reference")
    layer = layer_module.MXFP8ExpertLayer(expert_set, backend="reference", local_expert_offset=offset,
                                          num_global_experts=offset + fc1.shape[0])
    layer.build_()
    return layer


def _real_layer_bytes(layer) -> list[torch.Tensor]:
    expert_set, state = layer.expert_set, layer.stack_state
    return [expert_set.fc1.data.view(torch.uint8).clone(), expert_set.fc1.scale.view(torch.uint8).clone(),
            expert_set.fc2.data.view(torch.uint8).clone(), expert_set.fc2.scale.view(torch.uint8).clone(),
            state.fc1.clone(), state.fc2.clone()]


def _real_layer_ptrs(layer) -> list[int]:
    expert_set, state = layer.expert_set, layer.stack_state
    return [expert_set.fc1.data.data_ptr(), expert_set.fc1.scale.data_ptr(), expert_set.fc2.data.data_ptr(),
            expert_set.fc2.scale.data_ptr(), state.fc1.data_ptr(), state.fc2.data_ptr()]


@pytest.mark.parametrize("as_stream", [False, True])
def test_real_mxfp8_expert_layer_refits_like_a_fresh_build(as_stream):
    """Against the real layer: canonical stacks AND the backend's derived stack match a fresh build, forward too."""
    generator = torch.Generator().manual_seed(3)
    old = fake.random_logical(generator=generator)
    new = fake.random_logical(generator=generator)
    model = torch.nn.Module()
    model.decoder = torch.nn.Module()
    model.decoder.layers = torch.nn.ModuleList([torch.nn.Module()])
    model.decoder.layers[0].mlp = torch.nn.Module()
    layer = model.decoder.layers[0].mlp.experts = _real_layer(*old)
    pointers, before = _real_layer_ptrs(layer), _real_layer_bytes(layer)

    bad = {f"{E0}.linear_fc1.weight{i}": new[0][i] for i in range(fake.EXPERTS)}
    bad[f"{E0}.linear_fc2.weight0"] = new[1][0].to(torch.float64)
    with pytest.raises(RefitError, match=rf"^refit entry '{E0}.linear_fc2.weight0': .*float64"):
        refit_experts(model, bad)
    assert fake.same(_real_layer_bytes(layer), before)

    sources = {f"{E0}.linear_{linear}.weight{i}": (new[0] if linear == "fc1" else new[1])[i]
               for linear in ("fc1", "fc2") for i in range(fake.EXPERTS)}
    report = refit_experts(model, _stream(sources) if as_stream else sources)
    fresh = _real_layer(*new)
    assert fake.same(_real_layer_bytes(layer), _real_layer_bytes(fresh))
    assert _real_layer_ptrs(layer) == pointers
    assert (report.tensors_updated, report.experts, report.bytes_written) == (
        8, ((E0, (4, 5, 6, 7)),), 4 * (FC1_BYTES + FC2_BYTES))
    x = torch.randn(10, fake.HIDDEN, generator=generator).to(torch.bfloat16)
    probs, ids = torch.rand(10, 2, generator=generator), torch.randint(4, 8, (10, 2), generator=generator)
    result = layer.forward_routed(x, probs, ids)
    assert torch.isfinite(result).all() and result.abs().sum() > 0
    assert torch.equal(result, fresh.forward_routed(x, probs, ids))


@pytest.mark.parametrize("as_stream", [False, True])
def test_every_module_that_names_a_written_stack_is_refreshed(as_stream):
    """Two experts modules whose weights are views of ONE stack: entries of both land in one write batch, and
    both modules' refresh_cache() runs (not only the module of the batch's first entry)."""
    model = fake.FakeModel()
    first, second = model.experts(0), model.experts(1)
    second._views = dict(first._views)  # layer 1 now exposes layer 0's per-expert views (same stacks)
    sources = {f"{E0}.linear_fc1.weight0": fake.random_weights(fake.FC1_SHAPE),
               f"{E1}.linear_fc1.weight1": fake.random_weights(fake.FC1_SHAPE)}
    refit_experts(model, _stream(sources) if as_stream else sources)
    assert (first.refresh_calls, second.refresh_calls) == (1, 1)
    assert sorted(first.hook_calls) == [("fc1", 0), ("fc1", 1)]


@pytest.mark.parametrize("as_stream", [False, True])
def test_the_report_credits_each_expert_to_the_module_that_names_it(as_stream):
    """Writes are batched per stack, not per module: entries of two modules whose views share ONE stack (in one
    write batch) are reported per module, each with its own offset, not all under the batch's first module."""
    model = fake.FakeModel()
    first, second = model.experts(0), model.experts(1)
    second._views = dict(first._views)  # layer 1 exposes layer 0's per-expert views (same stacks)
    second.local_expert_offset = 8
    sources = {f"{E0}.linear_fc1.weight0": fake.random_weights(fake.FC1_SHAPE),
               f"{E1}.linear_fc1.weight1": fake.random_weights(fake.FC1_SHAPE),
               f"{E1}.linear_fc2.weight2": fake.random_weights(fake.FC2_SHAPE)}
    report = refit_experts(model, _stream(sources) if as_stream else sources)
    assert report.modules_touched == (E0, E1)
    assert report.experts == ((E0, (4,)), (E1, (9, 10)))
    assert (report.experts_updated, report.tensors_updated) == (3, 3)


@pytest.mark.parametrize("as_stream", [False, True])
def test_the_report_gives_local_indices_not_stack_slots(as_stream):
    """A module whose local expert i is expert 3 - i of its stacks: the report names local (global) ids."""
    model = fake.FakeModel()
    layer = model.experts(0)
    layer._views = {f"linear_{linear}.weight{index}": layer._views[f"linear_{linear}.weight{3 - index}"]
                    for linear in ("fc1", "fc2") for index in range(fake.EXPERTS)}
    sources = {f"{E0}.linear_fc1.weight0": fake.random_weights(fake.FC1_SHAPE),
               f"{E0}.linear_fc2.weight0": fake.random_weights(fake.FC2_SHAPE),
               f"{E0}.linear_fc1.weight1": fake.random_weights(fake.FC1_SHAPE)}
    report = refit_experts(model, _stream(sources) if as_stream else sources)
    assert sorted(layer.hook_calls) == [("fc1", 2), ("fc1", 3), ("fc2", 3)]  # stack slots 3 - i
    assert report.experts == ((E0, (4, 5)),) and report.experts_updated == 2


def test_stream_generator_errors_carry_the_modules_written_before():
    """An exception of the trainer's own generator (a failed broadcast) while module k+1 is buffered keeps its type
    and carries ``applied_modules`` (module k was written and refreshed), as a RefitError would."""
    model = fake.FakeModel()
    sources = fake.new_sources()

    def failing():
        for name, tensor in sources.items():
            if name.startswith(E1) and name.endswith("weight2"):  # module E0 was launched when E1's entries began
                raise ValueError("broadcast failed")
            yield name, tensor

    with pytest.raises(ValueError, match="broadcast failed") as caught:
        refit_experts(model, failing())
    assert caught.value.applied_modules == (E0,)
    assert [experts.refresh_calls for experts in model.all_experts()] == [1, 0]


def test_a_write_that_would_reach_nothing_is_refused_before_any_write():
    """A layer whose canonical bytes were released and whose kernel-stack hooks were then removed
    (``StackState.close()``): a mapping naming it and another layer is refused whole; the other layer keeps its
    bytes (the write used to fail only after the first layer was written)."""
    layer_module = pytest.importorskip("megatron_mxfp8_moe.layer")
    experts_module = pytest.importorskip("megatron_mxfp8_moe.experts")
    generator = torch.Generator().manual_seed(5)
    model = torch.nn.Module()
    model.decoder = torch.nn.Module()
    model.decoder.layers = torch.nn.ModuleList()
    for _ in range(2):
        block = torch.nn.Module()
        block.mlp = torch.nn.Module()
        fc1, fc2 = fake.random_logical(generator=generator)
        block.mlp.experts = layer_module.MXFP8ExpertLayer(
            experts_module.ExpertSet.from_bf16(fc1, fc2, "swiglu", backend="reference"), backend="reference",
            local_expert_offset=4, num_global_experts=8, release_canonical=True)
        block.mlp.experts.build_()
        model.decoder.layers.append(block)
    model.decoder.layers[1].mlp.experts.stack_state.close()
    before = model.decoder.layers[0].mlp.experts.stack_state.fc1.clone()
    batch = {f"{fake.experts_path(layer)}.linear_fc1.weight0": fake.random_weights(fake.FC1_SHAPE, generator=generator)
             for layer in (0, 1)}
    with pytest.raises(RefitError, match=rf"^refit entry '{E1}.linear_fc1.weight0': .*released.*no write hook"):
        refit_experts(model, batch)
    assert torch.equal(model.decoder.layers[0].mlp.experts.stack_state.fc1, before)
