"""What this machine can run: device type, CUDA capability, FlashInfer and Triton versions; and whether a CUDA graph
is being captured right now.

The only module of the package that asks the machine. Everything else (``select.py``, each backend's
``check_support``) takes a ``DeviceCaps`` value, so selection is a pure function tested with plain values.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Optional, Union

import torch


@dataclasses.dataclass(frozen=True)
class DeviceCaps:
    """Capabilities of one device as plain values (hashable, comparable).

    device_type: ``"cpu"`` or ``"cuda"`` (any other torch device type is carried as is).
    capability: CUDA compute capability ``(major, minor)``, e.g. ``(9, 0)`` for H100/H200, ``(10, 0)`` for
        B200; ``None`` off CUDA.
    flashinfer_version: installed ``flashinfer-python`` version string, ``None`` when not installed.
    triton_version: installed ``triton`` version string, ``None`` when not installed.
    """

    device_type: str
    capability: Optional[tuple[int, int]] = None
    flashinfer_version: Optional[str] = None
    triton_version: Optional[str] = None

    @property
    def is_cuda(self) -> bool:
        return self.device_type == "cuda" and self.capability is not None

    @property
    def cuda_capability(self) -> Optional[tuple[int, int]]:
        """Alias of ``capability`` (the attribute name ``kernels/flashinfer_compat.flashinfer_support`` reads)."""
        return self.capability

    @property
    def sm(self) -> Optional[int]:
        """Capability as one number (``(10, 3)`` -> 103), ``None`` off CUDA."""
        return None if self.capability is None else self.capability[0] * 10 + self.capability[1]

    def describe(self) -> str:
        """Short text for messages: ``"cuda SM90 (flashinfer 0.7.2, triton 3.8.0)"``."""
        where = self.device_type if self.sm is None else f"{self.device_type} SM{self.sm}"
        return f"{where} (flashinfer {self.flashinfer_version or 'not installed'}, triton {self.triton_version or 'not installed'})"


def _installed_version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def detect_caps(device: Union[str, torch.device, None] = None) -> DeviceCaps:
    """Capabilities of ``device`` (default: the current CUDA device when CUDA is available, else the CPU).

    Reads installed package metadata only; imports neither flashinfer nor triton.
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    capability = None
    if device.type == "cuda" and torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability(device))
    return DeviceCaps(
        device_type=device.type,
        capability=capability,
        flashinfer_version=_installed_version("flashinfer-python"),
        triton_version=_installed_version("triton") or _installed_version("pytorch-triton"),  # (the nightlies' name)
    )


def cuda_graph_capturing() -> bool:
    """Is a CUDA graph being captured on the current stream? (False without CUDA; no CUDA init.)"""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


__all__ = ["DeviceCaps", "cuda_graph_capturing", "detect_caps"]
