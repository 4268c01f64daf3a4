#!/usr/bin/env bash
# The demo on the H200 (qwen3-30b-a3b preset), then the quantizer benchmark.
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# TORCHDYNAMO_DISABLE: Megatron's router runs eagerly (same math) to spare the compile time of this short lease.
TORCHDYNAMO_DISABLE=1 timeout 150 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1
echo "demo rc=$?" >> $OUT/demo.log

grep -v Warning $OUT/demo.log | tail -40
