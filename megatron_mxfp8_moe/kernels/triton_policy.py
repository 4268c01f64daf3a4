"""``choose_config``: the tile a Triton MXFP8 MoE call runs, from its row count, shapes and top-k (fixed per CUDA
graph), and the Gluon policy (``MEGATRON_MXFP8_MOE_GLUON``) that decides where the Gluon twins run."""

from __future__ import annotations

import functools
import os
from typing import Optional

from .triton_config import TritonMoEConfig, _reads_x_split
from .triton_support import _GPU_TESTED_TRITON, _major_minor
from .triton_tiles import _GLUON_TWINS, _WS_TWINS, GROUPED_SUFFIX, TILES

# The Triton tiles whose Gluon twins ``choose_config`` picks by default: 1.5-8 pairs per expert (the 16-token tiles;
# from 1 pair per expert, in place of q1, since session 34; Gluon FC2 on 64 rows: run 26 probes in triton_tiles.py, 0
# of 300 bad calls at 64 / 100 tokens; two chains and 4 stages since session 26), 8-16 (the 32-token tiles with
# 16-token tails, session 26), 16-28 (squared ReLU since session 26, gated since session 28) and 28-72 (the 64-token
# tiles and the 128-token tiles' 64-token tails). Since session 28 the gated 8-28 twins are "_nov" and the
# squared-ReLU 1.5-16 ones "_f1q"; since sessions 32 / 33 the 1.5-16 twins of both activations run the Gluon f8x2 FC1
# ("_f1x" / "_f1xt", triton_tiles.py).
_GLUON_BY_DEFAULT = frozenset({"s16k4_sx4p_m3_s2", "s16k_sx4_f4", "m32l4_sx4p_m_t16_s2", "m32k_sx4p_f4_t16_s2",
                               "m32l4_sx4p_m_s2", "m32k_sx4p_f4_s2", "l64_sx4p_mu_t32_s2", "l64k2_sx4p_f4_t32_s2",
                               "l64_sx4p_mu_s2", "l64k2_sx4p_f4_s2", "l128m_sa_t64pu_s2", "l128w_sa_t64p2_s2",
                               "x256w_sa_t32a", "x256m_sa_t32"})
# Environment switch for the Gluon twins (``_GLUON_TWINS``), used where H and I are multiples of 128: unset, empty
# or "auto" (the default): the twins of ``_GLUON_BY_DEFAULT`` only, and only with the Triton that ran them on a GPU
# (``_GPU_TESTED_TRITON``; other versions compile them in the CPU tests at most); "1" / true / yes / on / all: every
# twin, with any Triton; "0" / false / no / off: none (Triton tiles only). A call whose Gluon tile cannot run here
# (``_gluon_problem``: no GPU, no Gluon, odd shapes) runs ``choose_config(..., gluon=False)``.
GLUON_ENV = "MEGATRON_MXFP8_MOE_GLUON"
_GLUON_POLICIES = {"": "auto", "auto": "auto", "1": "all", "true": "all", "yes": "all", "on": "all", "all": "all",
                   "0": "off", "false": "off", "no": "off", "off": "off"}


def gluon_policy() -> str:
    """Which Gluon twins ``choose_config`` may pick, from ``GLUON_ENV``: "auto" (unset: ``_GLUON_BY_DEFAULT``),
    "all" or "off". Raises ValueError for any other value."""
    value = os.environ.get(GLUON_ENV, "").strip().lower()
    if value not in _GLUON_POLICIES:
        raise ValueError(f"{GLUON_ENV}={os.environ[GLUON_ENV]!r}: expected auto (the default, also unset), "
                         "1 / true / yes / on / all, or 0 / false / no / off")
    return _GLUON_POLICIES[value]


@functools.lru_cache(maxsize=None)
def _gpu_tested_triton() -> bool:
    """Whether the installed Triton is the one every GPU run used (``_GPU_TESTED_TRITON``): "auto" takes the Gluon
    twins (an experimental Triton API) only there."""
    try:
        import triton
    except ImportError:
        return False
    return _major_minor(triton.__version__) == _GPU_TESTED_TRITON


def _tile_name(name: str, hidden: int, intermediate: int, gluon: Optional[bool] = None) -> str:
    """``name`` (a Triton tile of ``TILES``), or where H and I tile by 128 the name of its Gluon twin
    (``_GLUON_TWINS``, or ``_WS_TWINS``: the warp-specialized FCs): with ``gluon`` True every twin, False none, None as
    ``gluon_policy()`` says (by default those of ``_GLUON_BY_DEFAULT``, and only with the GPU-tested Triton)."""
    twins = _WS_TWINS if name in _WS_TWINS else _GLUON_TWINS
    if hidden % 128 or intermediate % 128 or name not in twins or gluon is False:
        return name
    if gluon is None:
        policy = gluon_policy()
        gluon = policy == "all" or (policy == "auto" and name in _GLUON_BY_DEFAULT and _gpu_tested_triton())
    return twins[name] if gluon else name


def _tile(name: str, hidden: int, intermediate: int, gluon: Optional[bool] = None) -> TritonMoEConfig:
    """``TILES[_tile_name(...)]``: the Triton tile ``name`` or its Gluon twin."""
    return TILES[_tile_name(name, hidden, intermediate, gluon)]


# Pairs per expert below which the routed GEMV q1 runs rather than the 16-token Gluon twins with the f8x2 FC1.
_Q1_BELOW_TWIN_PAIRS = 1.0
# Session 36 (run 39 layer probes, us, squared ReLU, the 16-token twin / the all-f8x2 "_f128_st" per pair of runs):
# on 235b (H 4096) "_f128_st" is faster at every token count of the twin's range, at 16 tokens 533.4 / 522.4 and 531.6
# / 523.2, 32 725.7 / 695.6 and 729.7 / 699.3, 64 838.6 / 803.0 and 869.8 / 805.8, 128 874.2 / 834.2 and 926.7 /
# 838.1; on 30b (H 2048) slower, 16 158.8 / 164.1 and 159.0 / 164.5, 32 207.8 / 211.0, 64 227.9 / 233.3, 128 240.3 /
# 246.4. Its f8x2 FC2 saves 2.5 us on 30b (112.0 / 114.5 at 64 tokens) and about 25 on 235b (run 38), against about 6
# us on 30b for the launch that splits FC1's rows for it. From H 4096 the squared-ReLU 16-token pick is therefore
# "_f128_st" wherever its twin is picked. Session 37 (run 40, the same pairs of runs, squared ReLU): H 3072 / I 1152
# 312.3 / 313.0 and 312.3 / 312.4 at 16 tokens, 482.4 / 467.5 and 483.6 / 469.2 at 64, 506.7 / 488.4 and 506.9 /
# 489.1 at 128; H 7168 / I 1024 3-10% faster, 8 experts top-2 (H 4096 / I 7168) 1-12% faster at 4-32 tokens. So the
# cut is H 3072 (between 30b's 2048, slower, and 3072, a tie at 16 tokens and 3-4% faster from 64).
_ALL_F8X2_16, _ALL_F8X2_FROM_HIDDEN = "s16_f8q_s2_gf_g1_f128_st", 3072
# Below one pair per expert q1 against "_f128_st" (235b squared ReLU, us, q1 / "_f128_st" per pair of runs): run 39
# 8 tokens 338.4 / 362.7, 336.9 / 363.0, 10 416.8 / 422.6, 418.0 / 423.4, 12 480.6 / 485.7, 486.0 / 464.3; run 40 12
# tokens 469.9 / 446.1, 472.9 / 447.1, 13 510.5 / 485.3, 511.6 / 485.9, 14 575.3 / 504.8, 549.3 / 506.6. So q1 keeps
# less than 0.75 pairs per expert where "_f128_st" is the 16-token pick.
_Q1_BELOW_ALL_F8X2_PAIRS = 0.75


def _sixteen_token_tile(gated: bool, hidden: int, intermediate: int, gluon: Optional[bool]) -> TritonMoEConfig:
    """The 16-token tile of 1-8 pairs per expert (and below, down to where q1 keeps the pairs): the Gluon twin with
    the f8x2 FC1 where ``_tile`` picks it (squared ReLU from H ``_ALL_F8X2_FROM_HIDDEN``: the all-f8x2 "_f128_st" in
    its place), else the Triton tile; each in its "_eg2" form (``GROUPED_SUFFIX``, below)."""
    name = _tile_name("s16k4_sx4p_m3_s2" if gated else "s16k_sx4_f4", hidden, intermediate, gluon)
    if not gated and TILES[name].fc1_f8x2 and hidden >= _ALL_F8X2_FROM_HIDDEN:
        name = _ALL_F8X2_16
    return TILES[name + GROUPED_SUFFIX]


# Session 47 (run 50 on an H100, bench/expert_groups_probe.py, us per layer, one group / two, two rounds each): the
# 16-token tiles with their experts in two groups, each with its own route and launch pair on its own stream
# (``expert_groups``, the "_eg2" tiles; the same bits): 30b squared ReLU 16 tokens 205.3, 205.7 / 199.9, 200.8, 64
# 309.7, 308.8 / 302.0, 302.6; SwiGLU 16 161.5, 166.9 / 155.0, 155.1, 64 238.6, 238.3 / 231.5, 231.6; 235b 1.0-1.6%
# faster at 16 / 64 with both activations. Four groups were no faster than two, eight slower at 64 tokens. (One
# group's FC2 starts on the SMs that another group's FC1 leaves idle in its last wave.)


def choose_config(rows: int, hidden: int, intermediate: int, *, gated: bool, topk: int, experts: int,
                  gluon: Optional[bool] = None) -> TritonMoEConfig:
    """Tile configuration for ``rows`` tokens (a pure function of shapes; tuned on an H200): one of ``TILES``.

    Small batches are weight-bandwidth bound: narrow token tiles (16) to limit per-expert padding, narrow
    weight tiles so that every SM streams weights, deep K tiles and pipelines. Large batches are MMA bound:
    wide tiles so each dequantized weight tile is reused by many tokens. ``experts``: the experts the routing
    spreads the ``rows * topk`` pairs over, i.e. the GLOBAL count under expert parallelism (a rank that sees all
    tokens but holds E / EP experts gets about ``rows * topk / experts`` pairs per local expert). ``gluon``: whether
    the Gluon twins may be picked (True: all, False: none, None: as ``gluon_policy()`` says, by default those of
    ``_GLUON_BY_DEFAULT``).
    """
    pairs_per_expert = rows * topk / max(experts, 1)
    # Up to 1.5 pairs per expert (sessions 5-6): the GEMV paths. Every (token, expert) pair is then a
    # matrix-vector product; CUDA-core block sums stream the weights at 43-77% of the roofline where the MMA path
    # (one useful column of 16) reached 20-60%. Gated: g16p3 at 1-2 tokens, g32p up to 0.25 pairs per expert.
    # Squared ReLU: g16p up to 4 tokens. Then up to 1.5 pairs per expert, q1 (session 6 probes at 8-32 tokens on
    # both shapes: at 16 tokens 8-18% faster than g32p and 9-19% faster than s16k_sx_r; at 8 tokens 11% faster
    # than g32p on 235b, 4% slower on 30b; at 24 tokens equal to s16k_sx_r on 235b, 5-13% faster on 30b; at 32
    # tokens q1 took 4-16% longer than s16k_sx_r). Its pairs come sorted by expert, so pairs of one expert run
    # side by side and share their weight reads in L2. Programs that convert each weight once for 2-4 pairs were
    # slower: CUDA-core FMAs per weight, not bytes, set their time.
    # Up to 8 pairs per expert: BLOCK_K 256 (the scale tile is then pipelined with the weights), "sx" dequant; until
    # session 10 with FC2 on 8 warps capped at 128 registers (two CTAs per SM). Gated at 16-24 pairs per expert:
    # BLOCK_K 256, "sx". Squared ReLU keeps the v2 tiles' 128-deep K at 256 tokens, where "sx" was not faster for
    # it. Each token block re-reads its expert's weights, so block_t covers the typical pairs per
    # expert. From 64 pairs per expert, both activations (session 7 probes on the H200): 128-token tiles with
    # "sx_auto", one bf16 multiply per weight pair after a per-program scan of the tile's scale rows; 7-10%
    # faster than l64b / l64a at 1024 tokens and 17-21% faster than l64b / l128a / l64a at 4096, on both shapes.
    # At 64-256 tokens the scan cost more than the multiply it saves (s16k / m32l tiles 56-65% slower).
    if gated and pairs_per_expert <= 0.125:
        return TILES["g16p3"]
    if pairs_per_expert <= 0.25:
        return TILES["g32p" if gated else "g16p"]
    if pairs_per_expert <= 1.5:
        # Session 34 (run 37 probes, us per layer, q1 / twin twice each): the 16-token Gluon twins with the f8x2
        # FC1 overtake q1 from about one pair per expert: 16 tokens squared ReLU 160.3 / 157.0, 160.9 / 158.1
        # (30b), 602.9 / 590.4, 622.3 / 537.6 (235b), SwiGLU 126.4 / 126.4, 126.2 / 126.6 and 455.5 / 406.7,
        # 487.8 / 419.9; 24 tokens 13-24% faster (30b squared ReLU 227.1 / 189.9, 235b SwiGLU 661.5 / 512.8); at 8
        # tokens q1 is 5-12% faster (30b squared ReLU 95.8 / 107.0). Where the twin is not picked, q1 up to 1.5; where
        # "_f128_st" is, it runs from 0.75 pairs per expert (``_Q1_BELOW_ALL_F8X2_PAIRS``).
        small = _sixteen_token_tile(gated, hidden, intermediate, gluon)
        q1_below = _Q1_BELOW_ALL_F8X2_PAIRS if small is TILES[_ALL_F8X2_16 + GROUPED_SUFFIX] else _Q1_BELOW_TWIN_PAIRS
        return small if pairs_per_expert >= q1_below and _reads_x_split(small) else TILES["q1"]
    # Session 11: from 1.5 to 24 pairs per expert the 4-warp FC2 (and gated, the 4-warp merged FC1) tiles: three
    # CTAs per SM, 3-10% faster than s16k_sx_rm / s16k_sx_r / m32l_sx / m32a at 64 and 256 tokens (TILES).
    # Session 12: gated, up to 8 pairs per expert, 3 FC1 stages (64 tokens: 1.1-2.3% faster than 2 stages in three
    # probes on both shapes) and the weight rows read as uint32 words ("sx4": 16-byte copies and 8/16-byte shared
    # loads instead of 8-byte copies and 2-byte loads; 64 tokens 6.7% / 6.5% faster than "sx" on 30b / 235b; at 256
    # tokens m32l4_sx_m with "sx4" spilled under its cap and was 3.5% slower on 30b). Both activations: the 32-token
    # tiles up to 32 pairs per expert (448 / 512 tokens, both shapes: gated 16% / 0.7-1.8% faster than
    # l128m_sa_t64, squared ReLU 18-19% / 3.3-3.5% faster than l64a). Session 13: squared ReLU up to 8 pairs per
    # expert with "sx4" too (64 tokens: 5.6% / 6.3% faster on 30b / 235b); "sx4" on the 32-token tiles was 26-29%
    # slower (squared ReLU, 128-deep K) and 22-26% slower (gated, uncapped or 128-deep K) at 256 tokens.
    # Session 14 (run 17 probes, us per layer, against the tile without planes in the same call): gated 64 tokens
    # s16k4_sx4p_m3 206.5 / 207.4 vs 213.5 / 212.9 (30b), 694.6 / 710.1 vs 729.7 / 736.4 (235b); squared ReLU
    # with planes was not faster there (30b 277.8 / 278.1 vs 274.1 / 272.0), so it keeps s16k_sx4_f4. Session 20: with
    # planes and the Gluon FC2 it is (``_GLUON_TWINS``: 30b 64 tokens 255.5 vs 274.5 / 273.0).
    if pairs_per_expert <= 8:
        return _sixteen_token_tile(gated, hidden, intermediate, gluon)
    # Session 13: from 8 to 16 pairs per expert the 32-token tiles put an expert's last 1-16 pairs on the 16-token
    # "sx4" tile (tail). Run 16 probes, us per layer against the tile without tails: gated 256 tokens 268.8 vs 285.9
    # / 286.0 (30b), 898.5 vs 997.0 / 1008.6 (235b); 192 tokens 245.5 vs 285.7, 848.4 vs 994.0 (s16k4_sx4_m3 there:
    # 240.7 / 873.7); squared ReLU 256 tokens 337.2 vs 362.9 / 365.2 (30b). Past 16 the tails stop paying: 30b
    # gated 384 tokens 309.4 vs 298.1 (slower), 512 tokens 391.1 vs 394.4.
    # Session 14: there the 32-token tiles in "sx4" with planes, their tails too (run 17 probes at 256 tokens,
    # against m32l4_sx_m_t16 / m32a_f4_t16 twice in the same call): gated 252.5 vs 269.9 / 267.5 (30b), 873.4 vs
    # 884.3 / 892.8 (235b); squared ReLU (m32k_sx4p_f4_t16: 256-deep K, FC1 3 stages) 320.8 vs 338.2 / 336.8, 1100.1
    # vs 1168.9 / 1212.1. From 16 to 32 pairs per expert the same tiles without tails (run 17 probes at 384 / 512
    # tokens against m32l4_sx_m / m32a_f4 twice): gated 270.9 vs 299.9 / 301.6 and 347.3 vs 394.4 / 394.9 (30b),
    # 917.5 vs 1035.2 / 1059.5 and 1266.9 vs 1385.7 / 1397.5 (235b); squared ReLU 327.4 vs 377.8 / 377.3 and 437.9
    # vs 498.4 / 500.5 (30b), 1177.5 vs 1351.3 / 1356.7 and 1639.8 vs 1843.6 / 1837.3 (235b). The cut at 32 pairs
    # per expert dates from the tiles without planes (0.7-3.5% faster than the 128 / 64-token tiles at 512 tokens).
    if pairs_per_expert <= 16:
        return _tile("m32l4_sx4p_m_t16_s2" if gated else "m32k_sx4p_f4_t16_s2", hidden, intermediate, gluon)
    if pairs_per_expert < 28:
        return _tile("m32l4_sx4p_m_s2" if gated else "m32k_sx4p_f4_s2", hidden, intermediate, gluon)
    # Session 15 (run 18 probes, us per layer, 30b / 235b): the plane tiles with 64 tokens. At 32 pairs per expert
    # (512 tokens) with 32-token plane tails: gated 323.9 / 1116.5 vs m32l4_sx4p_m 345.0 / 1250.8, squared ReLU
    # 415.9 / 1481.4 vs m32k_sx4p_f4 435.3 / 1618.2. From 40 without tails: gated 640 tokens 358.3 / 1274.8 (tails
    # 371.2 / 1243.4) vs l128m_sa_t64 398.4, 395.4 / 1419.5, 1432.6 (call 1), 768 tokens 368.6 / 1303.9 (tails
    # 389.8 / 1359.9) vs 425.8, 425.3 / 1459.8, 1466.3; squared ReLU with 2 FC1 stages 640 tokens 463.4 / 1683.6 vs
    # l64a 523.6, 522.7 / 1929.0, 1929.7, 768 tokens 470.7 (30b; 235b with 3 stages 1769.1) vs 527.7, 524.0 / 1947.7,
    # 1946.4. At 64 pairs per expert the 64-token tiles pad most experts to two blocks (1024 tokens: 10-12% slower
    # than l128m_sa_t64); there they became the 128-token tiles' tails (below). The cut at 28 (call 3, the 64-token
    # tiles with tails against the 32-token ones): 24 pairs per expert (384 tokens) gated 286.9 vs 269.3 / 936.9 vs
    # 925.7, squared ReLU 346.1 vs 329.4 / 1195.7 vs 1168.3 (slower on both shapes); 28 (448 tokens) gated 300.0 vs
    # 294.7 / 1004.0 vs 1072.9, squared ReLU 373.0 vs 364.2 / 1325.1 vs 1339.7 (slower on 30b, faster on 235b).
    # Session 17 (run 20, 512 tokens, us per layer, 30b / 235b): squared ReLU with the 2-stage tile and tails,
    # 395.6 / 1448.4 vs l64k_sx4p_f4_t32_s2 413.1, 413.7 / 1433.4, 1452.9 (30b 4.3% faster, 235b within its spread).
    if pairs_per_expert < 40:
        return _tile("l64_sx4p_mu_t32_s2" if gated else "l64k2_sx4p_f4_t32_s2", hidden, intermediate, gluon)
    if pairs_per_expert < 64:
        return _tile("l64_sx4p_mu_s2" if gated else "l64k2_sx4p_f4_s2", hidden, intermediate, gluon)
    # Tail tiles (session 8): an expert's last pairs past its full 128-token blocks run on a narrower tile. While most
    # experts have a single, partial block: 64-token tails (1024 tokens: 7-10% faster than l128a_sa, SwiGLU both shapes
    # and squared ReLU on 30b; session 9, SwiGLU: 0.4-7.0% faster than l64b at 32 and 48 pairs per expert, both shapes).
    # Past that 32-token tails (2048 / 4096 tokens: 4-9% faster; the 16-token tails 1% faster to 2.7% slower; session 9:
    # 4-8% faster than 64-token tails at 80 pairs per expert, SwiGLU). Squared ReLU keeps l64a below 64 pairs per expert
    # (session 9: 2-7% faster than l128a_sa_t64 at 32 and 48). Session 10: squared ReLU takes 128 FC1 rows per program
    # from 64 pairs per expert (l128w_sa: 0.7-2.9% faster at 64 and 128, 4.6-5.0% at 192), and 256-token tiles from 176
    # (x256w_sa: 11-15% faster at 192 and 256, 23-25% slower at 128; from 176 both tile sets pad an expert's pairs
    # alike; the cut itself was not timed). Gated layers: gate and up rows in one FC1 tile on 8 warps, in the same
    # regions as squared ReLU (l128m_sa: 5.6% faster at 64 pairs per expert on 30b; x256m_sa: 12.4% / 10.9% faster at
    # 256 on 30b / 235b). With two FC1 tiles 256-token tiles were 0.1-4.7% slower at 4096-8192 tokens (40-53% at 2048),
    # 128 FC1 rows per half 2-4% and 256 FC2 rows 4-9% slower at 1024-4096. Session 15: the 64-token tails are the plane
    # tiles (1024 tokens, run 18 call 2: gated l128m_sa_t64p 448.1 / 1567.5 vs l128m_sa_t64 466.0 / 1639.5, squared ReLU
    # l128w_sa_t64p 575.0 / 2088.3 vs l128w_sa_t64 591.2 / 2202.6; 32-token plane tails at 4096 tokens on 235b were 1.0%
    # / 0.9% slower than x256m_sa_t32 / x256w_sa_t32a). Session 16: the second stream (run 19 probes, us per layer,
    # against one stream in the same call, 30b / 235b): at 1024 tokens with the uncapped / 2-stage 64-token tails, gated
    # 438.5 (t64p beside: 446.3) vs 479.9, 478.8 / 1595.0 (1603.1) vs 1629.8, 1651.8; squared ReLU 558.4 (574.4) vs
    # 609.1, 608.5 / 2082.5 (2088.1) vs 2118.4, 2160.1. At 256 tokens gated 238.2, 237.3 vs 261.0, 261.5 (30b), on 235b
    # 910.6, 883.5, 852.6, 890.0 vs 869.8, 876.6, 864.1, 870.8 (a spread with two streams, none with one); squared ReLU
    # 312.7 vs 332.2, 332.0 / 1133.4 vs 1141.6, 1201.5. 64 tokens (the plane copy beside the route) 207.0 vs 214.4,
    # 214.1 / 728.6 vs 730.0, 781.7. 512 tokens (30b) gated 315.9 vs 339.5, 338.4, squared ReLU 414.8 vs 426.5, 426.2.
    # Squared ReLU at 4096 tokens (x256w_sa_t32a) was not faster (1320.7 vs 1301.6, 1311.6 / 4988.1 vs 4979.1, 5031.7):
    # the 256-token tiles keep one stream. 16-28 and 40-64 pairs per expert (the plane copy beside the route, no tails;
    # call 5, one sample): 384 tokens gated 273.1 vs 282.4 / 959.0 vs 966.2, squared ReLU 332.4 vs 342.5 / 1270.6 vs
    # 1224.6 (slower); 768 tokens gated 380.7 vs 394.3 / 1356.0 vs 1352.3, squared ReLU 486.6 vs 496.3 / 1784.3 vs
    # 1792.5. Session 17 (run 20, 2048 tokens = 128 pairs per expert, against one stream twice): the 128-token tiles
    # with 32-token tails on two streams, gated 627.4 vs 648.9, 652.4 / 2316.9 vs 2339.8, 2401.2, squared ReLU 816.7 vs
    # 823.4, 861.9 / 3073.6 vs 3090.8, 3233.5.
    if pairs_per_expert < 72:
        return _tile("l128m_sa_t64pu_s2" if gated else "l128w_sa_t64p2_s2", hidden, intermediate, gluon)
    if not gated:
        return (TILES["l128w_sa_t32a_s2"] if pairs_per_expert < 176
                else _tile("x256w_sa_t32a", hidden, intermediate, gluon))  # (its twin: the ws FCs, session 40)
    if pairs_per_expert < 176:
        return TILES["l128m_sa_t32_s2"]
    return _tile("x256m_sa_t32", hidden, intermediate, gluon)  # (its twin: both FCs persistent ws, session 43)
