"""Diagnostic (session 24, GPU): where the "f8x2" tiles' GPU results go wrong. (1) the split kernel against its
torch twin, bit for bit; (2) one fp8 x fp8 ``tl.dot`` with the token operand loaded as the f8x2 steps load it
(``[32, BLOCK_T]``, K contiguous) and as a row-major tile transposed, against float64. Prints one JSON line per
check.

    python3 bench/f8x2_check.py
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from megatron_mxfp8_moe.kernels.triton_launch import _split_into  # noqa: E402
from megatron_mxfp8_moe.kernels.triton_moe import split_rows_buffers, split_rows_reference  # noqa: E402


@triton.jit
def _dot_probe(w_ptr, x_ptr, out_ptr, out2_ptr, BLOCK_T: tl.constexpr):
    """``w`` [64, 32] e4m3 row-major, ``x`` [BLOCK_T, 32] e4m3 row-major: out = w @ x^T two ways."""
    n = tl.arange(0, 64)
    c = tl.arange(0, 32)
    t = tl.arange(0, BLOCK_T)
    w = tl.load(w_ptr + n[:, None] * 32 + c[None, :])
    x_kt = tl.load(x_ptr + t[None, :] * 32 + c[:, None])  # [32, BLOCK_T], K contiguous (as _f8x2_steps)
    d = tl.dot(w, x_kt)
    tl.store(out_ptr + n[:, None] * BLOCK_T + t[None, :], d)
    x_tk = tl.load(x_ptr + t[:, None] * 32 + c[None, :])  # [BLOCK_T, 32] row-major
    d2 = tl.dot(w, tl.trans(x_tk))
    tl.store(out2_ptr + n[:, None] * BLOCK_T + t[None, :], d2)


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = torch.randn(37, 2048, dtype=torch.bfloat16) * 3
    q, s = split_rows_buffers(37, 2048, dev)
    _split_into(x.to(dev), q, s)
    qr, sr = split_rows_reference(x)
    qb, qrb = q.cpu().view(torch.uint8), qr.view(torch.uint8)
    terms = q.cpu().float().reshape(37, -1, 2, 32)  # [rows, blocks, (hi, lo), 32] (``_split_cols``)
    back = ((terms[:, :, 0] + terms[:, :, 1]) * s.cpu()[:, :, None]).reshape(37, -1)
    bad = (qb != qrb).nonzero().tolist()
    detail = []
    for r, c in bad[:12]:  # column c of the split row: block c // 64, term (c % 64) // 32, element c % 32
        k = (c // 64) * 32 + c % 32
        y = float(x[r, k].float() / s.cpu()[r, c // 64])
        detail.append(dict(row=r, col=c, term="lo" if (c % 64) >= 32 else "hi", y=y, gpu=float(q.cpu()[r, c].float()),
                           ref=float(qr[r, c].float())))
    print(json.dumps(dict(check="split", bytes_equal=bool(torch.equal(qb, qrb)), mismatches=len(bad),
                          scales_equal=bool(torch.equal(s.cpu(), sr)),
                          max_reconstruction_error=float((back - x.float()).abs().max()), detail=detail)), flush=True)
    for block_t in (16, 32, 64):
        w = (torch.randn(64, 32) * 8).to(torch.float8_e4m3fn)
        xt = (torch.randn(block_t, 32) * 8).to(torch.float8_e4m3fn)
        ref = w.double() @ xt.double().T
        out = torch.empty(64, block_t, device=dev)
        out2 = torch.empty(64, block_t, device=dev)
        _dot_probe[(1,)](w.to(dev), xt.to(dev), out, out2, BLOCK_T=block_t, num_warps=4)
        err = lambda o: float((o.cpu().double() - ref).norm() / ref.norm())  # noqa: E731
        print(json.dumps(dict(check="dot", block_t=block_t, rel_err_k_contiguous=err(out), rel_err_trans=err(out2))),
              flush=True)


if __name__ == "__main__":
    main()
