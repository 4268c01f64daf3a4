"""Triton MXFP8 quantizer (CUDA): fused quantize + 128x4 swizzle, writing into existing storage.

Also the refit fast path's device-side check: ``scan_nonfinite_triton`` flags sources holding NaN/Inf and
``quantize_experts_into_triton(..., abort=flags[:1])`` writes nothing while the flag is set, so a whole refit
batch is validated and written in one stream with a single host sync at the end.
Under the Triton interpreter (``TRITON_INTERPRET=1``, CPU tests) CPU tensors are accepted; its fp8 casts do
not round like the GPU's, so only the scale bytes and the write/no-write behaviour are meaningful there.
"""

import array
import contextlib
import functools
import operator
import os
from collections.abc import Sequence
from typing import Optional

import torch

from ..errors import BackendUnavailableError
from ..format.swizzle import padded_scale_shape

_BLOCK_M = 32
_BLOCK_K = 128
_STACK_WARPS = 4  # warps per program of the stacked-source quantize (measured at the copy rate, PERFORMANCE.md 1)
# The table quantize: 32-row tiles per program (one address load for all of them) and warps per program. Run 7
# (H200, bench/refit.py knob sweep): 1 x 4 warps 0.569 ms, 4 x 8 warps 0.582 ms for fc1 + fc2 of one layer; all
# six settings within 3%, so the simplest one.
_TABLE_ROW_TILES = 1
_TABLE_WARPS = 4
# NaN/Inf scan (``nonfinite_scan_kernel``): words per program and iteration, full blocks per program, warps.
# Run 7 sweep: every setting of block 1024-2048 / 4-8 iterations within 2% (stacked 0.30-0.31 ms, 93-95% of copy).
_SCAN_BLOCK = 2048
_SCAN_ITERATIONS = 8
_SCAN_WARPS = 4
# source dtype -> (word dtype, EXPONENT, EXPONENT_ONE, CARRY as a signed int32) of the scan's 32-bit words
_SCAN_WORDS = {
    torch.bfloat16: (torch.int32, 0x7F807F80, 0x00800080, 0x80008000 - (1 << 32)),
    torch.float16: (torch.int32, 0x7C007C00, 0x04000400, 0x80008000 - (1 << 32)),
    torch.float32: (torch.int32, 0x7F800000, 0x00800000, 0x80000000 - (1 << 32)),
}
# ... and of 16-bit words (sources not 4-byte aligned); the kernel widens them to int32 (sign-extended)
_SCAN_HALF_WORDS = {
    torch.bfloat16: (torch.int16, 0x7F80, 0x0080, 0x8000),
    torch.float16: (torch.int16, 0x7C00, 0x0400, 0x8000),
    torch.float32: (torch.int32, 0x7F800000, 0x00800000, 0x80000000 - (1 << 32)),
}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _device_type(device) -> str:
    """``torch.device(device).type`` without building a device object when ``device`` already is one."""
    return device.type if isinstance(device, torch.device) else torch.device(device).type


def triton_quantizer_support(device: torch.device) -> tuple[bool, str]:
    """(ok, reason): the Triton quantizer needs a CUDA tensor and an importable Triton."""
    if _device_type(device) != "cuda" and not _interpreting():
        return False, f"the triton quantizer needs a CUDA device, got {device}"
    try:
        import triton  # noqa: F401
    except ImportError as error:  # pragma: no cover - triton ships with CUDA torch
        return False, f"the triton quantizer needs triton importable ({error})"
    return True, "ok"


def on_device(device: torch.device):
    """Context making ``device`` current for a Triton launch (Triton launches on the CURRENT device: a tensor on
    another GPU fails with "Pointer argument cannot be accessed"); a no-op off CUDA (the interpreter)."""
    return torch.cuda.device(device) if _device_type(device) == "cuda" else contextlib.nullcontext()


def _cdiv(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` (``triton.cdiv`` goes through a JIT wrapper: ~1.5 us a call)."""
    return -(-numerator // denominator)


def _flag_args(abort: Optional[torch.Tensor], nonfinite: Optional[tuple[torch.Tensor, int]],
               placeholder: torch.Tensor) -> tuple:
    """The quantize kernel's ``abort_ptr``, ``nonfinite_ptr`` and ``first_entry``: the given flags, or
    ``placeholder`` (any tensor on the device) for pointers the kernel does not read (without CHECK_ABORT /
    FLAG_NONFINITE)."""
    flags, first = nonfinite if nonfinite is not None else (placeholder, 0)
    return abort if abort is not None else placeholder, flags, first


def quantize_into_triton(
    source: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, *, abort: Optional[torch.Tensor] = None,
    nonfinite: Optional[tuple[torch.Tensor, int]] = None, num_warps: int = _STACK_WARPS,
) -> None:
    """Quantize ``source`` ``[M, K]``/``[E, M, K]`` into ``data`` (e4m3, same shape, contiguous) and
    ``scale`` (swizzled ``[Mp*Cp]``/``[E, Mp*Cp]``, contiguous), in one launch without a host sync.
    ``abort``: optional device int32 ``[1]``; nonzero when the kernel runs = nothing written.
    ``nonfinite``: optional ``(flags, entry)``, flags a zeroed device int32 ``[1 + entries]``: the kernel sets
    ``flags[0]`` and ``flags[1 + entry]`` to 1 when ``source`` holds NaN/Inf (and writes it all the same).
    Inputs are assumed checked. ``num_warps``: a tuning knob."""
    ok, reason = triton_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)

    from ._triton_quant_kernel import mxfp8_quantize_swizzle_kernel

    source = source.to(data.device)
    if source.stride(-1) != 1:
        source = source.contiguous()
    stacked = source if source.dim() == 3 else source.unsqueeze(0)
    experts, rows, cols = stacked.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // 32)
    grid = (_cdiv(rows, _BLOCK_M), _cdiv(cols, _BLOCK_K), experts)
    with on_device(data.device):
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
            *_flag_args(abort, nonfinite, data),
            BLOCK_M=_BLOCK_M,
            BLOCK_K=_BLOCK_K,
            USE_TABLE=False,
            CHECK_ABORT=abort is not None,
            FLAG_NONFINITE=nonfinite is not None,
            num_warps=num_warps,
        )


def _low_bits(pointers: Sequence[int]) -> int:
    """The OR of all ``pointers``: its low bits are zero exactly when every address is aligned to them."""
    return functools.reduce(operator.or_, pointers, 0)


def _aligned(pointers: Sequence[int], row_bytes: int) -> bool:
    """Every address, and every row start ``row_bytes`` apart, is 16-byte aligned (the kernels may vectorize)."""
    return row_bytes % 16 == 0 and _low_bits(pointers) % 16 == 0


# dtype -> array typecode of the same item size, for ``device_table``
_TYPECODES = {torch.int64: "q", torch.int32: "i"}


def device_table(values: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``values`` as a 1-D tensor on ``device``, copied from pinned memory without waiting for the stream.

    Built through ``array.array`` (C integers, a third of ``torch.tensor(list)``'s time for a 128-entry table);
    an int that does not fit the dtype raises OverflowError."""
    typecode = _TYPECODES.get(dtype)
    if typecode is None or not values or array.array(typecode).itemsize != dtype.itemsize:
        host = torch.tensor(values, dtype=dtype)
    else:
        host = torch.frombuffer(array.array(typecode, values), dtype=dtype)  # shares (and keeps) the array
    if _device_type(device) != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def quantize_experts_into_triton(
    sources,
    experts: Sequence[int],
    data: torch.Tensor,
    scale: torch.Tensor,
    *,
    abort: Optional[torch.Tensor] = None,
    nonfinite: Optional[tuple[torch.Tensor, int]] = None,
    pointers: Optional[Sequence[int]] = None,
    row_tiles: int = _TABLE_ROW_TILES,
    num_warps: int = _TABLE_WARPS,
) -> None:
    """Quantize ``n`` separate contiguous ``[M, K]`` sources (one dtype, on ``data``'s device) into expert slots
    ``experts`` (``n`` ints) of the stack ``data`` ``[E, M, K]`` / ``scale`` ``[E, Mp*Cp]``, in ONE kernel
    launch and without a host sync. ``abort``: optional device int32 ``[1]``; while it holds a nonzero value
    when the kernel runs, nothing is written. ``nonfinite``: optional ``(flags, first)``, flags a zeroed device
    int32 ``[1 + entries]``: the kernel sets ``flags[0]`` and ``flags[1 + first + i]`` to 1 when source ``i`` holds
    NaN/Inf (and writes it all the same). ``pointers``: the sources' ``data_ptr()``s (``n`` ints, in order),
    when the caller has them; the kernel reads the sources through them. ``row_tiles`` (32-row tiles per program)
    and ``num_warps`` are tuning knobs. Inputs are assumed checked."""
    ok, reason = triton_quantizer_support(data.device)
    if not ok:
        raise BackendUnavailableError(reason)

    from ._triton_quant_kernel import mxfp8_quantize_swizzle_kernel

    _, rows, cols = data.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // 32)
    if pointers is None:
        pointers = [source.data_ptr() for source in sources]
    elif len(pointers) != len(sources):  # the grid has one program row per source: each must have its address
        raise ValueError(f"quantize_experts_into_triton: {len(pointers)} pointers for {len(sources)} sources")
    # one host-to-device copy: the n source addresses, then the n expert slots (int64 both)
    table = device_table([*pointers, *experts], torch.int64, data.device)
    addresses, experts = table[:len(sources)], table[len(sources):]
    grid = (_cdiv(rows, _BLOCK_M * row_tiles), _cdiv(cols, _BLOCK_K), len(sources))
    with on_device(data.device):
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
            *_flag_args(abort, nonfinite, experts),
            BLOCK_M=_BLOCK_M,
            BLOCK_K=_BLOCK_K,
            USE_TABLE=True,
            CHECK_ABORT=abort is not None,
            FLAG_NONFINITE=nonfinite is not None,
            ALIGNED=_aligned(pointers, cols * sources[0].element_size()),
            ROW_TILES=row_tiles,
            num_warps=num_warps,
        )


def _scan_words(source: torch.Tensor, pointers: Sequence[int]) -> tuple[torch.dtype, int, int, int]:
    """(word dtype, EXPONENT, EXPONENT_ONE, CARRY) of ``nonfinite_scan_kernel`` for sources shaped and typed
    like ``source`` at ``pointers``: int32 words (two 16-bit values or one fp32) when every source starts
    4-byte aligned and is a whole number of words, else int16 words (one 16-bit value each)."""
    if source.dtype not in _SCAN_WORDS:
        raise TypeError(f"scan_nonfinite_triton: sources must be bf16/fp16/fp32, got {source.dtype}")
    if (source.numel() * source.element_size()) % 4 == 0 and _low_bits(pointers) % 4 == 0:
        return _SCAN_WORDS[source.dtype]
    return _SCAN_HALF_WORDS[source.dtype]


def scan_grid(words: int, entries: int, *, block: int = _SCAN_BLOCK, iterations: int = _SCAN_ITERATIONS):
    """Grid of ``nonfinite_scan_kernel`` for ``entries`` sources of ``words`` words: (programs, entries)."""
    return (max(1, -(-(words // block) // iterations)), entries)


def scan_nonfinite_triton(sources, flags: torch.Tensor, first_entry: int = 0, *,
                          pointers: Optional[Sequence[int]] = None,
                          block: int = _SCAN_BLOCK, iterations: int = _SCAN_ITERATIONS,
                          num_warps: int = _SCAN_WARPS) -> None:
    """Flag the sources holding NaN/Inf, on the device, in ONE launch and without a host sync.

    ``sources``: ``n`` contiguous tensors of one dtype (bf16/fp16/fp32) and one element count, on ``flags``'
    device. ``flags``: int32 ``[1 + entries]``, zeroed by the caller; this sets ``flags[0]`` and
    ``flags[1 + first_entry + i]`` to 1 when source ``i`` holds a non-finite value, and stores nothing else.
    One source is read through its own pointer, several through a device table of addresses. ``block`` (words
    per program and iteration, a power of two), ``iterations`` (full blocks per program) and ``num_warps`` are
    tuning knobs (the defaults are the tuned ones). ``pointers``: the sources' ``data_ptr()``s, when the caller has
    them.
    """
    ok, reason = triton_quantizer_support(flags.device)
    if not ok:
        raise BackendUnavailableError(reason)
    if not sources:
        return
    from ._triton_quant_kernel import nonfinite_scan_kernel

    if pointers is None:
        pointers = [source.data_ptr() for source in sources]
    word, exponent, exponent_one, carry = _scan_words(sources[0], pointers)
    words = sources[0].numel() * sources[0].element_size() // word.itemsize
    if len(sources) == 1:
        source = sources[0].reshape(-1).view(word)
        table, aligned = source, False  # no table: the argument's own alignment is specialized on
    else:
        source = flags if word == torch.int32 else flags.view(torch.int16)  # gives the word type only
        table, aligned = device_table(pointers, torch.int64, flags.device), _aligned(pointers, 16)
    with on_device(flags.device):
        nonfinite_scan_kernel[scan_grid(words, len(sources), block=block, iterations=iterations)](
            source, table, flags, words, first_entry, iterations, EXPONENT=exponent, EXPONENT_ONE=exponent_one,
            CARRY=carry, BLOCK=block, USE_TABLE=len(sources) > 1, ALIGNED=aligned, num_warps=num_warps,
        )
