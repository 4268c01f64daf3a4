#!/usr/bin/env bash
# The final validation call on the H200: GPU tests, the demo, and the benchmarks (<= 8 files back in $OUT).
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 110 python3 -m pytest -q -p no:cacheprovider tests/functional/test_quantize_gpu.py \
  tests/functional/test_refit_gpu.py tests/functional/test_memory_gpu.py > $OUT/gpu_tests.log 2>&1
echo "pytest rc=$?" >> $OUT/gpu_tests.log
# TORCHDYNAMO_DISABLE: Megatron's router runs eagerly (same math) to spare the compile time of this short lease.
TORCHDYNAMO_DISABLE=1 timeout 130 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1
echo "demo rc=$?" >> $OUT/demo.log
{ timeout 40 python3 bench/quantize.py --out $OUT; echo "quantize rc=$?";
  timeout 70 python3 bench/refit.py --out $OUT --reps 5; echo "refit rc=$?";
  timeout 45 python3 bench/bounded_rows.py --out $OUT; echo "bounded rc=$?"; } > $OUT/benches.log 2>&1
rm -f $OUT/bounded_rows.json
tail -3 $OUT/gpu_tests.log; tail -30 $OUT/demo.log; grep -h "rc=" $OUT/benches.log; cat $OUT/*.md
