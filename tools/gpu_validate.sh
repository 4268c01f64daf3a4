#!/usr/bin/env bash
# Run on the H200 (device tool): GPU tests, then the benchmarks; logs and tables go to $OUT.
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee $OUT/gpu_tests.log | tail -25
for bench in ${BENCHES:-quantize refit bounded_rows}; do
  python3 bench/$bench.py --out $OUT > $OUT/bench_$bench.log 2>&1 || { echo "bench $bench failed"; tail -20 $OUT/bench_$bench.log; }
done
cat $OUT/*.md 2>/dev/null
