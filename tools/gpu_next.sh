#!/usr/bin/env bash
# GPU steps (run each with timeout_s=600; carry .whl). For the next session:
#   bash tools/gpu_next.sh s54b     # session 51, later tries (ask for an H200): on an H200 only, the full benchmark, the
#                                   # demo, copy ceilings, quantize and refit benchmarks (about 9 minutes)
#   bash tools/gpu_next.sh s54a     # session 51 (ask for an H200): copy ceilings by method, the quantize benchmark; on
#                                   # an H200 then the full benchmark, the demo and the refit benchmark (about 9 minutes)
#   bash tools/gpu_next.sh s53b     # session 50, last try (about 4.5 minutes): s53a's copy ceilings, then on an H200
#                                   # the benchmark at 16 / 64 / 256 tokens only, elsewhere the refit benchmark
#   bash tools/gpu_next.sh s53a     # session 50 (ask for an H200, about 4 minutes there): the full benchmark and the
#                                   # demo on an H200 only; on any other card (about 3 minutes) the refit benchmark and
#                                   # the squared-ReLU rows at 16-256 tokens again (the spread of run 53's misses)
#   bash tools/gpu_next.sh s49a     # session 50, run 53 call 1 (an H100; ask for an H200, about 8 minutes): the full benchmark and the demo
#                                   # with the "_eg2" defaults, then the GPU tests session 49 reordered (configs first)
#   bash tools/gpu_next.sh s48c     # for session 49 (ask for an H200): the full benchmark and the demo with the "_eg2"
#                                   # defaults, the six test functions fixed after run 51 call 1, then the 16 functions
#                                   # of part 1/3 of one case per test function that run 50 did not reach
#   bash tools/gpu_next.sh s48d     # for session 49: the tests of s48c and the demo, without the benchmark (any Hopper card)
#   bash tools/gpu_next.sh s48a     # for session 48 (ask for an H200): the full benchmark and the demo with the
#                                   # "_eg2" defaults (two expert groups at 1-8 pairs per expert: run 50 timed them on an
#                                   # H100 only), then the expert-group tests with tail tiles (256 tokens, odd shapes)
#   bash tools/gpu_next.sh s48b     # then (any Hopper card): expert groups with tails at 128-512 tokens against one
#                                   # group (bench/expert_groups_probe.py), one case per test function, parts 2-3
#   bash tools/gpu_next.sh s47a     # session 47 (ask for an H200): expert_groups (the experts in groups on concurrent
#                                   # streams): GPU tests, probes against one call (bench/expert_groups_probe.py), then
#                                   # the first third of "one case per test function" (tools/one_case_each.py)
#   bash tools/gpu_next.sh s47b     # session 47 (any Hopper card): the other two thirds of that list
#   bash tools/gpu_next.sh s46a     # for session 47 (any Hopper card): the Gluon GPU tests other than graph replays
#                                   # (run 49 passed the first 27 in collection order before its time limit), more of
#                                   # the suite on session 45's split host modules
#   bash tools/gpu_next.sh s44a     # session 46, run 49 call 1 (H200): the full benchmark and the demo with the
#                                   # current defaults, then the default tests
#   bash tools/gpu_next.sh s45b     # session 46, run 49 call 2 (H200): 42 GPU tests on session 45's split of the host
#                                   # module (second stream, graph replays of the other paths)
#   bash tools/gpu_next.sh s45a     # for session 45: the decode ws tiles with 4 bf16 stages / 8 producer warps: bit
#                                   # tests, probes at 16-256 tokens against the defaults
#   bash tools/gpu_next.sh s44c     # session 44: "_pf" (ws_prefetch: the persistent ws copies run on across tiles) and
#                                   # the decode-sized persistent ws tiles: bit tests, probes at 16-256 and 4096 tokens
#   bash tools/gpu_next.sh s44b     # for session 44: the persistent defaults at 4 token stages ("_p_s4", prepared in
#                                   # session 43): their bit tests, then probes at 4096 against the defaults
#   bash tools/gpu_next.sh s43b     # session 43: SwiGLU's gated ws FC1 ("x256m_sa_t32_wsb" / "_wsb_p"): its GPU
#                                   # tests (float64, persistent = one-tile bits, graph replay), then SwiGLU probes
#                                   # at 4096 tokens against the default ("x256m_sa_t32_ws_p")
#   bash tools/gpu_next.sh s43c     # session 43: the persistent ws FCs on the 128-token tiles at 2048 tokens
#                                   # (both activations, 3 and 4 stages) against the defaults
#   bash tools/gpu_next.sh s43a     # for session 43: the full benchmark and the demo with the persistent ws FCs as the
#                                   # default from 176 pairs per expert (session 42, run 45: H100 only; ask for an
#                                   # H200), then the ws defaults' GPU tests (float64, graph replay, fallback)
#   bash tools/gpu_next.sh s42a     # for session 42: the full benchmark and the demo with the ws default and its
#                                   # 16-byte epilogue stores (run 44 ran them on H100s only: ask for an H200), then
#                                   # the ws default's GPU tests
#   bash tools/gpu_next.sh s42e     # s42c's tests on 30b and s42d's squared-ReLU probes in one call (machines scarce),
#                                   # with session 42's "_d3" (3 bf16 weight stages) too
#   bash tools/gpu_next.sh s42c     # "_ta" / "_se" / "_p" (ws_thread_arrive, ws_staged_epilogue, ws_persistent):
#                                   # their GPU tests (the bits of the tile without them)
#   bash tools/gpu_next.sh s42d     # then their probes at 4096 against the defaults
#   bash tools/gpu_next.sh s42b     # then ncu's source page of the ws FC2 (stall samples per SASS instruction)
#   bash tools/gpu_next.sh s41d     # session 41, calls 4-5: A/B of the ws kernel file (epilogue stores), then 4096
#   bash tools/gpu_next.sh s41c     # session 41, call 2: the full benchmark and the demo
#   bash tools/gpu_next.sh s41a     # session 41, call 1: the full benchmark (out of memory on the H100), the demo,
#                                   # "_sx" (ws_sx) smoke cases and probes at 4096
#   bash tools/gpu_next.sh s41b     # session 41, call 3: the rest of the ws GPU tests, "_sx" included
#   bash tools/gpu_next.sh s25g     # session 25, call 8: s25f's refit benchmark and timeline again (call 7's host was slow)
#   bash tools/gpu_next.sh s25f     # session 25, call 7: one pointer + slot table per table launch: refit GPU tests,
#                                   # refit benchmark, timeline
#   bash tools/gpu_next.sh s25e     # session 25, call 6: cProfile of the layer's refits on the GPU host
#   bash tools/gpu_next.sh s25d     # session 25, call 5: bench/refit_timeline.py (where a refit's host time goes)
#   bash tools/gpu_next.sh s25c     # session 25, call 3: the same refit tests and benchmark after the cheaper flag check
#   bash tools/gpu_next.sh s25b     # session 25, call 2: refit nonfinite="detect" (GPU tests, refit benchmark); the
#                                   # Triton f8x2 tests s25a did not reach
#   bash tools/gpu_next.sh s37e     # session 37, call 5: the route from several programs up to 8192 pairs: route
#                                   # tests, graph replays, profiles and layer probes at 256-1024 tokens
#   bash tools/gpu_next.sh s37d     # session 37, call 4: route_parallel the default: route tests, graph replays, the
#                                   # profile at 16 tokens, full benchmark and demo
#   bash tools/gpu_next.sh s37c     # session 37, call 3: the route from several programs (route_parallel, same
#                                   # tables): route tests, graph replays, layer probes at 8-128 tokens, profiles
#   bash tools/gpu_next.sh s37a     # session 37, call 1: "_sp" (the all-f8x2 tile's FC1 rows split at the pairs'
#                                   # positions only; removed after it): bit tests, layer probes, profile, split launch
#   bash tools/gpu_next.sh s37b     # session 37, call 2: the H >= 4096 squared-ReLU pick on other shapes
#                                   # (H 3072, 7168, Mixtral-like), q1 against it at 12-15 tokens
#   bash tools/gpu_next.sh s36e     # session 36, call 6: q1 against "_f128_st" at 8-14 tokens on 235b (squared ReLU)
#   bash tools/gpu_next.sh s36d     # session 36, call 4: the race probe of that pick on 235b (16 / 64 / 128 tokens)
#   bash tools/gpu_next.sh s36c     # session 36, call 3: the squared-ReLU pick "_f128_st" from H 4096: the full
#                                   # benchmark, the demo, its graph replays and the 235b f8x2 tests
#   bash tools/gpu_next.sh s36a     # for session 36 (run first): "_g128" (one token scale per 128-value step): float64
#                                   # GPU tests, layer probes against the defaults (30b both activations, 235b), profile
#   bash tools/gpu_next.sh s36b     # for session 36, after s36a: "_f128_st" against the squared-ReLU default at 16-128
#                                   # tokens on both shapes (is it the pick on large H?), its float64 GPU tests
#   bash tools/gpu_next.sh s35c     # session 35, call 3: "_st" on FC2's split rows only: the all-f8x2 tiles against the
#                                   # squared-ReLU default (probes, profile), graph replays
#   bash tools/gpu_next.sh s35b     # session 35, call 2: the split rows' scales transposed ("_st"): profiles, layer probes
#                                   # of the defaults with / without it (64 / 256 tokens), 235b, the "_st" GPU tests
#   bash tools/gpu_next.sh s35a     # for session 35 (run first): the f8x2 FC1's time with parts left out against the FC2's
#                                   # (compute alone), the FC2 with its token scales from one row and on 8 warps
#                                   # ("_f128w8": tests, layer probes); the tests left over from run 37
#   bash tools/gpu_next.sh s34d     # session 34, call 4: the f8x2 FC2 with its weight / split-row copies or its store
#                                   # left out (timing only): where its DRAM throughput goes
#   bash tools/gpu_next.sh s34c     # session 34, call 3: the full benchmark and demo with the twins from 16 tokens
#   bash tools/gpu_next.sh s34b     # session 34, call 2: q1 against the 16-token f8x2 twins at 10-14 tokens; the twins'
#                                   # tests at 16 / 24 tokens (the new defaults there), graph replays
#   bash tools/gpu_next.sh s34a     # for session 34 (run first): the squared-ReLU layer with H and I traded (--dims), the
#                                   # per-kernel profile and layer probes: is the FC2s' slower streaming the shape's?
#                                   # Then the GEMV "q1" against the 16-token f8x2 twins at 8-24 tokens (both shapes)
#   bash tools/gpu_next.sh s33e     # session 33, call 5: the f8x2 FC2 on 2 / 4 tiles per program ("_nt2" / "_nt4"):
#                                   # layer probes at 64 tokens (30b, 235b), profile, bit tests
#   bash tools/gpu_next.sh s33d     # session 33, call 4: ncu of the squared-ReLU default's FC1 / FC2 and of the f8x2 FC2
#                                   # on 128 rows at 64 tokens (why FC2 streams slower on the same bytes)
#   bash tools/gpu_next.sh s33c     # session 33, call 3: the new SwiGLU defaults ("_f1x" / "_f1xt", the gated f8x2 FC1):
#                                   # the full benchmark, the demo, the default-tile GPU tests, race probe
#   bash tools/gpu_next.sh s33a     # for session 33 (run first): the all-f8x2 16-token tile with its FC2 on 128 rows
#                                   # ("_g1_f128" / "_f128s4"), its FC1 writing the split rows ("_fs"), the 32-token f8x2
#                                   # FC1 on 64 rows: probes, profile, tests
#   bash tools/gpu_next.sh s33b     # for session 33, after s33a: the gated f8x2 FC1 twins ("_f1x" / "_f1xt" / "_f1xa" of
#                                   # the SwiGLU 16- / 32-token defaults): GPU tests first, then layer probes, profile
#   bash tools/gpu_next.sh s32c     # session 32, call 3: the new squared-ReLU defaults ("_f1x" at 1.5-8 pairs per expert,
#                                   # "_f1xt" at 8-16): the full benchmark, the demo, the default-tile GPU tests
#   bash tools/gpu_next.sh s32b     # session 32, call 2: the squared-ReLU defaults with the Gluon f8x2 FC1 ("_f1x*",
#                                   # plane-major rows for their FC2): layer probes, per-kernel profile, GPU tests
#   bash tools/gpu_next.sh s32a     # for session 32 (run first): the squared-ReLU f8x2 tiles with a Gluon FC1 ("_g1" /
#                                   # "_g1n64", no dequant): GPU tests, layer probes, per-kernel profile
#   bash tools/gpu_next.sh s31e     # session 31, call 5: the kernels' TMA rings alone (no dequant, no MMA), GB/s
#   bash tools/gpu_next.sh s31d     # session 31, call 4: the squared-ReLU Gluon FC1 on 8 warps (two warpgroups, one ring)
#   bash tools/gpu_next.sh s31c     # session 31, call 3: HBM streaming of the kernels' weight order against contiguous tiles
#   bash tools/gpu_next.sh s31b     # session 31, call 2: L2 prefetch past the ring (the "_l2a2" / "_l2a4" tiles, same bits):
#                                   # layer probes (30b and 235b), per-kernel profile, bit tests
#   bash tools/gpu_next.sh s31a     # for session 31 (run first): the one-program route with its tables in registers
#                                   # (route_in_registers, same tables): route tests, graph replays, layer probes at
#                                   # 16-128 tokens, the route kernel's time
#   bash tools/gpu_next.sh s30c     # session 30, call 3: each Gluon FC2 a programmatic dependent launch of its FC1 (the
#                                   # "_pdl" tiles, same bits): layer probes, race probe, GPU tests
#   bash tools/gpu_next.sh s30b     # session 30, call 2: where the defaults' time goes now (per-kernel profile at 64 /
#                                   # 256 tokens, ncu of the squared-ReLU kernels at 64 / 256), race probe at 64 tokens,
#                                   # graph replays of the defaults at 384-640 tokens
#   bash tools/gpu_next.sh s30a     # for session 30 (run first): one scale factor where a program's E8M0 bytes are all
#                                   # below 128 (the "_of" tiles; same bits): GPU tests, kernel probes, layer probes
#   bash tools/gpu_next.sh s29d     # session 29, call 3: the "_sw" defaults (scale words): full benchmark, demo, bit
#                                   # tests at 1024 tokens, race probe (squared ReLU 256, gated 384 / 1024)
#   bash tools/gpu_next.sh s29a     # session 29, call 1 (planned as "run first"): the scale words and the FC2 ring loop (scale_words /
#                                   # fc2_ring, same bits): GPU tests, kernel probes, layer probes
#   bash tools/gpu_next.sh s29c     # for session 29, after s29a: layer probes of scale_words / fc2_ring on the defaults
#   bash tools/gpu_next.sh s29b     # for session 29: what session 28 left (race probe of the squared-ReLU "_f1q" default at
#                                   # 256 tokens), FC2 stages without the overlap, the 128-row Gluon FC1 at 16-28 pairs
#   bash tools/gpu_next.sh s28e     # session 28, call 5: the squared-ReLU "_f1q" defaults: GPU tests, race probe, benchmark
#                                   # at 64 / 256 tokens
#   bash tools/gpu_next.sh s28d     # session 28, call 4: squared ReLU with a Gluon FC1 (64 / 128 rows, with and without the
#                                   # overlap) on the 16- and 32-token default tiles (layer probes)
#   bash tools/gpu_next.sh s28c     # session 28, call 3: the full benchmark and the demo of the "_nov" defaults, then
#                                   # their GPU tests, race probe, and layer probes at 16-28 pairs per expert
#   bash tools/gpu_next.sh s28b     # session 28, call 2: the "_nov" defaults at 8-16 pairs per expert: bit tests, graph
#                                   # replays, race probe; layer probes on 235b and at 160 / 384 tokens
#   bash tools/gpu_next.sh s28a     # session 28, call 1: the Gluon kernels without overlap (fc1_overlap / fc2_overlap; probes)
#   (s28b names m32k_sx4p_f4_t16_g_s2_gt_n64_c2_nov, a squared-ReLU tile removed after that call: its probes were mixed;
#   s35b names "_st" forms of the f8x2 FC1 twins, removed after that call: x's transposed scales slowed that FC1)
#   bash tools/gpu_next.sh s27e     # session 27, call 5: the cross-word dequant alone (same bits): bit tests, layer / FC2 probes
#   (session 27's calls 1-4, modes s27a-d, ran code since removed: the two-chain Gluon FC1, the l64 "_n64_c2" tiles, the
#   DEQ / X3D / one-factor Gluon variants; see bench/NOTES_triton_moe.md session 27 and the commits it names)
#   bash tools/gpu_next.sh s26a     # session 26, calls 1-3 (s26a-c): the persistent warp-specialized Gluon FC2 (kernel probes)
#   bash tools/gpu_next.sh s26d     # session 26, calls 4-5 (s26d-e): two FC2 accumulator chains (probes, GPU tests)
#   bash tools/gpu_next.sh s26f     # session 26, call 6: the new defaults' tests, the full benchmark, the demo
#   bash tools/gpu_next.sh s26g     # session 26, call 7: graph replays of the 32-token two-chain defaults, race probe
#   bash tools/gpu_next.sh s25a     # for session 25: the f8x2 tiles with the Gluon FC2 ("_gf"): GPU tests, probes; the rest of the f8x2 tests
#   bash tools/gpu_next.sh s24b     # session 24, call 1: the "f8x2" tiles (fp8 wgmmas on split activations): 30b probes, tests
#   bash tools/gpu_next.sh s24c     # prepared in session 24, not run: the same probes on 235b, per-kernel times
#   bash tools/gpu_next.sh s24e     # session 24, call 3: the f8x2 tiles after the split fix, one 64-deep wgmma per block
#   bash tools/gpu_next.sh s24f     # session 24, call 5: f8x2 with two accumulator chains per program (probes, tests)
#   bash tools/gpu_next.sh s24d     # session 24, call 2: bench/f8x2_check.py (the f8x2 GPU error), then s24a
#   bash tools/gpu_next.sh s24a     # session 24, call 2 (inside s24d): ncu's per-instruction stalls (squared ReLU, 256 tokens); CTA-count probes
#   bash tools/gpu_next.sh s23f     # session 23, call 6: the other GPU tests whose default calls can take Gluon twins
#   bash tools/gpu_next.sh s23e     # session 23, call 5: the "_n64" 16-token tiles at 192 / 256 tokens (layer probes)
#   bash tools/gpu_next.sh s23d     # session 23, call 4: tests at 64 tokens, full benchmark + demo of the new defaults
#   bash tools/gpu_next.sh s23c     # session 23, call 3: ncu details; the rest of s23b's tests; the "_n64" tiles: bits, races, probes
#   bash tools/gpu_next.sh s23b     # session 23, call 2: GPU tests of the default Gluon twins (28-72 pairs per expert), s23ncu
#   bash tools/gpu_next.sh s23ncu   # ncu of the squared-ReLU FCs at 256 tokens; the "_n64" Gluon candidates
#   bash tools/gpu_next.sh s22h     # session 23, call 1: bits, races, benchmark of the 64-token Gluon twins (GLUON=1)
#   bash tools/gpu_next.sh s22d     # session 22, call 2: layer probes of the two-set Gluon tiles, benchmark + demo GLUON=1
#   bash tools/gpu_next.sh s22e     # session 22, call 3: the rest of the Gluon GPU tests, sync_dots bits, Triton races
#   bash tools/gpu_next.sh s22f     # session 22, call 4: '_sd' tiles against their bases, Gluon kernels alone
#   bash tools/gpu_next.sh s22g     # session 22, call 5: the rebuilt 64-token Gluon tiles against the Triton tiles
#   bash tools/gpu_next.sh s22a     # session 22, call 1: the two-register-set Gluon kernels: GPU tests, race
#                                   # probe (opt-in tiles, rebuilt 64-token tiles)
#   (session-20 modes below name tiles that session 21 removed: the 64-token Gluon tiles, the 128-token "_gt" tiles)
#   bash tools/gpu_next.sh s21a     # for session 21 (run first): the 128-token tiles with Gluon tails, every Gluon test
#   bash tools/gpu_next.sh s21b     # for session 21: per-kernel times of the squared-ReLU defaults at 64-512 tokens
#   bash tools/gpu_next.sh s21c     # session 21, call 2: the Gluon-tail race probe, then s21b
#   bash tools/gpu_next.sh s21d     # session 21, call 3: the race probe after the mbarrier-init fence, default bit tests
#   bash tools/gpu_next.sh s21e     # session 21, call 4: failure rates of the Gluon defaults and their Triton forms
#   bash tools/gpu_next.sh s21f     # session 21, call 5: the full MoE benchmark and the demo, Gluon off (new default)
#   bash tools/gpu_next.sh s20a     # for session 20 (run first): the Gluon FC2 candidates (GLUON_ENV=all): tests, probes
#   bash tools/gpu_next.sh s20b     # for session 20: the full MoE benchmark and the demo with GLUON_ENV=all
#   bash tools/gpu_next.sh s20c     # for session 20: the Gluon FC1 at the 16- / 64-token widths (kernel-level probe)
#   bash tools/gpu_next.sh s20d     # session 20, call 4: the GLUON_ENV=all candidates: tests, layer probes
#   bash tools/gpu_next.sh s20e     # session 20, call 6: GPU tests of the new Gluon defaults
#   bash tools/gpu_next.sh s20f     # session 20, call 7: the same after the Gluon FC1 barrier fix
#   bash tools/gpu_next.sh s19a     # session 19, call 1: all Gluon FC2 tests, the Gluon FC1 probe (compile-only so far)
#   bash tools/gpu_next.sh s19b     # session 19, call 2: Gluon FC2 tiles at 384 tokens, the full MoE benchmark and the demo with
#                                   # MEGATRON_MXFP8_MOE_GLUON_FC2=1
#   bash tools/gpu_next.sh s19c     # prepared for session 19, not run (s19g ran a cut of it)
#   bash tools/gpu_next.sh s19d     # session 19, call 3: the Gluon FC1 in the layer (bit tests, graph replays, probes)
#   bash tools/gpu_next.sh s19e     # session 19, call 4: the other Gluon FC1 tests, squared-ReLU FC1 probe, benchmark, demo
#   bash tools/gpu_next.sh s19f     # session 19, call 5: squared-ReLU Gluon FC1 with 128 rows on 4 warps (probes)
#   bash tools/gpu_next.sh s19g     # session 19, call 6: s19c cut to one FC2 shape (Gluon FC2 at block_t 16 / 64)
#   bash tools/gpu_next.sh s19h     # session 19, call 7: the Gluon FC2 on the 16- / 64-token plane tiles (layer probes)
#   bash tools/gpu_next.sh s18a     # session 18, call 1: tests owed from session 17's call 5, MoE benchmark, demo
#   bash tools/gpu_next.sh s18b     # for session 18: profiles with the new route, FC2 pipelining probes at 256 tokens
#   bash tools/gpu_next.sh s18c     # session 18, call 3: FC2 by TMA / warp specialization (bit tests, probes at 256)
#   bash tools/gpu_next.sh s18d     # session 18, call 4: TMA FC2 with pointer-loaded scales, uncapped warp specialization
#   bash tools/gpu_next.sh s18e     # session 18, call 5: 1024 tokens, same-call A/B against the tree before the route fold
#   bash tools/gpu_next.sh s18f     # session 18, call 6: FC2 in Gluon with asynchronous wgmma (bench/gluon_fc2_probe.py)
#   bash tools/gpu_next.sh s18g     # session 18, call 7: the Gluon FC2 in the layer (bit tests, graph replay, probes)
#   bash tools/gpu_next.sh s17a     # session 17, call 1: the layer graph tests (one new), then probes: the second stream
#                                   # at 72-176 pairs per expert, l64k2_sx4p_f4_t32 on 235b, the spread
#   bash tools/gpu_next.sh s17e     # session 17, call 5: the route plan folded into the scatter, the coalesced plane copy
#   bash tools/gpu_next.sh s17d     # session 17, call 4: squared ReLU planes + plane copy beside the route at 64 tokens
#   bash tools/gpu_next.sh s17c     # session 17, call 3: tests of the new defaults, MoE benchmark, demo
#   bash tools/gpu_next.sh s17b     # session 17, call 2: "halves" on the 256 / 128-token tiles (probes, tests)
#   bash tools/gpu_next.sh s16b     # session 16, call 1: the second stream (probes at 64 / 256 tokens; its tests)
#   bash tools/gpu_next.sh s16c     # session 16, call 2: the second stream at 1024 / 4096 tokens, s16a's probes
#   bash tools/gpu_next.sh s16d     # session 16, call 3: tests of the second-stream defaults, MoE benchmark, demo
#   bash tools/gpu_next.sh s16e     # session 16, call 5: the second stream where no tails run (24 / 48 pairs per expert)
#   bash tools/gpu_next.sh s16a     # prepared in session 15, not run (s16c timed its 1024-token tails with the second stream)
#   bash tools/gpu_next.sh s15c     # session 15, call 3: tests of the 64-token plane defaults, MoE benchmark, demo
#   bash tools/gpu_next.sh s15b     # session 15, call 2: 64-token plane tiles, tails (probes)
#   bash tools/gpu_next.sh s15a     # owed from session 14 (run first): float64 cases at 300 tokens, the 32-pair cut
#   bash tools/gpu_next.sh s14r     # session 14, call 5: planes from 16 to 32 pairs per expert (tests, probes)
#   bash tools/gpu_next.sh s14q     # session 14, call 4: tests of the plane defaults, MoE benchmark, demo, probes
#   bash tools/gpu_next.sh s14p     # session 14: "sx4" with plane-major token operands (bit tests, probes at 64 / 256)
#   bash tools/gpu_next.sh owed13   # owed from session 13 (session 14 ran it in part: bench/results/run17/call2_*)
# (session 14 timed session 13's scale words, since removed: bench/results/run17/call1_s14w, call2_s14x_owed13)
#   bash tools/gpu_next.sh s13b     # session 13, call 4: tests of the new defaults, MoE benchmark, demo, tail probes
#   bash tools/gpu_next.sh s13a     # session 13, call 3: owed "sx4" float64 cases, 16-token "sx4" tails (tests, probes)
#   bash tools/gpu_next.sh owed12   # owed from session 12 (run first): tests of "sx4" and its default, MoE benchmark,
#                                   # demo; then owed12p: "sx4" probes (squared ReLU, 128-deep K steps, 256 tokens)
#   bash tools/gpu_next.sh s12c     # session 12, call 5: "sx4" word-load tiles (3 float64 tests, probes)
#   bash tools/gpu_next.sh s12b     # session 12, call 3: tests of the new gated defaults, MoE benchmark, demo
#   bash tools/gpu_next.sh s12a     # session 12, call 2: L2 prefetch hints (tests, probes; the code is in
#                                   # bench/results/run15/l2_prefetch.patch, not landed)
#   bash tools/gpu_next.sh owed11   # owed from session 11: refit GPU tests + benchmark on the address reuse, profiles
#                                   # of the 4-warp defaults, the probes NOTES session 11 lists
#   bash tools/gpu_next.sh s11a     # session 11, call 1: owed10's tests and refit benchmark, decode profiles + probes
#   bash tools/gpu_next.sh s11b     # session 11, call 2: 4-warp FC1 / FC2 tiles at 64 / 256 tokens; refit A/B (old tree)
#   bash tools/gpu_next.sh s11c     # session 11, call 3: tests of the 4-warp defaults, MoE benchmark, demo, probes
#   bash tools/gpu_next.sh s11d     # session 11, call 5: squared ReLU x256w_sa with 4-warp FC2 / FC1 (probes, tests)
#   bash tools/gpu_next.sh owed10   # owed from session 10 (done in session 11 by s11a)
#   bash tools/gpu_next.sh final    # GPU tests of the default tiles, sx_auto (test_sx_auto_shift_on_odd_shapes has not
#                                   # run yet) and the layer CUDA graphs, the demo (not run since session 5 with q1 /
#                                   # l128a_sa), and the full MoE benchmark for the PERFORMANCE tables
#   bash tools/gpu_next.sh refit    # GPU tests of quantize/refit/memory, the refit benchmark, the bounded-row bench
#                                   # (not run since session 5)
#   bash tools/gpu_next.sh mid      # l128a_sa against l64b / l64a at 24-64 pairs per expert (512 / 768 tokens)
#   bash tools/gpu_next.sh s8a      # session 8, call 1 (see the mode)
#   bash tools/gpu_next.sh s8b      # session 8, call 2: chunked route + tail tiles, tests and probes
#   bash tools/gpu_next.sh s8c      # session 8, call 5: the sx_auto word scan against the byte scan, refit tests
#   bash tools/gpu_next.sh s9a      # session 9, call 1: the deterministic route scatter (tests, old/new profiles)
#   bash tools/gpu_next.sh s9c      # session 9, call 3: refit tests and benchmark, the full MoE benchmark, demo
#   bash tools/gpu_next.sh s10a     # session 10, call 1: 256-token tiles (tests, probes at 2048-8192 tokens)
#   bash tools/gpu_next.sh s10b     # session 10, call 2: 128 FC1 rows / 256 FC2 rows at 128 tokens (tests, probes)
#   bash tools/gpu_next.sh s10d     # session 10, call 3: gate/up rows in one FC1 MMA tile (tests, probes)
#   bash tools/gpu_next.sh s10e     # session 10, call 4: tests of the new defaults, the MoE benchmark, demo
# (session 9, call 2 timed persistent FC1 / FC2 kernels, since removed: bench/results/run12/call2_s9b/)
# Run in session 7 (bench/results/run10/), kept to reproduce it:
#   verify   # q1 after its reduction to one pair per program: GPU tests and a probe at 8-24 tokens
#   ncu64    # ncu (full set, stall reasons) of the default s16k_sx_r FC1 and FC2 launches, 30b, 64 tokens
#   sxauto   # "sx_auto" on the 16/32/64/128-token tiles: tests and a probe at 64-4096 tokens (run 10 also timed an
#            # inexact "sx_narrow" there, since removed)
#   sxauto2  # l128a_sa against l64b / l128a at 1024 / 4096 (SwiGLU), its tests, the default float64 cases
#   sxauto3  # the same for squared ReLU
# A candidate becomes a default only if its tests pass AND the sweep shows it faster; then run "final".
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# bg_pytest SECONDS LOG ARGS...: pytest in the background (GPU tests of two selections share the GPU while kernels
# compile on the CPU), its exit status appended to LOG
bg_pytest() {
  local seconds=$1 log=$2; shift 2
  (timeout "$seconds" python3 -m pytest -q -p no:cacheprovider "$@" > "$log" 2>&1; echo "pytest rc=$?" >> "$log") &
}
# smoke_tests SECONDS SELECTION: the GPU MoE tests SELECTION picks, under a timeout (a pipeline that deadlocks hangs),
# into $OUT/smoke.log (ending with pytest's exit status; its tail printed); fails unless some passed and none failed
smoke_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "$2" \
    > $OUT/smoke.log 2>&1
  echo "smoke rc=$?" >> $OUT/smoke.log; tail -3 $OUT/smoke.log
  grep -q " passed" $OUT/smoke.log && ! grep -qE "[0-9]+ (failed|errors?)" $OUT/smoke.log
}
# moe_gpu_tests SECONDS SELECTION: the MoE GPU tests that pytest -k SELECTION picks, log $OUT/tests.log (ending with
# its exit status), summary printed
moe_gpu_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "$2" \
    > $OUT/tests.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests.log
  grep "passed\|failed\|rc=\|^FAILED" $OUT/tests.log | tail -12
}
# benchmark_tests_race SECONDS SELECTION CASES: the GPU's name into $OUT/log.txt, the full benchmark and the demo
# (moe_bench_and_demo), moe_gpu_tests SECONDS SELECTION, then the race probe of both activations' tiles at CASES
# (bench/gluon_tail_race_probe.py --cases, e.g. 64:default,256:default; 40 repetitions each) into $OUT/race.jsonl
benchmark_tests_race() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
  moe_bench_and_demo 300 $OUT/log.txt
  moe_gpu_tests "$1" "$2"
  { timeout 30 python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 40 --cases "$3"
    timeout 30 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 40 --cases "$3"
  } > $OUT/race.jsonl 2> $OUT/race.err
  cat $OUT/race.jsonl; tail -2 $OUT/race.err
}
# groups_probe SECONDS ARGS...: bench/expert_groups_probe.py ARGS into $OUT (groups.jsonl, groups.err ending with its
# exit status), one summary line per row printed
groups_probe() {
  timeout "$1" python3 bench/expert_groups_probe.py --out $OUT "${@:2}" > $OUT/groups.jsonl 2> $OUT/groups.err
  echo "groups rc=$?" >> $OUT/groups.err
  python3 -c "
import json
for d in map(json.loads, open('$OUT/groups.jsonl')):
    print(d['shape'][:10], d['activation'][:6], d['tokens'], d['us'], d['ratio_vs_whole'], d['bits_equal_whole'])"
  tail -2 $OUT/groups.err
}
# fixed_and_part1_tests: the first case of each test function that failed in run 51 call 1 (fixed since: the f8x2
# checks patch triton_policy, the same-bits forms are built from the pick, one factor leaves an f8x2 FC1 alone) and the
# one-factor form at 64 tokens into $OUT/tests_fixed.log; then part 1/3 of one case per test function past the 11 that
# run 50 passed into $OUT/tests1.log (each log ends with pytest's exit status)
fixed_and_part1_tests() {
  timeout 100 python3 tools/one_case_each.py tests/functional/test_triton_moe_gpu.py -- -k "f8x2_tiles_match_float64 \
    or f8x2_gluon_fc2_tiles_match or f8x2_gluon_fc1_tiles_match or f8x2_fc1_twins_match or forms_of_the_picks \
    or one_factor_with_scales_above" > $OUT/tests_fixed.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests_fixed.log
  timeout 30 python3 -m pytest -v -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
    -k "forms_of_the_picks and one_factor and 2048-768-64-" >> $OUT/tests_fixed.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests_fixed.log; grep " PASSED\| FAILED\|rc=" $OUT/tests_fixed.log | cut -c1-150
  timeout 100 python3 tools/one_case_each.py tests/functional/test_triton_moe_gpu.py --part 1/3 --skip 11 \
    > $OUT/tests1.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests1.log; grep -c " PASSED" $OUT/tests1.log
  grep "one_case_each\| FAILED\| ERROR\|rc=" $OUT/tests1.log | tail -8
}
# one_case_part SECONDS K: part K/3 of one case per test function of the Triton MoE GPU tests (tools/one_case_each.py)
# into $OUT/testsK.log (ending with pytest's exit status): the count passed, then the failures printed
one_case_part() {
  timeout "$1" python3 tools/one_case_each.py tests/functional/test_triton_moe_gpu.py --part $2/3 > $OUT/tests$2.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests$2.log; grep -c " PASSED" $OUT/tests$2.log
  grep "one_case_each\| FAILED\| ERROR\|rc=" $OUT/tests$2.log | tail -8
}
# refit_bench SECONDS [ARGS...]: bench/refit.py ARGS into $OUT (refit.md / refit.json; refit.log ends with its exit
# status), its table rows printed
refit_bench() {
  timeout "$1" python3 bench/refit.py --out $OUT "${@:2}" > $OUT/refit.log 2>&1
  echo "refit rc=$?" >> $OUT/refit.log; tail -1 $OUT/refit.log; grep "^| " $OUT/refit.md
}
# f8x2_probes VARIANT64 VARIANT256: 30b layer probes, both activations, into $OUT/probe.jsonl: at 64 / 256 tokens the
# default tile, the f8x2 tile, that tile + VARIANT64 / VARIANT256 (none when empty), the default again
f8x2_probes() {
  local P="python3 bench/triton_moe_probe.py" act D16 D32 Q
  for act in squared_relu swiglu; do
    if [ $act = swiglu ]; then D16=s16k4_sx4p_m3_g_s2_n64; D32=m32l4_sx4p_m_t16_s2; Q=
    else D16=s16k_sx4p_f4_g_s2_n64; D32=m32k_sx4p_f4_t16_s2; Q=q; fi
    timeout 70 $P --activation $act --tokens 64 --configs "$D16,s16_f8${Q}_s2${1:+,s16_f8${Q}_s2$1},$D16"
    timeout 70 $P --activation $act --tokens 256 --configs "$D32,m32_f8${Q}_t16_s2${2:+,m32_f8${Q}_t16_s2$2},$D32"
  done > $OUT/probe.jsonl 2> $OUT/probe.err
  cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
}
# refit_gpu_tests SECONDS: the quantize / refit / memory GPU tests, log $OUT/tests.log (ending with its exit status)
refit_gpu_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
    tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py > $OUT/tests.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests.log; grep "passed\|failed\|rc=\|^FAILED" $OUT/tests.log | tail -8
}
# refit_timeline SECONDS NAME: bench/refit_timeline.py into $OUT/NAME, log $OUT/NAME.log (ending with its exit status)
refit_timeline() {
  timeout "$1" python3 bench/refit_timeline.py --out $OUT/$2 > $OUT/$2.log 2>&1
  echo "timeline rc=$?" >> $OUT/$2.log; tail -1 $OUT/$2.log
}
# moe_bench SECONDS [ARGS...]: bench/moe_layer.py --warm 14 ARGS into $OUT/moe (SECONDS at most; log
# $OUT/moe_bench.log, ending with its exit status; its table printed)
moe_bench() {
  mkdir -p $OUT/moe
  timeout "$1" python3 bench/moe_layer.py --warm 14 --out $OUT/moe "${@:2}" > $OUT/moe_bench.log 2>&1
  echo "moe rc=$?" >> $OUT/moe_bench.log
  tail -16 $OUT/moe_bench.log
}
# moe_bench_and_demo SECONDS LOG: the full MoE benchmark (moe_bench SECONDS), then the demo appended to LOG
moe_bench_and_demo() {
  moe_bench "$1"
  TORCHDYNAMO_DISABLE=1 timeout 35 python3 examples/decode.py --steps 12 --batch-size 8 >> "$2" 2>&1
  echo "demo rc=$?" >> "$2"
  tail -3 "$2"
}
# card_and_copy_ceilings: the card's name into $OUT/log.txt, then bench/copy_bandwidth.py into $OUT (log copy.log)
card_and_copy_ceilings() {
  nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
  timeout 90 python3 bench/copy_bandwidth.py --out $OUT > $OUT/copy.log 2>&1; echo "copy rc=$?" >> $OUT/copy.log
  grep "^| \|rc=" $OUT/copy_bandwidth.md $OUT/copy.log
}
# quantize_bench SECONDS: bench/quantize.py into $OUT (log quantize.log), its table printed
quantize_bench() {
  timeout "$1" python3 bench/quantize.py --out $OUT > $OUT/quantize.log 2>&1; echo "quantize rc=$?" >> $OUT/quantize.log
  grep "^| \|rc=\|Device copy" $OUT/quantize.log | cut -c1-400
}
# tests_bench_demo SECONDS BENCH_SECONDS PYTEST_ARGS...: the GPU tests PYTEST_ARGS pick (log $OUT/tests.log, ending
# with pytest's exit status; summary printed), then the full MoE benchmark and the demo (moe_bench_and_demo)
tests_bench_demo() {
  local seconds=$1 bench=$2; shift 2
  timeout "$seconds" python3 -m pytest -p no:cacheprovider "$@" > $OUT/tests.log 2>&1
  echo "pytest rc=$?" >> $OUT/tests.log
  grep -E "passed|failed|PASSED|FAILED|ERROR|rc=" $OUT/tests.log | tail -6
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
  moe_bench_and_demo "$bench" $OUT/log.txt
}
# kernel_probe_summary: the times and bit checks of $OUT/fc1.jsonl and $OUT/fc2.jsonl (bench/gluon_fc1_probe.py /
# gluon_fc2_probe.py output)
kernel_probe_summary() {
  python3 -c "
import json
for f in ('fc1', 'fc2'):
    for d in map(json.loads, open('$OUT/' + f + '.jsonl')):
        print(f, d.get('hidden'), d.get('inter'), d.get('block_t'), d['us'])
        print('  ', {k: v for k, v in d.items() if 'equals' in k})"
}
# probe_shapes SECONDS TOKENS ACTIVATION CONFIGS SHAPE...: bench/triton_moe_probe.py on each SHAPE in turn (TOKENS
# and CONFIGS as its --tokens / --configs, each run capped at SECONDS) into $OUT/probe.jsonl, errors into probe.err
probe_shapes() {
  local seconds=$1 tokens=$2 activation=$3 configs=$4 shape; shift 4
  for shape in "$@"; do
    timeout "$seconds" python3 bench/triton_moe_probe.py --shape $shape --tokens $tokens --activation $activation \
      --configs "$configs" >> $OUT/probe.jsonl 2>> $OUT/probe.err
  done
}
# persistent_ab_4096 SECONDS SUFFIX: probe_shapes of both activations' persistent ws defaults against their SUFFIX
# forms at 4096 tokens (squared ReLU, then SwiGLU; 235b, then 30b), two alternating rounds
persistent_ab_4096() {
  local pair name C
  for pair in x256w_sa_t32a_wsb_p:squared_relu x256m_sa_t32_wsb_p:swiglu; do
    name=${pair%%:*}
    C=$name,$name$2
    probe_shapes "$1" 4096 "${pair#*:}" "$C,$C" qwen3-235b-a22b qwen3-30b-a3b
  done
}
# layer_probe_summary WIDTH: one line per layer probe of $OUT/probe.jsonl (the config's last WIDTH characters), then
# the end of $OUT/probe.err
layer_probe_summary() {
  python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'][-$1:], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
  tail -2 $OUT/probe.err
}
# split_probe SECONDS: bench/split_rows_probe.py into $OUT/split.jsonl, one line per case printed (rows, K, scales
# transposed, variant, us per launch, same bits as the default)
split_probe() {
  timeout "$1" python3 bench/split_rows_probe.py > $OUT/split.jsonl 2> $OUT/split.err; tail -2 $OUT/split.err
  python3 -c "import json,sys; [print(r['rows'], r['k'], int(r['scales_t']), r['variant'], r['us'], r['same_bits']) for r in map(json.loads, open(sys.argv[1]))]" $OUT/split.jsonl
}
# ncu_fcs SECONDS TOKENS LAUNCHES PATTERN LINES CONFIGS...: per config, ncu (full set, clocks free) of its FC kernels
# (squared ReLU at TOKENS; LAUNCHES skipped, then LAUNCHES profiled) into $OUT/ncu_<config>.txt (ending with ncu's
# exit status), and the first LINES lines that grep PATTERN matches there
ncu_fcs() {
  local seconds=$1 tokens=$2 launches=$3 pattern=$4 lines=$5 cfg; shift 5
  for cfg in "$@"; do
    timeout "$seconds" ncu --clock-control none --kernel-name regex:"_fc[12]_" --launch-skip $launches \
      --launch-count $launches --set full --print-details all python3 bench/triton_moe_probe.py --tokens $tokens \
      --activation squared_relu --configs $cfg --once > $OUT/ncu_$cfg.txt 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_$cfg.txt
    grep -n "$pattern" $OUT/ncu_$cfg.txt | head -$lines
  done
}
# twin_probes SECONDS TOKENS ACTIVATION SUFFIXES: layer probes (bench/triton_moe_probe.py) on both shapes of
# choose_config's pick D at TOKENS and its twins D_<suffix> (SUFFIXES comma-separated), all twice in a row
# ("D,D_a,D_b,D,D_a,D_b"), into $OUT/probe.jsonl
twin_probes() {
  local D C f shape
  D=$(default_tile $2 $3)
  C=$D; for f in ${4//,/ }; do C="$C,${D}_$f"; done
  for shape in qwen3-30b-a3b qwen3-235b-a22b; do
    timeout "$1" python3 bench/triton_moe_probe.py --shape $shape --tokens $2 --activation $3 \
      --configs "$C,$C" >> $OUT/probe.jsonl 2>> $OUT/probe.err
  done
}
# profile_summary: one line per per-kernel profile of $OUT/profile.jsonl (triton_moe_probe.py --profile): shape,
# activation, tokens, the config's last 30 characters, the kernels' CUDA times
profile_summary() {
  python3 -c "import json; [print(d['shape'][:10], d['activation'][:4], d['tokens'], d['config'][-30:], d['kernels_us'])
                           for d in map(json.loads, open('$OUT/profile.jsonl'))]"
}
# profiles_sq64 SECONDS CONFIGS [SECONDS_235B CONFIGS_235B]: per-kernel profiles (triton_moe_probe.py --profile),
# squared ReLU, 64 tokens, of CONFIGS on qwen3-30b-a3b (and of CONFIGS_235B on qwen3-235b-a22b) into
# $OUT/profile.jsonl, then profile_summary
profiles_sq64() {
  { timeout "$1" python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu --configs "$2"
    if [ -n "${4:-}" ]; then
      timeout "$3" python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --profile --tokens 64 \
        --activation squared_relu --configs "$4"
    fi
  } > $OUT/profile.jsonl 2> $OUT/profile.err
  profile_summary; tail -2 $OUT/profile.err
}
# probe_sq64 SHAPE CONFIGS: layer probes (triton_moe_probe.py), squared ReLU, 64 tokens, of CONFIGS on SHAPE,
# appended to $OUT/probe.jsonl
probe_sq64() {
  timeout 80 python3 bench/triton_moe_probe.py --shape "$1" --tokens 64 --activation squared_relu --configs "$2" \
    >> $OUT/probe.jsonl 2>> $OUT/probe.err
}
# probe_picks SUFFIX...: layer probes (bench/triton_moe_probe.py) at $PICK_TOKENS (default "64 256") tokens, both
# activations, of choose_config's pick D (default_tile) with each SUFFIX appended in turn ("" is D itself), appended
# to $OUT/probe.jsonl
probe_picks() {
  local act t D s configs
  for act in swiglu squared_relu; do
    for t in ${PICK_TOKENS:-64 256}; do
      D=$(default_tile $t $act); configs=""
      for s in "$@"; do configs="$configs,$D$s"; done
      timeout 90 python3 bench/triton_moe_probe.py --tokens $t --activation $act --configs "${configs#,}" \
        >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
  done
}
# default_tile TOKENS ACTIVATION: the TILES name of choose_config's Gluon pick for qwen3-30b-a3b (top-8 of 128)
default_tile() {
  python3 -c "
from megatron_mxfp8_moe.kernels.triton_moe import TILES, choose_config
c = choose_config($1, 2048, 768, gated='$2' == 'swiglu', topk=8, experts=128, gluon=True)
print(next(n for n, v in TILES.items() if v is c))"
}
case "${1:-}" in
  refit)
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
      tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py > $OUT/gpu_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/gpu_tests.log
    timeout 120 python3 bench/refit.py --out $OUT > $OUT/refit.log 2>&1
    echo "refit rc=$?" >> $OUT/refit.log
    timeout 60 python3 bench/bounded_rows.py --out $OUT > $OUT/bounded.log 2>&1
    echo "bounded rc=$?" >> $OUT/bounded.log
    tail -3 $OUT/gpu_tests.log; tail -2 $OUT/refit.log; tail -3 $OUT/bounded.log; cat $OUT/refit.md ;;
  final)
    # GPU tests (two pytest processes: the route / tail tiles, and the default tiles, sx_auto and the layer CUDA
    # graphs), the demo, then the full MoE benchmark for the PERFORMANCE tables. Few files under $OUT.
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    T=/tmp/final; mkdir -p $T
    bg_pytest 240 $T/tests_a.log tests/functional/test_triton_moe_gpu.py -k "route or tail"
    bg_pytest 240 $T/tests_b.log tests/functional/test_triton_moe_gpu.py tests/functional/test_layer_cuda_graph_gpu.py \
      -k "matches_float64 or new_routing or fp32_out or rejects or refit_reaches or layer_cuda_graph or graph_replay_matches or row_bound or refit_after or sx_auto"
    wait
    cat $T/tests_a.log $T/tests_b.log > $OUT/kernel_tests.log
    TORCHDYNAMO_DISABLE=1 timeout 80 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1
    echo "demo rc=$?" >> $OUT/demo.log
    mkdir -p $OUT/moe
    timeout 270 python3 bench/moe_layer.py --warm 14 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -2 $T/tests_a.log; tail -2 $T/tests_b.log; tail -6 $OUT/demo.log; tail -16 $OUT/moe_bench.log ;;
  verify)
    # the routed GEMV (q1, q1s3, q1b) against the float64 oracle, the default tiles, graph replay; then a probe
    # (compare docs/PERFORMANCE.md 2b, run 9: q1 139.2 / 480.9 us at 16 tokens, 30b / 235b SwiGLU)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py \
      -k "q1 or matches_float64 or new_routing or layer_cuda_graph or graph_replay_matches" > $OUT/verify_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/verify_tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 8,16,24 --configs g32p,q1,q1s3,q1b,s16k_sx_r \
        >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    tail -3 $OUT/verify_tests.log; grep '^{' $OUT/probe.jsonl ;;
  ncu64)
    # one warm-up and one profiled call each (triton_moe_probe.py --once); the text report comes back in $OUT
    timeout ${NCU_TIMEOUT:-500} ncu --export $OUT/ncu_s16k_64 --kernel-name regex:"_fc[12]_kernel" --launch-skip 2 --launch-count 2 --set full \
      --print-details all python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 64 \
      --configs s16k_sx_r --once > $OUT/ncu_s16k_64.txt 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_s16k_64.txt
    grep -n "Duration\|DRAM Throughput\|Warp Cycles Per Issued\|Stall\|Achieved Occupancy" $OUT/ncu_s16k_64.txt | head -60 ;;
  sxauto)
    # session 7: the one-multiply dequant ("sx_auto") against the cvt path (bit for bit, mixed scale ranges, graph
    # replay across a refit that widens the scales), the float64 cases of the defaults; then a probe per tile
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 280 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "s16k_sa or m32l_sa or l64b_sa or l128a_sa or sx_auto or matches_float64 or v3_bits_exact" \
      > $OUT/sxauto_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/sxauto_tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 50 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 \
        --configs s16k_sx_r,s16k_sx_r@sx_auto >> $OUT/probe.jsonl 2>> $OUT/probe.err
      timeout 50 python3 bench/triton_moe_probe.py --shape $shape --tokens 256 \
        --configs m32l_sx,m32l_sx@sx_auto >> $OUT/probe.jsonl 2>> $OUT/probe.err
      timeout 50 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024 \
        --configs l64b,l64b@sx,l64b@sx_auto,l128a,l128a@sx_auto >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    timeout 40 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 4096 \
      --configs l128a,l128a@sx_auto >> $OUT/probe.jsonl 2>> $OUT/probe.err
    tail -3 $OUT/sxauto_tests.log; grep '^{' $OUT/probe.jsonl ;;
  sxauto2)
    # session 7, second call: l128a_sa (the new gated default above 24 pairs per expert) against the old tiles at
    # 1024 / 4096 tokens, then its tests (bit-equal to cvt, mixed scale ranges, graph replay) and the float64 cases
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 100 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 1024,4096 \
      --configs l64b,l128a_sa >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 100 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 1024,4096 \
      --configs l64b,l128a,l128a_sa >> $OUT/probe.jsonl 2>> $OUT/probe.err
    grep '^{' $OUT/probe.jsonl
    timeout 160 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "l64b_sa or l128a_sa or sx_auto" > $OUT/sxauto_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/sxauto_tests.log
    timeout 190 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "matches_float64 or v3_bits_exact" > $OUT/default_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/default_tests.log
    tail -15 $OUT/sxauto_tests.log; tail -8 $OUT/default_tests.log ;;
  sxauto3)
    # session 7, third call: l128a_sa for squared ReLU (non-gated FC1) against l64a / l128a, and its tests
    timeout 90 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --activation squared_relu --tokens 1024,4096 \
      --configs l64a,l128a,l128a_sa >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 100 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --activation squared_relu \
      --tokens 1024,4096 --configs l64a,l128a,l128a_sa >> $OUT/probe.jsonl 2>> $OUT/probe.err
    grep '^{' $OUT/probe.jsonl
    timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "sx_auto_squared_relu" > $OUT/sq_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/sq_tests.log
    tail -4 $OUT/sq_tests.log ;;
  s8a)
    # session 8, call 1: the owed sx_auto test on odd shapes (with the other sx_auto tests) while the tile variants
    # compile in parallel; then per-kernel profiles at 1024 / 4096, a sweep of l128a_sa variants, the 'mid' probe
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    bg_pytest 280 $OUT/sxauto_tests.log tests/functional/test_triton_moe_gpu.py -k "sx_auto"
    V="l128a_sa l128a_sa+fc1_block_k=128+fc1_stages=2 l128a_sa+fc1_block_n=128+fc1_warps=8 l128a_sa+fc1_stages=4
       l128a_sa+fc1_warps=8 l128a_sa+fc2_block_n=256 l128a_sa+fc2_block_k=128+fc2_stages=2
       l128a_sa+fc2_block_n=64+fc2_warps=4 l128a_sa+fc2_stages=4 l128a_sa+fc2_warps=4
       l128a_sa+block_t=256+fc1_warps=8 m32l_sx l64b_sa l64b"
    for v in $V; do
      timeout 200 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 4096 --configs $v --once \
        > $OUT/compile_$(echo $v | tr '+=@' '_-_').log 2>&1 &
    done
    wait
    tail -2 $OUT/sxauto_tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024,4096 --profile \
        --configs l128a_sa,m32l_sx,l64b_sa >> $OUT/profile.jsonl 2>> $OUT/probe.err
    done
    grep '^{' $OUT/profile.jsonl
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 150 python3 bench/triton_moe_probe.py --shape $shape --tokens 4096,1024 \
        --configs $(echo $V | tr ' ' ',') >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    grep '^{' $OUT/probe.jsonl
    timeout 100 bash tools/gpu_next.sh mid > /dev/null 2>&1 ;;
  s8b)
    # session 8, call 2: the chunked route and the tail tiles. GPU tests (two pytest processes) while the probe's
    # tiles compile; then per-kernel profiles, the tail-tile probe (SwiGLU 1024-4096, squared ReLU) and 512 / 768.
    # Few files under $OUT (a call brings back a limited number).
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    T=/tmp/s8b; mkdir -p $T
    bg_pytest 330 $T/tests_a.log tests/functional/test_triton_moe_gpu.py -k "route or tail"
    bg_pytest 330 $T/tests_b.log tests/functional/test_triton_moe_gpu.py tests/functional/test_layer_cuda_graph_gpu.py \
      -k "matches_float64 or new_routing or graph_replay_matches or layer_cuda_graph or sx_auto_equals"
    SW="l128a_sa,l128a_sa_t16,l128a_sa_t32,l128a_sa_t64"
    SQ="l128a_sa,l128a_sa_t32a,l128a_sa_t64"
    for v in $(echo $SW | tr ',' ' '); do
      timeout 250 python3 bench/triton_moe_probe.py --tokens 4096 --configs $v --once > $T/c_sw_$v.log 2>&1 &
    done
    for v in l128a_sa_t32a l128a_sa_t64 l128a_sa; do
      timeout 250 python3 bench/triton_moe_probe.py --tokens 4096 --configs $v --once --activation squared_relu \
        > $T/c_sq_$v.log 2>&1 &
    done
    timeout 250 python3 bench/triton_moe_probe.py --tokens 128,512 --configs s16k_sx_r,l64b --once > $T/c_s.log 2>&1 &
    wait
    cat $T/tests_a.log $T/tests_b.log > $OUT/tests.log
    tail -3 $T/tests_a.log; tail -3 $T/tests_b.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024,4096 --profile \
        --configs l128a_sa,l128a_sa_t32 >> $OUT/profile.jsonl 2>> $T/err.log
    done
    for m in 1024 4096; do
      timeout 40 python3 bench/triton_moe_probe.py --tokens 128,256,512 --profile --configs s16k_sx_r \
        --route-one-program-max $m >> $OUT/profile.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/profile.jsonl | cut -c1-400
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 70 python3 bench/triton_moe_probe.py --shape $shape --tokens 4096,2048,1024 --configs $SW \
        >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 50 python3 bench/triton_moe_probe.py --shape $shape --tokens 4096,1024 --configs $SQ \
        --activation squared_relu >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 40 python3 bench/triton_moe_probe.py --shape $shape --tokens 512,768 --configs l64b,l128a_sa,l128a_sa_t64 \
        >> $OUT/probe.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/probe.jsonl; tail -5 $T/err.log
    echo done ;;
  s8c)
    # session 8, call 5 (carry .whl and .devcarry/old = the tree before the word scan): GPU tests of sx_auto (the
    # shifted cases take the new branch) and of quantize / refit / memory (not run since session 5) while both
    # trees compile; the old and new scans side by side (probe); then the full MoE benchmark.
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    T=/tmp/s8c; mkdir -p $T
    bg_pytest 200 $T/tests_a.log tests/functional/test_triton_moe_gpu.py -k "sx_auto or l64b_sa or l128a_sa or tail"
    bg_pytest 200 $T/tests_b.log tests/functional/test_quantize_gpu.py tests/functional/test_refit_gpu.py \
      tests/functional/test_memory_gpu.py
    for v in l128a_sa_t32 l128a_sa_t64; do
      timeout 200 python3 bench/triton_moe_probe.py --tokens 1024 --configs $v --once > $T/c_new_$v.log 2>&1 &
      (cd .devcarry/old && timeout 200 python3 bench/triton_moe_probe.py --tokens 1024 --configs $v --once \
        > $T/c_old_$v.log 2>&1) &
    done
    wait
    cat $T/tests_a.log $T/tests_b.log > $OUT/tests.log
    tail -2 $T/tests_a.log; tail -2 $T/tests_b.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      for tree in new old; do
        d=.; [ $tree = old ] && d=.devcarry/old
        tk=1024,4096; [ $shape = qwen3-235b-a22b ] && tk=4096
        (cd $d && timeout 45 python3 bench/triton_moe_probe.py --shape $shape --tokens $tk \
          --configs l128a_sa_t64,l128a_sa_t32 2>> $T/err.log | sed "s/^{/{\"tree\": \"$tree\", /") >> $OUT/probe.jsonl
      done
    done
    grep '^{' $OUT/probe.jsonl
    mkdir -p $OUT/moe
    timeout 200 python3 bench/moe_layer.py --warm 14 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -16 $OUT/moe_bench.log ;;
  s9a)
    # session 9, call 1 (carry .whl and .devcarry/old = the tree with the atomic scatter): GPU tests of the route
    # (tables now compared position by position), the tail tiles (a second call must give the same bits), sx_auto
    # (its shift helper changed after the last GPU run) and the default float64 / graph cases, while both trees
    # compile; then per-kernel profiles of the old and new route at 64-4096 tokens, and the 24-96 pairs-per-expert
    # probes
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    T=/tmp/s9a; mkdir -p $T
    bg_pytest 300 $T/tests_a.log tests/functional/test_triton_moe_gpu.py -k "route or tail or sx_auto"
    bg_pytest 300 $T/tests_b.log tests/functional/test_triton_moe_gpu.py tests/functional/test_layer_cuda_graph_gpu.py \
      -k "matches_float64 or new_routing or fp32_out or rejects or refit_reaches or layer_cuda_graph or graph_replay_matches or row_bound or refit_after"
    P="64:s16k_sx_r 128:s16k_sx_r 256:m32l_sx 1024:l128a_sa_t64 4096:l128a_sa_t32"
    for d in . .devcarry/old; do
      for tc in $P; do
        (cd $d && timeout 200 python3 bench/triton_moe_probe.py --tokens ${tc%%:*} --configs ${tc##*:} --once \
          > /dev/null 2>> $T/compile.err) &
      done
    done
    wait
    cat $T/tests_a.log $T/tests_b.log > $OUT/tests.log
    tail -2 $T/tests_a.log; tail -2 $T/tests_b.log
    for tree in new old; do
      d=.; [ $tree = old ] && d=.devcarry/old
      for tc in $P; do
        (cd $d && timeout 40 python3 bench/triton_moe_probe.py --tokens ${tc%%:*} --configs ${tc##*:} --profile \
          2>> $T/err.log | sed "s/^{/{\"tree\": \"$tree\", /") >> $OUT/profile.jsonl
      done
    done
    grep '^{' $OUT/profile.jsonl | cut -c1-400
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens 512,768 \
        --configs l64b,l128a_sa_t64 >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 80 python3 bench/triton_moe_probe.py --shape $shape --tokens 1280 \
        --configs l128a_sa_t64,l128a_sa_t32 >> $OUT/probe.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/probe.jsonl; tail -n 5 $T/err.log $T/compile.err ;;
  s9c)
    # session 9, call 3: GPU tests of quantize / refit / memory (the host-plan changes of this session), the refit
    # benchmark, the full MoE benchmark (new route scatter; gated tiles from 24 pairs per expert), the demo. Seven
    # files under $OUT (a call returns at most 8): log.txt, refit.{md,json}, moe/moe_layer.{md,json,png}, moe_bench.log
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    bg_pytest 170 /tmp/route.log tests/functional/test_triton_moe_gpu.py -k "route_tables"
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
      tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py >> $L 2>&1
    echo "pytest rc=$?" >> $L
    wait
    cat /tmp/route.log >> $L
    tail -2 /tmp/route.log; grep "passed\|failed" $L
    timeout 90 python3 bench/refit.py --out $OUT >> $L 2>&1
    echo "refit rc=$?" >> $L
    cat $OUT/refit.md
    mkdir -p $OUT/moe
    timeout 240 python3 bench/moe_layer.py --warm 14 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -16 $OUT/moe_bench.log
    TORCHDYNAMO_DISABLE=1 timeout 40 python3 examples/decode.py --steps 12 --batch-size 8 >> $L 2>&1
    echo "demo rc=$?" >> $L
    tail -4 $L ;;
  s10a)
    # session 10, call 1: GPU tests of the 256-token tiles (tails, sx_auto bit-equality), then probes: 256- against
    # 128-token tiles at 2048-8192 tokens (both activations, both shapes), per-kernel profiles at 4096, and three
    # s16k_sx_r variants at 64 tokens
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    T=/tmp/s10a; mkdir -p $T
    bg_pytest 300 $T/tests.log tests/functional/test_triton_moe_gpu.py -k "x256"
    SW="l128a_sa_t32,x256_sa_t32,x256_sa_t64,x256_sa_t32+fc1_stages=4,x256_sa_t32+fc2_stages=4"
    SQ="l128a_sa_t32a,x256_sa_t32a,x256w_sa_t32a,x256w_sa_t32a+fc2_stages=4"
    SM="s16k_sx_r,s16k_sx_r+fc2_block_n=64+fc2_warps=4,s16k_sx_r+fc1_stages=4"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      (timeout 250 python3 bench/triton_moe_probe.py --shape $shape --tokens 2048 --configs $SW --once > /dev/null 2>> $T/compile.err) &
      (timeout 250 python3 bench/triton_moe_probe.py --shape $shape --tokens 2048 --configs $SQ --activation squared_relu --once > /dev/null 2>> $T/compile.err) &
      (timeout 250 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --configs $SM --once > /dev/null 2>> $T/compile.err) &
    done
    wait
    cp $T/tests.log $OUT/tests.log; tail -3 $T/tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens 2048,4096 --configs $SW >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens 2048,4096 --configs $SQ --activation squared_relu \
        >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 8192 --configs l128a_sa_t32,x256_sa_t32 \
        >> $OUT/probe.jsonl 2>> $T/err.log
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --configs $SM >> $OUT/probe.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/probe.jsonl
    timeout 60 python3 bench/triton_moe_probe.py --tokens 4096 --configs l128a_sa_t32,x256_sa_t32 --profile \
      > $OUT/profile.jsonl 2>> $T/err.log
    timeout 60 python3 bench/triton_moe_probe.py --tokens 4096 --configs l128a_sa_t32a,x256w_sa_t32a --profile \
      --activation squared_relu >> $OUT/profile.jsonl 2>> $T/err.log
    cut -c1-400 $OUT/profile.jsonl
    tail -n 5 $T/err.log $T/compile.err; cp $T/err.log $OUT/err.log 2>/dev/null ;;
  s10b)
    # session 10, call 2: GPU tests of the 128-token tiles with 128 FC1 rows ("l128w") or 256 FC2 rows ("l128n"),
    # then probes at 1024-8192 tokens against the defaults and x256w_sa_t32a (squared ReLU)
    T=/tmp/s10b; mkdir -p $T
    bg_pytest 300 $T/tests.log tests/functional/test_triton_moe_gpu.py -k "l128w or l128n"
    Q1="l128a_sa_t64,l128w_sa_t64,l128w_sa_t64+fc1_maxnreg=128"
    Q2="l128a_sa_t32a,l128w_sa_t32a,l128w_sa_t32a+fc1_maxnreg=128,x256w_sa_t32a"
    Q4="x256w_sa_t32a,l128w_sa_t32a,x256w_sa_t32a+fc1_stages=4,x256w_sa_t32a+fc1_block_k=32+fc1_stages=4"
    S1="l128a_sa_t64,l128n_sa_t64"
    S4="l128a_sa_t32,l128n_sa_t32,l128a_sa_t32+fc1_block_n=128+fc1_warps=8"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      (timeout 250 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024 --configs $Q1,$Q2,$Q4 --activation squared_relu --once > /dev/null 2>> $T/compile.err) &
      (timeout 250 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024 --configs $S1,$S4 --once > /dev/null 2>> $T/compile.err) &
    done
    wait
    cp $T/tests.log $OUT/tests.log; tail -3 $T/tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      P="timeout 100 python3 bench/triton_moe_probe.py --shape $shape"
      $P --tokens 1024 --configs $Q1 --activation squared_relu >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 2048,3072 --configs $Q2 --activation squared_relu >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 4096,8192 --configs $Q4 --activation squared_relu >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 1024 --configs $S1 >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 2048,4096 --configs $S4 >> $OUT/probe.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/probe.jsonl | sed 's/"mma_v3": true//'
    tail -n 5 $T/err.log $T/compile.err ;;
  s10d)
    # session 10, call 3: fc1_gate_merge (gate and up rows in one MMA tile; 8 warps split it by rows): its GPU tests
    # (bit-equal to the two-tile FC1), then probes against the defaults at 64 / 256 / 1024 / 4096 tokens (SwiGLU)
    T=/tmp/s10d; mkdir -p $T
    bg_pytest 220 $T/tests.log tests/functional/test_triton_moe_gpu.py -k "gate_merge"
    M="+fc1_gate_merge=1+fc1_warps=8"
    C64="s16k_sx_r,s16k_sx_r$M,s16k_sx_r$M+fc1_maxnreg=128,s16k_sx_r$M+fc1_block_k=128+fc1_stages=4"
    C256="m32l_sx,m32l_sx$M,m32l_sx$M+fc1_maxnreg=128"
    C1K="l128a_sa_t64,l128a_sa_t64$M,l128a_sa_t64+fc1_gate_merge=1"
    C4K="l128a_sa_t32,l128a_sa_t32$M+block_t=256,l128a_sa_t32$M"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      (timeout 150 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --configs $C64,$C256 --once > /dev/null 2>> $T/compile.err) &
      (timeout 150 python3 bench/triton_moe_probe.py --shape $shape --tokens 1024 --configs $C1K,$C4K --once > /dev/null 2>> $T/compile.err) &
    done
    wait
    cp $T/tests.log $OUT/tests.log; tail -3 $T/tests.log
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      P="timeout 60 python3 bench/triton_moe_probe.py --shape $shape"
      $P --tokens 64 --configs $C64 >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 256 --configs $C256 >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 1024 --configs $C1K >> $OUT/probe.jsonl 2>> $T/err.log
      $P --tokens 4096 --configs $C4K >> $OUT/probe.jsonl 2>> $T/err.log
    done
    grep '^{' $OUT/probe.jsonl | sed 's/, "mma_v3": true//'
    grep -i "error\|Traceback" $T/err.log $T/compile.err | head -5 ;;
  s10e)
    # session 10, call 4 (under 7 minutes of device time were left): GPU tests of the new defaults (merged gated FC1,
    # squared-ReLU l128w / x256w: bit-equality, tails, graph replays, float64 default cases) beside the refit /
    # quantize / memory tests, then the full MoE benchmark, the demo, and 235b probes of the merged tiles
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    bg_pytest 120 /tmp/moe_tests.log tests/functional/test_triton_moe_gpu.py -k "merged_defaults or merged_256 or \
squared_relu_tiles or (tail_tiles and l128w) or (matches_float64 and (2048-768-64 or 2048-768-1024 or 4096-1536-300))"
    timeout 60 python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
      tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py >> $L 2>&1
    echo "pytest rc=$?" >> $L
    wait
    cat /tmp/moe_tests.log >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 130 $L
    timeout 30 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 4096,1024 \
      --configs l128a_sa_t32,x256m_sa_t32,l128a_sa_t64,l128m_sa_t64 > $OUT/probe.jsonl 2>/dev/null
    cat $OUT/probe.jsonl ;;
  s17a)
    # prepared in session 16 (not run): the second stream on the 128-token tiles with 32-token tails (72-176 pairs per
    # expert: not timed, so they keep one stream), l64k2_sx4p_f4_t32 with it on 235b (30b 512 tokens: 396.7 vs 414.8),
    # and the spread of two-stream graphs on 235b at 256 tokens (852.6-910.6 us against 864.1-876.6 on one stream);
    # first the one GPU test written after session 16's device time ran out (Megatron's layer captured with the
    # second stream)
    L=$OUT/log.txt
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/functional/test_layer_cuda_graph_gpu.py > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -5
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 $P --shape $s --tokens 2048 --configs "l128m_sa_t32,l128m_sa_t32+side_stream=2,l128m_sa_t32"
      timeout 60 $P --shape $s --tokens 2048 --activation squared_relu --configs "l128w_sa_t32a,l128w_sa_t32a+side_stream=2,l128w_sa_t32a"
      timeout 60 $P --shape $s --tokens 512 --activation squared_relu --configs "l64k_sx4p_f4_t32_s2,l64k2_sx4p_f4_t32+side_stream=2,l64k_sx4p_f4_t32_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    c=m32l4_sx4p_m_t16
    timeout 70 $P --shape qwen3-235b-a22b --tokens 256 --configs "$c,${c}_s2,$c,${c}_s2,$c,${c}_s2" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s18a)
    # prepared in session 17 (run first): the GPU tests owed from call 5 (the route fold, the coalesced plane copy),
    # the float64 default cases and the layer's CUDA graphs on the final tree, then the full MoE benchmark and the demo
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py -k "(planes_keep_the_bits and odd7) or (side_stream_keeps and (m32l4 or l128m)) or (matches_float64 and (300 or 600 or 1024)) or graph_replay_matches or second_stream or chunked_route" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -20
    moe_bench_and_demo 180 $L ;;
  s18c)
    # session 18, call 3 (the fc2_tma code was removed after call 4: apply bench/results/run21/fc2_tma.patch to rerun)
    # FC2 of the "sx4" plane tiles with TMA loads (fc2_tma 1) and warp specialization (2): bit
    # tests, then same-call probes at 256 tokens (both shapes, both activations: default, tma 1, tma 2, default) and
    # per-kernel profiles on 30b
    L=$OUT/log.txt
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "fc2_tma" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=m32l4_sx4p_m_t16_s2
      timeout 75 $P --shape $s --tokens 256 --configs "$c,$c+fc2_tma=1,$c+fc2_tma=2,$c"
      c=m32k_sx4p_f4_t16_s2
      timeout 75 $P --shape $s --tokens 256 --activation squared_relu --configs "$c,$c+fc2_tma=1,$c+fc2_tma=2,$c"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    c=m32k_sx4p_f4_t16_s2
    timeout 60 $P --shape qwen3-30b-a3b --tokens 256 --activation squared_relu --profile --configs "$c+fc2_tma=1,$c+fc2_tma=2" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -5 $OUT/probe.err ;;
  s18d)
    # session 18, call 4: s18c's TMA FC2 was slower (scales unswizzled through shared memory; warp specialization
    # 2x slower at a 168-register cap). Bit tests of TMA with pointer-loaded scales (fc2_tma 3), then probes at 256
    # tokens: default, tma 3, tma 2 uncapped, tma 3 with 3 stages, default
    L=$OUT/log.txt
    timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "tma_pointer_scales" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=m32k_sx4p_f4_t16_s2
      timeout 80 $P --shape $s --tokens 256 --activation squared_relu --configs "$c,$c+fc2_tma=3,$c+fc2_tma=2+fc2_maxnreg=none,$c+fc2_tma=3+fc2_stages=3,$c"
      c=m32l4_sx4p_m_t16_s2
      timeout 60 $P --shape $s --tokens 256 --configs "$c,$c+fc2_tma=3,$c"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    c=m32k_sx4p_f4_t16_s2
    timeout 50 $P --shape qwen3-30b-a3b --tokens 256 --activation squared_relu --profile --configs "$c+fc2_tma=3" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s18e)
    # session 18, call 5: run 21 timed 1024 tokens 7% / 3% faster than run 20 (30b / 235b) with the same tiles; the
    # route fold and the coalesced plane copy (session 17, call 5) came between. Same-call A/B against the tree before
    # them (d890f8a, carried in .devcarry/old), alternating old / new, both activations, then per-kernel profiles
    OLD="env PYTHONPATH=/tmp/site:$PWD/.devcarry/old python3 .devcarry/old/bench/triton_moe_probe.py"
    NEW="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      for P in "$OLD" "$NEW" "$OLD" "$NEW"; do
        timeout 35 $P --shape $s --tokens 1024 --configs "l128m_sa_t64pu_s2" | sed "s/}\$/, \"tree\": \"${P%% *}\"}/"
      done
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    for P in "$OLD" "$NEW"; do
      timeout 35 $P --shape qwen3-30b-a3b --tokens 1024 --profile --configs "l128m_sa_t64pu_s2" | sed "s/}\$/, \"tree\": \"${P%% *}\"}/"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s18f)
    # session 18, call 6: FC2 in Gluon with asynchronous wgmma (bench/gluon_fc2_probe.py): float64 error, bits against
    # the Triton FC2 at 128-deep K steps, CUDA-graph times against the Triton FC2 at 128 / 256-deep steps; 16 pairs
    # per 32-token block (256 tokens), 30b / 235b FC2 shapes, gated and squared ReLU
    for shape in "2048 1536" "2048 768" "4096 3072" "4096 1536"; do
      set -- $shape
      timeout 100 python3 bench/gluon_fc2_probe.py --hidden $1 --inter $2 --gluon "64:3:4,64:2:4,64:4:4,128:3:4"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -5 $OUT/probe.err ;;
  s19a)
    # prepared in session 18 (run first): all GPU tests of the Gluon FC2 (18 bit cases, 2 graph replays, 2 of the
    # env switch; 6 ran in session 18), then the Gluon FC1 probe (bench/gluon_fc1_probe.py, compile-only so far):
    # float64 error, bits against the Triton FC1 at 128-deep steps with separate gate / up tiles, CUDA-graph times
    # against the Triton default FC1; 16 pairs per expert (256 tokens)
    L=$OUT/log.txt
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "gluon" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    for shape in "2048 768 swiglu" "2048 768 squared_relu" "4096 1536 swiglu" "4096 1536 squared_relu"; do
      set -- $shape
      timeout 80 python3 bench/gluon_fc1_probe.py --hidden $1 --inter $2 --activation $3 --gluon "64:3:4,64:2:4,128:3:8"
    done > $OUT/fc1_probe.jsonl 2> $OUT/fc1_probe.err
    cat $OUT/fc1_probe.jsonl; tail -3 $OUT/fc1_probe.err ;;
  s19b)
    # prepared in session 18: the Gluon FC2 tiles without tails at 512 tokens (32 pairs per expert is past their
    # region: 28; so 384 tokens = 24 pairs), against the "_s2" tiles, then the full MoE benchmark and the demo with
    # MEGATRON_MXFP8_MOE_GLUON_FC2=1 (compare with run 21, PERFORMANCE 2a)
    # session 19: first the Gluon tests that s19a's 200 s ran out before (16 of 22 passed there)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(gluon and 235b-T300-m32l4 and n64s3) or env_switch" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -6
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 45 $P --shape $s --tokens 384 --activation squared_relu --configs "m32k_sx4p_f4_s2,m32k_sx4p_f4_g_s2,m32k_sx4p_f4_s2"
      timeout 45 $P --shape $s --tokens 384 --configs "m32l4_sx4p_m_s2,m32l4_sx4p_m_g_s2,m32l4_sx4p_m_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl
    export MEGATRON_MXFP8_MOE_GLUON_FC2=1
    moe_bench_and_demo 180 $L ;;
  s19d)
    # session 19, call 3: the Gluon FC1 (fc1_gluon) in the layer: its bit tests (the n64s3 tile, the other
    # activations, the "_gg_s2" tiles against their Triton form, graph replays), the new default test, then layer
    # probes "_g_s2" (Gluon FC2) against "_gg_s2" (both FCs in Gluon) at 256 tokens (squared ReLU at 2x inter)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 230 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(gluon_fc1 and (n64s3 or other_activations or triton_form or graph)) or gluon_defaults" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      for t in 256 384; do
        [ $t = 384 ] && n=m32l4_sx4p_m || n=m32l4_sx4p_m_t16
        timeout 40 $P --shape $s --tokens $t --configs "${n}_g_s2,${n}_gg_s2,${n}_g_s2"
      done
      timeout 40 $P --shape $s --tokens 256 --activation squared_relu \
        --configs "m32k_sx4p_f4_t16_g_s2,m32k_sx4p_f4_t16_gg_s2,m32k_sx4p_f4_t16_g_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s19e)
    # session 19, call 4: the other Gluon FC1 bit tests (n64s2, n128s3w8), the squared-ReLU Gluon FC1 kernel probe at
    # the benchmark's shapes (FC1 2 I x H), then the full MoE benchmark and the demo with the new defaults (gated
    # 8-28 pairs per expert: both FCs in Gluon; squared ReLU: the Gluon FC2)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 110 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "gluon_fc1_keeps and (n64s2 or n128s3w8)" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -4
    for shape in "2048 1536" "4096 3072"; do
      set -- $shape
      timeout 45 python3 bench/gluon_fc1_probe.py --hidden $1 --inter $2 --activation squared_relu \
        --gluon "64:3:4,64:4:4,128:3:8"
    done > $OUT/fc1_probe.jsonl 2> $OUT/fc1_probe.err
    cat $OUT/fc1_probe.jsonl
    moe_bench_and_demo 200 $L ;;
  s19f)
    # session 19, call 5: the squared-ReLU Gluon FC1 with 128 rows on 4 warps (two m64 wgmma chains per program, like
    # the gated gate / up pair): kernel probe at the benchmark's 30b shape, then layer probes at 256 tokens
    timeout 45 python3 bench/gluon_fc1_probe.py --hidden 2048 --inter 1536 --activation squared_relu \
      --gluon "128:3:4,128:2:4,64:3:4" > $OUT/fc1_probe.jsonl 2> $OUT/fc1_probe.err
    cat $OUT/fc1_probe.jsonl
    n=m32k_sx4p_f4_t16
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 45 python3 bench/triton_moe_probe.py --shape $s --tokens 256 --activation squared_relu \
        --configs "${n}_g_s2,${n}_gg_s2+fc1_block_n=128,${n}_gg_s2+fc1_block_n=128+fc1_stages=2,${n}_g_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s19g)
    # session 19, call 6 (the last device minutes): s19c cut to the 30b gated FC2 shape at both block widths
    for shape in "16 4 2048 768" "64 40 2048 768"; do
      set -- $shape
      timeout 80 python3 bench/gluon_fc2_probe.py --block-t $1 --pairs $2 --hidden $3 --inter $4 --gluon "64:3:4,128:3:4"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s21a)
    # prepared in session 20 (run first): the 128-token tiles with Gluon tails, each form on its own (run 23 call 7
    # found garbage rows once at 1024 tokens, gated), then every Gluon test again (the FC1 barrier fix of call 7)
    L=$OUT/tests.log
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "tails_of_the_128_token" > $L 2>&1
    echo "pytest rc=$?" >> $L
    timeout 420 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "gluon" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|^FAILED" $L | tail -12 ;;
  s22d)
    # session 22, call 2: the two-register-set Gluon kernels passed the race probe (call 1: 0 of 300 calls in 9 cases);
    # their speed in the layer against the Triton tiles, then the full MoE benchmark and the demo with GLUON=1
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 30 $P --shape $s --tokens 64 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_g_s2,s16k4_sx4p_m3_s2"
      timeout 30 $P --shape $s --tokens 256 --configs "m32l4_sx4p_m_t16_s2,m32l4_sx4p_m_t16_gg_s2_gt,m32l4_sx4p_m_t16_s2"
      timeout 30 $P --shape $s --tokens 256 --activation squared_relu \
        --configs "m32k_sx4p_f4_t16_s2,m32k_sx4p_f4_t16_g_s2_gt,m32k_sx4p_f4_t16_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
    export MEGATRON_MXFP8_MOE_GLUON=1
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    moe_bench_and_demo 230 $L ;;
  s22e)
    # session 22, call 3: the Gluon GPU tests call 1 did not reach (GLUON=1 where a test sets it itself), the
    # sync_dots bits, then the Triton default tiles the SASS scan flags, 200 fresh inputs each (verbose: names survive
    # a timeout)
    timeout 330 python3 -m pytest -v -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "(gluon or \
sync_dots) and not fc2_keeps_the_bits and not with_the_gluon_fc2 and not env_switch and not (fc1_keeps_the_bits \
and 30b and not n64s4)" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "PASSED|FAILED|ERROR|rc=" $OUT/tests.log | grep -v "^PASSED" | tail -12; grep -c PASSED $OUT/tests.log
    P="python3 bench/gluon_tail_race_probe.py --reps 200"
    { timeout 90 $P --activation swiglu --cases 1024:triton,4096:triton
      timeout 70 $P --activation squared_relu --cases 4096:triton
    } > $OUT/race.jsonl 2> $OUT/race.err
    grep failed_reps $OUT/race.jsonl; tail -3 $OUT/race.err ;;
  s22f)
    # session 22, call 4: the "_sd" (sync_dots) tiles against their base tiles in the layer (bits passed in call 3),
    # then the Gluon kernels alone (why the two-set tiles gained nothing in the layer, call 2)
    P="python3 bench/triton_moe_probe.py"
    { timeout 30 $P --shape qwen3-30b-a3b --tokens 1024 --configs "l128m_sa_t64pu_s2,l128m_sa_t64pu_s2_sd,l128m_sa_t64pu_s2"
      timeout 30 $P --shape qwen3-30b-a3b --tokens 1024 --activation squared_relu \
        --configs "l128w_sa_t64p2_s2,l128w_sa_t64p2_s2_sd,l128w_sa_t64p2_s2"
      timeout 40 $P --shape qwen3-30b-a3b --tokens 4096 --configs "x256m_sa_t32,x256m_sa_t32_sd,x256m_sa_t32"
      timeout 40 $P --shape qwen3-30b-a3b --tokens 4096 --activation squared_relu \
        --configs "x256w_sa_t32a,x256w_sa_t32a_sd,x256w_sa_t32a"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
    { timeout 60 python3 bench/gluon_fc2_probe.py --hidden 2048 --inter 768 --block-t 32 --pairs 16 --gluon 128:3:4,64:3:4
      timeout 60 python3 bench/gluon_fc2_probe.py --hidden 2048 --inter 768 --block-t 16 --pairs 8 --gluon 128:3:4,64:3:4
      timeout 60 python3 bench/gluon_fc1_probe.py --hidden 2048 --inter 768 --block-t 32 --pairs 16 --gluon 64:3:4,64:4:4
    } > $OUT/kernels.jsonl 2> $OUT/kernels.err
    cat $OUT/kernels.jsonl; tail -3 $OUT/kernels.err ;;
  s22g)
    # session 22, call 5: the 64-token Gluon tiles that session 21 removed (racy with one register set; the two-set
    # kernels passed 300 calls at 1024 tokens in call 1), rebuilt, against today's Triton tiles (session 22 ran it with
    # the probe's racy_gq / racy_gt names; since then the tiles are in TILES under these names)
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 $P --shape $s --tokens 640 --configs "l64_sx4p_mu_s2,l64_sx4p_mu_gg_s2,l64_sx4p_mu_s2"
      timeout 40 $P --shape $s --tokens 640 --activation squared_relu --configs "l64k2_sx4p_f4_s2,l64k2_sx4p_f4_gq_s2,l64k2_sx4p_f4_s2"
      timeout 40 $P --shape $s --tokens 1024 --configs "l128m_sa_t64pu_s2,l128m_sa_t64pu_s2_gt,l128m_sa_t64pu_s2"
      timeout 40 $P --shape $s --tokens 1024 --activation squared_relu \
        --configs "l128w_sa_t64p2_s2,l128w_sa_t64p2_s2_gt,l128w_sa_t64p2_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s24b|s24c)
    # session 24, calls 1-2: the "f8x2" tiles (no weight dequant: fp8 wgmmas on the exact hi / lo split of the
    # activations). s24b: layer probes on 30b against the defaults at 16-1024 tokens, both activations (default first
    # and last), then the f8x2 float64 / graph tests; s24c: the same probes on 235b, per-kernel times at 256 tokens
    P="python3 bench/triton_moe_probe.py"
    if [ "$1" = s24b ]; then SHAPES=qwen3-30b-a3b; else SHAPES=qwen3-235b-a22b; fi
    for shape in $SHAPES; do
      for act in squared_relu swiglu; do
        if [ $act = swiglu ]; then D16=s16k4_sx4p_m3_g_s2_n64; D32=m32l4_sx4p_m_t16_s2; D128=l128m_sa_t64pu_s2_gt
        else D16=s16k_sx4p_f4_g_s2_n64; D32=m32k_sx4p_f4_t16_s2; D128=l128w_sa_t64p2_s2_gt; fi
        A="--shape $shape --activation $act"
        timeout 60 $P $A --tokens 16 --configs "q1,s16_f8_s2,q1"
        timeout 80 $P $A --tokens 64,128 --configs "$D16,s16_f8_s2,m32_f8_t16_s2,$D16"
        timeout 60 $P $A --tokens 256 --configs "$D32,m32_f8_t16_s2,s16_f8_s2,$D32"
        timeout 50 $P $A --tokens 1024 --configs "$D128,l64_f8_t32_s2,$D128"
      done
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
    if [ "$1" = s24b ]; then
      timeout 280 python3 -m pytest -q -s -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k f8x2 \
        > $OUT/tests.log 2>&1
      echo "pytest rc=$?" >> $OUT/tests.log
      grep "passed\|failed\|rc=\|^FAILED\|^f8x2 " $OUT/tests.log | tail -50
    else
      timeout 60 $P --tokens 256 --activation squared_relu --profile --configs "m32k_sx4p_f4_t16_s2,m32_f8_t16_s2"
    fi ;;
  s24e)
    # session 24, call 3: the f8x2 tiles after the split fix (hi / lo rounded in fp32, no e4m3 -> fp32 cast) and with
    # one 64-deep wgmma per block (hi and lo side by side in K, the block's weights twice): the split check, layer
    # probes (30b, 64 / 256 tokens, stages 2-4, 64-deep steps), then the f8x2 GPU tests
    timeout 100 python3 bench/f8x2_check.py 2>&1 | grep '^{' | head -1
    P="python3 bench/triton_moe_probe.py"
    for act in squared_relu swiglu; do
      if [ $act = swiglu ]; then D16=s16k4_sx4p_m3_g_s2_n64; D32=m32l4_sx4p_m_t16_s2
      else D16=s16k_sx4p_f4_g_s2_n64; D32=m32k_sx4p_f4_t16_s2; fi
      S=s16_f8_s2
      timeout 100 $P --activation $act --tokens 64 --configs "$D16,$S,$S+fc1_stages=2+fc2_stages=2,$S+fc1_stages=3+fc2_stages=3,$S+fc1_block_k=64+fc2_block_k=64,$D16"
      timeout 100 $P --activation $act --tokens 256 --configs "$D32,m32_f8_t16_s2,m32_f8_t16_s2+fc1_stages=2+fc2_stages=2,m32_f8_t16_s2+fc1_stages=3+fc2_stages=3,$S+fc1_stages=2+fc2_stages=2,$D32"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
    timeout 60 $P --tokens 256 --activation squared_relu --profile --configs "m32k_sx4p_f4_t16_s2,m32_f8_t16_s2+fc1_stages=2+fc2_stages=2"
    timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k f8x2 \
      > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep "passed\|failed\|rc=\|^FAILED\|^f8x2 " $OUT/tests.log | tail -50 ;;
  s25g)
    # session 25, call 8: the refit benchmark and the timeline of s25f again, on another machine (call 7's host was
    # about 1.8x slower than usual: "quantize_ loop" 50 ms)
    refit_bench 150 --reps 20; refit_timeline 100 t1 ;;
  s25f)
    # session 25, call 7: the table quantize launch with its source addresses and expert slots in one table (one
    # host-to-device copy instead of two): the quantize / refit / memory GPU tests, the refit benchmark, the timeline
    refit_gpu_tests 200
    refit_bench 150 --reps 20; refit_timeline 100 t1 ;;
  s25e)
    # session 25, call 6: cProfile of the layer's refits (per-expert / stacked sources, both modes), 100 calls each
    timeout 150 python3 bench/refit_timeline.py --profile --reps 100 > $OUT/profile.log 2>&1
    echo "profile rc=$?" >> $OUT/profile.log; grep -A14 "###\|Ordered by: internal" $OUT/profile.log | head -150 ;;
  s25d)
    # session 25, call 5: the host timeline of refit_experts (layer and bare stacks, stacked / per-expert sources,
    # both nonfinite modes), twice (two processes), to see what the GPU waits for before its first kernel
    refit_timeline 120 t1; refit_timeline 120 t2; cat $OUT/t1/refit_timeline.md ;;
  s25c)
    # session 25, call 3: s25b's refit part again after the flag check moved onto the block maxima (NaN-propagating
    # reduction, lane-wise predicated flag stores: s25b's element-wise check cost the quantize 6-8%)
    refit_gpu_tests 200
    refit_bench 150 --reps 20 ;;
  s25b)
    # session 25, call 2: refit_experts(nonfinite="detect") (the quantize kernels flag NaN/Inf while writing, no scan):
    # the quantize / refit / memory GPU tests, the refit benchmark (20 reps; detect rows beside the default ones),
    # then the Triton f8x2 tests that s25a's 150 s did not reach
    refit_gpu_tests 200
    refit_bench 150 --reps 20
    # (s25a passed the first 13 of these 29 in collection order: 30b T16 / T256, 235b T64, one 235b T1024 case)
    for k in "graph" "235b and T1024 and not (swiglu and s16_f8_s2)" "(odd33 or odd7) and l64"; do
      timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
        -k "f8x2 and not gluon and ($k)" >> $OUT/tests_triton_f8x2.log 2>&1
      echo "pytest ($k) rc=$?" >> $OUT/tests_triton_f8x2.log
    done
    grep "passed\|failed\|rc=\|^FAILED" $OUT/tests_triton_f8x2.log | tail -12 ;;
  s41a)
    # for session 41 (one call, about 8 device minutes; on an H200, where 2a's run 40 ran): the full benchmark and the
    # demo with session 40's squared-ReLU default from 176 pairs per expert ("_wsb_s4", measured on an H100 only); then
    # "_sx" (session 40, prepared after the calls, compile-checked only: the ws producers' dequant by moving bits,
    # ``ws_sx``): its smoke cases, probes against the defaults at 4096 tokens (s41b: the remaining ws GPU tests)
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader)" > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt
    smoke_tests 100 "warp_specialized_fcs_match_float64 and odd and _sx" || exit 0
    twin_probes 120 4096 squared_relu sx
    twin_probes 80 4096 swiglu ws,ws_sx
    layer_probe_summary 22 ;;
  s54b)
    # session 51, after call 2: on an H200 only (other cards exit at once) the full benchmark and the demo, then the
    # copy ceilings, the quantize and the refit benchmarks
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    if ! grep -q H200 $OUT/log.txt; then echo "not an H200: $(cat $OUT/log.txt)"; exit 0; fi
    moe_bench_and_demo 330 $OUT/log.txt
    card_and_copy_ceilings; quantize_bench 60; refit_bench 100 --reps 20 ;;
  s54a)
    # session 51: the copy ceilings by method (now with an elementwise kernel in a graph) and the quantize benchmark
    # against the fastest; then on an H200 the full benchmark, the demo and the refit benchmark; elsewhere nothing more
    card_and_copy_ceilings
    quantize_bench 90
    if grep -q H200 $OUT/log.txt; then moe_bench_and_demo 330 $OUT/log.txt; refit_bench 100 --reps 20
    else echo "not an H200: $(cat $OUT/log.txt)"; fi ;;
  s53b)
    # session 50's last device minutes: the copy ceilings, then the rows of the squared-ReLU misses on an H200 or the
    # refit benchmark on another card
    card_and_copy_ceilings
    if grep -q H200 $OUT/log.txt; then moe_bench 200 --tokens 16,64,256
    else echo "not an H200: $(cat $OUT/log.txt)"; refit_bench 150 --reps 20; fi ;;
  s53a)
    # session 50: the copy ceiling by size and method (bench/copy_bandwidth.py), then the benchmark of s49a where the
    # card is an H200 (the issue's GPU); elsewhere the refit benchmark and the 16-256 token rows
    card_and_copy_ceilings
    if grep -q H200 $OUT/log.txt; then moe_bench_and_demo 360 $OUT/log.txt
    else echo "not an H200: $(cat $OUT/log.txt)"; refit_bench 150 --reps 20; moe_bench 200 --tokens 16,64,256; fi ;;
  s49a)
    # session 49 (about 8 device minutes; H200): the benchmark and demo of s48c, then one case of each test function
    # whose configs session 49 moved before its first CUDA call
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 360 $OUT/log.txt
    timeout 100 python3 tools/one_case_each.py tests/functional/test_triton_moe_gpu.py -- -k "test_v4_variants \
      or test_v3_variants or sx_auto_shift_on_odd or widens_the_scales or test_v4_cuda_graph_replay \
      or v3_bits_exact or default_from_176" > $OUT/moved.log 2>&1
    echo "pytest rc=$?" >> $OUT/moved.log; grep " PASSED\| FAILED\|rc=" $OUT/moved.log | cut -c1-150 ;;
  s48c)
    # session 48 (about 9.5 device minutes; H200): the benchmark and demo of s48a, then the tests of s48d
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 360 $OUT/log.txt
    fixed_and_part1_tests ;;
  s48d)
    # session 48 (about 4 device minutes, any Hopper card): the tests of s48c without the benchmark, then the demo
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    fixed_and_part1_tests
    TORCHDYNAMO_DISABLE=1 timeout 35 python3 examples/decode.py --steps 12 --batch-size 8 >> $OUT/log.txt 2>&1
    echo "demo rc=$?" >> $OUT/log.txt; tail -3 $OUT/log.txt ;;
  s48a)
    # for session 48 (about 9 device minutes; H200): the full benchmark and the demo with session 47's "_eg2" defaults
    # (the 16-token picks in two expert groups; run 50 measured them on an H100 at 16 / 64 / 128 tokens only), then
    # the expert-group GPU tests of the 32-token picks with their 16-token tails in each group (prepared after run 50)
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 380 $OUT/log.txt
    moe_gpu_tests 150 "expert_groups and (T256 or odd33 or graph)" ;;
  s48b)
    # for session 48 (about 9 device minutes, any Hopper card): the 32-token picks (8-16 pairs per expert, with tails)
    # and the 64-token ones in 2 / 4 expert groups against one, then one case per test function, parts 2 and 3
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    groups_probe 200 --tokens 128,256,384 --groups 2,4
    one_case_part 160 2
    one_case_part 160 3 ;;
  s47a)
    # session 47 (about 9 device minutes; H200): TritonMoEConfig.expert_groups (the experts in 2 / 4 / 8 groups, each
    # with its own route and FC1 -> FC2 launch pair on its own stream): its GPU tests (bits of one group, graph
    # replays), then layer probes against the defaults at 16 / 64 / 256 tokens (bench/expert_groups_probe.py), then
    # the first third of one case per test function (tools/one_case_each.py)
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_gpu_tests 150 "expert_groups and (T16 or T64 or graph)"
    groups_probe 300
    one_case_part 100 1 ;;
  s47b)
    # session 47 (about 9 device minutes, any Hopper card): the other two thirds of one case per test function
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    one_case_part 260 2
    one_case_part 260 3 ;;
  s46a)
    # for session 47 (about 9 device minutes, any Hopper card): the Gluon GPU tests other than graph replays, which
    # run 49 cut after 27 (collection order) at its 270 s limit
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_gpu_tests 540 "gluon and not cuda_graph_replay" ;;
  s45b)
    # for session 46 (about 9 device minutes, any Hopper card): 42 GPU tests that have not run on session 45's split of
    # the host module (kernels/triton_{config,tiles,policy,route,launch,support}.py): the second-stream bit tests (run
    # 48 cut 10 of them), the graph replays of the chunked route, the merged 256-token, tail, f8x2 and
    # warp-specialized tiles (the test names pick them; a fresh machine compiles each tile once)
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_gpu_tests 520 "side_stream_keeps or side_stream_on_odd or (cuda_graph_replay and (tail_tiles or merged \
or f8x2 or warp_specialized_fcs or chunked_route))" ;;
  s44a)
    # for session 44 (one call, about 8 device minutes): the full benchmark and the demo with session 43's defaults
    # from 176 pairs per expert (SwiGLU's persistent ws tile with the gated ws FC1 too; run 46 timed it on an H100
    # only), then both activations' default test (the ws tile picked, float64, the fallback on an unaligned x) and
    # the gated ws FC1's tests (float64, bits, graph replay: its persistent kernel's prologue changed after run 46)
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 400 $OUT/log.txt
    moe_gpu_tests 250 "default_from_176 or gated_ws_fc1" ;;
  s45a)  # (needs bench/results/run47/decode_ws_forms.patch: removed after run 47's call 4)
    # for session 45 (about 8 device minutes): the decode ws tiles' forms ("_d4": 4 bf16 stages, "_p8": 8 producer
    # warps and one consumer warpgroup, "_p8d4": both): their bit tests (a hang ends at the tests' timeout), then layer
    # probes at 16 / 64 / 256 tokens against the defaults and "_pf" (run 47: 1.6-1.9x the defaults' time), both
    # activations and shapes
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    smoke_tests 200 "decode_ws_forms or decode_ws_p8d4"
    for W in w m; do
      A=squared_relu; [ $W = m ] && A=swiglu
      F16=${W}16_wsb_pf,${W}16_wsb_pf_d4,${W}16_wsb_pf_p8,${W}16_wsb_pf_p8d4
      F32=${W}32_wsb_pf,${W}32_wsb_pf_d4,${W}32_wsb_pf_p8,${W}32_wsb_pf_p8d4
      D16=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x D235=s16_f8q_s2_gf_g1_f128_st  # (the 16-token defaults)
      D256=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt
      [ $W = m ] && D16=s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x D235=$D16 D256=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt
      probe_shapes 80 16,64 $A $D16,$F16 qwen3-30b-a3b
      probe_shapes 80 16,64 $A $D235,$F16 qwen3-235b-a22b
      probe_shapes 80 256 $A $D256,$F32 qwen3-30b-a3b qwen3-235b-a22b
    done
    layer_probe_summary 30 ;;
  s44c)
    # session 44 (about 9 device minutes): "_pf" (ws_prefetch) and the decode-sized persistent ws tiles: their bit
    # tests (a wrong ring position hangs: the tests' timeout ends it, then the probes still run), then layer probes at
    # 16 / 64 / 256 tokens against the defaults (both activations and shapes; the ws tiles with and without the
    # prefetch), then "_pf" against the persistent defaults at 4096 tokens
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    smoke_tests 240 "ws_prefetch"
    W16=w16_wsb_pf,w16_wsb_pf+ws_prefetch=0 M16=m16_wsb_pf,m16_wsb_pf+ws_prefetch=0
    probe_shapes 70 16,64 squared_relu s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x,$W16 qwen3-30b-a3b
    probe_shapes 70 16,64 squared_relu s16_f8q_s2_gf_g1_f128_st,$W16 qwen3-235b-a22b
    probe_shapes 70 256 squared_relu m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt,w16_wsb_pf,w32_wsb_pf \
      qwen3-30b-a3b qwen3-235b-a22b
    probe_shapes 70 16,64 swiglu s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x,$M16 qwen3-30b-a3b qwen3-235b-a22b
    probe_shapes 70 256 swiglu m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw_f1xt,m16_wsb_pf,m32_wsb_pf \
      qwen3-30b-a3b qwen3-235b-a22b
    persistent_ab_4096 90 _pf
    layer_probe_summary 30 ;;
  s44b)
    # for session 44 (about 4 device minutes): "_p_s4" (4 token stages, 6 fp8 weight stages, 216 KiB) against the
    # persistent defaults at 3 stages: the same bits (30b at 4096 tokens), then probes at 4096 tokens, both
    # activations and shapes, two alternating rounds
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    smoke_tests 150 "persistent_ws_at_4_stages"
    persistent_ab_4096 110 _s4
    layer_probe_summary 24 ;;
  s43b)
    # session 43 (about 5 device minutes): the gated ws FC1's GPU tests (a hang in the persistent form ends at the
    # tests' timeout, then the probes still run), then SwiGLU layer probes at 4096 tokens against the default, both
    # shapes, alternating, two rounds
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    smoke_tests 200 "gated_ws_fc1"
    C=x256m_sa_t32_ws_p,x256m_sa_t32_wsb_p
    probe_shapes 110 4096 swiglu "$C,$C" qwen3-235b-a22b qwen3-30b-a3b
    layer_probe_summary 22 ;;
  s43c)
    # session 43 (about 4 device minutes): the persistent ws FCs on the 128-token tiles at 2048 tokens (128 pairs
    # per expert; run 43 found the one-tile ws FCs slower there), at 3 and 4 stages (136 / 168 KiB), against the
    # defaults, both activations (SwiGLU with the gated ws FC1), both shapes, alternating, two rounds
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    P=+ws_persistent=1
    S=l128w_sa_t32a_s2,l128w_sa_t32a_s2_wsb$P,l128w_sa_t32a_s2_wsb$P+fc1_stages=4+fc2_stages=4
    G=l128m_sa_t32_s2_ws+fc1_ws=1+fc1_gate_merge=0$P
    W=l128m_sa_t32_s2,$G,$G+fc1_stages=4+fc2_stages=4
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      probe_shapes 100 2048 squared_relu "$S,$S" $shape
      probe_shapes 100 2048 swiglu "$W,$W" $shape
    done
    layer_probe_summary 50 ;;
  s43a)
    # for session 43 (one call, about 8 device minutes): the full benchmark and the demo with session 42's defaults
    # from 176 pairs per expert (the persistent ws FCs, both activations; run 45 timed them on an H100 only), then
    # their GPU tests: the squared-ReLU default's float64 / graph / fallback test, the persistent tiles' bit tests
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader)" > $OUT/log.txt
    moe_bench_and_demo 400 $OUT/log.txt
    moe_gpu_tests 120 "default_from_176 or (release_and_epilogue and _p)" ;;
  s42e)
    # session 42 (machines scarce: one call, about 9 device minutes): the GPU tests of session 41's "_ta" / "_se" /
    # "_p" and session 42's "_d3" (``ws_dstages``: 3 bf16 weight stages) on 30b at 4096 tokens and their graph
    # replays (the odd shape's cases in s42c), then s42d's squared-ReLU probes at 4096 tokens with "_d3" too (235b
    # first: the shape where the target is tight; alternating, two rounds), all in one call
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    smoke_tests 190 "release_and_epilogue and not odd"
    C=x256w_sa_t32a_wsb_s4,x256w_sa_t32a_wsb_s4_d3,x256w_sa_t32a_wsb_s4_ta,x256w_sa_t32a_wsb_s4_se
    C=$C,x256w_sa_t32a_wsb,x256w_sa_t32a_wsb_p  # (the persistent one last: a hang ends the run)
    for shape in qwen3-235b-a22b qwen3-30b-a3b; do
      timeout 130 python3 bench/triton_moe_probe.py --shape $shape --tokens 4096 --activation squared_relu \
        --configs "$C,$C" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 26 ;;
  s42c)
    # for session 42 (about 5 device minutes): the GPU tests of session 41's three prepared forms of the ws kernels
    # (compile-checked only): "_ta" (``ws_thread_arrive``: the consumers free each step's stages with one arrival per
    # thread, no 256-thread barrier per K step), "_se" (``ws_staged_epilogue``: the epilogue tile staged whole in
    # shared memory, one barrier, in place of 16 rounds of the compiler's conversion) and "_p" (``ws_persistent``: one
    # program per SM over the live tiles, 3 token stages). Each must give the bits of its tile without the form;
    # graph replays. Then s42d
    smoke_tests 280 "release_and_epilogue" ;;
  s42d)
    # for session 42, after s42c passed (about 6 device minutes): probes at 4096 tokens of the three forms against the
    # default, in one call, alternating (squared ReLU: the default "_wsb_s4" and its "_ta" / "_se" / "_ta_se", the
    # 3-stage "_wsb" and its persistent "_p" / "_p_ta"; SwiGLU: the default and "_ws" with each form)
    C=x256w_sa_t32a_wsb_s4,x256w_sa_t32a_wsb_s4_ta,x256w_sa_t32a_wsb_s4_se,x256w_sa_t32a_wsb_s4_ta_se
    C=$C,x256w_sa_t32a_wsb,x256w_sa_t32a_wsb_p,x256w_sa_t32a_wsb_p_ta
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 170 python3 bench/triton_moe_probe.py --shape $shape --tokens 4096 --activation squared_relu \
        --configs "$C,$C" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    twin_probes 120 4096 swiglu ws,ws_ta,ws_se,ws_p
    layer_probe_summary 26 ;;
  s42b)
    # for session 42, after s42a (about 3 device minutes): where the ws FC2's long-scoreboard stalls sit (run 43's ncu
    # of "_wsb_s4": FC2 10.4 cycles per issued instruction, tensor pipe 41% active, L2 51% and DRAM 37% busy, issue
    # slots 28%: nothing saturated, so latency; the details page has no per-instruction samples). The source page
    # gives stall samples per SASS instruction, so the consumers' waits (deq_ready / x_ready) and the producer's
    # (w_ready / deq_empty, its scale words) can be told apart
    timeout 200 ncu --clock-control none --kernel-name regex:"_fc2_ws" --launch-skip 2 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
      python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 4096 --activation squared_relu \
      --configs x256w_sa_t32a_wsb_s4 --once > $OUT/ncu_src_fc2_ws.csv 2> $OUT/ncu_src.err
    echo "ncu rc=$?" >> $OUT/ncu_src.err; tail -2 $OUT/ncu_src.err; gzip -f $OUT/ncu_src_fc2_ws.csv ;;
  s42a)
    # for session 42 (one call, about 7 device minutes): the full benchmark and the demo with the squared-ReLU ws
    # default and its 16-byte epilogue stores (session 41; run 44 measured them on H100s only), then the ws default's
    # GPU tests (float64, graph replay, the fallback on an unaligned x)
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader)" > $OUT/log.txt
    moe_bench_and_demo 400 $OUT/log.txt
    moe_gpu_tests 120 "default_from_176 or (warp_specialized and wsb_s4 and not sx)" ;;
  s41d)
    # session 41, call 4: the ws epilogues store through a row layout (16-byte stores; was 128 2-byte stores per
    # thread). A/B at 4096 tokens in this one call: the new kernel file, the old one
    # (.devcarry/ab/_gluon_ws_kernel_old.py = git show 5ef8484:megatron_mxfp8_moe/kernels/_gluon_ws_kernel.py, and
    # _new.py the working file; carry .devcarry), the new one again; then bench/moe_layer.py at 4096
    # (the first try's smoke run, this selection: 14 passed before its 120 s limit, none failed; not repeated)
    K=megatron_mxfp8_moe/kernels/_gluon_ws_kernel.py
    for v in new old new; do
      cp .devcarry/ab/_gluon_ws_kernel_$v.py $K
      twin_probes 70 4096 squared_relu ""
      [ $v = old ] || twin_probes 80 4096 swiglu ws
      mv $OUT/probe.jsonl $OUT/probe_$v$(ls $OUT | grep -c "probe_$v").jsonl
    done
    for f in $OUT/probe_*.jsonl; do echo "$f"; cp $f $OUT/probe.jsonl; layer_probe_summary 22; done; rm $OUT/probe.jsonl
    mkdir -p $OUT/moe
    timeout 170 python3 bench/moe_layer.py --tokens 4096 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -6 $OUT/moe_bench.log ;;
  s41c)
    # session 41, call 2 (s41a's benchmark ran out of memory: it got an H100, where seven 235b compile processes do
    # not fit; bench/moe_layer.py now sizes them by free memory): the full benchmark and the demo
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader)" > $OUT/log.txt
    moe_bench_and_demo 480 $OUT/log.txt ;;
  s41b)
    # for session 41, after s41a: the ws GPU tests that run 43 did not reach, and those of "_sx"
    moe_gpu_tests 400 "warp_specialized and not odd and not (wsb_s4 and not sx)" ;;
  s40f)
    # session 40, call 6: "_wsb_s4" as the squared-ReLU default from 176 pairs per expert (after s40e: 7.5-8.6% faster
    # on 235b at 4096 tokens, a tie on 30b). Its GPU tests (float64, graph replay, the default and its fallback on an
    # unaligned x), then bench/moe_layer.py at 4096 tokens (both shapes, against mcore / vllm BF16 in the same run)
    moe_gpu_tests 200 "(warp_specialized and wsb_s4) or default_from_176"
    mkdir -p $OUT/moe
    timeout 300 python3 bench/moe_layer.py --tokens 4096 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -12 $OUT/moe_bench.log ;;
  s40e)
    # session 40, call 5: the weight ring split from the token ring (weights 2 * STAGES steps ahead, freed by the
    # producer itself; after s40d: the scale words a step ahead took the ws FC1 635 -> 534 us, FC2 593 -> 513, and
    # "_wsb_s4" 6-8% ahead of the default on 235b). Smoke tests, probes at 4096 tokens (squared ReLU; SwiGLU "_ws"),
    # the GPU tests
    smoke_tests 150 "warp_specialized_fcs_match_float64 and odd and x256w" || exit 0
    twin_probes 150 4096 squared_relu ws,wsb,ws_s4,wsb_s4
    twin_probes 90 4096 swiglu ws
    layer_probe_summary 20
    moe_gpu_tests 240 "warp_specialized" ;;
  s40d)
    # session 40, call 4 (after s40b's ncu: the ws FCs' tensor pipe 34-36% active, warps stalled on long scoreboard
    # 63% of their cycles, one CTA per SM): the producer's scale loads one K step ahead (``_scale_word``). Smoke tests,
    # probes at 4096 tokens (squared ReLU, both shapes), ncu of the ws FCs (tensor pipe, stalls)
    smoke_tests 150 "warp_specialized_fcs_match_float64 and odd and x256w" || exit 0
    twin_probes 150 4096 squared_relu ws,wsb,ws_s4,wsb_s4
    layer_probe_summary 20
    timeout 150 ncu --clock-control none --kernel-name regex:"_fc[12]_ws" --launch-skip 2 --launch-count 2 --set full --print-details all \
      python3 bench/triton_moe_probe.py --tokens 4096 --activation squared_relu --configs x256w_sa_t32a_wsb_s4 \
      --once > $OUT/ncu_wsb_s4.txt 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_wsb_s4.txt
    grep -n "  _fc\|Duration  \|Pipe Tensor Cycles Active\|Stall Long Scoreboard\|Stall Wait  \|Stall Barrier  \|Issue Slots Busy" \
      $OUT/ncu_wsb_s4.txt | head -30 ;;
  s40b)
    # session 40, call 3 (after call 2 ran s40a: the "_ws" tiles correct, 3 smoke tests passed, and 0-11% slower at
    # 4096 tokens; profile 30b: the ws FC1 632.3 us, the ws FC2 585.2 against the Triton FCs' 611.9 / 641.9 with their
    # tails): ncu (full set) of the Triton FCs of the default and of the ws FCs (30b, squared ReLU, 4096 tokens), and
    # probes of the rings at 4 stages ("_s4")
    ncu_fcs 150 4096 4 "  _fc\|Duration\|Compute (SM) Throughput\|Memory Throughput\|L2 Cache Throughput\|L1/TEX Cache Throughput\|Warp Cycles Per Issued\|Issue Slots Busy\|Registers Per\|Achieved Occupancy" \
      60 x256w_sa_t32a x256w_sa_t32a_wsb
    twin_probes 150 4096 squared_relu ws,wsb,ws_s4,wsb_s4
    layer_probe_summary 20 ;;
  s40a|s40c)
    # (ran as run 43 calls 1-2 (s40a, H200); s40c did not run: call 7 probed 2048 tokens by hand, the tests ran in
    # s40e / s40f) prepared in session 39 (for session 40; two calls of about 8 and 6 device minutes): the ws FCs
    # (fc2_ws "_ws" on the MMA-bound defaults, fc1_ws "_ws1" and both "_wsb" on the squared-ReLU ones; compile-checked
    # only). s40a: a smoke test of each under a timeout (a pipeline that deadlocks hangs), layer probes at 4096 tokens
    # against the defaults (alternating, both activations and shapes), a per-kernel profile (30b, squared ReLU);
    # s40c (first named s40b): probes at 2048 tokens and the GPU tests
    if [ "$1" = s40a ]; then
      smoke_tests 150 "warp_specialized_fcs_match_float64 and odd and x256w_sa_t32a_ws and not ws1" || exit 0
      CASES="4096:squared_relu:ws,ws1,wsb,wsb_k32 4096:swiglu:ws"
    else
      CASES="2048:squared_relu:ws,wsb 2048:swiglu:ws"  # (s40c)
    fi
    for case in $CASES; do twin_probes 150 ${case//:/ }; done
    layer_probe_summary 22
    if [ "$1" = s40a ]; then
      timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 4096 --activation squared_relu \
        --configs "x256w_sa_t32a,x256w_sa_t32a_wsb" > $OUT/profile.jsonl 2> $OUT/profile.err
      profile_summary
    else
      moe_gpu_tests 250 "warp_specialized"
    fi ;;
  s39b|s39c)
    # session 39: the MMA-bound defaults against their "_fold" twins (the tail folded into the main tile, fold_tail),
    # alternating, both activations and shapes: s39b at 4096 tokens (256-token tiles) with a per-kernel profile (30b
    # squared ReLU) and the GPU tests; s39c at 2048 (128-token tiles) and the tests again with what is left
    # (run 42 call 2 ran s39b: the gated "_fold" tiles failed to compile, fixed since; s39c also probes SwiGLU at 4096).
    # Ran as run 42 calls 2-3 (one H100): every "_fold" tile slower or within the spread, 15 GPU tests passed; removed
    # afterwards (bench/results/run42/fold_tail.patch), so these modes no longer run as written
    if [ "$1" = s39b ]; then CASES="4096:squared_relu 4096:swiglu"; else CASES="2048:squared_relu 2048:swiglu 4096:swiglu"; fi
    for case in $CASES; do twin_probes 100 ${case//:/ } fold; done
    layer_probe_summary 22
    if [ "$1" = s39b ]; then
      timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 4096 --activation squared_relu \
        --configs "x256w_sa_t32a,x256w_sa_t32a_fold" > $OUT/profile.jsonl 2> $OUT/profile.err
      profile_summary
    fi
    if [ "$1" = s39b ]; then moe_gpu_tests 400 "folded_tails"; else moe_gpu_tests 300 "folded_tails and (m_sa or 235b)"; fi ;;
  s39a)
    # prepared in session 38 (for session 39; about 8 device minutes): the MMA-bound defaults with the Gluon FC2 behind
    # their "sx_auto" Triton FC1 (``inter_planes``; "_gf2" 256-token blocks in 2 stages, "_gf3" 128-token blocks in 3).
    # Run 41 (one H100): the Gluon FC2 10% faster than the Triton FC2 at 128-token blocks. GPU tests (float64, the
    # Triton form within 1e-2, graph replays), layer probes against the defaults (alternating, both activations, both
    # shapes, 1024 / 2048 / 4096 tokens), a per-kernel profile at 4096 (30b). Ran as run 42 call 1 (one H100): every
    # "_gf" tile 4-18% slower; removed afterwards (bench/results/run42/inter_planes_gf_tiles.patch), so this mode no
    # longer runs as written
    for act in squared_relu swiglu; do
      for t in 4096 2048 1024; do
        D=$(default_tile $t $act)
        G=$(echo $D | sed 's/^\(x256._sa\)_/\1_gf2_/; s/^\(l128._sa\)_/\1_gf3_/')  # the pick's "_gf" twin
        for shape in qwen3-30b-a3b qwen3-235b-a22b; do
          timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens $t --activation $act \
            --configs "$D,$G,$D,$G" >> $OUT/probe.jsonl 2>> $OUT/probe.err
        done
      done
    done
    layer_probe_summary 22
    timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 4096 --activation squared_relu \
      --configs "x256w_sa_t32a,x256w_sa_gf2_t32a" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    moe_gpu_tests 200 "gluon_fc2_behind_the_triton_fc1" ;;
  s38c)
    # session 38 (device starts failed for 40 minutes, so one short call): layer probes first, the
    # "_gw8" tiles against the squared-ReLU default at 1024 / 4096 tokens on both shapes and "_ta" against the default
    # at 256 tokens on 235b (alternating), then the GPU tests of both with what time is left. Ran as run 41 call 1 (on an
    # H100): 18 tests passed, neither form faster; both were removed afterwards (their tiles and tests:
    # bench/results/run41/wide_gluon_and_ta_tiles.patch), so this mode no longer runs as written
    W="l128q_gw8_t32,l128q_gw8_s4_t32"
    for t in 1024 4096; do
      D=$(default_tile $t squared_relu)
      for shape in qwen3-30b-a3b qwen3-235b-a22b; do
        timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens $t --activation squared_relu \
          --configs "$D,$W,$D,$W" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      done
    done
    D=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt
    timeout 80 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 256 --activation squared_relu \
      --configs "$D,${D%_f1xt}_ta,$D,${D%_f1xt}_ta" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    layer_probe_summary 20
    moe_gpu_tests 150 "wide_gluon or all_f8x2_tail" ;;
  s37e)
    # session 37, call 5: the route from several programs above 1024 pairs (route_parallel_pairs=8192 in place of the
    # two chunked launches: 1.5 + 5.6 us at 256 tokens in run 35's profile). Its GPU tests (tables at 2048 / 4096 /
    # 8192 pairs with and without tails, graph replays at 256-1024 tokens), profiles at 256 / 1024 tokens, then layer
    # probes of the picks with and without it (30b, both activations, 256 / 512 / 1024 tokens, alternating)
    moe_gpu_tests 110 "above_1024_pairs"
    for t in 256 1024; do
      D=$(default_tile $t squared_relu)
      timeout 40 python3 bench/triton_moe_probe.py --profile --tokens $t --activation squared_relu \
        --configs "$D,$D+route_parallel_pairs=8192" >> $OUT/profile.jsonl 2>> $OUT/profile.err
    done
    profile_summary
    PICK_TOKENS="256 512 1024" probe_picks "" +route_parallel_pairs=8192 "" +route_parallel_pairs=8192
    layer_probe_summary 40 ;;
  s37d)
    # session 37, call 4: route_parallel is the default (at least 8 programs: s37c's 2 at 16 tokens took 5.8 us against
    # 3.8 for 8 at 64) and the all-f8x2 squared-ReLU pick runs from H 3072 and 0.75 pairs per expert. The route tables
    # on the GPU (three routings per case) and the graph replays of that pick (12 tokens new), the profile at 16
    # tokens, then the full benchmark and the demo
    moe_gpu_tests 100 "(one_program_route and parallel) or large_hidden_squared_relu_default"
    D=$(default_tile 16 squared_relu)
    timeout 40 python3 bench/triton_moe_probe.py --profile --tokens 16 --activation squared_relu \
      --configs "$D,$D+route_parallel=0" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt ;;
  s37c)
    # session 37, call 3: route_parallel (``_route_parallel_kernel``: up to 1024 pairs from CHUNK / 64 programs that
    # each plan from the histogram of all pairs and scatter 64 pairs; no sort, scratch or barrier; the same tables).
    # Run 40 call 1: the one-program route 8.4 us of a 231 us layer at 64 tokens (30b squared ReLU). Its GPU tests
    # (tables against route_reference on three routings per case, graph replays), layer probes of choose_config's
    # picks with and without it (alternating, both activations, 8-128 tokens), profiles at 16 / 64 / 128 tokens.
    # (After calls 3 and 4 the bool field became route_parallel_pairs, an int: these modes no longer run as written)
    moe_gpu_tests 200 "one_program_route or route_in_registers"
    PICK_TOKENS="8 16 64 128" probe_picks "" +route_parallel=1 "" +route_parallel=1
    layer_probe_summary 40
    for t in 16 64 128; do
      D=$(default_tile $t squared_relu)
      timeout 60 python3 bench/triton_moe_probe.py --profile --tokens $t --activation squared_relu \
        --configs "$D,$D+route_parallel=1" >> $OUT/profile.jsonl 2>> $OUT/profile.err
    done
    profile_summary ;;
  s37a)
    # prepared in session 36 (for session 37, run first; about 4 device minutes): "_sp" (``split_pair_rows``), the
    # launch that splits the all-f8x2 tile's FC1 rows for its FC2 on the pairs' positions only (512 of 2576 at 64
    # tokens; run 39: that launch costs the 30b layer about 6 us, what the tile loses there). Its bit tests first (same
    # bits as "_f128_st", split buffers NaN-poisoned; graph replay), then layer probes against the 16-token twin and
    # "_f128_st" at 64 / 128 tokens on both shapes, a profile (30b, 64 tokens), and the split launch at the layer's
    # own sizes (bench/split_rows_probe.py, corrected after run 39). Ran in session 37 (run 40 call 1): "_sp" saved
    # under 1%, so it was removed afterwards (this mode no longer runs as written)
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128_st
    moe_gpu_tests 120 "split_of_the_pairs_rows or (graph_replay_of_the_f8x2_gluon_fc1 and st_sp)"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 90 python3 bench/triton_moe_probe.py --shape $shape --tokens 64,128 --activation squared_relu \
        --configs "$S,$G,${G}_sp,$S,$G,${G}_sp" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 30
    profiles_sq64 60 "$S,$G,${G}_sp"
    split_probe 60 ;;
  s37b)
    # prepared in session 36 (for session 37, after s37a; about 5 device minutes): the squared-ReLU pick of H >= 4096
    # ("_f128_st" in place of the 16-token twin, ``_ALL_F8X2_FROM_HIDDEN``) was fit on two shapes. Layer probes, twin /
    # "_f128_st" alternating, on other shapes (--dims EXPERTS,TOPK,H,I; squared ReLU's FC1 has 2 * I rows): an H
    # between the two (3072), a DeepSeek-V3-like H 7168, a Mixtral-like 8 experts top-2 with a long FC2 K; then q1
    # against "_f128_st" at 12-15 tokens on 235b (run 39 call 6: a tie at 12, "_f128_st" 4-11% faster at 14). If
    # s37a made "_sp" the better form, put ${G}_sp in G here
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128_st
    P="python3 bench/triton_moe_probe.py --activation squared_relu"
    { timeout 90 $P --dims 128,8,3072,1152 --tokens 16,64,128 --configs "$S,$G,$S,$G"
      timeout 120 $P --dims 128,8,7168,1024 --tokens 16,64,128 --configs "$S,$G,$S,$G"
      timeout 90 $P --dims 8,2,4096,7168 --tokens 4,16,32 --configs "$S,$G,$S,$G"
      timeout 90 $P --shape qwen3-235b-a22b --tokens 12,13,14,15 --configs "q1,$G,q1,$G"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    layer_probe_summary 30 ;;
  s36e)
    # session 36, call 6: below one pair per expert q1 runs (_Q1_BELOW_TWIN_PAIRS); run 37 found it 2-5% faster than the
    # twin at 10-14 tokens on 235b squared ReLU, and "_f128_st" is 2-10% faster than the twin there. Does "_f128_st"
    # overtake q1 below 16 tokens on 235b? q1 / "_f128_st" alternating at 8-14 tokens
    timeout 200 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 8,10,12,14 \
      --activation squared_relu --configs "q1,s16_f8q_s2_gf_g1_f128_st,q1,s16_f8q_s2_gf_g1_f128_st" \
      > $OUT/probe.jsonl 2> $OUT/probe.err
    layer_probe_summary 30 ;;
  s36d)
    # session 36, call 4: the race probe (bench/gluon_tail_race_probe.py, 40 fresh inputs each, against the Triton f8x2
    # form within 1e-2) of the new squared-ReLU pick on 235b ("default" there is "_f128_st") at 16 / 64 / 128 tokens,
    # and of the same tile on 30b at 64
    { timeout 150 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 40 --dims 128,8,4096,1536 \
        --cases 16:default,64:default,128:default
      timeout 80 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 40 \
        --cases 64:s16_f8q_s2_gf_g1_f128_st
    } > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err ;;
  s36c)
    # session 36, call 3: s36b found the all-f8x2 "_f128_st" faster than the squared-ReLU twin on 235b at 16-128 tokens
    # (2-8%) and slower on 30b (2-3%), so choose_config picks it from H 4096 (``_ALL_F8X2_FROM_HIDDEN``): the full
    # benchmark and the demo, then the GPU tests of that pick (graph replays on 235b) and the f8x2 tests on 235b that
    # compare with the twin's Triton form
    # (first the split launch at other program shapes: bench/split_rows_probe.py, ~8.7 us of the all-f8x2 tile's layer)
    split_probe 90
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt
    moe_gpu_tests 150 "large_hidden_squared_relu_default or (f8x2_fc1_twins_match and 235b and s16k_sx4p_f4 and not g128 and not f1x64) or (f8x2_gluon_fc1_tiles_match and f128_st and 235b and not g128)" ;;
  s36a)
    # prepared in session 35 (for session 36, run first): "_g128", one token scale per 128-value K step in the split
    # rows (``step_scales``; compile-checked only: the f8x2 FC2's FMULs 64 -> 0 and global loads 56 -> 32 in its code,
    # registers no more). Other bits than the 32-block split: first its float64 GPU tests (twins within 1e-2 and 1.5x
    # of their dequantizing forms' error; graph replay), then layer probes against the defaults (30b, both
    # activations, 64 / 256 tokens; 235b squared ReLU at 64 with "_f128_st" and its "_g128" form), then a profile
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128_st
    moe_gpu_tests 200 "g128"
    PICK_TOKENS="64 256" probe_picks "" _g128 "" _g128
    probe_sq64 qwen3-235b-a22b "$S,${S}_g128,$G,${G}_g128,$S,${S}_g128,$G,${G}_g128"
    layer_probe_summary 30
    profiles_sq64 60 "$S,${S}_g128,$G,${G}_g128" ;;
  s36b)
    # prepared in session 35 (for session 36, after s36a): run 38 call 3 found the all-f8x2 "_f128_st" (FC2's split
    # scales transposed) 4.5% faster than the squared-ReLU default on 235b at 64 tokens (831.5, 839.4 against 866.5,
    # 883.6 us) but 2.2% slower on 30b (238.0, 238.2 against 234.3, 231.5). Does that hold across the default's range
    # (1-8 pairs per expert: 16-128 tokens)? Layer probes alternating with the default, both shapes, then the float64
    # GPU tests of "_f128_st" (bit tests ran in run 38; these hold it to the oracle on its own)
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128_st
    for shape in qwen3-235b-a22b qwen3-30b-a3b; do
      for t in 16 32 64 128; do
        timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens $t --activation squared_relu \
          --configs "$S,$G,$S,$G" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      done
    done
    layer_probe_summary 30
    moe_gpu_tests 150 "f8x2_gluon_fc1_tiles_match and f128_st and not g128" ;;
  s35c)
    # session 35, call 3: s35b found the transposed scales good for the FC2 (117.6 -> 111.6 us, 235b 411.6 -> 391.7)
    # and bad for the f8x2 FC1 (x's columns scattered: 101.6 -> 107.6, 382.0 -> 409.6), so "_st" now transposes FC2's
    # split rows only. Layer probes of the all-f8x2 "_f128_st" / "_f128_fs_st" against the squared-ReLU default at
    # 64 tokens (30b, 235b), per-kernel profile (30b), then the graph replays left over from s35b
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128_st; F=s16_f8q_s2_gf_g1_f128_fs_st
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do probe_sq64 $shape "$S,$G,$F,$S,$G,$F"; done
    layer_probe_summary 30
    profiles_sq64 60 "$S,$G,$F"
    moe_gpu_tests 90 "graph_replay_of_the_f8x2_gluon_fc1" ;;
  s35b)
    # session 35, call 2: the split rows' scales transposed ("_st", ``split_scales_t``; the same bits). Run 38 call 1
    # (s35a) timed the "_f128" tile's f8x2 FC2 at 109.8 us with every token column's scales from one row against 117.6
    # (235b 395.3 / 411.6): per-kernel profiles, layer probes of the defaults at 64 / 256 tokens with and without
    # "_st" (both activations, 30b), the squared-ReLU default against "_st" and the all-f8x2 "_f128_fs_st" on 235b;
    # then the GPU tests of the "_st" tiles (bit-equal to their row-major forms; graph replays)
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128; F=s16_f8q_s2_gf_g1_f128_fs
    profiles_sq64 120 "$S,${S}_st,$G,${G}_st,${F}_st" 80 "$S,${S}_st,${G}_st"
    PICK_TOKENS="64 256" probe_picks "" _st "" _st
    probe_sq64 qwen3-235b-a22b "$S,${S}_st,${F}_st,$S,${S}_st,${F}_st"
    layer_probe_summary 30
    moe_gpu_tests 170 "transposed_split_scales or graph_replay_of_the_f8x2_gluon_fc1" ;;
  s35a)
    # prepared in session 34 (for session 35, run first): run 37 call 4 timed the "_f128" tile's f8x2 FC2 with parts
    # left out (30b squared ReLU, 64 tokens): 116.9 us whole, 114.8 without its split-row copies, 114.9 without its
    # store, 81.3 without its weight copies. Its compute alone takes 70% of its time; is the FC1's (102 us whole) the
    # same? The same probes on the f8x2 FC1 (``~fc1=N``), the FC2 with every token column's block scales read from one
    # row (``~8``: is the scattered scale load by position the FC2's extra latency?) and that FC2 on 8 warps
    # ("_f128w8": two warpgroups of 64 rows, twice the warps per SM to hide the chain). Per-kernel profiles (30b, 235b);
    # the tests of "_f128w8" and those left over from run 37; layer probes of "_f128w8" against the default
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128; W=s16_f8q_s2_gf_g1_f128w8
    C="$G,$G~fc1=1,$G~fc1=2,$G~fc1=4,$G~fc2=1,$G~fc2=8,$G~fc2=9,$G~fc1=1~fc2=1,$S,$S~fc1=1,$W,$W~fc2=1"
    profiles_sq64 200 "$C" 90 "$G,$G~fc1=1,$G~fc2=1,$G~fc2=8,$W"
    moe_gpu_tests 200 "f128w8 or (f8x2_fc1_twins_match and 235b-T64) or (f8x2_gluon_fc1_tiles_match and 235b)"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do probe_sq64 $shape "$S,$W,$G,$S,$W,$G"; done
    layer_probe_summary 30 ;;
  s34d)
    # session 34, call 4: what the f8x2 FC2's nine points of DRAM throughput below its FC1 go to (runs 36-37: the kernel,
    # not the weight shape). The "_f128" tile's f8x2 FC2 with parts left out (``timing_skip``, wrong output, timing
    # only: ~1 no weight copies, ~2 no split-row copies, ~4 no store executed, ~3 neither copy), per-kernel profile at
    # 64 tokens, squared ReLU, 30b then 235b
    G=s16_f8q_s2_gf_g1_f128
    profiles_sq64 120 "$G,$G~2,$G~4,$G~1,$G~3,$G" 60 "$G,$G~2,$G~4" ;;
  s34c)
    # session 34, call 3: the full benchmark and the demo with the 16-token f8x2 twins from one pair per expert (s34b:
    # q1 3-5% faster at 10-14 tokens on 30b, the twins at 16-24), the twins' remaining tests (235b, 64 tokens), the race
    # probe of the defaults at 16 / 24 tokens
    benchmark_tests_race 60 "f8x2_fc1_twins_match and 235b-T64" 16:default,24:default ;;
  s34b)
    # session 34, call 2: s34a found the 16-token f8x2 twins ahead of q1 from one pair per expert (16 tokens) and 5-12%
    # behind at 8; choose_config now picks them from _Q1_BELOW_TWIN_PAIRS (1.0). Where between 0.5 and 1.0 they cross:
    # q1 against the twins at 10, 12, 14 tokens, both shapes, both activations. Then the tests of the twins at 16 / 24
    # tokens (float64 oracle, 1.5x the dequantizing tile's error), the default picks at 16 / 24 in graph replays, the
    # route in registers at 8 / 16
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      for pair in squared_relu:s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x swiglu:s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x; do
        timeout 70 python3 bench/triton_moe_probe.py --shape $shape --tokens 10,12,14 --activation ${pair%%:*} \
          --configs "q1,${pair#*:},q1,${pair#*:}" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      done
    done
    layer_probe_summary 30
    moe_gpu_tests 330 "f8x2_fc1_twins_match or (default_gluon_tiles and not (64 or 384 or 512 or 640 or 1024)) or \
(route_in_registers and (8-swiglu or 16-squared_relu))" ;;
  s34a)
    # prepared in session 33 (for session 34, run first): why the FC2s stream slower than the f8x2 FC1 on the same bytes
    # (run 36 call 4, ncu, 30b squared ReLU, 64 tokens: FC1 82.8% of DRAM throughput, the f8x2 / dequantizing FC2s
    # 73.6% / 73.8%; more tiles per program did not help, call 5). The shape or the kernel? The same layer with H and I
    # traded ("--dims 128,8,1536,1024": FC1 [E, 2048, 1536], FC2 [E, 1536, 2048], the same bytes) against 30b: the
    # per-kernel profile of the squared-ReLU default and of the all-f8x2 "_f128" tile (whose FCs differ only in their
    # A operand and store), then layer probes.
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x; G=s16_f8q_s2_gf_g1_f128
    { for dims in 128,8,2048,768 128,8,1536,1024; do
        timeout 60 python3 bench/triton_moe_probe.py --dims $dims --profile --tokens 64 --activation squared_relu \
          --configs "$S,$G"
      done; } > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    for dims in 128,8,2048,768 128,8,1536,1024; do
      timeout 60 python3 bench/triton_moe_probe.py --dims $dims --tokens 64 --activation squared_relu \
        --configs "$S,$G,$S,$G" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    # ... and at 8-24 tokens (up to 1.5 pairs per expert) the routed GEMV "q1" is still the pick, chosen in session 6
    # against Triton 16-token tiles long since replaced: against the 16-token Gluon twins with the f8x2 FC1 now
    # (16 tokens: squared ReLU 0.627x / 0.649x of vllm, run 36)
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      for pair in squared_relu:${S} swiglu:s16k4_sx4p_m3_g_s2_n64_c2_st4_sw_f1x; do
        timeout 70 python3 bench/triton_moe_probe.py --shape $shape --tokens 8,16,24 --activation ${pair%%:*} \
          --configs "q1,${pair#*:},q1,${pair#*:}" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      done
    done
    layer_probe_summary 30
    # the f8x2 tile tests, whose error bound is now the dequantizing tile's (session 33)
    moe_gpu_tests 120 "f8x2_fc1_twins_match or f8x2_gluon_fc1_tiles_match" ;;
  s33e)
    # session 33, call 5: the Gluon f8x2 FC2 on 2 / 4 adjacent 128-row tiles per program ("_nt2" / "_nt4",
    # fc2_n_tiles; the same bits; no gain, code not kept: bench/results/run36/fc2_n_tiles.patch): s33d's ncu found that FC2 at 73.6% of DRAM throughput against
    # its FC1's 82.8% on the same bytes, instructions and occupancy, with 2576 programs of 12 steps against 1932 of 16.
    # Layer probes at 64 tokens against the default, alternating (30b, then the per-kernel profile, then 235b), then
    # the bit tests against one tile per program and a graph replay.
    D=$(default_tile 64 squared_relu); G=s16_f8q_s2_gf_g1_f128
    timeout 90 python3 bench/triton_moe_probe.py --tokens 64 --activation squared_relu \
      --configs "$D,${G}_fs,${G}_fs_nt2,${G}_fs_nt4,$D,${G}_fs,${G}_fs_nt2,${G}_fs_nt4" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    layer_probe_summary 30
    timeout 50 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
      --configs "${G}_fs,${G}_fs_nt2,${G}_fs_nt4" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    timeout 90 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 64 --activation squared_relu \
      --configs "$D,${G}_fs,${G}_fs_nt2,${G}_fs_nt4,$D,${G}_fs,${G}_fs_nt2,${G}_fs_nt4" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    layer_probe_summary 30
    moe_gpu_tests 110 "(tiles_per_program and T64 and _fs_) or (graph_replay and nt2)" ;;
  s33d)
    # session 33, call 4: why the FC2 of the squared-ReLU default streams slower than its FC1 on the same bytes (30b, 64
    # tokens, run 36: the f8x2 FC1 102.1 us, the dequantizing Gluon FC2 on 64 rows 116.1, the f8x2 FC2 on 128 rows
    # 117.2): ncu (full set) of both FCs of the default and of "s16_f8q_s2_gf_g1_f128" (the f8x2 FC2 on 128 rows)
    ncu_fcs 120 64 2 "_kernel\|Duration\|DRAM Throughput\|Warp Cycles Per Issued\|Achieved Occupancy\|Registers Per\|Waves Per\|Issue Slots Busy\|L2 Hit" \
      40 $(default_tile 64 squared_relu) s16_f8q_s2_gf_g1_f128 ;;
  s33c)
    # session 33, call 3: the gated twins at 1.5-16 pairs per expert with the gated Gluon f8x2 FC1 (after s33b's probes):
    # the full benchmark and the demo, the GPU tests of choose_config's SwiGLU picks at 64 / 256 tokens (float64 oracle,
    # 40 fresh calls, graph replay, the env switch), the race probe of both activations' defaults at 64 / 256 tokens
    benchmark_tests_race 90 "swiglu and (gluon_defaults or opt_in_gluon_tiles or default_gluon_tiles) and (64 or 256) and not 640" \
      64:default,256:default ;;
  s33a)
    # prepared in session 32 (for session 33, run first): run 35 found the Gluon f8x2 FC1 (128 rows) faster than the
    # dequantizing FC1 and the Gluon f8x2 FC2 (64 rows) slower than the dequantizing FC2 (30b, 64 tokens: 104.8 / 111.3
    # and 136.6 / 118.1 us), with a 6.8-us split launch between them. Does the f8x2 FC2 on 128 rows ("_f128"; 124
    # registers, Triton 3.6) catch up, and what does FC1 writing FC2's split rows itself ("_fs") save? Layer probes at
    # 64 tokens against the default ("_f1x"), alternating (30b, 235b); the per-kernel profile; at 256 tokens the 32-token
    # tile's f8x2 FC1 on 64 rows (180 registers) against the default ("_f1xt"); then the GPU tests (float64 oracle, the
    # "_fs" bits against the split launch, graph replays).
    S=s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw; M=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw; G=s16_f8q_s2_gf_g1
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 100 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --activation squared_relu \
        --configs "${S}_f1x,$G,${G}_f128,${G}_f128_fs,${S}_f1x,$G,${G}_f128,${G}_f128_fs" >> $OUT/probe.jsonl \
        2>> $OUT/probe.err
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 256 --activation squared_relu \
        --configs "${M}_f1xt,${M}_f1x64,${M}_f1xt,${M}_f1x64" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 30
    timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
      --configs "${S}_f1x,$G,${G}_f128,${G}_f128s4,${G}_fs,${G}_f128_fs" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    moe_gpu_tests 170 "f128 or _fs" ;;
  s33b)
    # prepared in session 32 (for session 33, after s33a): the gated Gluon f8x2 FC1 (64 gate rows and their up rows per
    # program, two TMA boxes per stage; compile-only so far) on the SwiGLU defaults' 16-token tile ("_f1x"), the
    # 32-token tile's tail ("_f1xt") and both ("_f1xa"). Their GPU tests first (float64 oracle, graph replays), then
    # layer probes against the default, alternating (30b / 235b, 64 / 256 tokens), then the per-kernel profile.
    moe_gpu_tests 200 "f1x and (s16k4 or m32l4) or rejects_a_gated"
    S=s16k4_sx4p_m3_g_s2_n64_c2_st4_sw; M=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --activation swiglu \
        --configs "$S,${S}_f1x,$S,${S}_f1x" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      timeout 75 python3 bench/triton_moe_probe.py --shape $shape --tokens 256 --activation swiglu \
        --configs "$M,${M}_f1xt,${M}_f1xa,$M,${M}_f1xt,${M}_f1xa" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 30
    timeout 50 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation swiglu \
      --configs "$S,${S}_f1x" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary ;;
  s32c)
    # session 32, call 3: the squared-ReLU twins at 1.5-16 pairs per expert with the Gluon f8x2 FC1 (after s32b's
    # probes): the full benchmark and the demo, then the GPU tests of choose_config's squared-ReLU picks at 64 / 256
    # tokens (float64 oracle, 40 fresh calls, graph replay, the env switch)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt
    moe_gpu_tests 90 "squared_relu and (gluon_defaults or opt_in_gluon_tiles or default_gluon_tiles) and (64 or 256) and not 640" ;;
  s32b)
    # session 32, call 2: run 35 call 1 (s32a) found the Gluon f8x2 FC1 faster than the dequantizing "_f1q" FC1 (104.8
    # against 111.3 us, 30b, 64 tokens) and its f8x2 FC2 slower (136.6 against 118.1): the defaults' FC2 fed by that FC1
    # ("_f1x": main tile, 128 rows; "_f1x64": 64 rows; "_f1xt": the 16-token tail; "_f1xa": both). Layer probes
    # alternating with the default (30b / 235b, 64 / 256 tokens; 30b 128), the per-kernel profile, then the GPU tests.
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      D=$(default_tile 64 squared_relu)
      timeout 80 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --activation squared_relu \
        --configs "$D,${D}_f1x,${D}_f1x64,$D,${D}_f1x,${D}_f1x64" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      D=$(default_tile 256 squared_relu)
      timeout 90 python3 bench/triton_moe_probe.py --shape $shape --tokens 256 --activation squared_relu \
        --configs "$D,${D}_f1x,${D}_f1xt,${D}_f1xa,$D,${D}_f1x,${D}_f1xt,${D}_f1xa" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    D=$(default_tile 128 squared_relu)
    timeout 60 python3 bench/triton_moe_probe.py --tokens 128 --activation squared_relu \
      --configs "$D,${D}_f1x,$D,${D}_f1x" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    layer_probe_summary 30
    D=$(default_tile 64 squared_relu); E=$(default_tile 256 squared_relu)
    { timeout 50 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
        --configs "$D,${D}_f1x"
      timeout 50 python3 bench/triton_moe_probe.py --profile --tokens 256 --activation squared_relu \
        --configs "$E,${E}_f1x,${E}_f1xa"; } > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    moe_gpu_tests 200 "f8x2_fc1_twin" ;;
  s32a)
    # prepared in session 31 (for session 32, run first): the squared-ReLU f8x2 tiles with FC1 in Gluon too ("_g1":
    # 128 rows, 3 stages; "_g1n64": 64 rows, 4 stages; no dequant on the consumer's chain): their GPU tests (float64
    # oracle, graph replays, the gated refusal) and the "_gf" FC2's again (its scales now loaded a step ahead, as one
    # word per row; 240 s, which may not reach them all), then layer probes against the default (alternating, 30b and
    # 235b, 64 / 256 tokens), then the per-kernel profile with the "_gf" tile (Triton f8x2 FC1) too: does an FC without
    # dequant stream closer to the rings' 95-98% of HBM read?
    moe_gpu_tests 240 "f8x2_gluon"
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      D=$(default_tile 64 squared_relu); F=s16_f8q_s2_gf
      timeout 90 python3 bench/triton_moe_probe.py --shape $shape --tokens 64 --activation squared_relu \
        --configs "$D,${F}_g1,${F}_g1n64,$D,${F}_g1,${F}_g1n64" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      D=$(default_tile 256 squared_relu); F=m32_f8q_t16_s2_gf
      timeout 90 python3 bench/triton_moe_probe.py --shape $shape --tokens 256 --activation squared_relu \
        --configs "$D,${F}_g1,${F}_g1n64,$D,${F}_g1,${F}_g1n64" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 30
    D=$(default_tile 64 squared_relu); F=s16_f8q_s2_gf
    timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
      --configs "$D,$F,${F}_g1,${F}_g1n64" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary ;;
  s31e)
    # session 31, call 5: the kernels' copy structure without their dequant and MMAs (bench/weight_stream_probe.py
    # --ring: TMA rings of 3-8 stages at the FC1's / FC2's programs per SM), against the HBM read of the same run
    timeout 150 python3 bench/weight_stream_probe.py --ring > $OUT/ring.jsonl 2> $OUT/ring.err
    echo "ring rc=$?" >> $OUT/ring.err
    cat $OUT/ring.jsonl; tail -3 $OUT/ring.err ;;
  s31d)
    # session 31, call 4: the squared-ReLU Gluon FC1 ("_f1q", 128 rows) on 8 warps: two warpgroups of 64 rows share
    # one ring and one copy of the token planes (75 registers, so 3 programs of 8 warps per SM where 4 warps gave 3 of
    # 4), 3 or 4 stages: layer probes (alternating; main tile only, 30b and 235b, 64 / 256 tokens), then the bits
    # against the default (one-off check: 30b, 64 / 256 tokens)
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      for t in 64 256; do
        D=$(default_tile $t squared_relu); W="$D+fc1_warps=8"
        timeout 90 python3 bench/triton_moe_probe.py --shape $shape --tokens $t --activation squared_relu \
          --configs "$D,$W,$W+fc1_stages=4,$D,$W,$W+fc1_stages=4" >> $OUT/probe.jsonl 2>> $OUT/probe.err
      done
    done
    layer_probe_summary 40
    timeout 90 python3 -c "
import dataclasses, sys, torch
sys.path.insert(0, '.')
from bench.moe_layer import rotated_inputs
from megatron_mxfp8_moe.kernels.triton_moe import choose_config, triton_mxfp8_moe
from megatron_mxfp8_moe.tensor import quantize_mxfp8
g = torch.Generator().manual_seed(1)
fc1 = quantize_mxfp8((torch.randn(128, 1536, 2048, generator=g) * 0.02).cuda().bfloat16())
fc2 = quantize_mxfp8((torch.randn(128, 2048, 1536, generator=g) * 0.02).cuda().bfloat16())
for t in (64, 256):
    xs, probs, maps, valid = rotated_inputs(t, 2048, 128, 8, torch.device('cuda'))
    d = choose_config(t, 2048, 768, gated=False, topk=8, experts=128, gluon=True)
    outs = [triton_mxfp8_moe(xs[0], probs[0], maps[0], fc1, fc2, activation='squared_relu', valid_tokens=valid,
                             config=c) for c in (d, dataclasses.replace(d, fc1_warps=8))]
    print('bits', t, torch.equal(*outs), bool(outs[0].isfinite().all()), float(outs[0].float().norm()))
" > $OUT/bits.txt 2>&1; tail -3 $OUT/bits.txt ;;
  s31c)
    # session 31, call 3: does HBM stream the kernels' weight access order (each 128-byte step of a slab's BLOCK_N rows,
    # rows K bytes apart) slower than contiguous step tiles? (bench/weight_stream_probe.py, read-only Triton kernel)
    timeout 240 python3 bench/weight_stream_probe.py > $OUT/stream.jsonl 2> $OUT/stream.err
    echo "stream rc=$?" >> $OUT/stream.err
    cat $OUT/stream.jsonl; tail -3 $OUT/stream.err ;;
  s31b)
    # ran in session 31 (run 34 call 2; every form slower: the code was then removed, bench/results/run34/l2_ahead.patch
    # restores it): after s31a: the "_l2a2" / "_l2a4" tiles (each Gluon FC asks L2 for the weight rows and
    # scale words 2 / 4 steps past its shared-memory ring: more bytes in flight without more shared memory; the same
    # bits): layer probes of choose_config's picks against both (alternating, 64 / 256 tokens, both activations, then
    # 235b squared ReLU), the per-kernel profile at 64 tokens (squared ReLU), then the bit tests
    PICK_TOKENS="64 256" probe_picks "" _l2a2 _l2a4 "" _l2a2 _l2a4
    for t in 64 256; do
      D=$(default_tile $t squared_relu)
      timeout 90 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens $t --activation squared_relu \
        --configs "$D,${D}_l2a2,${D}_l2a4,$D,${D}_l2a2,${D}_l2a4" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    layer_probe_summary 60
    D=$(default_tile 64 squared_relu)
    timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
      --configs "$D,${D}_l2a2,${D}_l2a4" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    moe_gpu_tests 120 "forms_of_the_picks and l2_ahead" ;;
  s31a)
    # prepared in session 30 (for session 31, run first): route_in_registers (the one-program route, up to 1024 pairs,
    # with its counts and position tables in registers: no scratch stores and loads behind barriers; the same
    # tables): its GPU tests, then layer probes of choose_config's picks with and without it (alternating, both
    # activations, 16-128 tokens; 1-4 tokens take the direct GEMV, no route), then the per-kernel profile at 64 tokens
    # (run 33: the scratch route 8.4 us)
    moe_gpu_tests 150 "one_program_route or route_in_registers"
    PICK_TOKENS="16 32 64 128" probe_picks "" +route_in_registers=1 "" +route_in_registers=1
    layer_probe_summary 60
    D=$(default_tile 64 squared_relu)
    timeout 60 python3 bench/triton_moe_probe.py --profile --tokens 64 --activation squared_relu \
      --configs "$D,$D+route_in_registers=1" > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary ;;
  s30c)
    # session 30, call 3: the "_pdl" tiles (fc2_pdl: the Gluon FC2 launched as a programmatic dependent of its FC1,
    # weight copies and scales before griddepcontrol.wait, token planes after): layer probes of choose_config's picks
    # against their "_pdl" form (alternating), the race probe (fresh inputs per call against the Triton form), then
    # the bit tests and graph replays
    probe_picks "" _pdl "" _pdl
    layer_probe_summary 50
    { for act in squared_relu swiglu; do
        timeout 50 python3 bench/gluon_tail_race_probe.py --activation $act --reps 25 \
          --cases 64:$(default_tile 64 $act)_pdl,256:$(default_tile 256 $act)_pdl
      done
    } > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err
    moe_gpu_tests 200 "dependent_launch or (replay_with_gluon_tails and _pdl)" ;;
  s30b)
    # session 30, call 2 (after s30a: the one-factor tiles gave no layer gain): per-kernel CUDA times of choose_config's
    # picks (torch profiler, eager), ncu (full set) of the squared-ReLU FC1 / FC2 launches at 64 and 256 tokens (30b),
    # the race probe at 64 tokens (owed since session 29), graph replays of the defaults at 384 / 512 / 640 tokens
    P="timeout 60 python3 bench/triton_moe_probe.py --profile"
    { for act in squared_relu swiglu; do
        for t in 64 256; do $P --tokens $t --activation $act --configs $(default_tile $t $act); done
      done
      $P --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs $(default_tile 256 squared_relu)
    } > $OUT/profile.jsonl 2> $OUT/profile.err
    profile_summary
    for t in 64 256; do
      timeout ${NCU_TIMEOUT:-110} ncu --clock-control none --kernel-name regex:"_fc[12]_" \
        --launch-skip $((t == 64 ? 2 : 4)) --launch-count $((t == 64 ? 2 : 4)) --set full --print-details all python3 \
        bench/triton_moe_probe.py --tokens $t --activation squared_relu --configs $(default_tile $t squared_relu) \
        --once > $OUT/ncu_sq$t.txt 2>&1
      echo "ncu rc=$?" >> $OUT/ncu_sq$t.txt
      grep -n "_kernel\|Duration\|DRAM Throughput\|Warp Cycles Per Issued\|Achieved Occupancy\|Registers Per\|Theoretical Occ\|Block Limit" \
        $OUT/ncu_sq$t.txt | head -60
    done
    moe_gpu_tests 130 "default_gluon_tiles and (384 or 512 or 640)"
    { timeout 45 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 40 --cases 64:default
      timeout 45 python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 40 --cases 64:default
    } > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err ;;
  s30a)
    # prepared in session 29 (for session 30, run first): fc1_one_factor / fc2_one_factor (one bf16 factor instead of
    # two in every program whose E8M0 bytes are all below 128, decided once per program from all its scale words; the
    # same bits; 13-19% fewer SASS instructions per K-loop iteration, CPU compile): bit tests and graph replays, then
    # kernel probes (FC2 field 8, FC1 field 6 = one factor, FC1 field 7 a register cap; each against the same kernel
    # with scale words), then layer probes of the "_of" tiles against choose_config's picks (alternating)
    moe_gpu_tests 200 "one_factor or (replay_with_gluon_tails and _of)"
    P="timeout 50 python3 bench/gluon_fc2_probe.py"
    { $P --block-t 32 --pairs 16 --gluon 64:3:4:2:0:1,64:3:4:2:0:1:0:1,64:3:4:2:1:1,64:3:4:2:1:1:0:1,128:3:4:1:0:1,128:3:4:1:0:1:0:1
      $P --block-t 16 --pairs 8 --gluon 64:4:4:2:1:1,64:4:4:2:1:1:0:1
      $P --block-t 64 --pairs 48 --gluon 128:3:4:1:1:1,128:3:4:1:1:1:0:1
    } > $OUT/fc2.jsonl 2> $OUT/fc2.err
    F="timeout 50 python3 bench/gluon_fc1_probe.py"
    { $F --hidden 2048 --inter 768 --activation swiglu --gluon 64:3:4:0:1,64:3:4:0:1:1
      $F --hidden 4096 --inter 1536 --activation swiglu --gluon 64:3:4:0:1,64:3:4:0:1:1
      $F --hidden 2048 --inter 1536 --activation squared_relu --gluon 128:3:4:0:1,128:3:4:0:1:1,128:3:4:0:1:1:128
    } > $OUT/fc1.jsonl 2> $OUT/fc1.err
    kernel_probe_summary
    probe_picks "" _of "" _of
    L="timeout 90 python3 bench/triton_moe_probe.py"
    { N=m32l4_sx4p_m_gg_s2_nov_sw; Q=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw
      $L --tokens 384 --configs "$N,${N}_of,$N,${N}_of"
      $L --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs "$Q,${Q}_of,$Q,${Q}_of"
    } >> $OUT/probe.jsonl 2>> $OUT/probe.err
    layer_probe_summary 50 ;;
  s29d)
    # session 29, call 3: choose_config's Gluon twins read their scales as words ("_sw", after calls 1-2 = s29a and
    # s29c with its two cut ring tests): the full benchmark and the demo, then the scale-word bit tests at 1024 tokens
    # (the 128-token tiles' Gluon tails; 64-640 passed in call 1) and the race probe (fresh inputs against the Triton
    # form): squared ReLU 256 tokens (owed since session 28), SwiGLU 384 / 1024
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt
    moe_gpu_tests 60 "scale_words_keep_the_bits and 1024"
    { timeout 45 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 40 --cases 256:default
      timeout 45 python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 30 --cases 384:default,1024:default
    } > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err ;;
  s29a)
    # prepared in session 28 (for session 29, run first): the E8M0 bytes as one int32 per row and K step in the Gluon
    # kernels (scale_words; the same factors, so the same bits; 3-12% fewer SASS instructions in the K loops, CPU
    # compile) and the FC2 without the overlap with one loop iteration per ring turn (fc2_ring: constant stage
    # indices; 5-12% fewer instructions per step): the bit tests, then kernel probes (FC2 fields 6 / 7 = scale words /
    # ring, FC1 field 5 = scale words); the layer probes are s29c
    moe_gpu_tests 240 "scale_words or fc2_ring"
    P="timeout 60 python3 bench/gluon_fc2_probe.py"
    { $P --block-t 32 --pairs 16 --gluon 64:3:4:2:0,64:3:4:2:0:1,64:3:4:2:0:0:1,64:3:4:2:0:1:1,128:3:4:1:0,128:3:4:1:0:1:1
      $P --block-t 16 --pairs 8 --gluon 64:4:4:2,64:4:4:2:1:1
      $P --block-t 64 --pairs 48 --gluon 128:3:4,128:3:4:1:1:1
    } > $OUT/fc2.jsonl 2> $OUT/fc2.err
    F="timeout 60 python3 bench/gluon_fc1_probe.py"
    { $F --hidden 2048 --inter 768 --activation swiglu --gluon 64:3:4:0,64:3:4:0:1
      $F --hidden 4096 --inter 1536 --activation swiglu --gluon 64:3:4:0,64:3:4:0:1
      $F --hidden 2048 --inter 1536 --activation squared_relu --gluon 128:3:4:0,128:3:4:0:1
    } > $OUT/fc1.jsonl 2> $OUT/fc1.err
    kernel_probe_summary ;;
  s29c)
    # prepared in session 28 (for session 29, after s29a): layer probes of the scale words and the FC2 ring loop on the
    # defaults (main tile; default first and last)
    probe_picks "" +scale_words=1 ""
    L="timeout 90 python3 bench/triton_moe_probe.py"
    { G=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov; N=m32l4_sx4p_m_gg_s2_nov
      $L --tokens 256 --configs "$G,$G+fc2_ring=1,$G+fc2_ring=1+scale_words=1,$G"
      $L --tokens 384 --configs "$N,$N+scale_words=1,$N+fc2_ring=1,$N+fc2_ring=1+scale_words=1,$N"
      $L --shape qwen3-235b-a22b --tokens 256 --configs "$G,$G+fc2_ring=1+scale_words=1,$G"
      $L --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs \
        "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q,m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q+scale_words=1,m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q"
    } >> $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'][-60:], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -2 $OUT/probe.err ;;
  s29b)
    # prepared in session 28 (for session 29): the race probe session 28 could not finish (squared-ReLU "_f1q" default
    # at 256 tokens), then probes: the FC2 without the overlap at 2 / 3 stages (fewer stages: more programs per SM),
    # and the squared-ReLU 16-28 tile with the 128-row Gluon FC1 without the overlap (as "_f1q" at 1.5-16)
    timeout 60 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 100 --cases 256:default,192:default \
      > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err
    timeout 60 python3 bench/gluon_fc2_probe.py --block-t 32 --pairs 16 \
      --gluon 64:3:4:2,64:3:4:2:0,64:2:4:2:0,64:2:4:1:0,64:3:4:1:0 > $OUT/fc2.jsonl 2> $OUT/fc2.err
    python3 -c "import json; [print(d['us'], {k: v for k, v in d.items() if 'equals' in k}) for d in map(json.loads, open('$OUT/fc2.jsonl'))]"
    L="timeout 90 python3 bench/triton_moe_probe.py"
    F="+fc1_gluon=1+fc1_block_k=128+fc1_block_n=128+fc1_stages=3+fc1_warps=4+fc1_maxnreg=none+fc1_overlap=0"
    Q=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q; G=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov; R=m32k_sx4p_f4_g_s2_n64_c2
    { $L --tokens 256 --activation squared_relu --configs "$Q,$Q+fc2_stages=2+fc2_overlap=0,$Q"
      $L --tokens 256 --configs "$G,$G+fc2_stages=2,$G"
      $L --tokens 320,384 --activation squared_relu --configs "$R,$R$F,$R"
      $L --shape qwen3-235b-a22b --tokens 384 --activation squared_relu --configs "$R,$R$F,$R"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'][-70:], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -2 $OUT/probe.err ;;
  s28e)
    # session 28, call 5 (about 5 device minutes left): the squared-ReLU "_f1q" defaults at 1.5-16 pairs per expert
    # (the Gluon FC1 on 128 rows, no overlap): float64 oracle and graph replays of the defaults, the mixed-scales test,
    # the race probe, then the benchmark at 64 and 256 tokens, where the defaults changed (no demo: it runs SwiGLU,
    # unchanged since call 3)
    T=tests/functional/test_triton_moe_gpu.py
    timeout 55 python3 -m pytest -q -p no:cacheprovider $T -k "(defaults_keep_the_bits and squared_relu and (64 or \
      256)) or (graph_replay_with_gluon_tails and f1q) or (scales_above_2_pow_7_in_some and squared_relu and (24 or \
      48))" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "passed|failed|rc=|^FAILED" $OUT/tests.log | tail -8
    timeout 20 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 50 --cases 64:default,256:default \
      > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    mkdir -p $OUT/moe
    timeout 150 python3 bench/moe_layer.py --warm 14 --tokens 64,256 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    rm -f $OUT/moe/moe_layer.md $OUT/moe/moe_layer.png  # rebuilt from the json on the CPU (write_report)
    tail -16 $OUT/moe_bench.log ;;
  s28d)
    # session 28, call 4: the squared-ReLU defaults at 1.5-16 pairs per expert run a Triton FC1; with the Gluon FC1
    # in its place (64 or 128 rows on 4 warps, 3 stages, with / without the step overlap): layer probes, default first
    # and last (informs the next session; no default changes without the full benchmark)
    L="timeout 100 python3 bench/triton_moe_probe.py --activation squared_relu"
    S=m32k_sx4p_f4_t16_g_s2_gt_n64_c2; D=s16k_sx4p_f4_g_s2_n64_c2_st4
    F="+fc1_gluon=1+fc1_block_k=128+fc1_stages=3+fc1_warps=4+fc1_maxnreg=none"
    { $L --tokens 256 --configs "$S,$S$F+fc1_block_n=64+fc1_overlap=0,$S$F+fc1_block_n=128+fc1_overlap=0,$S$F+fc1_block_n=128,$S"
      $L --tokens 64 --configs "$D,$D$F+fc1_block_n=64+fc1_overlap=0,$D$F+fc1_block_n=128+fc1_overlap=0,$D"
      $L --shape qwen3-235b-a22b --tokens 256 --configs "$S,$S$F+fc1_block_n=64+fc1_overlap=0,$S$F+fc1_block_n=128+fc1_overlap=0,$S"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'][-60:], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -2 $OUT/probe.err ;;
  s28c)
    # session 28, call 3: the gated "_nov" defaults (8-16 and, new, 16-28 pairs per expert; squared ReLU back to the
    # tiles with the overlap): the full benchmark and the demo first, then the GPU tests of the new picks, the race
    # probe at 16-28 pairs per expert and layer probes there (235b 384 tokens; 30b 320 / 448)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
    moe_bench_and_demo 300 $OUT/log.txt
    T=tests/functional/test_triton_moe_gpu.py
    timeout 120 python3 -m pytest -q -p no:cacheprovider $T -k "without_the_overlap or (graph_replay_with_gluon_tails \
      and nov) or (defaults_keep_the_bits and 384)" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "passed|failed|rc=|^FAILED" $OUT/tests.log | tail -8
    timeout 40 python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 100 --cases 300:default,384:default \
      > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -2 $OUT/race.err
    L="timeout 70 python3 bench/triton_moe_probe.py"
    { $L --shape qwen3-235b-a22b --tokens 384 --configs "m32l4_sx4p_m_s2,m32l4_sx4p_m_gg_s2_nov,m32l4_sx4p_m_s2"
      $L --tokens 320,448 --configs "m32l4_sx4p_m_s2,m32l4_sx4p_m_gg_s2_nov,m32l4_sx4p_m_s2"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -2 $OUT/probe.err ;;
  s28b)
    # session 28, call 2: the "_nov" tiles, choose_config's picks at 8-16 pairs per expert since call 1: their bits
    # against the tiles with the overlap (both shapes), graph replays, the mixed-scales and default-bits tests at
    # these sizes, the race probe (100 fresh calls against the Triton form), then layer probes where call 1 had none
    T=tests/functional/test_triton_moe_gpu.py
    timeout 170 python3 -m pytest -q -p no:cacheprovider $T -k "without_the_overlap or (graph_replay_with_gluon_tails \
      and nov) or scales_above_2_pow_7_in_some or (defaults_keep_the_bits and 256)" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "passed|failed|rc=|^FAILED" $OUT/tests.log | tail -8
    for act in squared_relu swiglu; do
      timeout 60 python3 bench/gluon_tail_race_probe.py --activation $act --reps 100 --cases 160:default,256:default
    done > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -3 $OUT/race.err
    L="timeout 90 python3 bench/triton_moe_probe.py"
    G=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2; S=m32k_sx4p_f4_t16_g_s2_gt_n64_c2
    { $L --shape qwen3-235b-a22b --tokens 192,256 --configs "$G,${G}_nov,$G"
      $L --shape qwen3-235b-a22b --tokens 192,256 --activation squared_relu --configs "$S,${S}_nov,$S"
      $L --tokens 160 --configs "$G,${G}_nov,$G"
      $L --tokens 160 --activation squared_relu --configs "$S,${S}_nov,$S"
      $L --tokens 384 --activation squared_relu --configs \
        "m32k_sx4p_f4_g_s2_n64_c2,m32k_sx4p_f4_g_s2_n64_c2+fc2_overlap=0,m32k_sx4p_f4_g_s2_n64_c2"
      $L --tokens 384 --configs "m32l4_sx4p_m_s2,m32l4_sx4p_m_gg_s2+fc1_overlap=0+fc2_overlap=0,m32l4_sx4p_m_gg_s2"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d.get('shape', '')[:10], d['activation'][:4], d['tokens'], d['config'], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -2 $OUT/probe.err ;;
  s28a)
    # prepared in session 27 (for session 28): the Gluon FC1 / FC2 with each step's MMAs waited for before the next
    # step's dequant (overlap 0: one register set, more programs per SM); session 27's calls 3-4 saw the gated FC1
    # at 32-token blocks at 132 us that way against the Triton default's 152-158. Kernel probes (bits against the
    # Triton kernels at 128-deep steps where the order is the same: one chain), then decide on tiles
    F="timeout 60 python3 bench/gluon_fc1_probe.py"
    { $F --hidden 2048 --inter 768 --activation swiglu --gluon 64:3:4,64:3:4:0,64:4:4:0
      $F --hidden 2048 --inter 768 --activation swiglu --block-t 16 --pairs 8 --gluon 64:3:4,64:3:4:0
      $F --hidden 2048 --inter 768 --activation swiglu --block-t 64 --pairs 48 --gluon 64:3:4,64:3:4:0
      $F --hidden 4096 --inter 1536 --activation swiglu --gluon 64:3:4,64:3:4:0
      $F --hidden 2048 --inter 1536 --activation squared_relu --gluon 64:3:4,64:3:4:0
    } > $OUT/fc1.jsonl 2> $OUT/fc1.err
    P="timeout 60 python3 bench/gluon_fc2_probe.py"
    { $P --block-t 16 --pairs 8 --gluon 64:4:4:2,64:4:4:2:0,64:4:4:1:0
      $P --block-t 32 --pairs 16 --gluon 64:3:4:2,64:3:4:2:0,64:4:4:2:0,64:3:4:1:0
      $P --block-t 64 --pairs 48 --gluon 128:3:4,128:3:4:1:0,64:3:4:2:0
    } > $OUT/fc2.jsonl 2> $OUT/fc2.err
    python3 -c "
import json
for f in ('fc1', 'fc2'):
    for d in map(json.loads, open('$OUT/' + f + '.jsonl')):
        print(f, d.get('hidden'), d.get('inter'), d.get('block_t'), d['us'])
        print('  ', {k: v for k, v in d.items() if 'equals' in k or k.endswith('_error')})"
    tail -2 $OUT/fc1.err $OUT/fc2.err
    # layer probes: the defaults with TritonMoEConfig.fc1_overlap / fc2_overlap off (main tile; default again last)
    L="timeout 70 python3 bench/triton_moe_probe.py"
    G=m32l4_sx4p_m_t16_gg_s2_gt_n64_c2; S=m32k_sx4p_f4_t16_g_s2_gt_n64_c2; D=s16k_sx4p_f4_g_s2_n64_c2_st4
    { $L --tokens 192,256 --configs "$G,$G+fc1_overlap=0,$G+fc2_overlap=0,$G+fc1_overlap=0+fc2_overlap=0,$G"
      $L --tokens 192,256 --activation squared_relu --configs "$S,$S+fc2_overlap=0,$S"
      $L --tokens 64 --activation squared_relu --configs "$D,$D+fc2_overlap=0,$D"
      $L --tokens 512 --configs "l64_sx4p_mu_t32_gg_s2_gt,l64_sx4p_mu_t32_gg_s2_gt+fc1_overlap=0"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d['activation'][:4], d['tokens'], d['config'], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]" ;;
  s27e)
    # session 27, call 5: what was kept, the cross-word dequant in both Gluon FCs (the same values and bits as before):
    # the defaults against their Triton forms and the mixed-scales test, then layer probes of the defaults (compare
    # with call 1 of this session, before the change) and the FC2 alone
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "scales_above_2_pow_7_in_some_programs or gluon_defaults_keep_the_bits" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "passed|failed|rc=|^FAILED" $OUT/tests.log | tail -8
    L="timeout 50 python3 bench/triton_moe_probe.py"
    { $L --tokens 64,128 --activation squared_relu --configs s16k_sx4p_f4_g_s2_n64_c2_st4
      $L --tokens 192,256 --activation squared_relu --configs m32k_sx4p_f4_t16_g_s2_gt_n64_c2
      $L --tokens 512 --activation squared_relu --configs l64k2_sx4p_f4_t32_gq_s2_gt
      $L --tokens 512 --configs l64_sx4p_mu_t32_gg_s2_gt
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d['shape'][6:9], d['activation'][:4], d['tokens'], d['config'], d.get('us', d.get('error'))) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    timeout 40 python3 bench/gluon_fc2_probe.py --block-t 16 --pairs 8 --gluon 64:4:4:2 > $OUT/fc2.jsonl 2> $OUT/fc2.err
    timeout 40 python3 bench/gluon_fc2_probe.py --block-t 32 --pairs 16 --gluon 64:3:4:2 >> $OUT/fc2.jsonl 2>> $OUT/fc2.err
    python3 -c "
import json
for d in map(json.loads, open('$OUT/fc2.jsonl')):
    print(d['block_t'], d['us'], {k: round(v, 5) for k, v in d.items() if k.endswith('_err')})" ;;
  s26g)
    # session 26, call 7: what call 6 left: graph replays of the 32-token two-chain defaults (256 / 384 tokens), then
    # the race probe on choose_config's picks at 64 / 256 / 384 tokens (two-chain tiles compared within 1e-2)
    timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "graph_replay_with_gluon_tails and c2" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "passed|failed|rc=|^FAILED" $OUT/tests.log | tail -6
    timeout 70 python3 bench/gluon_tail_race_probe.py --activation squared_relu --reps 100 \
      --cases 64:default,256:default,384:default > $OUT/race_sq.jsonl 2>> $OUT/race.err
    timeout 60 python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 100 \
      --cases 64:default,256:default > $OUT/race_sw.jsonl 2>> $OUT/race.err
    tail -4 $OUT/race_sq.jsonl $OUT/race_sw.jsonl; tail -3 $OUT/race.err ;;
  s26f)
    # session 26, call 6: the new defaults (the two-chain Gluon FC2 twins at 1.5-16 pairs per expert, and at 16-28
    # for squared ReLU): graph replay and float64 oracle of the default tiles at 64 / 256 tokens, then the full
    # benchmark and the demo
    T=tests/functional/test_triton_moe_gpu.py
    tests_bench_demo 100 300 -q "$T::test_cuda_graph_replay_with_the_default_gluon_tiles" \
      "$T::test_matches_float64_reference[128-8-2048-768-64-squared_relu]" \
      "$T::test_matches_float64_reference[128-8-2048-768-64-swiglu]" -k "64 or 512" ;;
  s26e)
    # session 26, call 5: the GPU tests of the two-chain ("_c2") tiles (float64 oracle on both shapes, 20 fresh calls
    # against the one-chain form, graph replay), then layer probes where the next defaults would take them
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "two_chain" \
      > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep "passed\|failed\|rc=\|^FAILED" $OUT/tests.log | tail -12
    P="python3 bench/triton_moe_probe.py"
    { timeout 80 $P --tokens 192,256 --activation squared_relu \
        --configs "m32k_sx4p_f4_t16_s2,m32k_sx4p_f4_t16_g_s2_gt_n64_c2,m32k_sx4p_f4_t16_s2"
      timeout 80 $P --tokens 192,256 --configs "m32l4_sx4p_m_t16_s2,m32l4_sx4p_m_t16_gg_s2_gt_n64_c2,m32l4_sx4p_m_t16_s2"
      timeout 80 $P --tokens 384 --activation squared_relu --configs "m32k_sx4p_f4_s2,m32k_sx4p_f4_g_s2_n64_c2,m32k_sx4p_f4_s2"
      timeout 80 $P --tokens 384 --configs "m32l4_sx4p_m_s2,m32l4_sx4p_m_gg_s2_n64_c2,m32l4_sx4p_m_s2"
      timeout 80 $P --tokens 64,128 --activation squared_relu --configs \
        "s16k_sx4p_f4_g_s2_n64,s16k_sx4p_f4_g_s2_n64_c2,s16k_sx4p_f4_g_s2_n64_c2_st4,s16k_sx4p_f4_g_s2_n64"
      timeout 80 $P --tokens 64,128 --configs \
        "s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_g_s2_n64_c2,s16k4_sx4p_m3_g_s2_n64_c2_st4,s16k4_sx4p_m3_g_s2_n64"
      timeout 80 $P --shape qwen3-235b-a22b --tokens 256 --configs \
        "m32l4_sx4p_m_t16_s2,m32l4_sx4p_m_t16_gg_s2_gt_n64_c2,m32l4_sx4p_m_t16_s2"
      timeout 80 $P --shape qwen3-235b-a22b --tokens 64 --configs \
        "s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_g_s2_n64_c2_st4,s16k4_sx4p_m3_g_s2_n64"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "import json; [print(d['shape'][6:9], d['activation'][:2], d['tokens'], d['config'], d['us']) for d in map(json.loads, open('$OUT/probe.jsonl'))]"
    tail -3 $OUT/probe.err ;;
  s26d)
    # session 26, call 4: two accumulator chains in the per-tile Gluon FC2 (fc2_chains=2, "_c2" tiles): kernel probe,
    # then layer probes against the defaults (64 / 256 tokens, both activations, both shapes)
    timeout 100 python3 bench/gluon_fc2_probe.py --hidden 2048 --inter 1536 --block-t 32 --pairs 16 \
      --gluon 128:3:4,128:3:4:2,64:3:4:2,64:4:4:2 --persistent 64:6:2:2 > $OUT/kernel.jsonl 2>> $OUT/probe.err
    timeout 100 python3 bench/gluon_fc2_probe.py --hidden 2048 --inter 1536 --block-t 16 --pairs 8 \
      --gluon 64:3:4,64:3:4:2,64:4:4:2 --persistent 64:4:2:2 >> $OUT/kernel.jsonl 2>> $OUT/probe.err
    python3 -c "import json,sys; [print(json.dumps(json.loads(l)['us'])) for l in open('$OUT/kernel.jsonl')]"
    grep -o '"[a-z_0-9:]*_err": [0-9.e-]*' $OUT/kernel.jsonl | sort | uniq | head -20
    P="python3 bench/triton_moe_probe.py"
    { timeout 70 $P --tokens 64 --activation squared_relu \
        --configs "s16k_sx4p_f4_g_s2_n64,s16k_sx4p_f4_g_s2_n64_c2,s16k_sx4p_f4_g_s2_n64"
      timeout 70 $P --tokens 64 --configs "s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_g_s2_n64_c2,s16k4_sx4p_m3_g_s2_n64"
      timeout 90 $P --tokens 256 --activation squared_relu --configs \
        "m32k_sx4p_f4_t16_s2,m32k_sx4p_f4_t16_g_s2_gt_c2,m32k_sx4p_f4_t16_g_s2_gt_n64_c2,m32k_sx4p_f4_t16_s2"
      timeout 90 $P --tokens 256 --configs \
        "m32l4_sx4p_m_t16_s2,m32l4_sx4p_m_t16_gg_s2_gt_c2,m32l4_sx4p_m_t16_gg_s2_gt_n64_c2,m32l4_sx4p_m_t16_s2"
      timeout 70 $P --shape qwen3-235b-a22b --tokens 64 --activation squared_relu \
        --configs "s16k_sx4p_f4_g_s2_n64,s16k_sx4p_f4_g_s2_n64_c2,s16k_sx4p_f4_g_s2_n64"
      timeout 90 $P --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs \
        "m32k_sx4p_f4_t16_s2,m32k_sx4p_f4_t16_g_s2_gt_c2,m32k_sx4p_f4_t16_g_s2_gt_n64_c2,m32k_sx4p_f4_t16_s2"
    } > $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s26c)
    # session 26, call 3: two accumulator chains per K step (planes 0-1 / 2-3; not bit-equal to the Triton FC2) in the
    # persistent FC2, and the step's next-tile test without a division. block_n:stages:programs_per_sm:chains
    P="timeout 100 python3 bench/gluon_fc2_probe.py"
    { $P --hidden 2048 --inter 1536 --block-t 32 --pairs 16 --gluon 128:3:4 \
         --persistent 64:6:2:1,64:6:2:2,64:6:1:2,128:4:2:2,128:4:1:2
      $P --hidden 2048 --inter 1536 --block-t 16 --pairs 8 --gluon 64:3:4 --persistent 64:4:2:1,64:4:2:2,64:8:1:2
      $P --hidden 4096 --inter 3072 --block-t 32 --pairs 16 --gluon 128:3:4 --persistent 64:6:2:2,128:4:2:2
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl | python3 -c "import json,sys; [print(json.dumps(json.loads(l)['us'])) for l in sys.stdin]"
    grep -o '"[a-z_0-9:]*_err": [0-9.e-]*' $OUT/probe.jsonl | head -30
    grep -o '"[a-z_0-9:]*equals_triton_k128": [a-z]*' $OUT/probe.jsonl | sort | uniq -c; tail -3 $OUT/probe.err ;;
  s26b)
    # session 26, call 2: s26a after the scale words went 3 K steps ahead (int32 words, one per row and step)
    P="timeout 100 python3 bench/gluon_fc2_probe.py"
    { $P --hidden 2048 --inter 1536 --block-t 32 --pairs 16 --gluon 128:3:4,64:3:4 \
         --persistent 64:6:2,64:4:2,64:6:1,128:4:2,128:4:1
      $P --hidden 2048 --inter 1536 --block-t 16 --pairs 8 --gluon 64:3:4 --persistent 64:8:2,64:4:2,128:6:2
      $P --hidden 2048 --inter 768 --block-t 16 --pairs 8 --gluon 64:3:4 --persistent 64:8:2,128:6:2
      $P --hidden 4096 --inter 3072 --block-t 32 --pairs 16 --gluon 128:3:4 --persistent 64:6:2,128:4:2
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl | python3 -c "import json,sys; [print(json.dumps(json.loads(l)['us'])) for l in sys.stdin]"
    grep -o '"[a-z_0-9:]*equals_triton_k128": [a-z]*' $OUT/probe.jsonl | sort | uniq -c; tail -3 $OUT/probe.err ;;
  s26a)
    # (s26a-s26c ran with bench/gluon_fc2_probe.py's --persistent option and the persistent kernel of
    # bench/results/run29/persistent_fc2.patch, both removed afterwards: apply the patch to re-run them)
    # session 26, call 1: the persistent warp-specialized Gluon FC2 (_gluon_fc2_persistent_kernel) against the
    # per-tile FC2s on one FC2 problem per decode tile (kernel probe: bits against the Triton FC2 at 128-deep steps,
    # float64 error, CUDA-graph medians). block_n:stages:programs_per_sm
    P="timeout 100 python3 bench/gluon_fc2_probe.py"
    { $P --hidden 2048 --inter 1536 --block-t 32 --pairs 16 --gluon 128:3:4,64:3:4 \
         --persistent 64:6:2,64:4:2,64:6:1,64:12:1
      $P --hidden 2048 --inter 1536 --block-t 16 --pairs 8 --gluon 64:3:4 --persistent 64:8:2,64:4:2,64:8:1
      $P --hidden 2048 --inter 768 --block-t 16 --pairs 8 --gluon 64:3:4 --persistent 64:8:2,64:4:2
      $P --hidden 2048 --inter 768 --block-t 32 --pairs 16 --gluon 128:3:4 --persistent 64:6:2,64:4:2
      $P --hidden 4096 --inter 3072 --block-t 32 --pairs 16 --gluon 128:3:4 --persistent 64:6:2,64:4:2
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -5 $OUT/probe.err ;;
  s25a)
    # prepared in session 24 (for session 25): the f8x2 tiles with FC2 in Gluon ("_gf", compile-only so far): their
    # GPU tests (float64 oracle, the shape check, a graph replay), then layer probes against the Triton f8x2 tiles and
    # the defaults (30b, 64 / 256 tokens, both activations) and per-kernel times at 256 tokens
    timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "f8x2_gluon" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep "passed\|failed\|rc=\|^FAILED\|Error" $OUT/tests.log | tail -20
    f8x2_probes _gf _gf
    timeout 60 python3 bench/triton_moe_probe.py --tokens 256 --activation squared_relu --profile --configs "m32k_sx4p_f4_t16_s2,m32_f8q_t16_s2_gf"
    # the Triton f8x2 tiles' GPU tests that session 24 did not reach (graph replays, 256 / 1024 tokens, 64-token tiles)
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "f8x2 and not gluon and (graph or T256 or T1024 or l64)" > $OUT/tests_triton_f8x2.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests_triton_f8x2.log
    grep "passed\|failed\|rc=\|^FAILED" $OUT/tests_triton_f8x2.log | tail -12 ;;
  s24f)
    # session 24, call 5: the f8x2 tiles with two independent accumulator chains per program (gate / up, or two row
    # halves) and 2 stages: layer probes (30b, 64 / 256 tokens, both activations), then some of their GPU tests
    f8x2_probes +fc1_stages=3+fc2_stages=3 ""
    timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "f8x2 and (30b-T16 or odd7 or odd33) and not l64" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep "passed\|failed\|rc=\|^FAILED\|^f8x2 \|Error" $OUT/tests.log | tail -30 ;;
  s24d)
    # session 24, call 2: where the f8x2 tiles go wrong on the GPU (bench/f8x2_check.py), then s24a
    timeout 120 python3 bench/f8x2_check.py 2>&1 | grep -v Warn | tail -8
    bash tools/gpu_next.sh s24a ;;
  s24a)
    # prepared in session 23 (for session 24; carry .whl and .ncu): (1) ncu's per-SASS-instruction stall samples of
    # session 23's report (squared ReLU, 256 tokens, 30b), the 40 lines with the most samples per kernel; (2) layer
    # probes of more CTAs per SM for that tile (session 23's CPU compile, Triton 3.6, bench/sass_hazard_scan.py
    # --configs: FC1 184 registers / 83 KB shared -> 2 CTAs per SM, FC2 160 / 50 KB -> 3; FC2 capped at 128 -> 4 CTAs
    # with 9 spill instructions; FC1 at 2 stages capped at 160 -> 3 CTAs with 20; 3 FC2 stages -> 2 CTAs). Main tile
    # only (the tail keeps its own); both shapes
    timeout 90 ncu --import .ncu/ncu_sq256.ncu-rep --page source --csv --print-source sass > $OUT/ncu_source.csv 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_source.csv
    python3 - $OUT/ncu_source.csv <<'PY' > $OUT/ncu_source_top.txt 2>&1
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
if head is None:
    print("\n".join(",".join(r) for r in rows[:20])); sys.exit()
cols = rows[head]
k = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c)
src = next((i for i, c in enumerate(cols) if c.strip() in ("Source", "Address")), 0)
body = [r for r in rows[head + 1:] if len(r) == len(cols)]
def samples(r):
    try:
        return float(r[k].replace(",", ""))
    except ValueError:
        return -1.0
for r in sorted(body, key=samples, reverse=True)[:40]:
    print(r[k], "|", " ".join(r[max(0, src - 1):src + 1]))
PY
    head -45 $OUT/ncu_source_top.txt
    B=m32k_sx4p_f4_t16_s2
    P="python3 bench/triton_moe_probe.py --tokens 256 --activation squared_relu"
    C="$B,$B+fc2_maxnreg=128,$B+fc1_maxnreg=160+fc1_stages=2,$B+fc2_maxnreg=128+fc1_maxnreg=160+fc1_stages=2,$B+fc2_stages=3,$B"
    { timeout 80 $P --configs "$C"; timeout 100 $P --shape qwen3-235b-a22b --configs "$C"; } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s23f)
    # session 23, call 6: the rest of the GPU tests whose default calls can now take the Gluon twins (Gluon-able
    # shapes, 1.5-8 or 28-72 pairs per expert: the layer's CUDA graphs at 16 rows over 8 experts, refit, memory), in
    # three processes (Triton compiles on the CPU overlap)
    T=tests/functional
    bg_pytest 270 $OUT/tests_a.log $T/test_triton_moe_gpu.py -k "matches_float64 or new_routing or fp32_out or rejects or refit_reaches or chunked_route or refit_that_widens"
    bg_pytest 270 $OUT/tests_b.log $T/test_layer_cuda_graph_gpu.py $T/test_memory_gpu.py
    bg_pytest 270 $OUT/tests_c.log $T/test_refit_gpu.py $T/test_quantize_gpu.py
    wait
    for f in a b c; do grep "passed\|failed\|rc=\|^FAILED\|^ERROR" $OUT/tests_$f.log | tail -6; done ;;
  s23e)
    # session 23, call 5: the 16-token Gluon tiles with 64-row FC2 ("_n64", default at 1.5-8 pairs per expert) past
    # 8 pairs per expert, against the 32-token tiles with 16-token tails there (layer probes, 192 / 256 tokens)
    P="python3 bench/triton_moe_probe.py"
    { timeout 50 $P --tokens 192,256 --activation squared_relu \
        --configs "m32k_sx4p_f4_t16_s2,s16k_sx4p_f4_g_s2_n64,m32k_sx4p_f4_t16_s2"
      timeout 50 $P --tokens 192,256 --configs "m32l4_sx4p_m_t16_s2,s16k4_sx4p_m3_g_s2_n64,m32l4_sx4p_m_t16_s2"
      timeout 60 $P --shape qwen3-235b-a22b --tokens 256 --activation squared_relu \
        --configs "m32k_sx4p_f4_t16_s2,s16k_sx4p_f4_g_s2_n64,m32k_sx4p_f4_t16_s2"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s23d)
    # session 23, call 4: the new defaults (GLUON_ENV unset: the "_n64" 16-token twins at 1.5-8 pairs per expert, the
    # 64-token twins at 28-72): their 64-token tests, then the full benchmark and the demo
    T=tests/functional/test_triton_moe_gpu.py
    tests_bench_demo 90 240 -v "$T::test_cuda_graph_replay_with_the_default_gluon_tiles[swiglu-64]" \
      "$T::test_cuda_graph_replay_with_the_default_gluon_tiles[squared_relu-64]" \
      "$T::test_matches_float64_reference[128-8-2048-768-64-swiglu]" \
      "$T::test_matches_float64_reference[128-8-2048-768-64-squared_relu]" ;;
  s23c)
    # session 23, call 3: ncu's details of call 2's report (carried in .ncu/); the default Gluon twins' tests that
    # call 2's 200 s did not reach; the 16-token Gluon tiles with 64-row FC2 ("_n64", now the GLUON=1 twins at 1.5-8
    # pairs per expert): bits and 40 repeated calls at 64 tokens, race probe (300 calls) at 64 / 100 tokens, layer
    # probes on 235b at 64 tokens and on 30b at 128 tokens
    timeout 60 ncu --import .ncu/ncu_sq256.ncu-rep --page details --print-details all > $OUT/ncu_details.txt 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_details.txt
    grep -n "_kernel\|Duration\|DRAM Throughput\|Memory Throughput\|Issue Slots Busy\|Registers Per\|Achieved Occ" \
      $OUT/ncu_details.txt | head -40
    T=tests/functional/test_triton_moe_gpu.py
    timeout 220 python3 -m pytest -v -p no:cacheprovider "$T::test_cuda_graph_replay_with_the_default_gluon_tiles" \
      "$T::test_matches_float64_reference[128-8-2048-768-1024-swiglu]" \
      "$T::test_matches_float64_reference[128-8-2048-768-600-squared_relu]" \
      "$T::test_matches_float64_reference[128-8-4096-1536-700-squared_relu]" \
      "$T::test_gluon_defaults_keep_the_bits_of_their_triton_form[swiglu-64]" \
      "$T::test_gluon_defaults_keep_the_bits_of_their_triton_form[squared_relu-64]" \
      "$T::test_opt_in_gluon_tiles_keep_the_bits_over_repeated_calls[swiglu-64]" \
      "$T::test_opt_in_gluon_tiles_keep_the_bits_over_repeated_calls[squared_relu-64]" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "PASSED|FAILED|ERROR|rc=" $OUT/tests.log | tail -14
    P="python3 bench/gluon_tail_race_probe.py --reps 300"
    { timeout 60 $P --activation swiglu --cases 64:s16k4_sx4p_m3_g_s2_n64,100:s16k4_sx4p_m3_g_s2_n64
      timeout 60 $P --activation squared_relu --cases 64:s16k_sx4p_f4_g_s2_n64,100:s16k_sx4p_f4_g_s2_n64
    } > $OUT/race.jsonl 2> $OUT/race.err
    grep failed_reps $OUT/race.jsonl; tail -3 $OUT/race.err
    P="python3 bench/triton_moe_probe.py"
    { timeout 45 $P --shape qwen3-235b-a22b --tokens 64 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_s2"
      timeout 45 $P --shape qwen3-235b-a22b --tokens 64 --activation squared_relu \
        --configs "s16k_sx4_f4,s16k_sx4p_f4_g_s2_n64,s16k_sx4_f4"
      timeout 35 $P --tokens 128 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_s2"
      timeout 35 $P --tokens 128 --activation squared_relu --configs "s16k_sx4_f4,s16k_sx4p_f4_g_s2_n64,s16k_sx4_f4"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s23b)
    # session 23, call 2: the Gluon twins at 28-72 pairs per expert on by default (GLUON_ENV unset): the GPU tests
    # whose default calls now run them (float64 oracle at 600 / 1024 tokens, graph replays at 512 / 640 / 1024), the
    # layer's graph tests, then s23ncu
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "default_gluon or matches_float64_reference or fp32_out or new_routing_and_valid or gluon_defaults_and_the_env" \
      tests/functional/test_layer_cuda_graph_gpu.py > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep "passed\|failed\|rc=\|^FAILED" $OUT/tests.log | tail -12
    NCU_TIMEOUT=240 bash tools/gpu_next.sh s23ncu ;;
  s23ncu)
    # prepared in session 22: where squared ReLU's time goes at 256 tokens (30b, the default m32k_sx4p_f4_t16_s2: FC1
    # and FC2 each ~66% of their roofline share in run 24's profile). ncu reads counters only on Firecracker (uname -r
    # says which runtime); full set of the main and tail FC1 / FC2 launches of one call after a warm-up call
    uname -r > $OUT/ncu_sq256.txt
    timeout ${NCU_TIMEOUT:-400} ncu --clock-control none --export $OUT/ncu_sq256 --kernel-name regex:"_fc[12]_kernel" \
      --launch-skip 4 --launch-count 4 --set full --print-details all python3 bench/triton_moe_probe.py \
      --shape qwen3-30b-a3b --tokens 256 --activation squared_relu --configs m32k_sx4p_f4_t16_s2 --once \
      >> $OUT/ncu_sq256.txt 2>&1
    echo "ncu rc=$?" >> $OUT/ncu_sq256.txt
    # then the 16-token Gluon tiles with 64-row FC2 programs ("_n64", session 22 candidates) against their 128-row
    # forms and the Triton tiles at 64 tokens (layer probes, both activations, 30b)
    P="python3 bench/triton_moe_probe.py"
    { timeout 40 $P --tokens 64 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_g_s2,s16k4_sx4p_m3_g_s2_n64,s16k4_sx4p_m3_s2"
      timeout 40 $P --tokens 64 --activation squared_relu \
        --configs "s16k_sx4_f4,s16k_sx4p_f4_g_s2,s16k_sx4p_f4_g_s2_n64,s16k_sx4_f4"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl
    grep -n "_kernel\|Duration\|DRAM Throughput\|Warp Cycles Per Issued\|Stall\|Achieved Occupancy\|Registers Per" \
      $OUT/ncu_sq256.txt | head -80 ;;
  s22h)
    # prepared in session 22 (run first in session 23; refused in session 22: no device time left): the 64-token
    # Gluon twins back in _GLUON_TWINS (opt-in). choose_config's picks at 512 / 640 / 1024 bit-compared with their
    # Triton forms, 40 fresh calls at 640, the race probe at 512 / 640 (300 calls), then the full benchmark and the
    # demo with GLUON=1
    timeout 150 python3 -m pytest -v -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(gluon_defaults_keep_the_bits and (512 or 640 or 1024)) or (repeated_calls and 640)" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log
    grep -E "PASSED|FAILED|ERROR|rc=" $OUT/tests.log | tail -10
    export MEGATRON_MXFP8_MOE_GLUON=1
    P="python3 bench/gluon_tail_race_probe.py --reps 300"
    { timeout 90 $P --activation swiglu --cases 512:default,640:default
      timeout 90 $P --activation squared_relu --cases 512:default,640:default
    } > $OUT/race.jsonl 2> $OUT/race.err
    grep failed_reps $OUT/race.jsonl; tail -3 $OUT/race.err
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    moe_bench_and_demo 230 $L ;;
  s22a)
    # prepared in session 21 (run first): the Gluon kernels with two register sets of planes (session 21; never run
    # on a GPU): every Gluon GPU test, then the race probe (GLUON=1; 300 calls per case: the opt-in tiles at their
    # sizes, the rebuilt 64-token tiles at 1024, which failed 3-5% of calls with the one-set kernels)
    moe_gpu_tests 300 "gluon"
    export MEGATRON_MXFP8_MOE_GLUON=1
    P="python3 bench/gluon_tail_race_probe.py --reps 300"
    { timeout 100 $P --activation swiglu --cases 1024:gq_s2,1024:gt_s2,64:default,256:default,384:default
      timeout 100 $P --activation squared_relu --cases 1024:gq_s2,1024:gt_s2,64:default,256:default
    } > $OUT/race.jsonl 2> $OUT/race.err
    grep failed_reps $OUT/race.jsonl; tail -3 $OUT/race.err ;;
  s21c)
    # session 21, call 2: which arrangement of the 128-token tiles with Gluon tails writes garbage rows
    # (bench/gluon_tail_race_probe.py), then the s21b profiles (call 1 timed out before them)
    for a in squared_relu swiglu; do
      timeout 130 python3 bench/gluon_tail_race_probe.py --activation $a --reps 6
    done > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -3 $OUT/race.err
    bash tools/gpu_next.sh s21b ;;
  s21d)
    # session 21, call 3: the same probe (30 fresh inputs per variant) after the fence that makes the initialised
    # mbarriers visible to the async proxy (both Gluon kernels), then the Gluon defaults' bit tests
    for a in squared_relu swiglu; do
      timeout 150 python3 bench/gluon_tail_race_probe.py --activation $a --reps 30 --variants gq_s2,gt_s2
    done > $OUT/race.jsonl 2> $OUT/race.err
    cat $OUT/race.jsonl; tail -3 $OUT/race.err
    # control in the same call: the tree before the fence (.devcarry/old = 31a38af), gated
    (cd .devcarry/old && PYTHONPATH=/tmp/site:. timeout 150 python3 bench/gluon_tail_race_probe.py --activation swiglu \
      --reps 30 --variants gq_s2,gt_s2) > $OUT/race_old.jsonl 2> $OUT/race_old.err
    cat $OUT/race_old.jsonl
    moe_gpu_tests 120 "defaults_keep_the_bits" ;;
  s21e)
    # session 21, call 4: failure rates of the Gluon defaults at their own sizes and of their Triton forms (150 fresh
    # inputs each, bit-compared with the Triton form / with itself), and the 64-token Gluon tile on one stream
    P="python3 bench/gluon_tail_race_probe.py --reps 100"
    { timeout 220 $P --activation swiglu --cases 1024:gq_s0,1024:gq_s2,256:default,512:default,640:default,64:default,1024:triton,640:triton
      timeout 140 $P --activation squared_relu --cases 256:default,512:default,640:default,640:triton
    } > $OUT/race.jsonl 2> $OUT/race.err
    grep failed_reps $OUT/race.jsonl; grep -v failed_reps $OUT/race.jsonl | cut -c1-300; tail -3 $OUT/race.err ;;
  s21f)
    # session 21, call 5: the full MoE benchmark and the demo with the session-21 defaults (Gluon tiles off: the
    # 64-token Gluon tiles wrote NaN rows in 3-5% of calls, call 4)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    moe_bench_and_demo 220 $L ;;
  s21b)
    # prepared in session 20: where the time goes under the session-20 defaults (per-kernel CUDA times, torch
    # profiler; main and tail kernels of one name add up): squared ReLU at 64 and 256 tokens, gated at 256, both shapes
    for job in "qwen3-30b-a3b squared_relu 64" "qwen3-30b-a3b squared_relu 256" "qwen3-30b-a3b swiglu 256" \
               "qwen3-235b-a22b squared_relu 64" "qwen3-235b-a22b squared_relu 256" "qwen3-235b-a22b swiglu 256"; do
      set -- $job
      c=$(python3 -c "from megatron_mxfp8_moe.kernels.triton_moe import TILES, choose_config
from bench.moe_layer import SHAPES
e, k, h, i = SHAPES['$1']; names = {id(t): n for n, t in TILES.items()}
print(names[id(choose_config($3, h, i, gated='$2' == 'swiglu', topk=k, experts=e))])" 2>/dev/null)
      timeout 40 python3 bench/triton_moe_probe.py --shape $1 --tokens $3 --activation $2 --configs $c --profile
    done > $OUT/profile.jsonl 2> $OUT/profile.err
    cat $OUT/profile.jsonl; tail -3 $OUT/profile.err ;;
  s20a)
    # prepared in session 19 (run first): the Gluon FC2 candidates (GLUON_ENV=all: the 16-token gated plane tile,
    # the 64-token plane tiles): their bit tests, then layer probes "_s2" / "_g_s2" / "_s2" where session 19 did not
    # time them (235b at 64 tokens; the tiles with 32-token tails at 512; squared ReLU 235b at 640, 40 s timeouts)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 260 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "candidates or (gluon_fc2_keeps and (s16k4 or l64k2))" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -6
    P="python3 bench/triton_moe_probe.py"
    { timeout 40 $P --shape qwen3-235b-a22b --tokens 64 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_g_s2,s16k4_sx4p_m3_s2"
      for s in qwen3-30b-a3b qwen3-235b-a22b; do
        timeout 40 $P --shape $s --tokens 512 --configs "l64_sx4p_mu_t32_s2,l64_sx4p_mu_t32_g_s2,l64_sx4p_mu_t32_s2"
        timeout 45 $P --shape $s --tokens 512 --activation squared_relu \
          --configs "l64k2_sx4p_f4_t32_s2,l64k2_sx4p_f4_t32_g_s2,l64k2_sx4p_f4_t32_s2"
      done
      timeout 45 $P --shape qwen3-235b-a22b --tokens 640 --activation squared_relu \
        --configs "l64k2_sx4p_f4_s2,l64k2_sx4p_f4_g_s2,l64k2_sx4p_f4_s2"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s20b)
    # prepared in session 19: the full MoE benchmark and the demo with GLUON_ENV=all (compare with run 22, PERFORMANCE
    # 2a); if s20a's tests pass and this is faster at 64 and 448-1000 tokens, make the candidates defaults
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    export MEGATRON_MXFP8_MOE_GLUON=all
    moe_bench_and_demo 200 $L ;;
  s20c)
    # prepared in session 19: the Gluon FC1 at the 16- and 64-token widths (kernel level, bench/gluon_fc1_probe.py
    # --block-t; compile-only so far, no spills: gated 16 tokens 140 registers, 64 tokens 206; squared ReLU 64 tokens
    # 116): against the Triton default tile of that width, 30b shapes (squared ReLU at 2x inter)
    { timeout 60 python3 bench/gluon_fc1_probe.py --block-t 16 --pairs 4 --hidden 2048 --inter 768 --gluon "64:3:4,64:4:4"
      timeout 60 python3 bench/gluon_fc1_probe.py --block-t 64 --pairs 40 --hidden 2048 --inter 768 \
        --gluon "64:3:4,64:2:4,128:3:8"
      timeout 60 python3 bench/gluon_fc1_probe.py --block-t 64 --pairs 40 --hidden 2048 --inter 1536 \
        --activation squared_relu --gluon "64:3:4,128:3:8,128:3:4"
    } > $OUT/fc1_probe.jsonl 2> $OUT/fc1_probe.err
    cat $OUT/fc1_probe.jsonl; tail -3 $OUT/fc1_probe.err ;;
  s20d)
    # session 20, call 4: the GLUON_ENV=all candidates (Gluon tails, the Gluon FC1 on the 64-token tiles, the Gluon
    # FC2 on the squared-ReLU 16-token tile): their GPU tests, then layer probes, default / candidate(s) / default
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "gluon_candidates_under_gluon_all or gluon_tails or gluon_defaults_and" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -6
    P="python3 bench/triton_moe_probe.py"
    F1="+fc1_block_k=128+fc1_gluon=1+fc1_block_n=128+fc1_stages=3+fc1_warps=4+fc1_gate_merge=0+fc1_maxnreg=none"
    { for s in qwen3-30b-a3b qwen3-235b-a22b; do
        timeout 30 $P --shape $s --tokens 64 --activation squared_relu --configs "s16k_sx4_f4,s16k_sx4p_f4_g_s2,s16k_sx4_f4"
        n=m32l4_sx4p_m_t16_gg_s2; timeout 30 $P --shape $s --tokens 256 --configs "$n,${n}_gt,$n"
        n=m32k_sx4p_f4_t16_g_s2; timeout 30 $P --shape $s --tokens 256 --activation squared_relu --configs "$n,${n}_gt,$n"
        n=l64_sx4p_mu_t32; timeout 35 $P --shape $s --tokens 512 --configs "${n}_g_s2,${n}_gg_s2,${n}_gg_s2_gt,${n}_g_s2"
        n=l64k2_sx4p_f4_t32; timeout 35 $P --shape $s --tokens 512 --activation squared_relu \
          --configs "${n}_g_s2,${n}_g_s2$F1,${n}_gq_s2_gt,${n}_g_s2"
      done
      s=qwen3-30b-a3b
      timeout 30 $P --shape $s --tokens 640 --configs "l64_sx4p_mu_g_s2,l64_sx4p_mu_gg_s2,l64_sx4p_mu_g_s2"
      timeout 30 $P --shape $s --tokens 640 --activation squared_relu \
        --configs "l64k2_sx4p_f4_g_s2,l64k2_sx4p_f4_gq_s2,l64k2_sx4p_f4_g_s2"
      timeout 30 $P --shape $s --tokens 1024 --configs "l128m_sa_t64pu_s2,l128m_sa_t64pu_s2_gt,l128m_sa_t64pu_s2"
      timeout 30 $P --shape $s --tokens 1024 --activation squared_relu \
        --configs "l128w_sa_t64p2_s2,l128w_sa_t64p2_s2_gt,l128w_sa_t64p2_s2"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl | python3 -c "import json,sys; [print(d['shape'][6:9], d['activation'][:2], d['tokens'], d['config'], d['us']) for d in map(json.loads, sys.stdin)]"
    tail -3 $OUT/probe.err ;;
  s20e)
    # session 20, call 6: the new Gluon defaults' GPU tests (bits against their Triton forms at 64-1024 tokens, Gluon
    # tails in a graph, the default / env switch), the float64 / routing tests and the layer CUDA graphs
    T=/tmp/s20e; mkdir -p $T
    bg_pytest 280 $T/a.log tests/functional/test_triton_moe_gpu.py -k "gluon_defaults_keep or gluon_tails or gluon_defaults_and"
    bg_pytest 280 $T/b.log tests/functional/test_triton_moe_gpu.py tests/functional/test_layer_cuda_graph_gpu.py \
      -k "matches_float64 or new_routing or graph_replay_matches or layer_cuda_graph"
    wait
    cat $T/a.log $T/b.log > $OUT/tests.log
    grep "passed\|failed\|rc=\|Error" $OUT/tests.log | tail -8 ;;
  s20f)
    # session 20, call 7: after the Gluon FC1 stage-barrier fix (one expected arrival per thread): the Gluon defaults'
    # bit tests, the Gluon tails in graphs, the "_gg_s2" tiles against their Triton form, 6 repeated calls at 512
    L=$OUT/tests.log
    timeout 230 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "gluon_defaults_keep or gluon_tails or repeated_calls or gluon_fc1_tiles" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8 ;;
  s19h)
    # session 19, call 7: the Gluon FC2 on the 16-token plane tile (64 tokens, gated) and the 64-token plane tiles
    # (640 tokens) in the layer, "+" overrides of the defaults: us per layer, default / Gluon FC2 / default
    G="+fc2_block_k=128+fc2_gluon=1+fc2_block_n=128+fc2_stages=3+fc2_maxnreg=none"
    P="python3 bench/triton_moe_probe.py"
    { timeout 40 $P --shape qwen3-30b-a3b --tokens 64 --configs "s16k4_sx4p_m3_s2,s16k4_sx4p_m3_s2$G,s16k4_sx4p_m3_s2"
      timeout 40 $P --shape qwen3-30b-a3b --tokens 640 --configs "l64_sx4p_mu_s2,l64_sx4p_mu_s2$G,l64_sx4p_mu_s2"
      timeout 40 $P --shape qwen3-30b-a3b --tokens 640 --activation squared_relu \
        --configs "l64k2_sx4p_f4_s2,l64k2_sx4p_f4_s2$G,l64k2_sx4p_f4_s2"
    } > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s19c)
    # prepared in session 18: the Gluon FC2 at the 16- and 64-token tiles' widths (kernel level, bench/gluon_fc2_probe.py;
    # compile-only so far: 16 tokens x 64 rows 72 registers, 64 tokens x 64 / 128 rows 96 / 168): 4 pairs per 16-token
    # block (64 tokens) and 40 per 64-token block (640 tokens), 30b FC2 shapes
    for shape in "16 4 2048 1536" "16 4 2048 768" "64 40 2048 1536" "64 40 2048 768"; do
      set -- $shape
      timeout 100 python3 bench/gluon_fc2_probe.py --block-t $1 --pairs $2 --hidden $3 --inter $4 --gluon "64:3:4,64:4:4,128:3:4"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s18g)
    # session 18, call 7 (the last device minutes): the Gluon FC2 inside the layer (fc2_gluon): bit tests against the
    # Triton FC2 at 128-deep steps and a graph replay, then layer probes at 256 tokens: default, Gluon, default
    L=$OUT/log.txt
    timeout 110 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "(gluon_fc2_keeps_the_bits and n128s3 and (m32k or m32l4)) or replay_with_the_gluon" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    P="python3 bench/triton_moe_probe.py"
    G="+fc2_block_k=128+fc2_gluon=1+fc2_block_n=128+fc2_stages=3"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=m32k_sx4p_f4_t16_s2
      timeout 45 $P --shape $s --tokens 256 --activation squared_relu --configs "$c,$c$G,$c"
      c=m32l4_sx4p_m_t16_s2
      timeout 45 $P --shape $s --tokens 256 --configs "$c,$c$G,$c"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  s18b)
    # prepared in session 17: per-kernel profiles of the 256-token defaults with the new route (30b, both
    # activations), then FC2 pipelining on the 30b 256-token gated default (K = 768: 3 steps of 256 on 2 stages;
    # FC2 streams at 51% of the read roofline there), each against the default in the same process
    P="python3 bench/triton_moe_probe.py"
    c=m32l4_sx4p_m_t16_s2
    timeout 45 $P --shape qwen3-30b-a3b --tokens 256 --profile --configs $c > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 45 $P --shape qwen3-30b-a3b --tokens 256 --activation squared_relu --profile --configs m32k_sx4p_f4_t16_s2 >> $OUT/probe.jsonl 2>> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 90 $P --shape $s --tokens 256 --configs "$c,$c+fc2_stages=3,$c+fc2_block_k=128+fc2_stages=4,$c+fc2_block_n=32,$c"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s17e)
    # session 17, call 5: the route's plan folded into its scatter programs (two launches above 1024 pairs instead of
    # three) and the coalesced plane copy of x; GPU tests of both, then same-call A/B against the previous tree
    # (carried in .devcarry/old), 256 tokens, alternating old / new, and a per-kernel profile of the new tree
    L=$OUT/log.txt
    timeout 130 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "route_tables_match or one_program_route_on or chunked_route or (planes_keep_the_bits and odd) or (side_stream_keeps and m32l4)" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8
    OLD="env PYTHONPATH=/tmp/site:$PWD/.devcarry/old python3 .devcarry/old/bench/triton_moe_probe.py"
    NEW="python3 bench/triton_moe_probe.py"
    c=m32l4_sx4p_m_t16_s2
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      for P in "$OLD" "$NEW" "$OLD" "$NEW"; do
        timeout 40 $P --shape $s --tokens 256 --configs "$c,$c" | sed "s/}\$/, \"tree\": \"${P%% *}\"}/"
      done
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 40 $NEW --shape qwen3-30b-a3b --tokens 256 --profile --configs $c >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s17d)
    # session 17, call 4 (the last device minutes): squared ReLU at up to 8 pairs per expert with planes and the plane
    # copy of x beside the route (session 14 timed planes there on one stream: 1-2% slower on 30b), against the
    # default twice; then per-kernel profiles of the 256-token defaults on 30b (where FC1 / FC2 stand with two streams)
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 $P --shape $s --tokens 64 --activation squared_relu --configs "s16k_sx4_f4,s16k_sx4p_f4+side_stream=1,s16k_sx4_f4,s16k_sx4p_f4+side_stream=1"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 50 $P --shape qwen3-30b-a3b --tokens 256 --profile --configs m32l4_sx4p_m_t16_s2 >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 50 $P --shape qwen3-30b-a3b --tokens 256 --activation squared_relu --profile --configs m32k_sx4p_f4_t16_s2 >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s17c)
    # session 17, call 3: the float64 default cases and the layer's CUDA graphs on the new defaults (second stream on
    # the 128-token tiles with 32-token tails, l64k2_sx4p_f4_t32_s2), then the full MoE benchmark and the demo
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py -k "(matches_float64 and (600 or 1024 or 700)) or graph_replay_matches or second_stream or (side_stream and l128m_sa_t32)" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -20
    moe_bench_and_demo 180 $L ;;
  s17b)
    # session 17, call 2: "halves" (the token tile as two accumulators fed by one dequantized weight tile; compile-only,
    # Triton 3.8: the 256-token tiles' wgmmas are no longer serialized, C7515) at 4096 tokens, with and without the
    # second stream, and on the 128-token tiles at 2048; then the tests of halves and of the new second-stream
    # defaults (128-token tiles with 32-token tails, the 2-stage squared-ReLU tile with 32-token tails)
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=x256w_sa_t32a
      timeout 80 $P --shape $s --tokens 4096 --activation squared_relu --configs "$c,$c+halves=1,$c+halves=1+side_stream=2,$c"
      c=x256m_sa_t32
      timeout 80 $P --shape $s --tokens 4096 --configs "$c,$c+halves=1,$c+halves=1+side_stream=2,$c"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=l128w_sa_t32a_s2
      timeout 45 $P --shape $s --tokens 2048 --activation squared_relu --configs "$c,$c+halves=1"
      c=l128m_sa_t32_s2
      timeout 45 $P --shape $s --tokens 2048 --configs "$c,$c+halves=1"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl
    L=$OUT/log.txt
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "halves or (side_stream_keeps and (l128 or l64k2))" > $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -8 ;;
  s16b)
    # session 16, call 1: the second stream (side_stream 1: the plane copies of x beside the route; 2: also the tail
    # pair beside the main pair) against one stream, at 256 tokens (the 30b SwiGLU target) and 64; then its GPU tests
    # (bits against one stream, graph replay) and plane bit tests, which now read the device plane copy
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=m32l4_sx4p_m_t16
      timeout 70 $P --shape $s --tokens 256 --configs "$c,$c+side_stream=1,$c+side_stream=2,$c,$c+side_stream=2"
      c=m32k_sx4p_f4_t16
      timeout 60 $P --shape $s --tokens 256 --activation squared_relu --configs "$c,$c+side_stream=1,$c+side_stream=2,$c"
      c=s16k4_sx4p_m3
      timeout 50 $P --shape $s --tokens 64 --configs "$c,$c+side_stream=1,$c"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "side_stream or (planes_keep and (30b-T64 or odd33))" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -20 ;;
  s16c)
    # session 16, call 2: the rest of s16b's tests (its 170 s stopped after the plane tests and 2 of the second-stream
    # tests), then the second stream at 512 / 1024 / 4096 tokens (tail tiles there; s16a's untimed tails beside)
    # and 235b gated at 256 again (call 1: slower with the tails beside, with a wide spread)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "side_stream" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -20
    P="python3 bench/triton_moe_probe.py"
    s=qwen3-30b-a3b
    c=l64_sx4p_mu_t32
    timeout 60 $P --shape $s --tokens 512 --configs "$c,$c+side_stream=2,$c" > $OUT/probe.jsonl 2> $OUT/probe.err
    c=l64k_sx4p_f4_t32
    timeout 60 $P --shape $s --tokens 512 --activation squared_relu --configs "$c,$c+side_stream=2,l64k2_sx4p_f4_t32+side_stream=2,$c" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      c=l128m_sa_t64p
      timeout 60 $P --shape $s --tokens 1024 --configs "$c,$c+side_stream=2,l128m_sa_t64pu+side_stream=2,$c"
      c=l128w_sa_t64p
      timeout 60 $P --shape $s --tokens 1024 --activation squared_relu --configs "$c,$c+side_stream=2,l128w_sa_t64p2+side_stream=2,$c"
      c=x256w_sa_t32a
      timeout 60 $P --shape $s --tokens 4096 --activation squared_relu --configs "$c,$c+side_stream=2,$c"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    c=m32l4_sx4p_m_t16
    timeout 60 $P --shape qwen3-235b-a22b --tokens 256 --configs "$c,$c+side_stream=2,$c+side_stream=1,$c,$c+side_stream=2" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s16d)
    # session 16, call 3: the float64 default cases and the layer's CUDA graphs on the second-stream defaults, then
    # the full MoE benchmark and the demo
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 190 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py -k "matches_float64 or graph_replay_matches or row_bound or refit_after" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=\|Error" $L | tail -20
    moe_bench_and_demo 175 $L ;;
  s16e)
    # session 16, call 5 (about 4 device minutes left): the second-stream defaults where only the plane copy moves
    # (16-28 and 40-64 pairs per expert: 384 / 768 tokens), against the same tiles on one stream
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 55 $P --shape $s --tokens 384,768 --configs "m32l4_sx4p_m,m32l4_sx4p_m_s2,l64_sx4p_mu,l64_sx4p_mu_s2"
      timeout 55 $P --shape $s --tokens 384,768 --activation squared_relu --configs "m32k_sx4p_f4,m32k_sx4p_f4_s2,l64k2_sx4p_f4,l64k2_sx4p_f4_s2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s16a)
    # prepared in session 15 (not run): the untimed combinations of the 64-token plane tiles (uncapped / 2-stage
    # tails of the 128-token tiles at 1024 tokens, the 2-stage squared-ReLU tile with 32-token tails at 512), then a
    # per-kernel profile of the 30b 256-token default for the FC2 work NOTES session 15 names
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 70 $P --shape $s --tokens 1024 --configs "l128m_sa_t64p,l128m_sa_t64pu,l128m_sa_t64p"
      timeout 70 $P --shape $s --tokens 1024 --activation squared_relu --configs "l128w_sa_t64p,l128w_sa_t64p2,l128w_sa_t64p"
      timeout 70 $P --shape $s --tokens 512 --activation squared_relu --configs "l64k_sx4p_f4_t32,l64k2_sx4p_f4_t32,l64k_sx4p_f4_t32"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 40 $P --shape qwen3-30b-a3b --tokens 256 --profile --configs m32l4_sx4p_m_t16 >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s15c)
    # session 15, call 3: GPU tests of the 64-token plane defaults (bits with and without planes, graph replays, the
    # float64 default cases at 600 / 700 tokens), the full MoE benchmark and the demo; then the untimed cut at 24
    # pairs per expert (384 / 448 tokens)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(matches_float64 and (-600- or -700-)) or l64_ or l64k or t64p" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 170 $L
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 50 $P --shape $s --tokens 384,448 --configs "m32l4_sx4p_m,l64_sx4p_mu_t32"
      timeout 50 $P --shape $s --tokens 384,448 --activation squared_relu --configs "m32k_sx4p_f4,l64k_sx4p_f4_t32"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s15b)
    # session 15, call 2: 64-token plane tiles (call 1: 5-11% faster than the defaults at 40-48 pairs per expert,
    # 10-12% slower at 64 gated) uncapped, with 32-token plane tails, as tails of the 128-token tiles; squared ReLU
    # with 2 FC1 stages (82 KB shared: 2 CTAs per SM instead of 1); plane tails at 4096 tokens; 30b FC2 at 256 tokens
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 110 $P --shape $s --tokens 512,1024 --configs "m32l4_sx4p_m,l128m_sa_t64,l64_sx4p_m,l64_sx4p_mu,l64_sx4p_mu_t32,l128m_sa_t64p"
      timeout 50 $P --shape $s --tokens 640,768 --configs "l64_sx4p_m,l64_sx4p_mu,l64_sx4p_mu_t32"
      timeout 110 $P --shape $s --tokens 512,1024 --activation squared_relu --configs "m32k_sx4p_f4,l64a,l128w_sa_t64,l64k_sx4p_f4,l64k_sx4p_f4+fc1_stages=2,l64k_sx4p_f4_t32,l128w_sa_t64p"
      timeout 40 $P --shape $s --tokens 640,768 --activation squared_relu --configs "l64k_sx4p_f4,l64k_sx4p_f4+fc1_stages=2"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 50 $P --shape qwen3-235b-a22b --tokens 4096 --configs "x256m_sa_t32,x256m_sa_t32p" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 50 $P --shape qwen3-235b-a22b --tokens 4096 --activation squared_relu --configs "x256w_sa_t32a,x256w_sa_t32p" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 45 $P --shape qwen3-30b-a3b --tokens 256 --configs "m32l4_sx4p_m_t16,m32l4_sx4p_m_t16+fc2_block_k=128+fc2_stages=3,m32l4_sx4p_m_t16+fc2_block_n=128,m32l4_sx4p_m_t16" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    python3 -c "
import json,sys
for l in open('$OUT/probe.jsonl'):
    if l.startswith('{'):
        r=json.loads(l); print(r['shape'][6:9], r['activation'][:4], r['tokens'], r['config'], r.get('us', r.get('error')))
" ;;
  s15a)
    # owed from session 14: the float64 default cases at 300 tokens (235b, now on the 16-32 region's plane tiles);
    # per-kernel times of the 256-token defaults; where the 32-token plane tiles stop paying (the cut at 32 pairs per
    # expert predates planes: 640-1024 tokens against the 64 / 128-token defaults there, and 64-token plane tiles);
    # FC2 3 stages / an uncapped FC1 at 256 tokens on 30b; "sx4" with planes on the 256-token squared-ReLU tile
    timeout 90 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "matches_float64 and -300-" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; grep -v "^\.*$" $OUT/tests.log | tail -4
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 $P --shape $s --tokens 256 --profile --configs m32l4_sx4p_m_t16
      timeout 40 $P --shape $s --tokens 256 --profile --activation squared_relu --configs m32k_sx4p_f4_t16
    done > $OUT/profile.jsonl 2> $OUT/profile.err
    cat $OUT/profile.jsonl
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 100 $P --shape $s --tokens 640,768,1024 --configs "l128m_sa_t64,m32l4_sx4p_m,m32l4_sx4p_m+block_t=64,l128m_sa_t64"
      timeout 100 $P --shape $s --tokens 640,768,1024 --activation squared_relu --configs "l64a,m32k_sx4p_f4,m32k_sx4p_f4+block_t=64,l64a"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 60 $P --shape qwen3-30b-a3b --tokens 256 --configs "m32l4_sx4p_m_t16,m32l4_sx4p_m_t16+fc2_stages=3,m32l4_sx4p_mu_t16,m32l4_sx4p_m_t16" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    timeout 80 $P --shape qwen3-235b-a22b --tokens 4096 --activation squared_relu --configs "x256w_sa_t32a,x256w_sa_t32a@sx4+planes=1,x256w_sa_t32a@sx4+planes=1+fc1_block_k=128+fc2_block_k=128,x256w_sa_t32a" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s14r)
    # session 14, call 5: planes on the 32-token tiles from 16 to 32 pairs per expert (30b gated: 10-12% faster at
    # 384 / 512 tokens in call 4): graph replays of both candidates at 512 tokens, probes on both shapes
    timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "four_warp and 512" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; grep -v "^\.*$" $OUT/tests.log | tail -4
    P="python3 bench/triton_moe_probe.py"
    timeout 60 $P --shape qwen3-235b-a22b --tokens 384,512 --configs "m32l4_sx_m,m32l4_sx4p_m,m32l4_sx_m" > $OUT/probe.jsonl 2> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 $P --shape $s --tokens 384,512 --activation squared_relu --configs "m32a_f4,m32k_sx4p_f4,m32a_f4"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s14q)
    # session 14, call 4: GPU tests of the plane defaults (graph replays, float64 default cases), the full MoE
    # benchmark and the demo; then planes on the 32-token tiles from 16 to 32 pairs per expert (384 / 512 tokens)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(four_warp and sx4p) or (matches_float64 and (-64- or -33- or -7-))" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 150 $L
    P="python3 bench/triton_moe_probe.py"
    timeout 60 $P --shape qwen3-30b-a3b --tokens 384,512 --configs "m32l4_sx_m,m32l4_sx4p_m,m32l4_sx_m" > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s14p)
    # session 14: plane-major token operands for the "sx4" tiles (compile-only so far): bit tests against the
    # shuffled planes, then probes at 64 tokens (the sx4 defaults) and 256 tokens (32-token sx4 tiles, plane tails)
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "planes" \
      > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; grep -v "^\.*$" $OUT/tests.log | tail -15
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 $P --shape $s --tokens 64 --configs "s16k4_sx4_m3,s16k4_sx4p_m3,s16k4_sx4_m3,s16k4_sx4p_m3"
      timeout 40 $P --shape $s --tokens 64 --activation squared_relu --configs "s16k_sx4_f4,s16k_sx4p_f4,s16k_sx4_f4,s16k_sx4p_f4"
      timeout 55 $P --shape $s --tokens 256 --configs "m32l4_sx_m_t16,m32l4_sx_m_t16p,m32l4_sx4p_m_t16,m32l4_sx4p_mu_t16,m32l4_sx_m_t16"
      timeout 50 $P --shape $s --tokens 256 --activation squared_relu --configs "m32a_f4_t16,m32a_f4_t16p,m32k_sx4p_f4_t16,m32a_f4_t16"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  owed13)
    # owed from session 13 (no device time left): squared ReLU 235b at 256 tokens with / without the 16-token tails
    # (call 3's line hit its time limit); the tails' upper cut (320 / 384 tokens, both shapes); the squared-ReLU "sx4"
    # tile at 64 tokens on 235b again (the benchmark row did not move as call 2's probe said)
    P="python3 bench/triton_moe_probe.py"
    timeout 70 $P --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs "m32a_f4,m32a_f4_t16,m32a_f4" > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 60 $P --shape qwen3-235b-a22b --tokens 64 --activation squared_relu --configs "s16k_sx_f4,s16k_sx4_f4,s16k_sx_f4,s16k_sx4_f4" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 70 $P --shape $s --tokens 320,384 --configs "m32l4_sx_m,m32l4_sx_m_t16,m32l4_sx_m"
      timeout 70 $P --shape $s --tokens 320,384 --activation squared_relu --configs "m32a_f4,m32a_f4_t16"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s13b)
    # session 13, call 4: GPU tests of the new defaults (graph replays of the 32-token tiles with 16-token "sx4" tails,
    # the float64 default cases whose tile changed: squared ReLU at 1.5-8 pairs per expert, 8-32 pairs per expert), the
    # full MoE benchmark and the demo; then probes of the tails at 384 / 512 tokens and squared ReLU 235b at 256
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "(matches_float64 and (300 or 5-2-160 or 64-squared_relu or 7-squared_relu)) or (four_warp and t16)" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 150 $L
    P="python3 bench/triton_moe_probe.py"
    timeout 30 $P --shape qwen3-235b-a22b --tokens 256 --activation squared_relu --configs "m32a_f4,m32a_f4_t16" > $OUT/probe.jsonl 2> $OUT/probe.err
    timeout 40 $P --shape qwen3-30b-a3b --tokens 384,512 --configs "m32l4_sx_m,m32l4_sx_m_t16" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s13a)
    # session 13, call 3: the "sx4" float64 cases owed12's test step did not reach (its 200 s limit), the graph replay
    # of the squared-ReLU "sx4" default s16k_sx4_f4, the 32-token tiles with 16-token "sx4" tails (float64 cases);
    # then probes of those tails and of the 16-token "sx4" tile at 128-256 tokens (8-16 pairs per expert)
    timeout 230 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "sx4_tiles_match_float64 or s16k_sx4_f4 or _t16" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; grep -v "^\.*$" $OUT/tests.log | tail -30
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 50 $P --shape $s --tokens 256 --configs "m32l4_sx_m,m32l4_sx_m_t16,s16k4_sx4_m3,m32l4_sx_m"
      timeout 50 $P --shape $s --tokens 256 --activation squared_relu --configs "m32a_f4,m32a_f4_t16,s16k_sx4_f4,m32a_f4"
      timeout 40 $P --shape $s --tokens 128,192 --configs "m32l4_sx_m,m32l4_sx_m_t16,s16k4_sx4_m3"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  owed12)
    # owed from session 12 (no device time left after call 5): the GPU tests of "sx4" and of the new default
    # s16k4_sx4_m3 (float64 cases, graph replay), the full MoE benchmark and the demo with it. Then owed12p: "sx4" for
    # squared ReLU at 64 / 256 tokens (m32a_f4 with sx4: 104 / 109 registers, no spill), 128-deep K steps at 64 tokens
    # (compile-only: 95 / 93 registers, 45 / 33 KB shared),
    # and for m32l4 at 256 without its register cap / with 128-deep K steps (109 registers, no spill)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "sx4 or matches_float64 or replay_of_the_four_warp_tiles" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 150 $L ;;
  owed12p)
    # the probes owed12 names (a call of their own: about 5 minutes), and the one-program route on 1-16 warps
    # (TritonMoEConfig.route_warps): its tests, then per-kernel profiles at 64 tokens (the route took 9.4 us in run 15)
    timeout 60 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "one_program_route_on_other_warp_counts" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -2 $OUT/tests.log
    B=s16k4_sx4_m3
    timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 64 --profile \
      --configs "$B,$B+route_warps=2,$B+route_warps=8,$B+route_warps=16" > $OUT/route.jsonl 2>/dev/null
    cat $OUT/route.jsonl
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 45 $P --shape $s --tokens 64 --activation squared_relu --configs "s16k_sx_f4,s16k_sx_f4@sx4,s16k_sx_f4"
      timeout 45 $P --shape $s --tokens 256 --activation squared_relu --configs "m32a_f4,m32a_f4@sx4,m32a_f4"
      timeout 45 $P --shape $s --tokens 64 --configs "s16k4_sx4_m3,s16k4_sx4_m3+fc1_block_k=128+fc2_block_k=128+fc1_stages=4+fc2_stages=3,s16k4_sx4_m3"
      timeout 60 $P --shape $s --tokens 256 --configs "m32l4_sx_m,m32l4_sx_m@sx4+fc1_maxnreg=255+fc2_maxnreg=255,m32l4_sx_m@sx4+fc1_block_k=128+fc2_block_k=128+fc1_stages=3+fc2_stages=3,m32l4_sx_m"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s12c)
    # session 12, call 5 (about 6 minutes of device time left): "sx4" (weight rows read as uint32 words: 16-byte
    # copies, 4 byte-plane MMAs) on the 64 / 256-token tiles: three float64 tests, then probes against the same tiles
    timeout 80 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "sx4_tiles_match_float64 and ((s16k4 and (30b-T64 or odd7)) or (m32l4 and 235b-T256))" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -2 $OUT/tests.log
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 45 $P --shape $s --tokens 64 --configs "s16k4_sx_m3,s16k4_sx_m3@sx4,s16k4_sx_m3"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 $P --shape $s --tokens 256 --configs "m32l4_sx_m,m32l4_sx_m@sx4"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s12b)
    # session 12, call 3: GPU tests of the new gated defaults (s16k4_sx_m3: 3 FC1 stages; m32l4_sx_m up to 32 pairs per
    # expert), the full MoE benchmark and the demo, then FC2 with 3 stages on s16k4_sx_m3 (probe)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 180 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "s16k4_sx_m3 or matches_float64 or replay_of_the_four_warp_tiles[m32l4_sx_m-512]" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 150 $L
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 40 $P --shape $s --tokens 64 --configs "s16k4_sx_m3,s16k4_sx_m3+fc2_stages=3,s16k4_sx_m3"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s12a)
    # session 12, call 2: L2 prefetch hints (route programs prefetch FC1's first experts, extra FC1 grid rows
    # FC2's): their bit-equality and graph-replay tests, then probes against the same tiles without them
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "l2_prefetch" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      B=s16k4_sx_m
      timeout 90 $P --shape $s --tokens 64 --configs "$B,$B+prefetch_fc1_mb=16,$B+prefetch_fc1_mb=32,$B+prefetch_fc1_mb=48,$B+prefetch_fc1_mb=32+prefetch_fc2_mb=16,$B+prefetch_fc2_mb=16,$B"
      B=m32l4_sx_m
      timeout 90 $P --shape $s --tokens 256 --configs "$B,$B+prefetch_fc1_mb=32,$B+prefetch_fc1_mb=32+prefetch_fc2_mb=16,$B+prefetch_fc2_mb=24,$B"
      timeout 60 $P --shape $s --tokens 64 --configs "s16k4_sx_m+prefetch_fc1_mb=32+prefetch_fc2_mb=16,s16k4_sx_m+fc1_stages=3+prefetch_fc1_mb=32+prefetch_fc2_mb=16"
      timeout 60 $P --shape $s --tokens 1024 --configs "l128m_sa_t64,l128m_sa_t64+prefetch_fc1_mb=32+prefetch_fc2_mb=16"
      timeout 60 $P --shape $s --tokens 4096 --activation squared_relu --configs "x256w_sa_t32a,x256w_sa_t32a+prefetch_fc1_mb=32+prefetch_fc2_mb=16"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  owed11)
    # owed from session 11 (no device time left): the quantize / refit / memory GPU tests and the refit benchmark on
    # the address reuse (quantize_experts_into_triton(pointers=...)); then per-kernel profiles of the 4-warp defaults
    # and the probes NOTES session 11 lists (24-pair cut, 3 FC1 stages under the cap)
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
      tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
    timeout 90 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "four_warp_256_token" > $OUT/tests256.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests256.log; tail -3 $OUT/tests256.log
    refit_bench 100
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 $P --shape $s --tokens 64 --configs s16k4_sx_m --profile
      timeout 60 $P --shape $s --tokens 256 --configs m32l4_sx_m --profile
      timeout 90 $P --shape $s --tokens 64 --configs "s16k4_sx_m,s16k4_sx_m+fc1_stages=3,s16k4_sx_m"
      timeout 90 $P --shape $s --tokens 384,448,512 --configs "m32l4_sx_m,l128m_sa_t64"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl ;;
  s11d)
    # session 11, call 5 (about 7 minutes of device time left): squared ReLU at 4096 tokens with x256w_sa's FC2 / FC1
    # on 4 warps and 64 rows (two CTAs per SM): probes first, then the bit-equality tests of both candidates
    P="python3 bench/triton_moe_probe.py"
    B=x256w_sa_t32a; F2="+fc2_warps=4+fc2_block_n=64"; F1="+fc1_warps=4+fc1_block_n=64"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 75 $P --shape $s --tokens 4096 --activation squared_relu --configs "$B,$B$F2,$B$F2$F1,$B"
    done > $OUT/probe.jsonl 2> $OUT/probe.err
    cat $OUT/probe.jsonl
    timeout 100 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "four_warp_256_token" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log ;;
  s11c)
    # session 11, call 3: GPU tests of the 4-warp defaults (bit-equal to the tiles they replace, float64 default
    # cases, graph replays), the full MoE benchmark, the demo, then probes for the next session (4-CTA caps, the
    # 8 pairs-per-expert cut at 128 tokens, the 4-warp tiles as tails of the 256-token tiles)
    L=$OUT/log.txt
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L
    timeout 230 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "four_warp or matches_float64" >> $L 2>&1
    echo "pytest rc=$?" >> $L
    grep "passed\|failed\|rc=" $L
    moe_bench_and_demo 140 $L
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 45 $P --shape $s --tokens 128 --configs "s16k4_sx_m,m32l4_sx_m,s16k4_sx_m+fc1_maxnreg=128+fc2_maxnreg=128"
      timeout 45 $P --shape $s --tokens 4096 --configs "x256m_sa_t32,x256m_sa_t32q"
      timeout 45 $P --shape $s --tokens 4096 --activation squared_relu --configs "x256w_sa_t32a,x256w_sa_t32q"
    done > $OUT/probe.jsonl 2>/dev/null
    cat $OUT/probe.jsonl ;;
  s11b)
    # session 11, call 2: more CTAs per SM at 64 / 256 tokens (FC2 and FC1 on 4 warps under register caps), both
    # activations; then the refit benchmark of the tree before session 10's overlap check (.devcarry/old) for an A/B
    P="python3 bench/triton_moe_probe.py"
    F2="+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168+fc2_stages=2"
    F1="+fc1_gate_merge=1+fc1_block_n=32+fc1_warps=4+fc1_stages=2+fc1_maxnreg=168"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 100 $P --shape $s --tokens 64 --configs "s16k_sx_rm$F2,s16k_sx_rm$F2$F1,s16k_sx_rm+fc2_warps=4+fc2_block_n=64+fc2_block_k=128+fc2_stages=3+fc2_maxnreg=128,s16k_sx_rm+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168+fc2_stages=3,s16k_sx_rm"
      timeout 110 $P --shape $s --tokens 256 --configs "m32l_sx$F2,m32l_sx$F2$F1,m32l_sx+fc2_warps=4+fc2_block_n=64+fc2_block_k=128+fc2_stages=3+fc2_maxnreg=168,m32l_sx+fc2_warps=4+fc2_block_n=64+fc2_block_k=128+fc2_stages=3+fc2_maxnreg=128,m32l_sx$F2+fc1_block_k=128+fc1_stages=3+fc1_maxnreg=168,m32l_sx"
      timeout 80 $P --shape $s --tokens 64 --activation squared_relu --configs "s16k_sx_r,s16k_sx_r$F2,s16k_sx_r$F2+fc1_block_n=64+fc1_warps=4+fc1_stages=2+fc1_maxnreg=168"
      timeout 80 $P --shape $s --tokens 256 --activation squared_relu --configs "m32a,m32a$F2,m32a+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -3 $OUT/probe.err
    (cd .devcarry/old && PYTHONPATH=/tmp/site:.  timeout 90 python3 bench/refit.py --out $OUT/old > $OUT/refit_old.log 2>&1; echo "rc=$?" >> $OUT/refit_old.log)
    cat $OUT/old/refit.md | grep "mapping\|stream\|Device copy\|loop" ;;
  s11a)
    # session 11, call 1: what session 10 owed (graph replays of x256m / x256w / l128w, sx_auto of l128w / x256w), the
    # refit benchmark on the overlap-checking planner, per-kernel profiles and config probes at 64 / 256 tokens
    timeout 220 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "merged_256 or squared_relu_tiles or (sx_auto and (l128w or x256w))" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
    refit_bench 100
    P="python3 bench/triton_moe_probe.py"
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 60 $P --shape $s --tokens 64 --configs s16k_sx_rm --profile
      timeout 60 $P --shape $s --tokens 256 --configs m32l_sx --profile
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    for s in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 80 $P --shape $s --tokens 64 --configs "s16k_sx_rm,s16k_sx_rm+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168+fc2_stages=2,s16k_sx_rm+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168"
      timeout 100 $P --shape $s --tokens 256 --configs "m32l_sx,m32l_sx+fc2_maxnreg=128,m32l_sx+fc2_warps=4+fc2_block_n=64+fc2_maxnreg=168+fc2_stages=2,m32l_sx+fc1_gate_merge=1+fc1_warps=8+fc1_maxnreg=168,s16k_sx_rm"
    done >> $OUT/probe.jsonl 2>> $OUT/probe.err
    cat $OUT/probe.jsonl; tail -5 $OUT/probe.err ;;
  owed10)
    # owed from session 10 (call 4 ran out of time): graph replays of x256m / x256w / l128w, the remaining tests of
    # the new tiles, then the refit benchmark (the planner now checks quantize sources for overlap)
    timeout 360 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "merged_256 or squared_relu_tiles or gate_merge or merged_defaults or x256w or l128w" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
    refit_bench 120 ;;
  mid)
    # next session: l128a_sa between 24 and 64 pairs per expert (512 / 768 tokens at 128 experts, top-8), where
    # choose_config keeps l64b / l64a untimed against it
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 80 python3 bench/triton_moe_probe.py --shape $shape --tokens 512,768 --configs l64b,l128a_sa \
        >> $OUT/probe.jsonl 2>> $OUT/probe.err
      timeout 80 python3 bench/triton_moe_probe.py --shape $shape --activation squared_relu --tokens 512,768 \
        --configs l64a,l128a_sa >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    grep '^{' $OUT/probe.jsonl ;;
  *) echo "usage: bash tools/gpu_next.sh verify|refit|final|ncu64|sxauto|sxauto2|sxauto3|s8a|s8b|s8c|s9a|s9c|s10a|s10b|s10d|s10e|owed10|s11a|s11b|s11c|s11d|owed11|mid" >&2; exit 2 ;;
esac
