"""FlashInfer's MXFP8 quantizer (``flashinfer.mxfp8_quantize``, 128x4 swizzled scales), where installed."""

from typing import Optional

import torch

from ..errors import BackendUnavailableError, MXFP8InputError

FLASHINFER_SOURCE_DTYPES = (torch.bfloat16, torch.float16)


def flashinfer_quantizer_support(device: torch.device) -> tuple[bool, str]:
    """(ok, reason): needs flashinfer-python importable and a CUDA device."""
    if torch.device(device).type != "cuda":
        return False, f"the flashinfer quantizer needs a CUDA device, got {device}"
    try:
        import flashinfer  # noqa: F401
    except ImportError as error:
        return False, f"the flashinfer quantizer needs flashinfer-python installed ({error})"
    if not hasattr(flashinfer, "mxfp8_quantize"):
        return False, "the flashinfer quantizer needs flashinfer-python >= 0.6.4 (mxfp8_quantize)"
    return True, "ok"


def flashinfer_source_dtype_problem(dtype: torch.dtype) -> Optional[str]:
    """Why a ``dtype`` source cannot go to FlashInfer's quantizer (its "cuda" kernel takes no fp32, and a cast
    would change the bytes), or None for bf16 / fp16."""
    if dtype in FLASHINFER_SOURCE_DTYPES:
        return None
    return f"the flashinfer quantizer takes bf16/fp16 sources, got {dtype}; use the triton or reference quantizer"


def quantize_into_flashinfer(source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> None:
    """Quantize ``[M, K]``/``[E, M, K]`` with FlashInfer and copy the bytes into ``data`` / ``scale``."""
    ok, reason = flashinfer_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)
    import flashinfer

    problem = flashinfer_source_dtype_problem(source.dtype)
    if problem:
        raise MXFP8InputError(f"source: {problem}")
    stacked_source = source.to(device=data.device)
    stacked_source = stacked_source if source.dim() == 3 else stacked_source.unsqueeze(0)
    stacked_data = data if data.dim() == 3 else data.unsqueeze(0)
    stacked_scale = scale.view(torch.uint8)
    stacked_scale = stacked_scale if stacked_scale.dim() == 2 else stacked_scale.unsqueeze(0)
    for expert in range(stacked_source.shape[0]):
        expert_data, expert_scale = flashinfer.mxfp8_quantize(stacked_source[expert].contiguous(), True)
        stacked_data[expert].copy_(expert_data.view(torch.float8_e4m3fn))
        stacked_scale[expert].copy_(expert_scale.view(torch.uint8).reshape(-1))
