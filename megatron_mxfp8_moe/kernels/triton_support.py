"""Whether the Hopper Triton MXFP8 MoE runs on a device: SM90 and Triton >= 3.4 (``triton_moe_support``), and a
warning for a Triton other than the one every GPU run used (``untested_triton_note``)."""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from ..errors import BackendUnavailableError

logger = logging.getLogger(__name__)

# Hopper only: the kernel relies on SM90's bf16 conversions (cvt.bf16.f16) and was tuned on an H200.
_SUPPORTED_MAJOR = 9
_MIN_TRITON = (3, 4)


def _major_minor(triton_version: str) -> tuple[int, ...]:
    """``(major, minor)`` of a Triton version string such as "3.6.0+git1234"."""
    return tuple(int(p) for p in triton_version.split("+")[0].split(".")[:2] if p.isdigit())


def triton_moe_support(capability, triton_version: Optional[str] = None) -> tuple[bool, str]:
    """Pure support check: ``capability`` is ``(major, minor)`` or None (no CUDA); returns ``(ok, reason)``."""
    if capability is None:
        return False, "the Triton MXFP8 MoE needs a CUDA GPU (none visible)"
    major, minor = capability
    if major != _SUPPORTED_MAJOR:
        return False, f"the Triton MXFP8 MoE needs an SM90 Hopper GPU (H100/H200); this one is SM{major}{minor}"
    if triton_version is not None:
        if _major_minor(triton_version) < _MIN_TRITON:
            return False, f"the Triton MXFP8 MoE needs Triton >= {'.'.join(map(str, _MIN_TRITON))}, found {triton_version}"
    return True, f"SM{major}{minor} Hopper: weight-only MXFP8 Triton MoE available"


_GPU_TESTED_TRITON = (3, 6)  # the Triton of every GPU run (torch 2.11 on the lent H200s)


def untested_triton_note(triton_version: str) -> Optional[str]:
    """A warning for a Triton other than the GPU-tested one (``_GPU_TESTED_TRITON``), else None. Session 21's SASS
    scan (bench/sass_hazard_scan.py) found Triton 3.8 pipelining the gated decode FC1 so that in-flight register-A
    wgmmas have their registers overwritten (undefined in PTX), where 3.6 waits; no GPU has run 3.8."""
    if _major_minor(triton_version) == _GPU_TESTED_TRITON:
        return None
    tested = ".".join(map(str, _GPU_TESTED_TRITON))
    return (f"the Triton MXFP8 MoE was tested on a GPU with Triton {tested} only, this is Triton {triton_version}; "
            f"its SASS may overwrite registers of in-flight wgmmas (bench/sass_hazard_scan.py checks a version)")


@functools.lru_cache(maxsize=None)
def warn_untested_triton(triton_version: str) -> None:
    """Log ``untested_triton_note`` once per process and version."""
    note = untested_triton_note(triton_version)
    if note:
        logger.warning(note)


def check_triton_moe_available(device: torch.device) -> None:
    """Raise ``BackendUnavailableError`` naming the requirement unless this backend runs on ``device``."""
    capability = torch.cuda.get_device_capability(device) if torch.cuda.is_available() and device.type == "cuda" else None
    try:
        import triton

        version = triton.__version__
    except ImportError as error:
        raise BackendUnavailableError("the Triton MXFP8 MoE needs the 'triton' package") from error
    ok, reason = triton_moe_support(capability, version)
    if not ok:
        raise BackendUnavailableError(reason)
