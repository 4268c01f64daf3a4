"""The Megatron-Core edge: MXFP8Experts, its layer spec and in-place swap, and decode-only row knowledge."""

from .context import (
    DecodeRows,
    attach_inference_context,
    bounded_decode_rows,
    current_decode_rows,
    detach_inference_context,
    use_bounded_rows,
)
from .experts import MXFP8Experts, activation_from_config
from .spec import get_mxfp8_moe_layer_spec, swap_experts_to_mxfp8_

__all__ = [
    "DecodeRows",
    "MXFP8Experts",
    "activation_from_config",
    "attach_inference_context",
    "bounded_decode_rows",
    "current_decode_rows",
    "detach_inference_context",
    "get_mxfp8_moe_layer_spec",
    "swap_experts_to_mxfp8_",
    "use_bounded_rows",
]
