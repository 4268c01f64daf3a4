"""Numerics study (CPU, pure torch): bf16 activations as a sum of two e4m3 terms, for fp8 x fp8 MMAs on Hopper.

Hopper has no fp8 x bf16 MMA, so the Triton MoE dequantizes every MXFP8 weight to bf16 on CUDA cores. An
alternative (not built): write each bf16 activation row as ``s * (hi + 2^-c * lo)`` with ``hi = e4m3(x / s)`` and
``lo = e4m3(2^c * (x / s - hi))`` (``s``: a per-token power of two that puts the row's amax near 448; ``c``: the
residual's own power-of-two lift), and run the weights' e4m3 bytes against ``hi`` and ``lo`` with native fp8
wgmmas, one per E8M0 block, scaling each block's partial sum by its power of two. This script measures what that
costs in accuracy, before any kernel: the relative error ``||out - ref|| / ||ref||`` of one FC (``x @ W.T``, the
weights the dequantized canonical MXFP8 values) against float64, for

- ``bf16 path``: today's kernels (exact bf16 operands, fp32 accumulation, bf16 output);
- ``hi only``: one e4m3 term;
- ``hi + lo``: two e4m3 terms, fp32 accumulation, bf16 output;
- ``hi + lo, one scale``: ``lo = e4m3(x / s - hi)`` with the same ``s`` (one accumulator for both wgmmas);
- ``hi + lo, block scales``: ``s`` per token and 32-value K block (what an FC1 epilogue can produce for FC2,
  which never sees a whole row), one scale for both terms;
- ``..., 13-bit block sums``: the last, each 32-value block's partial sum rounded to 13 mantissa bits before the
  fp32 accumulation (Hopper's fp8 MMAs accumulate with reduced precision; per-block promotion bounds it);
- ``hi + lo, 128-block scales`` (session 35): one scale per token and 128-value K step (the f8x2 kernels' step), so a
  kernel would load one token scale per step instead of four and fold it in once per step.

    python3 bench/fp8_split_numerics.py --tokens 64 --k 2048 --n 1536
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

E4M3_MAX = 448.0


def _pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """The power of two that maps ``amax`` to at most E4M3_MAX (1 where amax is 0)."""
    exponent = torch.floor(torch.log2(E4M3_MAX / amax.clamp_min(torch.finfo(torch.float32).tiny)))
    return torch.where(amax > 0, torch.exp2(-exponent), torch.ones_like(amax))


def split_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` [T, K] -> (hi, lo, s, s_lo) with ``x ~= s * hi + s_lo * lo``: ``hi``, ``lo`` e4m3 values (as float64),
    ``s``, ``s_lo`` [T, 1] per-token powers of two."""
    x = x.double()
    s = _pow2_scale(x.abs().amax(dim=1, keepdim=True))
    hi = (x / s).to(torch.float8_e4m3fn).double()
    residual = x - s * hi
    s_lo = _pow2_scale(residual.abs().amax(dim=1, keepdim=True))
    lo = (residual / s_lo).to(torch.float8_e4m3fn).double()
    return hi, lo, s, s_lo


def split_e4m3_blocks(x: torch.Tensor, block: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` [T, K] -> (hi, lo, s) with ``x ~= s * (hi + lo)`` per 32-value block: ``s`` [T, K] (constant per block)."""
    t, k = x.shape
    xb = x.double().reshape(t, k // block, block)
    s = _pow2_scale(xb.abs().amax(dim=2, keepdim=True))
    hi = (xb / s).to(torch.float8_e4m3fn).double()
    lo = (xb / s - hi).to(torch.float8_e4m3fn).double()
    expand = (lambda v: v.expand(t, k // block, block).reshape(t, k))
    return hi.reshape(t, k), lo.reshape(t, k), expand(s)


def _round_mantissa(v: torch.Tensor, bits: int) -> torch.Tensor:
    """``v`` (float64) rounded to ``bits`` mantissa bits (round to nearest)."""
    mantissa, exponent = torch.frexp(v)
    return torch.ldexp(torch.round(mantissa * 2.0 ** bits) / 2.0 ** bits, exponent)


def blocked_matmul(a: torch.Tensor, w: torch.Tensor, block: int = 32, bits: int = 0) -> torch.Tensor:
    """``a @ w.T`` (float64) as a sum of 32-value K-block partial sums, each rounded to ``bits`` mantissa bits
    (0: exact), accumulated in float32."""
    t, k = a.shape
    parts = torch.einsum("tbk,nbk->btn", a.reshape(t, k // block, block), w.reshape(w.shape[0], k // block, block))
    if bits:
        parts = _round_mantissa(parts, bits)
    acc = torch.zeros(t, w.shape[0], dtype=torch.float32)
    for part in parts:
        acc += part.float()
    return acc


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def study(tokens: int, k: int, n: int, distribution: str, seed: int) -> dict:
    from megatron_mxfp8_moe.tensor import quantize_mxfp8

    generator = torch.Generator().manual_seed(seed)
    if distribution == "normal":
        x = torch.randn(tokens, k, generator=generator)
    elif distribution == "student_t3":  # heavy tails, as activations with outliers
        normal = torch.randn(tokens, k, generator=generator)
        chi2 = torch.randn(tokens, k, 3, generator=generator).pow(2).sum(-1)
        x = normal / (chi2 / 3).sqrt()
    else:  # "outlier_channels": a few channels 100x larger, as LLM hidden states
        x = torch.randn(tokens, k, generator=generator)
        x[:, torch.randperm(k, generator=generator)[:max(1, k // 256)]] *= 100.0
    x = x.to(torch.bfloat16)
    weight = quantize_mxfp8((torch.randn(1, n, k, generator=generator) * 0.02).to(torch.bfloat16), backend="reference")
    w = weight.dequantize()[0].double()  # exact: e4m3 values times powers of two
    ref = x.double() @ w.T
    bf16_path = (x.float() @ w.float().T).to(torch.bfloat16)
    hi, lo, s, s_lo = split_e4m3(x)
    hi_only = ((s * hi).float() @ w.float().T).to(torch.bfloat16)
    hi_lo = ((s * hi).float() @ w.float().T + (s_lo * lo).float() @ w.float().T).to(torch.bfloat16)
    x_split = s * hi + s_lo * lo
    lo_same = (x.double() / s - hi).to(torch.float8_e4m3fn).double()
    one_scale = ((s * hi).float() @ w.float().T + (s * lo_same).float() @ w.float().T).to(torch.bfloat16)
    bhi, blo, bs = split_e4m3_blocks(x)
    blocks = blocked_matmul(bs * (bhi + blo), w).to(torch.bfloat16)
    blocks13 = blocked_matmul(bs * (bhi + blo), w, bits=13).to(torch.bfloat16)
    shi, slo, ss = split_e4m3_blocks(x, block=128)
    steps = blocked_matmul(ss * (shi + slo), w).to(torch.bfloat16)
    return dict(tokens=tokens, k=k, n=n, distribution=distribution,
                input_err_hi_lo=relative_error(x_split, x.double()),
                input_err_one_scale=relative_error(s * (hi + lo_same), x.double()),
                input_err_block_scales=relative_error(bs * (bhi + blo), x.double()),
                input_err_block128_scales=relative_error(ss * (shi + slo), x.double()),
                bf16_path=relative_error(bf16_path, ref), hi_only=relative_error(hi_only, ref),
                hi_lo=relative_error(hi_lo, ref), hi_lo_one_scale=relative_error(one_scale, ref),
                hi_lo_block_scales=relative_error(blocks, ref),
                hi_lo_block_scales_13bit_sums=relative_error(blocks13, ref),
                hi_lo_block128_scales=relative_error(steps, ref))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--n", type=int, default=1536)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    for distribution in ("normal", "student_t3", "outlier_channels"):
        for seed in range(args.seeds):
            print(json.dumps(study(args.tokens, args.k, args.n, distribution, seed)), flush=True)


if __name__ == "__main__":
    main()
