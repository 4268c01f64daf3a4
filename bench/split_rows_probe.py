"""Probe: the f8x2 split launch (``_split_into``) at other program shapes, CUDA-graph medians per launch.

``python3 bench/split_rows_probe.py`` prints one JSON line per (rows, K, scales layout, variant): us per launch (20
launches captured in one graph, median of 50 replays / 20) and whether its bits equal the default variant's (8 rows x
128 columns per program, 4 warps). Shapes, squared ReLU at 64 tokens for qwen3-30b-a3b and qwen3-235b-a22b: the x
split ``[64, H]`` and FC1's output rows of the 16-token tiles ``[routing_capacity, 2 * I]`` (``bench/moe_layer.py``'s
I is the gated half: squared ReLU's FC1 has ``2 * I`` rows). Run 39 (session 36) ran an earlier form whose FC1 cases
were ``[2432, 768]`` and ``[2432, 1536]``.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import graph_median_us  # noqa: E402
from bench.moe_layer import SHAPES  # noqa: E402
from megatron_mxfp8_moe.kernels.triton_launch import _split_into  # noqa: E402
from megatron_mxfp8_moe.kernels.triton_moe import routing_capacity, split_rows_buffers  # noqa: E402

VARIANTS = {"r8k128w4": (8, 128, 4), "r16k128w4": (16, 128, 4), "r32k128w4": (32, 128, 4), "r32k128w8": (32, 128, 8),
            "r8k256w4": (8, 256, 4), "r16k256w4": (16, 256, 4), "r4k256w2": (4, 256, 2), "r64k128w8": (64, 128, 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    cases = []
    for experts, topk, hidden, inter in SHAPES.values():
        cases += [(64, hidden), (routing_capacity(64, topk, experts, 16)[0], 2 * inter)]
    for rows, k in cases:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        for scales_t in (False, True):
            outputs = {}
            for name, (block_r, block_k, warps) in VARIANTS.items():
                q, s = split_rows_buffers(rows, k, "cuda", scales_t=scales_t)
                _split_into(x, q, s, block_r, block_k, warps)
                outputs[name] = (q.view(torch.uint8).clone(), s.clone())

                def launches(q=q, s=s, block_r=block_r, block_k=block_k, warps=warps):
                    for _ in range(args.repeat):
                        _split_into(x, q, s, block_r, block_k, warps)
                us = graph_median_us(launches, iters=50) / args.repeat
                same = all(torch.equal(a, b) for a, b in zip(outputs[name], outputs["r8k128w4"]))
                print(json.dumps({"rows": rows, "k": k, "scales_t": scales_t, "variant": name, "us": round(us, 2),
                                  "same_bits": same}), flush=True)


if __name__ == "__main__":
    main()
