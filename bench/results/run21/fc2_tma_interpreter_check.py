# Session 18: CPU check (Triton interpreter) that fc2_tma 1 / 2 / 3 give the bits of the pointer loads.
# Needs bench/results/run21/fc2_tma.patch applied; run with .venv/bin/python from the repository root.
import dataclasses, os
os.environ["TRITON_INTERPRET"] = "1"
import torch
from megatron_mxfp8_moe.kernels.reference import moe_reference
from megatron_mxfp8_moe.kernels.triton_moe import TritonMoEConfig, triton_mxfp8_moe
from megatron_mxfp8_moe.tensor import quantize_mxfp8
from megatron_mxfp8_moe.testing import random_routing, random_weights, relative_error
torch.manual_seed(3)
import megatron_mxfp8_moe.kernels.triton_moe as H
_d = H._fc2_descriptors
def _spy(*a):
    r = _d(*a); print("descriptors:", sorted(r)); return r
H._fc2_descriptors = _spy
cfg = TritonMoEConfig(16, 16, 64, 4, 1, 64, 128, 4, 1, False, True, dequant="sx4_int", planes=True)
for activation, hidden, inter, fc2_n in (("swiglu", 256, 384, 128), ("swiglu", 192, 256, 64)):
    experts, topk, rows = 4, 2, 24
    n1 = 2 * inter if activation != "squared_relu" else inter
    fc1 = quantize_mxfp8(random_weights((experts, n1, hidden), scale=0.1), backend="reference")
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inter), scale=0.1), backend="reference")
    x = torch.randn(rows + 2, hidden).to(torch.bfloat16)
    probs, ids = random_routing(rows + 2, experts + 2, topk)
    ids = ids - 1
    valid = rows - 1
    ref = moe_reference(x[:rows], fc1, fc2, probs[:rows], ids[:rows], activation, local_expert_offset=1, valid_tokens=valid)
    outs = []
    for tma in (0, 1, 2, 3):
        out = torch.full((x.shape[0], hidden), float("nan"))
        c = dataclasses.replace(cfg, fc2_tma=tma, fc2_block_n=fc2_n)
        triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, local_expert_offset=1,
                         valid_tokens=torch.tensor([valid], dtype=torch.int32), rows=rows, out=out, config=c)
        outs.append(out)
        print(activation, hidden, inter, "tma", tma, "err", relative_error(out[:rows], ref), "equal to 0:", torch.equal(out[:rows], outs[0][:rows]),
              "tail zero", bool((out[valid:rows] == 0).all()), "untouched", bool(torch.isnan(out[rows:]).all()))
