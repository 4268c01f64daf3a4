#!/usr/bin/env bash
# Run 7 (one H200): refit/quantize GPU tests, the refit benchmark, the m32l_sx and f8 kernel tests, the demo.
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> $OUT/gpu.txt
T="python3 -m pytest -q -p no:cacheprovider -rfE --tb=short"
timeout 90 $T tests/functional/test_refit_gpu.py tests/functional/test_quantize_gpu.py tests/functional/test_memory_gpu.py > $OUT/refit_tests.log 2>&1; echo "rc=$?" >> $OUT/refit_tests.log
timeout 150 python3 bench/refit.py --out $OUT --reps 10 > $OUT/refit_bench.log 2>&1; echo "rc=$?" >> $OUT/refit_bench.log
timeout 100 $T -k "m32l_sx or (f8_path and T4-swiglu and (s_f8_32 or s_f8_64-))" tests/functional/test_triton_moe_gpu.py > $OUT/kernel_tests.log 2>&1; echo "rc=$?" >> $OUT/kernel_tests.log
TORCHDYNAMO_DISABLE=1 timeout 90 python3 examples/decode.py --steps 12 --batch-size 8 > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
tail -3 $OUT/refit_tests.log; tail -2 $OUT/refit_bench.log; grep -E "passed|failed|Error|assert" $OUT/kernel_tests.log | tail -12; grep -v -i warn $OUT/demo.log | tail -6
