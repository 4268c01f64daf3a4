"""FlashInfer MXFP8 MoE backends (routed trtllm-gen and CUTLASS) fed from canonical experts without re-quantizing.

canonical experts -> prepare_{routed,cutlass}_mxfp8_weights -> route/pack -> kernel -> combine;
refit: validate -> quantize_ -> write hooks (attach_routed_mxfp8_writeback) repack the stack in place.
Re-exports only.
"""

from .kernels.flashinfer_compat import (
    require_flashinfer_cutlass_mxfp8,
    require_flashinfer_routed_mxfp8,
)
from .kernels.flashinfer_cutlass import flashinfer_cutlass_mxfp8_moe
from .kernels.flashinfer_routed import (
    flashinfer_routed_mxfp8_moe,
    flashinfer_routed_mxfp8_moe_prequantized,
    quantize_routed_mxfp8_input,
    select_routed_mxfp8_active_rows,
)
from .layouts.cutlass import (
    FlashInferCutlassMXFP8Weight,
    attach_cutlass_mxfp8_writeback,
    prepare_cutlass_mxfp8_weights,
    unpack_cutlass_mxfp8_weights,
)
from .layouts.routed import (
    FlashInferRoutedMXFP8Weight,
    attach_routed_mxfp8_writeback,
    prepare_routed_mxfp8_weights,
    unpack_routed_mxfp8_weights,
)
from .routing.pack import pack_routed_mxfp8_routing, unpack_routed_mxfp8_routing

__all__ = [
    "FlashInferCutlassMXFP8Weight",
    "FlashInferRoutedMXFP8Weight",
    "attach_cutlass_mxfp8_writeback",
    "attach_routed_mxfp8_writeback",
    "flashinfer_cutlass_mxfp8_moe",
    "flashinfer_routed_mxfp8_moe",
    "flashinfer_routed_mxfp8_moe_prequantized",
    "pack_routed_mxfp8_routing",
    "prepare_cutlass_mxfp8_weights",
    "prepare_routed_mxfp8_weights",
    "quantize_routed_mxfp8_input",
    "require_flashinfer_cutlass_mxfp8",
    "require_flashinfer_routed_mxfp8",
    "select_routed_mxfp8_active_rows",
    "unpack_cutlass_mxfp8_weights",
    "unpack_routed_mxfp8_routing",
    "unpack_routed_mxfp8_weights",
]
