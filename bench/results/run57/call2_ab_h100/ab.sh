# A/B of the kernel module before / after the int64 id check (session 54): probe rounds new, old, new, old
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
K=megatron_mxfp8_moe/kernels/_triton_moe_kernel.py
cp $K /tmp/new_kernel.py
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/ab.log
for round in new old new old; do
  if [ $round = old ]; then cp .devcarry/_triton_moe_kernel_old.py $K; else cp /tmp/new_kernel.py $K; fi
  timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 1,4 --activation squared_relu \
    --configs g16p,q1 2>&1 | grep '"us"' | sed "s/^/$round /" >> $OUT/ab.log
  timeout 60 python3 bench/triton_moe_probe.py --shape qwen3-30b-a3b --tokens 64 --activation squared_relu \
    --configs s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_eg2 2>&1 | grep '"us"' | sed "s/^/$round /" >> $OUT/ab.log
done
cp /tmp/new_kernel.py $K
timeout 60 python3 bench/triton_moe_probe.py --activation squared_relu --profile --shape qwen3-30b-a3b --tokens 64 \
  --configs s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw_f1x_eg2 2>&1 | grep kernels_us >> $OUT/ab.log
cat $OUT/ab.log | sed 's/"shape": "qwen3-30b-a3b", "activation": "squared_relu", //' | cut -c1-400
