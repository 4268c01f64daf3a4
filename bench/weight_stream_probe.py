"""How fast HBM streams an expert stack in the Hopper kernels' access pattern (a probe, session 31).

The Gluon FC1 / FC2 read each program's ``[BLOCK_N, K]`` weight slab of the ``[E * N, K]`` fp8 stack one 128-byte
column step at a time: every step touches ``BLOCK_N`` rows ``K`` bytes apart. This probe streams the same bytes with a
read-only Triton kernel (one program per slab, an XOR of every int32 word so nothing is dropped) in two orders:
- ``rows``: the kernels' order, ``STEP`` bytes of each of the slab's rows per step (``STEP`` 128 or 256);
- ``slab``: the slab's bytes contiguous (a layout with each ``[BLOCK_N, STEP]`` step tile contiguous, in step order);
and reports GB/s for each, with the HBM read bandwidth (``common.read_bandwidth_gbps``) of the same run, all CUDA-graph
medians. If ``rows`` streams clearly slower than ``slab``, a step-tiled weight layout would raise the kernels' ceiling.
``--ring`` instead streams the slabs the way the Gluon kernels do, without their dequant and MMAs: ``[BLOCK_N, 128 B]``
TMA copies into a ring of ``STAGES`` shared-memory stages (one mbarrier each), ``PAD`` KB more shared memory per program
(the token planes' share), each stage read into registers and XORed before its refill. That is the ceiling of the
kernels' copy structure at their programs per SM.

``python3 bench/weight_stream_probe.py [--ring]`` prints one JSON line per case.
"""

from __future__ import annotations

import argparse
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


def _ring_kernel():
    """``_tma_ring_kernel`` (built on first use: Gluon is imported only for ``--ring``)."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    from megatron_mxfp8_moe.kernels._gluon_fc2_kernel import stage_barriers

    @gluon.jit
    def _tma_ring_kernel(w_desc, out_ptr, N, K_WORDS, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         PAD_ROWS: gl.constexpr, num_warps: gl.constexpr):
        pid_n = gl.program_id(0)
        expert = gl.program_id(1)
        layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[4, 8],
                                                warps_per_cta=[num_warps, 1], order=[1, 0])
        w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 32], w_desc.layout)
        pad = gl.allocate_shared_memory(gl.int32, [PAD_ROWS, 32], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        bars = stage_barriers(STAGES, 1)
        row = expert * N + pid_n * BLOCK_N
        steps = K_WORDS // 32
        for i in gl.static_range(STAGES):
            if i < steps:
                mbarrier.expect(bars.index(i), w_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(w_desc, [row, i * 32], bars.index(i), w_smem.index(i))
        acc = gl.zeros([BLOCK_N, 32], gl.int32, layout)
        for k in range(steps):
            st = k % STAGES
            mbarrier.wait(bars.index(st), (k // STAGES) & 1)
            acc ^= w_smem.index(st).load(layout)
            gl.thread_barrier()  # every thread has read the stage before its refill
            if k + STAGES < steps:
                mbarrier.expect(bars.index(st), w_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(w_desc, [row, (k + STAGES) * 32], bars.index(st), w_smem.index(st))
        if N < 0:  # never: the padding is read only so that it stays allocated
            acc ^= pad.slice(0, 8).load(layout).sum(axis=0)[None, :]
        gl.store(out_ptr + (expert * gl.num_programs(0) + pid_n), gl.xor_sum(gl.xor_sum(acc, axis=1), axis=0))

    return _tma_ring_kernel


def ring_gbps(words: torch.Tensor, experts: int, n: int, k_bytes: int, *, block_n: int, stages: int, pad_kb: int,
              warps: int) -> float:
    """GB/s of one ``_ring_kernel`` pass over ``words`` (``[experts * n, k_bytes // 4]`` int32)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    kernel = _ring_kernel()
    desc = TensorDescriptor.from_tensor(words, [block_n, 32], gl.NVMMASharedLayout.get_default_for([block_n, 32],
                                                                                                  gl.int32))
    out = torch.empty(experts * (n // block_n), dtype=torch.int32, device=words.device)

    def run():
        kernel[(n // block_n, experts)](desc, out, n, k_bytes // 4, BLOCK_N=block_n, STAGES=stages,
                                        PAD_ROWS=max(pad_kb * 8, 8), num_warps=warps)

    us = graph_median_us(run, iters=50)
    return words.numel() * 4 / (us * 1e-6) / 1e9


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


# --ring cases: (BLOCK_N, STAGES, PAD KB, a power of two): the programs per SM of the squared-ReLU "_f1q" FC1 (128 rows,
# 3 stages of 16 KB weights and 4 KB token planes: 3 per SM; here 3 x 16 + 16 KB) and of the two-chain FC2 (64 rows,
# 4 stages of 8 + 4 KB: 4 per SM; here 4 x 8 + 16 KB), and deeper rings (1 KB of padding)
RING_CASES = [(128, 3, 16), (128, 4, 0), (128, 6, 0), (64, 4, 16), (64, 6, 0), (64, 8, 0)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ring", action="store_true", help="the Gluon kernels' TMA rings alone (RING_CASES)")
    args = parser.parse_args()
    read = read_bandwidth_gbps()
    print(json.dumps(dict(case="hbm_read", gbps=round(read, 1))), flush=True)
    if args.ring:
        experts, n, k_bytes = 128, 1536, 2048
        words = torch.randint(-2**31, 2**31 - 1, (experts * n, k_bytes // 4), dtype=torch.int32, device="cuda")
        for block_n, stages, pad_kb in RING_CASES:
            for rep in range(2):
                gbps = ring_gbps(words, experts, n, k_bytes, block_n=block_n, stages=stages, pad_kb=pad_kb, warps=4)
                print(json.dumps(dict(case="ring_fc1_30b_sq", block_n=block_n, stages=stages, pad_kb=pad_kb,
                                      shared_kb=stages * block_n * 128 // 1024 + pad_kb, rep=rep, gbps=round(gbps, 1),
                                      of_read=round(gbps / read, 3))), flush=True)
        return
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
