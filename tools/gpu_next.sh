#!/usr/bin/env bash
# GPU steps for the device tool (run each with timeout_s=600; carry .whl), from the repository root:
#   OUT=$OUT bash tools/gpu_next.sh MODE
#   s61c     # session 58, short (about 4 minutes): on an H200 the 235b rows at 64 / 256 tokens, the clocks after, then
#            # the 256-token default against the all-f8x2 16-token tile; any other card exits at once
#   s61b     # session 58, after s61a's H100 run (no gain from deeper rings there): on an H200 the 235b rows, tiles and
#            # profile of s59b, then the default against 4 FC2 stages alone (stage_probe 90 2); any other card exits
#   s61a     # session 58: on an H200 the 235b rows, tiles and profile of s59b (about 5 minutes), then on any card the
#            # 235b / 256-token squared-ReLU default with deeper rings probed interleaved (stage_probe, 150 s):
#            # does the H200 want more bytes in flight per FC program than the H100?
#   s60b     # session 57: on an H200 first s59b (the 235b rows, tiles and profile, about 5 minutes); then on any card
#            # the layer's capture refusals on a real capture, the permuted tests and the Megatron layer's CUDA-graph
#            # tests (capture_tests, 200 s limit)
#   s60c     # session 57, short: on an H200 only the 235b rows at 64 / 256 tokens; on any other card capture_tests
#   s60a     # session 57, any card: the 235b rows, tiles and profile of s59b (on an H100: does run 56's slow 235b /
#            # 256-token row have a twin there against run 54?)
#   s59c     # session 56, any card: the default pick with and without its route launches in the graph (`default~route`:
#            # each map's route computed once outside the graph), squared ReLU at 16 / 64 tokens, both shapes: the bound
#            # on a route-free launch sequence (bench/NOTES_triton_moe.md, session 56); about 4 minutes
#   s59a     # session 56: on an H200 first the H200 part of s58c (about 5 minutes); then on any card the permuted-contract
#            # GPU tests of s58d (150 s limit)
#   s59b     # session 56: on an H200 the H200 part of s58c (about 5 minutes); any other card only prints its state
#   s58a     # session 55: s57a on an H200, s57b on any other card (one call, whichever card comes)
#   s58c     # session 55: on an H200 the 235b rows of s57a alone (256 tokens timed, its tiles probed, the default's kernels
#            # profiled; about 5 minutes); on any other card the tests of s58b
#   s58d     # session 55: the tests of s58b on any card
#   s58b     # session 55: s57a on an H200; on any other card the permuted-contract GPU tests (CPU counts with no sync)
#   s57a     # session 54, on an H200 only (other cards exit at once): the card's clocks / power before and after; the 64 / 256-
#            # token rows of both shapes (interleaved timing); the 256-token squared-ReLU tiles probed interleaved on
#            # both shapes; the default's kernels profiled at 235b 256 and 30b 64 tokens (seven files under $OUT)
#   s57b     # session 54, any card: applies bench/results/run57/route_beside_copy.patch (the expert groups' routes
#            # beside x's copy) to the device's copy of the tree, runs the group GPU tests, then an A/B of
#            # triton_launch.py with / without the patch (probe rounds new, old, new, old: 30b squared ReLU at 16 / 64)
#   s56a     # session 53: the card's clocks / power; the GPU tests of s55b; the 235b rows at 64 / 256 tokens again
#            # (H200: run 56 call 1's 256-token squared-ReLU row 12% slower than run 49's, same tile); that tile's
#            # kernels profiled (eight files under $OUT, the limit)
#   s56b [S] # session 53: s55b with a time limit of S seconds (run 56 call 2: `s56b 150`)
#   s55a     # session 52: on an H200 what s54b runs; elsewhere the GPU tests of quantize / refit / memory / layer CUDA
#            # graphs and some of the Triton MoE's (the review's changes) and the refit benchmark
#   s55b [S] # session 52: the GPU tests of s55a alone, on any card (S seconds, 270 by default: about 5 minutes)
#   s54b     # session 51, later tries (ask for an H200): on an H200 only (other cards exit at once) the full benchmark,
#            # the demo, copy ceilings, quantize and refit benchmarks (about 5 minutes)
#   s54a     # session 51 (run 54 call 2): copy ceilings by method and the quantize benchmark; on an H200 then the full
#            # benchmark, the demo and the refit benchmark
#   s53b     # session 50: copy ceilings; on an H200 the benchmark at 16 / 64 / 256 tokens, elsewhere the refit benchmark
#   s53a     # session 50 (run 54 call 1): copy ceilings; on an H200 the full benchmark and the demo, elsewhere the refit
#            # benchmark and the squared-ReLU rows at 16-256 tokens
#   s49a     # session 49 (run 53 call 1): the full benchmark and the demo, then the GPU tests session 49 reordered
#   final    # GPU tests of the default tiles and the layer CUDA graphs, the demo, the full MoE benchmark
#   refit    # GPU tests of quantize / refit / memory / layer graphs, the refit and bounded-row benchmarks
# The modes of sessions 1-48 (cited by the READMEs of bench/results/run*/, the changelog and test comments) were
# removed in session 51; read them at commit d06241e: `git show d06241e:tools/gpu_next.sh`.
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
# refit_bench SECONDS [ARGS...]: bench/refit.py ARGS into $OUT (refit.md / refit.json; refit.log ends with its exit
# status), its table rows printed
refit_bench() {
  timeout "$1" python3 bench/refit.py --out $OUT "${@:2}" > $OUT/refit.log 2>&1
  echo "refit rc=$?" >> $OUT/refit.log; tail -1 $OUT/refit.log; grep "^| " $OUT/refit.md
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
# review_gpu_tests SECONDS: the GPU tests of session 52's changes (quantize / refit / memory / layer CUDA graphs, and
# five Triton MoE test functions) and session 53's (the permuted contract's padding rows on the Triton layer), two
# pytest processes side by side; logs gpu_tests.log / moe_tests.log, tails printed
review_gpu_tests() {
  bg_pytest "$1" $OUT/gpu_tests.log tests/functional/test_quantize_gpu.py tests/functional/test_refit_gpu.py \
    tests/functional/test_memory_gpu.py tests/functional/test_layer_cuda_graph_gpu.py
  bg_pytest "$1" $OUT/moe_tests.log tests/functional/test_triton_moe_gpu.py -k "test_matches_float64_reference \
    or test_cuda_graph_replay_with_new_routing_and_valid_tokens or test_gluon_defaults_and_the_env_switch \
    or test_rejects_bad_shapes or test_fp32_out_and_row_prefix or test_layer_permuted_padding_rows_on_the_device"
  wait; tail -3 $OUT/gpu_tests.log; tail -3 $OUT/moe_tests.log
}
# card_state: the card, its clocks, power and throttle reasons into $OUT/log.txt (printed); card_state_after: the
# clocks, power and throttle reasons again, appended (after the timed work)
card_state() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee $OUT/log.txt
}
card_state_after() {
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv >> $OUT/log.txt
}
# quantize_bench SECONDS: bench/quantize.py into $OUT (log quantize.log), its table printed
quantize_bench() {
  timeout "$1" python3 bench/quantize.py --out $OUT > $OUT/quantize.log 2>&1; echo "quantize rc=$?" >> $OUT/quantize.log
  grep "^| \|rc=\|Device copy" $OUT/quantize.log | cut -c1-400
}
# The 235b / 256-token squared-ReLU default tile (choose_config's pick there since session 32)
DEFAULT_256=m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt
# h200_or_exit: exit (status 0, "not an H200" printed) unless card_state found an H200
h200_or_exit() {
  grep -q H200 $OUT/log.txt || { echo "not an H200"; exit 0; }
}
# rows_235b SECONDS: the 235b rows at 64 / 256 tokens (moe_bench SECONDS), then the clocks after
rows_235b() {
  moe_bench "$1" --shapes qwen3-235b-a22b --tokens 64,256
  card_state_after
}
# probe_235b_256 SECONDS LOG LABEL CONFIGS [ARGS...]: bench/triton_moe_probe.py on the 235b / 256-token squared-ReLU
# layer with CONFIGS (and ARGS) into $OUT/LOG, "LABEL rc=N" appended
probe_235b_256() {
  timeout "$1" python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 256 --activation squared_relu \
    --configs "$4" "${@:5}" > $OUT/$2 2>&1
  echo "$3 rc=$?" >> $OUT/$2
}
# h200_235b_rows BENCH_S PROBE_S: the 235b rows at 64 / 256 tokens (rows_235b BENCH_S), the 256-token squared-ReLU
# tiles probed interleaved (PROBE_S seconds; probe.log) and the default tile's kernels profiled (profile.log)
h200_235b_rows() {
  rows_235b "$1"
  probe_235b_256 "$2" probe.log probe \
    $DEFAULT_256,m32k_sx4p_f4_g_s2_n64_c2_sw,s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x,s16_f8q_s2_gf_g1_f128_st
  grep '"us"\|rc=' $OUT/probe.log
  probe_235b_256 60 profile.log profile $DEFAULT_256 --profile
  grep 'kernels_us\|rc=' $OUT/profile.log | cut -c1-900
}
# permuted_tests SECONDS: the permuted-contract GPU tests of the Triton layer (tests.log, its tail printed)
permuted_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py -k "permuted" \
    > $OUT/tests.log 2>&1; echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
}
# capture_tests: the layer's capture refusals on a real capture with the permuted tests (tests.log) beside the Megatron
# layer's CUDA-graph tests (graph_tests.log), their tails printed
capture_tests() {
  bg_pytest 200 $OUT/tests.log tests/functional/test_triton_moe_gpu.py -k "refusals_inside or permuted"
  bg_pytest 200 $OUT/graph_tests.log tests/functional/test_layer_cuda_graph_gpu.py
  wait; tail -3 $OUT/tests.log; tail -3 $OUT/graph_tests.log
}
# stage_probe SECONDS [COUNT]: the 235b / 256-token squared-ReLU default tile with 4 / 5 FC2 stages and 4 FC1 stages on
# its main (32-token) tile, timed interleaved with the tile as it is (stage_probe.log); COUNT: the first COUNT of those
# five configs (all by default)
stage_probe() {
  local d=$DEFAULT_256
  local configs=$(echo "$d,$d+fc2_stages=4,$d+fc2_stages=5,$d+fc1_stages=4,$d+fc1_stages=4+fc2_stages=4" | cut -d, -f1-${2:-5})
  probe_235b_256 "$1" stage_probe.log "stage probe" "$configs"
  grep '"us"\|error\|rc=' $OUT/stage_probe.log | cut -c1-300
}
case "${1:-}" in
  s61c)
    card_state
    h200_or_exit
    rows_235b 150
    probe_235b_256 90 probe.log probe default,s16_f8q_s2_gf_g1_f128_st
    grep '"us"\|rc=' $OUT/probe.log ;;
  s61b)
    card_state
    h200_or_exit
    h200_235b_rows 140 130
    stage_probe 90 2 ;;
  s61a)
    card_state
    if grep -q H200 $OUT/log.txt; then h200_235b_rows 140 130; fi
    stage_probe 150 ;;
  s60c)
    card_state
    if grep -q H200 $OUT/log.txt; then rows_235b 150; exit 0; fi
    capture_tests ;;
  s60b)
    bash "$0" s59b
    capture_tests ;;
  s60a)
    card_state
    h200_235b_rows 140 130 ;;
  s59c)
    card_state
    for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 110 python3 bench/triton_moe_probe.py --shape $shape --tokens 16,64 --activation squared_relu \
        --configs default,default~route >> $OUT/probe.log 2>&1; echo "probe $shape rc=$?" >> $OUT/probe.log
    done
    grep '"us"\|rc=' $OUT/probe.log
    timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 16 --activation squared_relu --profile \
      --configs default,default~route > $OUT/profile.log 2>&1; echo "profile rc=$?" >> $OUT/profile.log
    grep 'kernels_us\|rc=' $OUT/profile.log | cut -c1-900 ;;
  s59b)
    card_state
    if grep -q H200 $OUT/log.txt; then h200_235b_rows 140 130; fi ;;
  s59a)
    bash "$0" s59b
    permuted_tests 150 ;;
  s58a)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then exec bash "$0" s57a; else exec bash "$0" s57b; fi ;;
  s58c)
    card_state
    if grep -q H200 $OUT/log.txt; then h200_235b_rows 150 150; exit 0; fi
    exec bash "$0" s58b ;;
  s58b|s58d)
    if [ "$1" = s58b ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then exec bash "$0" s57a; fi
    card_state
    permuted_tests 170 ;;
  s57a)
    card_state
    if ! grep -q H200 $OUT/log.txt; then echo "not an H200"; exit 0; fi  # (run 57 call 1, an H100, ran review_gpu_tests 270 here)
    moe_bench 220 --shapes qwen3-30b-a3b,qwen3-235b-a22b --tokens 64,256
    card_state_after
    for shape in qwen3-235b-a22b qwen3-30b-a3b; do
      timeout $([ $shape = qwen3-30b-a3b ] && echo 80 || echo 150) python3 bench/triton_moe_probe.py --shape $shape --tokens 256 --activation squared_relu --configs \
        m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt,m32k_sx4p_f4_g_s2_n64_c2_sw,s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x,s16_f8q_s2_gf_g1_f128_st \
        >> $OUT/probe.log 2>&1; echo "probe $shape rc=$?" >> $OUT/probe.log
    done
    grep '"us"\|rc=' $OUT/probe.log
    for args in "qwen3-235b-a22b --tokens 256 --configs m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt" \
                "qwen3-30b-a3b --tokens 64 --configs s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_eg2"; do
      timeout 60 python3 bench/triton_moe_probe.py --activation squared_relu --profile --shape $args >> $OUT/profile.log 2>&1
      echo "profile rc=$?" >> $OUT/profile.log
    done
    grep 'kernels_us\|rc=' $OUT/profile.log | cut -c1-900 ;;
  s57b)
    L=megatron_mxfp8_moe/kernels/triton_launch.py
    card_state
    cp $L /tmp/old_launch.py
    patch -p1 < bench/results/run57/route_beside_copy.patch > $OUT/patch.log 2>&1 || { cat $OUT/patch.log; exit 1; }
    cp $L /tmp/new_launch.py
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py tests/unit/kernels/test_triton_moe.py \
      -k "cuda_graph_replay_with_expert_groups or expert_groups_keep_the_bits or expert_groups_order" > $OUT/tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/tests.log; tail -3 $OUT/tests.log
    for round in new old new old; do
      cp /tmp/${round}_launch.py $L
      timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 16,64 --activation squared_relu \
        --configs s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_eg2 2>&1 | grep '"us"' | sed "s/^/$round /" >> $OUT/ab.log
    done
    cp /tmp/new_launch.py $L
    sed 's/"activation": //; s/, "timing": "interleaved", "mma_v3": true//' $OUT/ab.log | cut -c1-200 ;;
  s56a)
    card_state
    review_gpu_tests 170
    moe_bench 110 --shapes qwen3-235b-a22b --tokens 64,256
    card_state_after
    timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-235b-a22b --tokens 256 --activation squared_relu \
      --configs m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw_f1xt --profile > $OUT/profile.log 2>&1
    echo "profile rc=$?" >> $OUT/profile.log; grep -v "Warning\|warn" $OUT/profile.log | tail -12 ;;
  s55a)
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    if grep -q H200 $OUT/log.txt; then
      moe_bench_and_demo 330 $OUT/demo.log
      card_and_copy_ceilings; quantize_bench 60; refit_bench 100 --reps 20
    else
      echo "not an H200: $(cat $OUT/log.txt)"
      review_gpu_tests 300; refit_bench 120 --reps 20
    fi ;;
  s55b|s56b)
    # the GPU tests of s55a alone (any card), no benchmark, SECONDS (default 270; run 56 call 2 ran `s56b 150`)
    nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/log.txt
    review_gpu_tests "${2:-270}" ;;
  s54b)
    # session 51, after call 2: on an H200 only (other cards exit at once) the full benchmark and the demo, then the
    # copy ceilings, the quantize and the refit benchmarks
    nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
    if ! grep -q H200 $OUT/log.txt; then echo "not an H200: $(cat $OUT/log.txt)"; exit 0; fi
    moe_bench_and_demo 330 $OUT/demo.log  # not log.txt: card_and_copy_ceilings rewrites it
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
    # card is an H200 (the GPU); elsewhere the refit benchmark and the 16-256 token rows
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
  *) echo "usage: bash tools/gpu_next.sh s56b|s56a|s55a|s55b|s54b|s54a|s53b|s53a|s49a|final|refit" >&2; exit 2 ;;
esac
