#!/usr/bin/env bash
# Prepared for the next session with device time (one H200 call, about 9 minutes; run with timeout_s=600):
# 1. GPU tests of the register-capped Triton MoE candidates (never run on a GPU yet),
# 2. the MoE sweep at 1-256 tokens, which times them beside the defaults (bench/moe_layer.py candidates_for),
# 3. the refit benchmark (first timing of the pipelined multi-layer stream),
# 4. the bounded-row benchmark (docs/PERFORMANCE.md section 3 is still the first session's kernel).
# A candidate becomes a default only if its tests pass AND the sweep shows it faster; then rerun the full
# benchmark (tools/gpu_final.sh plus bench/moe_layer.py --warm 14) for the tables.
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/functional/test_triton_moe_gpu.py \
  -k "s16k2_sx_r or m32l2_sx_r" > $OUT/capped_tests.log 2>&1
echo "pytest rc=$?" >> $OUT/capped_tests.log
mkdir -p $OUT/sweep
timeout 330 python3 bench/moe_layer.py --sweep --warm 14 --tokens 1,4,16,64,256 --out $OUT/sweep > $OUT/sweep.log 2>&1
echo "sweep rc=$?" >> $OUT/sweep.log
timeout 90 python3 bench/refit.py --out $OUT > $OUT/refit.log 2>&1  # alone: pipelined multi-layer stream rows
echo "refit rc=$?" >> $OUT/refit.log
timeout 45 python3 bench/bounded_rows.py --out $OUT > $OUT/bounded.log 2>&1
echo "bounded rc=$?" >> $OUT/bounded.log
tail -3 $OUT/capped_tests.log; tail -5 $OUT/sweep.log; tail -2 $OUT/refit.log; tail -3 $OUT/bounded.log
