#!/usr/bin/env bash
# Prepared for the next session with device time: two H200 calls (run each with timeout_s=600).
#   bash tools/gpu_next.sh kernels  # GPU tests of the new default s16k_sx_r and the GEMV small-T candidates,
#                                   # then the MoE sweep at 1-16 tokens that times them beside the defaults
#   bash tools/gpu_next.sh refit    # GPU tests of quantize/refit/memory (the pipelined stream's first GPU run),
#                                   # the refit benchmark alone (multi-layer stream rows), the bounded-row bench
# A candidate becomes a default only if its tests pass AND the sweep shows it faster; then rerun the full
# benchmark (bench/moe_layer.py --warm 14) for the PERFORMANCE tables.
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
  *) echo "usage: bash tools/gpu_next.sh kernels|refit" >&2; exit 2 ;;
esac
