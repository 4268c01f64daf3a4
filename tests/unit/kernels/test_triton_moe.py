"""CPU tests of the Hopper Triton MoE: support check, tile choice, routing tables, layout round trip, and the
kernels themselves under the Triton interpreter (in a subprocess, since TRITON_INTERPRET must be set before
triton is imported)."""

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.kernels.triton_moe import (
    choose_config,
    route_reference,
    routing_capacity,
    triton_moe_support,
    triton_mxfp8_moe,
)
from megatron_mxfp8_moe.layouts.hopper import (
    prepare_hopper_mxfp8_weights,
    repack_hopper_expert_,
    unpack_hopper_mxfp8_weights,
)
from megatron_mxfp8_moe.tensor import quantize_mxfp8
from megatron_mxfp8_moe.testing import random_weights

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_support_is_a_pure_function_of_capability():
    assert triton_moe_support((9, 0))[0]
    ok, reason = triton_moe_support((10, 0))
    assert not ok and "SM90" in reason and "SM100" in reason
    ok, reason = triton_moe_support(None)
    assert not ok and "CUDA" in reason
    ok, reason = triton_moe_support((9, 0), "3.2.0")
    assert not ok and "Triton" in reason
    assert triton_moe_support((9, 0), "3.6.0")[0]


@pytest.mark.parametrize("rows,block_t", [(1, 16), (16, 16), (64, 16), (256, 32), (1024, 64), (4096, 128)])
def test_config_grows_with_rows(rows, block_t):
    cfg = choose_config(rows, 4096, 1536, gated=True, topk=8, experts=128)
    assert cfg.block_t == block_t
    assert cfg == choose_config(rows, 4096, 1536, gated=True, topk=8, experts=128)  # deterministic
    for n, k in ((cfg.fc1_block_n, cfg.fc1_block_k), (cfg.fc2_block_n, cfg.fc2_block_k)):
        assert n & (n - 1) == 0 and k % 32 == 0


def test_capacity_bounds_any_routing():
    gen = torch.Generator().manual_seed(0)
    for rows, topk, experts, block_t in [(1, 8, 128, 16), (7, 2, 4, 16), (64, 8, 16, 32), (300, 4, 8, 64)]:
        max_sorted, max_blocks = routing_capacity(rows, topk, experts, block_t)
        assert max_sorted == max_blocks * block_t
        for trial in range(3):
            ids = torch.randint(0, experts, (rows, topk), generator=gen)
            if trial == 1:
                ids[:] = torch.arange(topk) % experts  # everything on a few experts
            sorted_pairs, block_expert, blocks = route_reference(
                ids, rows, experts=experts, local_expert_offset=0, block_t=block_t
            )
            assert blocks <= max_blocks
            assert sorted_pairs.numel() == max_sorted


def test_route_reference_masks_nonlocal_and_invalid_rows():
    ids = torch.tensor([[1, 2], [3, 9], [-1, 4], [1, 4], [2, 2]])
    sorted_pairs, block_expert, blocks = route_reference(ids, 4, experts=4, local_expert_offset=1, block_t=4)
    # local experts 0..3 = global 1..4; row 4 is past valid_tokens; 9 and -1 are not local
    assert blocks == 4
    assert block_expert[:4].tolist() == [0, 1, 2, 3]
    assert sorted_pairs.view(-1, 4)[:4].tolist() == [
        [0, 6, -1, -1], [1, -1, -1, -1], [2, -1, -1, -1], [5, 7, -1, -1]
    ]


def test_hopper_layout_round_trip_and_refresh_in_place():
    stack = quantize_mxfp8(random_weights((3, 136, 96)), backend="reference")
    prepared = prepare_hopper_mxfp8_weights(stack)
    assert prepared.data.data_ptr() == stack.data.data_ptr()  # zero-copy fp8 bytes
    assert prepared.scale.shape == (3, 136, 3) and prepared.scale.dtype == torch.uint8
    assert torch.equal(prepared.scale, stack.logical_scales())
    back = unpack_hopper_mxfp8_weights(prepared)
    assert torch.equal(back.data.view(torch.uint8), stack.data.view(torch.uint8))
    assert torch.equal(back.scale_bytes(), stack.scale_bytes())
    pointers = (prepared.data.data_ptr(), prepared.scale.data_ptr())
    stack.quantize_(random_weights((3, 136, 96)), backend="reference")
    prepare_hopper_mxfp8_weights(stack, prepared)
    assert (prepared.data.data_ptr(), prepared.scale.data_ptr()) == pointers
    assert torch.equal(prepared.scale, stack.logical_scales())
    with pytest.raises(MXFP8InputError, match="shape changed"):
        prepare_hopper_mxfp8_weights(quantize_mxfp8(random_weights((3, 128, 96)), backend="reference"), prepared)


def test_copied_layout_and_per_expert_write_hook():
    stack = quantize_mxfp8(random_weights((2, 64, 64)), backend="reference")
    prepared = prepare_hopper_mxfp8_weights(stack, share_data=False)
    assert prepared.data.data_ptr() != stack.data.data_ptr()
    expert = stack.expert(1)
    hook = functools.partial(repack_hopper_expert_, prepared, 1)
    expert.register_write_hook(lambda tensor, data, scale: hook(data, scale))
    expert.quantize_(random_weights((64, 64)), backend="reference")
    assert torch.equal(prepared.data.view(torch.uint8), stack.data.view(torch.uint8))
    assert torch.equal(prepared.scale, stack.logical_scales())
    with pytest.raises(MXFP8InputError, match="expert"):
        repack_hopper_expert_(prepared, 2, expert.data, expert.scale)


def test_input_errors_name_the_argument():
    fc1 = quantize_mxfp8(random_weights((4, 64, 64)), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 64, 32)), backend="reference")
    x = torch.randn(3, 64).to(torch.bfloat16)
    probs = torch.rand(3, 2)
    ids = torch.randint(0, 4, (3, 2))
    valid = torch.tensor([3], dtype=torch.int32)
    with pytest.raises(MXFP8InputError, match="fc1_stack"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="relu", valid_tokens=valid)
    with pytest.raises(MXFP8InputError, match="valid_tokens"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=3)
    with pytest.raises(MXFP8InputError, match="probs"):
        triton_mxfp8_moe(x, probs.double(), ids, fc1, fc2, activation="swiglu", valid_tokens=valid)
    with pytest.raises(MXFP8InputError, match="rows"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, rows=5)
    with pytest.raises(MXFP8InputError, match="out"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid,
                         out=torch.empty(2, 64, dtype=torch.bfloat16))


_INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels import _triton_moe_kernel as kernels
    from megatron_mxfp8_moe.kernels.reference import moe_reference
    from megatron_mxfp8_moe.kernels.triton_moe import TritonMoEConfig, route_reference, routing_capacity, triton_mxfp8_moe
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error

    torch.manual_seed(7)
    result = {}
    # routing kernel vs its torch twin (order inside an expert may differ: compare as sets per block)
    ids = torch.randint(-1, 7, (9, 3), dtype=torch.int32)
    max_sorted, max_blocks = routing_capacity(9, 3, 5, 4)
    sorted_pairs = torch.empty(max_sorted, dtype=torch.int32)
    block_expert = torch.empty(max_blocks, dtype=torch.int32)
    blocks = torch.empty(1, dtype=torch.int32)
    cursor = torch.empty(5, dtype=torch.int32)
    kernels._route_kernel[(1,)](ids, torch.tensor([8], dtype=torch.int32), sorted_pairs, block_expert, blocks,
                                cursor, 9, max_sorted, max_blocks, 1, TOPK=3, E=5, E_POW2=8, BLOCK_T=4,
                                CHUNK=16, CHUNK_B=8)
    ref_pairs, ref_blocks, ref_count = route_reference(ids, 8, experts=5, local_expert_offset=1, block_t=4)
    result["blocks"] = [int(blocks), ref_count]
    used = ref_count * 4
    result["block_expert_equal"] = torch.equal(block_expert[:ref_count], ref_blocks[:ref_count])
    result["pairs_equal"] = all(
        sorted(sorted_pairs[b * 4:(b + 1) * 4].tolist()) == sorted(ref_pairs[b * 4:(b + 1) * 4].tolist())
        for b in range(ref_count)) and bool((sorted_pairs[used:] == -1).all())
    # whole layer, both activations, an odd K (masked tail) and non-local / invalid rows
    cfg = TritonMoEConfig(16, 16, 64, 4, 1, 16, 64, 4, 1, True, True)
    for activation, hidden in (("swiglu", 96), ("squared_relu", 64), ("geglu", 64)):
        experts, inter, topk, rows = 4, 32, 2, 6
        n1 = 2 * inter if activation != "squared_relu" else inter
        fc1 = quantize_mxfp8(random_weights((experts, n1, hidden), scale=0.1), backend="reference")
        fc2 = quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.1), backend="reference")
        x = torch.randn(rows + 2, hidden).to(torch.bfloat16)
        probs, ids = random_routing(rows + 2, experts + 2, topk)
        ids = ids - 1
        out = torch.full((rows + 2, hidden), float("nan"))
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=0,
                         valid_tokens=torch.tensor([rows - 1], dtype=torch.int32), rows=rows, out=out, config=cfg)
        ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation, valid_tokens=rows - 1)
        result[activation] = dict(
            err=relative_error(out[:rows], ref),
            tail_zero=bool((out[rows - 1:rows] == 0).all()),
            untouched=bool(torch.isnan(out[rows:]).all()),
        )
        # v3: the bit-trick dequant in plain integer ops (bits_int) must equal the fp32 path exactly, and
        # FC2 split-K (fp32 partials, summed in order by the combine) must match the oracle.
        for name, extra in (("bits_int", dict(dequant="bits_int")), ("splitk", dict(fc2_split_k=2)),
                            ("bits_int_splitk3", dict(dequant="bits_int", fc2_split_k=3))):
            cfg_v = dataclasses.replace(cfg, dequant_fp32=False, **extra) if "bits" in name else dataclasses.replace(cfg, **extra)
            out_v = torch.full((rows + 2, hidden), float("nan"))
            triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=0,
                             valid_tokens=torch.tensor([rows - 1], dtype=torch.int32), rows=rows, out=out_v,
                             config=cfg_v)
            result[activation + "_" + name] = dict(
                err=relative_error(out_v[:rows], ref),
                tail_zero=bool((out_v[rows - 1:rows] == 0).all()),
                untouched=bool(torch.isnan(out_v[rows:]).all()),
                equal=bool(torch.equal(out_v[:rows], out[:rows])),
            )
    print(json.dumps(result))
    """
)


def test_kernels_under_triton_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _INTERPRETER_SCRIPT], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["blocks"][0] == result["blocks"][1]
    assert result["block_expert_equal"] and result["pairs_equal"]
    for activation in ("swiglu", "squared_relu", "geglu"):
        for suffix in ("", "_bits_int", "_splitk", "_bits_int_splitk3"):
            check = result[activation + suffix]
            assert check["err"] <= 1e-2, (activation + suffix, check)
            assert check["tail_zero"] and check["untouched"], (activation + suffix, check)
        assert result[activation + "_bits_int"]["equal"], "bit-trick dequant differs from the fp32 dequant"


def _bits_trick_reference(b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Torch twin of DQ_BITS (``_fp8_bits_to_bf16`` then two bf16 factors), on int tensors of bytes."""
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << 4)
    v = bits.to(torch.int16).view(torch.bfloat16)
    lo = ((torch.clamp(s, max=134) + 120) << 7).to(torch.int16).view(torch.bfloat16)
    hi = ((torch.clamp(s, min=134) - 7) << 7).to(torch.int16).view(torch.bfloat16)
    return (v * lo) * hi  # bf16 multiplies, rounded once each (the second is exact or overflows like cvt's)


def test_bit_trick_dequant_is_exact_for_every_byte_and_scale():
    """Every finite e4m3 byte x every E8M0 byte 0..254: the bit trick equals e4m3 * 2 ** (s - 127) rounded
    to bf16 (what the cvt path computes); the e4m3 NaN bytes are the documented exception."""
    b = torch.arange(256, dtype=torch.int32).repeat_interleave(255)
    s = torch.arange(255, dtype=torch.int32).repeat(256)
    got = _bits_trick_reference(b, s).double()
    e4m3 = b.to(torch.uint8).view(torch.float8_e4m3fn).double()
    want = (e4m3 * torch.exp2(s.double() - 127)).to(torch.bfloat16).double()
    finite = torch.isfinite(e4m3)
    assert int((~finite).sum()) == 2 * 255
    same = (got == want) | (torch.isinf(got) & torch.isinf(want) & (got.sign() == want.sign()))
    assert bool(same[finite].all()), (b[finite & ~same][:5], s[finite & ~same][:5])
    # and the e4m3 -> bf16 * 2 ** -120 step alone is exact for every finite byte
    v = (((b[::255] & 0x80) << 8) | ((b[::255] & 0x7F) << 4)).to(torch.int16).view(torch.bfloat16).double()
    ref = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double() * 2.0**-120
    ok = torch.isfinite(ref)
    assert torch.equal(v[ok], ref[ok])
