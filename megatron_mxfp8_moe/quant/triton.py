"""Triton MXFP8 quantizer (CUDA): fused quantize + 128x4 swizzle, writing into existing storage."""

import torch

from ..errors import BackendUnavailableError
from ..format.swizzle import padded_scale_shape

_BLOCK_M = 32
_BLOCK_K = 128


def triton_quantizer_support(device: torch.device) -> tuple[bool, str]:
    """(ok, reason): the Triton quantizer needs a CUDA tensor and an importable Triton."""
    if torch.device(device).type != "cuda":
        return False, f"the triton quantizer needs a CUDA device, got {device}"
    try:
        import triton  # noqa: F401
    except ImportError as error:  # pragma: no cover - triton ships with CUDA torch
        return False, f"the triton quantizer needs triton importable ({error})"
    return True, "ok"


def quantize_into_triton(source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> None:
    """Quantize ``source`` ``[M, K]``/``[E, M, K]`` into ``data`` (e4m3, same shape, contiguous) and
    ``scale`` (swizzled ``[Mp*Cp]``/``[E, Mp*Cp]``, contiguous). Inputs are assumed checked."""
    ok, reason = triton_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)
    import triton

    from ._triton_quant_kernel import mxfp8_quantize_swizzle_kernel

    source = source.to(data.device)
    if source.stride(-1) != 1:
        source = source.contiguous()
    stacked = source if source.dim() == 3 else source.unsqueeze(0)
    experts, rows, cols = stacked.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // 32)
    grid = (triton.cdiv(rows, _BLOCK_M), triton.cdiv(cols, _BLOCK_K), experts)
    mxfp8_quantize_swizzle_kernel[grid](
        stacked,
        stacked,
        stacked,
        data,
        scale.view(torch.uint8),
        rows,
        cols,
        stacked.stride(0),
        stacked.stride(1),
        padded_rows * padded_cols,
        padded_cols // 4,
        BLOCK_M=_BLOCK_M,
        BLOCK_K=_BLOCK_K,
        USE_TABLE=False,
    )


def quantize_experts_into_triton(
    sources, experts: torch.Tensor, data: torch.Tensor, scale: torch.Tensor
) -> None:
    """Quantize ``n`` separate contiguous ``[M, K]`` sources (one dtype, on ``data``'s device) into expert slots
    ``experts`` (int32 ``[n]`` on the device) of the stack ``data`` ``[E, M, K]`` / ``scale`` ``[E, Mp*Cp]``,
    in ONE kernel launch. Inputs are assumed checked."""
    ok, reason = triton_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)
    import triton

    from ._triton_quant_kernel import mxfp8_quantize_swizzle_kernel

    _, rows, cols = data.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // 32)
    addresses = torch.tensor([source.data_ptr() for source in sources], dtype=torch.int64).to(
        data.device, non_blocking=True
    )
    grid = (triton.cdiv(rows, _BLOCK_M), triton.cdiv(cols, _BLOCK_K), len(sources))
    mxfp8_quantize_swizzle_kernel[grid](
        sources[0],
        addresses,
        experts,
        data,
        scale.view(torch.uint8),
        rows,
        cols,
        0,
        cols,
        padded_rows * padded_cols,
        padded_cols // 4,
        BLOCK_M=_BLOCK_M,
        BLOCK_K=_BLOCK_K,
        USE_TABLE=True,
    )

