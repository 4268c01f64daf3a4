"""Quantizer backend names and dispatch: ``"reference"``, ``"triton"``, ``"flashinfer"``, ``"auto"``."""

import enum
from typing import Optional

import torch

from ..errors import BackendUnavailableError
from .flashinfer import flashinfer_quantizer_support, flashinfer_source_dtype_problem, quantize_into_flashinfer
from .reference import quantize_into_reference
from .triton import quantize_into_triton, triton_quantizer_support


class QuantBackend(enum.Enum):
    """Where MXFP8 quantization runs. ``reference`` and ``triton`` give Megatron's bytes (scale = amax/448
    rounded up to a power of two; tested on the CPU and on an H200). ``flashinfer`` runs FlashInfer's own
    ``mxfp8_quantize`` (bf16/fp16 sources only); its bytes have not been compared with Megatron's rule on a GPU
    here, so it is never chosen by ``"auto"``."""

    REFERENCE = "reference"
    TRITON = "triton"
    FLASHINFER = "flashinfer"


_BY_NAME = {backend.value: backend for backend in QuantBackend}


def resolve_quant_backend(name: str, device: torch.device) -> QuantBackend:
    """Map a user string to a backend runnable on ``device``; ``"auto"`` picks triton on CUDA, else reference."""
    device = torch.device(device)
    if name == "auto":
        return QuantBackend.TRITON if device.type == "cuda" else QuantBackend.REFERENCE
    if name not in _BY_NAME:
        raise ValueError(f"unknown quantizer backend {name!r}; choose one of {sorted(_BY_NAME)} or 'auto'")
    backend = _BY_NAME[name]
    support = {
        QuantBackend.REFERENCE: lambda: (True, "ok"),
        QuantBackend.TRITON: lambda: triton_quantizer_support(device),
        QuantBackend.FLASHINFER: lambda: flashinfer_quantizer_support(device),
    }[backend]()
    if not support[0]:
        raise BackendUnavailableError(support[1])
    return backend


_QUANTIZE_INTO = {
    QuantBackend.REFERENCE: quantize_into_reference,
    QuantBackend.TRITON: quantize_into_triton,
    QuantBackend.FLASHINFER: quantize_into_flashinfer,
}


def source_dtype_problem(backend: QuantBackend, dtype: torch.dtype) -> Optional[str]:
    """Why ``backend`` cannot quantize a ``dtype`` source that passed ``check_quantizable`` (bf16 / fp16 / fp32), or
    None: FlashInfer's quantizer takes no fp32."""
    return flashinfer_source_dtype_problem(dtype) if backend is QuantBackend.FLASHINFER else None


def quantize_into(source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, backend: QuantBackend) -> None:
    """Quantize checked ``source`` into ``data`` / ``scale`` storage with ``backend`` (a source that requires grad
    is read detached: the stored bytes never join an autograd graph)."""
    _QUANTIZE_INTO[backend](source.detach(), data, scale)
