"""How fast HBM streams an expert stack in the Hopper kernels' access pattern (a probe, session 31).

The Gluon FC1 / FC2 read each program's ``[BLOCK_N, K]`` weight slab of the ``[E * N, K]`` fp8 stack one 128-byte
column step at a time: every step touches ``BLOCK_N`` rows ``K`` bytes apart. This probe streams the same bytes with a
read-only Triton kernel (one program per slab, an XOR of every int32 word so nothing is dropped) in three orders:
- ``rows``: the kernels' order, ``STEP`` bytes of each of the slab's rows per step (``STEP`` 128 or 256);
- ``slab``: the slab's bytes contiguous (a layout with each ``[BLOCK_N, STEP]`` step tile contiguous, in step order);
and reports GB/s for each, with the HBM read bandwidth (``common.read_bandwidth_gbps``) of the same run, all CUDA-graph
medians. If ``rows`` streams clearly slower than ``slab``, a step-tiled weight layout would raise the kernels' ceiling.

``python3 bench/weight_stream_probe.py`` prints one JSON line per case.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import graph_median_us, read_bandwidth_gbps  # noqa: E402


@triton.jit
def _stream_kernel(w_ptr, out_ptr, N, K_WORDS, SLAB: tl.constexpr, BLOCK_N: tl.constexpr, STEP_WORDS: tl.constexpr):
    """XOR of one ``[BLOCK_N, K]`` slab (int32 words), read ``[BLOCK_N, STEP_WORDS]`` at a time: by rows ``K_WORDS``
    apart (``SLAB`` False) or as contiguous step tiles (``SLAB`` True)."""
    pid_n = tl.program_id(0)
    expert = tl.program_id(1)
    r = tl.arange(0, BLOCK_N)[:, None]
    c = tl.arange(0, STEP_WORDS)[None, :]
    slab = (expert.to(tl.int64) * N + pid_n * BLOCK_N) * K_WORDS
    if SLAB:
        offs = r * STEP_WORDS + c
        step = BLOCK_N * STEP_WORDS
    else:
        offs = r * K_WORDS + c
        step = STEP_WORDS
    acc = tl.zeros([BLOCK_N, STEP_WORDS], tl.int32)
    for k in range(0, K_WORDS // STEP_WORDS):
        acc ^= tl.load(w_ptr + slab + offs + k * step)
    tl.store(out_ptr + (expert * tl.num_programs(0) + pid_n), tl.xor_sum(tl.xor_sum(acc, axis=1), axis=0))


def stream_gbps(words: torch.Tensor, experts: int, n: int, k_bytes: int, *, slab: bool, block_n: int, step: int,
                warps: int) -> float:
    """GB/s of one ``_stream_kernel`` pass over ``words`` (``[experts * n, k_bytes // 4]`` int32)."""
    out = torch.empty(experts * (n // block_n), dtype=torch.int32, device=words.device)
    grid = (n // block_n, experts)

    def run():
        _stream_kernel[grid](words, out, n, k_bytes // 4, SLAB=slab, BLOCK_N=block_n, STEP_WORDS=step // 4,
                             num_warps=warps)

    us = graph_median_us(run, iters=50)
    return words.numel() * 4 / (us * 1e-6) / 1e9


def main() -> None:
    read = read_bandwidth_gbps()
    print(json.dumps(dict(case="hbm_read", gbps=round(read, 1))), flush=True)
    for name, (experts, n, k_bytes) in {"fc1_30b_sq": (128, 1536, 2048), "fc2_30b_sq": (128, 2048, 1536)}.items():
        words = torch.randint(-2**31, 2**31 - 1, (experts * n, k_bytes // 4), dtype=torch.int32, device="cuda")
        for block_n in (64, 128):
            for step in (128, 256):
                for warps in (4, 8):
                    for slab in (False, True):
                        gbps = stream_gbps(words, experts, n, k_bytes, slab=slab, block_n=block_n, step=step,
                                           warps=warps)
                        print(json.dumps(dict(case=name, order="slab" if slab else "rows", block_n=block_n,
                                              step=step, warps=warps, gbps=round(gbps, 1),
                                              of_read=round(gbps / read, 3))), flush=True)
        del words
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
