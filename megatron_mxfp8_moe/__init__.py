"""megatron_mxfp8_moe: MXFP8 Mixture-of-Experts layers for Megatron-Core inference.

canonical experts (MXFP8Tensor) -> prepared kernel stack -> route/pack -> kernel -> combine;
refit: validate -> quantize_ -> write hooks repack the stack in place.
"""

from .errors import BackendUnavailableError, MXFP8Error, MXFP8InputError, RefitError, ReleasedWeightError
from .format.swizzle import swizzle_scales, unswizzle_scales
from .tensor import MXFP8Tensor, quantize_mxfp8

__all__ = [
    "BackendUnavailableError",
    "MXFP8Error",
    "MXFP8InputError",
    "MXFP8Tensor",
    "RefitError",
    "ReleasedWeightError",
    "quantize_mxfp8",
    "swizzle_scales",
    "unswizzle_scales",
]

__version__ = "0.1.0"
