"""``TILES``: the named Triton MXFP8 MoE tile configurations (defaults, their Gluon and warp-specialized twins, and
the opt-in forms the GPU probes measured; bench/NOTES_triton_moe.md tells each one's history), and the helpers that
derive one tile from another (``map_launch_tiles``, ``replace_launch_tiles``, ``triton_form``)."""

from __future__ import annotations

import dataclasses

from .triton_config import TritonMoEConfig, _reads_x_split

# The tile sets ``choose_config`` returns (and earlier defaults the tests and benchmarks still name), by the names
# ``bench/moe_layer.py`` and the GPU tests use (fields:
# block_t, fc1 n / k / warps / stages, fc2 n / k / warps / stages). Measured and GPU-tested on an H200 (runs 5 and 7,
# bench/NOTES_triton_moe.md): "d" direct small-T path, "s"/"m"/"l" token tiles of 16/32/64-128, "_sx" the
# sign-extending dequant (the others convert with cvt).
TILES = {
    # v6 GEMV small-T path (session 5 sweep on the H200, bench/NOTES_triton_moe.md): "p" = FC2 per pair + combine
    # kernel (the only form kept), "3" = K loops pipelined 3 deep through shared memory; block_t is unused there.
    "g16p3": TritonMoEConfig(16, 16, 256, 4, 3, 32, 256, 4, 3, direct=True, gemv=True),
    "g16p": TritonMoEConfig(16, 16, 512, 4, 1, 32, 256, 4, 1, direct=True, gemv=True),
    "g32p": TritonMoEConfig(16, 32, 256, 4, 1, 16, 256, 2, 1, direct=True, gemv=True),
    # v7 routed GEMV: route by expert, then g32p's tiles per pair. Pairs of one expert run side by side and share
    # weight reads in L2 (session 6 probe on the H200: 8-18% faster than g32p at 16 tokens).
    "q1": TritonMoEConfig(1, 32, 256, 4, 1, 16, 256, 2, 1, gemv=True),
    "d4_sx": TritonMoEConfig(16, 32, 256, 2, 4, 16, 256, 1, 6, dequant="sx", direct=True),
    "s16a": TritonMoEConfig(16, 32, 128, 4, 4, 64, 128, 4, 4),
    "s16k_sx": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx"),
    # s16k_sx with FC2 capped at 128 registers (8 bytes spilled): two FC2 CTAs per SM instead of one. Session 5
    # sweep on the H200: 6-7% faster (SwiGLU) and 9% (squared ReLU) at 16 and 64 tokens on both shapes.
    "s16k_sx_r": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx", fc2_maxnreg=128),
    "m32l_sx": TritonMoEConfig(32, 64, 256, 4, 2, 128, 256, 8, 3, dequant="sx"),
    "m32a": TritonMoEConfig(32, 64, 128, 4, 3, 128, 128, 8, 3),
    "l64a": TritonMoEConfig(64, 128, 64, 8, 3, 128, 64, 8, 3),
    "l64b": TritonMoEConfig(64, 64, 64, 4, 3, 128, 64, 4, 3),
    "l128a": TritonMoEConfig(128, 64, 64, 4, 3, 128, 64, 8, 3),
    # v8 "sx_auto" (session 7): the sign-extending dequant with ONE bf16 factor per weight pair, 2 ** (s - 7 - shift),
    # where a per-program scan of the tile's scale rows sets shift = max(0, largest byte - 134) and the accumulators
    # are multiplied by 2 ** shift. Bit-identical to "cvt" while the tile's scales are <= 2 ** 7 (shift 0). Session 7
    # probes on the H200: l128a_sa 7-10% faster than l64b / l64a at 1024 tokens, 17-21% at 4096.
    "l64b_sa": TritonMoEConfig(64, 64, 64, 4, 3, 128, 64, 4, 3, dequant="sx_auto"),
    "l128a_sa": TritonMoEConfig(128, 64, 64, 4, 3, 128, 64, 8, 3, dequant="sx_auto"),
    # Session 10 (run 13, H200 probes): squared ReLU's FC1 keeps a single accumulator, so its tiles can take 128
    # weight rows per program. "l128w_sa": 128-token tiles, 128 FC1 rows on 8 warps, FC1 capped at 128 registers
    # (two CTAs per SM; 141 uncapped, compile-only; uncapped it was 3-6% SLOWER than l128a_sa): 0.7-5.0% faster
    # than l128a_sa at 64-192 pairs per expert. "x256w_sa": 256-token tiles (wgmma N = 256; FC1 219 / FC2 206
    # registers, one CTA per SM): each dequantized weight tile feeds twice the tokens; 11-15% faster at 192-256
    # pairs per expert, 23-25% slower at 128.
    # Gated layers (session 10): gate and up rows in ONE FC1 MMA tile (``fc1_gate_merge``) on 8 warps, which split
    # it by rows; two separate tiles on 8 warps split by tokens and both warpgroups dequantize the same weights.
    # H200 probes (SwiGLU, us per layer against the two-tile default of the same call): 64 tokens 251.3 vs 259.6
    # (30b) and 827.3 vs 871.3 (235b) with FC1 capped at 128 registers (two CTAs per SM; 279.1 / 930.1 uncapped);
    # 1024 tokens 468.9 vs 496.8, 4096 tokens 1086.2 (128-token tiles) and 1020.5 (256) vs 1165.2 (30b), 3751.5
    # (256) vs 4211.8 (235b). At 256 tokens (m32l_sx) it was 11-22% slower. Bit-identical to the two-tile FC1.
    "s16k_sx_rm": TritonMoEConfig(16, 64, 256, 8, 3, 128, 256, 8, 3, dequant="sx", fc1_maxnreg=128, fc2_maxnreg=128,
                                  fc1_gate_merge=True),
    # Session 11 (run 14, H200 probes): at 1.5-24 pairs per expert, more and smaller CTAs per SM. FC2 on 4 warps with
    # 64 rows capped at 168 registers (three CTAs per SM; compile-only, Triton 3.8: 145-167 registers, no spill);
    # gated FC1 merged on 4 warps with 32 + 32 rows, 2 stages, capped at 168 (146 / 167 registers, no spill; three
    # CTAs per SM where the 8-warp s16k_sx_rm fitted two and m32l_sx's 4-warp FC1 used 255 registers). SwiGLU, us
    # per layer against the previous default in the same call: 64 tokens 231.9 vs 249.4 (30b) and 793.0 vs 832.9
    # (235b); 256 tokens 285.2 vs 315.5 and 993.8 vs 1068.5. Squared ReLU (FC2 change only; its FC1 on 4 warps with
    # 64 rows and a cap was not faster): 64 tokens 294.6 vs 304.2, 1022.4 vs 1053.6; 256 tokens (m32a's 128-deep K
    # and 3 stages kept) 363.3 vs 383.1, 1295.4 vs 1367.9.
    "s16k4_sx_m": TritonMoEConfig(16, 32, 256, 4, 2, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                  fc1_gate_merge=True),
    # session 12: s16k4_sx_m with 3 FC1 stages (58 KB shared, 142 registers: still three CTAs per SM)
    "s16k4_sx_m3": TritonMoEConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                   fc1_gate_merge=True),
    # session 12, call 5: s16k4_sx_m3 with its weight rows read as uint32 words (16-byte copies, 4 byte-plane MMAs)
    "s16k4_sx4_m3": TritonMoEConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc1_maxnreg=168,
                                    fc2_maxnreg=168, fc1_gate_merge=True),
    "m32l4_sx_m": TritonMoEConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                  fc1_gate_merge=True),
    "s16k_sx_f4": TritonMoEConfig(16, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx", fc2_maxnreg=168),
    # session 13: s16k_sx_f4 with "sx4" (run 16 probes, squared ReLU at 64 tokens: 277.9 vs 293.5 / 295.1 us on 30b,
    # 972.9 vs 1028.6 / 1047.4 on 235b)
    "s16k_sx4_f4": TritonMoEConfig(16, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc2_maxnreg=168),
    "m32a_f4": TritonMoEConfig(32, 64, 128, 4, 3, 64, 128, 4, 3, fc2_maxnreg=168),
    "l128m_sa": TritonMoEConfig(128, 64, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_gate_merge=True),
    "x256m_sa": TritonMoEConfig(256, 64, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_gate_merge=True),
    "l128w_sa": TritonMoEConfig(128, 128, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_maxnreg=128),
    "x256w_sa": TritonMoEConfig(256, 128, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto"),
}
# Session 8: l128a_sa with tail tiles (``TritonMoEConfig.tail``): an expert's last 1..16 / 32 / 64 pairs past its
# full 128-token blocks run on the 16 / 32 / 64-token tiles.
TILES.update({
    "l128a_sa_t16": dataclasses.replace(TILES["l128a_sa"], tail=TILES["s16k_sx_r"]),
    "l128a_sa_t32": dataclasses.replace(TILES["l128a_sa"], tail=TILES["m32l_sx"]),
    "l128a_sa_t32a": dataclasses.replace(TILES["l128a_sa"], tail=TILES["m32a"]),
    "l128a_sa_t64": dataclasses.replace(TILES["l128a_sa"], tail=TILES["l64b_sa"]),
    "l128w_sa_t32a": dataclasses.replace(TILES["l128w_sa"], tail=TILES["m32a"]),
    "l128w_sa_t64": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64b_sa"]),
    "x256w_sa_t32a": dataclasses.replace(TILES["x256w_sa"], tail=TILES["m32a"]),
    "l128m_sa_t64": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64b_sa"]),
    "l128m_sa_t32": dataclasses.replace(TILES["l128m_sa"], tail=TILES["m32l_sx"]),
    "x256m_sa_t32": dataclasses.replace(TILES["x256m_sa"], tail=TILES["m32l_sx"]),
    # Session 13, the defaults from 8 to 16 pairs per expert: the 32-token tiles with the 16-token "sx4" tiles as
    # tails (an expert with 1-16 pairs past its last full 32-token block runs them on the 16-token tile).
    "m32l4_sx_m_t16": dataclasses.replace(TILES["m32l4_sx_m"], tail=TILES["s16k4_sx4_m3"]),
    "m32a_f4_t16": dataclasses.replace(TILES["m32a_f4"], tail=TILES["s16k_sx4_f4"]),
    # Session 14 (run 17): the "sx4" tiles with plane-major token operands (``planes``), and the 32-token tiles in
    # "sx4" with them (without planes "sx4" was 22-29% slower there: every K step shuffled 32 token columns).
    "s16k4_sx4p_m3": dataclasses.replace(TILES["s16k4_sx4_m3"], planes=True),
    "s16k_sx4p_f4": dataclasses.replace(TILES["s16k_sx4_f4"], planes=True),
    "m32l4_sx4p_m": dataclasses.replace(TILES["m32l4_sx_m"], dequant="sx4", planes=True),
    "m32k_sx4p_f4": TritonMoEConfig(32, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc2_maxnreg=168, planes=True),
})
TILES.update({
    "m32l4_sx4p_m_t16": dataclasses.replace(TILES["m32l4_sx4p_m"], tail=TILES["s16k4_sx4p_m3"]),
    "m32k_sx4p_f4_t16": dataclasses.replace(TILES["m32k_sx4p_f4"], tail=TILES["s16k_sx4p_f4"]),
    # Session 15 (run 18): the 32-token plane tiles with 64 tokens. Gated: FC1 uncapped ("mu"; compile-only, Triton
    # 3.8: 194 registers, no spill; capped at 168 it spilled 76 bytes, and its 82 KB of shared memory fit two CTAs per
    # SM either way). Squared ReLU: 2 FC1 stages ("k2": 82 KB shared, two CTAs per SM; 3 stages took 132 KB, one).
    "l64_sx4p_m": dataclasses.replace(TILES["m32l4_sx4p_m"], block_t=64),
    "l64_sx4p_mu": dataclasses.replace(TILES["m32l4_sx4p_m"], block_t=64, fc1_maxnreg=None),
    "l64k_sx4p_f4": dataclasses.replace(TILES["m32k_sx4p_f4"], block_t=64),
    "l64k2_sx4p_f4": dataclasses.replace(TILES["m32k_sx4p_f4"], block_t=64, fc1_stages=2),
})
TILES.update({
    "l64_sx4p_mu_t32": dataclasses.replace(TILES["l64_sx4p_mu"], tail=TILES["m32l4_sx4p_m"]),
    "l64k_sx4p_f4_t32": dataclasses.replace(TILES["l64k_sx4p_f4"], tail=TILES["m32k_sx4p_f4"]),
    "l128m_sa_t64p": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64_sx4p_m"]),
    "l128w_sa_t64p": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64k_sx4p_f4"]),
    # session 16: the 128-token tiles with the uncapped / 2-stage 64-token plane tiles as tails
    "l128m_sa_t64pu": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64_sx4p_mu"]),
    "l128w_sa_t64p2": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64k2_sx4p_f4"]),
    # session 17: the 2-stage squared-ReLU 64-token plane tile with 32-token tails (timed with the second stream)
    "l64k2_sx4p_f4_t32": dataclasses.replace(TILES["l64k2_sx4p_f4"], tail=TILES["m32k_sx4p_f4"]),
})
# Session 16: the plane / tail defaults below 72 pairs per expert with the second stream (``side_stream`` 2: the plane
# copies of x beside the route, the tail pair beside the main pair), "_s2"; the same launches, so the same bits.
# Session 17: also the 128-token tiles with 32-token tails (72-176 pairs per expert).
TILES.update({f"{name}_s2": dataclasses.replace(TILES[name], side_stream=2) for name in (
    "s16k4_sx4p_m3", "m32l4_sx4p_m_t16", "m32k_sx4p_f4_t16", "m32l4_sx4p_m", "m32k_sx4p_f4", "l64_sx4p_mu_t32",
    "l64k_sx4p_f4_t32", "l64_sx4p_mu", "l64k2_sx4p_f4", "l128m_sa_t64pu", "l128w_sa_t64p2", "l64k2_sx4p_f4_t32",
    "l128m_sa_t32", "l128w_sa_t32a")})
# Session 18: the 32-token plane tiles with the Gluon FC2 (``fc2_gluon``: 128 rows, 3 stages, 128-deep K steps),
# "_g_s2". Run 21 probes at 256 tokens, us per layer against the "_s2" tile before / after: 30b 296.6 vs 307.9 / 307.7
# (squared ReLU), 222.9 vs 230.9 / 230.4 (gated); 235b 1043.7 vs 1064.2 / 1086.3, 782.6 vs 809.8 / 826.9. Run 22
# (session 19) at 384 tokens: 30b 299.0 vs 321.5 / 324.3, 249.7 vs 263.6 / 263.5; 235b 1127.6 vs 1162.8 / 1180.1,
# 889.6 vs 916.6 / 948.0; the full benchmark with them: 256 tokens 222.8 / 291.5 us (30b) against run 21's 228.7 /
# 301.3. The defaults since session 19.
_GLUON_FC2_TILE = dict(fc2_block_k=128, fc2_gluon=True, fc2_block_n=128, fc2_stages=3, fc2_maxnreg=None)
# Session 19: also FC1 in Gluon (``fc1_gluon``: 64 rows per gate / up tile, 3 stages, 4 warps, 128-deep K steps),
# "_gg_s2". Run 22 kernel probe (bench/gluon_fc1_probe.py, 16 pairs per expert) against the Triton default FC1,
# before / after: gated 30b 141.0 vs 156.0 / 152.5 us, 235b 503.2 vs 571.4 / 538.6. Run 22 layer probes against
# "_g_s2" before / after (us): gated 30b 219.1 vs 224.6 / 225.6 (256 tokens), 244.9 vs 250.8 / 254.7 (384); 235b 802.0
# vs 828.6 / 894.8, 914.3 vs 922.5 / 990.1: the gated default. Squared ReLU (FC1 2 I x H, no up half) lost: 30b 298.2
# vs 295.2 / 295.9, 235b 1120.3 vs 1080.3 / 1095.6 (256 tokens); there it keeps the Triton FC1.
_GLUON_FC1_TILE = dict(fc1_block_k=128, fc1_gluon=True, fc1_block_n=64, fc1_stages=3, fc1_warps=4,
                       fc1_gate_merge=False, fc1_maxnreg=None)
# Session 20: the Gluon FC2 also on the other plane tiles (the 16-token gated tile, the 64-token tiles; Gluon tails:
# below). Run 22 probes, us per layer, "_s2" / "_g_s2" / "_s2": 64 tokens gated s16k4_sx4p_m3 30b 205.0 / 191.5 /
# 205.5; 640 tokens l64_sx4p_mu 30b 353.2 / 316.6 / 353.4, 235b 1227.6 / 1119.9 / 1229.9; squared ReLU l64k2_sx4p_f4
# 30b 458.9 / 386.3 / 461.0. Run 23 (session 20): 235b 64 tokens gated 714.2 / 699.2 / 718.5; 512 tokens (the 64-token
# tiles with 32-token tails) gated 301.1 / 284.9 / 300.9 (30b), 1069.9 / 1027.2 / 1089.1 (235b), squared ReLU 381.0 /
# 352.4 / 384.3, 1402.9 / 1350.6 / 1426.0; 235b squared ReLU 640 tokens 1651.0 / 1497.7 / 1701.1. Their 17 GPU bit
# tests passed (run 23 call 1): defaults in session 20. Session 21 removed the 64-token Gluon tiles ("l64*_g_s2",
# "_gg_s2", "_gq_s2", "_gt", and the 128-token tiles with Gluon 64-token tails): they write NaN rows in 3-5% of calls
# (``_GLUON_TWINS``; bench/gluon_tail_race_probe.py reproduced it).
# Session 22 (run 25): with the two-register-set kernels the 64-token ones are back, behind the switch: the race probe
# (300 fresh inputs per case, bit-compared with the Triton form) found 0 failures in 9 cases, among them the rebuilt
# 64-token tile with both FCs in Gluon and the 128-token tiles with Gluon 64-token tails at 1024 tokens, both
# activations, where the one-set kernels had failed 3-5% of calls.
_GLUON_BASES = ("s16k4_sx4p_m3", "m32l4_sx4p_m_t16", "m32k_sx4p_f4_t16", "m32l4_sx4p_m", "m32k_sx4p_f4",
                "l64_sx4p_mu_t32", "l64k2_sx4p_f4_t32", "l64_sx4p_mu", "l64k2_sx4p_f4")


def _gluon_fc2(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` (a plane tile) with the Gluon FC2 tile (``_GLUON_FC2_TILE``)."""
    return dataclasses.replace(cfg, **_GLUON_FC2_TILE)


TILES.update({f"{name}_g_s2": _gluon_fc2(TILES[f"{name}_s2"]) for name in _GLUON_BASES})
TILES.update({f"{name}_gg_s2": dataclasses.replace(TILES[f"{name}_g_s2"], **_GLUON_FC1_TILE) for name in _GLUON_BASES})


# Session 20 (run 23): (1) the tails in Gluon too ("_gt"; an expert's last pairs run on the tail tile: at 16 pairs per
# expert about half of all pairs); (2) the Gluon FC1 on the 64-token tiles (kernel probe, bench/gluon_fc1_probe.py,
# 40 pairs per expert in 64-token blocks, 30b, us, Triton default / Gluon / Triton default: gated 64 rows 3 stages
# 206.6 / 183.4 / 205.2, squared ReLU 128 rows on 4 warps ("_gq") 207.3 / 194.5 / 210.1, bit-equal to the Triton FC1
# at 128-deep steps; at 16-token blocks gated 122.3 / 125.7 / 120.1, not faster); (3) the Gluon FC2 on the
# squared-ReLU 16-token tile, with planes. Layer probes (call 4), us per layer, previous default / new / previous:
# squared ReLU 64 tokens 30b 274.5 / 255.5 / 273.0; 256 tokens gated 30b 215.9 / 210.6 / 218.5, squared ReLU 294.0
# / 283.3 / 294.6; 512 tokens gated 285.3 / 258.1 / 286.3 (30b; the Gluon FC1 without Gluon tails 270.1), 1016.3 /
# 1003.0 / 1028.1 (235b; without 991.3), squared ReLU 350.3 / 336.8 / 351.9, 1296.5 / 1267.4 / 1378.6; 640 tokens
# (30b) gated 315.7 / 294.5 / 319.0, squared ReLU 387.2 / 382.6 / 396.5; 1024 tokens (30b) gated 411.7 / 393.4 /
# 411.9, squared ReLU 531.8 / 494.6 / 531.6 (the 128-token tiles with Gluon tails: not defaults, below). All 13 GPU
# tests passed (bits equal to the Triton forms, graph replays) in call 4. Of these, session 21 keeps the 16- /
# 32-token ones (the 64-token ones: above).
TILES.update({
    "s16k_sx4p_f4_g_s2": _gluon_fc2(dataclasses.replace(TILES["s16k_sx4p_f4"], side_stream=2)),
    "m32l4_sx4p_m_t16_gg_s2_gt": dataclasses.replace(TILES["m32l4_sx4p_m_t16_gg_s2"],
                                                     tail=_gluon_fc2(TILES["s16k4_sx4p_m3"])),
    "m32k_sx4p_f4_t16_g_s2_gt": dataclasses.replace(TILES["m32k_sx4p_f4_t16_g_s2"],
                                                    tail=_gluon_fc2(TILES["s16k_sx4p_f4"])),
})
# Session 22: session 20's 64-token Gluon tiles again (two register sets): the gated 64-token tile with both FCs in
# Gluon and its 32-token Gluon tails, the squared-ReLU one with 128 FC1 rows on 4 warps ("_gq": two m64 wgmma chains),
# and the 128-token tiles with the Gluon FC2 on their 64-token tails ("_gt"). Run 25 layer probes (call 5), us per
# layer, Triton tile / Gluon twin / Triton tile: 640 tokens gated 30b 353.6 / 300.3 / 354.9, 235b 1234.5 / 1109.4 /
# 1242.1; squared ReLU 30b 454.4 / 410.0 / 458.0, 235b 1654.3 / 1556.9 / 1697.0; 1024 tokens gated 30b 409.5 / 401.3 /
# 412.5, 235b 1486.1 / 1479.3 / 1523.7; squared ReLU 30b 531.7 / 506.3 / 533.2, 235b 1969.1 / 1905.6 / 2011.3.
_GLUON_SQ_FC1_TILE = dict(_GLUON_FC1_TILE, fc1_block_n=128)  # 128 rows on 4 warps: two m64 wgmma chains
TILES.update({
    "l64_sx4p_mu_t32_gg_s2_gt": dataclasses.replace(TILES["l64_sx4p_mu_t32_gg_s2"],
                                                    tail=dataclasses.replace(TILES["m32l4_sx4p_m_gg_s2"],
                                                                             side_stream=0)),
    "l64k2_sx4p_f4_gq_s2": dataclasses.replace(TILES["l64k2_sx4p_f4_g_s2"], **_GLUON_SQ_FC1_TILE),
    "l128m_sa_t64pu_s2_gt": dataclasses.replace(TILES["l128m_sa_t64pu_s2"], tail=_gluon_fc2(TILES["l64_sx4p_mu"])),
    "l128w_sa_t64p2_s2_gt": dataclasses.replace(TILES["l128w_sa_t64p2_s2"], tail=_gluon_fc2(TILES["l64k2_sx4p_f4"])),
})
TILES["l64k2_sx4p_f4_t32_gq_s2_gt"] = dataclasses.replace(TILES["l64k2_sx4p_f4_gq_s2"],
                                                          tail=_gluon_fc2(TILES["m32k_sx4p_f4"]))
# Session 22: the 16-token Gluon tiles with 64-row FC2 programs. Run 25 kernel probe (bench/gluon_fc2_probe.py, 30b
# FC2, 8 pairs per expert in 16-token blocks): 64 rows 78.4 us against 87.4 with 128 rows and 85.2 / 86.2 for the
# Triton FC2 (32-token blocks: 64 rows 92.2 against 87.5, so not there). Run 26 layer probes (30b, 64 tokens, us,
# Triton / Gluon 128 rows / Gluon 64 rows / Triton): gated 205.2 / 203.8 / 196.7 / 206.5, squared ReLU 274.1 / 274.0 /
# 263.7 / 274.9; Triton / Gluon 64 rows / Triton: 235b 64 tokens gated 712.0 / 706.3 / 720.8, squared ReLU 992.6 /
# 980.0 / 1022.6; 30b 128 tokens 216.5 / 209.3 / 216.8 and 287.9 / 277.3 / 288.6. The Gluon twins of the 16-token
# tiles since session 23 (``_GLUON_TWINS``), on by default (``_GLUON_BY_DEFAULT``).
TILES.update({f"{name}_n64": dataclasses.replace(TILES[name], fc2_block_n=64)
              for name in ("s16k4_sx4p_m3_g_s2", "s16k_sx4p_f4_g_s2")})
# Session 24: "f8x2" tiles (``_triton_f8x2_kernel.py``): no weight dequant; per 32-deep E8M0 block one 64-deep fp8
# wgmma on the exact hi / lo e4m3 split of the activations, then one scale product and FMA per output element; two
# independent accumulator chains per program (gate / up rows, else two halves of the rows). 4 warps, 128-deep K
# steps, the split of x beside the route ("_s2"). "q": 128 FC1 rows for the ungated activations (two 64-row halves).
# Experimental, not defaults: run 27 layer probes (30b, us, default / f8x2 / default): squared ReLU 64 tokens 263.3 /
# 399.1 / 262.2, 256 tokens 304.2 / 477.2 / 303.0; SwiGLU 197.5 / 321.1 / 198.5 and 230.7 / 391.4 / 230.6. Triton 3.6
# waits for each block's wgmma before its FMAs (``WARPGROUP.DEPBAR.LE gsb0, 0x0``), so every 32-deep block pays the
# MMA latency; bench/NOTES_triton_moe.md (session 24) has the variants and what a faster form would need.
_F8X2 = dict(dequant="f8x2", fc1_block_n=64, fc1_block_k=128, fc1_warps=4, fc1_stages=2, fc2_block_n=128,
             fc2_block_k=128, fc2_warps=4, fc2_stages=2)
TILES.update({
    "s16_f8": TritonMoEConfig(16, **_F8X2),
    "m32_f8": TritonMoEConfig(32, **_F8X2),
    "l64_f8": TritonMoEConfig(64, **_F8X2),
})
TILES.update({f"{name}q": dataclasses.replace(TILES[name], fc1_block_n=128) for name in ("s16_f8", "m32_f8", "l64_f8")})
TILES.update({
    "m32_f8_t16": dataclasses.replace(TILES["m32_f8"], tail=TILES["s16_f8"]),
    "l64_f8_t32": dataclasses.replace(TILES["l64_f8"], tail=TILES["m32_f8"]),
    "m32_f8q_t16": dataclasses.replace(TILES["m32_f8q"], tail=TILES["s16_f8q"]),
    "l64_f8q_t32": dataclasses.replace(TILES["l64_f8q"], tail=TILES["m32_f8q"]),
})
TILES.update({f"{name}_s2": dataclasses.replace(TILES[name], side_stream=2)
              for name in ("s16_f8", "m32_f8_t16", "l64_f8_t32", "s16_f8q", "m32_f8q_t16", "l64_f8q_t32")})
# ... and with FC2 in Gluon ("_gf", ``_gluon_f8x2_fc2_kernel.py``: TMA stages, no weight copy, scales loaded straight
# into the accumulator's layout, each block's wgmmas in flight while the previous block's sum is scaled and added; 64
# rows, 4 stages). Compile-only so far (Triton 3.6: 78 registers and 49 KB of shared memory at 16-token blocks).
TILES.update({f"{name}_gf": dataclasses.replace(TILES[name], fc2_gluon=True, fc2_block_n=64, fc2_stages=4)
              for name in ("s16_f8_s2", "s16_f8q_s2", "m32_f8_t16_s2", "m32_f8q_t16_s2")})
# ... and, for squared ReLU, with FC1 in Gluon too ("_g1": ``_gluon_f8x2_fc1_kernel.py``, session 31: no dequant on
# the consumer's chain, which run 34 found to be what holds the dequantizing kernels at 81-85% of HBM read; 128 rows
# in 3 stages, or "_g1n64" 64 rows in 4; the main tile only). Compile-only so far (tools/gpu_next.sh s32a).
TILES.update({f"{name}_gf_g1": dataclasses.replace(TILES[f"{name}_gf"], fc1_gluon=True, fc1_stages=3)
              for name in ("s16_f8q_s2", "m32_f8q_t16_s2")})
TILES.update({f"{name}_gf_g1n64": dataclasses.replace(TILES[f"{name}_gf"], fc1_gluon=True, fc1_block_n=64,
                                                      fc1_stages=4) for name in ("s16_f8q_s2", "m32_f8q_t16_s2")})
# Session 32 (run 35 call 1, 30b, 64 tokens): the "_g1" tile's f8x2 FC1 took 104.8 us against the dequantizing FC1's
# 111.3, its Gluon f8x2 FC2 on 64 rows 136.6 against the dequantizing two-chain FC2's 118.1. That FC1 runs 128 rows
# (two m64 wgmma chains per block); "_f128": the FC2 on 128 rows too, in 3 or 4 stages (run 36 below).
TILES.update({
    "s16_f8q_s2_gf_g1_f128": dataclasses.replace(TILES["s16_f8q_s2_gf_g1"], fc2_block_n=128, fc2_stages=3),
    "s16_f8q_s2_gf_g1_f128s4": dataclasses.replace(TILES["s16_f8q_s2_gf_g1"], fc2_block_n=128, fc2_stages=4),
})
# Session 34 (run 37 call 4): that FC2 spends 70% of its time in its own chain of wgmmas, scale loads and FMAs (81.3 of
# 116.9 us without its weight copies). "_f128w8": on 8 warps, two warpgroups of 64 rows (74 registers, Triton 3.6),
# twice the warps per SM to hide that chain (prepared: tools/gpu_next.sh s35a).
TILES["s16_f8q_s2_gf_g1_f128w8"] = dataclasses.replace(TILES["s16_f8q_s2_gf_g1_f128"], fc2_warps=8)
# ... "_fs": their FC1 writing FC2's split rows itself (``fc1_split_out``; no split launch between the FCs)
TILES.update({f"{name}_fs": dataclasses.replace(TILES[name], fc1_split_out=True)
              for name in ("s16_f8q_s2_gf_g1", "s16_f8q_s2_gf_g1_f128")})
# Run 36 call 1 (30b / 235b, 64 tokens, us; 21 GPU tests passed; not taken): "_f128" 236.7, 239.0 / 830.2, 824.8
# and "_f128_fs" 235.6, 232.1 / 817.3, 816.6 against the default's 230.7, 230.3 / 823.6, 846.1; the f8x2 FC2 on 128
# rows 117.2 against the default dequantizing FC2's 116.1, the "_fs" FC1 104.9 against 101.5. Session 33 also ran that
# FC2 on 2 / 4 adjacent tiles per program, its stage ring running on across them (call 5; the same bits; code not
# kept, the patch is bench/results/run36/fc2_n_tiles.patch): FC2 117.9 -> 116.3 / 141.8 us, the layer 238.4, 239.9 ->
# 238.4, 240.0 / 264.3, 265.0 (30b), so fewer, longer programs are not what that FC2 lacks.
# Session 35 (run 38 call 1, 30b squared ReLU, 64 tokens, per-kernel profile): the "_f128" tile's f8x2 FC2 took 117.6
# us, 109.8 with every token column's block scales read from one row (timing only; 235b 411.6 -> 395.3), 80.8 without
# its weight copies (its FC1 101.6 / 72.6): the scattered scale loads by position cost it 7%. "_st": the FC2 split
# rows' scales transposed (``split_scales_t``; the same bits; tools/gpu_next.sh s35c).
TILES.update({f"{name}_st": dataclasses.replace(TILES[name], split_scales_t=True)
              for name in ("s16_f8q_s2_gf_g1_f128", "s16_f8q_s2_gf_g1_f128_fs")})


def map_launch_tiles(cfg: TritonMoEConfig, change) -> TritonMoEConfig:
    """``cfg`` with ``change`` (a tile -> tile function) applied to it and to its tail tile (``launch_tiles``; the
    pair checked as changed, never the new main tile with the old tail)."""
    tail = None if cfg.tail is None else change(cfg.tail)
    return dataclasses.replace(change(dataclasses.replace(cfg, tail=None)), tail=tail)


def replace_launch_tiles(cfg: TritonMoEConfig, **changes) -> TritonMoEConfig:
    """``cfg`` with ``changes`` applied to it and to its tail tile (``launch_tiles``)."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, **changes))


def triton_form(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with each Gluon kernel (its tail's too) replaced by the Triton kernel at the same 128-deep steps: the
    same values in the same MMA order, hence the same bits (what the GPU tests and the race probe compare with), unless
    a Gluon FC2 ran on two chains (``same_bits_as_triton_form``)."""
    return replace_launch_tiles(cfg, fc1_gluon=False, fc2_gluon=False, fc2_chains=1, fc1_overlap=True,
                                fc2_overlap=True, scale_words=False, fc2_ring=False, fc1_one_factor=False,
                                fc2_one_factor=False, fc2_pdl=False, fc1_f8x2=False, fc1_split_out=False,
                                split_scales_t=False, step_scales=False, fc2_ws=False, fc1_ws=False, ws_sx=False,
                                ws_thread_arrive=False, ws_staged_epilogue=False, ws_persistent=False, ws_dstages=2,
                                ws_wstages=0, ws_prefetch=False)


def same_bits_as_triton_form(cfg: TritonMoEConfig) -> bool:
    """Whether ``cfg`` gives the bits of ``triton_form(cfg)``: no launch tile sums its FC2 on two chains, runs a Gluon
    f8x2 FC1 (``fc1_f8x2``, or an "f8x2" tile's ``fc1_gluon``: it rounds its rows to bf16 before the split), splits
    with one scale per 128 values (``step_scales``) or runs a warp-specialized FC (``fc1_ws`` / ``fc2_ws``: bits not
    claimed before a GPU has compared them)."""
    return all(t.fc2_chains == 1 and not t.fc1_f8x2 and not (t.dequant == "f8x2" and t.fc1_gluon)
               and not t.step_scales and not t.fc2_ws and not t.fc1_ws for t in cfg.launch_tiles)


def _synced(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` and its tail with ``sync_dots``."""
    return replace_launch_tiles(cfg, sync_dots=True)


# Session 21: "_sd", the default 128- / 256-token tiles with ``sync_dots`` (candidates, not defaults; untimed).
TILES.update({f"{name}_sd": _synced(TILES[name]) for name in (
    "l128m_sa_t64pu_s2", "l128w_sa_t64p2_s2", "l128m_sa_t32_s2", "l128w_sa_t32a_s2", "x256m_sa_t32", "x256w_sa_t32a")})
# Session 26: the Gluon FC2 on two accumulator chains ("_c2", ``fc2_chains``; tails with a Gluon FC2 too; "_n64": 64-row
# FC2 programs on main and tail tiles; "_st4": 4 FC2 stages). Why: a persistent warp-specialized form of this FC2
# (bench/results/run29/persistent_fc2.patch, not kept) ran on one program per SM at 258.5 us against 211.2 with two
# chains (30b squared-ReLU FC2, 16 pairs in 32-token blocks): one warpgroup waits on its chain of dependent wgmmas.
# Kernel probe (bench/gluon_fc2_probe.py, run 29 call 4, us, one chain -> two): 32-token blocks 156.8 (128 rows) ->
# 148.8 (64 rows, 4 stages); 16-token blocks 138.6 -> 129.6 (4 stages). Layer probes (call 5, 30b, us, Triton /
# "_c2" / Triton): squared ReLU 192 tokens 298.0 / 279.9 / 297.2 and 256 tokens 305.5 / 291.7 / 304.7
# (``m32k_sx4p_f4_t16_g_s2_gt_n64_c2``), 384 tokens 323.3 / 315.5 / 324.4 (``m32k_sx4p_f4_g_s2_n64_c2``); SwiGLU 192 /
# 256 tokens 213.9 / 207.7 / 215.3, 231.5 / 227.3 / 231.6 (``m32l4_sx4p_m_t16_gg_s2_gt_n64_c2``), 384 tokens 263.0 /
# 264.8 / 264.6 (no gain: stays Triton); 16-token tiles (Gluon "_n64" / "_c2" / "_c2_st4" / "_n64"): squared ReLU 64
# tokens 265.2 / 260.4 / 258.1 / 266.9, 128 tokens 277.8 / 272.3 / 269.7 / 275.7; SwiGLU 196.6 / 194.2 / 194.2 / 195.4
# and 205.9 / 202.8 / 203.2 / 205.1; 235b SwiGLU 64 tokens 680.1 / 676.9 ("_c2_st4") / 691.2, 256 tokens 799.4 / 798.0
# / 806.6. Their GPU tests passed (float64 oracle on both shapes, 20 fresh calls each against the one-chain form, graph
# replays): the twins of ``_GLUON_BY_DEFAULT`` at 1.5-16 pairs per expert and, squared ReLU, 16-28.
def _chained(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc2_chains=2`` on its Gluon FC2 launches (main tile and, if its FC2 is Gluon, the tail)."""
    tail = cfg.tail if cfg.tail is None or not cfg.tail.fc2_gluon else dataclasses.replace(cfg.tail, fc2_chains=2)
    return dataclasses.replace(cfg, tail=tail, fc2_chains=2)


TILES.update({f"{name}_c2": _chained(TILES[name]) for name in (
    "s16k4_sx4p_m3_g_s2_n64", "s16k_sx4p_f4_g_s2_n64", "m32k_sx4p_f4_t16_g_s2_gt", "m32l4_sx4p_m_t16_gg_s2_gt",
    "l64_sx4p_mu_t32_gg_s2_gt", "l64k2_sx4p_f4_t32_gq_s2_gt")})
TILES.update({f"{name}_n64_c2": _chained(replace_launch_tiles(TILES[name], fc2_block_n=64)) for name in (
    "m32k_sx4p_f4_t16_g_s2_gt", "m32l4_sx4p_m_t16_gg_s2_gt", "m32k_sx4p_f4_g_s2", "m32l4_sx4p_m_gg_s2")})
TILES.update({f"{name}_c2_st4": dataclasses.replace(TILES[f"{name}_c2"], fc2_stages=4) for name in (
    "s16k4_sx4p_m3_g_s2_n64", "s16k_sx4p_f4_g_s2_n64")})
# Session 28: "_nov", the main tile's Gluon kernels without the step overlap (``fc1_overlap`` / ``fc2_overlap`` False
# where that FC is Gluon; the tail keeps it): each K step's MMAs are waited for before the next step's dequant, one
# register set, more programs per SM; the same values in the same order, so the bits of the tile without "_nov".
# Kernel probes (run 31 call 1, bench/gluon_fc1_probe.py / gluon_fc2_probe.py, us, overlap / none): gated FC1 at
# 32-token blocks 149.5 / 135.0 (30b), 530.5 / 486.7 (235b; Triton 575.5); the 64-row two-chain FC2 at 32-token
# blocks 148.8 / 141.3; at 16-token blocks (FC2 127.1 / 133.4) and 64-token blocks (FC1 179.6 / 187.6) slower. Layer
# probes (us, tile / "_nov" / tile): SwiGLU 8-16 pairs per expert (``m32l4_sx4p_m_t16_gg_s2_gt_n64_c2``) 30b 160
# tokens 205.8 / 204.4 / 204.7, 192 206.4 / 205.8 / 208.3, 256 223.8 / 211.3 / 224.6, 235b 192 733.9 / 720.0 / 742.1,
# 256 813.0 / 769.3 / 797.4; 16-28 (``m32l4_sx4p_m_gg_s2``, until now opt-in: the Triton ``m32l4_sx4p_m_s2`` was the
# default) 30b 384 tokens 255.6 / 229.1, Triton 263.2. Squared ReLU (FC2 only; ``m32k_sx4p_f4_t16_g_s2_gt_n64_c2``)
# mixed, not taken: 30b 160 / 192 / 256 tokens 269.3 / 269.4 / 271.6, 276.5 / 274.3 / 276.5, 290.5 / 283.5 / 288.6,
# 235b 192 991.8 / 990.8 / 1022.7, 256 1048.8 / 1097.4 / 1044.7; 384 tokens (``m32k_sx4p_f4_g_s2_n64_c2``) 306.2 /
# 305.9 / 312.3.
def _no_overlap(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with its main tile's Gluon FC1 / FC2 run without the step overlap (the tail unchanged)."""
    return dataclasses.replace(cfg, fc1_overlap=not cfg.fc1_gluon, fc2_overlap=not cfg.fc2_gluon)


TILES.update({f"{name}_nov": _no_overlap(TILES[name]) for name in (
    "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", "m32l4_sx4p_m_gg_s2")})
# ... and "_f1q": the squared-ReLU 16- / 32-token tiles with the Gluon FC1 on 128 rows (4 warps, two m64 chains, 3
# stages; the main tile only) without the overlap, in place of the Triton FC1 (256-deep K). Layer probes (run 31 call
# 4, us, tile / "_f1q" / tile): 30b 64 tokens 252.6 / 242.3 / 249.8, 256 tokens 288.0 / 273.3 / 284.9; 235b 256
# tokens 1015.2 / 1025.6 / 1036.5; with 64 FC1 rows 244.9 (30b 64), 280.6 (30b 256), 1039.9 (235b 256); 128 rows with
# the overlap 282.3 (30b 256).
TILES.update({f"{name}_f1q": dataclasses.replace(TILES[name], **_GLUON_SQ_FC1_TILE, fc1_overlap=False) for name in (
    "s16k_sx4p_f4_g_s2_n64_c2_st4", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2")})
# Session 29: "_sw", the tiles above with ``scale_words`` on every launch tile that runs a Gluon FC (main and tail):
# a row's 4 E8M0 bytes of a 128-deep K step read as one int32, the same factors, so the same bits (GPU tests
# ``test_scale_words_*``, run 32 call 1: choose_config's Gluon picks at 64 / 256 / 384 / 640 tokens (30b) and 200
# (235b), both activations, and with E8M0 bytes > 134). Kernel probes (run 32 call 1, us, per-byte / words): gated FC1
# at 32-token blocks 132.9 / 127.0 (30b), 477.4 / 457.2 (235b); squared-ReLU FC1 on 128 rows 133.0 / 125.3; FC2 (30b)
# 64 rows two chains without the overlap 137.4 / 133.2, 128 rows at 64-token blocks 174.7 / 166.1. Layer probes (call
# 2, 30b, us, tile / main tile with words / tile): SwiGLU 64 tokens 191.8 / 189.2 / 191.6, 256 211.7 / 208.2 / 212.2,
# 384 230.8 / 222.1 / 233.8; squared ReLU 64 248.1 / 236.2 / 247.5, 256 279.8 / 285.7 / 283.5 (the one loss); 235b 256
# tokens squared ReLU 1059.8 / 1039.2 / 1102.1. The FC2 ring loop (``fc2_ring``) gained nothing in the layer: SwiGLU
# 256 tokens 211.9 (ring) and 208.4 (ring and words), 384 233.2 / 223.0; it stays opt-in.
def _word_scaled(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``scale_words`` on each launch tile (main, tail) that runs a Gluon FC."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, scale_words=True)
                            if tile.fc1_gluon or tile.fc2_gluon else tile)


# Triton tile -> its Gluon twin, picked where H and I tile by 128 and GLUON_ENV allows it (``_tile``). Session 21
# (run 24, bench/gluon_tail_race_probe.py, 150 fresh inputs per case bit-compared with the Triton form): every tile
# with a 64-token Gluon kernel wrote one FC2 CTA's outputs (128 columns of every token of one block) as NaN in 3-5%
# of calls: gated 512 / 640 / 1024 tokens 7 / 7 / 7 of 150 (1024 also on one stream),
# squared ReLU 512 / 640 5 / 6 of 150, the 128-token tiles with Gluon 64-token tails 1-3 of 30, a fence after the
# mbarrier init changed nothing; their Triton forms 0 of 150 (gated 640 / 1024, squared ReLU 640). The 64-token
# Gluon tiles were therefore taken out of the package (``_GLUON_BASES``). The 16- / 32-token ones (64 and 256 tokens: 0 of
# 150 each) stay behind the switch. The SASS of those kernels shows the likely cause in every configuration: the next
# step's dequant overwrote the registers that the previous step's in-flight register-A wgmmas still read. Session 21
# rewrote both Gluon kernels with two register sets (the CPU compile test checks the SASS). Session 22 (run 25): that
# form passed the race probe (0 of 300 calls in 9 cases) and the Gluon GPU tests, and the 64-token twins came back
# (above). Session 23 (run 26): choose_config's picks at 512 / 640 / 1024 tokens kept the bits of their Triton forms
# (GPU tests, 40 fresh calls at 640), the race probe found 0 of 300 bad calls at 512 / 640 on both activations, and
# they are faster (run 25, us per layer, Triton / Gluon, 30b / 235b: 640 tokens SwiGLU 353.6 / 300.3, 1234.5 /
# 1109.4, squared ReLU 454.4 / 410.0, 1654.3 / 1556.9; 1024 tokens 1-5%; run 26's full benchmark at 1024 tokens
# SwiGLU 396.9 / 1429.8, squared ReLU 503.5 / 1890.8 against run 24's Triton 410.6 / 1504.0, 530.9 / 2015.6): they
# are on by default (``_GLUON_BY_DEFAULT``), as are the 16-token twins with 64-row FC2 programs (below). The 32-token
# twins gained nothing (run 25) until session 26's two-chain FC2 ("_c2", above): since then the 16- and 32-token
# twins sum their FC2 on two chains (not the Triton forms' bits: ``same_bits_as_triton_form``), and the 32-token ones
# are defaults too, except the gated tile without tails (16-28 pairs per expert), opt-in until session 28 took its
# form without the step overlap ("_nov"); the gated 8-16 tile is "_nov" too since then. Since session 29 every twin
# reads its scales as words ("_sw", below).
_GLUON_TWINS = {
    "s16k4_sx4p_m3_s2": "s16k4_sx4p_m3_g_s2_n64_c2_st4",
    "s16k_sx4_f4": "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q",
    "m32l4_sx4p_m_t16_s2": "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov",
    "m32k_sx4p_f4_t16_s2": "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q",
    "m32l4_sx4p_m_s2": "m32l4_sx4p_m_gg_s2_nov",
    "m32k_sx4p_f4_s2": "m32k_sx4p_f4_g_s2_n64_c2",
    "l64_sx4p_mu_t32_s2": "l64_sx4p_mu_t32_gg_s2_gt",
    "l64k2_sx4p_f4_t32_s2": "l64k2_sx4p_f4_t32_gq_s2_gt",
    "l64_sx4p_mu_s2": "l64_sx4p_mu_gg_s2",
    "l64k2_sx4p_f4_s2": "l64k2_sx4p_f4_gq_s2",
    "l128m_sa_t64pu_s2": "l128m_sa_t64pu_s2_gt",
    "l128w_sa_t64p2_s2": "l128w_sa_t64p2_s2_gt",
}
TILES.update({f"{twin}_sw": _word_scaled(TILES[twin]) for twin in _GLUON_TWINS.values()})
_GLUON_TWINS = {name: f"{twin}_sw" for name, twin in _GLUON_TWINS.items()}


def _one_factored(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc1_one_factor`` / ``fc2_one_factor`` on each Gluon FC of each launch tile that reads its E8M0
    factors as scale words (not an f8x2 FC1, nor the all-f8x2 tiles: their products carry the scales)."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(
        tile, fc1_one_factor=tile.fc1_gluon and tile.scale_words and not tile.fc1_f8x2,
        fc2_one_factor=tile.fc2_gluon and tile.scale_words))


# Session 29 (run 33: bit-equal, no layer gain; tools/gpu_next.sh s30a): "_of", the default twins with one scale factor
# in every program whose E8M0 bytes are all below 128 (``fc1_one_factor`` / ``fc2_one_factor``; the same bits)
TILES.update({f"{twin}_of": _one_factored(TILES[twin]) for twin in _GLUON_TWINS.values()})
# ... the squared-ReLU "_f1q" FC1 (128 rows, no overlap) under a 128-register cap: 4 programs per SM as without one
# factor (ptxas -v, Triton 3.6, 32-token blocks: 159 registers uncapped; capped 128 and no spills, one iteration 925
# instructions against 1151 with scale words)
for _twin in ("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw"):
    TILES[f"{_twin}_of"] = dataclasses.replace(TILES[f"{_twin}_of"], fc1_maxnreg=128)


def _dependent_launched(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc2_pdl`` on each launch tile whose FC2 is the Gluon FC2 of the plane tiles (dequant "sx4"; not
    the all-f8x2 tiles)."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(
        tile, fc2_pdl=tile.fc2_gluon and tile.dequant == "sx4"))


# Session 30 (run 33: bit-equal, no layer gain; tools/gpu_next.sh s30c): "_pdl", the default twins with each Gluon FC2 a
# programmatic dependent launch of its FC1 (``fc2_pdl``; the same bits)
TILES.update({f"{twin}_pdl": _dependent_launched(TILES[twin]) for twin in _GLUON_TWINS.values()})

# Session 39 (first run in session 40, run 43: tools/gpu_next.sh s40a-s40f): the MMA-bound defaults (72+ pairs per
# expert) with the warp-specialized FC2 (``fc2_ws``) on their main tile, "_ws"; FC1s and tails unchanged
TILES.update({f"{name}_ws": dataclasses.replace(TILES[name], fc2_ws=True)
              for name in ("x256w_sa_t32a", "x256m_sa_t32", "l128w_sa_t32a_s2", "l128m_sa_t32_s2")})
# and for squared ReLU (ungated) the warp-specialized FC1 (``fc1_ws``) alone, "_ws1", and both FCs, "_wsb"
TILES.update({f"{name}_{suffix}": dataclasses.replace(TILES[name], fc1_ws=True, fc2_ws=suffix == "wsb")
              for name in ("x256w_sa_t32a", "l128w_sa_t32a_s2") for suffix in ("ws1", "wsb")})
# and "_wsb_k32": both at 32-deep K steps in 4 stages (a second point for the first GPU probes: half the shared memory
# per stage, twice the handoffs)
TILES["x256w_sa_t32a_wsb_k32"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb"], fc1_block_k=32, fc1_stages=4,
                                                     fc2_block_k=32, fc2_stages=4)
# Session 40 (run 43 call 2: the "_ws" / "_wsb" tiles correct but no faster at 4096 tokens): "_s4", their rings at 4
# stages (224 KiB of shared memory at 256 tokens with the weight ring at 8: ``ws_shared_bytes``): more copies in flight
TILES["x256w_sa_t32a_ws_s4"] = dataclasses.replace(TILES["x256w_sa_t32a_ws"], fc2_stages=4)
TILES["x256w_sa_t32a_wsb_s4"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb"], fc1_stages=4, fc2_stages=4)
# Session 40 (run 43 call 5, one H100, the weight ring split from the token ring, squared ReLU, 4096 tokens, us per
# layer, the default / "_wsb_s4" per pair of runs): 235b 4938.2 / 4565.7 and 5010.1 / 4580.4 (7.5-8.6% faster), 30b
# 1331.8 / 1312.8 and 1328.7 / 1334.8 (a tie); "_ws" (FC2 only) 3.3-4.6% / 1.6-2.3% faster; SwiGLU "_ws" 0-5% slower.
# So from 176 pairs per expert the squared-ReLU pick is "_wsb_s4" where H and I tile by 128 (``GLUON_ENV`` as for the
# Gluon twins; not in ``_GLUON_TWINS``: its bits are not the Triton tile's, it is held to the float64 oracle).
# Session 42 (run 45, one H100, 4096 tokens, us per layer, two rounds in one call): the persistent ws FCs ("_p", one
# program per SM over the tiles) against the defaults: squared ReLU "_wsb_p" 4121.5 / 4310.3 against "_wsb_s4" 4421.4 /
# 4456.3 on 235b (-5.0%), 1152.7 / 1182.5 against 1286.1 / 1287.4 on 30b (-9.3%); SwiGLU "x256m_sa_t32_ws_p" (FC2 only)
# 3555.8 / 3616.2 against 3703.8 / 3859.8 (-5.2%) and 1002.0 / 1016.4 against 1041.4 / 1040.4 (-3.0%). So from 176 pairs
# per expert both activations take them.
# Session 43 (run 46, one H100, SwiGLU, us per layer, two rounds in one call): the gated ws FC1 too ("_wsb_p") against
# the FC2-only "_ws_p": 4096 tokens 3245.1 / 3278.8 against 3525.8 / 3600.8 on 235b (-8.5%), 935.4 / 928.3 against
# 998.2 / 999.9 on 30b (-6.7%); 2816 tokens (176 pairs per expert) 2625.2 / 2637.0 against 2900.4 / 2934.4 (-9.8%),
# 748.4 / 746.9 against 824.5 / 823.1 (-9.2%), where the 128-token default "l128m_sa_t32_s2" took 3282.9 / 881.3. At
# 2048 tokens "l128m_sa_t32_s2" stays faster (2397.2 / 638.9 against 2494.5 / 734.2), so the threshold stays.
_WS_TWINS = {"x256w_sa_t32a": "x256w_sa_t32a_wsb_p", "x256m_sa_t32": "x256m_sa_t32_wsb_p"}
# and "_sx" (session 40): the producers' dequant by moving bits (``ws_sx``), on the default and on the FC2-only tile of
# both activations. Run 44 (H100, 4096 tokens): correct (GPU tests passed) but slower, squared ReLU +7.4-7.8% against
# "_wsb_s4", SwiGLU +2-3% against "_ws" (likely: the producer is not the limit, and the scan before the first step
# adds to each program's start). Opt-in only.
TILES.update({f"{name}_sx": dataclasses.replace(TILES[name], ws_sx=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256w_sa_t32a_ws_s4", "x256m_sa_t32_ws")})
# and "_ta" (session 41, prepared, compile-checked only; tools/gpu_next.sh s42c): the consumers' stage release by one
# arrival per thread (``ws_thread_arrive``), on the squared-ReLU default and on SwiGLU's FC2-only tile
TILES.update({f"{name}_ta": dataclasses.replace(TILES[name], ws_thread_arrive=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256m_sa_t32_ws")})
# and "_se" (session 41, prepared, compile-checked only; s42c): the epilogue tile staged whole in shared memory
# (``ws_staged_epilogue``), on the same two tiles, and "_ta_se" with both
TILES.update({f"{name}_se": dataclasses.replace(TILES[name], ws_staged_epilogue=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256m_sa_t32_ws")})
TILES["x256w_sa_t32a_wsb_s4_ta_se"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4_ta"], ws_staged_epilogue=True)
# and "_p" (session 41, prepared, compile-checked only; s42c): the persistent ws FCs (``ws_persistent``) at 3 token
# stages (the 4-stage rings leave no room for the epilogue's scratch), on both activations' ws tiles; "_p_ta" with the
# per-thread stage release
TILES.update({f"{name}_p": dataclasses.replace(TILES[name], ws_persistent=True)
              for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws")})
TILES["x256w_sa_t32a_wsb_p_ta"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_p"], ws_thread_arrive=True)
# and "_d3" (session 42, prepared, compile-checked only; s42e): 3 bf16 weight stages (``ws_dstages``), so the producer
# may run two steps ahead of the consumers' MMA; the 4-stage default keeps its 224 KiB with 6 fp8 weight stages, the
# 3-stage tiles take 6 as before (192 KiB)
TILES["x256w_sa_t32a_wsb_s4_d3"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_dstages=3, ws_wstages=6)
TILES.update({f"{name}_d3": dataclasses.replace(TILES[name], ws_dstages=3)
              for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws")})
# and SwiGLU's "_wsb" / "_wsb_p" (session 43; run 46: float64 and graph tests passed, "_wsb_p" the SwiGLU default
# from 176 pairs per expert, ``_WS_TWINS``): the gated warp-specialized FC1 too (``fc1_ws`` with ``fc1_block_n`` 64:
# each tile's 64 gate rows and their 64 up rows, the producer's bf16 rows interleaved so that one consumer thread holds
# both halves of an output), beside the ws FC2
TILES["x256m_sa_t32_wsb"] = dataclasses.replace(TILES["x256m_sa_t32_ws"], fc1_ws=True, fc1_gate_merge=False)
TILES["x256m_sa_t32_wsb_p"] = dataclasses.replace(TILES["x256m_sa_t32_wsb"], ws_persistent=True)
# and "_p_s4" (session 43, prepared, compile-checked only; tools/gpu_next.sh s44b): the persistent defaults at 4 token
# stages, which fit beside the epilogue's scratch with 6 fp8 weight stages (216 KiB by ``ws_shared_bytes``, 212 KiB
# compiled); one-tile 4 against 3 stages was a tie in run 45
TILES.update({f"{name}_s4": dataclasses.replace(TILES[name], fc1_stages=4, fc2_stages=4, ws_wstages=6)
              for name in ("x256w_sa_t32a_wsb_p", "x256m_sa_t32_wsb_p")})
# Run 47 (session 44, one H100): "_p_s4" against the 3-stage defaults at 4096 tokens, two rounds: squared ReLU 235b
# 4150.9 / 4266.7 against 4099.5 / 4204.4 (+1.3%), 30b 1155.1 / 1173.8 against 1159.4 / 1158.5; SwiGLU 235b 3276.5 /
# 3329.1 against 3267.3 / 3286.5, 30b 933.9 / 943.7 against 935.8 / 959.5 (a tie). Their bit tests passed. Not adopted.
# Session 44: "_pf", the persistent defaults with ``ws_prefetch`` (each tile's last steps issue the next tile's first
# copies), and the persistent ws FCs on decode-sized token blocks ("w16_wsb_pf" ...: squared ReLU, "m16_wsb_pf" ...:
# SwiGLU; 16 / 32 / 64 tokens, no tail, 4 token stages, 12 fp8 weight stages): at 16-256 tokens the layer streams
# weights and each program's tiles are short (30b squared ReLU FC1: 32 steps of 8 KiB), so a deep ring that runs on
# across tiles, with the dequant off the MMA warps, might keep more bytes in flight than the Gluon decode kernels
# (78-86% of the read roofline at 64 tokens). Run 47 call 3 (one H100; 12 GPU tests passed: the same bits with and
# without the prefetch, float64, graph replays), us per layer: the decode tiles 1.8-1.9x the defaults' time at 16 / 64
# tokens (30b squared ReLU at 16 tokens 353.2 against 196.4, without the prefetch 373.9; 235b 1301.1 against 720.3),
# 1.6-1.8x at 256 on 32-token blocks; "_pf" at 4096 tokens -0.4% to +1.8% against the persistent defaults. Opt-in.
TILES.update({f"{name}_pf": dataclasses.replace(TILES[name], ws_prefetch=True)
              for name in ("x256w_sa_t32a_wsb_p", "x256m_sa_t32_wsb_p")})
TILES.update({f"{act}{block_t}_wsb_pf": dataclasses.replace(
    TILES[f"{base}_pf"], block_t=block_t, tail=None, fc1_stages=4, fc2_stages=4, ws_wstages=12)
    for act, base in (("w", "x256w_sa_t32a_wsb_p"), ("m", "x256m_sa_t32_wsb_p")) for block_t in (16, 32, 64)})
# Run 47 call 4 (one H100, 30b squared ReLU, us per layer at 16 / 64 tokens; the default 196.8 / 293.6): "w16_wsb_pf"
# 363.7 / 547.5; with 4 bf16 stages 355.2 / 528.4; with 8 producer warps and one consumer warpgroup (a
# ``ws_producer_warps`` field, since removed) 379.8 / 569.0, both 373.9 / 557.4. So neither the producer's dequant nor
# its 2-stage handoff held the decode ws tiles to half the HBM rate. bench/results/run47/decode_ws_forms.patch restores
# these forms.


def _f8x2_fc1(tile: TritonMoEConfig, **changes) -> TritonMoEConfig:
    """``tile`` (a plane tile) with the Gluon f8x2 FC1 (``fc1_f8x2``; 128 rows, 3 stages unless ``changes`` say
    otherwise: gated tiles take ``fc1_block_n=64``, 64 gate rows and their 64 up rows)."""
    return dataclasses.replace(tile, **{**_GLUON_SQ_FC1_TILE, **changes}, fc1_f8x2=True)


# Session 32: the squared-ReLU default twins with the Gluon f8x2 FC1 (``fc1_f8x2``) in place of the dequantizing Gluon
# FC1, their FC2 unchanged. Run 35 call 1 (the "_g1" f8x2 tiles, 30b, 64 tokens, per-kernel profile): the f8x2 FC1
# took 104.8 us against the dequantizing "_f1q" FC1's 111.3, but the f8x2 FC2 136.6 against 118.1. "_f1x": on the main
# tile; "_f1x64": 64 rows in 4 stages; "_f1xt": on the 16-token tail only; "_f1xa": on both.
_SQ_TWIN16, _SQ_TWIN32 = "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw"
TILES.update({
    f"{_SQ_TWIN16}_f1x": _f8x2_fc1(TILES[_SQ_TWIN16]),
    f"{_SQ_TWIN16}_f1x64": _f8x2_fc1(TILES[_SQ_TWIN16], fc1_block_n=64, fc1_stages=4),
    f"{_SQ_TWIN32}_f1x": _f8x2_fc1(TILES[_SQ_TWIN32]),
    f"{_SQ_TWIN32}_f1x64": _f8x2_fc1(TILES[_SQ_TWIN32], fc1_block_n=64, fc1_stages=4),
    f"{_SQ_TWIN32}_f1xt": dataclasses.replace(TILES[_SQ_TWIN32], tail=_f8x2_fc1(TILES[_SQ_TWIN32].tail)),
    f"{_SQ_TWIN32}_f1xa": map_launch_tiles(TILES[_SQ_TWIN32], _f8x2_fc1),
})
# Run 35 call 2 (layer probes alternating with the "_sw" twin, us, twin / f8x2 FC1 per pair of runs; the GPU tests of
# all 5 passed: float64 oracle at 64 / 256 tokens (30b) and 64 (235b), graph replays, the gated refusal): "_f1x" at 64
# tokens 30b 238.9 / 233.2 and 240.2 / 235.7, 235b 908.8 / 884.3 and 925.3 / 953.8, at 128 tokens (30b) 249.3 / 248.1
# and 250.2 / 249.0 ("_f1x64" slower: 242.6 / 245.2, 944.6 / 948.8); "_f1xt" at 256 tokens 30b 271.1 / 266.8 and
# 276.1 / 267.6, 235b 1043.0 / 1015.2 and 1080.0 / 1053.3 ("_f1x" on the 32-token main tile slower: 277.5 / 282.6,
# 1084.5 / 1111.0; "_f1xa" 272.5 / 270.6, 1060.0 / 1075.0). Per-kernel profile (30b): at 64 tokens FC1 111.3 -> 105.4
# us (FC2 117.8 / 119.1); at 256 tokens the f8x2 FC1 at 32-token blocks took 76.1 us against the dequantizing 63.4.
# Since session 32 the squared-ReLU twins of 1.5-8 and 8-16 pairs per expert (``_GLUON_TWINS``).
_GLUON_TWINS.update({"s16k_sx4_f4": f"{_SQ_TWIN16}_f1x", "m32k_sx4p_f4_t16_s2": f"{_SQ_TWIN32}_f1xt"})
# ... and the gated twins with the gated Gluon f8x2 FC1 (session 32: 64 gate rows and their up rows per program, two
# TMA boxes per stage, 126 registers at 16-token blocks with Triton 3.6): "_f1x" on the 16-token tile, "_f1xt" on the
# 32-token tile's 16-token tail, "_f1xa" on both (252 registers at 32-token blocks)
_GW16, _GW32 = "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw", "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw"
TILES.update({
    f"{_GW16}_f1x": _f8x2_fc1(TILES[_GW16], fc1_block_n=64),
    f"{_GW32}_f1xt": dataclasses.replace(TILES[_GW32], tail=_f8x2_fc1(TILES[_GW32].tail, fc1_block_n=64)),
    f"{_GW32}_f1xa": map_launch_tiles(TILES[_GW32], lambda tile: _f8x2_fc1(tile, fc1_block_n=64)),
})
# Run 36 call 2 (tools/gpu_next.sh s33b; the 13 GPU tests passed: float64 oracle, graph replays, the 128-row refusal):
# layer probes alternating with the twin, us, twin / f8x2 FC1 per pair of runs: "_f1x" at 64 tokens 30b 190.4 / 181.5
# and 189.2 / 180.2, 235b 652.4 / 622.1 and 655.7 / 668.7; "_f1xt" at 256 tokens 30b 203.0 / 198.6 and 203.4 / 197.6,
# 235b 728.3 / 707.5 and 760.7 / 712.1 ("_f1xa" slower: 210.3 / 210.5, 758.8 / 786.5). Per-kernel profile (30b, 64
# tokens): the Triton gated FC1 114.9 us, the gated Gluon f8x2 FC1 103.4 (FC2 63.3 / 63.7). Since session 33 the gated
# twins of 1.5-8 and 8-16 pairs per expert.
_GLUON_TWINS.update({"s16k4_sx4p_m3_s2": f"{_GW16}_f1x", "m32l4_sx4p_m_t16_s2": f"{_GW32}_f1xt"})
# Session 35 (prepared, compile-checked only; tools/gpu_next.sh s36a): "_g128", one token scale per 128-value step
# (``step_scales``) on the f8x2 FC1 of the default twins (both activations; the 32-token twins' 16-token tails) and
# on both FCs of "_f128_st"
TILES.update({f"{name}_g128": map_launch_tiles(
    TILES[name], lambda tile: dataclasses.replace(tile, step_scales=_reads_x_split(tile)))
    for name in (f"{_SQ_TWIN16}_f1x", f"{_GW16}_f1x", f"{_SQ_TWIN32}_f1xt", f"{_GW32}_f1xt",
                 "s16_f8q_s2_gf_g1_f128_st")})
# Session 47: "_eg2", the 16-token picks (1-8 pairs per expert: the Triton tiles, their Gluon twins and "_f128_st") with
# their experts in two groups, each with its own route and launch pair on its own stream (``expert_groups``; the same
# bits). Run 50 (H100): 1.0-5.6% faster at 16 / 64 tokens; ``choose_config`` picks them (triton_policy.py).
GROUPED_SUFFIX = "_eg2"
TILES.update({f"{name}{GROUPED_SUFFIX}": dataclasses.replace(TILES[name], expert_groups=2)
              for base in ("s16k4_sx4p_m3_s2", "s16k_sx4_f4")
              for name in (base, _GLUON_TWINS[base])})
TILES[f"s16_f8q_s2_gf_g1_f128_st{GROUPED_SUFFIX}"] = dataclasses.replace(TILES["s16_f8q_s2_gf_g1_f128_st"],
                                                                         expert_groups=2)
