#!/usr/bin/env bash
# Device probe of the v5 "f8" Triton MoE path: timings against the v4 defaults, then the f8 GPU tests.
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
P="python3 bench/triton_moe_probe.py"
for shape in qwen3-30b-a3b qwen3-235b-a22b; do
  timeout 100 $P --shape $shape --tokens 1,4 --configs d4_sx,d_f8_32,d_f8_64,s_f8_32,s_f8_32s6 >> $OUT/probe.jsonl 2>> $OUT/probe.err
  timeout 100 $P --shape $shape --tokens 16,64 --configs s16k_sx,s_f8_32,s_f8_32s6,s_f8_64,s_f8_64s3,s_f8_128 >> $OUT/probe.jsonl 2>> $OUT/probe.err
  timeout 100 $P --shape $shape --tokens 256 --configs m32j_sx,m32l_sx,s_f8_32,s_f8_64,m_f8_32,m_f8_64 >> $OUT/probe.jsonl 2>> $OUT/probe.err
done
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rfE --tb=line -k "f8" tests/functional/test_triton_moe_gpu.py > $OUT/f8_tests.log 2>&1
echo "pytest rc=$?" >> $OUT/f8_tests.log
cat $OUT/probe.jsonl; grep -i "error" $OUT/probe.err | head -5; tail -12 $OUT/f8_tests.log
