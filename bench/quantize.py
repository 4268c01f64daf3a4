"""Benchmark: in-place ``quantize_`` of a [128, 1536, 2048] bf16 expert stack against the device-copy ceiling.

Bytes moved: read 2 per weight, write 1 + 1/32 per weight (fp8 data + E8M0 scales). The ceiling is the fastest of
three ways to copy 2 ** 31 bf16 values (``common.copy_gbps_by_method``; before session 51 it was the graph-captured
``copy_`` alone, a memcpy node that run 54 found about 20% slower than an eager ``copy_``). Run on a CUDA GPU:
``python bench/quantize.py --out DIR``; writes ``quantize.md`` / ``quantize.json`` into DIR.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import (  # noqa: E402
    copy_bandwidth_gbps,
    copy_methods_text,
    eager_median_us,
    environment,
    graph_median_us,
    write_outputs,
)
from megatron_mxfp8_moe import quantize_mxfp8  # noqa: E402

SHAPE = (128, 1536, 2048)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    env = environment()
    copy_gbps, copy_by_method = copy_bandwidth_gbps()
    source = torch.randn(SHAPE, dtype=torch.bfloat16, device="cuda") * 0.02
    weights = SHAPE[0] * SHAPE[1] * SHAPE[2]
    moved = weights * (2 + 1 + 1 / 32)
    rows = []
    tensor = quantize_mxfp8(source, backend="triton")
    # The NaN/Inf scan of quantize_ syncs with the host, so a graph cannot capture it: the kernel alone is
    # timed in a graph (finite_checked=True), the whole call eagerly.
    timings = [
        ("triton quantize_ (kernel, CUDA graph)",
         graph_median_us(lambda: tensor.quantize_(source, backend="triton", finite_checked=True), iters=50)),
        ("triton quantize_ with the NaN/Inf scan (eager)",
         eager_median_us(lambda: tensor.quantize_(source, backend="triton"))),
    ]
    for label, microseconds in timings:
        gbps = moved / (microseconds * 1e-6) / 1e9
        rows.append({"backend": label, "us": microseconds, "GBps": gbps, "fraction_of_copy": gbps / copy_gbps})
    from megatron.core.inference.quantization.mxfp8_quantize import mxfp8_quantize

    flat = source.view(-1, SHAPE[2])
    microseconds = graph_median_us(lambda: mxfp8_quantize(flat), iters=50)
    gbps = moved / (microseconds * 1e-6) / 1e9
    rows.append({"backend": "megatron-core mxfp8_quantize (allocating, for reference)", "us": microseconds,
                 "GBps": gbps, "fraction_of_copy": gbps / copy_gbps})
    lines = [
        f"### In-place quantize_ of a {list(SHAPE)} bf16 expert stack",
        "",
        f"{env['gpu']} (SM {env['sm']}), torch {env['torch']}, Triton {env['triton']}, "
        f"megatron-core {env['megatron_core']}, {env['date']}. CUDA-graph medians. "
        f"Device copy measured in the same run (read + write, 2 ** 31 bf16 values): {copy_gbps:.0f} GB/s, the fastest "
        f"of {copy_methods_text(copy_by_method)}. "
        "Bytes per weight: read 2, write 1 + 1/32.",
        "",
        "| quantizer | time (us) | GB/s | fraction of copy bandwidth |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['backend']} | {r['us']:.1f} | {r['GBps']:.0f} | {r['fraction_of_copy']:.0%} |" for r in rows]
    markdown = "\n".join(lines) + "\n"
    write_outputs(args.out, "quantize", {"env": env, "copy_GBps": copy_gbps, "copy_GBps_by_method": copy_by_method,
                                        "rows": rows}, markdown)
    sys.stdout.write(markdown)


if __name__ == "__main__":
    main()
