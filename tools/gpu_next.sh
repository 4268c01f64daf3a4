#!/usr/bin/env bash
# Prepared for the next session with device time: two H200 calls (run each with timeout_s=600).
#   bash tools/gpu_next.sh kernels  # GPU tests of the new default s16k_sx_r and the GEMV small-T candidates,
#                                   # then the MoE sweep at 1-16 tokens that times them beside the defaults
#   bash tools/gpu_next.sh refit    # GPU tests of quantize/refit/memory (the pipelined stream's first GPU run),
#                                   # the refit benchmark alone (multi-layer stream rows), the bounded-row bench
#   bash tools/gpu_next.sh final    # GPU tests of the default tiles and the layer CUDA graphs, the demo, and the
#                                   # full MoE benchmark (bench/moe_layer.py --warm 14) for the PERFORMANCE tables
#   bash tools/gpu_next.sh verify   # FIRST next session: the GPU tests changed after session 5's last call, and a
#                                   # probe of the GEMV defaults (compare with docs/PERFORMANCE.md 2a)
# A candidate becomes a default only if its tests pass AND the sweep shows it faster; then run "final".
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
case "${1:-}" in
  kernels)
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "s16k_sx_r or g16 or g32" > $OUT/capped_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/capped_tests.log
    mkdir -p $OUT/sweep
    timeout 270 python3 bench/moe_layer.py --sweep --warm 14 --tokens 1,4,16 --out $OUT/sweep > $OUT/sweep.log 2>&1
    echo "sweep rc=$?" >> $OUT/sweep.log
    tail -3 $OUT/capped_tests.log; tail -5 $OUT/sweep.log ;;
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
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 230 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py \
      -k "matches_float64 or new_routing or fp32_out or rejects or refit_reaches or layer_cuda_graph or graph_replay_matches or row_bound or refit_after" \
      > $OUT/kernel_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/kernel_tests.log
    TORCHDYNAMO_DISABLE=1 timeout 80 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1
    echo "demo rc=$?" >> $OUT/demo.log
    mkdir -p $OUT/moe
    timeout 270 python3 bench/moe_layer.py --warm 14 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    tail -3 $OUT/kernel_tests.log; tail -6 $OUT/demo.log; tail -16 $OUT/moe_bench.log ;;
  verify)
    # what changed after session 5's last GPU call: the dequant-variant tests' MMA baselines, the GEMV kernels'
    # shared helpers (and the removed fused form); then the GEMV defaults' timing against the final table
    timeout 400 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "v4_variants or v3_variants or v3_cuda_graph or v4_cuda_graph or gemv or matches_float64" \
      > $OUT/verify_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/verify_tests.log
    timeout 120 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 1,4,16 --configs g16p3,g32p,g16p \
      > $OUT/probe.jsonl 2>&1
    tail -3 $OUT/verify_tests.log; grep '^{' $OUT/probe.jsonl ;;
  group)
    # session 6: the verify tests above plus the v7 grouped-GEMV candidates (q*) against the float64 oracle, then
    # a probe of the candidates beside the defaults on both shapes, both activations, 1-64 tokens
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 290 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      -k "v4_variants or v4_cuda_graph or gemv or matches_float64" > $OUT/group_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/group_tests.log
    for act in swiglu squared_relu; do for shape in qwen3-30b-a3b qwen3-235b-a22b; do
      timeout 66 python3 bench/triton_moe_probe.py --shape $shape --activation $act --tokens 1,4,16,64 \
        --configs g16p3,g32p,g16p,s16k_sx_r,q1,q2,q2n,q2s3,q3,q4 >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done; done
    tail -5 $OUT/group_tests.log; grep -c '^{' $OUT/probe.jsonl; tail -3 $OUT/probe.err ;;
  final6)
    # session 6, after the q1 default: its GPU tests with the default-tile and layer-graph tests, the full MoE
    # benchmark (PERFORMANCE tables), a probe around the new thresholds (8-32 tokens), the demo
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
    timeout 280 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
      tests/functional/test_layer_cuda_graph_gpu.py \
      -k "q1 or matches_float64 or new_routing or fp32_out or rejects or refit_reaches or layer_cuda_graph or graph_replay_matches or row_bound or refit_after" \
      > $OUT/kernel_tests.log 2>&1
    echo "pytest rc=$?" >> $OUT/kernel_tests.log
    mkdir -p $OUT/moe
    timeout 170 python3 bench/moe_layer.py --warm 14 --out $OUT/moe > $OUT/moe_bench.log 2>&1
    echo "moe rc=$?" >> $OUT/moe_bench.log
    for spec in "qwen3-30b-a3b swiglu" "qwen3-235b-a22b swiglu" "qwen3-30b-a3b squared_relu"; do set -- $spec
      timeout 40 python3 bench/triton_moe_probe.py --shape $1 --activation $2 --tokens 8,24,32 \
        --configs g32p,g16p,q1,q1s3,q1b,s16k_sx_r >> $OUT/probe.jsonl 2>> $OUT/probe.err
    done
    TORCHDYNAMO_DISABLE=1 timeout 40 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1
    echo "demo rc=$?" >> $OUT/demo.log
    tail -3 $OUT/kernel_tests.log; tail -4 $OUT/demo.log; grep -c '^{' $OUT/probe.jsonl; tail -16 $OUT/moe_bench.log ;;
  *) echo "usage: bash tools/gpu_next.sh kernels|refit|final|verify|group|final6" >&2; exit 2 ;;
esac
