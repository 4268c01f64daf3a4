"""Benchmark: the device-copy ceiling itself, by size and by timing method (a check of the other benchmarks' ceilings).

Run 54 (H100) found the graph-captured ``copy_`` (a memcpy node) 19-20% slower than an eager ``copy_`` at every size
from 0.6 to 2.1 G elements, so ``bench/quantize.py``'s ceiling is now the fastest of ``common.copy_gbps_by_method``
(``bench/refit.py``'s too). This times those methods at the refit layer's size and at
2 ** 31 elements. Bandwidth counts bytes read plus bytes written. Run on a CUDA GPU:
``python bench/copy_bandwidth.py --out DIR``; writes ``copy_bandwidth.md`` / ``copy_bandwidth.json`` into DIR.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import copy_gbps_by_method, environment, write_outputs  # noqa: E402

# bf16 elements: the refit layer's sources (128 experts of qwen3-30b-a3b), 2 ** 31 (bench/quantize.py's ceiling)
ELEMENTS = (128 * 3 * 768 * 2048, 2**31)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    env = environment()
    rows = []
    for elements in ELEMENTS:
        for method, gbps in copy_gbps_by_method(elements).items():
            moved = 4 * elements  # 2 bytes read + 2 written per element
            rows.append({"elements": elements, "GB": moved / 1e9, "method": method, "us": moved / (gbps * 1e3),
                         "GBps": gbps})
    lines = [f"# Device copy bandwidth by size and timing method ({env['gpu']})", "",
             f"{env['gpu']}, torch {env['torch']}, {env['date']}. bf16 copies, medians of 30; GB/s counts read + "
             "write.", "", "| bf16 elements | GB moved | method | us | GB/s |", "|---:|---:|---|---:|---:|"]
    lines += [f"| {r['elements']:,} | {r['GB']:.2f} | {r['method']} | {r['us']:.1f} | {r['GBps']:.0f} |" for r in rows]
    write_outputs(args.out, "copy_bandwidth", {"env": env, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
