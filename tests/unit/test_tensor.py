"""The canonical MXFP8Tensor: Megatron compatibility, in-place writes, hooks, release, clear errors."""

import pytest
import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from megatron_mxfp8_moe import MXFP8InputError, MXFP8Tensor, ReleasedWeightError, quantize_mxfp8
from megatron_mxfp8_moe.testing import random_weights


def _checksum(tensor: MXFP8Tensor):
    return tensor.data.view(torch.uint8).clone(), tensor.scale.view(torch.uint8).clone()


def test_is_a_megatron_mxfp8_tensor_with_its_fields():
    tensor = quantize_mxfp8(random_weights((130, 96)))
    assert isinstance(tensor, MegatronMXFP8Tensor)
    assert tensor.data.dtype == torch.float8_e4m3fn and tensor.data.shape == (130, 96)
    assert tensor.scale.dtype == torch.float8_e8m0fnu and tensor.scale.shape == (256 * 4,)
    assert tensor.backend == "triton"
    assert tensor.scale_2d().shape == (256, 4)
    assert tensor.shape == (130, 96) and tensor.size(0) == 130 and tensor.device == torch.device("cpu")


def test_quantize_in_place_keeps_addresses_and_matches_a_fresh_quantization():
    tensor = quantize_mxfp8(random_weights((3, 64, 128)))
    data_ptr, scale_ptr = tensor.data.data_ptr(), tensor.scale.data_ptr()
    new = random_weights((3, 64, 128))
    tensor.quantize_(new)
    fresh = quantize_mxfp8(new)
    assert (tensor.data.data_ptr(), tensor.scale.data_ptr()) == (data_ptr, scale_ptr)
    assert torch.equal(tensor.data.view(torch.uint8), fresh.data.view(torch.uint8))
    assert torch.equal(tensor.scale.view(torch.uint8), fresh.scale.view(torch.uint8))


def test_copy_from_megatron_tensor_with_uint8_scales():
    source = quantize_mxfp8(random_weights((64, 64)))
    megatron = MegatronMXFP8Tensor(source.data.clone(), source.scale.view(torch.uint8).clone(), "flashinfer")
    target = MXFP8Tensor.empty((64, 64))
    target.copy_(megatron)
    assert torch.equal(target.data.view(torch.uint8), source.data.view(torch.uint8))
    assert torch.equal(MXFP8Tensor.from_megatron(megatron).scale.view(torch.uint8), source.scale.view(torch.uint8))


def test_expert_views_share_the_stack_and_fire_their_own_hooks():
    stack = quantize_mxfp8(random_weights((4, 32, 64)))
    expert = stack.expert(2)
    assert expert.data.data_ptr() == stack.data[2].data_ptr()
    seen = []
    expert.register_write_hook(lambda tensor, data, scale: seen.append((tensor, data.data_ptr())))
    new = random_weights((32, 64))
    expert.quantize_(new)
    assert seen == [(expert, stack.data[2].data_ptr())]
    assert torch.equal(stack.data[2].view(torch.uint8), quantize_mxfp8(new).data.view(torch.uint8))
    assert torch.equal(stack.expert(2).dequantize(), quantize_mxfp8(new).dequantize())


def test_released_tensor_refuses_reads_and_writes_through_hooks():
    tensor = quantize_mxfp8(random_weights((32, 64)))
    mirror = {}
    tensor.register_write_hook(lambda t, data, scale: mirror.update(data=data.clone(), scale=scale.clone()))
    tensor.release_storage_()
    for read in (lambda: tensor.data, lambda: tensor.scale, tensor.dequantize, tensor.logical_scales):
        with pytest.raises(ReleasedWeightError, match="released"):
            read()
    new = random_weights((32, 64))
    tensor.quantize_(new)
    assert torch.equal(mirror["data"].view(torch.uint8), quantize_mxfp8(new).data.view(torch.uint8))


def test_release_without_a_hook_is_refused():
    with pytest.raises(MXFP8InputError, match="no write hook"):
        quantize_mxfp8(random_weights((32, 64))).release_storage_()


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.full((32, 64), float("nan")), "non-finite"),
        (torch.randn(32, 96), "shape"),
        (torch.randn(64, 32).T, "contiguous"),
        (torch.ones(32, 64, dtype=torch.int64), "dtype"),
        (torch.randn(32, 64, device="meta"), "must be on"),
    ],
)
def test_bad_sources_change_nothing(bad, match):
    tensor = quantize_mxfp8(random_weights((32, 64)))
    before = _checksum(tensor)
    fired = []
    tensor.register_write_hook(lambda *args: fired.append(1))
    with pytest.raises((MXFP8InputError, NotImplementedError, RuntimeError), match=match):
        tensor.quantize_(bad)
    after = _checksum(tensor)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]) and not fired


def test_bad_copy_sources_change_nothing():
    tensor = quantize_mxfp8(random_weights((32, 64)))
    before = _checksum(tensor)
    good = quantize_mxfp8(random_weights((32, 64)))
    nan_scale = MegatronMXFP8Tensor(good.data, torch.full_like(good.scale.view(torch.uint8), 255), "triton")
    short_scale = MegatronMXFP8Tensor(good.data, good.scale.view(torch.uint8)[:-1], "triton")
    nan_data = MegatronMXFP8Tensor(
        torch.full((32, 64), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn), good.scale, "triton"
    )
    both = MegatronMXFP8Tensor(nan_data.data, nan_scale.scale, "triton")  # the data error is reported first
    for bad, match in [(nan_scale, "NaN byte"), (short_scale, "swizzled bytes"), (nan_data, "non-finite"),
                       (both, r"other\.data: holds non-finite"), (torch.randn(32, 64), "expected an MXFP8Tensor")]:
        with pytest.raises(MXFP8InputError, match=match):
            tensor.copy_(bad)
    after = _checksum(tensor)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_constructor_rejects_mismatched_scales():
    good = quantize_mxfp8(random_weights((32, 64)))
    with pytest.raises(MXFP8InputError, match="do not match"):
        MXFP8Tensor(good.data, good.scale[:-4])
    with pytest.raises(MXFP8InputError, match="dtype"):
        MXFP8Tensor(good.data.view(torch.uint8), good.scale)


def test_quantize_experts_writes_only_the_named_experts_and_runs_their_view_hooks():
    stack = quantize_mxfp8(random_weights((5, 32, 64)))
    views = [stack.expert(i) for i in range(5)]
    fired = []
    for index, view in enumerate(views):
        view.register_write_hook(lambda tensor, data, scale, index=index: fired.append(index))
    before = _checksum(stack)
    sources = [random_weights((32, 64)), random_weights((32, 64))]
    stack.quantize_experts_([3, 1], sources)
    assert fired == [3, 1]
    for index, source in ((3, sources[0]), (1, sources[1])):
        assert torch.equal(stack.data[index].view(torch.uint8), quantize_mxfp8(source).data.view(torch.uint8))
        assert torch.equal(stack.scale[index].view(torch.uint8), quantize_mxfp8(source).scale.view(torch.uint8))
    for index in (0, 2, 4):
        assert torch.equal(stack.data[index].view(torch.uint8), before[0][index])


def test_quantize_experts_validates_every_source_before_writing():
    stack = quantize_mxfp8(random_weights((3, 32, 64)))
    before = _checksum(stack)
    bad = random_weights((32, 64))
    bad[4, 7] = float("inf")
    with pytest.raises(MXFP8InputError, match=r"sources\[expert 2\].*non-finite"):
        stack.quantize_experts_([0, 2], [random_weights((32, 64)), bad])
    with pytest.raises(MXFP8InputError, match="distinct"):
        stack.quantize_experts_([1, 1], [random_weights((32, 64))] * 2)
    after = _checksum(stack)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_whole_stack_write_fans_out_to_live_view_hooks():
    stack = quantize_mxfp8(random_weights((3, 32, 64)))
    fired = []
    views = [stack.expert(i) for i in range(3)]
    for index, view in enumerate(views):
        view.register_write_hook(lambda tensor, data, scale, index=index: fired.append((index, data.data_ptr())))
    stack.quantize_(random_weights((3, 32, 64)))
    assert fired == [(index, stack.data[index].data_ptr()) for index in range(3)]
