"""CPU tests of the Hopper Triton MoE: support check, tile choice, routing tables, the swizzled scale offsets, and
the kernels themselves under the Triton interpreter (in a subprocess, since TRITON_INTERPRET must be set before
triton is imported), reading the canonical stacks in place."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from megatron_mxfp8_moe.errors import MXFP8InputError
from megatron_mxfp8_moe.kernels import triton_launch, triton_moe, triton_policy, triton_tiles
from megatron_mxfp8_moe.kernels.triton_moe import (
    TILES,
    TritonMoEConfig,
    choose_config,
    kernel_path,
    route_layout,
    route_reference,
    routing_capacity,
    same_bits_as_triton_form,
    triton_form,
    triton_moe_support,
    triton_mxfp8_moe,
    ws_shared_bytes,
)
from megatron_mxfp8_moe.tensor import MXFP8Tensor, quantize_mxfp8
from megatron_mxfp8_moe.testing import random_routing, random_weights

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


def test_a_triton_other_than_the_gpu_tested_one_is_named_once(caplog):
    """Triton 3.6 ran on the H200s; another version gets one logged warning that names both versions and the scan."""
    from megatron_mxfp8_moe.kernels import triton_support

    assert triton_support.untested_triton_note("3.6.0") is None
    assert triton_support.untested_triton_note("3.6.1+git") is None
    note = triton_support.untested_triton_note("3.8.0")
    assert "3.6" in note and "3.8.0" in note and "sass_hazard_scan" in note
    triton_support.warn_untested_triton.cache_clear()
    with caplog.at_level("WARNING", logger=triton_support.__name__):
        for _ in range(3):
            triton_support.warn_untested_triton("3.7.1")
        triton_support.warn_untested_triton("3.6.0")
    assert [r.getMessage() for r in caplog.records] == [triton_support.untested_triton_note("3.7.1")]


@pytest.mark.parametrize("rows,block_t", [(1, 16), (16, 1), (64, 16), (256, 32), (1024, 128), (4096, 256)])
def test_config_grows_with_rows(rows, block_t):
    cfg = choose_config(rows, 4096, 1536, gated=True, topk=8, experts=128)
    assert cfg.block_t == block_t
    assert cfg == choose_config(rows, 4096, 1536, gated=True, topk=8, experts=128)  # deterministic
    for n, k in ((cfg.fc1_block_n, cfg.fc1_block_k), (cfg.fc2_block_n, cfg.fc2_block_k)):
        assert n & (n - 1) == 0 and k % 32 == 0


@pytest.mark.parametrize("gluon", ["1", "0", "auto"])
def test_choose_config_returns_named_tiles_and_launch_options(gluon, monkeypatch):
    from megatron_mxfp8_moe.kernels import triton_moe

    monkeypatch.setenv(triton_moe.GLUON_ENV, gluon)
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)  # "auto" as with Triton 3.6
    names = {id(tile): name for name, tile in TILES.items()}
    picked = {names[id(choose_config(rows, hidden, inter, gated=gated, topk=8, experts=128))]
              for rows in (1, 4, 8, 16, 64, 256, 1024, 4096) for hidden, inter in ((2048, 768), (4096, 1536))
              for gated in (True, False)}
    bases = ("s16k4_sx4p_m3_s2", "s16k_sx4_f4", "m32l4_sx4p_m_t16_s2", "m32k_sx4p_f4_t16_s2", "l128m_sa_t64pu_s2",
             "l128w_sa_t64p2_s2")
    grouped = ("s16k4_sx4p_m3_s2", "s16k_sx4_f4")  # picked in their "_eg2" form (two expert groups, session 47)
    gluon_able = {names[id(triton_policy._tile(base, 2048, 768))] + (triton_tiles.GROUPED_SUFFIX if base in grouped
                                                                       else "") for base in bases}
    for base in bases:  # "auto" (the default): all these twins (the 32-token ones since session 26)
        expected = gluon != "0"
        assert any(t.fc1_gluon or t.fc2_gluon for t in triton_policy._tile(base, 2048, 768).launch_tiles) == expected
    # the 256-token tiles' persistent ws twins (session 42; the squared-ReLU ws FCs since session 40)
    tiles_256 = {"x256w_sa_t32a", "x256m_sa_t32"} if gluon == "0" else {"x256w_sa_t32a_wsb_p", "x256m_sa_t32_wsb_p"}
    assert picked <= set(TILES) and {"g16p3", "g32p", "g16p", "q1"} | tiles_256 | gluon_able <= picked
    tile = TILES["s16k_sx"]
    assert tile.launch_options(1) == {"num_warps": tile.fc1_warps, "num_stages": tile.fc1_stages}
    capped = dataclasses.replace(tile, fc2_maxnreg=128)
    assert capped.launch_options(2) == {"num_warps": tile.fc2_warps, "num_stages": tile.fc2_stages, "maxnreg": 128}
    assert capped.launch_options(1) == tile.launch_options(1)
    assert capped == TILES["s16k_sx_r"]


@pytest.mark.parametrize("gluon", ["1", "0", "auto"])
@pytest.mark.parametrize("gated", [True, False])
def test_choice_by_pairs_per_expert(gated, gluon, monkeypatch):
    """The regions of ``choose_config`` at top-8 over 128 experts (bounds from the session 5/6 H200 probes)."""
    from megatron_mxfp8_moe.kernels import triton_moe

    monkeypatch.setenv(triton_moe.GLUON_ENV, gluon)
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)  # "auto" as with Triton 3.6

    def pick(rows, experts=128):
        cfg = choose_config(rows, 2048, 768, gated=gated, topk=8, experts=experts)
        return next(name for name, tile in TILES.items() if tile is cfg)
    small = "s16k4_sx4p_m3_s2" if gated else "s16k_sx4_f4"
    if gluon != "0":  # the 16-token tiles' Gluon twins (64-row FC2) are on by default since session 23
        small = triton_tiles._GLUON_TWINS[small]
    small += triton_tiles.GROUPED_SUFFIX  # with two expert groups (session 47)
    # 1-1.5 pairs per expert (16-24 tokens): the twin with the f8x2 FC1 where it is picked (session 34), else q1
    mid = small if gluon != "0" else "q1"
    assert [pick(rows) for rows in (1, 2, 4, 8, 15, 16, 24, 25, 64)] == (
        ["g16p3", "g16p3", "g32p", "q1", "q1", mid, mid, small, small] if gated else
        ["g16p", "g16p", "g16p", "q1", "q1", mid, mid, small, small])
    assert pick(16, experts=16) == small  # 8 pairs per expert when only 16 experts share the pairs
    # 256 tokens: 16 pairs per expert; 512: 32; the one-multiply dequant on 128-token tiles (session 7) with tail
    # tiles (session 8): gated from 24 pairs per expert (session 9), squared ReLU from 64 (1024 tokens); 64-token
    # tails below 72 pairs per expert, 32-token tails from there; squared ReLU with 128 FC1 rows per program from
    # 64 pairs per expert and 256-token tiles from 176 (session 10); 32-token tiles up to 32 (session 12), with
    # 16-token "sx4" tails up to 16 (session 13), "sx4" with plane-major tokens up to 32 (session 14); session 15:
    # 64-token plane tiles from 28 pairs per expert (32-token plane tails below 40) and as the 64-token tails;
    # session 16: every plane / tail tile below 72 pairs per expert with the second stream ("_s2"); session 17:
    # the 128-token tiles with 32-token tails too, and squared ReLU's 2-stage 64-token tile with tails at 28-40
    # session 18-20: the Gluon twins of the plane tiles and of the tiles with plane tails; session 21: only the 16- /
    # 32-token ones, and only where GLUON_ENV opts in; session 22: the 64-token ones and the 128-token tiles'
    # 64-token tails again (two register sets); session 26: the 32-token ones with tails, and squared ReLU's without;
    # session 28: the gated one without tails too ("_nov")
    picks = [pick(rows) for rows in (256, 257, 447, 448, 639, 640, 1023, 1024, 1151, 1152, 2815, 2816, 4096)]
    if gluon != "0":  # "1" and "auto" (the default): every twin; from 176 pairs per expert (2816 tokens) the
        # warp-specialized twin (squared ReLU since session 40, SwiGLU since session 42; its gated ws FC1 since 43)
        gluon_names = {name: triton_name for triton_name, name in triton_tiles._GLUON_TWINS.items()}
        assert [name in gluon_names for name in picks] == [True] * 9 + [False] * 4
        ws_names = {name: triton_name for triton_name, name in triton_tiles._WS_TWINS.items()}
        assert [name in ws_names for name in picks] == [False] * 11 + [True] * 2
        picks = [gluon_names.get(name, ws_names.get(name, name)) for name in picks]
    assert picks == (
        ["m32l4_sx4p_m_t16_s2", "m32l4_sx4p_m_s2", "m32l4_sx4p_m_s2", "l64_sx4p_mu_t32_s2", "l64_sx4p_mu_t32_s2",
         "l64_sx4p_mu_s2", "l64_sx4p_mu_s2", "l128m_sa_t64pu_s2", "l128m_sa_t64pu_s2", "l128m_sa_t32_s2",
         "l128m_sa_t32_s2", "x256m_sa_t32", "x256m_sa_t32"] if gated else
        ["m32k_sx4p_f4_t16_s2", "m32k_sx4p_f4_s2", "m32k_sx4p_f4_s2", "l64k2_sx4p_f4_t32_s2", "l64k2_sx4p_f4_t32_s2",
         "l64k2_sx4p_f4_s2", "l64k2_sx4p_f4_s2", "l128w_sa_t64p2_s2", "l128w_sa_t64p2_s2", "l128w_sa_t32a_s2",
         "l128w_sa_t32a_s2", "x256w_sa_t32a", "x256w_sa_t32a"])
    with pytest.raises(ValueError, match="sx_auto"):
        dataclasses.replace(TILES["d4_sx"], dequant="sx_auto")  # the direct path's FC2 has no sx_auto form


@pytest.mark.parametrize("gluon", ["1", "0", "auto"])
def test_large_hidden_squared_relu_picks_the_all_f8x2_tile(gluon, monkeypatch):
    """Sessions 36-37: from H 3072 the squared-ReLU pick at 0.75-8 pairs per expert is the all-f8x2 "_f128_st"
    wherever the 16-token twin would be picked (and q1 from 0.75 to 1 pair per expert); not with the Gluon twins off,
    not gated, not at H 2048, and not outside that range."""
    from megatron_mxfp8_moe.kernels import triton_moe

    monkeypatch.setenv(triton_moe.GLUON_ENV, gluon)
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)
    picks = {(rows, hidden, gated): choose_config(rows, hidden, hidden * 3 // 8, gated=gated, topk=8, experts=128)
             for rows in (8, 11, 12, 16, 24, 64, 128, 129, 256) for hidden in (2048, 3072, 4096, 7168)
             for gated in (False, True)}
    large = {key for key, tile in picks.items() if tile is TILES["s16_f8q_s2_gf_g1_f128_st" + triton_tiles.GROUPED_SUFFIX]}
    expected = {(rows, hidden, False) for rows in (12, 16, 24, 64, 128) for hidden in (3072, 4096, 7168)}
    assert large == (expected if gluon != "0" else set())
    for (rows, hidden, gated), tile in picks.items():
        if (rows, hidden, gated) not in large:
            assert tile is choose_config(rows, 2048, 768, gated=gated, topk=8, experts=128), (rows, hidden, gated)


def test_tile_choice_uses_the_global_expert_count(monkeypatch):
    """Under EP the map spreads rows * topk pairs over ALL experts (``route_experts``): a rank with 16 of 128
    experts at 16 tokens expects one pair per local expert (q1), not eight (the MMA tiles)."""
    from megatron_mxfp8_moe.kernels import triton_moe

    chosen = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: chosen.append(cfg))
    local, hidden, inter, tokens = 16, 64, 32, 16
    fc1 = quantize_mxfp8(random_weights((local, 2 * inter, hidden), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((local, hidden, inter), scale=0.1), backend="reference")
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    ids = torch.randint(0, 128, (tokens, 8), dtype=torch.int32)
    probs = torch.rand(tokens, 8)
    valid = torch.tensor([tokens], dtype=torch.int32)
    for global_experts in (None, 128):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, local_expert_offset=32, valid_tokens=valid,
                         route_experts=global_experts)
    assert chosen == [TILES["s16k4_sx4p_m3_s2" + triton_tiles.GROUPED_SUFFIX], TILES["q1"]]
    with pytest.raises(MXFP8InputError, match="route_experts"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid, route_experts=8)


def _copy_at_offset(raw: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of the uint8 tensor ``raw`` that starts ``offset`` bytes into its storage (a misaligned view)."""
    shifted = torch.empty(raw.numel() + offset, dtype=torch.uint8)[offset:].view_as(raw)
    return shifted.copy_(raw)


def test_sx_auto_needs_word_aligned_scales(monkeypatch):
    """sx_auto tiles read the swizzled scales as 32-bit words: a stack whose scale bytes start at an odd address
    (a view with a storage offset) is refused with a clear error; other tiles take it."""
    from megatron_mxfp8_moe.kernels import triton_moe

    chosen = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: chosen.append(cfg))
    fc1 = quantize_mxfp8(random_weights((4, 64, 64), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 64, 32), scale=0.1), backend="reference")
    odd = MXFP8Tensor(fc2.data, _copy_at_offset(fc2.scale_bytes(), 1))
    x, ids = torch.randn(8, 64).to(torch.bfloat16), torch.randint(0, 4, (8, 2), dtype=torch.int32)
    probs, valid = torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)
    tail_auto = dataclasses.replace(TILES["l128a_sa"], dequant="sx", tail=TILES["l64b_sa"])  # only the tail's sx_auto
    for cfg in (TILES["l128a_sa"], TILES["l128a_sa_t32"], tail_auto):
        with pytest.raises(MXFP8InputError, match="4-byte aligned"):
            triton_mxfp8_moe(x, probs, ids, fc1, odd, valid_tokens=valid, config=cfg)
    triton_mxfp8_moe(x, probs, ids, fc1, odd, valid_tokens=valid, config=TILES["l64b"])
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid, config=TILES["l128a_sa_t32"])
    assert chosen == [TILES["l64b"], TILES["l128a_sa_t32"]]


def test_sx4_defaults_are_the_sx_tiles_with_word_loads():
    """The defaults up to 8 pairs per expert differ from the tiles GPU-tested as s16k4_sx_m3 (gated) and s16k_sx_f4
    (squared ReLU) only in "sx4"; they are the 16-token tails of the 32-token defaults (8-16 pairs per expert)."""
    assert TILES["s16k4_sx4_m3"] == dataclasses.replace(TILES["s16k4_sx_m3"], dequant="sx4")
    assert TILES["s16k_sx4_f4"] == dataclasses.replace(TILES["s16k_sx_f4"], dequant="sx4")
    assert TILES["m32l4_sx_m_t16"] == dataclasses.replace(TILES["m32l4_sx_m"], tail=TILES["s16k4_sx4_m3"])
    assert TILES["m32a_f4_t16"] == dataclasses.replace(TILES["m32a_f4"], tail=TILES["s16k_sx4_f4"])


def test_plane_defaults_are_the_sx4_tiles_with_planes():
    """The session 14 defaults are the "sx4" tiles GPU-tested bit-equal with and without ``planes``
    (test_planes_keep_the_bits: s16k4_sx4_m3, m32l4_sx4_m, m32k_sx4_f4_t16) with planes on, tails included."""
    planes = dict(planes=True)
    assert TILES["s16k4_sx4p_m3"] == dataclasses.replace(TILES["s16k4_sx4_m3"], **planes)
    assert TILES["s16k_sx4p_f4"] == dataclasses.replace(TILES["s16k_sx4_f4"], **planes)
    assert TILES["m32l4_sx4p_m_t16"] == dataclasses.replace(TILES["m32l4_sx_m"], dequant="sx4",
                                                            tail=TILES["s16k4_sx4p_m3"], **planes)
    assert TILES["m32k_sx4p_f4_t16"] == TritonMoEConfig(32, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx4",
                                                        fc2_maxnreg=168, tail=TILES["s16k_sx4p_f4"], **planes)


def test_64_token_plane_defaults_are_the_tested_tiles():
    """The session 15 defaults from 28 to 72 pairs per expert are the tiles GPU-tested bit-equal with and without
    ``planes`` (test_planes_keep_the_bits: l64_sx4_mu_t32, l64k2_sx4_f4, l64k_sx4_f4_t32) with planes on, and the
    128-token tiles with them as tails."""
    m32, f32 = TILES["m32l4_sx4p_m"], TILES["m32k_sx4p_f4"]
    assert TILES["l64_sx4p_mu"] == dataclasses.replace(m32, block_t=64, fc1_maxnreg=None)
    assert TILES["l64_sx4p_mu_t32"] == dataclasses.replace(TILES["l64_sx4p_mu"], tail=m32)
    assert TILES["l64k2_sx4p_f4"] == dataclasses.replace(f32, block_t=64, fc1_stages=2)
    assert TILES["l64k_sx4p_f4_t32"] == dataclasses.replace(f32, block_t=64, tail=f32)
    assert TILES["l128m_sa_t64p"] == dataclasses.replace(TILES["l128m_sa"], tail=dataclasses.replace(m32, block_t=64))
    assert TILES["l128w_sa_t64p"] == dataclasses.replace(TILES["l128w_sa"], tail=dataclasses.replace(f32, block_t=64))
    assert all(t.planes for t in (m32, f32))


def test_second_stream_defaults_are_the_tested_tiles():
    """The session 16-17 defaults ("_s2") differ from their tiles only in ``side_stream`` 2, whose launches
    test_side_stream_keeps_the_bits / test_side_stream_on_odd_shapes (GPU) check bit for bit against one stream;
    the 256-token tiles keep one stream."""
    names = [name for name in TILES if name.endswith("_s2")
             and not any(t.fc1_gluon or t.fc2_gluon for t in TILES[name].launch_tiles)]  # not the Gluon tiles
    assert len(names) == 20
    for name in names:
        assert TILES[name] == dataclasses.replace(TILES[name[:-3]], side_stream=2) and TILES[name[:-3]].side_stream == 0
        tile = TILES[name]
        f8x2 = tile.dequant == "f8x2"  # the split of x runs beside the route
        assert any(t.planes for t in tile.launch_tiles) or tile.tail is not None or f8x2, name
    for name in ("x256m_sa_t32", "x256w_sa_t32a"):
        assert TILES[name].side_stream == 0
    assert TILES["l128m_sa_t64pu"] == dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64_sx4p_mu"])
    assert TILES["l128w_sa_t64p2"] == dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64k2_sx4p_f4"])
    assert TILES["l64k2_sx4p_f4_t32"] == dataclasses.replace(TILES["l64k2_sx4p_f4"], tail=TILES["m32k_sx4p_f4"])


class _FakeStream:
    """A stream that records its waits into ``events`` (CPU tests of where launches go)."""

    def __init__(self, name, events):
        self.name, self.events = name, events

    def wait_stream(self, other):
        self.events.append(f"{self.name} waits {other.name}")


def _record_streams(monkeypatch):
    """Patch torch's stream calls and the side stream with ``_FakeStream``s; the plane copies record their stream.
    Returns (events, current): the recorded calls and the stack whose last entry is the current stream."""
    events = []
    main = _FakeStream("main", events)
    current = [main]

    class StreamContext:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):  # None stays on the current stream, as torch.cuda.stream(None) does
            current.append(self.stream or current[-1])

        def __exit__(self, *exc):
            current.pop()

    monkeypatch.setattr(triton_launch, "_side_stream", lambda device: _FakeStream("side", events))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "stream", StreamContext)
    monkeypatch.setattr(triton_launch, "_planes_into",
                        lambda x, planes, block_k: events.append(f"planes {current[-1].name}"))
    return events, current


def _small_gated_layer(experts: int) -> tuple:
    """(fc1, fc2, x, ids, probs, valid): a gated layer of ``experts`` experts (H 64, I 32) and 8 tokens at top-2."""
    fc1 = quantize_mxfp8(random_weights((experts, 64, 64), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((experts, 64, 32), scale=0.1), backend="reference")
    x, ids = torch.randn(8, 64).to(torch.bfloat16), torch.randint(0, experts, (8, 2), dtype=torch.int32)
    return fc1, fc2, x, ids, torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)


def test_second_stream_orders_the_launches(monkeypatch):
    """Where the launches go (CPU: the stream calls recorded): with ``side_stream`` 2 the plane copies and the tail pair
    run on the second stream, which forks from the call's stream first and waits for the route before the tail
    pair; the main pair waits for the plane copies, the combine for the tail pair. Level 1 keeps the tail pair on
    the call's stream; 0 makes no stream calls, and CPU tensors get no second stream."""
    from megatron_mxfp8_moe.kernels import triton_moe

    events, current = _record_streams(monkeypatch)
    monkeypatch.setattr(triton_launch, "_route", lambda *args: (events.append(f"route {current[-1].name}"),
                                                                   torch.zeros(4096, dtype=torch.int32),
                                                                   torch.zeros(4096, dtype=torch.int32),
                                                                   torch.zeros(8, dtype=torch.int32))[1:])
    monkeypatch.setattr(triton_launch, "_launch_mma", lambda cfg, *args: events.append(
        f"{'tail' if cfg.block_t == 16 else 'main'} pair {current[-1].name}"))
    monkeypatch.setattr(triton_launch, "_launch_combine", lambda *args: events.append(f"combine {current[-1].name}"))
    fc1, fc2, x, ids, probs, valid = _small_gated_layer(4)

    steps = {}
    for level in (0, 1, 2):
        events.clear()
        cfg = dataclasses.replace(TILES["m32l4_sx4p_m_t16"], side_stream=level)
        triton_moe._launch(cfg, x, probs, ids, fc1, fc2, triton_moe.parse_activation("swiglu"), 0, valid, 8,
                           torch.empty(8, 64, dtype=torch.bfloat16), 4, 64, 32, 2)
        steps[level] = list(events)
    assert steps[0] == ["planes main", "route main", "main pair main", "tail pair main", "combine main"]
    assert steps[1] == ["side waits main", "planes side", "route main", "main waits side", "main pair main",
                        "tail pair main", "combine main"]
    assert steps[2] == ["side waits main", "planes side", "route main", "side waits main", "main waits side",
                        "main pair main", "tail pair side", "main waits side", "combine main"]
    monkeypatch.undo()
    assert triton_launch._side_stream(torch.device("cpu")) is None  # CPU tensors (the interpreter): one stream


def test_expert_groups_order_the_launches(monkeypatch):
    """Where the launches of ``expert_groups`` go (CPU: the stream calls recorded): the plane copies on the side stream,
    the call's stream waits for them; every group stream forks from the call's stream; group ``g``'s route (over its
    experts: local offset and count) and main pair on its own stream; with ``side_stream`` 2 its tail pair on one more
    stream, which waits for the group's route; the call's stream joins every group stream before the one combine.
    Without a tail (or below level 2) one stream per group, its pairs in order; on a CPU device no group streams."""
    from megatron_mxfp8_moe.kernels import triton_moe

    events, current = _record_streams(monkeypatch)
    monkeypatch.setattr(triton_launch, "_streams", lambda device, count: [_FakeStream(f"g{i + 1}", events)
                                                                                 for i in range(count)])

    def route(routing_map, valid_tokens, rows, topk, experts, offset, *args):
        events.append(f"route {offset}+{experts} {current[-1].name}")
        return torch.zeros(4096, dtype=torch.int32), torch.zeros(4096, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)

    monkeypatch.setattr(triton_launch, "_route", route)
    monkeypatch.setattr(triton_launch, "_launch_mma", lambda cfg, fc1_input, inter, dims, weights, *args: events.append(
        f"{'tail' if cfg.block_t == 16 else 'main'} pair {weights[0].data.shape[0]} {current[-1].name}"))
    monkeypatch.setattr(triton_launch, "_launch_combine", lambda *args: events.append(f"combine {current[-1].name}"))
    fc1, fc2, x, ids, probs, valid = _small_gated_layer(5)

    def launches(cfg):
        events.clear()
        triton_moe._launch(cfg, x, probs, ids, fc1, fc2, triton_moe.parse_activation("swiglu"), 3, valid, 8,
                           torch.empty(8, 64, dtype=torch.bfloat16), 5, 64, 32, 2)
        return list(events)

    tails = dataclasses.replace(TILES["m32l4_sx4p_m_t16"], side_stream=2, expert_groups=2)
    assert launches(tails) == [
        "side waits main", "planes side", "main waits side",  # x's planes, then the fork
        "g1 waits main", "g2 waits main", "g3 waits main",
        "route 3+2 main", "g1 waits main", "main pair 2 main", "tail pair 2 g1",  # experts 0-1 (global 3-4)
        "route 5+3 g2", "g3 waits g2", "main pair 3 g2", "tail pair 3 g3",  # experts 2-4 (global 5-7)
        "main waits g1", "main waits g2", "main waits g3", "combine main"]
    assert launches(dataclasses.replace(tails, side_stream=1, expert_groups=3)) == [
        "side waits main", "planes side", "main waits side", "g1 waits main", "g2 waits main",
        "route 3+1 main", "main pair 1 main", "tail pair 1 main", "route 4+2 g1", "main pair 2 g1", "tail pair 2 g1",
        "route 6+2 g2", "main pair 2 g2", "tail pair 2 g2", "main waits g1", "main waits g2", "combine main"]
    monkeypatch.undo()
    assert triton_launch._streams(torch.device("cpu"), 3) == []  # CPU tensors (the interpreter): in order


def test_route_warps_reach_the_route_launch(monkeypatch):
    """``route_warps``, ``route_in_registers`` and ``route_parallel_pairs`` are checked and handed to ``_route``;
    None keeps the default warp rule."""

    seen = []

    class Stop(Exception):
        pass

    def fake_route(*args, **kwargs):
        seen.append(args[-3:])
        raise Stop

    monkeypatch.setattr(triton_launch, "_route", fake_route)
    fc1 = quantize_mxfp8(random_weights((4, 128, 64), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 64, 64), scale=0.1), backend="reference")
    x, ids = torch.randn(8, 64).to(torch.bfloat16), torch.randint(0, 4, (8, 2), dtype=torch.int32)
    probs, valid = torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)
    knobs = ((None, False, 1024), (None, False, 4096), (None, False, 0), (16, False, 0), (None, True, 0))
    for warps, in_registers, parallel_pairs in knobs:
        with pytest.raises(Stop):
            triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid,
                             config=dataclasses.replace(TILES["s16k4_sx_m3"], route_warps=warps,
                                                        route_in_registers=in_registers,
                                                        route_parallel_pairs=parallel_pairs))
    assert seen == list(knobs)
    with pytest.raises(ValueError, match="route_warps"):
        dataclasses.replace(TILES["s16k4_sx_m3"], route_warps=3)
    assert TILES["s16k4_sx_m3"].route_parallel_pairs == 1024  # the default (session 37)
    for knob in ({"route_warps": 8}, {"route_in_registers": True}):
        with pytest.raises(ValueError, match="route_parallel_pairs=0"):
            dataclasses.replace(TILES["s16k4_sx_m3"], **knob)
    for pairs in (-1, 8193):
        with pytest.raises(ValueError, match="route_parallel_pairs must be 0-8192"):
            dataclasses.replace(TILES["s16k4_sx_m3"], route_parallel_pairs=pairs)


def test_planes_of_puts_each_byte_plane_in_one_run():
    """``planes_of``: column ``c * bk + i * bk / 4 + j`` holds K-ordered column ``c * bk + 4j + i``, zeros past K."""
    from megatron_mxfp8_moe.kernels.triton_moe import planes_of

    for k, block_k in ((256, 64), (160, 64), (96, 256), (2048, 256)):
        x = torch.randn(3, k).to(torch.bfloat16)
        p = planes_of(x, block_k)
        padded = -(-k // block_k) * block_k
        assert p.shape == (3, padded) and p.is_contiguous()
        c, i, j = torch.meshgrid(torch.arange(padded // block_k), torch.arange(4), torch.arange(block_k // 4),
                                 indexing="ij")
        stored = (c * block_k + i * (block_k // 4) + j).flatten()
        logical = (c * block_k + 4 * j + i).flatten()
        inside = logical < k
        assert torch.equal(p[:, stored[inside]], x[:, logical[inside]])
        assert not p[:, stored[~inside]].any()
    with pytest.raises(ValueError, match="multiple of 4"):
        planes_of(torch.zeros(2, 8), 6)


_PLANES_SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels.triton_moe import planes_of
    from megatron_mxfp8_moe.kernels.triton_launch import _planes_into

    torch.manual_seed(5)
    same = []
    # K a multiple of the depth, K with a partial last step (zeros past K), rows not a multiple of 8, strided x
    for rows, k, block_k in ((5, 256, 64), (11, 160, 64), (9, 96, 256), (3, 1024, 256), (17, 640, 128)):
        x = torch.randn(rows, 2 * k).to(torch.bfloat16)[:, :k]
        padded = -(-k // block_k) * block_k
        planes = torch.full((rows, padded), float("nan"), dtype=torch.bfloat16)
        _planes_into(x, planes, block_k)
        same.append([rows, k, block_k, bool(torch.equal(planes, planes_of(x, block_k)))])
    print(json.dumps(same))
    """
)


def test_plane_copy_kernel_equals_planes_of():
    """``_planes_kernel`` (the device copy of x that the plane tiles read; Triton interpreter): bit for bit
    ``planes_of`` (zeros past K included) on odd row counts, partial last K steps and strided rows."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _PLANES_SCRIPT], timeout=300)
    assert len(result) == 5 and all(ok for *_, ok in result), result


_SPLIT_SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels.triton_moe import split_rows_buffers, split_rows_reference
    from megatron_mxfp8_moe.kernels.triton_launch import _split_into

    torch.manual_seed(6)
    checks = []
    # K a multiple of 128, K with a partial last step (zeros past K), strided rows, a zero block, wide magnitudes
    # (scales_t: the scales transposed, [KP // 32, rows] seen as [rows, KP // 32]; group: values per scale)
    for rows, k, scales_t, group in ((5, 256, False, 32), (11, 160, False, 32), (3, 1024, False, 32),
                                     (11, 160, True, 32), (5, 256, True, 32), (5, 256, False, 128),
                                     (11, 160, False, 128)):
        x = (torch.randn(rows, 2 * k) * torch.logspace(-3, 3, 2 * k)).to(torch.bfloat16)[:, :k]
        x[0, :32] = 0
        q, s = split_rows_buffers(rows, k, "cpu", scales_t, group)
        _split_into(x, q, s)
        q_ref, s_ref = split_rows_reference(x, group)
        terms = q.float().reshape(rows, -1, 2, 32)
        block_scales = s.repeat_interleave(group // 32, dim=1)
        back = ((terms[:, :, 0] + terms[:, :, 1]) * block_scales[:, :, None]).reshape(rows, -1)
        kp = q.shape[1] // 2
        padded = torch.nn.functional.pad(x.float().abs(), (0, kp - k))
        amax = padded.reshape(rows, -1, group).amax(dim=2).repeat_interleave(group, dim=1)[:, :k]
        big = x.float().abs() >= amax * 2.0 ** -9  # lo on e4m3's grid: the split is exact
        checks.append(dict(rows=rows, k=k, group=group, strides=list(s.stride()),
                           bytes=bool(torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))),
                           scales=bool(torch.equal(s, s_ref)),
                           exact=bool(torch.equal(back[:, :k][big], x.float()[big])),
                           small_err=float(((back[:, :k] - x.float()).abs() / amax.clamp(min=1e-30))[~big].max()),
                           zeros_past_k=bool((back[:, k:] == 0).all())))
    print(json.dumps(checks))
    """
)


def test_split_kernel_equals_its_torch_twin():
    """``_split_rows_kernel`` (the f8x2 tiles' split of x; Triton interpreter): byte for byte ``split_rows_reference``
    (e4m3 hi / lo and fp32 scales); ``s * (hi + lo)`` gives every value back exactly down to 2^-9 of its block's
    largest (at 2^-10 it is not), within 2^-17 of it below; zeros past K. The same with the scales transposed (session
    35, ``split_scales_t``: strides ``(1, rows)``), and with one scale per 128 values (``step_scales``: the largest
    of the 128 in ``[128, 256)``)."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _SPLIT_SCRIPT], timeout=300)
    assert len(result) == 7, result
    assert [c["strides"] for c in result] == [[8, 1], [8, 1], [32, 1], [1, 11], [1, 5], [2, 1], [2, 1]], result
    for check in result:
        assert check["bytes"] and check["scales"] and check["exact"] and check["zeros_past_k"], check
        assert check["small_err"] <= 2.0 ** -17, check


def test_side_stream_is_checked():
    """``side_stream``: 0 (one stream), 1 (plane copies beside the route) or 2 (also the tail pair)."""
    for level in (0, 1, 2):
        assert dataclasses.replace(TILES["m32l4_sx4p_m_t16"], side_stream=level).side_stream == level
    with pytest.raises(ValueError, match="side_stream"):
        dataclasses.replace(TILES["m32l4_sx4p_m_t16"], side_stream=3)


def test_expert_groups_are_checked():
    """``expert_groups``: 1-8, and above 1 only on the MMA path (tail tiles included)."""
    assert dataclasses.replace(TILES["s16k_sx4_f4"], expert_groups=4).expert_groups == 4
    assert dataclasses.replace(TILES["m32k_sx4p_f4_t16"], expert_groups=2).tail is TILES["m32k_sx4p_f4_t16"].tail
    for bad in (0, 9):
        with pytest.raises(ValueError, match="expert_groups must be 1-8"):
            dataclasses.replace(TILES["s16k_sx4_f4"], expert_groups=bad)
    for tile in ("q1", "g16p"):  # the routed GEMV, the direct GEMV
        with pytest.raises(ValueError, match="needs the MMA path"):
            dataclasses.replace(TILES[tile], expert_groups=2)


_GROUPS_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels.triton_moe import TritonMoEConfig, triton_mxfp8_moe
    from megatron_mxfp8_moe.kernels.reference import moe_reference
    from megatron_mxfp8_moe.testing import random_expert_stacks, random_routing, relative_error

    torch.manual_seed(11)
    base = TritonMoEConfig(16, 16, 64, 4, 1, 16, 64, 4, 1, True, True)
    forms = {"fp32": {}, "sx4_planes": dict(dequant_fp32=False, dequant="sx4_int", planes=True),
             "f8x2": dict(dequant_fp32=False, dequant="f8x2", fp32_dot=False, fc1_block_n=64, fc2_block_n=64,
                          fc1_block_k=64, fc2_block_k=64),
             # 32-token blocks with 16-token tail tiles (an expert's last 1-16 pairs): 64 rows put about 18 pairs on
             # each expert, so both tables are used (``tables``); the f8x2 tail beside a fp32 main tile reads split rows
             "tail": dict(block_t=32, tail=base), "f8x2_tail": dict(block_t=32, tail=dataclasses.replace(
                 base, dequant_fp32=False, dequant="f8x2", fp32_dot=False, fc1_block_n=64, fc2_block_n=64,
                 fc1_block_k=64, fc2_block_k=64))}
    result = {}
    for activation, hidden, inter in (("swiglu", 96, 32), ("squared_relu", 64, 32)):
        experts, topk = 5, 2
        fc1, fc2 = random_expert_stacks(experts, hidden, inter, activation, scale=0.1, backend="reference")
        for form, extra in forms.items():
            rows = 64 if "tail" in form else 9
            x = torch.randn(rows + 2, hidden).to(torch.bfloat16)
            probs, ids = random_routing(rows + 2, experts + 2, topk)
            ids = ids - 1  # -1 and the id past the local range are skipped (offset 1: local ids 1..5)
            valid = rows - 2
            ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation, local_expert_offset=1,
                                valid_tokens=valid)
            outs = {}
            for groups in (1, 2, 3, 5, 8):  # 8 > 5 experts: one group per expert
                cfg = dataclasses.replace(base, expert_groups=groups, **extra)
                out = torch.full((x.shape[0], hidden), float("nan"))
                triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=1,
                                 valid_tokens=torch.tensor([valid], dtype=torch.int32), rows=rows, out=out, config=cfg)
                outs[groups] = out
            one = outs[1]
            result[f"{activation}_{form}"] = dict(
                err=relative_error(one[:rows], ref), tail_zero=bool((one[valid:rows] == 0).all()),
                untouched=bool(torch.isnan(one[rows:]).all()),
                same_bits={g: bool(torch.equal(o[:rows], one[:rows]) and torch.isnan(o[rows:]).all())
                           for g, o in outs.items()})
            if "tail" in form:  # whether some expert fills a 32-token block and some leaves 1-16 pairs for a tail
                local = ids[:valid][(ids[:valid] >= 1) & (ids[:valid] <= experts)] - 1
                counts = torch.bincount(local, minlength=experts)
                result[f"{activation}_{form}"]["tables"] = [bool((counts > 16).any()),
                                                            bool(((counts % 32 >= 1) & (counts % 32 <= 16)).any())]
    print(json.dumps(result))
    """
)


def test_expert_groups_keep_the_bits_under_the_interpreter():
    """``expert_groups`` (session 47): the local experts in 2, 3, 5 or 8 groups (more groups than experts: one each),
    each with its own route and launch pair(s), give the bits of one group (Triton interpreter; on the CPU the groups
    run in order on one stream), for fp32 operands, "sx4" with planes, the f8x2 tiles and 32-token tiles with 16-token
    tails (bf16 or f8x2), both activations, with ids outside the local range, -1 and rows past ``valid_tokens``; one
    group matches the float64 oracle."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _GROUPS_SCRIPT], timeout=900)
    assert len(result) == 10, result
    for name, check in result.items():
        assert check["err"] < 1e-2 and check["tail_zero"] and check["untouched"], (name, check)
        assert check["same_bits"] == {"1": True, "2": True, "3": True, "5": True, "8": True}, (name, check)
        assert check.get("tables", [True, True]) == [True, True], (name, check)


def test_planes_need_the_sx4_tiles():
    """``planes`` is for the "sx4" tiles only (the others read K-ordered tokens)."""
    assert dataclasses.replace(TILES["s16k4_sx4_m3"], planes=True).planes
    for tile in ("s16k4_sx_m3", "l128a_sa", "q1", "g16p"):
        with pytest.raises(ValueError, match="planes"):
            dataclasses.replace(TILES[tile], planes=True)


def test_sx4_needs_word_aligned_weight_rows(monkeypatch):
    """"sx4" tiles read weight rows as 32-bit words: a stack whose fp8 rows start at an address that is not a
    multiple of 4 (a view with a storage offset) is refused with a clear error before any launch; the same tile
    with "sx" takes it. "sx4" is for the MMA path with K tiles of 64 or more."""
    from megatron_mxfp8_moe.kernels import triton_moe

    chosen = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: chosen.append(cfg))
    fc1 = quantize_mxfp8(random_weights((4, 64, 64), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 64, 32), scale=0.1), backend="reference")
    odd = MXFP8Tensor(_copy_at_offset(fc1.data.view(torch.uint8), 2).view(fc1.data.dtype), fc1.scale_bytes())
    x, ids = torch.randn(8, 64).to(torch.bfloat16), torch.randint(0, 4, (8, 2), dtype=torch.int32)
    probs, valid = torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)
    words = dataclasses.replace(TILES["s16k4_sx_m3"], dequant="sx4")
    with pytest.raises(MXFP8InputError, match="32-bit words"):
        triton_mxfp8_moe(x, probs, ids, odd, fc2, valid_tokens=valid, config=words)
    triton_mxfp8_moe(x, probs, ids, odd, fc2, valid_tokens=valid, config=TILES["s16k4_sx_m3"])
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid, config=words)
    assert chosen == [TILES["s16k4_sx_m3"], words]
    for bad in (dict(direct=True, fc1_gate_merge=False), dict(gemv=True, direct=True, fc1_gate_merge=False),
                dict(fc2_block_k=32)):
        with pytest.raises(ValueError, match="sx4"):
            dataclasses.replace(words, **bad)


def _sw_twins() -> dict:
    """``_GLUON_TWINS`` with session 29's "_sw" tiles where session 32 put the f8x2 FC1 twins ("_f1x" / "_f1xt")."""

    return {name: twin.rsplit("_f1x", 1)[0] for name, twin in triton_tiles._GLUON_TWINS.items()}


def test_f8x2_fc1_twins_are_the_sw_twins_with_that_fc1():
    """The defaults at 1.5-8 / 8-16 pairs per expert (squared ReLU since session 32, gated since session 33): the "_sw"
    twins with the Gluon f8x2 FC1 (128 rows, 3 stages; gated: 64 gate rows and their up rows) on the 16-token tile
    (main / tail), nothing else changed; not the Triton form's bits; the flag needs the Gluon FC1 of the plane tiles on
    4 warps."""
    from megatron_mxfp8_moe.kernels import triton_moe

    sixteen, thirty_two = "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw"
    assert triton_tiles._GLUON_TWINS["s16k_sx4_f4"] == sixteen + "_f1x"
    assert triton_tiles._GLUON_TWINS["m32k_sx4p_f4_t16_s2"] == thirty_two + "_f1xt"
    assert triton_tiles._GLUON_TWINS["s16k4_sx4p_m3_s2"] == "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x"
    assert triton_tiles._GLUON_TWINS["m32l4_sx4p_m_t16_s2"] == "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt"
    assert sum("_f1x" in twin for twin in triton_tiles._GLUON_TWINS.values()) == 4
    f1x, f1xt = TILES[sixteen + "_f1x"], TILES[thirty_two + "_f1xt"]
    assert f1x == dataclasses.replace(TILES[sixteen], fc1_f8x2=True)
    assert f1xt.tail == dataclasses.replace(TILES[thirty_two].tail, fc1_f8x2=True, fc1_gluon=True, fc1_block_n=128,
                                            fc1_block_k=128, fc1_stages=3, fc1_warps=4, fc1_gate_merge=False)
    assert dataclasses.replace(f1xt, tail=TILES[thirty_two].tail) == TILES[thirty_two]
    for tile in (f1x, f1xt):
        assert not triton_moe.same_bits_as_triton_form(tile)
        assert not any(t.fc1_f8x2 or t.fc1_gluon or t.fc2_gluon for t in triton_moe.triton_form(tile).launch_tiles)
    for bad in (dict(fc1_gluon=False, fc1_overlap=True), dict(fc1_warps=8), dict(fc1_one_factor=True)):
        with pytest.raises(ValueError, match="fc1_f8x2=True needs the Gluon FC1 of the plane tiles"):
            dataclasses.replace(f1x, **bad)
    # the gated defaults since session 33: 64 gate rows and their up rows per program, on the 16-token tile / tail
    gated_fc1 = dict(fc1_gluon=True, fc1_block_n=64, fc1_block_k=128, fc1_stages=3, fc1_warps=4, fc1_gate_merge=False,
                     fc1_maxnreg=None, fc1_f8x2=True)
    sixteen, thirty_two = "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw", "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw"
    assert TILES[sixteen + "_f1x"] == dataclasses.replace(TILES[sixteen], **gated_fc1)
    assert TILES[thirty_two + "_f1xt"].tail == dataclasses.replace(TILES[thirty_two].tail, **gated_fc1)
    assert TILES[thirty_two + "_f1xa"] == dataclasses.replace(TILES[thirty_two + "_f1xt"], fc1_f8x2=True)
    assert not any(t.fc1_f8x2 for name in (sixteen, thirty_two) for t in TILES[name].launch_tiles)
    # "_fs": the all-f8x2 tiles' Gluon FC1 writing FC2's split rows; the Triton form drops it with the Gluon FC1
    for name in ("s16_f8q_s2_gf_g1", "s16_f8q_s2_gf_g1_f128"):
        assert TILES[name + "_fs"] == dataclasses.replace(TILES[name], fc1_split_out=True)
        assert not triton_moe.triton_form(TILES[name + "_fs"]).fc1_split_out
    for bad in (TILES["s16_f8q_s2_gf"], TILES[sixteen]):  # a Triton f8x2 FC1; a plane tile
        with pytest.raises(ValueError, match="fc1_split_out=True needs an f8x2 tile with the Gluon FC1"):
            dataclasses.replace(bad, fc1_split_out=True)


@pytest.mark.parametrize("gated", [True, False])
def test_same_bits_forms_of_the_gluon_picks_are_valid(gated, monkeypatch):
    """The one-factor (``_one_factored``) and dependent-launch (``_dependent_launched``) forms of every Gluon pick
    from 1 to 4096 tokens, both shapes, build (each config checks itself), keep the pick's expert groups and f8x2
    FC1s, change nothing else but their flags, and set them wherever a Gluon FC2 can take them (one factor: with scale
    words; a dependent launch: "sx4"); neither lands on the all-f8x2 tiles of large H, nor one factor on an f8x2 FC1
    (run 51: it did, a ValueError on the GPU)."""
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)
    seen = 0
    for hidden, inter in ((2048, 768), (4096, 1536)):
        for tokens in (1, 4, 16, 24, 48, 64, 88, 128, 200, 256, 384, 640, 1024, 4096):
            pick = choose_config(tokens, hidden, inter, gated=gated, topk=8, experts=128, gluon=True)
            for form_of, flags, takes_it in (
                    (triton_tiles._one_factored, ("fc1_one_factor", "fc2_one_factor"), lambda t: t.scale_words),
                    (triton_tiles._dependent_launched, ("fc2_pdl",), lambda t: t.dequant == "sx4")):
                form = form_of(pick)
                assert form.expert_groups == pick.expert_groups
                for tile, formed in zip(pick.launch_tiles, form.launch_tiles):
                    assert formed.fc1_f8x2 == tile.fc1_f8x2 and not (formed.fc1_f8x2 and formed.fc1_one_factor)
                    assert dataclasses.replace(formed, **{flag: getattr(tile, flag) for flag in flags},
                                               tail=tile.tail) == tile
                if any(t.fc2_gluon and takes_it(t) for t in pick.launch_tiles):
                    seen += 1
                    assert any(getattr(t, flag) for t in form.launch_tiles for flag in flags)
    assert seen >= 20


def test_step_scales_are_checked():
    """"_g128" (session 35, ``step_scales``, prepared): one token scale per 128-value step on the f8x2 FC1 of the
    16-token twins, on the "_f1xt" twins' tails, and on both FCs of "_f128_st", nothing else changed; the Triton form
    drops it; it needs the Gluon f8x2 kernels on every split buffer and no "_fs" split writer, and a main tile and its
    tail that both read x's split rows must agree."""
    from megatron_mxfp8_moe.kernels import triton_moe

    for name in ("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x", "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x",
                 "s16_f8q_s2_gf_g1_f128_st"):
        assert TILES[name + "_g128"] == dataclasses.replace(TILES[name], step_scales=True), name
    for twin in ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt", "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt"):
        assert TILES[twin + "_g128"] == dataclasses.replace(
            TILES[twin], tail=dataclasses.replace(TILES[twin].tail, step_scales=True))
    for name in [n for n in TILES if n.endswith("_g128")]:
        assert triton_moe.triton_form(TILES[name]) == triton_moe.triton_form(TILES[name[:-5]]), name
    assert not any(t.step_scales for name, tile in TILES.items() if not name.endswith("_g128")
                   for t in tile.launch_tiles)
    assert not triton_moe.same_bits_as_triton_form(TILES["s16_f8q_s2_gf_g1_f128_st_g128"])  # other split values
    assert not triton_moe.same_bits_as_triton_form(TILES["s16_f8q_s2_gf_g1_f128_st"])  # its FC1 rounds to bf16
    assert triton_moe.same_bits_as_triton_form(TILES["s16_f8q_s2_gf"])  # Triton f8x2 FC1, Gluon f8x2 FC2
    for bad in (TILES["s16_f8q_s2_gf"], TILES["s16_f8q_s2_gf_g1_f128_fs"], TILES["s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw"]):
        with pytest.raises(ValueError, match="step_scales=True needs the Gluon f8x2 kernels on every split buffer"):
            dataclasses.replace(bad, step_scales=True)
    with pytest.raises(ValueError, match="tail.step_scales False differs from True"):  # its tail: Triton f8x2
        dataclasses.replace(TILES["m32_f8q_t16_s2_gf_g1"], step_scales=True, tail=dataclasses.replace(
            TILES["m32_f8q_t16_s2_gf_g1"].tail, fc1_gluon=True, fc2_gluon=True))


def test_transposed_split_scales_are_checked():
    """"_st" (session 35, ``split_scales_t``): the all-f8x2 "_f128" tiles with their FC2 split rows' scales transposed,
    nothing else changed; the Triton form drops the flag; it needs the Gluon f8x2 FC1 and FC2 (the Triton f8x2 kernels
    and the plane tiles read row-major scales), and a main tile and its tail that are both "f8x2" must agree."""
    from megatron_mxfp8_moe.kernels import triton_moe

    for name in ("s16_f8q_s2_gf_g1_f128", "s16_f8q_s2_gf_g1_f128_fs"):
        assert TILES[name + "_st"] == dataclasses.replace(TILES[name], split_scales_t=True), name
        assert triton_moe.triton_form(TILES[name + "_st"]) == triton_moe.triton_form(TILES[name]), name
    assert sorted(name for name, tile in TILES.items() if any(t.split_scales_t for t in tile.launch_tiles)) == [
        "s16_f8q_s2_gf_g1_f128_fs_st", "s16_f8q_s2_gf_g1_f128_st", "s16_f8q_s2_gf_g1_f128_st_eg2",
        "s16_f8q_s2_gf_g1_f128_st_g128"]
    for bad in (TILES["s16_f8q_s2_gf"], dataclasses.replace(TILES["s16_f8q_s2_gf_g1_f128"], fc2_gluon=False),
                TILES["s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x"]):  # Triton f8x2 FC1; Triton f8x2 FC2; a plane tile
        with pytest.raises(ValueError, match="split_scales_t=True needs an 'f8x2' tile with the Gluon FC1 and FC2"):
            dataclasses.replace(bad, split_scales_t=True)
    with pytest.raises(ValueError, match="tail.split_scales_t False differs from True"):  # its tail: Triton f8x2
        dataclasses.replace(TILES["m32_f8q_t16_s2_gf_g1"], split_scales_t=True)


def test_gluon_fc2_is_checked(monkeypatch):
    """The Gluon FC2 (``fc2_gluon``) takes only the plane tiles at 128-deep FC2 steps, and a call refuses shapes it
    cannot tile, and a CPU device, with a clear error before any launch."""
    from megatron_mxfp8_moe.errors import BackendUnavailableError
    from megatron_mxfp8_moe.kernels import triton_moe

    tile = dataclasses.replace(TILES["m32k_sx4p_f4"], fc2_block_k=128, fc2_gluon=True)
    for bad, field in ((dict(planes=False), "planes"), (dict(fc2_block_k=256), "fc2_block_k"),
                       (dict(fc2_block_n=32), "fc2_block_n"), (dict(fc2_warps=2), "fc2_warps"),
                       (dict(fc2_stages=1), "fc2_stages"), (dict(fc2_split_k=2), "fc2_split_k")):
        with pytest.raises(ValueError, match=f"fc2_gluon needs.*{field}="):
            dataclasses.replace(tile, **bad)
    # two FC2 accumulator chains (session 26): the Gluon FC2 of the plane tiles only, and no longer the Triton bits
    assert dataclasses.replace(tile, fc2_chains=2).fc2_chains == 2
    for bad in (dict(fc2_chains=3), dict(fc2_chains=2, fc2_gluon=False), dict(fc2_chains=0)):
        with pytest.raises(ValueError, match="fc2_chains must be 1, or 2 with the Gluon FC2"):
            dataclasses.replace(tile, **bad)
    # the Gluon kernels without the step overlap (session 27, prepared): Gluon only, the same bits as the Triton form
    gluon_fc1 = TILES["m32l4_sx4p_m_t16_gg_s2_gt_n64_c2"]
    quiet = dataclasses.replace(gluon_fc1, fc1_overlap=False, fc2_overlap=False)
    assert not (quiet.fc1_overlap or quiet.fc2_overlap)
    assert triton_moe.triton_form(quiet) == triton_moe.triton_form(gluon_fc1)
    for name, base in (("fc1", quiet), ("fc2", tile)):
        with pytest.raises(ValueError, match=f"{name}_overlap=False needs the Gluon {name.upper()}"):
            dataclasses.replace(base, **{f"{name}_overlap": False, f"{name}_gluon": False})
    # session 28's "_nov" tiles: the main tile's Gluon FCs without the overlap, nothing else changed, the tail untouched
    for name in ("m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", "m32l4_sx4p_m_gg_s2"):
        assert TILES[name].fc1_gluon and TILES[name].fc2_gluon
        assert TILES[name + "_nov"] == dataclasses.replace(TILES[name], fc1_overlap=False, fc2_overlap=False)
        assert triton_moe.triton_form(TILES[name + "_nov"]) == triton_moe.triton_form(TILES[name])
    # session 28's scale words: Gluon kernels of the plane tiles only; the Triton form drops them
    words = dataclasses.replace(tile, scale_words=True)
    assert triton_moe.triton_form(words) == triton_moe.triton_form(tile)
    for base, bad in ((tile, dict(fc2_gluon=False)), (TILES["m32_f8_t16_s2_gf"], {})):  # the f8x2 FC2: no such form
        with pytest.raises(ValueError, match="scale_words=True needs a Gluon FC1 or FC2"):
            dataclasses.replace(base, scale_words=True, **bad)
    # ... and the FC2's ring loop: the Gluon FC2 without the overlap only; I a multiple of 128 * stages per call
    ring = dataclasses.replace(tile, fc2_overlap=False, fc2_ring=True, fc2_stages=3)
    assert triton_moe.triton_form(ring) == triton_moe.triton_form(dataclasses.replace(tile, fc2_stages=3))
    for bad in (dict(fc2_overlap=True), dict(fc2_gluon=False, fc2_overlap=True)):
        with pytest.raises(ValueError, match="fc2_ring=True needs the Gluon FC2 of the plane tiles without"):
            dataclasses.replace(ring, **bad)
    for name in ("s16k_sx4p_f4_g_s2_n64_c2_st4", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2"):  # "_f1q": a Gluon FC1, 128 rows
        assert not TILES[name].fc1_gluon
        assert TILES[name + "_f1q"] == dataclasses.replace(TILES[name], fc1_gluon=True, fc1_block_n=128,
                                                           fc1_block_k=128, fc1_stages=3, fc1_warps=4,
                                                           fc1_maxnreg=None, fc1_overlap=False)
    # session 29's "_sw" twins: scale words on each Gluon launch tile, main and tail, nothing else changed (since
    # session 32 the squared-ReLU ones at 1.5-16 pairs per expert with the f8x2 FC1 on one launch tile: below)
    for name, twin in _sw_twins().items():
        assert twin.endswith("_sw"), name
        assert triton_moe.triton_form(TILES[twin]) == triton_moe.triton_form(TILES[twin[:-3]]), name
        assert triton_moe.replace_launch_tiles(TILES[twin], scale_words=False) == TILES[twin[:-3]], name
        assert all(t.scale_words == (t.fc1_gluon or t.fc2_gluon) for t in TILES[twin].launch_tiles), name
    assert TILES["l128m_sa_t64pu_s2_gt_sw"].tail.scale_words and not TILES["l128m_sa_t64pu_s2_gt_sw"].scale_words
    # session 29's "_of" candidates: one factor on each Gluon FC of each launch tile, nothing else changed; the Triton
    # form drops it; the flags need that FC in Gluon with scale words
    for twin in _sw_twins().values():
        of = TILES[twin + "_of"]
        if "_f1q" in twin:  # the squared-ReLU Gluon FC1 with one factor under a 128-register cap
            assert of.fc1_maxnreg == 128 and TILES[twin].fc1_maxnreg is None
            of = dataclasses.replace(of, fc1_maxnreg=None)
        assert triton_moe.replace_launch_tiles(of, fc1_one_factor=False, fc2_one_factor=False) == TILES[twin], twin
        assert all((t.fc1_one_factor, t.fc2_one_factor) == (t.fc1_gluon, t.fc2_gluon) for t in of.launch_tiles), twin
        assert triton_moe.triton_form(of) == triton_moe.triton_form(TILES[twin]), twin
    sw = TILES["m32l4_sx4p_m_gg_s2_nov_sw"]
    for bad, name in ((dict(scale_words=False), "fc2"), (dict(fc2_gluon=False, fc2_overlap=True), "fc2")):
        with pytest.raises(ValueError, match=f"{name}_one_factor=True needs the Gluon {name.upper()} with scale_words"):
            dataclasses.replace(sw, fc2_one_factor=True, **bad)
    with pytest.raises(ValueError, match="fc1_one_factor=True needs the Gluon FC1 with scale_words"):
        dataclasses.replace(TILES["s16k4_sx4p_m3_g_s2_n64_c2_st4_sw"], fc1_one_factor=True)  # a Triton FC1
    # session 30's "_pdl" candidates: each Gluon FC2 a programmatic dependent launch of its FC1, nothing else changed;
    # the Triton form drops it; the flag needs the Gluon FC2 of the plane tiles
    for twin in _sw_twins().values():
        pdl = TILES[twin + "_pdl"]
        assert triton_moe.replace_launch_tiles(pdl, fc2_pdl=False) == TILES[twin], twin
        assert all(t.fc2_pdl == t.fc2_gluon for t in pdl.launch_tiles) and any(t.fc2_pdl for t in pdl.launch_tiles)
        assert triton_moe.triton_form(pdl) == triton_moe.triton_form(TILES[twin]), twin
    with pytest.raises(ValueError, match="fc2_pdl=True needs the Gluon FC2 of the plane tiles"):
        dataclasses.replace(TILES["m32k_sx4p_f4_t16_s2"], fc2_pdl=True)  # a Triton FC2
    assert triton_moe.same_bits_as_triton_form(TILES["m32k_sx4p_f4_t16_g_s2_gt"])
    for name in ("m32k_sx4p_f4_t16_g_s2_gt_n64_c2", "s16k_sx4p_f4_g_s2_n64_c2_st4"):
        assert not triton_moe.same_bits_as_triton_form(TILES[name])
        assert all(t.fc2_chains == 1 and not t.fc2_gluon for t in triton_moe.triton_form(TILES[name]).launch_tiles)
    launched = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: launched.append(cfg))
    fc1 = quantize_mxfp8(random_weights((4, 256, 64), scale=0.1), backend="reference")
    x, ids = torch.randn(8, 64).to(torch.bfloat16), torch.randint(0, 4, (8, 2), dtype=torch.int32)
    probs, valid = torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)
    odd = quantize_mxfp8(random_weights((4, 64, 96), scale=0.1), backend="reference")  # I = 96: not 128-deep steps
    with pytest.raises(MXFP8InputError, match="I % 128"):
        triton_mxfp8_moe(x, probs, ids, quantize_mxfp8(random_weights((4, 96, 64), scale=0.1), backend="reference"),
                         odd, activation="squared_relu", valid_tokens=valid, config=tile)
    fc2 = quantize_mxfp8(random_weights((4, 64, 256), scale=0.1), backend="reference")
    with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu", valid_tokens=valid, config=tile)
    odd_scales = MXFP8Tensor(fc2.data, _copy_at_offset(fc2.scale_bytes(), 1))  # scale words need 4-byte alignment
    with pytest.raises(MXFP8InputError, match="scale_words: the FC2 scales must start at a 4-byte aligned address"):
        triton_mxfp8_moe(x, probs, ids, fc1, odd_scales, activation="squared_relu", valid_tokens=valid, config=words)
    with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):  # without scale words that stack is fine
        triton_mxfp8_moe(x, probs, ids, fc1, odd_scales, activation="squared_relu", valid_tokens=valid, config=tile)
    with pytest.raises(MXFP8InputError, match=r"fc2_ring: .* needs I a multiple of 128 \* fc2_stages \(384\)"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu", valid_tokens=valid,
                         config=ring)  # I 256: 2 steps
    # the tail tile of a pair is checked too
    with pytest.raises(MXFP8InputError, match="fc2_block_n"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu", valid_tokens=valid,
                         config=dataclasses.replace(TILES["l64k_sx4p_f4"], tail=dataclasses.replace(tile, fc2_block_n=128)))
    assert launched == []


def test_f8x2_config_is_checked(monkeypatch):
    """``dequant="f8x2"`` (session 24) names what it does not take; its Gluon FC2 ("_gf") refuses shapes it cannot
    tile and a CPU device before any launch."""
    from megatron_mxfp8_moe.errors import BackendUnavailableError
    from megatron_mxfp8_moe.kernels import triton_moe

    tile = TILES["s16_f8_s2_gf"]
    assert tile.dequant == "f8x2" and tile.fc2_gluon and not tile.fc1_gluon
    for bad, what in ((dict(planes=True), "planes"), (dict(fc1_block_k=256), "block_k other"),
                      (dict(fc2_block_n=96), "block_n not a multiple of 64"), (dict(block_t=8), "block_t below 16"),
                      (dict(fc2_block_k=64), "fc2_gluon without"), (dict(fc2_warps=8), "fc2_gluon without"),
                      (dict(fc2_split_k=2), "fc2_split_k"), (dict(fc1_gate_merge=True), "fc1_gate_merge"),
                      (dict(direct=True), "direct / gemv")):
        with pytest.raises(ValueError, match=f"dequant='f8x2' does not take.*{what}"):
            dataclasses.replace(tile, **bad)
    launched = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: launched.append(cfg))
    x, ids = torch.randn(8, 128).to(torch.bfloat16), torch.randint(0, 4, (8, 2), dtype=torch.int32)
    probs, valid = torch.rand(8, 2), torch.tensor([8], dtype=torch.int32)
    fc1 = quantize_mxfp8(random_weights((4, 192, 128), scale=0.1), backend="reference")
    odd = quantize_mxfp8(random_weights((4, 128, 96), scale=0.1), backend="reference")  # I = 96
    with pytest.raises(MXFP8InputError, match="I % 128"):
        triton_mxfp8_moe(x, probs, ids, fc1, odd, activation="swiglu", valid_tokens=valid, config=tile)
    fc1 = quantize_mxfp8(random_weights((4, 256, 128), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 128, 128), scale=0.1), backend="reference")
    with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, config=tile)
    # session 34: the Gluon f8x2 FC2 on 8 warps (two warpgroups of 64 rows) where it has 128 rows or more
    assert TILES["s16_f8q_s2_gf_g1_f128w8"] == dataclasses.replace(TILES["s16_f8q_s2_gf_g1_f128"], fc2_warps=8)
    assert dataclasses.replace(tile, fc2_block_n=256, fc2_warps=8).fc2_warps == 8
    # session 31's Gluon f8x2 FC1 ("_g1" / "_g1n64"): 128-deep steps on 4 warps; since session 32 gated too, on 64
    # gate rows and their up rows (otherwise refused before any launch); the rest reach the device check
    for name in ("s16_f8q_s2_gf_g1", "m32_f8q_t16_s2_gf_g1n64"):
        g1 = TILES[name]
        assert g1.dequant == "f8x2" and g1.fc1_gluon and g1.fc2_gluon and g1.fc1_stages >= 3
        for bad in (dict(fc1_warps=8), dict(fc1_block_k=64)):
            with pytest.raises(ValueError, match="dequant='f8x2' does not take.*fc1_gluon without"):
                dataclasses.replace(g1, **bad)
        if g1.fc1_block_n == 64:
            with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):
                triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, config=g1)
        else:
            with pytest.raises(MXFP8InputError, match="the gated Gluon f8x2 FC1 takes fc1_block_n 64"):
                triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="swiglu", valid_tokens=valid, config=g1)
        square = quantize_mxfp8(random_weights((4, 128, 128), scale=0.1), backend="reference")
        with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):
            triton_mxfp8_moe(x, probs, ids, square, fc2, activation="squared_relu", valid_tokens=valid, config=g1)
        # the Gluon f8x2 kernels read a step's 4 E8M0 bytes of a row as one int32: the scales 4-byte aligned
        odd_scales = MXFP8Tensor(square.data, _copy_at_offset(square.scale_bytes(), 1))
        with pytest.raises(MXFP8InputError, match="f8x2: the FC1 scales must start at a 4-byte aligned address"):
            triton_mxfp8_moe(x, probs, ids, odd_scales, fc2, activation="squared_relu", valid_tokens=valid, config=g1)
    assert launched == []


def test_gluon_switch_and_the_triton_fallback(monkeypatch):
    """``choose_config`` picks the Gluon twins where H and I tile by 128: by default (GLUON_ENV unset or "auto", since
    session 23; with Triton 3.6 only) those of the 16-token tiles (1.5-8 pairs per expert), the 32-token tiles with
    tails (8-16) and squared ReLU's without (16-28) (session 26), the 64-token tiles and the 128-token tiles' 64-token
    tails (28-72), with GLUON_ENV=1 also the gated 32-token one without tails (16-28), with 0 none; any
    other value raises. A call whose Gluon tile cannot run here (here: a CPU device) falls back to the Triton twin,
    while an explicit Gluon config raises before any launch."""
    from megatron_mxfp8_moe.errors import BackendUnavailableError
    from megatron_mxfp8_moe.kernels import triton_moe

    shape = dict(gated=True, topk=8, experts=128)
    monkeypatch.delenv(triton_moe.GLUON_ENV, raising=False)
    assert triton_moe.gluon_policy() == "auto"
    # "auto" takes the Gluon twins only with the Triton that ran them on a GPU (3.6); "1" with any
    import triton

    for version, tested in (("3.6.0", True), ("3.6.1+git", True), ("3.7.0", False), ("3.8.0", False)):
        monkeypatch.setattr(triton, "__version__", version)
        triton_policy._gpu_tested_triton.cache_clear()
        assert triton_policy._gpu_tested_triton() is tested, version
        assert choose_config(640, 2048, 768, **shape).fc1_gluon is tested, version
        monkeypatch.setenv(triton_moe.GLUON_ENV, "1")
        assert choose_config(640, 2048, 768, **shape) is TILES["l64_sx4p_mu_gg_s2_sw"]
        monkeypatch.delenv(triton_moe.GLUON_ENV)
    triton_policy._gpu_tested_triton.cache_clear()
    monkeypatch.setattr(triton_policy, "_gpu_tested_triton", lambda: True)
    assert choose_config(256, 2048, 768, **shape) is TILES["m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt"]
    assert choose_config(384, 2048, 768, **shape) is TILES["m32l4_sx4p_m_gg_s2_nov_sw"]
    for value, policy in (("1", "all"), ("on", "all"), ("TRUE", "all"), ("yes", "all"), ("all", "all"),
                          ("0", "off"), ("off", "off"), ("No", "off"), ("", "auto"), (" auto ", "auto")):
        monkeypatch.setenv(triton_moe.GLUON_ENV, value)
        assert triton_moe.gluon_policy() == policy, value
    for value in ("2", "enable", "gluon"):
        monkeypatch.setenv(triton_moe.GLUON_ENV, value)
        with pytest.raises(ValueError, match=f"MEGATRON_MXFP8_MOE_GLUON='{value}': expected auto"):
            choose_config(640, 2048, 768, **shape)
    monkeypatch.setenv(triton_moe.GLUON_ENV, "1")
    for rows, gated, name in ((256, True, "m32l4_sx4p_m_t16"), (256, False, "m32k_sx4p_f4_t16"),
                              (384, True, "m32l4_sx4p_m"), (384, False, "m32k_sx4p_f4")):
        cfg = choose_config(rows, 2048, 768, gated=gated, topk=8, experts=128)
        assert cfg is TILES[triton_tiles._GLUON_TWINS[name + "_s2"]]
        assert TILES[name + "_g_s2"] == dataclasses.replace(TILES[name + "_s2"], fc2_block_k=128, fc2_gluon=True,
                                                            fc2_block_n=128, fc2_stages=3, fc2_maxnreg=None)
        assert TILES[name + "_gg_s2"] == dataclasses.replace(TILES[name + "_g_s2"], fc1_block_k=128, fc1_gluon=True,
                                                             fc1_block_n=64, fc1_stages=3, fc1_warps=4,
                                                             fc1_gate_merge=False, fc1_maxnreg=None)
        assert choose_config(rows, 2048, 768, gated=gated, topk=8, experts=128, gluon=False) is TILES[name + "_s2"]
    # the two "_gg_s2" tiles of a width differ only in their FC1 (the Gluon FC1 replaced it): equal dataclasses
    assert TILES["m32l4_sx4p_m_gg_s2"] == TILES["m32k_sx4p_f4_gg_s2"]
    assert choose_config(256, 2048, 96 * 8, **shape).fc2_gluon  # I = 768
    assert not choose_config(256, 2048, 800, **shape).fc2_gluon  # I not a multiple of 128
    # 4 pairs per expert (the 16-token tiles), 40 (the 64-token tiles), 64 (the 128-token tiles' Gluon tails); from
    # 72 pairs per expert (the 128-token tiles with 32-token tails, the 256-token tiles) Triton only
    assert choose_config(64, 2048, 768, **shape) is TILES["s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x_eg2"]
    assert choose_config(64, 2048, 768, **dict(shape, gated=False)) is TILES["s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_eg2"]
    assert choose_config(640, 2048, 768, **shape) is TILES["l64_sx4p_mu_gg_s2_sw"]
    assert choose_config(640, 2048, 768, **dict(shape, gated=False)) is TILES["l64k2_sx4p_f4_gq_s2_sw"]
    assert choose_config(1024, 2048, 768, **shape) is TILES["l128m_sa_t64pu_s2_gt_sw"]
    for rows in (1152, 2048, 4096):
        for gated in (True, False):
            tiles = choose_config(rows, 2048, 768, **dict(shape, gated=gated)).launch_tiles
            assert not any(t.fc1_gluon or t.fc2_gluon for t in tiles), (rows, gated)
    for value in (None, "auto", "0"):  # the default: Gluon at 1-72 pairs per expert (session 34); "0": nowhere
        if value is None:
            monkeypatch.delenv(triton_moe.GLUON_ENV)
        else:
            monkeypatch.setenv(triton_moe.GLUON_ENV, value)
        for rows in (15, 16, 24, 25, 64, 128, 129, 256, 384, 447, 448, 512, 640, 1024, 1151, 1152, 4096):
            for gated in (True, False):
                tiles = choose_config(rows, 2048, 768, **dict(shape, gated=gated)).launch_tiles
                expected = value != "0" and 16 <= rows <= 1151
                assert any(t.fc1_gluon or t.fc2_gluon for t in tiles) == expected, (value, rows, gated)
                assert any(t.fc1_gluon or t.fc2_gluon for t in choose_config(
                    rows, 2048, 800, **dict(shape, gated=gated)).launch_tiles) is False  # I not a multiple of 128
        assert choose_config(640, 2048, 768, **shape) is (TILES["l64_sx4p_mu_s2"] if value == "0" else
                                                          TILES["l64_sx4p_mu_gg_s2_sw"])
        assert choose_config(640, 2048, 768, **shape, gluon=False) is TILES["l64_sx4p_mu_s2"]
        assert choose_config(256, 2048, 768, **shape, gluon=True) is TILES["m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt"]
    monkeypatch.setenv(triton_moe.GLUON_ENV, "1")
    launched = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: launched.append(cfg))
    fc1 = quantize_mxfp8(random_weights((4, 256, 128), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 128, 128), scale=0.1), backend="reference")
    x = torch.randn(64, 128).to(torch.bfloat16)
    probs, ids = random_routing(64, 4, 2)
    valid = torch.tensor([64], dtype=torch.int32)
    triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid, route_experts=8)  # 16 pairs per expert
    assert launched == [TILES["m32l4_sx4p_m_t16_s2"]]
    for kind in ("_g_s2", "_gg_s2"):
        with pytest.raises(BackendUnavailableError, match="Hopper GPU only"):
            triton_mxfp8_moe(x, probs, ids, fc1, fc2, valid_tokens=valid, config=TILES["m32l4_sx4p_m_t16" + kind])
    assert len(launched) == 1


def test_gluon_defaults_differ_from_their_triton_tiles_in_gluon_kernels_only():
    """Each ``_GLUON_TWINS`` tile keeps its Triton tile's token blocks and tail blocks (so the same route) and runs
    at least one Gluon kernel; session 20's tails run the Gluon FC2 (at 128-deep steps, as the GPU tests compare)."""

    assert len(triton_tiles._GLUON_TWINS) == 12
    for triton_name, name in triton_tiles._GLUON_TWINS.items():
        tile, base = TILES[name], TILES[triton_name]
        assert any(t.fc1_gluon or t.fc2_gluon for t in tile.launch_tiles) and tile.side_stream == 2, name
        assert (tile.block_t, tile.tail is None) == (base.block_t, base.tail is None), name
        if tile.tail is not None:
            assert tile.tail.block_t == base.tail.block_t and tile.tail.fc2_gluon and tile.tail.fc2_block_k == 128
        for t in tile.launch_tiles:
            assert not t.fc1_gluon or (t.fc1_block_k, t.fc1_gate_merge) == (128, False)
            assert not t.fc2_gluon or t.fc2_block_k == 128


def test_gluon_fc1_config_and_shapes_are_checked(monkeypatch):
    """``fc1_gluon`` needs the plane tile it was built for (128-deep steps, separate gate / up tiles, rows per
    warpgroup); shapes it cannot tile raise before any launch, also where a GPU would run it."""
    from megatron_mxfp8_moe.kernels import triton_moe

    tile = TILES["m32l4_sx4p_m_t16_gg_s2"]
    for bad in (dict(fc1_block_k=256), dict(fc1_gate_merge=True), dict(fc1_warps=2), dict(fc1_block_n=96),
                dict(fc1_warps=8, fc1_block_n=64), dict(fc1_stages=2), dict(planes=False, fc2_gluon=False)):
        with pytest.raises(ValueError, match="fc1_gluon needs"):
            dataclasses.replace(tile, **bad)
    assert dataclasses.replace(tile, fc1_warps=8, fc1_block_n=128).fc1_gluon
    fc1 = quantize_mxfp8(random_weights((4, 2 * 96, 128), scale=0.1), backend="reference")  # n_out 96: not 64s
    fc2 = quantize_mxfp8(random_weights((4, 128, 96), scale=0.1), backend="reference")
    problem = triton_moe._gluon_problem(dataclasses.replace(tile, fc2_gluon=False), fc1, fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "fc1_block_n (64)" in str(problem)
    fc1 = quantize_mxfp8(random_weights((4, 256, 96), scale=0.1), backend="reference")  # H 96: not 128s
    fc2 = quantize_mxfp8(random_weights((4, 96, 128), scale=0.1), backend="reference")
    problem = triton_moe._gluon_problem(dataclasses.replace(tile, fc2_gluon=False), fc1, fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "H % 128" in str(problem)
    assert triton_moe._gluon_problem(TILES["m32l4_sx4p_m_t16_s2"], fc1, fc2, torch.device("cuda")) is None


def test_gemv_config_is_checked():
    tile = TILES["d4_sx"]
    assert dataclasses.replace(tile, gemv=True).gemv
    for block_t in (2, 16):  # the routed GEMV runs one pair per program
        with pytest.raises(ValueError, match="needs block_t=1"):
            dataclasses.replace(TILES["s16k_sx"], gemv=True, block_t=block_t)
    assert dataclasses.replace(TILES["s16k_sx"], gemv=True, block_t=1).gemv


def test_kernel_path_by_config_and_pairs():
    """A direct tile past the grid limit falls back to the MMA path; the routed GEMV (q1) rejects it instead of
    running with a wrong block size (its kernels take one pair per position)."""
    assert kernel_path(TILES["g32p"], 128) == "gemv"
    assert kernel_path(TILES["d4_sx"], 128) == "direct"
    assert kernel_path(TILES["q1"], 128) == "routed_gemv"
    assert kernel_path(TILES["s16k_sx_r"], 128) == "routed"
    for name in ("g32p", "g16p3", "d4_sx"):
        assert kernel_path(TILES[name], 65535) != "routed" and kernel_path(TILES[name], 65536) == "routed"
    assert kernel_path(TILES["q1"], 65535) == "routed_gemv"
    with pytest.raises(MXFP8InputError, match="routed GEMV path"):
        kernel_path(TILES["q1"], 65536)
    assert routing_capacity(16, 8, 128, 1) == (128, 128)  # one position per pair, no padding


def test_route_refuses_pairs_beyond_its_int32_sort_keys():
    """The scatter sorts int32 keys ``expert * chunk + lane``: a pair count and expert count whose keys would
    overflow are refused with a clear error before anything is allocated or launched."""
    from megatron_mxfp8_moe.kernels.triton_route import _route

    ids = torch.zeros(2 ** 19, 8, dtype=torch.int32)  # 2**22 pairs: 64 chunks of 65536
    with pytest.raises(MXFP8InputError, match="int32 sort keys"):
        _route(ids, torch.tensor([1], dtype=torch.int32), 2 ** 19, 8, 32768, 0, 128)


def test_route_launch_shape():
    """One program up to 1024 pairs (one chunk holds them all); above, two launches over at most 64 chunks of at
    least 256 pairs that together cover every pair."""
    from megatron_mxfp8_moe.kernels.triton_moe import route_launch_shape

    assert route_launch_shape(1) == (True, 32, 1)
    assert route_launch_shape(200) == (True, 256, 1)
    assert route_launch_shape(1024) == (True, 1024, 1)
    assert route_launch_shape(1025) == (False, 256, 5)
    assert route_launch_shape(32768) == (False, 512, 64)
    assert route_launch_shape(131072) == (False, 2048, 64)
    for pairs in (1025, 4000, 8192, 50000, 10 ** 6):
        one, chunk, n_chunks = route_launch_shape(pairs)
        assert not one and n_chunks <= 64 and chunk >= 256 and (n_chunks - 1) * chunk < pairs <= n_chunks * chunk


def test_route_reference_tail_blocks():
    """block_t 8, tail 3: remainders 1..3 go to a tail block, larger ones take one more full block; the tail table
    starts at max_sorted (positions) and at the 16-byte aligned tail_block_offset (entries)."""
    counts = [9, 14, 0, 3, 8, 11]  # remainders 1 (tail), 6 (absorbed), -, 3 (tail), 0, 3 (tail)
    ids = torch.cat([torch.full((c,), e) for e, c in enumerate(counts)]).view(-1, 1)
    rows = ids.shape[0]
    max_sorted, max_blocks, sorted_len, tail_offset = route_layout(rows, 1, 6, 8, 3)
    assert (max_sorted, max_blocks) == routing_capacity(rows, 1, 6, 8)
    assert sorted_len == max_sorted + 6 * 3 and tail_offset % 4 == 0 and tail_offset >= max_blocks
    sorted_pairs, block_expert, (blocks, tails) = route_reference(ids, rows, experts=6, local_expert_offset=0,
                                                                  block_t=8, tail_t=3)
    assert (blocks, tails) == (1 + 2 + 1 + 1, 3)
    assert block_expert[:blocks].tolist() == [0, 1, 1, 4, 5]
    assert block_expert[tail_offset:tail_offset + tails].tolist() == [0, 3, 5]
    # pairs: expert 0 = 0..8, 1 = 9..22, 3 = 23..25, 4 = 26..33, 5 = 34..44
    assert sorted_pairs[:8].tolist() == list(range(8))
    assert sorted_pairs[8:24].tolist() == list(range(9, 23)) + [-1, -1]
    assert sorted_pairs[max_sorted:max_sorted + 9].tolist() == [8, -1, -1, 23, 24, 25, 42, 43, 44]
    assert sorted_pairs[24:40].tolist() == list(range(26, 42))
    assert sorted_pairs[40:max_sorted].tolist() == [-1] * (max_sorted - 40)
    without = route_reference(ids, rows, experts=6, local_expert_offset=0, block_t=8)
    assert without[2] == 2 + 2 + 1 + 1 + 2 and without[0].numel() == max_sorted


def test_tail_config_is_checked():
    with pytest.raises(ValueError, match="tail.block_t"):
        dataclasses.replace(TILES["m32l_sx"], tail=TILES["l64b_sa"])
    with pytest.raises(ValueError, match="MMA path"):
        dataclasses.replace(TILES["g32p"], tail=TILES["m32l_sx"])
    with pytest.raises(ValueError, match="MMA path"):
        dataclasses.replace(TILES["l128a_sa"], tail=TILES["q1"])
    with pytest.raises(ValueError, match="fc2_split_k"):
        dataclasses.replace(TILES["l128a_sa"], tail=dataclasses.replace(TILES["m32l_sx"], fc2_split_k=2))
    assert TILES["l128a_sa_t32"].tail is TILES["m32l_sx"]


def test_capacity_bounds_any_routing():
    gen = torch.Generator().manual_seed(0)
    for rows, topk, experts, block_t in [(1, 8, 128, 16), (7, 2, 4, 16), (64, 8, 16, 32), (300, 4, 8, 64),
                                         (16, 8, 128, 1), (5, 3, 2, 1)]:
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


def test_kernel_scale_offsets_match_the_swizzle_formula():
    """The kernel splits the 128x4 offset into a row part and a per-K-step column part; their sum is
    ``format.swizzle.swizzle_offset`` for every (row, column), odd shapes and every BLOCK_K included."""
    from megatron_mxfp8_moe.format.swizzle import padded_scale_shape, swizzle_offset

    for rows, scale_cols in ((136, 3), (200, 5), (256, 12), (64, 1)):
        _, padded_cols = padded_scale_shape(rows, scale_cols)
        m = torch.arange(rows).view(-1, 1)
        for cols_per_step in (1, 2, 4, 8):
            for k in range(-(-scale_cols // cols_per_step)):
                c = k * cols_per_step + torch.arange(cols_per_step).view(1, -1)
                row_part = (m // 128) * (padded_cols // 4 * 512) + (m % 32) * 16 + ((m % 128) // 32) * 4
                col_part = (c // 4) * 512 + c % 4
                got = (row_part + col_part)[:, (c[0] < scale_cols)]
                want = swizzle_offset(m, c, scale_cols)[:, (c[0] < scale_cols)]
                assert torch.equal(got, want)


def test_non_canonical_or_released_stacks_are_rejected():
    fc1 = quantize_mxfp8(random_weights((4, 64, 64)), backend="reference")
    fc2 = quantize_mxfp8(random_weights((4, 64, 32)), backend="reference")
    x = torch.randn(3, 64).to(torch.bfloat16)
    probs, ids = torch.rand(3, 2), torch.randint(0, 4, (3, 2))
    valid = torch.tensor([3], dtype=torch.int32)
    with pytest.raises(MXFP8InputError, match="fc1_stack: expected a canonical MXFP8Tensor"):
        triton_mxfp8_moe(x, probs, ids, fc1.dequantize(), fc2, activation="relu", valid_tokens=valid)
    with pytest.raises(MXFP8InputError, match="fc2_stack: expected a stack"):
        triton_mxfp8_moe(x, probs, ids, fc1, fc2.expert(0), activation="relu", valid_tokens=valid)


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
    from megatron_mxfp8_moe.kernels.triton_moe import (TILES, TritonMoEConfig, route_reference, routing_capacity,
                                                     triton_mxfp8_moe)
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import random_expert_stacks, random_routing, random_weights, relative_error

    torch.manual_seed(7)
    result = {}
    # route kernels vs their torch twin (the same tables, position by position: the scatter keeps pair order), at
    # the MMA paths' block sizes and the routed GEMV's 1 (one position per pair, capacity = pairs); the one-program form
    # and the three-launch form (forced with small chunks: 27 pairs in 4 chunks of 8, 1200 pairs in 38 of 32)
    from megatron_mxfp8_moe.kernels import triton_route as route
    small = torch.randint(-1, 7, (9, 3), dtype=torch.int32)
    large = torch.randint(-1, 10, (300, 4), dtype=torch.int32, generator=torch.Generator().manual_seed(7))
    # (the "_reg" cases: the one-program form with its tables in registers, ``_route_in_registers_kernel``)
    for name, ids, valid, experts, block_t, tail_t, split_chunk in [
            ("route4", small, 8, 5, 4, 0, None), ("route1", small, 8, 5, 1, 0, None),
            ("route4_reg", small, 8, 5, 4, 0, None), ("route1_reg", small, 8, 5, 1, 0, None),
            ("route16_reg", large, 251, 8, 16, 0, None), ("route4_tail2_reg", small, 8, 5, 4, 2, None),
            ("route64_tail32_reg", large, 251, 8, 64, 32, None),
            ("route4_split", small, 8, 5, 4, 0, 8), ("route1_split", small, 8, 5, 1, 0, 8),
            ("route16_split", large, 251, 8, 16, 0, 32), ("route16", large, 251, 8, 16, 0, None),
            ("route4_tail2", small, 8, 5, 4, 2, None), ("route4_tail2_split", small, 8, 5, 4, 2, 8),
            ("route64_tail32", large, 251, 8, 64, 32, None), ("route64_tail32_split", large, 251, 8, 64, 32, 32),
            # one-pair blocks: about 1000 blocks, so the split route's programs write 8 slices of the block table
            ("route1_many_split", large, 251, 8, 1, 0, 32),
            # (the "_par" cases: the route from several programs, ``_route_parallel_kernel``)
            ("route4_par", small, 8, 5, 4, 0, None), ("route1_par", small, 8, 5, 1, 0, None),
            ("route4_tail2_par", small, 8, 5, 4, 2, None), ("route16_par", large, 251, 8, 16, 0, None),
            ("route64_tail32_par", large, 251, 8, 64, 32, None), ("route1_many_par", large, 251, 8, 1, 0, None)]:
        route._ROUTE_ONE_PROGRAM_PAIRS, route._ROUTE_CHUNK = (0, split_chunk) if split_chunk else (4096, 256)
        rows = ids.shape[0]
        sorted_pairs, block_expert, blocks = route._route(ids, torch.tensor([valid], dtype=torch.int32), rows,
                                                         ids.shape[1], experts, 1, block_t, tail_t,
                                                         in_registers=name.endswith("_reg"),
                                                         parallel_pairs=4096 if "_par" in name else 0)
        ref_pairs, ref_blocks, ref_count = route_reference(ids, valid, experts=experts, local_expert_offset=1,
                                                           block_t=block_t, tail_t=tail_t)
        max_sorted, _, _, tail_offset = route.route_layout(rows, ids.shape[1], experts, block_t, tail_t)
        counts, ref_counts = [int(blocks[0])], [ref_count]
        regions = [(0, 0, block_t, ref_count)]
        if tail_t:
            counts, ref_counts = [int(blocks[0]), int(blocks[4])], list(ref_count)
            regions = [(0, 0, block_t, ref_count[0]), (max_sorted, tail_offset, tail_t, ref_count[1])]

        def same_blocks(pos0, blk0, width, count):
            return torch.equal(block_expert[blk0:blk0 + count], ref_blocks[blk0:blk0 + count]) and torch.equal(
                sorted_pairs[pos0:pos0 + count * width], ref_pairs[pos0:pos0 + count * width])

        padding = torch.ones_like(sorted_pairs, dtype=torch.bool)
        for pos0, _, width, count in regions:
            padding[pos0:pos0 + count * width] = False
        result[name] = dict(
            split=not route.route_launch_shape(ids.numel())[0], blocks=[counts, ref_counts],
            tail_used=bool(tail_t) and ref_counts[1] > 0,
            tables_equal=all(same_blocks(*region) for region in regions),
            padding=bool((sorted_pairs[padding] == -1).all()))
    route._ROUTE_ONE_PROGRAM_PAIRS, route._ROUTE_CHUNK = 1024, 256

    def run(x, probs, ids, fc1, fc2, activation, rows, valid, cfg):
        out = torch.full((x.shape[0], fc2.shape[1]), float("nan"))
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=1,
                         valid_tokens=torch.tensor([valid], dtype=torch.int32), rows=rows, out=out, config=cfg)
        return out

    def check(name, out, ref, rows, valid, base=None):
        result[name] = dict(
            err=relative_error(out[:rows], ref),
            tail_zero=bool((out[valid:rows] == 0).all()),
            untouched=bool(torch.isnan(out[rows:]).all()),
            equal=None if base is None else bool(torch.equal(out[:rows], base[:rows])),
        )

    # Whole layer on the canonical stacks (128x4-swizzled scales read in place): three activations, an odd K
    # (masked tail), M and K/32 that are not multiples of 128 / 4 (several 128-row scale tiles, a partial
    # 4-column tile), non-local / -1 ids and rows past valid_tokens. Every variant against the float64 oracle.
    cfg = TritonMoEConfig(16, 16, 64, 4, 1, 16, 64, 4, 1, True, True)
    variants = {
        "bits_int": dict(dequant_fp32=False, dequant="bits_int"),
        "splitk": dict(fc2_split_k=2),
        "bits_int_splitk3": dict(dequant_fp32=False, dequant="bits_int", fc2_split_k=3),
        "direct": dict(direct=True),
        "direct_k32": dict(direct=True, fc1_block_k=32, fc2_block_k=32),
        "gemv": dict(direct=True, gemv=True),
        "gemv_k32": dict(direct=True, gemv=True, fc1_block_k=32, fc2_block_k=32, fc2_block_n=8),
        "gemv_pairs": dict(direct=True, gemv=True, fc1_stages=2, fc2_stages=3),
        "gemv_pairs_k32": dict(direct=True, gemv=True, fc1_block_k=32, fc2_block_k=32, fc1_block_n=8),
        "routed_gemv": dict(gemv=True, block_t=1),
        "routed_gemv_k32": dict(gemv=True, block_t=1, fc1_block_k=32, fc2_block_k=32, fc2_block_n=8),
        "gate_merge": dict(fc1_gate_merge=True),  # gated: one FC1 tile of 8 gate rows then their 8 up rows
        "gate_merge_n32": dict(fc1_gate_merge=True, fc1_block_n=32),
        # uint32 word loads, 4 byte-plane MMAs per K step (session 12): planes summed in order, so no bit equality
        "sx4_int": dict(dequant_fp32=False, dequant="sx4_int"),
        "sx4_int_merge_splitk2": dict(dequant_fp32=False, dequant="sx4_int", fc1_gate_merge=True, fc2_split_k=2),
        # the same with plane-major token operands (session 14): the same MMAs on the same values, so the same bits
        "sx4_int_planes": dict(dequant_fp32=False, dequant="sx4_int", planes=True),
        "sx4_int_merge_splitk2_planes": dict(dequant_fp32=False, dequant="sx4_int", fc1_gate_merge=True,
                                             fc2_split_k=2, planes=True),
        # no weight dequant: fp8 dots on the hi / lo split of the activations (session 24); 64- / 32-deep K steps
        # (masked K tails at H 96 / 160), 64 / 128 rows per program (two chains of 32 / 64; tiles past N_OUT)
        "f8x2": dict(dequant_fp32=False, dequant="f8x2", fp32_dot=False, fc1_block_n=64, fc2_block_n=64,
                     fc1_block_k=64, fc2_block_k=64),
        "f8x2_k32": dict(dequant_fp32=False, dequant="f8x2", fp32_dot=False, fc1_block_n=128, fc2_block_n=128,
                         fc1_block_k=32, fc2_block_k=32),
    }
    for activation, hidden, inter in (("swiglu", 96, 32), ("squared_relu", 64, 32), ("geglu", 160, 96),
                                      ("swiglu", 160, 96)):
        experts, topk, rows = 4, 2, 6
        fc1, fc2 = random_expert_stacks(experts, hidden, inter, activation, scale=0.1, backend="reference")
        x = torch.randn(rows + 2, hidden).to(torch.bfloat16)
        probs, ids = random_routing(rows + 2, experts + 2, topk)
        ids = ids - 1  # -1 and the id past the local range are skipped (offset 1: local ids 1..4)
        valid = rows - 1
        ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation, local_expert_offset=1,
                            valid_tokens=valid)
        key = f"{activation}_{hidden}_{inter}"
        base = run(x, probs, ids, fc1, fc2, activation, rows, valid, cfg)
        check(key, base, ref, rows, valid)
        outs = {}
        for name, extra in variants.items():
            outs[name] = run(x, probs, ids, fc1, fc2, activation, rows, valid, dataclasses.replace(cfg, **extra))
            same_as = outs[name[:-len("_planes")]] if name.endswith("_planes") else None
            check(key + "_" + name, outs[name], ref, rows, valid,
                  base if name in ("bits_int", "gate_merge") else same_as)

    # Tail tiles: 48 rows x top-2 over 4 local experts (45 valid rows, ids over 5 experts: about 18 pairs each): 16-token blocks, and an expert's last
    # 1..8 pairs in an 8-token tail block; both route forms (one program; two launches over chunks of 16).
    rng_state = torch.get_rng_state()  # the sections after this one draw the same inputs as without it
    hidden, inter, rows = 96, 32, 48
    fc1, fc2 = random_expert_stacks(4, hidden, inter, "swiglu", scale=0.1, backend="reference")
    x = torch.randn(rows, hidden).to(torch.bfloat16)
    probs, ids = random_routing(rows, 5, 2)  # offset 1: global id 0 is not local
    valid = rows - 3
    ref = moe_reference(x, fc1, fc2, probs, ids, "swiglu", local_expert_offset=1, valid_tokens=valid)
    tails = route_reference(ids, valid, experts=4, local_expert_offset=1, block_t=16, tail_t=8)[2][1]
    for suffix, split_chunk in (("", None), ("_split", 16)):
        route._ROUTE_ONE_PROGRAM_PAIRS, route._ROUTE_CHUNK = (0, split_chunk) if split_chunk else (1024, 256)
        out = run(x, probs, ids, fc1, fc2, "swiglu", rows, valid,
                  dataclasses.replace(cfg, tail=dataclasses.replace(cfg, block_t=8)))
        check("tail_tiles" + suffix, out, ref, rows, valid)
        result["tail_tiles" + suffix]["tails"] = tails
    route._ROUTE_ONE_PROGRAM_PAIRS, route._ROUTE_CHUNK = 1024, 256
    # the tail tile with another dequant than the main tile (the "sx4" 16-token tails of the 32-token tiles)
    out = run(x, probs, ids, fc1, fc2, "swiglu", rows, valid, dataclasses.replace(
        cfg, tail=dataclasses.replace(cfg, block_t=8, dequant_fp32=False, dequant="sx4_int")))
    check("tail_tiles_sx4", out, ref, rows, valid)
    result["tail_tiles_sx4"]["tails"] = tails
    planes = run(x, probs, ids, fc1, fc2, "swiglu", rows, valid, dataclasses.replace(
        cfg, dequant_fp32=False, dequant="sx4_int", planes=True,
        tail=dataclasses.replace(cfg, block_t=8, dequant_fp32=False, dequant="sx4_int", planes=True, fc2_block_k=128)))
    words = run(x, probs, ids, fc1, fc2, "swiglu", rows, valid, dataclasses.replace(
        cfg, dequant_fp32=False, dequant="sx4_int",
        tail=dataclasses.replace(cfg, block_t=8, dequant_fp32=False, dequant="sx4_int", fc2_block_k=128)))
    check("tail_tiles_sx4_planes", planes, ref, rows, valid, words)  # both launches plane-major, two FC2 depths
    result["tail_tiles_sx4_planes"]["tails"] = tails
    # "f8x2" main tiles with a dequantizing tail and the reverse (each launch pair reads its own inter rows): 32-token
    # blocks, an expert's last 1..16 pairs on a 16-token tail (f8x2 dots need 16 token columns)
    f8x2 = dict(dequant_fp32=False, dequant="f8x2", fp32_dot=False, fc1_block_n=64, fc2_block_n=64)
    wide, narrow = dataclasses.replace(cfg, block_t=32), cfg
    tails16 = route_reference(ids, valid, experts=4, local_expert_offset=1, block_t=32, tail_t=16)[2][1]
    for name, main, tail in (("tail_tiles_f8x2", dataclasses.replace(wide, **f8x2), narrow),
                             ("tail_tiles_f8x2_tail", wide, dataclasses.replace(narrow, **f8x2)),
                             ("tail_tiles_f8x2_both", dataclasses.replace(wide, **f8x2),
                              dataclasses.replace(narrow, **f8x2))):
        check(name, run(x, probs, ids, fc1, fc2, "swiglu", rows, valid, dataclasses.replace(main, tail=tail)), ref,
              rows, valid)
        result[name]["tails"] = tails16
    torch.set_rng_state(rng_state)

    # The GEMV defaults exactly as choose_config returns them (BLOCK_K 256 / 512 past K = 96: masked K and scale
    # column tails in a partial 4-column scale tile), int32 ids (one token on one expert twice,
    # -1 and non-local ids), rows < T, valid_tokens > rows, strided x and probs, NaN in the x rows past
    # valid_tokens and in the probs of skipped pairs (must not leak), bf16 and fp32 out, and one local expert
    # with top-1 (the shape choose_config sends to g32p at one token).
    for name, tile, activation, experts, topk, valid, out_dtype in (
            ("g16p3", "g16p3", "swiglu", 3, 2, 9, torch.float32),
            ("g32p_geglu", "g32p", "geglu", 3, 2, 3, torch.bfloat16),
            ("g16p", "g16p", "squared_relu", 3, 2, 3, torch.float32),
            ("g32p_e1k1", "g32p", "swiglu", 1, 1, 3, torch.bfloat16),
            ("q1", "q1", "swiglu", 3, 2, 9, torch.bfloat16),
            ("q1_geglu", "q1", "geglu", 3, 2, 4, torch.float32),
            ("q1_sq", "q1", "squared_relu", 2, 2, 3, torch.bfloat16),
            ("q1_e1k1", "q1", "swiglu", 1, 1, 4, torch.float32)):
        hidden, inter, tokens, rows = 96, 32, 6, 5
        fc1, fc2 = random_expert_stacks(experts, hidden, inter, activation, scale=0.1, backend="reference")
        x = torch.randn(tokens, 2 * hidden).to(torch.bfloat16)[:, :hidden]
        x[valid:] = float("nan")
        ids = torch.randint(-1, experts + 2, (tokens, topk), dtype=torch.int32)  # offset 1: local ids 1..experts
        ids[0] = 1
        probs = torch.rand(tokens, 2 * topk)[:, :topk]
        local = (ids >= 1) & (ids <= experts) & (torch.arange(tokens) < valid)[:, None]
        probs[~local] = float("nan")
        ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation, local_expert_offset=1,
                            valid_tokens=valid)
        out = torch.full((tokens + 1, hidden), float("nan"), dtype=out_dtype)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=1,
                         valid_tokens=torch.tensor([valid], dtype=torch.int32), rows=rows, out=out,
                         config=TILES[tile])
        check("edge_" + name, out, ref, rows, min(valid, rows))

    # Refit without hooks: quantize_experts_ / copy_ on the canonical stacks change what the kernel reads.
    activation, hidden, inter, experts, topk, rows = "swiglu", 160, 96, 4, 2, 5
    fc1, fc2 = random_expert_stacks(experts, hidden, inter, "swiglu", scale=0.1, backend="reference")
    x = torch.randn(rows, hidden).to(torch.bfloat16)
    probs, ids = random_routing(rows, experts, topk)
    ids = ids + 1
    pointers = (fc1.data.data_ptr(), fc1.scale.data_ptr(), fc2.data.data_ptr(), fc2.scale.data_ptr())
    for path in ("routed", "direct", "gemv", "pairs", "routed_gemv"):
        c = dataclasses.replace(cfg, direct=path not in ("routed", "routed_gemv"),
                                gemv=path in ("gemv", "pairs", "routed_gemv"),
                                fc2_stages=3 if path == "pairs" else cfg.fc2_stages,
                                block_t=1 if path == "routed_gemv" else cfg.block_t)
        before = run(x, probs, ids, fc1, fc2, activation, rows, rows, c)
        new1 = random_weights((2, 2 * inter, hidden), scale=0.1)
        fc1.quantize_experts_([0, 2], [new1[0], new1[1]], backend="reference")
        fc2.copy_(quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.1), backend="reference"))
        after = run(x, probs, ids, fc1, fc2, activation, rows, rows, c)
        ref = moe_reference(x, fc1, fc2, probs, ids, activation, local_expert_offset=1)
        result["refit_" + path] = dict(
            changed=bool((after != before).any()), err=relative_error(after[:rows], ref),
            hooks=len(fc1._write_hooks) + len(fc2._write_hooks),
            same_storage=pointers == (fc1.data.data_ptr(), fc1.scale.data_ptr(), fc2.data.data_ptr(),
                                      fc2.scale.data_ptr()))
    print(json.dumps(result))
    """
)

_WIDE_IDS_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels.reference import moe_reference
    from megatron_mxfp8_moe.kernels.triton_moe import TritonMoEConfig, triton_mxfp8_moe
    from megatron_mxfp8_moe.testing import random_expert_stacks, random_routing, relative_error

    torch.manual_seed(11)
    experts, topk, rows, hidden, inter = 3, 2, 6, 64, 32
    fc1, fc2 = random_expert_stacks(experts, hidden, inter, "swiglu", scale=0.1, backend="reference")
    x = torch.randn(rows, hidden).to(torch.bfloat16)
    probs, ids = random_routing(rows, experts, topk)
    ids = ids + 1  # offset 1: local ids 1..3
    wide = ids.clone()
    wide[0, 0] = wide[2, 1] = wide[4, 0] = 2 ** 32 + 1  # the int32 cast alone reads these as local id 1
    dropped = torch.where(wide > experts, -1, wide)
    ref = moe_reference(x, fc1, fc2, probs, dropped, "swiglu", local_expert_offset=1)
    cfg = TritonMoEConfig(16, 16, 64, 4, 1, 16, 64, 4, 1, True, True)
    result = {}
    for name, extra in (("routed", {}), ("routed_parallel", dict(route_parallel_pairs=4096)),
                        ("direct", dict(direct=True)), ("gemv", dict(direct=True, gemv=True)),
                        ("routed_gemv", dict(gemv=True, block_t=1))):
        outs = []
        for map_ in (wide, dropped):
            out = torch.full((rows, hidden), float("nan"))
            triton_mxfp8_moe(x, probs, map_, fc1, fc2, activation="swiglu", local_expert_offset=1,
                             valid_tokens=torch.tensor([rows], dtype=torch.int32), out=out,
                             config=dataclasses.replace(cfg, **extra))
            outs.append(out)
        result[name] = dict(equal=bool(torch.equal(outs[0], outs[1])), err=relative_error(outs[0], ref))
    print(json.dumps(result))
    """
)


def test_int64_ids_past_the_int32_range_are_not_local():
    """An int64 expert id 2**32 + k is outside the local range: the kernels check the range in the map's width before
    the int32 cast (before, it was read as k). Triton interpreter; each kernel path against the map with those ids
    set to -1 (bit for bit) and the float64 oracle."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _WIDE_IDS_SCRIPT], timeout=600)
    assert sorted(result) == ["direct", "gemv", "routed", "routed_gemv", "routed_parallel"], result
    for name, check in result.items():
        assert check["equal"] and check["err"] <= 1e-2, (name, check)


_LAYER_KEYS = ("swiglu_96_32", "squared_relu_64_32", "geglu_160_96", "swiglu_160_96")


def _interpreter_json(args: list, timeout: int):
    """Run ``python -W ignore *args`` under the Triton interpreter (a subprocess: TRITON_INTERPRET must be set
    before triton is imported) and return the JSON of its last output line."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-W", "ignore", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kernels_under_triton_interpreter():
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _INTERPRETER_SCRIPT], timeout=1800)  # 528 s on a 2-core CI machine (session 36)
    routes = sorted(name for name in result if name.startswith("route"))
    assert len(routes) == 22 and sum(name.endswith("_reg") for name in routes) == 5, routes
    assert sum(name.endswith("_par") for name in routes) == 6, routes
    for name in routes:
        route = result[name]
        assert route["split"] == name.endswith("_split"), (name, route)
        assert route["tail_used"] == ("tail" in name), (name, route)
        assert route["blocks"][0] == route["blocks"][1] and route["tables_equal"] and route["padding"], (name, route)
    for key in _LAYER_KEYS:
        for suffix in ("", "_bits_int", "_splitk", "_bits_int_splitk3", "_direct", "_direct_k32", "_gemv", "_gemv_k32",
                       "_gemv_pairs", "_gemv_pairs_k32", "_routed_gemv", "_routed_gemv_k32", "_gate_merge",
                       "_gate_merge_n32", "_sx4_int", "_sx4_int_merge_splitk2", "_sx4_int_planes",
                       "_sx4_int_merge_splitk2_planes", "_f8x2", "_f8x2_k32"):
            check = result[key + suffix]
            assert check["err"] <= 1e-2, (key + suffix, check)
            assert check["tail_zero"] and check["untouched"], (key + suffix, check)
        assert result[key + "_bits_int"]["equal"], "bit-trick dequant differs from the fp32 dequant"
        assert result[key + "_gate_merge"]["equal"], "one gate/up FC1 tile differs from two"
        assert result[key + "_sx4_int_planes"]["equal"], "plane-major tokens differ from the shuffled planes"
        assert result[key + "_sx4_int_merge_splitk2_planes"]["equal"], "plane-major tokens differ (merged, split-K)"
    assert result["tail_tiles_sx4_planes"]["equal"], "plane-major tokens differ on the tail tiles"
    for name in ("tail_tiles", "tail_tiles_split", "tail_tiles_sx4", "tail_tiles_sx4_planes", "tail_tiles_f8x2",
                 "tail_tiles_f8x2_tail", "tail_tiles_f8x2_both"):
        check = result[name]
        assert check["err"] <= 1e-2 and check["tail_zero"] and check["untouched"] and check["tails"] > 0, (name, check)
    for name in ("g16p3", "g32p_geglu", "g16p", "g32p_e1k1", "q1", "q1_geglu", "q1_sq", "q1_e1k1"):
        check = result["edge_" + name]
        assert check["err"] <= 1e-2 and check["tail_zero"] and check["untouched"], (name, check)
    for path in ("routed", "direct", "gemv", "pairs", "routed_gemv"):
        refit = result["refit_" + path]
        assert refit["changed"] and refit["err"] <= 1e-2, refit
        assert refit["hooks"] == 0 and refit["same_storage"], refit


_WIDE_SCALE_SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl
    from megatron_mxfp8_moe.format.swizzle import swizzle_scales
    from megatron_mxfp8_moe.kernels._triton_moe_kernel import _wide_scale_flags, _wide_scale_max

    @triton.jit
    def _probe(s_ptr, out_ptr, row_first, row_last, scale_tiles, CHUNK: tl.constexpr):
        m = _wide_scale_max(s_ptr, row_first, row_last, scale_tiles, tl.zeros([CHUNK], dtype=tl.uint8), CHUNK)
        tl.store(out_ptr, tl.max(m, axis=0).to(tl.int32))
        f = _wide_scale_flags(s_ptr, row_first, row_last, scale_tiles, tl.zeros([CHUNK // 4], dtype=tl.uint32),
                              CHUNK // 4)
        tl.store(out_ptr + 1, tl.max((f != 0).to(tl.int32), axis=0))

    @triton.jit
    def _flags_probe(s_ptr, out_ptr, row, CHUNK: tl.constexpr):
        f = _wide_scale_flags(s_ptr, row, row, 1, tl.zeros([CHUNK], dtype=tl.uint32), CHUNK)
        tl.store(out_ptr + tl.arange(0, CHUNK), f.to(tl.int32, bitcast=True))

    torch.manual_seed(3)
    checks = []
    # 300 rows (3 tile rows, the last padded), scale columns 24 (6 tiles: 3072 bytes per tile row, 3 chunks of 1024)
    # and 10 (Cp 12, 3 tiles: 1536 bytes, a masked second chunk)
    for cols in (24, 10):
        for row, col in ((5, 0), (140, cols - 1), (299, 3), (257, 7)):
            logical = torch.randint(0, 121, (1, 300, cols), dtype=torch.uint8)
            logical[0, row, col] = 140
            swizzled = swizzle_scales(logical)[0].contiguous()
            tiles = swizzled.numel() // 512 // 3
            for first, last in ((0, 63), (64, 127), (128, 191), (192, 299), (0, 299), (250, 260)):
                out = torch.zeros(2, dtype=torch.int32)
                _probe[(1,)](swizzled, out, first, last, tiles, CHUNK=1024)
                rows_covered = range(first // 128 * 128, min(300, (last // 128 + 1) * 128))
                want = int(logical[0, rows_covered.start:rows_covered.stop].max())
                checks.append([cols, row, col, first, last, int(out[0]), int(out[1]), want])
    # the SWAR flag word by word: every byte value at every byte position, the other bytes random in 0..134
    values, positions = torch.arange(256).repeat_interleave(4), torch.arange(4).repeat(256)
    words = torch.randint(0, 135, (1024, 4), dtype=torch.uint8)
    words[torch.arange(1024), positions] = values.to(torch.uint8)
    flat = words.flatten().contiguous()  # 8 tile rows of one 512-byte scale tile
    flags = torch.cat([torch.zeros(128, dtype=torch.int32) for _ in range(8)])
    for row in range(8):
        _flags_probe[(1,)](flat, flags[row * 128:], row * 128, CHUNK=128)
    bits = [int((int(f) & 0xFFFFFFFF) >> (8 * int(p) + 7) & 1) for f, p in zip(flags, positions)]
    others = [int(f) & 0xFFFFFFFF & ~(1 << (8 * int(p) + 7)) for f, p in zip(flags, positions)]
    swar = dict(bit_iff_above_134=all(b == int(v > 134) for b, v in zip(bits, values)), no_other_bits=not any(others))
    print(json.dumps(dict(checks=checks, swar=swar)))
    """
)


def test_scale_scan_covers_the_tile_rows_of_its_rows(tmp_path):
    """``_wide_scale_max`` (sx_auto's per-program scan, Triton interpreter): the largest scale byte of every
    128-row tile row that holds one of rows ``first..last``, read from the swizzled layout (padding bytes are 0),
    for tile rows of 6 scale tiles (3 full chunks) and of 3 (a masked chunk). ``_wide_scale_flags`` (the word
    test that gates it) over the same rows: nonzero iff that maximum exceeds 134; and word by word, for every byte
    value at every byte position, exactly that byte's bit 7 is set iff the byte exceeds 134."""
    pytest.importorskip("triton")
    script = tmp_path / "wide_scale_probe.py"  # a file: @triton.jit needs the source of the kernel it wraps
    script.write_text(_WIDE_SCALE_SCRIPT)
    result = _interpreter_json([str(script)], timeout=600)
    checks = result["checks"]
    assert len(checks) == 2 * 4 * 6
    assert all(got == want for *_, got, _, want in checks), [c for c in checks if c[-3] != c[-1]]
    assert all(wide == int(want > 134) for *_, wide, want in checks), [c for c in checks if c[-2] != (c[-1] > 134)]
    assert sum(want == 140 for *_, want in checks) >= 12  # the wide byte is inside the scanned rows in many cases
    assert result["swar"] == dict(bit_iff_above_134=True, no_other_bits=True), result["swar"]


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


def test_sign_extend_dequant_equals_the_bit_trick_for_every_byte_pair():
    """Torch twin of ``_fp8_sx_to_bf16`` (v4 "sx"): prmt 0x9180 sign-extends bytes 0 and 1 of the 16-bit input
    into two int16 lanes, the 32-bit word is shifted left by 4 and masked with 0x87F087F0. Both lanes must equal
    ``(b & 0x80) << 8 | (b & 0x7F) << 4`` (the DQ_BITS bf16 bits) for all 65536 byte pairs."""
    pair = torch.arange(65536, dtype=torch.int64)
    b0, b1 = pair & 0xFF, pair >> 8
    sext = lambda b: torch.where(b >= 128, b | 0xFF00, b)  # noqa: E731 - int16 sign extension as 16 bits
    word = sext(b0) | (sext(b1) << 16)  # prmt.b32 t, t, 0, 0x9180
    word = ((word << 4) & 0xFFFFFFFF) & 0x87F087F0  # shl.b32 then and.b32
    want = lambda b: ((b & 0x80) << 8) | ((b & 0x7F) << 4)  # noqa: E731
    assert torch.equal(word & 0xFFFF, want(b0))
    assert torch.equal(word >> 16, want(b1))


def _shift_dequant_reference(b: torch.Tensor, s: torch.Tensor, shift: int) -> torch.Tensor:
    """Torch twin of DQ_SX_SHIFT times the accumulator's ``2 ** shift``: the bits ``e4m3 * 2 ** -120`` times ONE
    bf16 factor ``2 ** (s - 7 - shift)`` (exponent field ``max(s + 120 - shift, 0)``), then exactly ``* 2 ** shift``."""
    v = (((b & 0x80) << 8) | ((b & 0x7F) << 4)).to(torch.int16).view(torch.bfloat16)
    factor = (torch.clamp(s + 120 - shift, min=0) << 7).to(torch.int16).view(torch.bfloat16)
    return (v * factor).double() * 2.0**shift


def test_one_factor_dequant_is_exact_where_its_shift_allows():
    """``sx_auto``: a tile with scale bytes <= 134 takes shift 0 and equals the cvt rounding for every finite byte;
    a tile with a larger byte ``m`` takes shift ``m - 134`` and equals it for every byte ``s >= shift + 3`` (all
    blocks within 2 ** 131 of the tile's largest scale) wherever the cvt value is finite."""
    b = torch.arange(256, dtype=torch.int32).repeat_interleave(255)
    s = torch.arange(255, dtype=torch.int32).repeat(256)
    e4m3 = b.to(torch.uint8).view(torch.float8_e4m3fn).double()
    want = (e4m3 * torch.exp2(s.double() - 127)).to(torch.bfloat16).double()
    finite = torch.isfinite(e4m3)
    narrow = finite & (s <= 134)
    assert torch.equal(_shift_dequant_reference(b, s, 0)[narrow], want[narrow])
    for largest in (135, 140, 200, 254):
        shift = largest - 134
        inside = finite & (s <= largest) & (s >= shift + 3) & torch.isfinite(want)  # (cvt overflows bf16 past 2^128)
        got = _shift_dequant_reference(b, s, shift)
        assert torch.equal(got[inside], want[inside]), largest
        # below the window the small blocks lose bits (or flush to zero): the documented limit
        if shift > 3:
            assert not torch.equal(got[finite & (s < shift)], want[finite & (s < shift)])


def test_triton_backend_passes_the_expert_spread(monkeypatch):
    """``route_experts`` (default ``num_global_experts``) reaches the tile choice through the Triton backend."""
    from megatron_mxfp8_moe.activations import Activation
    from megatron_mxfp8_moe.kernels import triton_moe
    from megatron_mxfp8_moe.kernels.base import StackState
    from megatron_mxfp8_moe.kernels.triton_backend import TritonBackend

    seen = []

    def fake(x, probs, routing_map, fc1, fc2, **kwargs):
        seen.append((kwargs["route_experts"], kwargs["local_expert_offset"]))
        return kwargs["out"]

    monkeypatch.setattr(triton_moe, "triton_mxfp8_moe", fake)
    fc1 = quantize_mxfp8(random_weights((2, 64, 64), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((2, 64, 32), scale=0.1), backend="reference")
    state = StackState(backend=TritonBackend.backend, fc1=fc1, fc2=fc2, shares_canonical=True)
    x = torch.randn(4, 64).to(torch.bfloat16)
    for route_experts in (None, 2):
        TritonBackend().run(state, x, torch.rand(4, 2), torch.zeros(4, 2, dtype=torch.int64),
                            activation=Activation.SWIGLU, local_expert_offset=6, num_global_experts=16,
                            route_experts=route_experts)
    assert seen == [(16, 6), (2, 6)]


def test_sync_dots_tiles_differ_only_in_the_dot_mode():
    """The "_sd" tiles (session 21) are their base tile and its tail with ``sync_dots``; ``dot_mode`` is the kernels'
    ``FP32_DOT``: 1 for fp32 operands (which wins), 2 for bf16 with ``sync_dots``, else 0."""

    for name in ("l128m_sa_t64pu_s2", "l128w_sa_t64p2_s2", "l128m_sa_t32_s2", "l128w_sa_t32a_s2", "x256m_sa_t32",
                 "x256w_sa_t32a"):
        base, synced = TILES[name], TILES[name + "_sd"]
        assert [t.dot_mode for t in base.launch_tiles] == [0] * len(base.launch_tiles)
        assert [t.dot_mode for t in synced.launch_tiles] == [2] * len(base.launch_tiles)
        assert synced == triton_tiles._synced(base) == dataclasses.replace(
            base, sync_dots=True, tail=None if base.tail is None else dataclasses.replace(base.tail, sync_dots=True))
    assert dataclasses.replace(TILES["x256m_sa_t32_sd"], fp32_dot=True).dot_mode == 1
    assert not any(t.sync_dots for name, tile in TILES.items() if not name.endswith("_sd") for t in tile.launch_tiles)


# The start of the stand-in wiring scripts below (run under the interpreter): imports, and ``layer``, a squared-ReLU
# layer [E, I, H] / [E, H, I] with ``tokens`` bf16 rows routed top-``topk`` over E + 1 experts (the last is another
# rank's: skipped)
_WIRING_PRELUDE = textwrap.dedent(
    """
    import dataclasses, json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from megatron_mxfp8_moe.kernels.reference import moe_reference
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error

    def layer(seed, experts, topk, hidden, inner, tokens):
        torch.manual_seed(seed)
        fc1 = quantize_mxfp8(random_weights((experts, inner, hidden), scale=0.1), backend="reference")
        fc2 = quantize_mxfp8(random_weights((experts, hidden, inner), scale=0.1), backend="reference")
        x = torch.randn(tokens, hidden).to(torch.bfloat16)
        return (fc1, fc2, x, *random_routing(tokens, experts + 1, topk))
    """
)


_F8X2_GLUON_FC1_WIRING_SCRIPT = _WIRING_PRELUDE + textwrap.dedent(
    """
    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc1_kernel as gluon_fc1, triton_moe as host
    from megatron_mxfp8_moe.kernels.triton_moe import TILES, triton_mxfp8_moe

    experts, topk, hidden, inner, tokens = 4, 2, 256, 128, 12
    fc1, fc2, x, probs, ids = layer(11, experts, topk, hidden, inner, tokens)
    valid = torch.tensor([tokens - 2], dtype=torch.int32)
    fc1_gated = quantize_mxfp8(random_weights((experts, 2 * inner, hidden), scale=0.1), backend="reference")
    dequantized = {t.data.data_ptr(): t.dequantize().double() for t in (fc1, fc1_gated)}
    calls = []

    def stand_in(q, qs, w, scales, scale_tiles, inter, sorted_pairs, block_expert, num_blocks, grid_blocks, *,
                 activation, topk, block_n, block_t, stages, num_warps, plane_k2=0, gated=False, split_out=(),
                 step_scale=False):
        # the kernel's contract in torch: each routed position's activated FC1 row (squared ReLU, or gated SwiGLU on
        # [gate; up] rows), from the split x rows, in K order or plane-major per plane_k2, or split for FC2
        calls.append(dict(rows=inter.shape[0], cols=inter.shape[1], blocks=int(num_blocks[0]), block_t=block_t,
                          plane_k2=plane_k2, gated=gated, split=bool(split_out), step_scale=step_scale,
                          scale_cols=qs.shape[1]))
        kp = q.shape[1] // 2
        split = q.view(q.shape[0], kp // 32, 64).double()
        block_scales = qs.double().repeat_interleave(kp // 32 // qs.shape[1], dim=1)  # one per 32 or 128 values
        xs = (split[:, :, :32] + split[:, :, 32:]) * block_scales[:, :, None]
        w1 = dequantized[w.data_ptr()]
        for b in range(int(num_blocks[0])):
            for p in range(b * block_t, (b + 1) * block_t):
                pair = int(sorted_pairs[p])
                if pair >= 0:
                    h = w1[int(block_expert[b])] @ xs[pair // topk].reshape(-1)[:w.shape[2]]
                    if gated:
                        g, u = h.chunk(2)
                        h = torch.nn.functional.silu(g) * u
                    else:
                        h = torch.relu(h) ** 2
                    row = h.to(torch.bfloat16)[None]
                    if split_out:
                        q2_row, qs2_row = host.split_rows_reference(row)
                        split_out[0][p], split_out[1][p] = q2_row[0], qs2_row[0]
                    else:
                        inter[p, :h.shape[0]] = (host.planes_of(row, plane_k2) if plane_k2 else row)[0]

    gluon_fc1.launch_gluon_f8x2_fc1 = stand_in
    host._gluon_problem = lambda *args: None  # the stand-in runs here; the real kernel needs a Hopper GPU
    g1 = dataclasses.replace(TILES["s16_f8q_s2_gf_g1"], fc2_gluon=False, fc2_block_n=64, fc2_stages=2)
    fs = dataclasses.replace(g1, fc1_split_out=True)  # FC1 writes FC2's split rows itself ("_fs")
    triton_fc1 = dataclasses.replace(g1, fc1_gluon=False)
    # a plane tile with the f8x2 FC1 ("_f1x"), its FC2 the Triton plane FC2 in "sx4_int" with fp32 operands (the Gluon
    # one needs a GPU, "sx4" inline assembly)
    def plane_twin(name):
        return dataclasses.replace(TILES[name], fc2_gluon=False, fc2_chains=1, dequant="sx4_int", fp32_dot=True)

    f1x, f1x_gated = plane_twin("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x"), plane_twin("s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x")
    f1x_g128 = plane_twin("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_g128")  # one x scale per 128 values
    outs = {}
    for name, tile, first, activation in (("g1", g1, fc1, "squared_relu"), ("triton", triton_fc1, fc1, "squared_relu"),
                                          ("f1x", f1x, fc1, "squared_relu"), ("gated", f1x_gated, fc1_gated, "swiglu"),
                                          ("fs", fs, fc1, "squared_relu"), ("g128", f1x_g128, fc1, "squared_relu")):
        out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16)
        triton_mxfp8_moe(x, probs, ids, first, fc2, activation=activation, valid_tokens=valid, out=out, config=tile)
        outs[name] = out
    ref = moe_reference(x, fc1, fc2, probs, ids, "squared_relu", valid_tokens=valid)
    ref_gated = moe_reference(x, fc1_gated, fc2, probs, ids, "swiglu", valid_tokens=valid)
    print(json.dumps(dict(calls=calls, err=relative_error(outs["g1"], ref), err_triton=relative_error(outs["triton"], ref),
                          between=relative_error(outs["g1"], outs["triton"]),
                          err_f1x=relative_error(outs["f1x"], ref), f1x_between=relative_error(outs["f1x"], outs["g1"]),
                          f1x_written=bool(outs["f1x"].isfinite().all()),
                          err_gated=relative_error(outs["gated"], ref_gated),
                          gated_written=bool(outs["gated"][:int(valid)].isfinite().all()),
                          fs_equal=bool(torch.equal(outs["fs"], outs["g1"])),
                          err_g128=relative_error(outs["g128"], ref), g128_written=bool(outs["g128"].isfinite().all()),
                          tail_zero=bool((outs["g1"][int(valid):] == 0).all()),
                          written=bool(outs["g1"].isfinite().all()))))
    """
)


def test_gluon_f8x2_fc1_wiring_under_the_interpreter():
    """The host side of the "_g1" tiles (session 31; the Gluon kernel itself needs a Hopper GPU): with a torch stand-in
    for ``launch_gluon_f8x2_fc1`` (its contract: each routed position's activated FC1 row in bf16), the layer under the
    Triton interpreter gives the float64 oracle within 1e-2 and matches the Triton f8x2 FC1 tile within 1e-2; the
    stand-in ran once, over the main tile's positions (bf16 rows of FC1's output width), every row written, rows past
    ``valid_tokens`` zero. Session 32: the same stand-in on a plane tile ("_f1x", ``fc1_f8x2``) writes plane-major rows
    per FC2 step (128) for the plane FC2, and that layer gives the oracle within 1e-2 too, every row written; so does
    the gated plane tile (SwiGLU, the stand-in told ``gated``); with ``fc1_split_out`` ("_fs") the stand-in writes
    FC2's split rows (``split_rows_reference`` of its bf16 rows) and the layer's output equals the "_g1" tile's.
    Session 35: with one x scale per 128 values ("_g128", ``step_scales``: the split launch writes them, the
    stand-in spreads each over its 4 blocks) the layer gives the oracle within 1e-2, every row written."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _F8X2_GLUON_FC1_WIRING_SCRIPT], timeout=600)
    assert len(result["calls"]) == 5, result
    assert result["err_g128"] <= 1e-2 and result["g128_written"], result
    # told of one scale per 128 values exactly where x's split holds them (256 / 128 = 2 columns, not 8)
    assert [(c["step_scale"], c["scale_cols"]) for c in result["calls"]] == [(False, 8)] * 4 + [(True, 2)], result
    for call, plane_k2, gated, split in zip(result["calls"], (0, 128, 128, 0, 128), (False, False, True, False, False),
                                            (False, False, False, True, False)):
        assert call["block_t"] == 16 and call["plane_k2"] == plane_k2 and call["split"] == split, result
        assert call["cols"] == (0 if split else 128), result  # no bf16 rows where FC1 writes the split
        assert call["gated"] == gated and call["blocks"] > 0 and call["rows"] >= 16 * call["blocks"], result
    assert result["err_gated"] <= 1e-2 and result["gated_written"], result
    assert result["fs_equal"], result  # the split written by FC1 is the one the split launch makes, byte for byte
    assert result["err"] <= 1e-2 and result["err_triton"] <= 1e-2 and result["between"] <= 1e-2, result
    assert result["written"] and result["tail_zero"], result
    assert result["err_f1x"] <= 1e-2 and result["f1x_between"] <= 1e-2 and result["f1x_written"], result


_WS_FC2_WIRING_SCRIPT = _WIRING_PRELUDE + textwrap.dedent(
    """
    from megatron_mxfp8_moe.kernels import _gluon_ws_kernel as ws_fc2, triton_moe as host
    from megatron_mxfp8_moe.kernels.triton_moe import TritonMoEConfig, triton_mxfp8_moe

    experts, topk, hidden, inner, tokens = 4, 2, 256, 96, 100  # about 40 pairs per expert: main blocks and tails
    fc1, fc2, x, probs, ids = layer(6, experts, topk, hidden, inner, tokens)
    w2 = fc2.dequantize().double()
    valid = torch.tensor([tokens - 3], dtype=torch.int32)
    calls = []

    def stand_in(inter, w, scales, scale_tiles, slots, sorted_pairs, block_expert, num_blocks, grid_blocks, *,
                 block_n, block_t, block_k, stages, num_warps, sx, thread_arrive, staged_epilogue, persistent,
                 dstages, wstages, prefetch):
        # the kernel's contract in torch: each routed position's unweighted FC2 row from its K-ordered inter row
        calls.append(dict(block_n=block_n, block_t=block_t, block_k=block_k, stages=stages, warps=num_warps, sx=sx,
                          ta=thread_arrive, se=staged_epilogue, p=persistent, d=(dstages, wstages), pf=prefetch,
                          cols=inter.shape[1], rows=inter.shape[0], blocks=int(num_blocks[0]), grid=grid_blocks,
                          same_w=w.data_ptr() == fc2.data.data_ptr()))
        for b in range(int(num_blocks[0])):
            for p in range(b * block_t, (b + 1) * block_t):
                pair = int(sorted_pairs[p])
                if pair >= 0:
                    slots[pair] = (w2[int(block_expert[b])] @ inter[p].double()).to(torch.bfloat16)

    fc1_gated = quantize_mxfp8(random_weights((experts, 2 * inner, hidden), scale=0.1), backend="reference")
    w1 = {t.data.data_ptr(): t.dequantize().double() for t in (fc1, fc1_gated)}
    fc1_calls = []

    def fc1_stand_in(x_in, w, scales, scale_tiles, inter, sorted_pairs, block_expert, num_blocks, grid_blocks, *,
                     n_out, activation, topk, block_n, block_t, block_k, stages, num_warps, sx, thread_arrive,
                     staged_epilogue, persistent, dstages, wstages, gated, prefetch):
        # FC1's contract: each routed position's activated row (squared ReLU, or gated SwiGLU on [gate; up]) from its
        # token's x row, in K order
        fc1_calls.append(dict(block_n=block_n, block_t=block_t, block_k=block_k, stages=stages, warps=num_warps, sx=sx,
                              ta=thread_arrive, se=staged_epilogue, p=persistent, d=(dstages, wstages),
                              pf=prefetch, n_out=n_out, topk=topk, rows=inter.shape[0], gated=gated,
                              same_w=w.data_ptr() == (fc1_gated if gated else fc1).data.data_ptr()))
        for b in range(int(num_blocks[0])):
            for p in range(b * block_t, (b + 1) * block_t):
                pair = int(sorted_pairs[p])
                if pair >= 0:
                    h = w1[w.data_ptr()][int(block_expert[b])] @ x_in[pair // topk].double()
                    if gated:
                        act = torch.nn.functional.silu(h[:n_out]) * h[n_out:]
                    else:
                        act = torch.relu(h) ** 2
                    inter[p, :n_out] = act.to(torch.bfloat16)

    ws_fc2.launch_gluon_ws_fc2 = stand_in
    ws_fc2.launch_gluon_ws_fc1 = fc1_stand_in
    host._gluon_problem = lambda *args: None  # the stand-ins run here; the real kernels need a Hopper GPU
    tail = TritonMoEConfig(16, 32, 64, 4, 1, 64, 64, 4, 1, dequant_fp32=True, fp32_dot=True)
    plain = TritonMoEConfig(32, 128, 64, 8, 2, 128, 64, 8, 2, dequant_fp32=True, fp32_dot=True, tail=tail)
    ref = moe_reference(x, fc1, fc2, probs, ids, "squared_relu", valid_tokens=valid)
    result, outs = {}, {}

    def run(name, tile, w1_stack, activation, reference, base):
        # one layer call with stand-ins: its calls, its output against the float64 reference and against ``base``
        # (the first run of each group is its own base)
        calls.clear()
        fc1_calls.clear()
        out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16)
        triton_mxfp8_moe(x, probs, ids, w1_stack, fc2, activation=activation, valid_tokens=valid, out=out, config=tile)
        outs[name] = out
        result[name] = dict(calls=list(calls), fc1_calls=list(fc1_calls), err=relative_error(out, reference),
                            between=relative_error(out, outs[base]), written=bool(out.isfinite().all()),
                            tail_zero=bool((out[int(valid):] == 0).all()))

    for name, tile in (("plain", plain), ("fc2", dataclasses.replace(plain, fc2_ws=True)),
                       ("fc1", dataclasses.replace(plain, fc1_ws=True)),
                       ("both", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True)),
                       ("both_sx", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_sx=True)),
                       ("both_ta", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_thread_arrive=True)),
                       ("both_se", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_staged_epilogue=True)),
                       ("both_p", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_persistent=True)),
                       ("both_pf", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_persistent=True,
                                                       ws_prefetch=True)),
                       ("both_d3", dataclasses.replace(plain, fc1_ws=True, fc2_ws=True, ws_dstages=3, ws_wstages=3))):
        run(name, tile, fc1, "squared_relu", ref, "plain")
    # session 43: the gated ws FC1 (64 gate rows and their up rows per tile: fc1_block_n 64), SwiGLU
    plain_gated = dataclasses.replace(plain, fc1_block_n=64)
    ref_gated = moe_reference(x, fc1_gated, fc2, probs, ids, "swiglu", valid_tokens=valid)
    for name, tile in (("gated_plain", plain_gated),
                       ("gated_both_p",
                        dataclasses.replace(plain_gated, fc1_ws=True, fc2_ws=True, ws_persistent=True))):
        run(name, tile, fc1_gated, "swiglu", ref_gated, "gated_plain")
    print(json.dumps(result))
    """
)


def test_warp_specialized_fcs_wiring_under_the_interpreter():
    """``fc2_ws`` / ``fc1_ws`` (session 39; their forms' flags, ``ws_prefetch`` since session 44): the main tile's FC2
    goes to ``launch_gluon_ws_fc2`` with the tile's FC2 shape, the K-ordered inter rows of the main blocks, the FC2
    stack in place and the route's tables; its FC1 to ``launch_gluon_ws_fc1`` with x, the FC1 stack in place and the
    same inter rows; the tail keeps its Triton FCs. With torch stand-ins for the kernels (their contracts) the layer
    under the Triton interpreter gives the float64 oracle within 1e-2 and the Triton tile within 1e-2 with either or
    both, every row written, rows past ``valid_tokens`` zero."""
    pytest.importorskip("triton")
    result = _interpreter_json(["-c", _WS_FC2_WIRING_SCRIPT], timeout=900)
    assert result["plain"]["calls"] == result["plain"]["fc1_calls"] == [], result["plain"]
    for name in ("fc2", "fc1", "both", "both_sx", "both_ta", "both_se", "both_p", "both_pf", "both_d3"):
        run = result[name]
        assert len(run["calls"]) == (name != "fc1") and len(run["fc1_calls"]) == (name != "fc2"), (name, run)
        assert all(call["sx"] == (name == "both_sx") for call in run["calls"] + run["fc1_calls"]), (name, run)
        assert all(call["ta"] == (name == "both_ta") for call in run["calls"] + run["fc1_calls"]), (name, run)
        assert all(call["se"] == (name == "both_se") for call in run["calls"] + run["fc1_calls"]), (name, run)
        assert all(call["p"] == (name in ("both_p", "both_pf")) for call in run["calls"] + run["fc1_calls"]), run
        assert all(call["pf"] == (name == "both_pf") for call in run["calls"] + run["fc1_calls"]), (name, run)
        assert all(call["d"] == ([3, 3] if name == "both_d3" else [2, 0]) for call in run["calls"] + run["fc1_calls"])
        for call in run["calls"]:
            assert (call["block_n"], call["block_t"], call["block_k"], call["stages"], call["warps"]) == (128, 32, 64,
                                                                                                         2, 8)
            assert call["cols"] == 96 and call["same_w"] and 0 < call["blocks"] <= call["grid"], call
            assert call["rows"] == call["grid"] * 32, call  # the main blocks' rows only (the tail's follow them)
        for call in run["fc1_calls"]:
            assert (call["block_n"], call["block_t"], call["block_k"], call["stages"], call["warps"]) == (128, 32, 64,
                                                                                                         2, 8)
            assert (call["n_out"], call["topk"]) == (96, 2) and call["same_w"] and not call["gated"], call
        assert run["err"] <= 1e-2 and run["between"] <= 1e-2 and run["written"] and run["tail_zero"], (name, run)
    assert result["plain"]["err"] <= 1e-2
    # session 43: SwiGLU's gated ws FC1 gets 128 weight rows per tile (fc1_block_n 64 gate rows and their up rows),
    # told gated, the gated stack in place
    assert result["gated_plain"]["fc1_calls"] == [] and result["gated_plain"]["err"] <= 1e-2, result["gated_plain"]
    gated = result["gated_both_p"]
    assert len(gated["calls"]) == len(gated["fc1_calls"]) == 1, gated
    call = gated["fc1_calls"][0]
    assert (call["block_n"], call["gated"], call["p"], call["n_out"], call["same_w"]) == (128, True, True, 96, True)
    assert gated["err"] <= 1e-2 and gated["between"] <= 1e-2 and gated["written"] and gated["tail_zero"], gated


def test_warp_specialized_fc2_is_checked():
    base = TILES["x256w_sa_t32a"]
    for bad in (dict(fc2_block_n=64), dict(fc2_warps=4), dict(fc2_block_k=128), dict(fc2_stages=1),
                dict(fc2_split_k=2, tail=None), dict(dequant="sx4"), dict(block_t=24, tail=None),
                dict(fc2_stages=5)):  # (5 stages: 272 KiB of rings, ws_shared_bytes)
        with pytest.raises(ValueError, match="fc2_ws"):
            dataclasses.replace(base, fc2_ws=True, **bad)
    for bad in (dict(fc1_block_n=32), dict(fc1_warps=4), dict(fc1_block_k=128), dict(fc1_stages=1),
                dict(fc1_gate_merge=True), dict(dequant="sx4"), dict(block_t=24, tail=None), dict(fc1_stages=5)):
        with pytest.raises(ValueError, match="fc1_ws"):
            dataclasses.replace(base, fc1_ws=True, **bad)
    for name in ("x256w_sa_t32a", "l128w_sa_t32a_s2"):
        assert TILES[name + "_ws1"] == dataclasses.replace(TILES[name], fc1_ws=True)
        assert TILES[name + "_wsb"] == dataclasses.replace(TILES[name], fc1_ws=True, fc2_ws=True)
        assert triton_form(TILES[name + "_wsb"]) == TILES[name]
    assert TILES["x256w_sa_t32a_wsb_k32"].fc1_block_k == TILES["x256w_sa_t32a_wsb_k32"].fc2_block_k == 32
    # session 40: the ws producers' bit-moving dequant needs a ws FC; "_sx" twins change nothing else
    with pytest.raises(ValueError, match="ws_sx"):
        dataclasses.replace(base, ws_sx=True)
    assert TILES["x256w_sa_t32a_wsb_s4_sx"] == dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_sx=True)
    # session 41: the per-thread stage release likewise
    for field, suffix in (("ws_thread_arrive", "_ta"), ("ws_staged_epilogue", "_se")):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(base, **{field: True})
        for name in ("x256w_sa_t32a_wsb_s4", "x256m_sa_t32_ws"):
            assert TILES[name + suffix] == dataclasses.replace(TILES[name], **{field: True})
            assert triton_form(TILES[name + suffix]) == triton_form(TILES[name])
    assert TILES["x256w_sa_t32a_wsb_s4_ta_se"] == dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"],
                                                                      ws_thread_arrive=True, ws_staged_epilogue=True)
    # the persistent form: a ws tile's, not with the staged epilogue, and its scratch counted (4 stages do not fit)
    for bad in (dict(), dict(fc2_ws=True, ws_staged_epilogue=True)):
        with pytest.raises(ValueError, match="ws_persistent"):
            dataclasses.replace(base, ws_persistent=True, **bad)
    with pytest.raises(ValueError, match="with ws_persistent, its epilogue's scratch"):
        dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_persistent=True)
    for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws"):
        assert TILES[name + "_p"] == dataclasses.replace(TILES[name], ws_persistent=True)
        assert triton_form(TILES[name + "_p"]) == triton_form(TILES[name])
    assert TILES["x256w_sa_t32a_wsb_p_ta"] == dataclasses.replace(TILES["x256w_sa_t32a_wsb_p"], ws_thread_arrive=True)
    # session 42: the ring depths, a ws tile's, within range and within 227 KiB of shared memory
    with pytest.raises(ValueError, match="ws_dstages / ws_wstages"):
        dataclasses.replace(base, ws_dstages=3)
    for bad in (dict(ws_dstages=1), dict(ws_dstages=5), dict(ws_wstages=1)):
        with pytest.raises(ValueError, match="ws_dstages must be 2, 3 or 4"):
            dataclasses.replace(TILES["x256w_sa_t32a_wsb"], **bad)
    with pytest.raises(ValueError, match="rings within 227 KiB"):  # 4 token stages, 8 fp8, 3 bf16: 240 KiB
        dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_dstages=3)
    assert TILES["x256w_sa_t32a_wsb_s4_d3"] == dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_dstages=3,
                                                                   ws_wstages=6)
    assert ws_shared_bytes(256, 64, 4, 3, wstages=6) == ws_shared_bytes(256, 64, 4) == 224 * 1024
    for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws"):
        assert TILES[name + "_d3"] == dataclasses.replace(TILES[name], ws_dstages=3)
        assert triton_form(TILES[name + "_d3"]) == triton_form(TILES[name])
    assert triton_form(TILES["x256w_sa_t32a_wsb_s4_sx"]) == dataclasses.replace(base, fc1_stages=4, fc2_stages=4)
    for name in ("x256w_sa_t32a", "x256m_sa_t32", "l128w_sa_t32a_s2", "l128m_sa_t32_s2"):
        tile = TILES[name + "_ws"]
        assert tile == dataclasses.replace(TILES[name], fc2_ws=True) and tile.tail == TILES[name].tail
        assert triton_form(tile) == TILES[name] and not same_bits_as_triton_form(tile)
    # a stack the kernel cannot take: a clear error before any launch, naming the requirement
    from megatron_mxfp8_moe.kernels import triton_moe

    fc1 = quantize_mxfp8(random_weights((2, 64, 96), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((2, 96, 64), scale=0.1), backend="reference")
    problem = triton_moe._gluon_problem(TILES["x256w_sa_t32a_ws"], fc1, fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "H % fc2_block_n" in str(problem)
    fc1 = quantize_mxfp8(random_weights((2, 64, 128), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((2, 128, 64), scale=0.1), backend="reference")
    problem = triton_moe._gluon_problem(TILES["x256w_sa_t32a_ws"], fc1, fc2, torch.device("cpu"))
    assert "Hopper GPU" in str(problem)
    gated = quantize_mxfp8(random_weights((2, 128, 128), scale=0.1), backend="reference")  # [gate; up] rows: 2 I
    problem = triton_moe._gluon_problem(TILES["x256w_sa_t32a_ws1"], gated, fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "fc1_block_n 128 ungated, or gated 64" in str(problem)
    # session 43: SwiGLU's gated ws FC1 takes 64 gate rows and their up rows per tile (fc1_block_n 64) with I a
    # multiple of 64; the squared-ReLU tile's 128 rows per half are refused, and so is I = 96 (a partial tile)
    assert TILES["x256m_sa_t32_wsb"] == dataclasses.replace(TILES["x256m_sa_t32_ws"], fc1_ws=True,
                                                            fc1_gate_merge=False)
    assert TILES["x256m_sa_t32_wsb_p"] == dataclasses.replace(TILES["x256m_sa_t32_wsb"], ws_persistent=True)
    assert TILES["x256m_sa_t32_wsb"].fc1_block_n == 64 and not same_bits_as_triton_form(TILES["x256m_sa_t32_wsb"])
    problem = triton_moe._gluon_problem(TILES["x256m_sa_t32_wsb_p"], gated, fc2, torch.device("cpu"))
    assert "Hopper GPU" in str(problem)  # (the stacks pass: only the device is wrong)
    odd_gated = quantize_mxfp8(random_weights((2, 192, 128), scale=0.1), backend="reference")
    odd_fc2 = quantize_mxfp8(random_weights((2, 128, 96), scale=0.1), backend="reference")
    problem = triton_moe._gluon_problem(TILES["x256m_sa_t32_wsb_p"], odd_gated, odd_fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "I a multiple of 64" in str(problem)
    problem = triton_moe._gluon_problem(TILES["x256w_sa_t32a_wsb_p"], gated, fc2, torch.device("cuda"))
    assert isinstance(problem, MXFP8InputError) and "got fc1_block_n 128" in str(problem)


def test_ws_launch_grid(monkeypatch):
    """The ws launchers' grid: one program per (row tile, token block) for the one-tile kernels (with the staged
    epilogue's constexpr), at most one per SM for the persistent ones (``ws_persistent``, with ``ws_prefetch``'s
    constexpr)."""
    pytest.importorskip("triton")
    from megatron_mxfp8_moe.kernels import _gluon_ws_kernel as ws

    monkeypatch.setattr(ws, "_sm_count", lambda device: 132)
    device = torch.device("cuda", 0)
    assert ws._kernel_grid("one", "persistent", 16, 129, device, True, False, False) == ("one", (16, 129),
                                                                                         dict(STAGED=True))
    assert ws._kernel_grid("one", "persistent", 16, 129, device, False, True, True) == ("persistent", (132,),
                                                                                        dict(PREFETCH=True))
    assert ws._kernel_grid("one", "persistent", 4, 3, device, False, True, False) == ("persistent", (12,),
                                                                                      dict(PREFETCH=False))


def _at_byte_offset(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """A contiguous copy of ``tensor`` whose first byte sits ``offset`` bytes past an allocation's start."""
    raw = tensor.view(torch.uint8)
    return torch.empty(raw.numel() + offset, dtype=torch.uint8)[offset:].view_as(raw).copy_(raw).view(tensor.dtype)


def test_the_fallback_from_gluon_tiles_checks_its_own_word_reads(monkeypatch):
    """Where the Gluon tile cannot run (here: no GPU) the Triton tile chosen instead is checked for its 32-bit word
    reads too: squared ReLU at H 4096 falls back to an "sx4" tile, which must refuse fp8 rows 2 bytes off."""
    launched = []
    monkeypatch.setattr(triton_moe, "_launch", lambda cfg, *args: launched.append(cfg))
    monkeypatch.setenv(triton_moe.GLUON_ENV, "1")
    experts, hidden, inner, tokens, topk = 4, 4096, 128, 8, 2
    fc1 = quantize_mxfp8(random_weights((experts, inner, hidden), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inner), scale=0.1), backend="reference")
    odd_fc1 = MXFP8Tensor(_at_byte_offset(fc1.data, 2), fc1.scale_bytes())
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    probs, ids = torch.rand(tokens, topk), torch.randint(0, experts, (tokens, topk), dtype=torch.int32)
    gluon_tile = triton_moe.choose_config(tokens, hidden, inner, gated=False, topk=topk, experts=experts)
    assert any(tile.fc1_gluon or tile.fc2_gluon for tile in gluon_tile.launch_tiles)
    with pytest.raises(MXFP8InputError, match="'sx4' tiles read weight rows as 32-bit words"):
        triton_moe.triton_mxfp8_moe(x, probs, ids, odd_fc1, fc2, activation="squared_relu",
                                    valid_tokens=torch.tensor([tokens], dtype=torch.int32))
    assert launched == []
    triton_moe.triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation="squared_relu",
                                valid_tokens=torch.tensor([tokens], dtype=torch.int32))  # aligned: launches
    assert len(launched) == 1


def test_gluon_tiles_need_16_byte_aligned_weight_stacks_for_tma():
    """A stack 4 bytes off (fine for word reads) cannot back a TMA descriptor: the Gluon tile reports a problem
    before any launch (the caller then runs the Triton tiles, or raises for an explicit config)."""
    experts, hidden, inner = 4, 256, 256
    fc1 = quantize_mxfp8(random_weights((experts, 2 * inner, hidden), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inner), scale=0.1), backend="reference")
    cfg = triton_moe.choose_config(64, hidden, inner, gated=True, topk=8, experts=32, gluon=True)
    assert cfg.fc2_gluon
    off = MXFP8Tensor(_at_byte_offset(fc2.data, 4), fc2.scale_bytes())
    problem = triton_moe._gluon_problem(cfg, fc1, off, torch.device("cuda"))  # checked before the device is
    assert isinstance(problem, MXFP8InputError) and "16-byte aligned" in str(problem)
    assert "16-byte" not in str(triton_moe._gluon_problem(cfg, fc1, fc2, torch.device("cpu")))
