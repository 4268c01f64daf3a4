"""Backend choice: ``select_backend(request, caps) -> (Backend, reason)``, a pure function of plain values.

User strings map to ``Backend`` through one dict (``BACKEND_NAMES``). ``"auto"``:

1. not CUDA (the CPU)                       -> reference
2. SM100/SM103 with flashinfer installed    -> flashinfer_routed (when it supports the activation)
3. any other CUDA GPU                       -> triton (when its support check passes)
4. a CUDA GPU none of the above can serve   -> reference, with the reasons the others were skipped

An explicit request this machine cannot run raises ``BackendUnavailableError`` carrying the backend's reason.
Nothing here reads environment variables or probes the device: ``kernels/caps.py`` does that once.
"""

from __future__ import annotations

import logging
from typing import Optional, Union

from ..activations import Activation, parse_activation
from ..errors import BackendUnavailableError, MXFP8InputError
from .base import Backend, MoEBackend
from .caps import DeviceCaps
from .flashinfer_backend import FlashInferCutlassBackend, FlashInferRoutedBackend
from .reference_backend import ReferenceBackend
from .triton_backend import TritonBackend

logger = logging.getLogger(__name__)

# The one map from user strings to backends ("auto" is handled by select_backend).
BACKEND_NAMES: dict[str, Backend] = {
    "reference": Backend.REFERENCE,
    "triton": Backend.TRITON,
    "flashinfer_routed": Backend.FLASHINFER_ROUTED,
    "flashinfer": Backend.FLASHINFER_ROUTED,  # alias: the routed kernel is FlashInfer's default MXFP8 MoE here
    "flashinfer_cutlass": Backend.FLASHINFER_CUTLASS,  # explicit only: "auto" prefers the routed kernel
}

BACKEND_CLASSES: dict[Backend, type[MoEBackend]] = {
    Backend.REFERENCE: ReferenceBackend,
    Backend.TRITON: TritonBackend,
    Backend.FLASHINFER_ROUTED: FlashInferRoutedBackend,
    Backend.FLASHINFER_CUTLASS: FlashInferCutlassBackend,
}

# Blackwell datacenter parts with FlashInfer MXFP8 MoE kernels (see kernels/flashinfer_compat.MXFP8_MOE_ARCHS).
_FLASHINFER_FIRST_CAPABILITIES = frozenset({(10, 0), (10, 3)})


def parse_backend_request(request: Union[str, Backend]) -> Optional[Backend]:
    """``"auto"`` -> None; a backend name or member -> that ``Backend``; anything else raises MXFP8InputError."""
    if isinstance(request, Backend):
        return request
    if request == "auto":
        return None
    if request not in BACKEND_NAMES:
        raise MXFP8InputError(f"backend: expected 'auto' or one of {sorted(BACKEND_NAMES)}, got {request!r}")
    return BACKEND_NAMES[request]


def _can_run(backend: Backend, caps: DeviceCaps, activation: Optional[Activation]) -> tuple[bool, str]:
    cls = BACKEND_CLASSES[backend]
    support = cls.check_support(caps)
    if not support.ok:
        return False, support.reason
    if activation is not None:
        by_activation = cls.supports_activation(activation, caps)
        if not by_activation.ok:
            return False, by_activation.reason
    return True, support.reason


def select_backend(
    request: Union[str, Backend], caps: DeviceCaps, *, activation: Union[None, str, Activation] = None
) -> tuple[Backend, str]:
    """Resolve ``request`` (``"auto"``, a name in ``BACKEND_NAMES`` or a ``Backend``) for ``caps``.

    ``activation``: when given, backends that do not implement it are skipped by ``"auto"`` and rejected
    when requested explicitly. Returns ``(backend, reason)``; the reason says why this one was picked.
    Raises BackendUnavailableError (explicit request not runnable here) or MXFP8InputError (unknown name).
    """
    if not isinstance(caps, DeviceCaps):
        raise MXFP8InputError(f"caps: expected a DeviceCaps, got {type(caps).__name__}")
    activation = None if activation is None else parse_activation(activation)
    wanted = parse_backend_request(request)
    if wanted is not None:
        ok, reason = _can_run(wanted, caps, activation)
        if not ok:
            raise BackendUnavailableError(f"backend {wanted.value!r} cannot run here: {reason}")
        return wanted, f"requested {wanted.value!r}: {reason}"

    if not caps.is_cuda:
        return Backend.REFERENCE, f"auto: no CUDA device ({caps.describe()}), using the reference backend"
    skipped = []
    if caps.capability in _FLASHINFER_FIRST_CAPABILITIES:
        ok, reason = _can_run(Backend.FLASHINFER_ROUTED, caps, activation)
        if ok:  # the caps read the installed version only: an installed package can still fail to import
            from .flashinfer_compat import flashinfer_import_problem

            problem = flashinfer_import_problem()
            ok, reason = (False, problem) if problem else (ok, reason)
        if ok:
            return Backend.FLASHINFER_ROUTED, f"auto: {reason}"
        skipped.append(f"flashinfer_routed: {reason}")
    ok, reason = _can_run(Backend.TRITON, caps, activation)
    if ok:
        return Backend.TRITON, f"auto: {reason}"
    skipped.append(f"triton: {reason}")
    return Backend.REFERENCE, "auto: falling back to the (slow) reference backend; " + "; ".join(skipped)


def make_backend(backend: Backend) -> MoEBackend:
    """A new instance of ``backend``'s adapter (holds no weights; ``build`` makes the stack state)."""
    return BACKEND_CLASSES[backend]()


__all__ = ["BACKEND_CLASSES", "BACKEND_NAMES", "make_backend", "parse_backend_request", "select_backend"]
