"""megatron_mxfp8_moe: MXFP8 Mixture-of-Experts layers for Megatron-Core inference.

canonical experts (MXFP8Tensor) -> prepared kernel stack -> route/pack -> kernel -> combine;
refit: validate -> quantize_ -> write hooks repack the stack in place.
"""

from .activations import Activation
from .errors import BackendUnavailableError, MXFP8Error, MXFP8InputError, RefitError, ReleasedWeightError
from .experts import ExpertSet
from .format.swizzle import swizzle_scales, unswizzle_scales
from .kernels.base import Backend, Support
from .kernels.caps import DeviceCaps, detect_caps
from .kernels.reference import moe_reference
from .kernels.select import select_backend
from .layer import MXFP8ExpertLayer
from .megatron import (
    MXFP8Experts,
    attach_inference_context,
    bounded_decode_rows,
    detach_inference_context,
    get_mxfp8_moe_layer_spec,
    swap_experts_to_mxfp8_,
)
from .names import ExpertWeightName, parse_expert_weight_name
from .refit import RefitPlan, RefitReport, refit_experts, validate_refit
from .routing.rows import RowPolicy, select_active_rows
from .tensor import MXFP8Tensor, quantize_mxfp8

__all__ = [
    "Activation",
    "Backend",
    "BackendUnavailableError",
    "DeviceCaps",
    "ExpertSet",
    "ExpertWeightName",
    "MXFP8Error",
    "MXFP8ExpertLayer",
    "MXFP8Experts",
    "MXFP8InputError",
    "MXFP8Tensor",
    "RefitError",
    "RefitPlan",
    "RefitReport",
    "ReleasedWeightError",
    "RowPolicy",
    "Support",
    "attach_inference_context",
    "bounded_decode_rows",
    "detach_inference_context",
    "detect_caps",
    "get_mxfp8_moe_layer_spec",
    "moe_reference",
    "parse_expert_weight_name",
    "quantize_mxfp8",
    "refit_experts",
    "select_active_rows",
    "select_backend",
    "swap_experts_to_mxfp8_",
    "swizzle_scales",
    "unswizzle_scales",
    "validate_refit",
]

__version__ = "0.1.0"
