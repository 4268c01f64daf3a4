"""The Hopper Triton MXFP8 MoE on a GPU: accuracy vs a float64 oracle, every row written, CUDA-graph replay.

The kernels read the canonical MXFP8Tensor stacks in place (fp8 bytes and 128x4-swizzled scales): no prepared
layout, no hook. v4 tests first (they gate default changes): the sign-extending dequant ("sx", bit-identical to
the cvt path), BLOCK_K 256 tiles (scales pipelined with the weights) and the small-T direct path (no route
kernel, FC2 fused with the combine), each against the float64 oracle and under CUDA-graph replay.
"""

import dataclasses

import pytest
import torch

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.kernels import triton_policy, triton_tiles
from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.kernels.triton_moe import (
    TILES,
    TritonMoEConfig,
    choose_config,
    replace_launch_tiles,
    same_bits_as_triton_form,
    triton_form,
    triton_moe_support,
    triton_mxfp8_moe,
)
from megatron_mxfp8_moe.tensor import quantize_mxfp8
from megatron_mxfp8_moe.testing import (
    capture_cuda_graph,
    random_expert_stacks,
    random_routing,
    random_weights,
    relative_error,
)

pytestmark = pytest.mark.gpu

BOUND = 1e-2  # bf16 activations and bf16 intermediates against a float64 oracle


@pytest.fixture(autouse=True)
def _hopper_only():
    ok, reason = triton_moe_support(torch.cuda.get_device_capability() if torch.cuda.is_available() else None)
    if not ok:
        pytest.skip(reason)


def _layer(experts, hidden, inter, activation, scale=0.02):
    return random_expert_stacks(experts, hidden, inter, activation, scale=scale, device="cuda")


def _reference(x, fc1, fc2, probs, ids, activation, offset, valid, rows):
    ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation,
                        local_expert_offset=offset, valid_tokens=valid)  # float64, on the GPU
    torch.cuda.empty_cache()
    return ref


# v4 variants (bench/moe_layer.py CANDIDATES holds the same tiles): "sx" dequant on the default tiles must equal the
# cvt path bit for bit; BLOCK_K 256 tiles (with cvt and sx) and the direct small-T path (no route kernel, FC2 fused
# with the combine, probability applied before FC2: different rounding, so oracle-checked only).
V4 = {
    "sx": None,  # the default tiles with dequant="sx"
    "k256": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3),
    "k256_sx": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx"),
    "m32k_sx": TritonMoEConfig(32, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx"),
    "d1": TritonMoEConfig(16, 32, 256, 2, 4, 32, 256, 2, 5, direct=True),
    "d1_sx": TritonMoEConfig(16, 32, 256, 2, 4, 32, 256, 2, 5, dequant="sx", direct=True),
    "d3_sx": TritonMoEConfig(16, 16, 256, 1, 4, 16, 256, 1, 5, dequant="sx", direct=True),
    # the tiles choose_config picks (gated): T <= 4 direct; 16-24 pairs per expert BLOCK_K 256 with a 3-stage FC2
    # since run 7 ("m32l_sx"; run 5's "m32j_sx" had 2)
    "d4_sx": TILES["d4_sx"],
    "m32j_sx": TritonMoEConfig(32, 64, 256, 4, 2, 128, 256, 8, 2, dequant="sx"),
    "m32l_sx": TILES["m32l_sx"],
    # register-capped candidates (bench/moe_layer.py): ptxas spills a few bytes; results must not change
    "s16k2_sx_r": dataclasses.replace(TILES["s16k_sx"], fc1_stages=2, fc1_maxnreg=168, fc2_maxnreg=128),
    "m32l2_sx_r": dataclasses.replace(TILES["m32l_sx"], fc1_maxnreg=168, fc2_stages=2, fc2_maxnreg=128),
    "s16k_sx_r": TILES["s16k_sx_r"],  # the default at 1-8 pairs per expert since session 5
    # v6 GEMV small-T tiles (bench/moe_layer.py "g*"): CUDA-core block sums instead of MMAs, FC2 per pair + the
    # combine kernel; stages 1 (register loads) or 3 (cp.async). The fused-FC2 form ("g16c*") was removed after
    # session 5's sweep (slower everywhere); its GPU tests had passed.
    "g16p": TILES["g16p"],  # g16p3 / g32p / g16p: the defaults up to about one pair per expert since session 5
    "g16p3": TILES["g16p3"],
    "g32p": TILES["g32p"],
    "g32p3": TritonMoEConfig(16, 32, 512, 8, 3, 16, 256, 2, 3, direct=True, gemv=True),
    # v7 routed GEMV (session 6): pairs sorted by expert, then the GEMV per pair. q1 is the default near one pair
    # per expert; q1s3 / q1b are bench/moe_layer.py candidates.
    "q1": TILES["q1"],
    "q1s3": TritonMoEConfig(1, 16, 256, 4, 3, 32, 256, 4, 3, gemv=True),
    "q1b": TritonMoEConfig(1, 16, 512, 4, 1, 32, 256, 4, 1, gemv=True),
    # v8 "sx_auto" dequant (session 7): one bf16 multiply per weight pair where the tile's scale rows allow it; must
    # equal the cvt path bit for bit, like "sx"
    "s16k_sa": dataclasses.replace(TILES["s16k_sx_r"], dequant="sx_auto"),
    "m32l_sa": dataclasses.replace(TILES["m32l_sx"], dequant="sx_auto"),
    "l64b_sa": dataclasses.replace(TILES["l64b"], dequant="sx_auto"),
    "l128a_sa": dataclasses.replace(TILES["l128a"], dequant="sx_auto"),
    "l128w_sa": TILES["l128w_sa"],  # session 10: 128 FC1 rows (capped at 128 registers) / 256-token tiles
    "x256w_sa": TILES["x256w_sa"],
}
SX_AUTO = ("s16k_sa", "m32l_sa", "l64b_sa", "l128a_sa", "l128w_sa", "x256w_sa")
GEMV = ("g16p", "g16p3", "g32p", "g32p3")
ROUTED_GEMV = ("q1", "q1s3", "q1b")
_DECODE1, _DECODE4, _BIG16, _ODD7, _ODD33 = (128, 8, 2048, 768, 1), (128, 8, 2048, 768, 4), (32, 8, 4096, 1536, 16), \
    (6, 3, 96, 64, 7), (5, 2, 160, 96, 33)
V4_CASES = [(v, c) for v in ("sx", "k256", "k256_sx", "m32k_sx", "m32j_sx") for c in (_DECODE4, _BIG16, _ODD33)] + \
    [(v, c) for v in ("d1", "d1_sx", "d3_sx", "d4_sx") for c in (_DECODE1, _DECODE4, _ODD7)] + \
    [("d4_sx", (128, 8, 4096, 1536, 1)), ("m32j_sx", (128, 8, 2048, 768, 256))] + \
    [("m32l_sx", c) for c in (_DECODE4, _BIG16, _ODD33, (128, 8, 2048, 768, 256), (128, 8, 4096, 1536, 256))] + \
    [(v, c) for v in ("s16k2_sx_r", "m32l2_sx_r", "s16k_sx_r") for c in (_DECODE4, _BIG16, _ODD33)] + \
    [(v, c) for v in GEMV for c in (_DECODE1, _ODD7, _BIG16)] + [("g16p", (128, 8, 4096, 1536, 1))] + \
    [(v, c) for v in ROUTED_GEMV for c in (_DECODE1, _ODD7, _BIG16, _ODD33, (128, 8, 2048, 768, 16))] + \
    [(v, c) for v in SX_AUTO for c in (_ODD7, _BIG16, _ODD33, (128, 8, 2048, 768, 256))]


def _mma_config(tokens, hidden, inter, topk, experts, gated=True):
    """choose_config, or where it now picks a GEMV tile the MMA tiles it picked before (d4_sx up to 0.25
    pairs per expert, s16k_sx_r above): the dequant variants these tests compare exist on the MMA path only."""
    base = choose_config(tokens, hidden, inter, gated=gated, topk=topk, experts=experts)
    if not (base.gemv or base.planes or base.fc1_f8x2 or base.dequant == "f8x2"):  # the plane / f8x2 tiles and
        return base  # the Gluon twins (since session 34 the picks from one pair per expert) have no such variants
    return TILES["d4_sx"] if tokens * topk <= 0.25 * experts else TILES["s16k_sx_r"]


def _moe_inputs(experts, topk, hidden, inter, tokens, activation="swiglu"):
    fc1, fc2 = _layer(experts, hidden, inter, activation)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts + 5, topk, device="cuda")
    ids = ids - 2  # ids below the local range (offset 3) and -1s; none above it (the largest, E + 2, is local)
    ids[::3, 0] = -1
    valid_rows = max(1, tokens - 2)
    return fc1, fc2, x, probs, ids, valid_rows


@pytest.mark.parametrize("variant,case", V4_CASES, ids=[f"{v}-{c[2]}x{c[3]}-T{c[4]}" for v, c in V4_CASES])
def test_v4_variants(variant, case):
    experts, topk, hidden, inter, tokens = case
    base = _mma_config(tokens, hidden, inter, topk, experts)
    cvt = dataclasses.replace(base, dequant="cvt", direct=False)
    cfg = dataclasses.replace(cvt, dequant="sx") if V4[variant] is None else V4[variant]
    if variant in SX_AUTO:
        cvt = dataclasses.replace(cfg, dequant="cvt")  # the same tile: bit-for-bit comparable
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, inter, tokens)
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    outs = {}
    for name, c in (("cvt", cvt), (variant, cfg)):
        out = torch.full((tokens + 1, hidden), float("nan"), device="cuda", dtype=torch.float32)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", local_expert_offset=3,
                         valid_tokens=valid, out=out, rows=tokens, config=c)
        torch.cuda.synchronize()
        assert torch.isfinite(out[:tokens]).all(), f"{name}: some output rows were not written"
        assert torch.isnan(out[tokens:]).all(), f"{name}: wrote past rows"
        outs[name] = out[:tokens]
    ref = _reference(x, fc1, fc2, probs, ids, "swiglu", 3, valid_rows, tokens)
    assert relative_error(outs[variant], ref) <= BOUND
    assert outs[variant][valid_rows:].abs().max().item() == 0 if valid_rows < tokens else True
    if V4[variant] is None or variant in SX_AUTO:
        assert torch.equal(outs[variant], outs["cvt"]), f"{variant} dequant differs from the cvt path"


@pytest.mark.parametrize("variant", ["g16p", "g16p3", "q1"])
@pytest.mark.parametrize("experts,topk,hidden,inter,tokens", [_DECODE4, _ODD7])
def test_gemv_squared_relu(variant, experts, topk, hidden, inter, tokens):
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, 2 * inter, tokens, "squared_relu")
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    out = torch.full((tokens + 1, hidden), float("nan"), device="cuda", dtype=torch.float32)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu", local_expert_offset=3,
                     valid_tokens=valid, out=out, rows=tokens, config=V4[variant])
    torch.cuda.synchronize()
    assert torch.isfinite(out[:tokens]).all() and torch.isnan(out[tokens:]).all()
    ref = _reference(x, fc1, fc2, probs, ids, "squared_relu", 3, valid_rows, tokens)
    assert relative_error(out[:tokens], ref) <= BOUND
    assert out[valid_rows:tokens].abs().max().item() == 0 if valid_rows < tokens else True


def _graph_replay_of(config_for, tokens: int, valid_counts, activation: str = "swiglu",
                     shape=(128, 8, 2048, 768)) -> None:
    """A call of ``shape`` (experts, topk, H, I; by default qwen3-30b-a3b's) with tiles ``config_for(tokens, hidden,
    inter, topk, experts)``, captured once and replayed with new routing and ``valid_counts`` (``_check_graph_replay``)."""
    experts, topk, hidden, inter = shape
    cfg = config_for(tokens, hidden, inter, topk, experts)  # before CUDA: the host-side check reaches it
    fc1, fc2 = _layer(experts, hidden, inter, activation)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    out = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)

    def step():
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, valid_tokens=valid, out=out, config=cfg)

    _check_graph_replay(step, x, probs, ids, valid, out, fc1, fc2, experts, topk, tokens, valid_counts, activation)


@pytest.mark.parametrize("variant", ["d1_sx", "d4_sx", "k256_sx", "g16p3", "g32p", "q1"])
def test_v4_cuda_graph_replay(variant):
    _graph_replay_of(lambda *shape: V4[variant], 4, (4, 2, 1))


def test_v4_refit_reaches_the_kernel_without_hooks():
    """A refit of the canonical stacks (quantize_experts_ / copy_) changes what the kernel reads, no hook."""
    experts, topk, hidden, inter, tokens = 16, 4, 256, 128, 8
    fc1, fc2 = _layer(experts, hidden, inter, "swiglu")
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    before = triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid).clone()
    fc1.quantize_experts_(list(range(experts)), list(random_weights((experts, 2 * inter, hidden), scale=0.02,
                                                                     device="cuda").unbind(0)))
    fc2.copy_(quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.02, device="cuda")))
    after = triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid)
    torch.cuda.synchronize()
    assert not torch.equal(before, after)
    assert relative_error(after, _reference(x, fc1, fc2, probs, ids, "swiglu", 0, tokens, tokens)) <= BOUND


# (experts, topk, hidden, inter, tokens): the two Qwen3 layers at decode and prefill sizes, and odd shapes.
CASES = [
    (128, 8, 2048, 768, 1),
    (128, 8, 2048, 768, 64),
    (128, 8, 2048, 768, 1024),
    (128, 8, 4096, 1536, 16),
    (128, 8, 4096, 1536, 300),
    (128, 8, 2048, 768, 600),  # 37.5 pairs per expert: 64-token plane tiles with 32-token tails (session 15)
    (128, 8, 4096, 1536, 700),  # 43.75: 64-token plane tiles
    (6, 3, 96, 64, 7),  # H = 96: not a multiple of the K tile (masked K loop)
    (5, 2, 160, 96, 33),
]


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("experts,topk,hidden,inter,tokens", CASES)
def test_matches_float64_reference(experts, topk, hidden, inter, tokens, activation):
    fc1, fc2 = _layer(experts, hidden, inter, activation)
    offset = 3
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts + 5, topk, device="cuda")
    ids = ids - 2  # ids below the local range (offset 3) and -1s; none above it (the largest, E + 2, is local)
    ids[::3, 0] = -1
    valid_rows = max(1, tokens - 2)
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=offset,
                     valid_tokens=valid, out=out)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "some output rows were not written"
    ref = _reference(x, fc1, fc2, probs, ids, activation, offset, valid_rows, tokens)
    assert relative_error(out, ref) <= BOUND
    assert out[valid_rows:].abs().max().item() == 0 if valid_rows < tokens else True


def test_fp32_out_and_row_prefix():
    fc1, fc2 = _layer(8, 128, 64, "swiglu")
    x = torch.randn(20, 128, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(20, 8, 2, device="cuda")
    valid = torch.tensor([20], device="cuda", dtype=torch.int32)
    out = torch.full((20, 128), float("nan"), device="cuda", dtype=torch.float32)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, rows=12, out=out)
    torch.cuda.synchronize()
    assert torch.isfinite(out[:12]).all() and torch.isnan(out[12:]).all()
    ref = _reference(x, fc1, fc2, probs, ids, "swiglu", 0, 12, 12)
    assert relative_error(out[:12], ref) <= BOUND


def _check_graph_replay(step, x, probs, ids, valid, out, fc1, fc2, experts, topk, tokens, valid_counts,
                        activation="swiglu"):
    """Capture ``step`` once; replay it with new tokens, routing and valid-token counts: equal to eager, every
    valid row written (outputs poisoned with NaN first), within BOUND of the float64 reference."""
    graph = capture_cuda_graph(step)
    for valid_rows in valid_counts:
        new_probs, new_ids = random_routing(tokens, experts, topk, device="cuda")
        probs.copy_(new_probs)
        ids.copy_(new_ids)
        x.copy_(torch.randn_like(x))
        valid.fill_(valid_rows)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        out.fill_(float("nan"))
        step()
        torch.cuda.synchronize()
        assert torch.isfinite(replayed).all()
        assert torch.equal(replayed, out), "graph replay differs from eager"
        ref = _reference(x, fc1, fc2, probs, ids, activation, 0, valid_rows, tokens)
        assert relative_error(replayed, ref) <= BOUND


def test_cuda_graph_replay_with_new_routing_and_valid_tokens():
    experts, topk, hidden, inter, tokens = 128, 8, 2048, 768, 64
    fc1, fc2 = _layer(experts, hidden, inter, "swiglu")
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    out = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)

    def step():
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, out=out)

    _check_graph_replay(step, x, probs, ids, valid, out, fc1, fc2, experts, topk, tokens, (tokens, 17, 1))


@pytest.mark.parametrize("rows,topk,experts,block_t,tail_t,offset,valid_rows", [
    (4096, 8, 128, 128, 0, 0, 4000),  # 32768 pairs: the three-launch route, 64 chunks of 512
    (20000, 8, 128, 128, 32, 0, 19990),  # 160000 pairs: 40 chunks of 4096, the scatter on 8 warps
    (300, 8, 64, 16, 0, 5, 299),  # 2400 pairs: two launches, 10 chunks of 256
    (100, 8, 128, 16, 0, 0, 97),  # 800 pairs: one program
    (96, 8, 128, 1, 0, 0, 90),  # the routed GEMV's block_t 1
    (4096, 8, 128, 128, 32, 0, 4000),  # tail tables
    (1100, 8, 128, 128, 64, 3, 1095),
    (100, 8, 16, 64, 32, 0, 97),  # one program with tails (about 29 pairs per expert)
])
def test_route_tables_match_the_torch_twin(rows, topk, experts, block_t, tail_t, offset, valid_rows):
    """Both route forms on the GPU against ``route_reference``, position by position: the same block and
    tail-block counts, block -> expert tables and pair tables (the scatter keeps pair order, so which pairs take
    the tail block is fixed), -1 everywhere else; and the same tables on a second run."""
    from megatron_mxfp8_moe.kernels.triton_moe import route_launch_shape, route_layout, route_reference
    from megatron_mxfp8_moe.kernels.triton_route import _route

    ids = torch.randint(-1, experts + 10, (rows, topk), device="cuda", dtype=torch.int32)
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    sorted_pairs, block_expert, blocks = _route(ids, valid, rows, topk, experts, offset, block_t, tail_t)
    ref_pairs, ref_blocks, ref_count = route_reference(ids.cpu(), valid_rows, experts=experts,
                                                       local_expert_offset=offset, block_t=block_t, tail_t=tail_t)
    count, tails = ref_count if tail_t else (ref_count, 0)
    assert route_launch_shape(rows * topk)[0] == (rows * topk <= 1024)
    assert int(blocks[0]) == count and (not tail_t or int(blocks[4]) == tails)
    assert torch.equal(sorted_pairs.cpu(), ref_pairs)
    assert torch.equal(block_expert[:count].cpu(), ref_blocks[:count])
    if tail_t:
        tail_offset = route_layout(rows, topk, experts, block_t, tail_t)[3]
        assert tails > 0
        assert torch.equal(block_expert[tail_offset:tail_offset + tails].cpu(),
                           ref_blocks[tail_offset:tail_offset + tails])
    again = _route(ids, valid, rows, topk, experts, offset, block_t, tail_t)[0]
    assert torch.equal(again, sorted_pairs)


@pytest.mark.parametrize("warps,form", [(1, "sort"), (2, "sort"), (8, "sort"), (16, "sort"), (None, "registers"),
                                        (4, "registers"), (16, "registers"), (None, "parallel")])
@pytest.mark.parametrize("rows,topk,experts,block_t,tail_t,valid_rows", [
    (64, 8, 128, 16, 0, 61),  # 512 pairs (64 decode tokens at top-8): one program
    (128, 8, 128, 16, 0, 128),  # 1024 pairs, the one-program route's largest
    (100, 8, 16, 64, 32, 97),  # one program with tails
    (2, 8, 128, 16, 0, 1),  # decode at 1-2 tokens
    (12, 8, 128, 1, 0, 12),  # the routed GEMV's one-pair blocks
])
def test_one_program_route_on_other_warp_counts(rows, topk, experts, block_t, tail_t, valid_rows, warps, form):
    """``TritonMoEConfig.route_warps`` (a probe knob, session 12): the one-program route on 1-16 warps gives the
    tables of ``route_reference``; so do its form with the tables in registers (``route_in_registers``, session 30)
    and the route from several programs (``route_parallel_pairs``, session 37), on three fresh routings each."""
    for _ in range(3):
        _assert_route_tables(rows, topk, experts, block_t, tail_t, valid_rows, warps=warps,
                             in_registers=form == "registers", parallel_pairs=1024 if form == "parallel" else 0)


def _assert_route_tables(rows, topk, experts, block_t, tail_t, valid_rows, **route_form):
    """``_route`` (in ``route_form``) on a fresh random map with ids in [-1, experts + 10) gives
    ``route_reference``'s tables: every position, the blocks in use and their experts (tail table included)."""
    from megatron_mxfp8_moe.kernels.triton_moe import route_layout, route_reference
    from megatron_mxfp8_moe.kernels.triton_route import _route

    ids = torch.randint(-1, experts + 10, (rows, topk), device="cuda", dtype=torch.int32)
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    sorted_pairs, block_expert, blocks = _route(ids, valid, rows, topk, experts, 0, block_t, tail_t, **route_form)
    ref_pairs, ref_blocks, ref_count = route_reference(ids.cpu(), valid_rows, experts=experts, local_expert_offset=0,
                                                       block_t=block_t, tail_t=tail_t)
    count, tails = ref_count if tail_t else (ref_count, 0)
    assert int(blocks[0]) == count and (not tail_t or int(blocks[4]) == tails)
    assert torch.equal(sorted_pairs.cpu(), ref_pairs)
    assert torch.equal(block_expert[:count].cpu(), ref_blocks[:count])
    if tail_t:
        tail_offset = route_layout(rows, topk, experts, block_t, tail_t)[3]
        assert torch.equal(block_expert[tail_offset:tail_offset + tails].cpu(),
                           ref_blocks[tail_offset:tail_offset + tails])


@pytest.mark.parametrize("rows,block_t,tail_t,valid_rows", [
    (256, 32, 16, 250),  # 2048 pairs: the 32-token tiles with 16-token tails (256 tokens at top-8)
    (512, 32, 0, 509),  # 4096 pairs
    (1024, 128, 64, 1000),  # 8192 pairs (route_parallel_pairs' largest), the 128-token tiles with 64-token tails
])
def test_route_from_several_programs_above_1024_pairs(rows, block_t, tail_t, valid_rows):
    """Session 37: the route from several programs (``route_parallel_pairs`` up to 8192) gives the tables of
    ``route_reference`` above the one-program range too, on three fresh routings each."""
    for _ in range(3):
        _assert_route_tables(rows, 8, 128, block_t, tail_t, valid_rows, parallel_pairs=8192)


def test_cuda_graph_replay_with_the_chunked_route():
    """1024 tokens (8192 pairs: the chunked route, the default tiles l128a_sa_t64) captured once, replayed with new
    routing and valid-token counts."""
    _graph_replay_of(lambda t, h, i, k, e: choose_config(t, h, i, gated=True, topk=k, experts=e), 1024,
                     (1024, 700, 3))


_TAIL_64E = (64, 8, 2048, 768, 2200)  # ids over 69 experts: about 255 pairs per local expert, half leave a few past 256
_TAIL_235B = (128, 8, 4096, 1536, 1100)  # ids over 133 experts: about 66 pairs each, the 64-token tail takes many
_TAIL_ODD = (6, 3, 160, 96, 560)  # ids over 11 experts, 6 local: about 153 pairs each (odd K, N wraps the tiles)
_TAIL_ODD256 = (6, 3, 160, 96, 950)  # ids over 11 experts: about 259 pairs each, some past one 256-token block
_TAIL_16 = (128, 8, 2048, 768, 256)  # ids over 133 experts: about 15 pairs each, most in a 16-token tail block
_TAIL_ODD16 = (6, 3, 160, 96, 70)  # ids over 11 experts: about 19 pairs each (odd K, 16-token tails)


@pytest.mark.parametrize("variant,case,activation", [
    ("l128a_sa_t32", _TAIL_64E, "swiglu"), ("l128a_sa_t32", _TAIL_ODD, "swiglu"),
    ("l128a_sa_t64", _TAIL_235B, "swiglu"), ("l128a_sa_t16", _TAIL_64E, "swiglu"),
    ("l128a_sa_t32a", _TAIL_64E, "squared_relu"), ("l128a_sa_t32a", _TAIL_ODD, "squared_relu"),
    ("l128a_sa_t64", _TAIL_ODD, "squared_relu"),
    ("x256w_sa_t32a", _TAIL_64E, "squared_relu"), ("x256w_sa_t32a", _TAIL_ODD256, "squared_relu"),
    ("l128w_sa_t32a", _TAIL_64E, "squared_relu"), ("l128w_sa_t64", _TAIL_ODD, "squared_relu"),
    ("l128w_sa_t64", _TAIL_235B, "swiglu"),
    ("m32l4_sx_m_t16", _TAIL_16, "swiglu"), ("m32l4_sx_m_t16", _TAIL_ODD16, "swiglu"),
    ("m32a_f4_t16", _TAIL_16, "squared_relu"), ("m32a_f4_t16", _TAIL_ODD16, "squared_relu"),
])
def test_tail_tiles_match_float64_reference(variant, case, activation):
    """Tiles with tail tiles (an expert's last pairs on a narrower MMA tile, ``TritonMoEConfig.tail``): every
    valid row written (NaN-poisoned output), zeros past valid_tokens, within BOUND of the float64 oracle; the
    routing does produce tail blocks (checked on the torch twin); a second call gives the same bits."""
    from megatron_mxfp8_moe.kernels.triton_moe import route_reference

    experts, topk, hidden, inter, tokens = case
    cfg = TILES[variant]
    fc1, fc2 = _layer(experts, hidden, inter, activation)
    offset = 3
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts + 5, topk, device="cuda")
    ids = ids - 2  # -2, -1 and ids below the local range (offset 3); the largest id is the last local one
    valid_rows = tokens - 5
    tails = route_reference(ids.cpu(), valid_rows, experts=experts, local_expert_offset=offset,
                            block_t=cfg.block_t, tail_t=cfg.tail.block_t)[2][1]
    assert tails > 0
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=offset,
                     valid_tokens=valid, out=out, config=cfg)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "some output rows were not written"
    ref = _reference(x, fc1, fc2, probs, ids, activation, offset, valid_rows, tokens)
    assert relative_error(out, ref) <= BOUND
    assert out[valid_rows:].abs().max().item() == 0
    again = torch.full_like(out, float("nan"))
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=offset,
                     valid_tokens=valid, out=again, config=cfg)
    assert torch.equal(again, out), "the same inputs gave different bits (the route must be deterministic)"


_MERGE_64E = (64, 8, 2048, 768)  # (experts, topk, hidden, inter): qwen3-30b-a3b's widths on 64 experts
_MERGE_ODD = (6, 3, 160, 96)  # N_OUT 96: the last 64-column tile wraps; odd K


def _assert_merge_keeps_bits(two, merged, shape, tokens, out_dtype):
    """SwiGLU layer of ``shape`` (experts, topk, hidden, inter) at ``tokens``: ``merged`` (fc1_gate_merge) writes
    every valid row (NaN-poisoned ``out_dtype`` output), bit-equal to ``two``, within BOUND of the float64 oracle."""
    experts, topk, hidden, inter = shape
    fc1, fc2 = _layer(experts, hidden, inter, "swiglu")
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens - 3], device="cuda", dtype=torch.int32)
    outs = []
    for c in (two, merged):
        out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=out_dtype)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, out=out, config=c)
        torch.cuda.synchronize()
        outs.append(out)
    assert torch.isfinite(outs[1]).all(), "some output rows were not written"
    assert torch.equal(outs[0], outs[1]), (outs[0] - outs[1]).abs().max().item()
    ref = _reference(x, fc1, fc2, probs, ids, "swiglu", 0, tokens - 3, tokens)
    assert relative_error(outs[1], ref) <= BOUND


@pytest.mark.parametrize("base,shape,tokens", [
    ("s16k_sx_r", _MERGE_64E, 40), ("s16k_sx_r", _MERGE_ODD, 30), ("m32l_sx", _MERGE_64E, 160),
    ("l128a_sa_t64", _MERGE_64E, 600), ("l128a_sa_t32", _MERGE_64E, 2200), ("l128a_sa_t32", _MERGE_ODD, 700),
])
@pytest.mark.parametrize("warps,block_t", [(4, None), (8, None), (8, 256)])
def test_gate_merge_equals_two_tiles(base, shape, tokens, warps, block_t):
    """``fc1_gate_merge`` (gate and up rows in one MMA tile, split in registers) gives the bits of the two-tile FC1
    on the same tiles, and stays within BOUND of the float64 oracle (NaN-poisoned output: every row written)."""
    cfg = TILES[base]
    if block_t is not None:
        if cfg.tail is None:
            pytest.skip("256-token blocks only with the tail-tile configurations")
        cfg = dataclasses.replace(cfg, block_t=block_t)
    _assert_merge_keeps_bits(cfg, dataclasses.replace(cfg, fc1_gate_merge=True, fc1_warps=warps), shape, tokens,
                             torch.float32)


@pytest.mark.parametrize("tile,shape,tokens", [
    ("s16k_sx_rm", _MERGE_64E, 40), ("s16k_sx_rm", _MERGE_ODD, 30), ("l128m_sa_t64", _MERGE_64E, 600),
    ("l128m_sa_t32", _MERGE_ODD, 700), ("x256m_sa_t32", _MERGE_64E, 2200), ("x256m_sa_t32", _MERGE_ODD, 1100),
])
def test_merged_defaults_equal_two_tiles(tile, shape, tokens):
    """The gated defaults with ``fc1_gate_merge`` (FC1 on 8 warps, s16k_sx_rm capped at 128 registers) give the
    bits of the same tiles with two FC1 tiles on 4 warps, within BOUND of the float64 oracle, every row written."""
    merged = TILES[tile]
    two = dataclasses.replace(merged, fc1_gate_merge=False, fc1_warps=4, fc1_maxnreg=None)
    _assert_merge_keeps_bits(two, merged, shape, tokens, torch.bfloat16)


def test_cuda_graph_replay_with_merged_256_token_tiles():
    """x256m_sa_t32 (the gated default from 176 pairs per expert) captured once, replayed with new routing and
    valid-token counts."""
    _graph_replay_of(lambda *shape: TILES["x256m_sa_t32"], 3000, (3000, 2000, 40))


def test_cuda_graph_replay_with_tail_tiles():
    """l128a_sa_t32 at 2100 tokens (about 131 pairs per expert: many tail blocks) captured once, replayed with new
    routing and valid-token counts (the tail table's size changes from replay to replay)."""
    _graph_replay_of(lambda *shape: TILES["l128a_sa_t32"], 2100, (2100, 1500, 40))


@pytest.mark.parametrize("variant,tokens", [("x256w_sa_t32a", 3000), ("l128w_sa_t32a", 1500)])
def test_cuda_graph_replay_of_the_squared_relu_tiles(variant, tokens):
    """The session-10 squared-ReLU defaults (256-token tiles at about 188 pairs per expert, 128 FC1 rows at 94)
    captured once and replayed with new routing and valid-token counts."""
    _graph_replay_of(lambda *shape: TILES[variant], tokens, (tokens, tokens * 2 // 3, 40), "squared_relu")


# Session 11: the 4-warp tiles choose_config takes from 1.5 to 24 pairs per expert (three CTAs per SM), each with the
# tile it replaced. Per output element both sum K in the same order (same BLOCK_K, same MMA K steps; only the rows
# per program and the warps differ), so the bits must match. test_matches_float64_reference runs them as defaults at
# 64 / 300 tokens and on the odd shapes. Session 12: s16k4_sx_m3 (3 FC1 stages) replaces s16k4_sx_m as the default.
FOUR_WARP = {"s16k4_sx_m": ("s16k_sx_rm", "swiglu"), "s16k4_sx_m3": ("s16k_sx_rm", "swiglu"),
             "m32l4_sx_m": ("m32l_sx", "swiglu"), "s16k_sx_f4": ("s16k_sx_r", "squared_relu"),
             "m32a_f4": ("m32a", "squared_relu")}


def _poisoned_outputs(configs, fc1, fc2, x, probs, ids, valid_rows, activation):
    """One call per config (None: the default) into a NaN-poisoned fp32 ``[tokens + 1, H]`` out (offset 3, ``rows`` =
    tokens): every row up to ``rows`` written and finite, the one past it untouched; returns the ``[tokens, H]``
    outputs."""
    tokens, hidden = x.shape
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    outs = []
    for cfg in configs:
        out = torch.full((tokens + 1, hidden), float("nan"), device="cuda", dtype=torch.float32)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=3,
                         valid_tokens=valid, out=out, rows=tokens, config=cfg)
        torch.cuda.synchronize()
        assert torch.isfinite(out[:tokens]).all() and torch.isnan(out[tokens:]).all()
        outs.append(out[:tokens])
    return outs


def _checked_outputs(tiles, case, activation):
    """Each of ``tiles`` once on one input set of ``case`` (experts, topk, hidden, inter, tokens): every row written
    (NaN-poisoned output), nothing written past ``rows``; the last tile's output within BOUND of the float64 oracle
    and zeros past ``valid_tokens``. Returns the outputs ``[tokens, H]``, one per tile."""
    experts, topk, hidden, inter, tokens = case
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, inter, tokens, activation)
    outs = _poisoned_outputs(tiles, fc1, fc2, x, probs, ids, valid_rows, activation)
    ref = _reference(x, fc1, fc2, probs, ids, activation, 3, valid_rows, tokens)
    assert relative_error(outs[-1], ref) <= BOUND
    assert outs[-1][valid_rows:].abs().max().item() == 0 if valid_rows < tokens else True
    return outs


def _assert_tiles_keep_bits(old, new, case, activation, same_bits=True):
    """Tiles ``new`` are bit-equal to ``old`` on ``case`` (unless not ``same_bits``), and ``_checked_outputs``' checks
    hold for ``new``. Returns both outputs ``[tokens, H]``."""
    outs = _checked_outputs((old, new), case, activation)
    if same_bits:
        assert torch.equal(outs[0], outs[1]), (outs[0] - outs[1]).abs().max().item()
    return outs


@pytest.mark.parametrize("tile", sorted(FOUR_WARP))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 256), _ODD33, _ODD7],
                         ids=["30b-T64", "235b-T256", "odd33", "odd7"])
def test_four_warp_tiles_equal_the_tiles_they_replace(tile, case):
    old, activation = FOUR_WARP[tile]
    _assert_tiles_keep_bits(TILES[old], TILES[tile], case, activation)


@pytest.mark.parametrize("tile,tokens,activation", [
    ("s16k4_sx_m", 64, "swiglu"), ("s16k4_sx_m3", 64, "swiglu"), ("s16k4_sx4_m3", 64, "swiglu"),
    ("m32l4_sx_m", 256, "swiglu"), ("m32l4_sx_m", 512, "swiglu"), ("s16k_sx_f4", 64, "squared_relu"),
    ("m32a_f4", 256, "squared_relu"), ("s16k_sx4_f4", 64, "squared_relu"), ("m32l4_sx_m_t16", 256, "swiglu"),
    ("m32a_f4_t16", 256, "squared_relu"), ("s16k4_sx4p_m3", 64, "swiglu"), ("m32l4_sx4p_m_t16", 256, "swiglu"),
    ("m32k_sx4p_f4_t16", 256, "squared_relu"), ("m32l4_sx4p_m", 512, "swiglu"), ("m32k_sx4p_f4", 512, "squared_relu"),
    ("l64_sx4p_mu_t32", 512, "swiglu"), ("l64_sx4p_mu", 768, "swiglu"), ("l64k_sx4p_f4_t32", 512, "squared_relu"),
    ("l64k2_sx4p_f4", 768, "squared_relu"), ("l128m_sa_t64p", 1024, "swiglu"), ("l128w_sa_t64p", 1024, "squared_relu"),
])
def test_cuda_graph_replay_of_the_four_warp_tiles(tile, tokens, activation):
    """The session 11-15 defaults captured once and replayed with new routing and valid-token counts."""
    _graph_replay_of(lambda *shape: TILES[tile], tokens, (tokens, tokens // 2, 1), activation)


# Session 12: "sx4" (weight rows read as uint32 words, 4 byte-plane MMAs per K step). The planes are summed one after
# the other, so the bits differ from the tile it derives from: each is held to the float64 oracle instead (all 12
# cases passed in run 16, call 3). The defaults s16k4_sx4_m3 / s16k_sx4_f4 are s16k4_sx_m3 / s16k_sx_f4 with "sx4";
# their graph replays are in test_cuda_graph_replay_of_the_four_warp_tiles.
SX4 = {"s16k4_sx_m3": "swiglu", "m32l4_sx_m": "swiglu", "s16k_sx_f4": "squared_relu"}


@pytest.mark.parametrize("tile", sorted(SX4))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 256), _ODD33, _ODD7],
                         ids=["30b-T64", "235b-T256", "odd33", "odd7"])
def test_sx4_tiles_match_float64(tile, case):
    base = TILES[tile]
    _assert_tiles_keep_bits(base, dataclasses.replace(base, dequant="sx4"), case, SX4[tile], same_bits=False)


# Session 14: the "sx4" tiles with plane-major token operands (``TritonMoEConfig.planes``: x copied plane-major
# once per call, FC1 writing its rows plane-major for FC2). The same MMAs on the same values as the shuffled planes,
# so the bits must match; the 32-token "sx4" tiles (probes) and the tails too.
_M32_SX4 = dataclasses.replace(TILES["m32l4_sx_m"], dequant="sx4")
PLANES = {
    "s16k4_sx4_m3": (TILES["s16k4_sx4_m3"], "swiglu"),
    "s16k_sx4_f4": (TILES["s16k_sx4_f4"], "squared_relu"),
    "m32l4_sx4_m": (_M32_SX4, "swiglu"),
    "m32l4_sx4_mu_t16": (dataclasses.replace(_M32_SX4, fc1_maxnreg=None, tail=TILES["s16k4_sx4_m3"]), "swiglu"),
    "m32k_sx4_f4_t16": (dataclasses.replace(TILES["m32k_sx4p_f4"], planes=False, tail=TILES["s16k_sx4_f4"]),
                        "squared_relu"),
    # session 15: the 64-token tiles (test_64_token_plane_defaults_are_the_tested_tiles ties the defaults to these)
    "l64_sx4_mu_t32": (dataclasses.replace(_M32_SX4, block_t=64, fc1_maxnreg=None, tail=_M32_SX4), "swiglu"),
    "l64k2_sx4_f4": (dataclasses.replace(TILES["m32k_sx4p_f4"], planes=False, block_t=64, fc1_stages=2),
                     "squared_relu"),
    "l64k_sx4_f4_t32": (dataclasses.replace(TILES["m32k_sx4p_f4"], planes=False, block_t=64,
                                            tail=dataclasses.replace(TILES["m32k_sx4p_f4"], planes=False)),
                        "squared_relu"),
}


def _with_planes(cfg):
    tail = None if cfg.tail is None else dataclasses.replace(cfg.tail, planes=True)
    return dataclasses.replace(cfg, planes=True, tail=tail)


@pytest.mark.parametrize("tile", sorted(PLANES))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 256), _ODD33, _ODD7],
                         ids=["30b-T64", "235b-T256", "odd33", "odd7"])
def test_planes_keep_the_bits(tile, case):
    base, activation = PLANES[tile]
    _assert_tiles_keep_bits(base, _with_planes(base), case, activation)


# Session 11 candidates for squared ReLU at 176+ pairs per expert: x256w_sa_t32a with FC2 and / or FC1 on 4 warps
# and 64 rows (two CTAs per SM, compile-only 214 / 227 registers, 107 KB shared each). Same K order per output
# element as the default, so the bits must match (they did: run 14, call 5). NOT adopted: 4-14% slower at 4096
# tokens (bench/NOTES_triton_moe.md, session 11).
SQ_RELU_256 = {
    "x256w_f2": dict(fc2_warps=4, fc2_block_n=64),
    "x256w_f12": dict(fc2_warps=4, fc2_block_n=64, fc1_warps=4, fc1_block_n=64),
}


@pytest.mark.parametrize("variant", sorted(SQ_RELU_256))
def test_four_warp_256_token_squared_relu_tiles_equal_the_default(variant):
    default = TILES["x256w_sa_t32a"]
    _assert_tiles_keep_bits(default, dataclasses.replace(default, **SQ_RELU_256[variant]), (128, 8, 2048, 768, 3000),
                            "squared_relu")


def test_rejects_bad_shapes():
    fc1, fc2 = _layer(4, 64, 32, "swiglu")
    x = torch.randn(3, 64, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(3, 4, 2, device="cuda")
    valid = torch.tensor([3], device="cuda", dtype=torch.int32)
    with pytest.raises(MXFP8InputError, match="fc1_stack"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu", valid_tokens=valid)
    with pytest.raises(MXFP8InputError, match="x:"):
        triton_mxfp8_moe(x.float(), probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid)


# v3 variants: the bit-trick dequant ("bits") must give bit-identical outputs to the cvt path (both dequantize
# exactly and round the same products); FC2 split-K adds fp32 partials (deterministic, checked vs the oracle).
_V3 = {
    "bits": dict(dequant="bits"),
    "bits_sk2": dict(dequant="bits", fc2_split_k=2),
    "bits_sk3": dict(dequant="bits", fc2_split_k=3),
}


@pytest.mark.parametrize("variant", sorted(_V3))
@pytest.mark.parametrize("experts,topk,hidden,inter,tokens", [CASES[0], CASES[1], CASES[3], CASES[7], CASES[8]])
def test_v3_variants(experts, topk, hidden, inter, tokens, variant):
    activation = "swiglu"
    base = dataclasses.replace(_mma_config(tokens, hidden, inter, topk, experts), dequant="cvt", fc2_split_k=1)
    configs = (("cvt", base), (variant, dataclasses.replace(base, **_V3[variant])))
    fc1, fc2 = _layer(experts, hidden, inter, activation)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(tokens, experts + 5, topk, device="cuda")
    ids = ids - 2
    ids[::3, 0] = -1
    valid_rows = max(1, tokens - 2)
    valid = torch.tensor([valid_rows], device="cuda", dtype=torch.int32)
    outs = {}
    for name, cfg in configs:
        out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=3,
                         valid_tokens=valid, out=out, config=cfg)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all(), f"{name}: some output rows were not written"
        outs[name] = out
    ref = _reference(x, fc1, fc2, probs, ids, activation, 3, valid_rows, tokens)
    assert relative_error(outs[variant], ref) <= BOUND
    assert outs[variant][valid_rows:].abs().max().item() == 0 if valid_rows < tokens else True
    if _V3[variant].get("fc2_split_k", 1) == 1:
        assert torch.equal(outs[variant], outs["cvt"]), "bit-trick dequant differs from the cvt path"


def test_v3_bits_exact_with_scales_above_2_pow_7():
    """E8M0 bytes > 134 take the second bf16 factor: outputs stay bit-identical to the cvt path."""
    experts, topk, hidden, inter, tokens = 8, 2, 256, 128, 24
    base = dataclasses.replace(_mma_config(tokens, hidden, inter, topk, experts, gated=False),
                               dequant="cvt", fc2_split_k=1)
    configs = (base, dataclasses.replace(base, dequant="bits"), dataclasses.replace(base, dequant="sx"))
    fc1 = quantize_mxfp8(random_weights((experts, inter, hidden), scale=2e5, device="cuda"))
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.02, device="cuda"))
    assert int(fc1.scale_bytes().max()) > 134, "the case must reach the second factor"
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 1e-6
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    outs = []
    for cfg in configs:
        out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="relu", valid_tokens=valid, out=out, config=cfg)
        torch.cuda.synchronize()
        outs.append(out)
    assert torch.isfinite(outs[0]).all() and outs[0].abs().max() > 0
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def _mixed_scale_layer(experts, hidden, inter, wide, gated=True):
    """fc1 / fc2 stacks (fc1 ``[gate; up]`` when ``gated``) whose scale bytes stay <= 134 except where ``wide`` puts
    them above (weights times 1e7: largest bytes about 151 in fc1 and 146 in fc2, shifts 17 and 12): fc1 rows
    0..63 of even experts, fc2 rows 128..255 of odd experts."""
    w1 = random_weights((experts, (2 if gated else 1) * inter, hidden), scale=0.02, device="cuda")
    w2 = random_weights((experts, hidden, inter), scale=0.02, device="cuda")
    if wide:
        w1[::2, :64] *= 1e7
        w2[1::2, 128:256] *= 1e7
    return quantize_mxfp8(w1), quantize_mxfp8(w2)


def _fp32_outputs(configs, x, probs, ids, fc1, fc2, activation, valid):
    """fp32 outputs (NaN-poisoned first) of each config in ``configs``, in order."""
    outs = []
    for c in configs:
        out = torch.full((x.shape[0], x.shape[1]), float("nan"), device="cuda", dtype=torch.float32)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, valid_tokens=valid, out=out, config=c)
        torch.cuda.synchronize()
        outs.append(out)
    return outs


def _cvt_and(cfg, x, probs, ids, fc1, fc2, activation, valid):
    """fp32 outputs (NaN-poisoned first) of ``cfg`` with dequant "cvt", then of ``cfg`` itself."""
    return _fp32_outputs((dataclasses.replace(cfg, dequant="cvt"), cfg), x, probs, ids, fc1, fc2, activation, valid)


@pytest.mark.parametrize("variant", SX_AUTO)
def test_sx_auto_equals_cvt_with_scales_above_2_pow_7_in_some_tiles(variant):
    """Tiles whose scale rows hold a byte > 134 run with shift > 0 (factor 2 ** (s - 7 - shift), accumulators times
    2 ** shift), the others with shift 0: the output equals the cvt path bit for bit either way (tiles of both
    kinds in one launch, in one expert too)."""
    experts, topk, hidden, inter = 8, 2, 512, 256
    tokens = {"s16k_sa": 24, "m32l_sa": 64, "l64b_sa": 200, "l128a_sa": 300, "l128w_sa": 600, "x256w_sa": 1100}[variant]
    fc1, fc2 = _mixed_scale_layer(experts, hidden, inter, wide=True)
    assert int(fc1.scale_bytes().max()) > 134 and int(fc2.scale_bytes().max()) > 134
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 1e-6
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    outs = _cvt_and(V4[variant], x, probs, ids, fc1, fc2, "swiglu", valid)
    assert torch.isfinite(outs[0]).all() and outs[0].abs().max() > 0
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("variant", ["l64b_sa", "l128a_sa", "l128w_sa", "x256w_sa"])
@pytest.mark.parametrize("wide", [False, True])
def test_sx_auto_squared_relu(variant, wide):
    """Non-gated FC1 (squared ReLU): sx_auto equals the cvt path bit for bit, narrow or mixed scales, and
    matches the float64 oracle on normal weights."""
    experts, topk, hidden, inter, tokens = 16, 4, 512, 384, 300
    fc1, fc2 = _mixed_scale_layer(experts, hidden, inter, wide=wide, gated=False)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * (1e-6 if wide else 1.0)
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens - 3], device="cuda", dtype=torch.int32)
    outs = _cvt_and(V4[variant], x, probs, ids, fc1, fc2, "squared_relu", valid)
    assert torch.isfinite(outs[1]).all() and outs[1].abs().max() > 0
    assert torch.equal(outs[0], outs[1])
    if not wide:
        ref = _reference(x, fc1, fc2, probs, ids, "squared_relu", 0, tokens - 3, tokens)
        assert relative_error(outs[1], ref) <= BOUND


@pytest.mark.parametrize("split_k", [1, 2])
def test_sx_auto_shift_on_odd_shapes(split_k):
    """shift > 0 where K is not a multiple of BLOCK_K (H 160, I 96), FC1 tiles wrap past N_OUT (96 rows, tiles of
    64), and FC2 splits K: still bit-equal to the cvt path of the same tile. (Written in session 7 after its last
    GPU call: first run with ``tools/gpu_next.sh final``.)"""
    experts, topk, hidden, inter, tokens = 6, 2, 160, 96, 200
    cfg = dataclasses.replace(V4["l128a_sa"], fc2_split_k=split_k)
    fc1, fc2 = _mixed_scale_layer(experts, hidden, inter, wide=True)
    assert int(fc1.scale_bytes().max()) > 134 and int(fc2.scale_bytes().max()) > 134
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 1e-6
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens - 1], device="cuda", dtype=torch.int32)
    outs = _cvt_and(cfg, x, probs, ids, fc1, fc2, "swiglu", valid)
    assert torch.isfinite(outs[1]).all() and outs[1][: tokens - 1].abs().max() > 0
    assert torch.equal(outs[0], outs[1])


def test_sx_auto_graph_replay_after_a_refit_that_widens_the_scales():
    """The per-tile shift is computed on the device at every launch: a graph captured on scales <= 2 ** 7 replays
    correctly after an in-place refit to scales above 2 ** 7 (and back)."""
    experts, topk, hidden, inter, tokens = 8, 2, 512, 256, 24
    cfg = V4["s16k_sa"]
    cvt = dataclasses.replace(cfg, dequant="cvt")
    fc1, fc2 = _mixed_scale_layer(experts, hidden, inter, wide=False)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 1e-6
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens], device="cuda", dtype=torch.int32)
    out = torch.empty(tokens, hidden, device="cuda", dtype=torch.float32)

    def step():
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, out=out, config=cfg)

    graph = capture_cuda_graph(step)  # compiled and warmed up outside the capture
    for wide in (True, False):
        new1, new2 = _mixed_scale_layer(experts, hidden, inter, wide=wide)
        fc1.copy_(new1)
        fc2.copy_(new2)
        graph.replay()
        torch.cuda.synchronize()
        expected = torch.zeros_like(out)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, out=expected,
                         config=cvt)
        torch.cuda.synchronize()
        assert (int(fc1.scale_bytes().max()) > 134) == wide
        assert torch.isfinite(out).all() and torch.equal(out, expected)


@pytest.mark.parametrize("variant", ["bits", "bits_sk2"])
def test_v3_cuda_graph_replay(variant):
    def config_for(tokens, hidden, inter, topk, experts):
        return dataclasses.replace(_mma_config(tokens, hidden, inter, topk, experts), **_V3[variant])

    _graph_replay_of(config_for, 16, (16, 5, 1))


# Session 16: a second stream (``side_stream``): the plane copies of x beside the route (1), and the tail tile's
# launch pair beside the main pair (2). The same launches on the same data in another order, so the same bits.
SIDE_STREAM = {
    "m32l4_sx4p_m_t16": ("swiglu", (128, 8, 2048, 768, 256)),
    "m32k_sx4p_f4_t16": ("squared_relu", (128, 8, 2048, 768, 256)),
    "s16k4_sx4p_m3": ("swiglu", (128, 8, 2048, 768, 64)),
    "l64_sx4p_mu_t32": ("swiglu", (128, 8, 4096, 1536, 512)),
    "l128w_sa_t64p": ("squared_relu", (128, 8, 2048, 768, 1024)),
    "x256m_sa_t32": ("swiglu", (128, 8, 2048, 768, 4096)),
    # session 17: the 128-token tiles with 32-token tails, the 2-stage squared-ReLU 64-token tile with 32-token tails
    "l128m_sa_t32": ("swiglu", (128, 8, 4096, 1536, 2048)),
    "l128w_sa_t32a": ("squared_relu", (128, 8, 2048, 768, 2048)),
    "l64k2_sx4p_f4_t32": ("squared_relu", (128, 8, 4096, 1536, 512)),
}


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("tile", sorted(SIDE_STREAM))
def test_side_stream_keeps_the_bits(tile, level):
    activation, case = SIDE_STREAM[tile]
    _assert_tiles_keep_bits(TILES[tile], dataclasses.replace(TILES[tile], side_stream=level), case, activation)


@pytest.mark.parametrize("level", [1, 2])
def test_side_stream_on_odd_shapes(level):
    """Odd K (a partial last plane step), N wrapping the tiles, tail blocks, non-local ids."""
    tile = dataclasses.replace(TILES["m32l4_sx4p_m_t16"], side_stream=level)
    _assert_tiles_keep_bits(TILES["m32l4_sx4p_m_t16"], tile, _TAIL_ODD16, "swiglu")


@pytest.mark.parametrize("tile,tokens,activation", [("m32l4_sx4p_m_t16", 256, "swiglu"),
                                                    ("l128w_sa_t64p", 1024, "squared_relu"),
                                                    ("l128m_sa_t32", 1500, "swiglu")])
def test_cuda_graph_replay_with_a_side_stream(tile, tokens, activation):
    """Both streams captured in one graph (fork and join as event waits), replayed with new routing and valid-token
    counts: equal to eager, within BOUND of float64."""
    cfg = dataclasses.replace(TILES[tile], side_stream=2)
    _graph_replay_of(lambda *shape: cfg, tokens, (tokens, tokens * 2 // 3, 5), activation)


# Session 18: FC2 as the Gluon kernel (``fc2_gluon``: asynchronous wgmma, TMA stages). Same values and the same MMA
# order per output element as the Triton FC2 at the same 128-deep K steps, so the bits must match it, on the plane
# tiles (the tails stay Triton) and with the Gluon tile's own rows / stages / warps.
GLUON_FC2 = {
    "m32l4_sx4p_m_t16": (TILES["m32l4_sx4p_m_t16"], "swiglu"),
    "m32k_sx4p_f4_t16": (TILES["m32k_sx4p_f4_t16"], "squared_relu"),
    # session 19: the 16-token plane tile (the 64-token plane tiles were here until session 21, whose probes found
    # the Gluon FC2 at 64-token blocks writing NaN in 3-5% of calls: bench/gluon_tail_race_probe.py)
    "s16k4_sx4p_m3": (TILES["s16k4_sx4p_m3"], "swiglu"),
}
GLUON_TILES = {"n64s3": dict(fc2_block_n=64, fc2_stages=3, fc2_warps=4),
               "n128s3": dict(fc2_block_n=128, fc2_stages=3, fc2_warps=4),
               "n128s2w8": dict(fc2_block_n=128, fc2_stages=2, fc2_warps=8)}


@pytest.mark.parametrize("variant", sorted(GLUON_TILES))
@pytest.mark.parametrize("tile", sorted(GLUON_FC2))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 256), (128, 8, 4096, 1536, 300)], ids=["30b-T256", "235b-T300"])
def test_gluon_fc2_keeps_the_bits(tile, variant, case):
    base, activation = GLUON_FC2[tile]
    k128 = dataclasses.replace(base, fc2_block_k=128)
    _assert_tiles_keep_bits(k128, dataclasses.replace(k128, fc2_gluon=True, **GLUON_TILES[variant]), case, activation)


@pytest.mark.parametrize("tile,tokens", [("m32k_sx4p_f4_t16", 256), ("m32l4_sx4p_m_t16", 256)])
def test_cuda_graph_replay_with_the_gluon_fc2(tile, tokens):
    """The Gluon FC2 (host TMA descriptors captured by value) and the second stream in one graph, replayed with new
    routing and valid-token counts: equal to eager, within BOUND of float64."""
    base, activation = GLUON_FC2[tile]
    cfg = dataclasses.replace(base, fc2_block_k=128, fc2_gluon=True, side_stream=2, **GLUON_TILES["n128s3"])
    _graph_replay_of(lambda *shape: cfg, tokens, (tokens, tokens * 2 // 3, 5), activation)


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
def test_gluon_defaults_and_the_env_switch(activation, monkeypatch):
    """A default call at 256 tokens (16 pairs per expert) runs the Gluon tile ``_tile`` names where GLUON_ENV=1, the
    Triton "_s2" tile where it is 0, and where it is unset the twin only if the tile is one of ``_GLUON_BY_DEFAULT``
    (both are since session 26 / 28) and the installed Triton is the GPU-tested one: each the same bits as its tile
    passed explicitly, within BOUND of float64, every row written."""
    from megatron_mxfp8_moe.kernels import triton_moe as host

    experts, topk, hidden, inter, tokens = 128, 8, 2048, 768, 256
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, inter, tokens, activation)
    base = "m32l4_sx4p_m_t16" if activation == "swiglu" else "m32k_sx4p_f4_t16"
    chosen = []
    launch = host._launch
    monkeypatch.setattr(host, "_launch", lambda cfg, *args: (chosen.append(cfg), launch(cfg, *args)))
    for switch in ("1", "0", None):
        if switch is None:
            monkeypatch.delenv(host.GLUON_ENV)
        else:
            monkeypatch.setenv(host.GLUON_ENV, switch)
        tile = triton_policy._tile(base + "_s2", hidden, inter)
        twin = switch == "1" or (switch is None and base + "_s2" in triton_policy._GLUON_BY_DEFAULT
                                 and triton_policy._gpu_tested_triton())
        assert (tile.fc2_gluon, tile is TILES[base + "_s2"]) == (twin, not twin)
        outs = _poisoned_outputs((None, tile), fc1, fc2, x, probs, ids, valid_rows, activation)
        assert chosen[-2:] == [tile, tile]
        assert torch.equal(outs[0], outs[1])
        assert relative_error(outs[0], _reference(x, fc1, fc2, probs, ids, activation, 3, valid_rows, tokens)) <= BOUND


# Session 19: FC1 as the Gluon kernel (``fc1_gluon``: asynchronous wgmma, TMA weights, cp.async token planes). Same
# values and MMA order per output element as the Triton FC1 at 128-deep K steps with separate gate / up tiles, so
# the bits must match that tile (FC2 in Triton at 128-deep steps, which the Gluon FC2 matches too), for every
# activation and with the Gluon tile's own rows / stages / warps.
GLUON_FC1 = {"n64s3": dict(fc1_block_n=64, fc1_stages=3, fc1_warps=4),
             "n64s4": dict(fc1_block_n=64, fc1_stages=4, fc1_warps=4),
             "n128s3w8": dict(fc1_block_n=128, fc1_stages=3, fc1_warps=8)}


def _triton_twin_of_gluon_fc1(base):
    return dataclasses.replace(base, fc1_block_k=128, fc1_gate_merge=False, fc1_maxnreg=None, fc2_block_k=128)


@pytest.mark.parametrize("variant", sorted(GLUON_FC1))
@pytest.mark.parametrize("tile,activation", [("m32l4_sx4p_m_t16", "swiglu"), ("m32k_sx4p_f4_t16", "squared_relu")])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 256), (128, 8, 4096, 1536, 300)], ids=["30b-T256", "235b-T300"])
def test_gluon_fc1_keeps_the_bits(tile, activation, variant, case):
    k128 = _triton_twin_of_gluon_fc1(dataclasses.replace(TILES[tile], **GLUON_FC1[variant]))
    _assert_tiles_keep_bits(k128, dataclasses.replace(k128, fc1_gluon=True), case, activation)


@pytest.mark.parametrize("activation", ["geglu", "relu", "silu"])
def test_gluon_fc1_keeps_the_bits_of_the_other_activations(activation):
    base = TILES["m32l4_sx4p_m_t16" if activation == "geglu" else "m32k_sx4p_f4_t16"]
    k128 = _triton_twin_of_gluon_fc1(dataclasses.replace(base, **GLUON_FC1["n64s3"]))
    _assert_tiles_keep_bits(k128, dataclasses.replace(k128, fc1_gluon=True), (64, 4, 1024, 512, 160), activation)


@pytest.mark.parametrize("name", ["m32l4_sx4p_m_t16_gg_s2", "m32k_sx4p_f4_t16_gg_s2", "m32l4_sx4p_m_gg_s2",
                                  "m32k_sx4p_f4_gg_s2"])
def test_gluon_fc1_tiles_keep_the_bits_of_their_triton_form(name):
    """The "_gg_s2" tiles (both FCs in Gluon, the tails in Triton) against the same tiles in Triton only."""
    activation = "swiglu" if name.startswith("m32l4") else "squared_relu"
    tile = TILES[name]
    _assert_tiles_keep_bits(triton_form(tile), tile, (128, 8, 2048, 768, 256 if "_t16" in name else 384), activation)


@pytest.mark.parametrize("name", ["m32l4_sx4p_m_t16_gg_s2", "m32k_sx4p_f4_t16_gg_s2"])
def test_cuda_graph_replay_with_the_gluon_fc1(name):
    """Both Gluon kernels and the second stream in one graph, replayed with new routing and valid-token counts."""
    activation = "swiglu" if name.startswith("m32l4") else "squared_relu"
    _graph_replay_of(lambda *shape: TILES[name], 256, (256, 170, 5), activation)


# Session 20: the Gluon tiles (with Gluon tails, the Gluon FC2 on the 16-token tiles); session 21: opt-in, the
# 16- / 32-token ones only; session 22: the 64-token ones and the 128-token tiles' Gluon tails again (two register
# sets): choose_config's pick at these token counts, then its bits against its Triton form.
def _is_gluon_twin(tile) -> bool:
    """Whether ``tile`` is one of ``_GLUON_TWINS``' tiles, or (the 16-token picks since session 47) its "_eg2" form."""
    return any(tile is TILES[name] or tile is TILES.get(name + triton_tiles.GROUPED_SUFFIX)
               for name in triton_tiles._GLUON_TWINS.values())


@pytest.mark.parametrize("activation,tokens", [(a, t) for t in (64, 256, 384, 512, 640, 1024)
                                               for a in ("swiglu", "squared_relu")])
def test_gluon_defaults_keep_the_bits_of_their_triton_form(activation, tokens, monkeypatch):
    """With GLUON_ENV=1 ``choose_config`` returns a ``_GLUON_TWINS`` tile, and that tile gives the same bits as
    its Triton form (unless its FC2 runs on two chains: session 26), within BOUND of float64, every row written."""
    from megatron_mxfp8_moe.kernels import triton_moe as host

    experts, topk, hidden, inter = 128, 8, 2048, 768
    monkeypatch.setenv(host.GLUON_ENV, "1")
    tile = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts)
    assert _is_gluon_twin(tile)
    _assert_tiles_keep_bits(triton_form(tile), tile, (experts, topk, hidden, inter, tokens), activation,
                            same_bits=same_bits_as_triton_form(tile))


@pytest.mark.parametrize("name,tokens,activation", [("m32k_sx4p_f4_t16_g_s2_gt", 256, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt", 256, "swiglu"),
                                                    ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2", 256, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", 256, "swiglu"),
                                                    ("m32k_sx4p_f4_g_s2_n64_c2", 384, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov", 200, "swiglu"),
                                                    ("m32l4_sx4p_m_gg_s2_nov", 384, "swiglu"),
                                                    ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q", 256, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw", 256, "swiglu"),
                                                    ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw", 256, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_of", 256, "swiglu"),
                                                    ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_of", 256, "squared_relu"),
                                                    ("s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_pdl", 64, "swiglu"),
                                                    ("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_pdl", 64, "squared_relu"),
                                                    ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_pdl", 256, "swiglu"),
                                                    ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_pdl", 256, "squared_relu")])
def test_cuda_graph_replay_with_gluon_tails(name, tokens, activation):
    """Gluon kernels on the main and the tail tile (the tail pair on the second stream) in one graph, replayed with
    new routing and valid-token counts: equal to eager, within BOUND of float64."""
    _graph_replay_of(lambda *shape: TILES[name], tokens, (tokens, tokens * 2 // 3, 5), activation)


@pytest.mark.parametrize("in_registers", [False, True])
@pytest.mark.parametrize("tokens,activation", [(8, "swiglu"), (16, "squared_relu"), (32, "squared_relu"),
                                               (64, "swiglu"), (128, "squared_relu")])
def test_cuda_graph_replay_with_the_one_program_route(tokens, activation, in_registers):
    """Sessions 30 / 37: choose_config's pick (the routed GEMV at 8 tokens, MMA tiles from 16) with the one-program
    route (``route_parallel_pairs=0``; the default since session 37 routes from several programs), its tables in
    scratch or in registers (``route_in_registers``), in one graph, replayed with new routing and valid-token counts:
    equal to eager, within BOUND of float64."""
    def config_for(tokens, hidden, inter, topk, experts):
        cfg = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts)
        return dataclasses.replace(cfg, route_parallel_pairs=0, route_in_registers=in_registers)
    _graph_replay_of(config_for, tokens, (tokens, max(1, tokens * 2 // 3), 1), activation)


@pytest.mark.parametrize("tokens,activation", [(256, "swiglu"), (256, "squared_relu"), (512, "squared_relu"),
                                               (1024, "swiglu")])
def test_cuda_graph_replay_with_the_route_from_several_programs_above_1024_pairs(tokens, activation):
    """Session 37: choose_config's pick with the route from several programs up to 8192 pairs
    (``route_parallel_pairs=8192``, in place of the two chunked launches) in one graph, replayed with new routing and
    valid-token counts: equal to eager, within BOUND of float64."""
    def config_for(tokens, hidden, inter, topk, experts):
        cfg = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts)
        return dataclasses.replace(cfg, route_parallel_pairs=8192)
    _graph_replay_of(config_for, tokens, (tokens, tokens * 2 // 3, 5), activation)


@pytest.mark.parametrize("activation,tokens", [(a, t) for t in (16, 24, 64, 384, 512, 640, 1024)
                                               for a in ("swiglu", "squared_relu")])
def test_cuda_graph_replay_with_the_default_gluon_tiles(activation, tokens, monkeypatch):
    """Session 23: the Gluon twins that ``choose_config`` picks by default (GLUON_ENV unset; 1-16 pairs per expert
    since session 34, and 28-72) in one graph, replayed with new routing and valid-token counts: equal to eager,
    within BOUND of float64."""
    from megatron_mxfp8_moe.kernels import triton_moe as host

    monkeypatch.delenv(host.GLUON_ENV, raising=False)
    # with another Triton too: what "auto" would run
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)

    def config_for(tokens, hidden, inter, topk, experts):
        cfg = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts)
        assert any(t.fc1_gluon or t.fc2_gluon for t in cfg.launch_tiles)
        return cfg
    _graph_replay_of(config_for, tokens, (tokens, tokens * 2 // 3, 5), activation)


@pytest.mark.parametrize("tokens", [12, 16, 64, 128])
def test_cuda_graph_replay_with_the_large_hidden_squared_relu_default(tokens, monkeypatch):
    """Sessions 36-37: from H 3072 the squared-ReLU default at 0.75-8 pairs per expert is the all-f8x2 "_f128_st"
    (qwen3-235b-a22b's shape) in one graph, replayed with new routing and valid-token counts: equal to eager, within
    BOUND of float64."""
    from megatron_mxfp8_moe.kernels import triton_moe as host

    monkeypatch.delenv(host.GLUON_ENV, raising=False)
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)

    def config_for(tokens, hidden, inter, topk, experts):
        cfg = choose_config(tokens, hidden, inter, gated=False, topk=topk, experts=experts)
        assert cfg is TILES[triton_policy._ALL_F8X2_16 + triton_tiles.GROUPED_SUFFIX]  # two expert groups (session 47)
        return cfg
    _graph_replay_of(config_for, tokens, (tokens, tokens * 2 // 3, 5), "squared_relu", shape=(128, 8, 4096, 1536))


@pytest.mark.parametrize("activation,tokens", [(a, t) for t in (64, 256, 640) for a in ("swiglu", "squared_relu")])
def test_opt_in_gluon_tiles_keep_the_bits_over_repeated_calls(activation, tokens):
    """The opt-in Gluon tiles over 40 fresh inputs and routings each (a race shows up as a rare call with garbage
    rows: session 21 measured 3-5% of calls on the removed 64-token Gluon tiles): every call the bits of the
    Triton form (two-chain FC2 tiles: within 1e-2 of it, all finite), every row written; the float64 oracle on the
    first."""

    tile = choose_config(tokens, 2048, 768, gated=activation == "swiglu", topk=8, experts=128, gluon=True)
    assert _is_gluon_twin(tile)
    fc1, fc2, x, probs, ids, out = _assert_fresh_calls_agree(triton_form(tile), tile, tokens, activation, 40,
                                                             exact=same_bits_as_triton_form(tile))
    ref = _reference(x, fc1, fc2, probs, ids, activation, 3, tokens - 2, tokens)
    assert relative_error(out, ref) <= BOUND


def _assert_fresh_calls_agree(ref_tile, tile, tokens: int, activation: str, calls: int, exact: bool):
    """``calls`` fresh inputs and routings (30b shape; 133 routed ids, local experts 3..130, every third token's first
    id -1): ``tile`` writes every row and gives the bits of ``ref_tile`` (``exact``) or finite values within 1e-2
    of it (a race shows up as a rare call with garbage rows). Returns the first call's (fc1, fc2, x, probs, ids,
    ``tile``'s output)."""
    fc1, fc2, *_ = _moe_inputs(128, 8, 2048, 768, tokens, activation)
    first = None
    for call in range(calls):
        x = torch.randn(tokens, 2048, device="cuda", dtype=torch.bfloat16)
        probs, ids = random_routing(tokens, 133, 8, device="cuda")
        ids = ids - 2
        ids[::3, 0] = -1
        one, two = _poisoned_outputs((ref_tile, tile), fc1, fc2, x, probs, ids, tokens - 2, activation)
        if exact:
            assert torch.equal(one, two), f"call {call}: {(one - two).abs().nan_to_num(1e30).max()}"
        else:  # the two-chain FC2 (session 26): another summation order
            assert torch.isfinite(two).all() and relative_error(two, one.double()) <= 1e-2, f"call {call}"
        first = first or (fc1, fc2, x, probs, ids, two)
    return first


@pytest.mark.parametrize("name,tokens,activation", [("l128m_sa_t64pu_s2", 1024, "swiglu"),
                                                    ("l128w_sa_t64p2_s2", 1024, "squared_relu"),
                                                    ("x256m_sa_t32", 4096, "swiglu"),
                                                    ("x256w_sa_t32a", 4096, "squared_relu")])
def test_sync_dots_keep_the_bits(name, tokens, activation):
    """``sync_dots`` (session 21; the "_sd" tiles) retires each dot before the next dequant: the same MMAs in the same
    order, so the bits of the base tile, within BOUND of float64, every row written."""
    _assert_tiles_keep_bits(TILES[name], TILES[name + "_sd"], (128, 8, 2048, 768, tokens), activation)


# Session 24: the "f8x2" tiles (no weight dequant: fp8 wgmmas on the exact hi / lo e4m3 split of the activations).
# Not bit-equal to the dequantizing tiles (the fp8 wgmma adds its products with reduced precision), so each is held to
# the float64 oracle and to the error of the default tile on the same inputs.
F8X2 = ("s16_f8_s2", "m32_f8_t16_s2", "l64_f8_t32_s2", "m32_f8q_t16_s2")


@pytest.mark.parametrize("tile", F8X2)
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 16), (128, 8, 2048, 768, 256), (128, 8, 4096, 1536, 64),
                                  (128, 8, 4096, 1536, 1024), _ODD33, _ODD7],
                         ids=["30b-T16", "30b-T256", "235b-T64", "235b-T1024", "odd33", "odd7"])
def test_f8x2_tiles_match_float64(tile, activation, case):
    _check_f8x2_tile(tile, activation, case)


def _check_f8x2_tile(tile, activation, case):
    """Every row written (NaN-poisoned fp32 out), nothing past ``rows``, zeros past ``valid_tokens``; relative error
    within BOUND of the float64 oracle and at most 1.5x that of the default tile's Triton form (dequantizing, no f8x2
    kernel: since sessions 32 / 33 the defaults at 1.5-16 pairs per expert, since 34 at 1-16, run the f8x2 FC1) on
    the same inputs; the same bits again."""
    from megatron_mxfp8_moe.kernels import triton_policy

    experts, topk, hidden, inter, tokens = case
    with pytest.MonkeyPatch.context() as patch:  # the twin's Triton form, not the all-f8x2 pick of large H
        patch.setattr(triton_policy, "_ALL_F8X2_FROM_HIDDEN", 1 << 30)
        dequantizing = triton_form(choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk,
                                                 experts=experts))
    assert all(t.dequant != "f8x2" and not t.fc1_f8x2 for t in dequantizing.launch_tiles)
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, inter, tokens, activation)
    default, split = _poisoned_outputs((dequantizing, TILES[tile]), fc1, fc2, x, probs, ids, valid_rows, activation)
    ref = _reference(x, fc1, fc2, probs, ids, activation, 3, valid_rows, tokens)
    err, err_default = relative_error(split, ref), relative_error(default, ref)
    print(f"f8x2 {tile} {activation} {case}: rel err {err:.3e}, dequantizing default {err_default:.3e}")
    assert err <= BOUND and err <= 1.5 * err_default, (err, err_default)
    assert split[valid_rows:].abs().max().item() == 0 if valid_rows < tokens else True
    again = _poisoned_outputs((TILES[tile],), fc1, fc2, x, probs, ids, valid_rows, activation)[0]
    assert torch.equal(again, split), "the same inputs gave different bits"


@pytest.mark.parametrize("tile,tokens,activation", [
    ("s16_f8_s2", 64, "swiglu"), ("s16_f8_s2", 16, "squared_relu"), ("m32_f8_t16_s2", 256, "squared_relu"),
    ("m32_f8_t16_s2", 256, "swiglu"), ("l64_f8_t32_s2", 512, "squared_relu")])
def test_cuda_graph_replay_of_the_f8x2_tiles(tile, tokens, activation):
    _graph_replay_of(lambda *shape: TILES[tile], tokens, (tokens, tokens // 2, 1), activation)


# Session 24: the f8x2 tiles with FC2 in Gluon ("_gf"; compiled on the CPU only in session 24). The same values and
# order of block sums as the Triton f8x2 FC2; held to the oracle like the other f8x2 tiles.
F8X2_GLUON = ("s16_f8_s2_gf", "s16_f8q_s2_gf", "m32_f8_t16_s2_gf", "m32_f8q_t16_s2_gf")


@pytest.mark.parametrize("tile", F8X2_GLUON)
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 16), (128, 8, 2048, 768, 256), (128, 8, 4096, 1536, 64)],
                         ids=["30b-T16", "30b-T256", "235b-T64"])
def test_f8x2_gluon_fc2_tiles_match_float64(tile, activation, case):
    _check_f8x2_tile(tile, activation, case)


def test_f8x2_gluon_fc2_rejects_shapes_it_cannot_tile():
    """I not a multiple of 128: a clear error before any launch, the output untouched."""
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(*_ODD7[:4], _ODD7[4], "swiglu")
    out = torch.full((x.shape[0], x.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(MXFP8InputError, match="fc2_gluon"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", local_expert_offset=3,
                         valid_tokens=torch.tensor([valid_rows], device="cuda", dtype=torch.int32), out=out,
                         config=TILES["s16_f8_s2_gf"])
    assert torch.isnan(out).all()


def test_cuda_graph_replay_of_the_f8x2_gluon_fc2_tiles():
    _graph_replay_of(lambda *shape: TILES["m32_f8q_t16_s2_gf"], 256, (256, 128, 1), "squared_relu")


# Session 31: the squared-ReLU f8x2 tiles with FC1 in Gluon too ("_g1": 128 rows, 3 stages; "_g1n64": 64 rows, 4;
# compiled on the CPU only in session 31). Their FC1 rounds the activated rows to bf16 before the split, so they are
# held to the oracle (and to 1.5x the default tile's error), not to the Triton f8x2 FC1's bits.
F8X2_GLUON_FC1 = ("s16_f8q_s2_gf_g1", "s16_f8q_s2_gf_g1n64", "m32_f8q_t16_s2_gf_g1", "m32_f8q_t16_s2_gf_g1n64",
                  "s16_f8q_s2_gf_g1_f128", "s16_f8q_s2_gf_g1_f128s4",  # session 32: the FC2 on 128 rows too
                  "s16_f8q_s2_gf_g1_fs", "s16_f8q_s2_gf_g1_f128_fs",  # ... and FC1 writing FC2's split rows
                  "s16_f8q_s2_gf_g1_f128w8",  # session 34: that FC2 on 8 warps
                  "s16_f8q_s2_gf_g1_f128_st",  # session 35: FC2's split scales transposed
                  "s16_f8q_s2_gf_g1_f128_st_g128")  # ... and one token scale per 128-value step (prepared)


@pytest.mark.parametrize("tile", F8X2_GLUON_FC1)
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 16), (128, 8, 2048, 768, 64), (128, 8, 2048, 768, 256),
                                  (128, 8, 4096, 1536, 64)], ids=["30b-T16", "30b-T64", "30b-T256", "235b-T64"])
def test_f8x2_gluon_fc1_tiles_match_float64(tile, case):
    _check_f8x2_tile(tile, "squared_relu", case)


@pytest.mark.parametrize("name", ["s16_f8q_s2_gf_g1_fs", "s16_f8q_s2_gf_g1_f128_fs"])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 64)], ids=["30b-T64", "235b-T64"])
def test_f8x2_fc1_split_rows_equal_the_split_launch(name, case):
    """Session 32: an "_fs" tile's FC1 splits its bf16-rounded rows in registers with the split launch's own functions
    (``_split_scale``, ``_split_terms``), so the layer gives the bits of the same tile with the split launch."""
    _assert_tiles_keep_bits(dataclasses.replace(TILES[name], fc1_split_out=False), TILES[name], case, "squared_relu")


# Session 35: "_st", FC2's split rows with their scales transposed (``split_scales_t``): the same values, so the bits
# of the tile without it (run 38 call 2, then with x's scales transposed too: these and 4 more tiles, 18 passed)
@pytest.mark.parametrize("name", ["s16_f8q_s2_gf_g1_f128", "s16_f8q_s2_gf_g1_f128_fs"])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 200), _DECODE1],
                         ids=["30b-T64", "235b-T200", "30b-T1"])
def test_transposed_split_scales_keep_the_bits(name, case):
    _assert_tiles_keep_bits(TILES[name], TILES[name + "_st"], case, "squared_relu")


@pytest.mark.parametrize("tile,tokens", [("s16_f8q_s2_gf_g1", 64), ("m32_f8q_t16_s2_gf_g1n64", 256),
                                         ("s16_f8q_s2_gf_g1_f128_fs", 64), ("s16_f8q_s2_gf_g1_f128_fs_st", 64)])
def test_cuda_graph_replay_of_the_f8x2_gluon_fc1_tiles(tile, tokens):
    _graph_replay_of(lambda *shape: TILES[tile], tokens, (tokens, tokens // 2, 1), "squared_relu")


@pytest.mark.parametrize("tile", ["s16_f8q_s2_gf_g1", "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x"])
def test_f8x2_gluon_fc1_rejects_a_gated_layer_on_128_rows(tile):
    """SwiGLU on a tile whose Gluon f8x2 FC1 has 128 rows (the gated form takes 64 gate rows and their up rows): a
    clear error before any launch, the output untouched."""
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(128, 8, 2048, 768, 64, "swiglu")
    out = torch.full((x.shape[0], x.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(MXFP8InputError, match="the gated Gluon f8x2 FC1 takes fc1_block_n 64"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu",
                         valid_tokens=torch.tensor([valid_rows], device="cuda", dtype=torch.int32), out=out,
                         config=TILES[tile])
    assert torch.isnan(out).all()


# Session 32: the squared-ReLU default twins with the Gluon f8x2 FC1 writing plane-major rows for their dequantizing
# FC2 ("_f1x": main tile, "_f1x64": 64 rows, "_f1xt": the 16-token tail, "_f1xa": both). Other arithmetic than the
# dequantizing FC1, so held to the oracle and 1.5x the default tile's error (gated layers: refused, above). Run 35
# call 2: all passed; "_f1x" / "_f1xt" are the squared-ReLU defaults at 1.5-16 pairs per expert since (1-16 since
# session 34; run 37 call 2: the 16- / 24-token cases passed).
F8X2_FC1_TWINS = {name: "squared_relu" for name in (
    "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x", "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x64",
    "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1x", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt",
    "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xa")}
# ... and the gated ones (session 32: 64 gate rows and their up rows per program; run 36 call 2: all passed; "_f1x" /
# "_f1xt" the SwiGLU defaults at 1.5-16 pairs per expert since session 33)
F8X2_FC1_TWINS.update({name: "swiglu" for name in (
    "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x", "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt",
    "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xa")})
# ... and, session 35 (prepared), "_g128": x's split with one scale per 128-value step (``step_scales``)
F8X2_FC1_TWINS.update({"s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_g128": "squared_relu",
                       "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt_g128": "squared_relu",
                       "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x_g128": "swiglu",
                       "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt_g128": "swiglu"})


@pytest.mark.parametrize("tile", sorted(F8X2_FC1_TWINS))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 16), (128, 8, 2048, 768, 64), (128, 8, 2048, 768, 256),
                                  (128, 8, 4096, 1536, 24), (128, 8, 4096, 1536, 64)],
                         ids=["30b-T16", "30b-T64", "30b-T256", "235b-T24", "235b-T64"])
def test_f8x2_fc1_twins_match_float64(tile, case):
    _check_f8x2_tile(tile, F8X2_FC1_TWINS[tile], case)


@pytest.mark.parametrize("tile,tokens", [("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x", 64),
                                         ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xa", 256),
                                         ("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_g128", 64),
                                         ("s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x", 64),
                                         ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xa", 256)])
def test_cuda_graph_replay_of_the_f8x2_fc1_twins(tile, tokens):
    _graph_replay_of(lambda *shape: TILES[tile], tokens, (tokens, tokens // 2, 1), F8X2_FC1_TWINS[tile])


# Session 26: the Gluon FC2 on two accumulator chains ("_c2" tiles, ``fc2_chains=2``; opt-in, not defaults). Another
# summation order than the Triton FC2, so held to the float64 oracle and to their one-chain form within BOUND.
TWO_CHAINS = [("s16k4_sx4p_m3_g_s2_n64", 64, "swiglu"), ("s16k_sx4p_f4_g_s2_n64", 64, "squared_relu"),
              ("m32l4_sx4p_m_t16_gg_s2_gt", 256, "swiglu"), ("m32k_sx4p_f4_t16_g_s2_gt", 256, "squared_relu"),
              ("m32l4_sx4p_m_t16_gg_s2_gt_n64", 256, "swiglu"), ("m32k_sx4p_f4_t16_g_s2_gt_n64", 256, "squared_relu"),
              ("m32l4_sx4p_m_gg_s2_n64", 384, "swiglu"), ("m32k_sx4p_f4_g_s2_n64", 384, "squared_relu")]


def _one_chain(name: str):
    """The "_c2" tile's form on one chain (its "_n64" variants: 64-row FC2 programs on the main and tail tiles)."""
    return TILES[name] if name in TILES else replace_launch_tiles(TILES[name[:-4]], fc2_block_n=64)


@pytest.mark.parametrize("base,tokens,activation", TWO_CHAINS)
@pytest.mark.parametrize("shape", [(128, 8, 2048, 768), (128, 8, 4096, 1536)], ids=["30b", "235b"])
def test_two_chain_gluon_fc2_tiles_match_float64(base, tokens, activation, shape):
    """Within BOUND of float64, every row written, nothing past ``rows``, zeros past ``valid_tokens``."""
    _assert_tiles_keep_bits(_one_chain(base), TILES[base + "_c2"], (*shape, tokens), activation, same_bits=False)


@pytest.mark.parametrize("base,tokens,activation", TWO_CHAINS[:4])
def test_two_chain_gluon_fc2_tiles_over_fresh_calls_and_graph_replay(base, tokens, activation):
    """20 fresh inputs and routings: every row written and within 1e-2 of the one-chain form (a race would leave
    garbage rows, as session 21 saw); then one graph replayed with new routing and valid-token counts."""
    tile = TILES[base + "_c2"]
    _assert_fresh_calls_agree(_one_chain(base), tile, tokens, activation, 20, exact=False)
    _graph_replay_of(lambda *shape: tile, tokens, (tokens, tokens * 2 // 3, 5), activation)


def _mixed_scale_outputs(activation, tokens, configs_of):
    """``choose_config``'s Gluon tile at ``tokens`` on a small layer with E8M0 bytes > 134 in some row groups
    (``_mixed_scale_layer``), and the fp32 outputs (``_fp32_outputs``) of the reference and checked configurations
    ``configs_of(tile)``; the checked output finite and nonzero on the valid rows."""
    experts, topk, hidden, inter = 8, 2, 512, 256
    gated = activation == "swiglu"
    tile = choose_config(tokens, hidden, inter, gated=gated, topk=topk, experts=experts, gluon=True)
    assert any(t.fc1_gluon or t.fc2_gluon for t in tile.launch_tiles)
    configs = configs_of(tile)  # before the first CUDA call (tools/host_side_of_gpu_tests.py)
    fc1, fc2 = _mixed_scale_layer(experts, hidden, inter, wide=True, gated=gated)
    assert int(fc1.scale_bytes().max()) > 134 and int(fc2.scale_bytes().max()) > 134
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 1e-6
    probs, ids = random_routing(tokens, experts, topk, device="cuda")
    valid = torch.tensor([tokens - 1], device="cuda", dtype=torch.int32)
    outs = _fp32_outputs(configs, x, probs, ids, fc1, fc2, activation, valid)
    assert torch.isfinite(outs[1]).all() and outs[1][: tokens - 1].abs().max() > 0
    return tile, outs


# Session 27: the Gluon kernels' cross-word dequant (``_fp8x4_pair_planes``) with E8M0 bytes > 134 (the second scale
# factor) in some programs.
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("tokens", [24, 48, 88, 200])
def test_gluon_tiles_with_scales_above_2_pow_7_in_some_programs(activation, tokens):
    """Some fc1 / fc2 row groups with E8M0 bytes > 134 (``_mixed_scale_layer``): the Gluon tile ``choose_config`` picks
    (16-, 32- and 64-token blocks; Gluon FC1s gated and not) gives its Triton form's bits where that form keeps them,
    else stays within BOUND of it; and the output is finite and nonzero."""
    tile, outs = _mixed_scale_outputs(activation, tokens, lambda tile: (triton_form(tile), tile))
    if same_bits_as_triton_form(tile):
        assert torch.equal(outs[0], outs[1])
    else:
        assert relative_error(outs[1].double(), outs[0].double()) <= BOUND


# Session 28: the "_nov" tiles (the main tile's Gluon FCs without the step overlap) are choose_config's gated picks at
# 8-28 pairs per expert: the same values in the same MMA order as the tiles with the overlap, hence the same bits.
@pytest.mark.parametrize("name,hidden,inter,tokens", [("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", 2048, 768, 256),
                                                      ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", 2048, 768, 160),
                                                      ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", 4096, 1536, 200),
                                                      ("m32l4_sx4p_m_gg_s2", 2048, 768, 384),
                                                      ("m32l4_sx4p_m_gg_s2", 4096, 1536, 300)])
def test_tiles_without_the_overlap_keep_the_bits_of_the_tiles_with_it(name, hidden, inter, tokens):
    """``name + "_nov"`` is bit-equal to ``name``, within BOUND of float64, every row written."""
    _assert_tiles_keep_bits(TILES[name], TILES[name + "_nov"], (128, 8, hidden, inter, tokens), "swiglu")


# (hidden, intermediate, tokens) at which choose_config picks a Gluon tile of each kind: 16-, 32- (with and without
# tails), 64- and 128-token tiles on qwen3-30b-a3b, the 32-token one on qwen3-235b-a22b
_GLUON_PICK_CASES = [(2048, 768, 64), (2048, 768, 256), (2048, 768, 384), (2048, 768, 640), (2048, 768, 1024),
                     (4096, 1536, 200)]


def _per_byte_scales(cfg):
    """``cfg`` (and its tail) reading the E8M0 scales byte by byte (``scale_words`` off)."""
    return replace_launch_tiles(cfg, scale_words=False)


# Session 28 (run 32 call 1), choose_config's picks since session 29 (the "_sw" twins): the E8M0 bytes read as one
# int32 per row and K step give the same factors, hence the same bits, on choose_config's Gluon picks (both shapes) and
# with E8M0 bytes > 134 in some programs.
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("hidden,inter,tokens", _GLUON_PICK_CASES)
def test_scale_words_keep_the_bits(activation, hidden, inter, tokens):
    """choose_config's Gluon pick (scale words on each Gluon launch tile) is bit-equal to its per-byte form, within
    BOUND of float64, every row written."""
    tile = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=8, experts=128, gluon=True)
    assert all(t.scale_words == (t.fc1_gluon or t.fc2_gluon) for t in tile.launch_tiles)
    assert any(t.scale_words for t in tile.launch_tiles)
    _assert_tiles_keep_bits(_per_byte_scales(tile), tile, (128, 8, hidden, inter, tokens), activation)


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("tokens", [24, 48, 88])
def test_scale_words_with_scales_above_2_pow_7_in_some_programs(activation, tokens):
    """The scale-word factors with E8M0 bytes > 134 in some row groups (``_mixed_scale_layer``): the Gluon pick
    (16-, 32- and 64-token blocks) is bit-equal to its per-byte form, finite and nonzero."""
    tile, outs = _mixed_scale_outputs(activation, tokens, lambda tile: (_per_byte_scales(tile), tile))
    assert any(t.scale_words for t in tile.launch_tiles)
    assert torch.equal(outs[0], outs[1])


# Forms of choose_config's Gluon picks with the same arithmetic, so the same bits as the picks, on both shapes: one
# scale factor in every program whose E8M0 bytes are all below 128 (session 29, the "_of" tiles: ``fc1_one_factor`` /
# ``fc2_one_factor`` on each Gluon FC; the second factor is then exactly 1); each Gluon FC2 a programmatic dependent
# launch of its FC1 (session 30, the "_pdl" tiles: ``fc2_pdl``; its weight copies start before the FC1 ends, its
# token-plane copies after). Name: (TILES suffix, whether a launch tile runs the form).
_SAME_BITS_FORMS = {"one_factor": (triton_tiles._one_factored, lambda t: t.fc1_one_factor or t.fc2_one_factor),
                    "dependent_launch": (triton_tiles._dependent_launched, lambda t: t.fc2_pdl)}


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("hidden,inter,tokens", _GLUON_PICK_CASES)
@pytest.mark.parametrize("form", sorted(_SAME_BITS_FORMS))
def test_forms_of_the_picks_keep_the_bits(form, activation, hidden, inter, tokens):
    """The ``form`` of choose_config's Gluon pick is bit-equal to the pick, within BOUND of float64, every row
    written."""
    form_of, runs_it = _SAME_BITS_FORMS[form]
    tile = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=8, experts=128, gluon=True)
    formed = form_of(tile)  # the pick's f8x2 FC1s, "_f1x", and expert groups kept (no named "_of" / "_pdl" twins)
    assert any(runs_it(t) for t in formed.launch_tiles)
    _assert_tiles_keep_bits(tile, formed, (128, 8, hidden, inter, tokens), activation)


# the "_of" form where some programs hold E8M0 bytes > 134 (those take both factors)
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("tokens", [24, 48, 88])
def test_one_factor_with_scales_above_2_pow_7_in_some_programs(activation, tokens):
    """E8M0 bytes > 134 in some row groups (``_mixed_scale_layer``): the one-factor form of the Gluon pick (those
    programs on two factors, the others on one) is bit-equal to the pick, finite and nonzero."""

    _, outs = _mixed_scale_outputs(activation, tokens, lambda tile: (tile, triton_tiles._one_factored(tile)))
    assert torch.equal(outs[0], outs[1])


# Session 28 (prepared; tools/gpu_next.sh s29a): the FC2 ring loop (``fc2_ring``: constant stage indices) runs the same
# steps in the same order as the FC2 without the overlap, hence the same bits; with scale words too.
@pytest.mark.parametrize("name,hidden,inter,tokens", [("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov", 2048, 768, 256),
                                                      ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov", 4096, 1536, 200),
                                                      ("m32l4_sx4p_m_gg_s2_nov", 2048, 768, 384),
                                                      ("m32l4_sx4p_m_gg_s2_nov", 4096, 1536, 300)])
@pytest.mark.parametrize("scale_words", [False, True])
def test_fc2_ring_keeps_the_bits(name, hidden, inter, tokens, scale_words):
    """``fc2_ring`` (and ``scale_words``) on the main tile: bit-equal to the tile, within BOUND of float64."""
    ring = dataclasses.replace(TILES[name], fc2_ring=True, scale_words=scale_words)
    _assert_tiles_keep_bits(TILES[name], ring, (128, 8, hidden, inter, tokens), "swiglu")


# Session 39 (first run in session 40, run 43): the MMA-bound defaults with the warp-specialized FC2 (``fc2_ws``,
# "_ws"), FC1 ("_ws1") or both ("_wsb"); 32-deep steps ("_k32"), 4-stage rings ("_s4"), the bit-moving dequant ("_sx",
# session 40). Cases with main blocks for both tile sizes, and an odd shape (8 experts, top-2, I = 224: a partial last
# K step, zero-filled by TMA).
_WS_TILES = {"x256w_sa_t32a_ws": "squared_relu", "x256m_sa_t32_ws": "swiglu", "l128w_sa_t32a_s2_ws": "squared_relu",
           "l128m_sa_t32_s2_ws": "swiglu", "x256w_sa_t32a_ws1": "squared_relu", "x256w_sa_t32a_wsb": "squared_relu",
           "l128w_sa_t32a_s2_ws1": "squared_relu", "l128w_sa_t32a_s2_wsb": "squared_relu",
           "x256w_sa_t32a_wsb_k32": "squared_relu", "x256w_sa_t32a_ws_s4": "squared_relu",
           "x256w_sa_t32a_wsb_s4": "squared_relu", "x256w_sa_t32a_wsb_s4_sx": "squared_relu",
           "x256w_sa_t32a_ws_s4_sx": "squared_relu", "x256m_sa_t32_ws_sx": "swiglu"}


@pytest.mark.parametrize("name", sorted(_WS_TILES))
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 4096), (128, 8, 4096, 1536, 2048), (8, 2, 384, 224, 1500)],
                         ids=["30b-T4096", "235b-T2048", "odd-T1500"])
def test_warp_specialized_fcs_match_float64(name, case):
    """Within BOUND of the float64 oracle, every row written, nothing past ``rows``, zeros past ``valid_tokens``, and
    within 2e-3 of the Triton FC2 (``triton_form``: the same products per output element)."""
    tile = TILES[name]
    outs = _assert_tiles_keep_bits(triton_form(tile), tile, case, _WS_TILES[name], same_bits=False)
    assert relative_error(outs[1], outs[0]) <= 2e-3


@pytest.mark.parametrize("name,tokens", [("x256w_sa_t32a_ws", 4096), ("l128m_sa_t32_s2_ws", 2048),
                                         ("x256w_sa_t32a_wsb", 4096), ("x256w_sa_t32a_wsb_s4", 4096)])
def test_cuda_graph_replay_with_the_warp_specialized_fcs(name, tokens):
    _graph_replay_of(lambda *shape: TILES[name], tokens, (tokens, tokens * 2 // 3, 5), _WS_TILES[name])


@pytest.mark.parametrize("name,activation", [  # the persistent forms last: a wrong phase count would hang
    ("x256w_sa_t32a_wsb_s4_d3", "squared_relu"), ("x256w_sa_t32a_wsb_d3", "squared_relu"),
    ("x256m_sa_t32_ws_d3", "swiglu"),
    ("x256w_sa_t32a_wsb_s4_ta", "squared_relu"), ("x256m_sa_t32_ws_ta", "swiglu"),
    ("x256w_sa_t32a_wsb_s4_se", "squared_relu"), ("x256m_sa_t32_ws_se", "swiglu"),
    ("x256w_sa_t32a_wsb_s4_ta_se", "squared_relu"), ("x256w_sa_t32a_wsb_p", "squared_relu"),
    ("x256m_sa_t32_ws_p", "swiglu"), ("x256w_sa_t32a_wsb_p_ta", "squared_relu")])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 4096), (8, 2, 384, 224, 1500)], ids=["30b-T4096", "odd-T1500"])
def test_ws_release_and_epilogue_forms_keep_the_bits(name, activation, case):
    """Session 41: the consumers' per-thread stage release ("_ta", ``ws_thread_arrive``), the epilogue staged whole
    in shared memory ("_se", ``ws_staged_epilogue``) and the persistent kernels ("_p", ``ws_persistent``), and session
    42's deeper bf16 ring ("_d3", ``ws_dstages``) change no value: the same bits as the tile without them, within
    BOUND of float64, every row written."""
    base = name.removesuffix("_d3").removesuffix("_se").removesuffix("_ta").removesuffix("_p")
    _assert_tiles_keep_bits(TILES[base], TILES[name], case, activation)


@pytest.mark.parametrize("name,activation", [
    ("x256w_sa_t32a_wsb_s4_d3", "squared_relu"), ("x256w_sa_t32a_wsb_s4_ta", "squared_relu"),
    ("x256w_sa_t32a_wsb_s4_se", "squared_relu"), ("x256w_sa_t32a_wsb_p", "squared_relu"),
    ("x256m_sa_t32_ws_p", "swiglu")])  # (the SwiGLU default from 176 pairs per expert in session 42)
def test_cuda_graph_replay_with_the_ws_release_and_epilogue_forms(name, activation):
    _graph_replay_of(lambda *shape: TILES[name], 4096, (4096, 4096 * 2 // 3, 5), activation)


# Session 43 (run 46 call 1, tools/gpu_next.sh s43b: all passed on an H100): SwiGLU's gated ws FC1 ("x256m_sa_t32_wsb",
# 64 gate rows and their 64 up rows per tile) against the float64 oracle and its Triton form, on both shapes and an odd
# one (8 experts, top-2, I = 192: 3 gate / up tiles of 64, I a multiple of 64 as the gated ws FC1 needs, H a multiple of
# 128 as the ws FC2 does); its persistent form gives the bits of the one-tile form; a graph replay.
@pytest.mark.parametrize("name", ["x256m_sa_t32_wsb", "x256m_sa_t32_wsb_p"])  # (the persistent form last)
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 4096), (128, 8, 4096, 1536, 2048), (8, 2, 384, 192, 1500)],
                         ids=["30b-T4096", "235b-T2048", "odd-T1500"])
def test_gated_ws_fc1_matches_float64(name, case):
    """Within BOUND of the float64 oracle, every row written, nothing past ``rows``, zeros past ``valid_tokens``, and
    within 2e-3 of the Triton tile (``triton_form``); the persistent form the same bits as the one-tile form."""
    tile = TILES[name]
    one_tile = (TILES["x256m_sa_t32_wsb"],) if tile.ws_persistent else ()
    *others, out = _checked_outputs((triton_form(tile),) + one_tile + (tile,), case, "swiglu")  # each tile once
    assert relative_error(out, others[0]) <= 2e-3
    if one_tile:  # the persistent form against the one-tile form's bits
        assert torch.equal(out, others[1]), (out - others[1]).abs().max().item()


# Session 43 (run 47 call 2, tools/gpu_next.sh s44b: passed on an H100): the persistent defaults at 4 token stages ("_p_s4", 6 fp8 weight
# stages): ring depths change no value, so the bits of the 3-stage tiles.
@pytest.mark.parametrize("name,activation", [("x256w_sa_t32a_wsb_p_s4", "squared_relu"),
                                             ("x256m_sa_t32_wsb_p_s4", "swiglu")])
def test_persistent_ws_at_4_stages_keeps_the_bits(name, activation):
    _assert_tiles_keep_bits(TILES[name.removesuffix("_s4")], TILES[name], (128, 8, 2048, 768, 4096), activation)


# Session 44 (run 47 call 3, tools/gpu_next.sh s44c: all passed on an H100): ``ws_prefetch`` ("_pf": each tile's last steps issue the next tile's
# first copies) changes no value, so the bits of the tile without it: the persistent defaults at 4096 tokens (30b: 32 /
# 24 K steps, so the copies run on; odd: 4 steps, fewer than the 6 fp8 stages, so each tile starts its own), and the
# decode-sized ws tiles (16 / 32 / 64-token blocks, no tail) at 16-256 tokens on both shapes.
@pytest.mark.parametrize("name,activation,case", [
    ("x256w_sa_t32a_wsb_p_pf", "squared_relu", (128, 8, 2048, 768, 4096)),
    ("x256m_sa_t32_wsb_p_pf", "swiglu", (128, 8, 2048, 768, 4096)),
    ("x256w_sa_t32a_wsb_p_pf", "squared_relu", (8, 2, 384, 224, 1500)),
    ("w16_wsb_pf", "squared_relu", (128, 8, 2048, 768, 64)), ("w16_wsb_pf", "squared_relu", (128, 8, 4096, 1536, 16)),
    ("m16_wsb_pf", "swiglu", (128, 8, 2048, 768, 64)), ("w32_wsb_pf", "squared_relu", (128, 8, 2048, 768, 256)),
    ("m32_wsb_pf", "swiglu", (128, 8, 4096, 1536, 256)), ("w64_wsb_pf", "squared_relu", (8, 2, 384, 224, 100))],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_ws_prefetch_keeps_the_bits(name, activation, case):
    """The bits of the tile without ``ws_prefetch``, within BOUND of float64, every row written."""
    tile = TILES[name]
    _assert_tiles_keep_bits(dataclasses.replace(tile, ws_prefetch=False), tile, case, activation)


@pytest.mark.parametrize("name,activation,tokens", [("w16_wsb_pf", "squared_relu", 64), ("m32_wsb_pf", "swiglu", 256),
                                                    ("x256w_sa_t32a_wsb_p_pf", "squared_relu", 4096)])
def test_cuda_graph_replay_with_ws_prefetch(name, activation, tokens):
    _graph_replay_of(lambda *shape: TILES[name], tokens, (tokens, tokens * 2 // 3, 5), activation)


def test_cuda_graph_replay_with_the_gated_ws_fc1():  # (the SwiGLU default from 176 pairs per expert since 43)
    _graph_replay_of(lambda *shape: TILES["x256m_sa_t32_wsb_p"], 4096, (4096, 4096 * 2 // 3, 5), "swiglu")


@pytest.mark.parametrize("activation,ws_name,triton_name", [
    ("squared_relu", "x256w_sa_t32a_wsb_p", "x256w_sa_t32a"), ("swiglu", "x256m_sa_t32_wsb_p", "x256m_sa_t32")])
def test_default_from_176_pairs_runs_the_ws_fcs_and_falls_back_on_unaligned_x(activation, ws_name, triton_name):
    """Sessions 40 / 42 / 43: from 176 pairs per expert the default is the persistent ws tile (squared ReLU "_wsb_p",
    both FCs; SwiGLU "_wsb_p" with the gated ws FC1 since session 43); an x whose rows are not 16-byte aligned
    (cp.async) runs its Triton tile instead, within BOUND of float64, and that x with the ws tile named raises before
    any launch."""
    experts, topk, hidden, inter, tokens = 128, 8, 2048, 768, 4096
    ws = TILES[ws_name]
    assert choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts) is ws
    fc1, fc2, x, probs, ids, valid_rows = _moe_inputs(experts, topk, hidden, inter, tokens, activation)
    default, named = _poisoned_outputs((None, ws), fc1, fc2, x, probs, ids, valid_rows, activation)
    assert torch.equal(default, named)
    ref = _reference(x, fc1, fc2, probs, ids, activation, 3, valid_rows, tokens)
    assert relative_error(default, ref) <= BOUND
    shifted = torch.empty(x.numel() + 1, device="cuda", dtype=x.dtype)[1:].view_as(x)  # rows 2 bytes off
    shifted.copy_(x)
    fallback, triton_tile = _poisoned_outputs((None, TILES[triton_name]), fc1, fc2, shifted, probs, ids,
                                              valid_rows, activation)
    assert torch.equal(fallback, triton_tile) and relative_error(fallback, ref) <= BOUND
    with pytest.raises(MXFP8InputError, match="fc1_ws: x rows must be 16-byte aligned"):
        _poisoned_outputs((ws,), fc1, fc2, shifted, probs, ids, valid_rows, activation)


# Session 47: ``expert_groups`` (the local experts in groups, each with its own route and FC1 / FC2 launch pair(s) on
# its own stream, one combine). Same blocks in the same order per expert, so the bits of one group. The 256-token
# cases run the 32-token picks with their 16-token tails in each group (not yet run on a GPU: tools/gpu_next.sh s48a).
def _grouped(tokens, hidden, inter, topk, experts, activation, groups):
    """``choose_config``'s pick (with its tail tile, if any) with ``expert_groups`` set."""
    cfg = choose_config(tokens, hidden, inter, gated=activation == "swiglu", topk=topk, experts=experts)
    return dataclasses.replace(cfg, expert_groups=groups)


@pytest.mark.parametrize("groups", [2, 4, 8])
@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("case", [(128, 8, 2048, 768, 16), (128, 8, 2048, 768, 64), (128, 8, 4096, 1536, 256),
                                  (40, 4, 1024, 512, 33), (128, 8, 2048, 768, 256)],
                         ids=["30b-T16", "30b-T64", "235b-T256", "odd33", "30b-T256"])
def test_expert_groups_keep_the_bits(case, activation, groups):
    experts, topk, hidden, inter, tokens = case
    one = _grouped(tokens, hidden, inter, topk, experts, activation, 1)
    _assert_tiles_keep_bits(one, dataclasses.replace(one, expert_groups=groups), case, activation)


@pytest.mark.parametrize("activation", ["swiglu", "squared_relu"])
@pytest.mark.parametrize("tokens", [16, 64, 256])
def test_cuda_graph_replay_with_expert_groups(tokens, activation):
    """The group streams captured in one graph (forks and joins as event waits), replayed with new routing and
    valid-token counts: equal to eager, within BOUND of float64."""
    _graph_replay_of(lambda t, h, i, k, e: _grouped(t, h, i, k, e, activation, 4), tokens,
                     (tokens, tokens * 2 // 3, 5), activation)


def _small_permuted_layer():
    """A SwiGLU Triton layer of 8 experts (H 256, I 128) and 48 permuted rows of x / probs on the GPU."""
    from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer

    experts, hidden, inter, rows = 8, 256, 128, 48
    expert_set = ExpertSet.from_bf16(random_weights((experts, 2 * inter, hidden), scale=0.02, device="cuda"),
                                     random_weights((experts, hidden, inter), scale=0.02, device="cuda"), "swiglu")
    layer = MXFP8ExpertLayer(expert_set, backend="triton")
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    return experts, expert_set, layer, x, torch.rand(rows, device="cuda")


# rows per expert of the permuted-contract tests' first case (37 of _small_permuted_layer's rows, two experts empty)
_PERMUTED_COUNTS = [5, 0, 9, 3, 0, 7, 2, 11]


def _permuted_oracle(expert_set, x, probs, count_list):
    """The float64 oracle of ``_small_permuted_layer``'s permuted contract with ``count_list`` rows per expert: the
    reference of the first ``sum(count_list)`` rows of x, and that sum."""
    used = sum(count_list)
    ids = torch.repeat_interleave(torch.arange(len(count_list)), torch.tensor(count_list)).unsqueeze(-1).cuda()
    return moe_reference(x[:used], expert_set.fc1, expert_set.fc2, probs[:used, None], ids, "swiglu"), used


def test_layer_permuted_padding_rows_on_the_device_and_graph_replay():
    """The permuted contract on the Triton layer with device counts that cover fewer rows than x (the flex
    dispatcher's static-shape buffer, padding rows holding NaN): counted rows against the float64 oracle, padding
    rows zero; a CUDA graph captured once and replayed with other counts equals eager calls (no host read of the
    counts anywhere). Added in session 53, not yet run on a GPU when written."""
    experts, expert_set, layer, x, probs = _small_permuted_layer()
    rows, hidden = x.shape
    counts = torch.zeros(experts, dtype=torch.int64, device="cuda")
    out = torch.full((rows, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)

    def set_case(count_list, seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        counts.copy_(torch.tensor(count_list))
        x.copy_(torch.randn(rows, hidden, device="cuda", generator=generator).to(torch.bfloat16))
        probs.copy_(torch.rand(rows, device="cuda", generator=generator))
        used = sum(count_list)
        x[used:], probs[used:] = float("nan"), float("nan")

    cases = [_PERMUTED_COUNTS, [0, 0, 0, 40, 0, 0, 1, 0], [1, 2, 3, 4, 5, 6, 7, 8]]
    set_case(cases[0], 0)
    eager = layer(x, counts, probs, out=out).clone()
    reference, used = _permuted_oracle(expert_set, x, probs, cases[0])
    assert relative_error(eager[:used], reference) <= BOUND
    assert int(eager[used:].count_nonzero()) == 0 and not torch.isnan(eager).any()
    graph = capture_cuda_graph(lambda: layer(x, counts, probs, out=out))
    for seed, count_list in enumerate(cases[1:], start=1):
        set_case(count_list, seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        reference, used = _permuted_oracle(expert_set, x, probs, count_list)
        assert relative_error(replayed[:used], reference) <= BOUND, count_list
        assert int(replayed[used:].count_nonzero()) == 0 and not torch.isnan(replayed).any(), count_list
        assert torch.equal(replayed, layer(x, counts, probs)), count_list  # eager, same inputs: the same bits


def test_layer_permuted_cpu_counts_do_not_synchronize():
    """The training dispatchers hand ``tokens_per_expert`` on the CPU: the permuted contract copies it to the GPU with
    no stream synchronization (``torch.cuda.set_sync_debug_mode("error")`` raises on one) and gives the bits of the
    same counts on the device. Added in session 55; first run in session 56 (run 59, H100): passes, and fails with
    "called a synchronizing CUDA operation" on the earlier blocking ``.to(device)``. Sync debug mode does not flag a
    pageable ``non_blocking`` copy, so the pinning itself is not what this test holds."""
    _, expert_set, layer, x, probs = _small_permuted_layer()
    counts = torch.tensor(_PERMUTED_COUNTS, dtype=torch.int32)
    on_device = layer(x, counts.cuda(), probs)  # builds the stack and compiles the kernels (these may synchronize)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        from_host = layer(x, counts, probs)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    assert torch.equal(from_host, on_device)
    reference, used = _permuted_oracle(expert_set, x, probs, counts.tolist())
    assert relative_error(from_host[:used].float(), reference) <= BOUND
    assert int(from_host[used:].count_nonzero()) == 0


def test_layer_refusals_inside_a_real_graph_capture():
    """Inside a real ``torch.cuda.graph`` capture (the CPU tests patch torch's capture query instead): a layer whose
    stack is not built yet and CPU ``tokens_per_expert`` are both refused with MXFP8InputError, the capture ends, and
    the layer then runs eagerly and in a new capture, whose replay gives the eager bits. Added in session 57 for
    session 56's ``kernels.caps.cuda_graph_capturing`` and run then (run 60, H100): passes, and fails with "DID NOT
    RAISE" when that check always answers False (the stack is then built inside the capture with no error)."""
    _, expert_set, layer, x, probs = _small_permuted_layer()
    counts = torch.tensor(_PERMUTED_COUNTS, dtype=torch.int32)
    on_device = counts.cuda()
    torch.cuda.synchronize()
    with pytest.raises(MXFP8InputError, match="built before CUDA-graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            layer(x, on_device, probs)
    assert not layer.is_built  # nothing was built inside the capture
    eager = layer(x, on_device, probs)  # builds the stack and compiles the kernels
    torch.cuda.synchronize()
    with pytest.raises(MXFP8InputError, match="on the CPU while a CUDA graph is captured"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            layer(x, counts, probs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer(x, on_device, probs)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    reference, used = _permuted_oracle(expert_set, x, probs, counts.tolist())
    assert relative_error(eager[:used].float(), reference) <= BOUND
    assert int(eager[used:].count_nonzero()) == 0
