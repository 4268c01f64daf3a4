"""Probe: does running a layer's experts as groups on concurrent streams beat one call (decode rows)?

The question (session 47): at 16-256 tokens each FC launch of the default tiles is short and ends in a partial last
wave, and FC2 starts only when FC1's last program is done. If the experts are split into ``N`` groups whose FC1 -> FC2
chains run on ``N`` streams, one group's FC2 can fill the SMs that another group's FC1 leaves idle.

Variants, per (shape, activation, tokens), timed as ``bench/moe_layer.py`` times ours (CUDA graph of ``ROTATE``
calls, median replay / ROTATE), in rounds (``--rounds``) so that drift shows; ``ratio_vs_whole`` compares the means
of the rounds:
- ``whole``: ``choose_config``'s tile with one expert group (``default_groups``: the groups of the default itself);
- ``gN_cfg``: that tile with ``TritonMoEConfig.expert_groups = N`` (one call: a route and launch pair(s) per group on
  its own stream, a tail tile's pair after the main one, one combine; must keep the bits of ``whole``);

Each variant's output is checked against ``whole``: ``bits_equal_whole`` and the relative error.
Usage: ``python bench/expert_groups_probe.py --out DIR`` (CUDA); one JSON line per row, ``expert_groups.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import graph_median_us  # noqa: E402
from bench.moe_layer import ROTATE, SHAPES, rotated_inputs  # noqa: E402
from megatron_mxfp8_moe.kernels.triton_moe import choose_config, triton_mxfp8_moe  # noqa: E402
from megatron_mxfp8_moe.tensor import quantize_mxfp8  # noqa: E402
from megatron_mxfp8_moe.testing import relative_error  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="qwen3-30b-a3b,qwen3-235b-a22b")
    parser.add_argument("--activations", default="squared_relu,swiglu")
    parser.add_argument("--tokens", default="16,64,256")
    parser.add_argument("--groups", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    rows_out = []
    for shape in args.shapes.split(","):
        experts, topk, hidden, inter = SHAPES[shape]
        for activation in args.activations.split(","):
            gated = activation == "swiglu"
            inner = inter if gated else 2 * inter
            gen = torch.Generator(device="cpu").manual_seed(0)
            fc1 = quantize_mxfp8((torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.02).to(device, torch.bfloat16))
            fc2 = quantize_mxfp8((torch.randn(experts, hidden, inner, generator=gen) * 0.02).to(device, torch.bfloat16))
            for tokens in map(int, args.tokens.split(",")):
                xs, probs, maps, valid = rotated_inputs(tokens, hidden, experts, topk, device)
                outs = [torch.empty(tokens, hidden, device=device, dtype=torch.bfloat16) for _ in range(ROTATE)]

                def configured(cfg):
                    def run():
                        for i in range(ROTATE):
                            triton_mxfp8_moe(xs[i], probs[i], maps[i], fc1, fc2, activation=activation,
                                             valid_tokens=valid, out=outs[i], config=cfg)
                    return run

                default = choose_config(tokens, hidden, inner, gated=gated, topk=topk, experts=experts)
                variants = {"whole": configured(dataclasses.replace(default, expert_groups=1))}
                for count in map(int, args.groups.split(",")):
                    variants[f"g{count}_cfg"] = configured(dataclasses.replace(default, expert_groups=count))
                row = dict(shape=shape, activation=activation, tokens=tokens, us={}, rel_err_vs_whole={},
                           default_groups=default.expert_groups)
                variants["whole"]()
                torch.cuda.synchronize()
                reference = [out.clone() for out in outs]
                for name, run in variants.items():
                    if name == "whole":
                        continue
                    for out in outs:
                        out.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                    row["rel_err_vs_whole"][name] = max(relative_error(o, r) for o, r in zip(outs, reference))
                    row.setdefault("bits_equal_whole", {})[name] = all(torch.equal(o, r) for o, r in zip(outs, reference))
                for _ in range(args.rounds):
                    for name, run in variants.items():
                        row["us"].setdefault(name, []).append(round(graph_median_us(run) / ROTATE, 1))
                base = sum(row["us"]["whole"]) / args.rounds
                row["ratio_vs_whole"] = {name: round(sum(t) / args.rounds / base, 4) for name, t in row["us"].items()}
                print(json.dumps(row), flush=True)
                rows_out.append(row)
            del fc1, fc2
            torch.cuda.empty_cache()
    if args.out:
        path = pathlib.Path(args.out)
        path.mkdir(parents=True, exist_ok=True)
        (path / "expert_groups.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(),
                                                                 torch=torch.__version__, rows=rows_out), indent=1))


if __name__ == "__main__":
    main()
