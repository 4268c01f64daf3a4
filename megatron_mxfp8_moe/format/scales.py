"""The E8M0 scale rule of Megatron-Core's MXFP8 quantizer (Mishra et al., arXiv 2506.08027).

The dequantization scale of a 32-value block is ``amax / 448`` rounded *up* to a power of two,
computed on float32 bits as ``(bits + 0x007FFFFF) & 0x7F800000``. The stored byte is the biased
exponent of that power of two; an all-zero block gets byte 0 and a quantization multiplier of 0.
"""

import torch

from .constants import BLOCK_SIZE, E4M3_MAX


def scale_bits_from_amax(amax: torch.Tensor) -> torch.Tensor:
    """float32 amax ``[...]`` -> int32 float32-bit pattern of the rounded-up dequantization scale."""
    dequant = (amax.to(torch.float32) / E4M3_MAX).view(torch.int32)
    return (dequant + 0x007FFFFF) & 0x7F800000


def scale_bytes_from_amax(amax: torch.Tensor) -> torch.Tensor:
    """float32 amax ``[...]`` -> uint8 E8M0 bytes ``[...]``."""
    return (scale_bits_from_amax(amax) >> 23).to(torch.uint8)


def quant_multiplier_from_amax(amax: torch.Tensor) -> torch.Tensor:
    """float32 amax ``[...]`` -> float32 multiplier applied before the e4m3 cast (0 for zero blocks)."""
    dequant = scale_bits_from_amax(amax).view(torch.float32)
    return torch.where(dequant == 0, torch.zeros_like(dequant), 1.0 / dequant)


def dequant_multiplier_from_bytes(scale_bytes: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 bytes ``[...]`` -> float32 ``2 ** (byte - 127)`` (byte 0 gives 2**-127)."""
    return torch.exp2(scale_bytes.to(torch.float32) - 127.0)


def dequantize_from_bytes(data: torch.Tensor, scale_bytes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """fp8 e4m3 ``[..., M, K]`` + uint8 E8M0 logical scales ``[..., M, K // 32]`` -> ``dtype`` ``[..., M, K]``
    (computed in float64 for float64, else float32: exact there)."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    multiplier = dequant_multiplier_from_bytes(scale_bytes).to(compute).repeat_interleave(BLOCK_SIZE, dim=-1)
    return (data.to(compute) * multiplier).to(dtype)
