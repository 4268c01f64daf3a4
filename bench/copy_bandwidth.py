"""Benchmark: the device-copy ceiling itself, by size and by timing method (a check of the other benchmarks' ceilings).

``bench/quantize.py`` divides by ``common.copy_bandwidth_gbps()`` (a CUDA-graph-captured bf16 ``copy_`` of 4 GiB, i.e.
2 ** 31 elements) and ``bench/refit.py`` by an eager ``copy_`` of the refit layer's 1.21 GB; on the H200 they gave
2715 and 4177 GB/s. This times both methods at sizes below, at and above 2 ** 31 elements, so the ceiling each
fraction uses can be told apart from a size effect. Bandwidth counts bytes read plus bytes written. Run on a CUDA GPU:
``python bench/copy_bandwidth.py --out DIR``; writes ``copy_bandwidth.md`` / ``copy_bandwidth.json`` into DIR.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import eager_median_us, environment, graph_median_us, write_outputs  # noqa: E402

# bf16 elements: the refit layer's sources (128 experts of qwen3-30b-a3b), 2 ** 30, 2 ** 31 - 1024, 2 ** 31
# (common.copy_bandwidth_gbps), 2 ** 31 + 1024 (past int32 indexing by a little)
ELEMENTS = (128 * 3 * 768 * 2048, 2**30, 2**31 - 1024, 2**31, 2**31 + 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    env = environment()
    rows = []
    for elements in ELEMENTS:
        source = torch.randn(elements, dtype=torch.bfloat16, device="cuda")
        target = torch.empty_like(source)
        moved = 4 * elements  # 2 bytes read + 2 written per element
        for method, timer in (("CUDA graph", graph_median_us), ("eager", eager_median_us)):
            us = timer(lambda: target.copy_(source), iters=30)
            rows.append({"elements": elements, "GB": moved / 1e9, "method": method, "us": us,
                         "GBps": moved / (us * 1e-6) / 1e9})
        del source, target
        torch.cuda.empty_cache()
    lines = [f"# Device copy bandwidth by size and timing method ({env['gpu']})", "",
             f"{env['gpu']}, torch {env['torch']}, {env['date']}. bf16 `copy_`, medians of 30; GB/s counts read + "
             "write.", "", "| bf16 elements | GB moved | method | us | GB/s |", "|---:|---:|---|---:|---:|"]
    lines += [f"| {r['elements']:,} | {r['GB']:.2f} | {r['method']} | {r['us']:.1f} | {r['GBps']:.0f} |" for r in rows]
    write_outputs(args.out, "copy_bandwidth", {"env": env, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
