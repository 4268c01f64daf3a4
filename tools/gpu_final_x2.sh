#!/usr/bin/env bash
# The final validation call on 2 x H200 (device kind nvidia-h200-x2), logs and tables to $OUT:
#   1. the EP = 2 NCCL test on both GPUs (tests/functional/test_ep2_nccl_gpu.py);
#   2. the benchmarks and the demo on GPU 1, alone (their host timings must not share the CPUs);
#   3. the single-GPU tests, split over both GPUs.
# NVLink multicast stays off (the machine's NCCL_NVLS_ENABLE=0 / TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are kept).
set -u
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count())' >> "$OUT/gpu.txt"
env | grep -E "NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST" >> "$OUT/gpu.txt"

timeout "${EP2_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/functional/test_ep2_nccl_gpu.py > "$OUT/ep2.log" 2>&1
echo "ep2 rc=$?" >> "$OUT/ep2.log"

# Benchmarks and the demo first, alone on the machine: refit times include host work, which other
# processes on the same CPUs inflate (seen in run 6).
(
  export CUDA_VISIBLE_DEVICES=1
  {
    timeout 60 python3 bench/quantize.py --out "$OUT"; echo "quantize rc=$?"
    timeout 100 python3 bench/refit.py --out "$OUT" --reps 10; echo "refit rc=$?"
    if [ -n "${MOE_LAYER:-}" ]; then timeout "${MOE_LAYER_TIMEOUT:-200}" python3 bench/moe_layer.py --out "$OUT" ${MOE_LAYER_ARGS:-}; echo "moe_layer rc=$?"; fi
  } > "$OUT/benches.log" 2>&1
  # TORCHDYNAMO_DISABLE: Megatron's router runs eagerly (same math) to spare the compile time of a short lease.
  TORCHDYNAMO_DISABLE=1 timeout 130 python3 examples/decode.py --steps 12 --batch-size 8 > "$OUT/demo.log" 2>&1
  echo "demo rc=$?" >> "$OUT/demo.log"
)
# Then the single-GPU tests, split over the two GPUs: the slow Triton kernel file on one, the rest on the other.
(
  export CUDA_VISIBLE_DEVICES=0
  timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -q -p no:cacheprovider -rA tests/functional/test_triton_moe_gpu.py \
    > "$OUT/gpu_tests_triton.log" 2>&1
  echo "pytest rc=$?" >> "$OUT/gpu_tests_triton.log"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -q -p no:cacheprovider -rA -m "gpu and not multigpu" tests \
    --ignore=tests/functional/test_triton_moe_gpu.py > "$OUT/gpu_tests_rest.log" 2>&1
  echo "pytest rc=$?" >> "$OUT/gpu_tests_rest.log"
) &
wait
cat "$OUT/gpu.txt"; tail -4 "$OUT/ep2.log"; tail -3 "$OUT"/gpu_tests_*.log; grep -h "rc=" "$OUT/benches.log"
grep -v -i warn "$OUT/demo.log" | tail -25; cat "$OUT"/refit.md "$OUT"/quantize.md 2>/dev/null
