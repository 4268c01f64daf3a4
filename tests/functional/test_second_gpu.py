"""Triton launches on a GPU that is not the current device: quantize, the Hopper MoE and a device-checked refit
run on ``cuda:1`` while ``cuda:0`` is current and give the same bytes / outputs as on the current device.
Triton launches on the CURRENT device, so without a device guard these raised "Pointer argument cannot be
accessed from Triton". Needs two CUDA GPUs (marker ``multigpu``; the MoE and refit tests also a Hopper GPU)."""

import pytest
import torch

from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.kernels.triton_moe import triton_moe_support, triton_mxfp8_moe
from megatron_mxfp8_moe.tensor import quantize_mxfp8
from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error, spy_nonfinite_scans

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

OTHER = torch.device("cuda", 1)


@pytest.fixture(autouse=True)
def _current_is_cuda0():
    previous = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(previous)


def test_quantize_on_a_non_current_gpu_equals_the_current_one():
    source = random_weights((4, 256, 512), device="cuda:0")
    here = quantize_mxfp8(source, backend="triton")
    there = quantize_mxfp8(source.to(OTHER), backend="triton")
    torch.cuda.synchronize(OTHER)
    assert there.data.device == OTHER and torch.cuda.current_device() == 0
    assert torch.equal(here.data.view(torch.uint8).cpu(), there.data.view(torch.uint8).cpu())
    assert torch.equal(here.scale.cpu(), there.scale.cpu())


@pytest.mark.parametrize("tokens", [1, 64])  # the GEMV path and the routed MMA path
def test_triton_moe_on_a_non_current_gpu(tokens):
    ok, reason = triton_moe_support(torch.cuda.get_device_capability(OTHER))
    if not ok:
        pytest.skip(reason)
    experts, topk, hidden, inter = 16, 4, 512, 256
    fc1 = quantize_mxfp8(random_weights((experts, 2 * inter, hidden), scale=0.02, device=OTHER))
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.02, device=OTHER))
    x = torch.randn(tokens, hidden, device=OTHER, dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts, topk, device=OTHER)
    valid = torch.tensor([tokens], device=OTHER, dtype=torch.int32)
    out = torch.full((tokens, hidden), float("nan"), device=OTHER)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, out=out)
    torch.cuda.synchronize(OTHER)
    ref = moe_reference(x, fc1, fc2, probs, ids, "swiglu")
    assert torch.isfinite(out).all() and relative_error(out, ref) <= 1e-2


def test_device_checked_refit_on_a_non_current_gpu(monkeypatch):
    """The Triton layer's stacks are the canonical storage (no write hooks), so its refit takes the device check:
    the scan (spied) and the quantize kernels run on cuda:1; a NaN source leaves every byte as it was."""
    from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer, RefitError, refit_experts

    ok, reason = triton_moe_support(torch.cuda.get_device_capability(OTHER))
    if not ok:
        pytest.skip(reason)
    scans = spy_nonfinite_scans(monkeypatch)
    experts, hidden, ffn = 8, 256, 128
    expert_set = ExpertSet.from_bf16(random_weights((experts, 2 * ffn, hidden), device=OTHER),
                                     random_weights((experts, hidden, ffn), device=OTHER), "swiglu")
    layer = MXFP8ExpertLayer(expert_set, backend="triton")
    layer.build_()
    new_fc1 = random_weights((experts, 2 * ffn, hidden), device=OTHER)
    sources = {f"linear_fc1.weight{i}": new_fc1[i] for i in range(experts)}
    report = refit_experts(layer, sources)
    torch.cuda.synchronize(OTHER)
    assert sum(scans) == experts  # the device check ran: every source scanned once
    assert report.tensors_updated == experts
    fresh = quantize_mxfp8(new_fc1, backend="reference")
    assert torch.equal(expert_set.fc1.data.view(torch.uint8).cpu(), fresh.data.view(torch.uint8).cpu())
    bad = dict(sources)
    bad["linear_fc1.weight3"] = torch.full_like(new_fc1[3], float("nan"))
    before = expert_set.fc1.data.view(torch.uint8).clone()
    with pytest.raises(RefitError, match="weight3.*nothing was written"):
        refit_experts(layer, bad)
    assert torch.equal(expert_set.fc1.data.view(torch.uint8), before)
