"""Input generators, error metrics, a file loader, CUDA-graph capture and a refit-scan spy shared by tests/ and bench/
(no pytest import here)."""

import importlib.util
import pathlib
import sys

import torch

from .activations import parse_activation


def load_file_module(path, name: str):
    """Import the Python file ``path`` as module ``name`` (registered in ``sys.modules``, which dataclasses
    need) and return it: helpers beside a test, which pytest's importlib mode cannot import by name."""
    spec = importlib.util.spec_from_file_location(name, pathlib.Path(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` computed in float64; NaN anywhere gives inf."""
    out64, ref64 = out.detach().to(torch.float64).cpu(), ref.detach().to(torch.float64).cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-300))


def random_weights(shape, *, dtype=torch.bfloat16, device="cpu", scale=0.02, generator=None) -> torch.Tensor:
    """Fresh random weights with MX edge cases built in: per 32-block magnitudes spread over 2**-8..2**8,
    one all-zero block, one block with a single huge outlier, and block maxima at 448 when ``K >= 128``.
    Drawn on the CPU, then moved; ``device`` is touched first, so a missing one fails before the draw."""
    torch.empty(0, device=device)
    values = torch.randn(shape, generator=generator, dtype=torch.float32) * scale
    blocks = values.unflatten(-1, (-1, 32))
    spread = torch.exp2(torch.randint(-8, 9, blocks.shape[:-1], generator=generator).to(torch.float32))
    blocks.mul_(spread.unsqueeze(-1))
    flat = blocks.reshape(-1, blocks.shape[-2], 32)
    if flat.shape[1] >= 4:
        flat[0, 0].zero_()
        flat[0, 1, 5] = 300.0 * scale
        flat[0, 2, 7] = 448.0
        flat[0, 3, 0] = -448.0
    return blocks.flatten(-2).to(dtype=dtype, device=device)


def random_expert_stacks(experts: int, hidden: int, inter: int, activation: str, *, scale=0.02, device="cpu",
                         backend: str = "auto"):
    """A MoE layer's fc1 / fc2 MXFP8 stacks from ``random_weights``: fc1 ``[E, 2I, H]`` (``[gate; up]``) for a gated
    ``activation``, ``[E, I, H]`` otherwise; fc2 ``[E, H, I]``. fc1 is drawn first."""
    from .tensor import quantize_mxfp8  # on first use: the tensor module pulls in Megatron-Core

    n1 = 2 * inter if parse_activation(activation).gated else inter
    fc1 = quantize_mxfp8(random_weights((experts, n1, hidden), scale=scale, device=device), backend=backend)
    fc2 = quantize_mxfp8(random_weights((experts, hidden, inter), scale=scale, device=device), backend=backend)
    return fc1, fc2


def random_routing(rows: int, experts: int, topk: int, *, device="cpu", generator=None):
    """Softmax top-k routing over random logits: (probs fp32 ``[rows, topk]``, ids int64 ``[rows, topk]``)."""
    logits = torch.randn(rows, experts, generator=generator)
    probs, ids = torch.topk(logits.softmax(-1), topk, dim=-1)
    return probs.to(device=device, dtype=torch.float32), ids.to(device=device, dtype=torch.int64)


def capture_cuda_graph(fn, warmup: int = 1):
    """``fn`` run ``warmup`` times on a side stream (kernels compiled, memory allocated outside the capture), then
    captured once in a CUDA graph; returns the graph (``graph.replay()`` runs ``fn``'s kernels again)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def spy_nonfinite_scans(monkeypatch) -> list:
    """The list that records the source count of every ``quant.triton.scan_nonfinite_triton`` launch (the refit's
    device NaN/Inf check) from now on; ``monkeypatch``: pytest's fixture, which undoes the spy after the test."""
    from .quant import triton as triton_quant

    scans, original = [], triton_quant.scan_nonfinite_triton
    monkeypatch.setattr(triton_quant, "scan_nonfinite_triton",
                        lambda *a, **k: (scans.append(len(a[0])), original(*a, **k))[1])
    return scans
