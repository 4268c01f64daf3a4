"""The refit's NaN/Inf check on the device, launched while the batch is still being validated on the host.

validate (host, per entry) --every CHUNK sources of a stack--> ``scan_nonfinite_triton`` (device flags, no sync)
  -> apply: quantize kernels predicated on ``flags[0]`` -> ONE host sync reads the flags.

A scan writes only its flags, so launching it before the rest of the batch is validated is harmless: when
validation later fails, or the plan turns out not to allow the device check, the flags are simply dropped.
Overlapping the scan with the host's per-entry work is the point: a 256-entry plan costs the host about as long
as the scan of its sources takes the GPU.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

CHUNK = 64  # sources per scan launch: few launches, yet the first one starts early


class DeviceScan:
    """NaN/Inf flags for up to ``capacity`` sources on ``device``, filled by scans launched chunk by chunk.

    ``flags``: int32 ``[1 + capacity]`` on the device, zeroed: ``flags[0]`` = any scanned source is bad,
    ``flags[1 + k]`` = the k-th scanned source (``order[k]`` is its write) is bad. Not thread-safe.
    """

    def __init__(self, capacity: int, device: torch.device):
        self.device = device
        self.flags = torch.zeros(1 + capacity, dtype=torch.int32, device=device)
        self.order: list[Any] = []  # writes, in flag order
        self._pending: dict[Any, tuple[list, list]] = {}  # batch key -> (writes, sources) not yet scanned
        self._capacity = capacity
        self._count = 0  # sources queued or scanned
        self.valid = True  # False once a source did not fit (other device, over capacity): use the host check

    def add(self, key: Any, write: Any, source: torch.Tensor) -> None:
        """Queue ``source`` (contiguous, on ``device``) of ``write``; sources sharing ``key`` share dtype, size
        and device (one stack), so the device is checked once per key and chunk."""
        if not self.valid:
            return
        pending = self._pending.get(key)
        if pending is None:
            if source.device != self.device:
                self.valid = False
                return
            pending = self._pending[key] = ([], [])
        if self._count >= self._capacity:
            self.valid = False
            return
        self._count += 1
        pending[0].append(write)
        pending[1].append(source)
        if len(pending[1]) >= CHUNK:
            self._launch(key)

    def finish(self) -> Optional[torch.Tensor]:
        """Launch what is queued; returns the flags, or None when the device check cannot cover the plan."""
        for key in list(self._pending):
            self._launch(key)
        return self.flags if self.valid else None

    def first_bad(self, writes) -> Any:
        """Host sync: the bad write that comes first in ``writes`` (the plan's entry order), or None."""
        flags = self.flags.tolist()
        if not flags[0]:
            return None
        bad = {id(self.order[k]) for k, flag in enumerate(flags[1:len(self.order) + 1]) if flag}
        return next(write for write in writes if id(write) in bad)

    def _launch(self, key: Any) -> None:
        from ..quant.triton import scan_nonfinite_triton

        writes, sources = self._pending.pop(key)
        scan_nonfinite_triton(sources, self.flags, first_entry=len(self.order))
        self.order += writes


__all__ = ["CHUNK", "DeviceScan"]
