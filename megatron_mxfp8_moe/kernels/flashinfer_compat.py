"""The one place that knows FlashInfer 0.6.x / 0.7.x differences for the MXFP8 MoE kernels.

- support: ``flashinfer_support(caps, kernel)`` is pure (plain values in, ``(ok, reason)`` out); the
  ``require_*`` functions probe this machine and raise ``BackendUnavailableError`` with that reason;
- enums: ``ActivationType``, ``Fp8QuantizationType``, ``WeightLayout``, ``RoutingMethodType`` are looked up by
  member name in the installed package (their values moved across 0.6.x; never pass bare ints);
- return values: ``first_output`` turns FlashInfer's Tensor-or-list returns into one Tensor.

Version floors (see docs in shared/reference/flashinfer_mxfp8.md):
- routed trtllm-gen MXFP8 (``trtllm_fp8_block_scale_routed_moe``): >= 0.6.8, since the routed variant ignored
  ``output=`` before (issue #2703, fixed by #2739) and autotuning crashed with ``routing_logits=None`` (#2749);
- CUTLASS MXFP8xMXFP8 (``cutlass_fused_moe(use_mxfp8_act_scaling=True)``): >= 0.6.8 for ``swizzled_input_sf``;
  with squared ReLU (non-gated fc1 ``[E, I, H]``) >= 0.6.10, since the binding checked the MXFP8 fc1 scales
  against the gated ``2 * I`` rows for every activation before (fixed by PR #3082).
"""

import dataclasses
import functools
import importlib
import logging
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ..activations import Activation
from ..errors import BackendUnavailableError, MXFP8InputError

logger = logging.getLogger(__name__)

ROUTED_MIN_VERSION = "0.6.8"  # routed variant honours output= (#2703/#2739); routing_logits=None autotune (#2749)
CUTLASS_MIN_VERSION = "0.6.8"  # cutlass_fused_moe(swizzled_input_sf=...)
TESTED_VERSION = "0.7.2.post1"

# trtllm-gen ships MXFP8 MoE cubins only for sm_100a/sm_100f/sm_103a; the CUTLASS generator emits MXFP8xMXFP8
# grouped GEMMs only for arch 100 (built into the SM103 module). SM110 / SM12x / SM90 are not supported.
MXFP8_MOE_ARCHS = {(10, 0): "SM100", (10, 3): "SM103"}

_KERNELS = {
    "routed": ("FlashInfer routed trtllm-gen MXFP8 MoE", ROUTED_MIN_VERSION,
               "output= was ignored by the routed kernel before 0.6.8"),
    "cutlass": ("FlashInfer CUTLASS MXFP8xMXFP8 MoE", CUTLASS_MIN_VERSION,
                "cutlass_fused_moe gained swizzled_input_sf in 0.6.8"),
}

# (kernel, activation) -> (minimum version, why): activations whose floor is above their kernel's
_ACTIVATION_MIN_VERSIONS = {
    ("cutlass", Activation.SQUARED_RELU): (
        "0.6.10", "before it cutlass_fused_moe checked the MXFP8 fc1 scales of a non-gated fc1 [E, I, H] as "
        "if gated (2 * I rows; PR #3082)",
    ),
}

_ARCH_NOTES = {
    9: "Hopper has no MX (block-scaled) tensor cores",
    8: "Ampere has no FP8 or MX tensor cores",
    11: "SM110 shares the SM100 CUTLASS module but has no trtllm-gen MXFP8 cubins and is untested",
    12: "SM12x has no trtllm-gen MoE cubins and only MXFP8xMXFP4 CUTLASS kernels",
}

_KNOWN_GPUS = {(9, 0): "H100/H200", (8, 0): "A100", (8, 9): "L40/Ada", (12, 0): "RTX Blackwell", (11, 0): "Thor"}


@dataclasses.dataclass(frozen=True)
class FlashInferCaps:
    """Plain facts the support check needs; build by hand in tests or with ``probe_flashinfer_caps()``."""

    flashinfer_version: Optional[str]  # installed flashinfer-python version string, None when not importable
    cuda_capability: Optional[tuple]  # (major, minor) of the probed CUDA device, None without CUDA
    device_name: Optional[str] = None  # e.g. "NVIDIA H200"; only used in messages
    import_error: Optional[str] = None  # why ``import flashinfer`` failed, when it did


def parse_flashinfer_version(version: str) -> Version:
    """``"0.7.2.post1"`` -> ``Version``; raises MXFP8InputError naming the string when it does not parse."""
    try:
        return Version(str(version))
    except InvalidVersion as error:
        raise MXFP8InputError(f"flashinfer_version: cannot parse {version!r} as a version ({error})") from error


def _sm_name(capability) -> str:
    return f"SM{capability[0]}{capability[1]}"


def _describe_gpu(capability, device_name: Optional[str]) -> str:
    name = device_name or _KNOWN_GPUS.get(tuple(capability))
    return f"{_sm_name(capability)} ({name})" if name else _sm_name(capability)


def _arch_reason(title: str, capability: tuple[int, int], device_name: Optional[str]) -> str:
    """Why ``title`` cannot run on a GPU of ``capability`` (not SM100/SM103)."""
    note = _ARCH_NOTES.get(capability[0], "only SM100/SM103 have FlashInfer MXFP8 MoE kernels")
    if capability[0] == 10:
        note = "FlashInfer ships MXFP8 MoE kernels only for SM100 and SM103"
    return f"{title} needs an SM100/SM103 Blackwell GPU; found {_describe_gpu(capability, device_name)}: {note}"


@functools.lru_cache(maxsize=1)
def flashinfer_import_problem() -> Optional[str]:
    """Why ``import flashinfer`` fails here although the package is installed (a missing dependency, a broken
    build), or None; imports it once per process. ``backend="auto"`` asks before it picks a FlashInfer backend."""
    try:
        import flashinfer  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure means the kernels cannot run
        return f"flashinfer-python is installed but `import flashinfer` fails ({type(error).__name__}: {error})"
    return None


def flashinfer_support(caps: Any, kernel: str = "routed") -> tuple[bool, str]:
    """Can ``kernel`` ("routed" or "cutlass") run given ``caps``? Returns ``(ok, reason)``; pure, no probing.

    ``caps``: a ``FlashInferCaps`` or any object with ``flashinfer_version`` (str or None) and
    ``cuda_capability`` or ``capability`` ((major, minor) or None) attributes (``kernels.caps.DeviceCaps``
    works), optionally ``device_name`` and ``import_error``.
    """
    if kernel not in _KERNELS:
        raise MXFP8InputError(f"kernel: expected one of {sorted(_KERNELS)}, got {kernel!r}")
    title, minimum, why = _KERNELS[kernel]
    version = getattr(caps, "flashinfer_version", None)
    capability = getattr(caps, "cuda_capability", None)
    if capability is None:  # kernels/caps.py DeviceCaps names the field ``capability``
        capability = getattr(caps, "capability", None)
    if capability is not None:
        capability = tuple(int(part) for part in capability)
    device_name = getattr(caps, "device_name", None)
    import_error = getattr(caps, "import_error", None)
    if capability is not None and capability not in MXFP8_MOE_ARCHS:
        return False, _arch_reason(title, capability, device_name)  # before the package: no FlashInfer version
        # runs these kernels on this GPU, so installing one is no advice
    if version is None:
        detail = f": {import_error}" if import_error else ""
        return False, (
            f"{title} needs the flashinfer-python package (>= {minimum}), which is not importable{detail}; "
            f"install 'flashinfer-python>={minimum},<0.8' plus flashinfer-cubin"
        )
    too_old = _below_floor(version, minimum, title, why)
    if too_old is not None:
        return False, too_old
    if capability is None:
        return False, (
            f"{title} needs an SM100/SM103 Blackwell GPU; no CUDA device is visible (CPU only). "
            f"Use the reference or Triton backends here"
        )
    return True, (
        f"{title}: flashinfer-python {version} on {_describe_gpu(capability, device_name)}"
    )


def flashinfer_activation_support(version: Optional[str], kernel: str, activation: Activation) -> tuple[bool, str]:
    """Does flashinfer-python ``version`` run ``activation`` on ``kernel`` ("routed" / "cutlass")? ``(ok, reason)``;
    pure. Only the version floors of particular activations are checked here (None: nothing to check)."""
    floor = _ACTIVATION_MIN_VERSIONS.get((kernel, activation))
    if floor is None or version is None:
        return True, "no activation-specific version floor"
    minimum, why = floor
    too_old = _below_floor(version, minimum, f"{_KERNELS[kernel][0]} with {activation.value}", why)
    if too_old is not None:
        return False, too_old
    return True, f"{activation.value} on flashinfer-python {version}"


def _below_floor(version: str, minimum: str, title: str, why: str) -> Optional[str]:
    """Why ``title`` cannot run on flashinfer-python ``version`` (unparsable, or older than ``minimum``), or None."""
    try:
        parsed = parse_flashinfer_version(version)
    except MXFP8InputError as error:
        return f"{title}: {error}"
    if parsed < Version(minimum):
        return f"{title} needs flashinfer-python >= {minimum} ({why}); found {version}"
    return None


def probe_flashinfer_caps(device: Optional[Any] = None) -> FlashInferCaps:
    """Ask this machine: the importable flashinfer version and CUDA ``device``'s capability (an index or a cuda
    ``torch.device``; None: the current CUDA device; no CUDA init if CUDA is absent). A CPU ``device`` has none."""
    import torch

    version, import_error = None, None
    try:
        flashinfer = importlib.import_module("flashinfer")
        version = str(getattr(flashinfer, "__version__", None) or "0")
    except Exception as error:  # ImportError, or an import-time failure of a dependency
        import_error = f"{type(error).__name__}: {error}"
    capability, name = None, None
    on_cuda = device is None or isinstance(device, int) or torch.device(device).type == "cuda"
    if on_cuda and torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability(device))
        name = torch.cuda.get_device_name(device)
    return FlashInferCaps(version, capability, name, import_error)


def _device_key(device: Optional[Any]) -> Optional[Any]:
    """``device`` as a cache key: a CUDA device's index (the current one where it has none), "cpu" for a CPU
    device, None for None."""
    import torch

    if device is None or isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _probe_once(device_key: Optional[Any]) -> FlashInferCaps:
    return probe_flashinfer_caps(device_key)


def _require(kernel: str, caps: Optional[Any], function_names: tuple[str, ...], activation: Optional[Activation],
             device: Optional[Any] = None):
    if caps is None:  # launchers call this per forward: probe once per process and device
        caps = _probe_once(_device_key(device))
    ok, reason = flashinfer_support(caps, kernel)
    if ok and activation is not None:
        ok, reason = flashinfer_activation_support(caps.flashinfer_version, kernel, activation)
    if not ok:
        logger.info("FlashInfer %s MXFP8 MoE unavailable: %s", kernel, reason)
        raise BackendUnavailableError(reason)
    fused_moe = importlib.import_module("flashinfer.fused_moe")
    missing = [name for name in function_names if not hasattr(fused_moe, name)]
    if missing:
        raise BackendUnavailableError(
            f"flashinfer-python {caps.flashinfer_version} lacks flashinfer.fused_moe.{', '.join(missing)}"
        )
    if kernel == "routed":
        flashinfer_enum("Fp8QuantizationType", "MxFp8")  # raises when this build predates MxFp8
    return fused_moe


def require_flashinfer_routed_mxfp8(caps: Optional[Any] = None, activation: Optional[Activation] = None,
                                    device: Optional[Any] = None):
    """Return ``flashinfer.fused_moe`` if the routed trtllm-gen MXFP8 MoE can run (``activation`` too, when
    given), else raise BackendUnavailableError.

    ``caps``: plain facts (see ``flashinfer_support``); when None, probed from this machine for ``device`` (the
    tensors' device; None: the current CUDA device), once per process and device.
    """
    return _require("routed", caps, ("trtllm_fp8_block_scale_routed_moe",), activation, device)


def require_flashinfer_cutlass_mxfp8(caps: Optional[Any] = None, activation: Optional[Activation] = None,
                                     device: Optional[Any] = None):
    """Return ``flashinfer.fused_moe`` if CUTLASS MXFP8xMXFP8 MoE can run (``activation`` too, when given), else
    raise BackendUnavailableError. ``caps`` / ``device``: as ``require_flashinfer_routed_mxfp8``."""
    return _require("cutlass", caps, ("cutlass_fused_moe",), activation, device)


_ENUM_MODULES = ("flashinfer.fused_moe", "flashinfer.tllm_enums", "flashinfer.fused_moe.core")


def flashinfer_enum(enum_name: str, member: str):
    """The member ``enum_name.member`` of the installed flashinfer (an enum member, not an int).

    Raises BackendUnavailableError naming the enum, the member and the installed version when absent.
    """
    for module_name in _ENUM_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        enum_type = getattr(module, enum_name, None)
        if enum_type is not None and hasattr(enum_type, member):
            return getattr(enum_type, member)
    version = getattr(importlib.import_module("flashinfer"), "__version__", "?")
    raise BackendUnavailableError(f"flashinfer-python {version} has no {enum_name}.{member}")


_ACTIVATION_NAMES = {
    Activation.SWIGLU: "Swiglu",  # gated: act(gate) * up with silu
    Activation.SQUARED_RELU: "Relu2",  # non-gated relu(x) ** 2
}


def flashinfer_activation_type(activation: Activation):
    """``ActivationType`` member of the installed flashinfer for a package Activation.

    Only SwiGLU and squared ReLU are mapped: Megatron's GeGLU uses tanh-GELU, and FlashInfer's matching
    ``GegluTanh`` is not listed among the MXFP8 activations (only erf ``Geglu`` is), so it is rejected.
    """
    if activation not in _ACTIVATION_NAMES:
        raise MXFP8InputError(
            f"activation: the FlashInfer MXFP8 MoE supports {[a.value for a in _ACTIVATION_NAMES]}, "
            f"got {activation.value!r}"
        )
    return flashinfer_enum("ActivationType", _ACTIVATION_NAMES[activation])


def enum_value(member) -> int:
    """The int value of an enum member, for FlashInfer parameters typed ``int`` (e.g. ``activation_type``)."""
    return int(getattr(member, "value", member))


def first_output(result):
    """FlashInfer MoE returns a Tensor (``do_finalize=True``, deprecated) or a list whose [0] is the output."""
    if isinstance(result, (list, tuple)):
        if not result:
            raise BackendUnavailableError("FlashInfer MoE returned an empty list")
        return result[0]
    return result
