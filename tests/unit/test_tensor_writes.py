"""MXFP8Tensor write paths: stack hooks see per-expert writes, release is consistent and refuses lost writes,
rebinding ``data``/``scale`` is checked, the constructor needs contiguous storage, copy_ writes zero padding bytes."""

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe import MXFP8InputError, MXFP8Tensor, ReleasedWeightError, quantize_mxfp8, refit_experts
from megatron_mxfp8_moe.format.swizzle import swizzle_scales
from megatron_mxfp8_moe.testing import random_weights

U8 = torch.uint8


def _bytes(tensor):
    return tensor.data.view(U8).clone(), tensor.scale.view(U8).clone()


def _same(first, second):
    return all(torch.equal(a, b) for a, b in zip(first, second))


# -- stack hooks see every write ------------------------------------------------------------------------


def test_stack_hooks_run_after_per_expert_writes_with_the_whole_stack():
    stack = quantize_mxfp8(random_weights((3, 32, 64)))
    views = [stack.expert(i) for i in range(3)]
    events = []
    views[1].register_write_hook(lambda tensor, data, scale: events.append(("view", tuple(data.shape))))
    stack.register_write_hook(
        lambda tensor, data, scale: events.append(("stack", tensor is stack, data.view(U8).clone(), scale.view(U8).clone()))
    )
    writes = [
        lambda: views[1].quantize_(random_weights((32, 64))),
        lambda: views[2].copy_(quantize_mxfp8(random_weights((32, 64)))),
        lambda: stack.quantize_experts_([2, 0], [random_weights((32, 64)), random_weights((32, 64))]),
    ]
    for write in writes:
        events.clear()
        write()
        stack_events = [event for event in events if event[0] == "stack"]
        assert len(stack_events) == 1 and stack_events[0][1]  # once per write call, on the stack itself
        assert _same(stack_events[0][2:], _bytes(stack))  # the whole stack [E, M, K] after the write
    events.clear()
    views[1].quantize_(random_weights((32, 64)))
    assert [event[0] for event in events] == ["view", "stack"]  # the expert's view hooks first
    events.clear()
    stack.quantize_(random_weights((3, 32, 64)))
    assert [event[0] for event in events] == ["view", "stack"]  # a whole write: once each, as before


def test_write_through_one_view_runs_the_hooks_of_other_views_of_the_same_expert():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    hooked, other = stack.expert(1), stack.expert(1)
    seen = []
    hooked.register_write_hook(lambda tensor, data, scale: seen.append((tensor, data.view(U8).clone())))
    new = random_weights((32, 64))
    other.quantize_(new)
    assert len(seen) == 1 and seen[0][0] is hooked
    assert torch.equal(seen[0][1], quantize_mxfp8(new).data.view(U8))
    assert hooked.has_write_hooks() and other.has_write_hooks() and not stack.expert(0).has_write_hooks()


class _StackHooked(torch.nn.Module):
    """The refit contract over two stacks whose DERIVED copies are kept by hooks on the stacks themselves."""

    def __init__(self):
        super().__init__()
        self.num_local_experts, self.local_expert_offset = 2, 0
        self.stacks = {linear: quantize_mxfp8(random_weights((2, 64, 64))) for linear in ("fc1", "fc2")}
        self.derived = {linear: stack.data.view(U8).clone() for linear, stack in self.stacks.items()}
        for linear, stack in self.stacks.items():
            stack.register_write_hook(lambda tensor, data, scale, linear=linear: self.derived[linear].copy_(data.view(U8)))
        self.views = {f"linear_{linear}.weight{i}": stack.expert(i) for linear, stack in self.stacks.items()
                      for i in range(2)}

    def mxfp8_weights(self):
        return dict(self.views)


def test_refit_of_single_experts_reaches_hooks_on_the_stack():
    module = _StackHooked()
    refit_experts(module, {"linear_fc1.weight0": random_weights((64, 64)), "linear_fc2.weight1": random_weights((64, 64))})
    for linear, stack in module.stacks.items():
        assert torch.equal(module.derived[linear], stack.data.view(U8))


# -- release: consistent, and refused where a later write would be lost --------------------------------


def test_release_of_a_stack_with_own_hooks_and_live_views_is_refused():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    views = [stack.expert(i) for i in range(2)]
    stack.register_write_hook(lambda *args: None)
    with pytest.raises(MXFP8InputError, match="own write hooks and live expert views"):
        stack.release_storage_()
    assert not stack.is_released and not any(view.is_released for view in views)


def test_released_stack_with_own_hooks_takes_whole_writes_and_refuses_single_experts():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    seen = []
    stack.register_write_hook(lambda tensor, data, scale: seen.append(data.view(U8).clone()))
    stack.release_storage_()  # no views: only whole-stack writes or quantize_experts_ can come
    with pytest.raises(ReleasedWeightError, match="whole stack"):
        stack.quantize_experts_([1], [random_weights((32, 64))])
    assert seen == []
    new = random_weights((2, 32, 64))
    stack.quantize_experts_([0, 1], [new[0], new[1]])
    stack.quantize_(new)
    assert len(seen) == 2 and all(torch.equal(data, quantize_mxfp8(new).data.view(U8)) for data in seen)


def test_write_into_released_storage_that_would_reach_no_hook_raises():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    views = [stack.expert(i) for i in range(2)]
    removers = [view.register_write_hook(lambda *args: None) for view in views]
    stack.release_storage_()
    removers[1]()
    views[0].quantize_(random_weights((32, 64)))  # still hooked: fine
    for write in (lambda: views[1].quantize_(random_weights((32, 64))),
                  lambda: stack.quantize_experts_([0, 1], [random_weights((32, 64))] * 2),
                  lambda: stack.quantize_(random_weights((2, 32, 64)))):
        with pytest.raises(ReleasedWeightError, match=r"expert\(s\) \[1\] have no write hook"):
            write()


def test_view_released_while_its_stack_keeps_storage_writes_into_the_stack():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    view = stack.expert(0)
    seen = []
    view.register_write_hook(lambda tensor, data, scale: seen.append(data.data_ptr()))
    view.release_storage_()
    with pytest.raises(ReleasedWeightError):
        _ = view.data
    new = random_weights((32, 64))
    view.quantize_(new)
    expected = quantize_mxfp8(new)
    assert torch.equal(stack.data[0].view(U8), expected.data.view(U8))
    assert torch.equal(stack.scale[0].view(U8), expected.scale.view(U8))
    assert seen == [stack.data[0].data_ptr()]


def test_releasing_a_stack_releases_its_live_views_and_writes_reach_their_hooks():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    views = [stack.expert(i) for i in range(2)]
    seen = {}
    for index, view in enumerate(views):
        view.register_write_hook(lambda tensor, data, scale, index=index: seen.update({index: data.view(U8).clone()}))
    stack.release_storage_()
    assert all(view.is_released for view in views)
    with pytest.raises(ReleasedWeightError):
        _ = views[1].scale
    new = random_weights((32, 64))
    views[1].quantize_(new)
    assert list(seen) == [1] and torch.equal(seen[1], quantize_mxfp8(new).data.view(U8))


# -- data / scale setters ------------------------------------------------------------------------------


def test_setters_check_rebound_storage_and_leave_the_tensor_unchanged():
    tensor = quantize_mxfp8(random_weights((64, 64)))
    before = _bytes(tensor)
    good_scale = tensor.scale.view(U8).clone()
    bad = [
        ("data", torch.zeros(3, 5), "dtype"),
        ("data", torch.zeros(64, 32, dtype=U8).view(torch.float8_e4m3fn), "shape"),
        ("data", torch.zeros(128, 64, dtype=U8).view(torch.float8_e4m3fn)[::2], "contiguous"),
        ("data", torch.zeros(64, 64, dtype=U8, device="meta").view(torch.float8_e4m3fn), "must be on"),
        ("data", None, "expected a torch.Tensor"),
        ("scale", good_scale[:-1], "do not match"),
        ("scale", good_scale.to(torch.int32), "dtype"),
        ("scale", torch.zeros(2 * good_scale.numel(), dtype=U8)[::2], "contiguous"),
        ("scale", torch.zeros_like(good_scale, device="meta"), "must be on"),
    ]
    for field, value, match in bad:
        with pytest.raises(MXFP8InputError, match=match):
            setattr(tensor, field, value)
    assert _same(_bytes(tensor), before)
    assert tensor.data.shape == (64, 64) and tensor.scale.dtype == torch.float8_e8m0fnu


def test_megatron_style_rebind_into_a_new_stack_is_kept_and_written_through():
    # InferenceGroupedMLP._build_concatenated_mxfp8_weights: w.data = stacked_data[i]; w.scale = stacked_scale[i]
    weights = [quantize_mxfp8(random_weights((64, 64))) for _ in range(2)]
    stacked_data = torch.stack([w.data for w in weights]).contiguous()
    stacked_scale = torch.stack([w.scale.view(U8) for w in weights]).contiguous()  # uint8, like FlashInfer's
    for i, w in enumerate(weights):
        w.data = stacked_data[i]
        w.scale = stacked_scale[i]
    assert weights[1].data.data_ptr() == stacked_data[1].data_ptr()
    assert weights[1].scale.data_ptr() == stacked_scale[1].data_ptr() and weights[1].scale.dtype == torch.float8_e8m0fnu
    new = random_weights((64, 64))
    weights[1].quantize_(new)
    assert torch.equal(stacked_data[1].view(U8), quantize_mxfp8(new).data.view(U8))
    assert torch.equal(stacked_scale[1], quantize_mxfp8(new).scale.view(U8))


def test_storage_shared_with_a_stack_cannot_be_rebound():
    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    view = stack.expert(0)
    with pytest.raises(MXFP8InputError, match="expert 0 of a stack"):
        view.data = view.data.clone()
    with pytest.raises(MXFP8InputError, match="expert views"):
        stack.scale = stack.scale.clone()
    view.data = stack.data[0]  # the same storage: allowed
    assert view.data.data_ptr() == stack.data[0].data_ptr()


# -- constructor layout --------------------------------------------------------------------------------


def test_constructor_requires_contiguous_data_and_scale():
    transposed = torch.zeros(64, 64, dtype=U8).t().view(torch.float8_e4m3fn)
    with pytest.raises(MXFP8InputError, match="data: must be contiguous"):
        MXFP8Tensor(transposed, torch.zeros(512, dtype=U8))
    strided_scale = torch.zeros(2 * 2 * 512, dtype=U8)[::2]
    with pytest.raises(MXFP8InputError, match="scale: must be contiguous"):
        MXFP8Tensor(torch.zeros(2, 64, 64, dtype=U8).view(torch.float8_e4m3fn), strided_scale)
    stack = MXFP8Tensor(torch.zeros(2, 64, 64, dtype=U8).view(torch.float8_e4m3fn), torch.zeros(2 * 512, dtype=U8))
    assert stack.expert(1).data.is_contiguous() and stack.scale.shape == (2, 512)


# -- padding bytes of MXFP8 sources --------------------------------------------------------------------


def _dirty_padding(shape, experts_dirty=None):
    """A Megatron MXFP8Tensor of ``shape`` with its padding scale bytes set to 0x7F (in ``experts_dirty``)."""
    source = quantize_mxfp8(random_weights(shape))
    rows, cols = shape[-2], shape[-1] // 32
    padding = swizzle_scales(torch.ones(rows, cols, dtype=U8)) == 0
    scale = source.scale.view(U8).clone().reshape(-1, padding.numel())
    for expert in (range(scale.shape[0]) if experts_dirty is None else experts_dirty):
        scale[expert, padding] = 0x7F
    return MegatronMXFP8Tensor(source.data.clone(), scale.reshape(source.scale.shape), "triton"), int(padding.sum())


@pytest.mark.parametrize("shape, experts_dirty", [((100, 64), None), ((3, 100, 96), (1,))])
def test_copy_writes_zero_padding_whatever_the_source_holds(shape, experts_dirty):
    """Padding bytes of the 128x4 layout are never read for a real row or column; copy_ writes them as zero (as
    every quantizer here does), so the canonical bytes equal those of a clean source with the same logical bytes."""
    dirty, padding_bytes = _dirty_padding(shape, experts_dirty)
    assert padding_bytes > 0
    target = MXFP8Tensor.empty(shape)
    target.copy_(dirty)
    padding = swizzle_scales(torch.ones(shape[-2], shape[-1] // 32, dtype=U8)) == 0
    cleaned = dirty.scale.view(U8).clone().reshape(-1, padding.numel())
    cleaned[:, padding] = 0
    clean = MXFP8Tensor.empty(shape).copy_(MegatronMXFP8Tensor(dirty.data.clone(), cleaned.reshape(dirty.scale.shape),
                                                               "triton"))
    assert _same(_bytes(target), _bytes(clean))
    assert not bool(target.scale.view(U8).reshape(-1, padding.numel())[:, padding].any())
    assert torch.equal(target.data.view(U8), dirty.data.view(U8))
    assert not torch.equal(cleaned.reshape(-1), dirty.scale.view(U8).reshape(-1))  # the source was dirty


def test_padding_check_still_names_nan_scale_bytes():
    source = quantize_mxfp8(random_weights((100, 64)))
    scale = source.scale.view(U8).clone()
    scale[0] = 255  # logical byte (row 0, col 0)
    with pytest.raises(MXFP8InputError, match="NaN byte"):
        MXFP8Tensor.empty((100, 64)).copy_(MegatronMXFP8Tensor(source.data, scale, "triton"))


# -- copies, grads, rebinds of hooked weights, mixed-dtype batches, degenerate inputs (session 52 review) -------------


def test_deepcopy_of_an_unhooked_stack_is_independent_and_keeps_its_views_linked():
    import copy

    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    views = [stack.expert(i) for i in range(2)]
    original = _bytes(stack)
    twin_stack, twin_views = copy.deepcopy((stack, views))
    assert twin_views[0].parent[0] is twin_stack and twin_stack.data.data_ptr() != stack.data.data_ptr()
    assert _same(_bytes(twin_stack), original)
    seen = []
    twin_views[1].register_write_hook(lambda tensor, data, scale: seen.append(tensor))
    twin_stack.quantize_(random_weights((2, 32, 64)))  # reaches the twin's views, not the original's
    assert seen == [twin_views[1]] and _same(_bytes(stack), original) and not _same(_bytes(twin_stack), original)
    twin_views[0].quantize_(random_weights((32, 64)))  # a view's write lands in its own (copied) stack
    assert torch.equal(twin_views[0].data.view(U8), twin_stack.data[0].view(U8)) and _same(_bytes(stack), original)


def test_deepcopy_of_a_hooked_weight_is_refused():
    import copy

    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    view = stack.expert(0)
    view.register_write_hook(lambda *args: None)
    for tensor in (stack, view):
        with pytest.raises(MXFP8InputError, match="deepcopy.*write hooks"):
            copy.deepcopy(tensor)


def test_deepcopy_of_a_layer_before_its_build_is_independent_and_after_a_hooked_build_refused():
    import copy

    from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer

    layer = MXFP8ExpertLayer(ExpertSet.from_bf16(random_weights((2, 64, 64)), random_weights((2, 64, 32)), "swiglu"),
                             backend="reference")
    x, probs = random_weights((4, 64)).bfloat16(), torch.rand(4, 1)
    routing = torch.zeros(4, 1, dtype=torch.int64)
    twin = copy.deepcopy(layer)
    before = layer.forward_routed(x, probs, routing).clone()
    twin.build_()
    next(iter(twin.mxfp8_weights().values())).quantize_(random_weights((64, 64)))
    assert torch.equal(layer.forward_routed(x, probs, routing), before)
    assert not torch.equal(twin.forward_routed(x, probs, routing), before)
    with pytest.raises(MXFP8InputError, match="deepcopy"):
        copy.deepcopy(twin)  # built: the reference stack is repacked through hooks on its weights


def test_a_source_that_requires_grad_leaves_the_stored_bytes_out_of_autograd():
    source = torch.nn.Parameter(random_weights((32, 64)))
    weight = MXFP8Tensor.empty((32, 64))
    weight.quantize_(source, backend="reference")
    assert not weight.data.requires_grad and weight.data.grad_fn is None
    assert not quantize_mxfp8(source, backend="reference").data.requires_grad
    assert _same(_bytes(weight), _bytes(quantize_mxfp8(source.detach())))


def test_rebinding_a_hooked_weight_is_refused():
    weight = quantize_mxfp8(random_weights((32, 64)))
    weight.register_write_hook(lambda *args: None)
    other = quantize_mxfp8(random_weights((32, 64)))
    before = _bytes(weight)
    for field in ("data", "scale"):
        with pytest.raises(MXFP8InputError, match=f"{field}: .*write hooks"):
            setattr(weight, field, getattr(other, field))
    assert _same(_bytes(weight), before)


def test_a_batch_with_a_dtype_the_quantizer_cannot_take_writes_nothing(monkeypatch):
    """FlashInfer's quantizer takes no fp32: a [bf16, fp32] batch is refused before expert 0 is written (the per-expert
    write loop used to stop after it). The backend is only resolved here, never run (it needs CUDA)."""
    import megatron_mxfp8_moe.tensor as tensor_module
    from megatron_mxfp8_moe.quant.backends import QuantBackend

    stack = quantize_mxfp8(random_weights((2, 32, 64)))
    before = _bytes(stack)
    monkeypatch.setattr(tensor_module, "resolve_quant_backend", lambda name, device: QuantBackend.FLASHINFER)
    sources = [random_weights((32, 64)), random_weights((32, 64), dtype=torch.float32)]
    with pytest.raises(MXFP8InputError, match=r"sources\[expert 1\]: the flashinfer quantizer takes bf16/fp16"):
        stack.quantize_experts_([0, 1], sources, backend="flashinfer")
    with pytest.raises(MXFP8InputError, match="source: the flashinfer quantizer"):
        stack.expert(1).quantize_(sources[1], backend="flashinfer")
    assert _same(_bytes(stack), before)


@pytest.mark.parametrize("shape", [(0, 32), (4, 0), (2, 0, 32), (2, 4, 0)])
def test_empty_matrices_are_refused(shape):
    with pytest.raises(MXFP8InputError, match="M and K must be positive"):
        MXFP8Tensor.empty(shape)
    with pytest.raises(MXFP8InputError, match="M and K must be positive"):
        quantize_mxfp8(torch.zeros(shape))


def test_non_tensor_fields_and_bool_indices_get_clear_errors():
    with pytest.raises(MXFP8InputError, match="data: expected a torch.Tensor, got list"):
        MXFP8Tensor([1, 2], torch.zeros(512, dtype=U8))
    megatron = MegatronMXFP8Tensor(torch.zeros(4, 64).to(torch.float8_e4m3fn), None, "triton")
    with pytest.raises(MXFP8InputError, match="other.scale: expected a torch.Tensor, got NoneType"):
        MXFP8Tensor.from_megatron(megatron)
    with pytest.raises(MXFP8InputError, match="index must be an int, got bool"):
        quantize_mxfp8(random_weights((2, 32, 64))).expert(True)
