"""Triton MXFP8 quantizer (CUDA): fused quantize + 128x4 swizzle, writing into existing storage.

Also the refit fast path's device-side check: ``scan_nonfinite_triton`` flags sources holding NaN/Inf and
``quantize_experts_into_triton(..., abort=flags[:1])`` writes nothing while the flag is set, so a whole refit
batch is validated and written in one stream with a single host sync at the end.
Under the Triton interpreter (``TRITON_INTERPRET=1``, CPU tests) CPU tensors are accepted; its fp8 casts do
not round like the GPU's, so only the scale bytes and the write/no-write behaviour are meaningful there.
"""

import os
from collections.abc import Sequence
from typing import Optional

import torch

from ..errors import BackendUnavailableError
from ..format.swizzle import padded_scale_shape

_BLOCK_M = 32
_BLOCK_K = 128
_SCAN_BLOCK = 8192  # elements per program of the NaN/Inf scan


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_quantizer_support(device: torch.device) -> tuple[bool, str]:
    """(ok, reason): the Triton quantizer needs a CUDA tensor and an importable Triton."""
    if torch.device(device).type != "cuda" and not _interpreting():
        return False, f"the triton quantizer needs a CUDA device, got {device}"
    try:
        import triton  # noqa: F401
    except ImportError as error:  # pragma: no cover - triton ships with CUDA torch
        return False, f"the triton quantizer needs triton importable ({error})"
    return True, "ok"


def quantize_into_triton(
    source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, *, abort: Optional[torch.Tensor] = None
) -> None:
    """Quantize ``source`` ``[M, K]``/``[E, M, K]`` into ``data`` (e4m3, same shape, contiguous) and
    ``scale`` (swizzled ``[Mp*Cp]``/``[E, Mp*Cp]``, contiguous), in one launch without a host sync.
    ``abort``: optional device int32 ``[1]``; nonzero when the kernel runs = nothing written. Inputs are
    assumed checked."""
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
        abort if abort is not None else data,  # abort_ptr: unused without CHECK_ABORT
        BLOCK_M=_BLOCK_M,
        BLOCK_K=_BLOCK_K,
        USE_TABLE=False,
        CHECK_ABORT=abort is not None,
    )


def _aligned(pointers: Sequence[int], row_bytes: int) -> bool:
    """Every address, and every row start ``row_bytes`` apart, is 16-byte aligned (the kernels may vectorize)."""
    return row_bytes % 16 == 0 and all(pointer % 16 == 0 for pointer in pointers)


def device_table(values: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``values`` as a 1-D tensor on ``device``, copied from pinned memory without waiting for the stream."""
    host = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def quantize_experts_into_triton(
    sources,
    experts: Sequence[int],
    data: torch.Tensor,
    scale: torch.Tensor,
    *,
    abort: Optional[torch.Tensor] = None,
) -> None:
    """Quantize ``n`` separate contiguous ``[M, K]`` sources (one dtype, on ``data``'s device) into expert slots
    ``experts`` (``n`` ints) of the stack ``data`` ``[E, M, K]`` / ``scale`` ``[E, Mp*Cp]``, in ONE kernel
    launch and without a host sync. ``abort``: optional device int32 ``[1]``; while it holds a nonzero value
    when the kernel runs, nothing is written. Inputs are assumed checked."""
    ok, reason = triton_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)
    import triton

    from ._triton_quant_kernel import mxfp8_quantize_swizzle_kernel

    _, rows, cols = data.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // 32)
    pointers = [source.data_ptr() for source in sources]
    addresses = device_table(pointers, torch.int64, data.device)
    experts = device_table(list(experts), torch.int32, data.device)
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
        abort if abort is not None else experts,
        BLOCK_M=_BLOCK_M,
        BLOCK_K=_BLOCK_K,
        USE_TABLE=True,
        CHECK_ABORT=abort is not None,
        ALIGNED=_aligned(pointers, cols * sources[0].element_size()),
    )


def scan_nonfinite_triton(sources, flags: torch.Tensor, first_entry: int = 0) -> None:
    """Flag the sources holding NaN/Inf, on the device, in ONE launch and without a host sync.

    ``sources``: ``n`` contiguous tensors of one dtype (bf16/fp16/fp32) and one element count, on ``flags``'
    device. ``flags``: int32 ``[1 + entries]``, zeroed by the caller; this sets ``flags[0]`` and
    ``flags[1 + first_entry + i]`` to 1 when source ``i`` holds a non-finite value, and stores nothing else.
    """
    ok, reason = triton_quantizer_support(flags.device)
    if not ok:
        raise BackendUnavailableError(reason)
    if not sources:
        return
    import triton

    from ._triton_quant_kernel import nonfinite_scan_kernel

    numel = sources[0].numel()
    pointers = [source.data_ptr() for source in sources]
    addresses = device_table(pointers, torch.int64, flags.device)
    grid = (triton.cdiv(numel, _SCAN_BLOCK), len(sources))
    nonfinite_scan_kernel[grid](sources[0], addresses, flags, numel, first_entry, BLOCK=_SCAN_BLOCK,
                                ALIGNED=_aligned(pointers, 16), num_warps=8)

