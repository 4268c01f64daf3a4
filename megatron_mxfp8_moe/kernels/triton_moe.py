"""Hopper (SM90) weight-only MXFP8 fused MoE in Triton: the call (``triton_mxfp8_moe``) and its input checks.

x [T, H] bf16 --route (on device)--> FC1 (gather rows, dequant fp8 weights in registers, activation)
  --> inter [padded positions, I] bf16 --> FC2 --> per-(token, k) rows --> combine (probs, fixed order) --> out

Weights: the canonical ``MXFP8Tensor`` stacks themselves (fp8 e4m3 ``[E, M, K]`` and the cuBLAS 128x4-swizzled
E8M0 bytes ``[E, Mp * Cp]``, read in place: no repacked copy, no write hook, so a refit writes straight into what
the kernel reads), bf16 activations, fp32 accumulation. No host
synchronization and no data-dependent shapes: the call captures in a CUDA graph and replays correctly with
new routing and a new ``valid_tokens``. The token count ``rows`` picks the tile configuration on the host,
which is fixed per graph. Every output element is one MMA column (on the GEMV small-T path: fp32 block sums in a
fixed order) plus a top-k sum in fixed order, and the route places each expert's pairs in pair order (no
atomics), so the same inputs give the same bits, with tail tiles (``TritonMoEConfig.tail``) too: which of an
expert's pairs run on the narrower tail tile (its last ones) is fixed by the routing. Independent launches may run
on a second stream (``TritonMoEConfig.side_stream``): event waits only, same launches, same bits.

The host side is split by job: ``triton_config`` (the tile configuration), ``triton_tiles`` (the named tiles),
``triton_policy`` (``choose_config``), ``triton_route`` (the on-device route and its reference), ``triton_launch``
(the kernel launches) and ``triton_support`` (which GPU and Triton it needs). This module re-exports their public
names.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from ..activations import parse_activation
from ..errors import BackendUnavailableError, MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE
from ..format.swizzle import padded_scale_shape
from ..quant.triton import on_device
from ..tensor import MXFP8Tensor
from .triton_config import _DEQUANT_CODE, _WORD_DEQUANT, TritonMoEConfig, ws_shared_bytes
from .triton_launch import _launch, kernel_path, planes_of, split_rows_buffers, split_rows_reference
from .triton_policy import GLUON_ENV, choose_config, gluon_policy
from .triton_route import route_launch_shape, route_layout, route_reference, routing_capacity
from .triton_support import check_triton_moe_available, triton_moe_support, untested_triton_note, warn_untested_triton
from .triton_tiles import TILES, map_launch_tiles, replace_launch_tiles, same_bits_as_triton_form, triton_form

logger = logging.getLogger(__name__)


# -- weights ---------------------------------------------------------------------------------------


def _check_stack(name: str, weight) -> None:
    """A canonical ``MXFP8Tensor`` stack ``[E, M, K]`` with its storage (K contiguous, scales ``[E, Mp * Cp]``)."""
    if not isinstance(weight, MXFP8Tensor):
        raise MXFP8InputError(f"{name}: expected a canonical MXFP8Tensor stack [E, M, K], got {type(weight).__name__}")
    if not weight.is_stacked:
        raise MXFP8InputError(f"{name}: expected a stack [E, M, K], got shape {tuple(weight.shape)}")
    if weight.is_released:
        raise MXFP8InputError(f"{name}: the canonical storage was released; the Triton kernel reads it in place")
    experts, rows, cols = weight.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // BLOCK_SIZE)
    scale = weight.scale_bytes()
    if tuple(scale.shape) != (experts, padded_rows * padded_cols) or scale.stride(1) != 1:
        raise MXFP8InputError(
            f"{name}: expected swizzled scales [E={experts}, {padded_rows * padded_cols}] with unit stride, "
            f"got {tuple(scale.shape)} strides {scale.stride()}"
        )


def _check_inputs(x, probs, routing_map, fc1, fc2, activation, rows, valid_tokens, out):
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise MXFP8InputError(f"x: expected bf16 [T, H], got {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise MXFP8InputError("x: the hidden dimension must be contiguous (stride 1)")
    tokens, hidden = x.shape
    if routing_map.dim() != 2 or routing_map.shape[0] != tokens or routing_map.dtype not in (torch.int32, torch.int64):
        raise MXFP8InputError(
            f"routing_map: expected int32/int64 [T={tokens}, topk], got {routing_map.dtype} {tuple(routing_map.shape)}"
        )
    if probs.shape != routing_map.shape or probs.dtype != torch.float32 or probs.stride(1) != 1:
        raise MXFP8InputError(
            f"probs: expected fp32 {tuple(routing_map.shape)} with unit column stride, got {probs.dtype} "
            f"{tuple(probs.shape)}"
        )
    if not isinstance(valid_tokens, torch.Tensor) or valid_tokens.numel() != 1 or valid_tokens.dtype != torch.int32:
        raise MXFP8InputError("valid_tokens: expected a device int32 tensor [1]")
    for name, tensor in (("probs", probs), ("routing_map", routing_map), ("valid_tokens", valid_tokens)):
        if tensor.device != x.device:
            raise MXFP8InputError(f"{name}: on {tensor.device}, x is on {x.device}")
    _check_stack("fc1_stack", fc1)
    _check_stack("fc2_stack", fc2)
    experts, n1, h1 = fc1.data.shape
    experts2, h2, inner = fc2.data.shape
    if fc1.data.dtype != DATA_DTYPE or fc2.data.dtype != DATA_DTYPE:
        raise MXFP8InputError("fc1_stack/fc2_stack: data must be float8_e4m3fn")
    if experts2 != experts:
        raise MXFP8InputError(f"fc2_stack: {experts2} experts, fc1_stack has {experts}")
    if h1 != hidden or h2 != hidden:
        raise MXFP8InputError(f"fc1_stack [E, N1, {h1}] / fc2_stack [E, {h2}, I] do not match hidden {hidden}")
    expected_n1 = 2 * inner if activation.gated else inner
    if n1 != expected_n1:
        raise MXFP8InputError(
            f"fc1_stack: {n1} rows, but {activation.value} with fc2 input {inner} needs {expected_n1}"
            + (" ([gate; up])" if activation.gated else "")
        )
    if hidden % BLOCK_SIZE or inner % BLOCK_SIZE:
        raise MXFP8InputError(f"hidden {hidden} and intermediate {inner} must be multiples of {BLOCK_SIZE}")
    for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
        if weight.data.device != x.device or weight.scale.device != x.device:
            raise MXFP8InputError(f"{name}: on {weight.data.device}, x is on {x.device}")
        if weight.data.stride(2) != 1:
            raise MXFP8InputError(f"{name}: K must be contiguous in data")
    if not 0 <= rows <= tokens:
        raise MXFP8InputError(f"rows: {rows} must be in [0, T={tokens}]")
    if out is not None:
        if out.dtype not in (torch.bfloat16, torch.float32) or out.dim() != 2 or out.shape[1] != hidden:
            raise MXFP8InputError(f"out: expected bf16/fp32 [>= {rows}, {hidden}], got {out.dtype} {tuple(out.shape)}")
        if out.shape[0] < rows or out.stride(1) != 1 or out.device != x.device:
            raise MXFP8InputError(f"out: needs >= {rows} rows, unit column stride and device {x.device}")
    return experts, hidden, inner


def triton_mxfp8_moe(
    x: torch.Tensor,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    fc1_stack: MXFP8Tensor,
    fc2_stack: MXFP8Tensor,
    *,
    activation="swiglu",
    local_expert_offset: int = 0,
    valid_tokens: torch.Tensor,
    rows: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
    config: Optional[TritonMoEConfig] = None,
    route_experts: Optional[int] = None,
) -> torch.Tensor:
    """Weight-only MXFP8 MoE on Hopper: ``out[t] = sum_k probs[t, k] * fc2[e] @ act(fc1[e] @ x[t])``.

    Args:
        x: bf16 ``[T, H]``; only ``x[:rows]`` is read.
        probs: fp32 ``[T, topk]``.
        routing_map: int32/int64 ``[T, topk]`` GLOBAL expert ids; ids outside
            ``[local_expert_offset, local_expert_offset + E)`` (and -1) contribute nothing.
        fc1_stack: ``[E, N1, H]`` (``N1 = 2I``, ``[gate; up]``, for gated activations): a canonical
            ``MXFP8Tensor`` stack, read in place (fp8 bytes and 128x4-swizzled scales; nothing is prepared).
        fc2_stack: ``[E, H, I]``, the same.
        activation: ``Activation`` or its name: swiglu, geglu (gated), squared_relu, relu, silu.
        valid_tokens: device int32 ``[1]``; rows ``>= valid_tokens`` give zeros.
        rows: processed prefix (default ``T``); ``out[:rows]`` is written, nothing else.
        out: optional bf16/fp32 ``[>= rows, H]`` destination; default a new bf16 ``[rows, H]``.
        config: tile override (benchmarks); default ``choose_config(rows, ...)``.
        route_experts: the experts the map spreads its ``rows * topk`` pairs over (default: the local E): the
            global count when every EP rank's tokens arrive with global ids (the inference dispatcher). The tile
            choice expects ``rows * topk / route_experts`` pairs per local expert.

    Returns ``out`` (or the new bf16 tensor). Graph-safe: no host sync, shapes fixed by ``rows``.
    """
    activation = parse_activation(activation)
    fc1, fc2 = fc1_stack, fc2_stack
    rows = x.shape[0] if rows is None else int(rows)
    experts, hidden, inner = _check_inputs(x, probs, routing_map, fc1, fc2, activation, rows, valid_tokens, out)
    if route_experts is not None and route_experts < experts:
        raise MXFP8InputError(f"route_experts: {route_experts} is below the {experts} local experts")
    topk = routing_map.shape[1]
    if out is None:
        out = torch.empty(rows, hidden, dtype=torch.bfloat16, device=x.device)
    if rows == 0:
        return out
    cfg = config or choose_config(rows, hidden, inner, gated=activation.gated, topk=topk,
                                  experts=route_experts or experts)
    _check_word_alignment(cfg, fc1, fc2)
    problem = next(filter(None, (_gluon_problem(tile, fc1, fc2, x.device) for tile in cfg.launch_tiles)), None)
    if problem is None and any(tile.fc1_ws for tile in cfg.launch_tiles):  # x and the whole inter buffer
        from ._gluon_ws_kernel import gathered_rows_problem

        sorted_len = route_layout(rows, topk, experts, cfg.block_t, cfg.tail.block_t if cfg.tail else 0)[2]
        reason = gathered_rows_problem(x, sorted_len * inner)  # inter: [sorted_len, I] (no planes with fc1_ws)
        problem = MXFP8InputError(f"fc1_ws: {reason}") if reason else None
    if problem is not None:
        if config is not None:
            raise problem
        logger.debug("Gluon tiles not used (%s): the Triton tiles run", problem)
        cfg = choose_config(rows, hidden, inner, gated=activation.gated, topk=topk, experts=route_experts or experts,
                            gluon=False)
        _check_word_alignment(cfg, fc1, fc2)  # the fallback's tiles may read other words than the Gluon ones
    with on_device(x.device):  # Triton launches on the current device
        _launch(cfg, x, probs, routing_map, fc1, fc2, activation, local_expert_offset, valid_tokens, rows, out,
                experts, hidden, inner, topk)
    return out


def _check_word_alignment(cfg: TritonMoEConfig, fc1: MXFP8Tensor, fc2: MXFP8Tensor) -> None:
    """Raise MXFP8InputError, before any launch, where ``cfg``'s tiles read the stacks as 32-bit words ("sx_auto":
    the scale rows; "sx4" and the other word dequants: the fp8 rows) from addresses that are not 4-byte aligned."""
    codes = {tile.dequant_code for tile in cfg.launch_tiles}
    if _DEQUANT_CODE["sx_auto"] in codes:
        for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
            if weight.scale_bytes().data_ptr() % 4:  # sx_auto tests the scale rows as 32-bit words
                raise MXFP8InputError(f"{name}: the swizzled scales must start at a 4-byte aligned address for the "
                                      "'sx_auto' tiles; got a storage offset that is not (copy the stack)")
    if not codes.isdisjoint(_WORD_DEQUANT):
        for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
            data = weight.data
            if data.data_ptr() % 4 or data.stride(0) % 4 or data.stride(1) % 4:  # rows read as uint32 words
                raise MXFP8InputError(f"{name}: the 'sx4' tiles read weight rows as 32-bit words; the fp8 rows must "
                                      f"start at 4-byte aligned addresses (strides {tuple(data.stride())}, address "
                                      f"{data.data_ptr()}; copy the stack)")


def _gluon_problem(cfg: TritonMoEConfig, fc1: MXFP8Tensor, fc2: MXFP8Tensor,
                   device: torch.device) -> Optional[Exception]:
    """None where ``cfg`` has no Gluon kernel or its Gluon kernels can run here on these stacks; else the error to
    raise (before any launch) when the caller chose ``cfg``."""
    if not (cfg.fc1_gluon or cfg.fc2_gluon or cfg.fc2_ws or cfg.fc1_ws):
        return None
    if cfg.fc1_ws:
        hidden, n_out = fc1.data.shape[2], fc2.data.shape[2]
        gated = fc1.data.shape[1] == 2 * n_out
        if cfg.fc1_block_n != (64 if gated else 128) or (gated and n_out % 64):
            return MXFP8InputError(f"fc1_ws: the warp-specialized FC1 runs 128 weight rows per tile: fc1_block_n 128 "
                                   f"ungated, or gated 64 gate rows and their 64 up rows (fc1_block_n 64, I a multiple "
                                   f"of 64); got fc1_block_n {cfg.fc1_block_n} for the FC1 stack "
                                   f"{tuple(fc1.data.shape)} and I {n_out}")
        if hidden % 16 or not fc1.data.is_contiguous():
            return MXFP8InputError(f"fc1_ws: the FC1 stack {tuple(fc1.data.shape)} must be contiguous with H % 16 == 0 "
                                   "(a TMA descriptor over [E * N1, H] with 16-byte rows)")
    if cfg.fc2_ws:
        _, hidden, inner = fc2.data.shape
        if inner % 16 or hidden % cfg.fc2_block_n:
            return MXFP8InputError(f"fc2_ws: the FC2 stack {tuple(fc2.data.shape)} needs I % 16 == 0 (16-byte TMA rows) "
                                   f"and H % fc2_block_n ({cfg.fc2_block_n}) == 0")
        if not fc2.data.is_contiguous():
            return MXFP8InputError("fc2_ws: the FC2 stack must be contiguous (a TMA descriptor over [E * H, I])")
    if cfg.fc1_gluon:
        hidden, n_out = fc1.data.shape[2], fc2.data.shape[2]  # FC1's output width: I, gated or not
        if hidden % 128 or n_out % cfg.fc1_block_n:
            return MXFP8InputError(f"fc1_gluon: the FC1 stack {tuple(fc1.data.shape)} needs H % 128 == 0 and its "
                                   f"output width ({n_out}) a multiple of fc1_block_n ({cfg.fc1_block_n})")
        gated = fc1.data.shape[1] != n_out
        if gated and (cfg.dequant == "f8x2" or cfg.fc1_f8x2) and cfg.fc1_block_n != 64:
            return MXFP8InputError(f"fc1_gluon: the gated Gluon f8x2 FC1 takes fc1_block_n 64 (64 gate rows and their "
                                   f"64 up rows per program), got {cfg.fc1_block_n}")
    if cfg.fc2_gluon:
        _, hidden, inner = fc2.data.shape
        if inner % 128 or hidden % cfg.fc2_block_n:
            return MXFP8InputError(f"fc2_gluon: the FC2 stack {tuple(fc2.data.shape)} needs I % 128 == 0 and H % "
                                   f"fc2_block_n ({cfg.fc2_block_n}) == 0")
        if cfg.fc2_ring and inner // 128 % cfg.fc2_stages:
            return MXFP8InputError(f"fc2_ring: the FC2 stack {tuple(fc2.data.shape)} needs I a multiple of 128 * "
                                   f"fc2_stages ({128 * cfg.fc2_stages})")
    for flag, name, weight in ((cfg.fc1_gluon or cfg.fc1_ws, "fc1", fc1), (cfg.fc2_gluon or cfg.fc2_ws, "fc2", fc2)):
        if flag and weight.data.data_ptr() % 16:  # TMA descriptors over the weight stacks
            return MXFP8InputError(f"{name}: the Gluon kernels copy the {name.upper()} weights by TMA, whose base "
                                   "address must be 16-byte aligned; got a storage offset that is not (copy the stack)")
    for flag, name, weight in ((cfg.fc1_gluon, "fc1", fc1), (cfg.fc2_gluon, "fc2", fc2)):  # (fc2_ws: checked above)
        if flag and not (weight.data.is_contiguous() and weight.scale_bytes().is_contiguous()):
            return MXFP8InputError(f"{name}_gluon: the {name.upper()} stack and its scales must be contiguous (TMA "
                                   "descriptors)")
        words = cfg.scale_words or cfg.dequant == "f8x2" or cfg.fc1_f8x2
        if flag and words and weight.scale_bytes().data_ptr() % 4:
            return MXFP8InputError(f"{'scale_words' if cfg.scale_words else 'f8x2'}: the {name.upper()} scales must "
                                   "start at a 4-byte aligned address (read as int32 words); got a storage offset "
                                   "that is not (copy the stack)")
    if device.type != "cuda":
        return BackendUnavailableError("the Gluon kernels (fc1_gluon / fc2_gluon / fc1_ws / fc2_ws) run on a Hopper "
                                       "GPU only (Gluon has no CPU interpreter)")
    try:
        from . import (  # noqa: F401
            _gluon_f8x2_fc1_kernel,
            _gluon_f8x2_fc2_kernel,
            _gluon_fc1_kernel,
            _gluon_fc2_kernel,
            _gluon_ws_kernel,
        )
    except ImportError as error:
        return BackendUnavailableError("fc1_gluon / fc2_gluon need Triton's Gluon dialect with its Hopper API "
                                       f"(triton.experimental.gluon; Triton 3.6 was tested): {error}")
    return None


__all__ = [
    "GLUON_ENV",
    "TILES",
    "TritonMoEConfig",
    "check_triton_moe_available",
    "choose_config",
    "gluon_policy",
    "kernel_path",
    "map_launch_tiles",
    "planes_of",
    "replace_launch_tiles",
    "route_launch_shape",
    "route_layout",
    "route_reference",
    "routing_capacity",
    "same_bits_as_triton_form",
    "split_rows_buffers",
    "split_rows_reference",
    "triton_form",
    "triton_moe_support",
    "triton_mxfp8_moe",
    "untested_triton_note",
    "warn_untested_triton",
    "ws_shared_bytes",
]
