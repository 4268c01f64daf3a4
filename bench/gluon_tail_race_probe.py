"""Probe (session 21): which launch arrangement makes the 128-token tiles with Gluon 64-token tails write garbage rows.

Run 23 call 7 (gated) and run 24 call 1 (squared ReLU) found non-finite rows at 1024 tokens in
``l128*_sa_t64p*_s2_gt`` (the Gluon FC2 on the tail pair) while its Triton form and the previous default kept their
bits. Run 24 calls 2-4 traced it to every tile with a 64-token Gluon kernel (3-5% of calls: one FC2 CTA's 128
columns NaN for its block's tokens); session 21 removed those tiles from the package, session 22 brought them back
(two register sets; ``_tiles_64`` names them). This runs each variant ``--reps`` times on fresh tokens and routing (one random layer; the GPU test's layout:
133 routed ids, local experts 3..130, every third token's first id -1) and compares it bit for bit with the Triton
form on the same inputs (tiles whose Gluon FC2 runs on two chains, session 26: each value within 1e-2 of its row's
largest, as their sums are ordered differently):

- ``gt_s2``: the tile as it is (tail pair on the second stream, beside the main pair);
- ``gt_s1``: the same launches with the tail pair after the main pair on one stream (planes still beside the route);
- ``gt_s0``: everything on one stream;
- ``gq_s2``: the 64-token tile with both FCs in Gluon (session 20's default at 40-64 pairs per expert) at this size;
- ``gq_s0``: the same on one stream (the planes copy of x not beside the route);
- ``default``: ``choose_config``'s tile at that size; ``triton``: its Triton form, checked against itself;
- any name of ``TILES``: that tile.

For a failing run it prints how often 3 more runs on the same inputs fail, the bad rows, the 128-column FC2 tiles they differ in, and the local experts those rows
share, marked by whether each expert's last pairs went to the tail (``route_reference``'s rule).

    python3 bench/gluon_tail_race_probe.py --activation swiglu --reps 100 --cases 256:default,1024:gq_s2
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tiles_64(gated):
    """The tiles with 64-token Gluon kernels: the 128-token tile with the Gluon FC2 on its 64-token tails and the
    64-token tile with both FCs in Gluon (squared ReLU: 128 FC1 rows on 4 warps)."""
    from megatron_mxfp8_moe.kernels.triton_moe import TILES

    if gated:
        return TILES["l128m_sa_t64pu_s2_gt"], TILES["l64_sx4p_mu_gg_s2"]
    return TILES["l128w_sa_t64p2_s2_gt"], TILES["l64k2_sx4p_f4_gq_s2"]


def main() -> None:
    from megatron_mxfp8_moe.kernels.triton_moe import (
        TILES,
        choose_config,
        same_bits_as_triton_form,
        triton_form,
        triton_mxfp8_moe,
    )
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import random_routing, random_weights

    parser = argparse.ArgumentParser()
    parser.add_argument("--activation", choices=["swiglu", "squared_relu"], default="squared_relu")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--cases", default="1024:gt_s2,1024:gt_s1,1024:gt_s0,1024:gq_s2",
                        help="comma-separated tokens:variant; variants: gt_s2, gt_s1, gt_s0, gq_s2, gq_s0, default "
                             "(choose_config's tile), triton (its Triton form, checked against itself), a name of TILES")
    parser.add_argument("--dims", default="128,8,2048,768",
                        help="EXPERTS,TOPK,HIDDEN,INTER (default qwen3-30b-a3b's; 128,8,4096,1536: qwen3-235b-a22b's)")
    args = parser.parse_args()
    gated = args.activation == "swiglu"
    gt, gq = _tiles_64(gated)
    (experts, topk, hidden, inner), offset = map(int, args.dims.split(",")), 3

    def variant(name, tokens):
        default = choose_config(tokens, hidden, inner, gated=gated, topk=topk, experts=experts)
        return {"gt_s2": gt, "gt_s1": dataclasses.replace(gt, side_stream=1),
                "gt_s0": dataclasses.replace(gt, side_stream=0), "gq_s2": gq,
                "gq_s0": dataclasses.replace(gq, side_stream=0), "default": default,
                "triton": triton_form(default)}[name] if name not in TILES else TILES[name]

    names = {id(t): n for n, t in TILES.items()}
    torch.manual_seed(0)
    fc1 = quantize_mxfp8(random_weights((experts, (2 if gated else 1) * inner, hidden), scale=0.02, device="cuda"))
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inner), scale=0.02, device="cuda"))
    for case in args.cases.split(","):
        tokens, name = int(case.split(":")[0]), case.split(":")[1]
        tile = variant(name, tokens)
        exact = same_bits_as_triton_form(tile)  # else within 1e-2 of each row's largest value (two-chain FC2)
        fails = 0
        for rep in range(args.reps):
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            probs, ids = random_routing(tokens, experts + 5, topk, device="cuda")
            ids = ids - 2
            ids[::3, 0] = -1
            valid = torch.tensor([tokens - 2], device="cuda", dtype=torch.int32)

            def run(form):
                """The valid rows of one call of ``form`` on this rep's inputs, into a NaN-poisoned fp32 buffer."""
                out = torch.full((tokens + 1, hidden), float("nan"), device="cuda", dtype=torch.float32)
                triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=args.activation, local_expert_offset=offset,
                                 valid_tokens=valid, out=out, rows=tokens, config=form)
                torch.cuda.synchronize()
                return out[:tokens - 2]

            ref, got = run(triton_form(tile)), run(tile)
            if exact:
                differs = ~((ref == got) | (torch.isnan(ref) & torch.isnan(got)))
            else:  # two-chain FC2 (session 26): another summation order; a race leaves garbage or NaN rows
                close = (got - ref).abs() <= 1e-2 * ref.abs().amax(dim=1, keepdim=True)
                differs = ~(close | (torch.isnan(ref) & torch.isnan(got)))
            bad = differs.any(1).nonzero().flatten().tolist()
            ref_bad = (~torch.isfinite(ref)).any(1).nonzero().flatten().tolist()
            if not bad and not ref_bad:
                continue
            fails += 1
            again = 0  # the same form on the same inputs: a race fails rarely, a data-driven fault every time
            for _ in range(3):
                again += int(not torch.equal(run(tile).nan_to_num(), ref.nan_to_num()))
            local = ids[:tokens - 2] - offset
            counts = torch.bincount(local[(local >= 0) & (local < experts)], minlength=experts).cpu()
            rem = counts % tile.block_t
            in_tail = (rem >= 1) & (rem <= (tile.tail.block_t if tile.tail is not None else 0))
            shared = collections.Counter(int(e) for t in bad for e in local[t].tolist() if 0 <= e < experts)
            ntiles = sorted(set((differs[bad].nonzero()[:, 1] // 128).tolist())) if bad else []
            print(json.dumps({
                "variant": name, "tokens": tokens, "rep": rep, "bad_rows": len(bad), "failed_again_of_3": again,
                "first_bad": bad[:12],
                "triton_form_nonfinite_rows": len(ref_bad),
                "nonfinite_rows": int((~torch.isfinite(got[bad])).any(1).sum()) if bad else 0,
                "max_abs_bad": float(got[bad].abs().nan_to_num(0, 1e30, 1e30).max()) if bad else 0.0,
                "n_tiles_128": ntiles[:20],
                "experts_shared_by_bad_rows": [(e, c, bool(in_tail[e]), int(counts[e]))
                                               for e, c in shared.most_common(6)],
            }), flush=True)
        print(json.dumps({"activation": args.activation, "dims": args.dims, "tokens": tokens, "variant": name,
                          "tile": names.get(id(tile), "(unnamed)"), "reps": args.reps, "failed_reps": fails}),
              flush=True)


if __name__ == "__main__":
    main()
