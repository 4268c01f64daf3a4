"""The refit's NaN/Inf check on the device, launched while the batch is still being validated on the host.

(With ``refit_experts(nonfinite="detect")`` no scan runs: ``DeviceScan.reserve`` hands its flags to the quantize
kernels, which set them while writing; ``first_bad`` reads them the same way.)

validate (host, per entry) --every CHUNK sources of a stack, or one large (stacked) source at once-->
validate (host, a batch checked in one piece) --all sources of a stack, once they are checked-->
  ``scan_nonfinite_triton`` (device flags, no sync)
  -> apply: quantize kernels predicated on ``flags[0]`` -> ONE host sync reads the flags.

A scan writes only its flags, so launching it before the rest of the batch is validated is harmless: when
validation later fails, or the plan turns out not to allow the device check, the flags are simply dropped.
Overlapping the scan with the host's per-entry work is the point: a 256-entry plan costs the host about as long
as the scan of its sources takes the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

CHUNK = 64  # sources per scan launch: few launches, yet the first one starts early
EAGER_NUMEL = 1 << 24  # a source of at least this many elements (e.g. a stacked [E, M, K] one) launches at once
_MIN_FLAGS = 1024  # a flags buffer holds at least this many int32

# Per device: all-zero flags buffers that no scan uses (taken by a DeviceScan, given back by ``first_bad`` once
# its host sync showed nothing was set), so that a call costs neither an allocation nor a zero-fill launch. Two
# per device: a stream refit holds one module's scan while it validates (and scans) the next module.
_IDLE_FLAGS: dict[torch.device, list[torch.Tensor]] = {}
_IDLE_PER_DEVICE = 2


def _take_flags(count: int, device: torch.device) -> torch.Tensor:
    idle = _IDLE_FLAGS.get(device)
    buffer = idle.pop() if idle else None
    if buffer is None or buffer.numel() < count:
        buffer = torch.zeros(max(count, _MIN_FLAGS), dtype=torch.int32, device=device)
    return buffer


class DeviceScan:
    """NaN/Inf flags for up to ``capacity`` sources on ``device``, filled by scans launched chunk by chunk.

    ``flags``: int32 ``[1 + capacity]`` on the device, zeroed: ``flags[0]`` = any scanned source is bad,
    ``flags[1 + k]`` = the k-th scanned source (``order[k]`` is its write) is bad. It is a view of a cached
    per-device buffer that ``first_bad`` gives back when nothing was flagged (a later scan reuses it), so it
    is only meaningful until then. Not thread-safe.
    """

    def __init__(self, capacity: int, device: torch.device):
        self.device = device
        self._buffer = _take_flags(1 + capacity, device)
        self.flags = self._buffer[:1 + capacity]
        self._launched: list[Sequence[Any]] = []  # per launch, the writes of its sources (not copied), in flag order
        self._scanned = 0  # sources launched
        self._pending: dict[Any, tuple[list, list, int]] = {}  # batch key -> (writes, sources, launch size)
        self._capacity = capacity
        self._count = 0  # sources queued or scanned
        self.valid = True  # False once a source did not fit (other device, over capacity): use the host check

    def add(self, key: Any, write: Any, source: torch.Tensor) -> None:
        """Queue ``source`` (contiguous, on ``device``) of ``write``; sources sharing ``key`` share dtype, size
        and device (one stack), so the device is checked once per key and chunk. A key's queue is launched at
        ``CHUNK`` sources, or at once for a source of ``EAGER_NUMEL`` elements or more."""
        self.extend(key, (write,), (source,))

    def extend(self, key: Any, writes: Sequence[Any], sources: Sequence[torch.Tensor]) -> None:
        """Queue several ``sources`` of one ``key`` (aligned with ``writes``) at once, launching as ``add`` one by
        one would: a plan hands over a stack's sources every ``launch_size`` entries, not per entry."""
        if not self.valid or not sources:
            return
        pending = self._pending.get(key)
        if pending is None:
            if sources[0].device != self.device:
                self.valid = False
                return
            pending = self._pending[key] = ([], [], self.launch_size(sources[0]))
        if self._count + len(sources) > self._capacity:
            self.valid = False
            return
        self._count += len(sources)
        pending[0].extend(writes)
        pending[1].extend(sources)
        while pending is not None and len(pending[1]) >= pending[2]:
            self._launch(key, pending[2])
            pending = self._pending.get(key)

    def scan_now(self, writes: Sequence[Any], sources: Sequence[torch.Tensor],
                 pointers: Optional[Sequence[int]] = None) -> None:
        """Scan ``sources`` (contiguous, of one dtype and size) in one launch now: what a plan checked in one piece.
        ``writes`` (aligned with them) is kept as it is, not iterated: ``first_bad`` looks up only flagged ones.
        ``pointers``: their ``data_ptr()``s, when the caller has them."""
        if not self.valid or not sources:
            return
        if sources[0].device != self.device or self._count + len(sources) > self._capacity:
            self.valid = False
            return
        self._count += len(sources)
        self._run(writes, sources, pointers)

    def reserve(self, writes: Sequence[Any]) -> int:
        """Flags for the sources of ``writes`` (one each) that no scan reads: the quantize kernels set them as they
        write (``refit_experts(nonfinite="detect")``); returns the entry of the first (``flags[1 + entry]``)."""
        self._count += len(writes)
        self.valid = self.valid and self._count <= self._capacity
        return self._allot(writes, len(writes))

    @staticmethod
    def launch_size(source: torch.Tensor) -> int:
        """Sources per scan launch for sources like ``source``: ``CHUNK``, or 1 for large ones (a stacked one)."""
        return 1 if source.numel() >= EAGER_NUMEL else CHUNK

    @property
    def count(self) -> int:
        """Sources queued or scanned so far."""
        return self._count

    @property
    def order(self) -> list[Any]:
        """The writes of the launched sources, in flag order (``flags[1 + k]`` belongs to ``order[k]``)."""
        return [write for writes in self._launched for write in writes]

    def finish(self) -> Optional[torch.Tensor]:
        """Launch what is queued; returns the flags, or None when the device check cannot cover the plan."""
        for key in list(self._pending):
            self._launch(key)
        return self.flags if self.valid else None

    def first_bad(self, writes) -> Any:
        """Host sync: the bad write that comes first in ``writes`` (the plan's entry order), or None (then the
        flags buffer, still all zero and no longer used by any kernel, goes back to the per-device cache)."""
        flags = self.flags.tolist()
        if not flags[0]:
            idle = _IDLE_FLAGS.setdefault(self.device, [])
            if len(idle) < _IDLE_PER_DEVICE:
                idle.append(self._buffer)
            return None
        bad, first = set(), 1
        for launched in self._launched:  # only the flagged writes are looked up (a plan may make them on access)
            bad.update(id(launched[k]) for k, flag in enumerate(flags[first:first + len(launched)]) if flag)
            first += len(launched)
        return next(write for write in writes if id(write) in bad)

    def _launch(self, key: Any, count: Optional[int] = None) -> None:
        """Launch the first ``count`` (None: all) queued sources of ``key``."""
        writes, sources, size = self._pending[key]
        if count is None or count >= len(sources):
            del self._pending[key]
        else:
            self._pending[key] = (writes[count:], sources[count:], size)
            writes, sources = writes[:count], sources[:count]
        self._run(writes, sources)

    def _run(self, writes: Sequence[Any], sources: Sequence[torch.Tensor],
             pointers: Optional[Sequence[int]] = None) -> None:
        from ..quant.triton import scan_nonfinite_triton

        scan_nonfinite_triton(sources, self.flags, first_entry=self._allot(writes, len(sources)),
                              pointers=pointers)

    def _allot(self, writes: Sequence[Any], count: int) -> int:
        """The next ``count`` flags, for the ``count`` writes ``writes`` in order; returns the entry of the first."""
        first = self._scanned
        self._launched.append(writes)
        self._scanned += count
        return first


__all__ = ["CHUNK", "EAGER_NUMEL", "DeviceScan"]
