"""Pure-torch MXFP8 quantizer (any device, the CPU included): the oracle for the fast quantizers.

Rule (Megatron-Core's): per 32-value block along K, dequantization scale = amax / 448 rounded up to a
power of two; values are multiplied by its reciprocal, clamped to +-448 and cast to e4m3 (round to nearest
even); scales go to the cuBLAS 128x4 swizzled layout.
"""

import torch

from ..format.constants import BLOCK_SIZE, DATA_DTYPE, E4M3_MAX
from ..format.scales import quant_multiplier_from_amax, scale_bytes_from_amax
from ..format.swizzle import swizzle_scales


def quantize_logical_reference(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., M, K]`` bf16/fp16/fp32 -> (fp8 e4m3 data ``[..., M, K]``, uint8 logical scales ``[..., M, K // 32]``)."""
    blocks = source.to(torch.float32).unflatten(-1, (-1, BLOCK_SIZE))  # [..., M, K/32, 32]
    amax = blocks.abs().amax(dim=-1)  # [..., M, K/32]
    multiplier = quant_multiplier_from_amax(amax)
    scaled = (blocks * multiplier.unsqueeze(-1)).clamp_(-E4M3_MAX, E4M3_MAX)
    data = scaled.flatten(-2).to(DATA_DTYPE)
    return data, scale_bytes_from_amax(amax)


def quantize_into_reference(source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> None:
    """Quantize ``source`` ``[M, K]``/``[E, M, K]`` into existing ``data`` (same shape, e4m3) and
    ``scale`` (swizzled bytes ``[Mp*Cp]``/``[E, Mp*Cp]``, any 1-byte dtype). Inputs are assumed checked."""
    new_data, logical = quantize_logical_reference(source.to(data.device))
    data.copy_(new_data)
    scale.view(torch.uint8).copy_(swizzle_scales(logical))
