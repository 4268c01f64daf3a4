"""Benchmark: bounded-row decode against full rows for one MoE layer with a large dispatcher buffer.

A decode step whose dispatcher buffer holds 4096 rows of which 64 are valid (the rest stale routing, as in
Megatron's NVLS buffer): the layer processes the whole buffer (full rows) or only the prefix of the token
capacity (bounded rows). qwen3-30b-a3b expert shapes, the Triton backend, CUDA-graph medians.
``python bench/bounded_rows.py --out DIR`` writes ``bounded_rows.md`` / ``bounded_rows.json``.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment, graph_median_us, write_outputs  # noqa: E402
from megatron_mxfp8_moe import ExpertSet, MXFP8ExpertLayer  # noqa: E402
from megatron_mxfp8_moe.testing import random_routing, random_weights  # noqa: E402

EXPERTS, TOPK, HIDDEN, INTERMEDIATE = 128, 8, 2048, 768


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--valid", type=int, default=64)
    parser.add_argument("--capacity", type=int, default=64)
    args = parser.parse_args()
    env = environment()
    fc1 = random_weights((EXPERTS, 2 * INTERMEDIATE, HIDDEN), device="cuda")
    fc2 = random_weights((EXPERTS, HIDDEN, INTERMEDIATE), device="cuda")
    layer = MXFP8ExpertLayer(ExpertSet.from_bf16(fc1, fc2, "swiglu"), backend="triton", token_capacity=args.capacity)
    del fc1, fc2
    x = torch.randn(args.rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
    probs, ids = random_routing(args.rows, EXPERTS, TOPK, device="cuda")  # rows past `valid` are stale routing
    valid = torch.tensor([args.valid], dtype=torch.int32, device="cuda")
    outputs = {}
    rows = []
    for label, bounded in (("full rows", False), ("bounded rows", True)):
        out = torch.zeros(args.rows, HIDDEN, device="cuda", dtype=torch.float32)
        policy = layer.row_policy(args.rows, bounded)
        microseconds = graph_median_us(
            lambda: layer.forward_routed(x, probs, ids, valid_tokens=valid, use_bounded_rows=bounded, out=out)
        )
        outputs[label] = out[: args.valid].clone()
        rows.append({"mode": label, "rows_processed": policy.rows, "us": microseconds})
    same = torch.equal(outputs["full rows"], outputs["bounded rows"])
    speedup = rows[0]["us"] / rows[1]["us"]
    lines = [
        f"### Bounded rows against full rows: one qwen3-30b-a3b MoE layer, {args.rows}-row buffer, "
        f"{args.valid} valid rows, token capacity {args.capacity}",
        "",
        f"{env['gpu']}, torch {env['torch']}, Triton {env['triton']}, {env['date']}. Triton MXFP8 backend, SwiGLU, "
        "CUDA-graph medians. Valid rows give identical outputs in both modes: " + ("yes" if same else "NO") + ".",
        "",
        "| mode | rows processed | time (us) |",
        "|---|---|---|",
    ]
    lines += [f"| {r['mode']} | {r['rows_processed']} | {r['us']:.1f} |" for r in rows]
    lines += ["", f"Bounded rows: {speedup:.2f}x faster than full rows for this decode step."]
    markdown = "\n".join(lines) + "\n"
    write_outputs(args.out, "bounded_rows", {"env": env, "rows": rows, "identical_valid_rows": same,
                                              "speedup": speedup}, markdown)
    sys.stdout.write(markdown)


if __name__ == "__main__":
    main()
