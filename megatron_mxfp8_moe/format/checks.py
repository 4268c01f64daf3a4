"""Argument checks shared by every entry point. Each raises MXFP8InputError before any write."""

import torch

from ..errors import MXFP8InputError
from .constants import BLOCK_SIZE, SOURCE_DTYPES


def check_dtype(name: str, tensor: torch.Tensor, allowed) -> None:
    """Raise unless ``tensor.dtype`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if tensor.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise MXFP8InputError(f"{name}: dtype must be one of ({names}), got {tensor.dtype}")


def check_shape(name: str, tensor: torch.Tensor, expected) -> None:
    """Raise unless ``tensor.shape == expected``."""
    if tuple(tensor.shape) != tuple(expected):
        raise MXFP8InputError(f"{name}: shape must be {tuple(expected)}, got {tuple(tensor.shape)}")


def check_device(name: str, tensor: torch.Tensor, device: torch.device) -> None:
    """Raise unless ``tensor`` lives on ``device``."""
    if tensor.device != torch.device(device):
        raise MXFP8InputError(f"{name}: must be on {device}, got {tensor.device}")


def check_contiguous(name: str, tensor: torch.Tensor) -> None:
    """Raise unless ``tensor`` is contiguous."""
    if not tensor.is_contiguous():
        raise MXFP8InputError(f"{name}: must be contiguous (call .contiguous() first)")


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise if floating ``tensor`` holds NaN or Inf: one max-abs reduction (NaN and Inf propagate into it, and
    no bool copy of the tensor is made), then a host sync."""
    if tensor.numel() and not bool(torch.isfinite(torch.linalg.vector_norm(tensor, float("inf")))):
        bad = int((~torch.isfinite(tensor)).sum())
        raise MXFP8InputError(f"{name}: holds {bad} non-finite value(s) (NaN or Inf); nothing was written")


def check_quantizable(name: str, tensor: torch.Tensor, *, finite: bool = True) -> None:
    """A source for MXFP8 quantization: bf16/fp16/fp32, 2-D or 3-D, K % 32 == 0, finite (unless told not
    to check yet: callers that check the device first pass ``finite=False`` and call check_finite last)."""
    if not isinstance(tensor, torch.Tensor):
        raise MXFP8InputError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    check_dtype(name, tensor, SOURCE_DTYPES)
    if tensor.dim() not in (2, 3):
        raise MXFP8InputError(f"{name}: must be [M, K] or [E, M, K], got shape {tuple(tensor.shape)}")
    if tensor.shape[-1] % BLOCK_SIZE:
        raise MXFP8InputError(f"{name}: K = {tensor.shape[-1]} must be a multiple of {BLOCK_SIZE}")
    if finite:
        check_finite(name, tensor)
