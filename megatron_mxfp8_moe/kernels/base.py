"""The MoE backend protocol: ``check_support(caps) -> Support``, ``build(expert_set) -> StackState``, ``run``.

canonical experts (ExpertSet) -> build: prepared stack (+ write hooks) -> run: route/pack -> kernel -> out

Lifecycle (FlashInfer ``fused_moe/runners.py`` style):

1. ``check_support(caps)``: a pure function of ``DeviceCaps`` (plain values, no device probing) returning
   ``Support(ok, reason)``; the reason reaches error messages and logs. ``supports_activation`` likewise.
2. ``build(expert_set)``: once, lazily, after checkpoint load. Derives the backend's kernel layout from the
   canonical MXFP8 bytes (repack, never re-quantize) and registers write hooks on the canonical tensors,
   so a later ``quantize_``/``copy_`` (refit) repacks expert ``i`` into the SAME storage (graph addresses
   stay valid). Returns a ``StackState``; ``StackState.close()`` removes the hooks.
3. ``run(state, x, probs, routing_map, ...)``: the routed (unpermuted) contract below. A backend whose
   ``graph_safe`` is True does no host sync and no allocation that depends on device values, so it can be
   captured in a CUDA graph and replayed with a changing ``valid_tokens``.

Routed contract (shape legend: T rows, H hidden, I intermediate, E local experts, topk):

- ``x``: ``[T, H]`` bf16 (fp16/fp32 accepted by the reference backend), unpermuted rows.
- ``probs``: ``[T, topk]`` fp32 routing weights.
- ``routing_map``: ``[T, topk]`` int64 (or int32) GLOBAL expert ids; ``-1`` and ids of other EP ranks are
  skipped. Local expert ``e = id - local_expert_offset`` for ``0 <= e < E``.
- ``valid_tokens``: ``None`` (every row valid), an ``int``, or a device ``int32 [1]`` tensor (read on the
  device, never on the host). Rows ``t >= valid_tokens`` are ignored whatever their routing ids hold.
- ``rows``: the processed prefix ``[0, rows)`` (bounded decode rows; ``None`` = all ``T``). Rows at or past
  ``rows`` are never read, in any input.
- ``out``: optional ``[T, H]`` (or larger-row) fp32/bf16 buffer; ``out[:rows]`` is written (invalid rows
  get zeros) and ``out`` is returned; rows at or past ``rows`` are left untouched. Without ``out`` a new
  ``[T, H]`` fp32 tensor is returned with zeros past the prefix.
- Result: ``out[t] = sum_k probs[t, k] * fc2[e] @ act(fc1[e] @ x[t])`` over local ``e``.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Union

import torch

from ..activations import Activation
from ..errors import MXFP8InputError
from .caps import DeviceCaps

if TYPE_CHECKING:  # the ExpertSet type only; kernels never import experts at run time
    from ..experts import ExpertSet


class Backend(enum.Enum):
    """An MoE expert backend. User strings map to members in ``select.py`` (one dict)."""

    REFERENCE = "reference"  # pure torch, any device; the oracle's math, dense over local experts
    TRITON = "triton"  # Hopper (and other CUDA) Triton MXFP8 grouped kernel
    FLASHINFER_ROUTED = "flashinfer_routed"  # FlashInfer TRT-LLM routed MXFP8 MoE, SM100/SM103
    FLASHINFER_CUTLASS = "flashinfer_cutlass"  # FlashInfer CUTLASS MXFP8xMXFP8 MoE, SM100/SM103 (explicit only)


@dataclasses.dataclass(frozen=True)
class Support:
    """Whether a backend can run here; ``reason`` names the requirement when it cannot."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


# Removes one registered write hook.
HookRemover = Callable[[], None]


@dataclasses.dataclass
class StackState:
    """Weights prepared by one backend from one ExpertSet, plus the hooks that keep them fresh.

    Lifetime: built once per layer after checkpoint load; lives as long as the layer. The tensors in
    ``fc1``/``fc2`` keep their storage addresses across refits (hooks rewrite them in place).
    """

    backend: Backend
    fc1: Any  # backend layout of the fc1 stack (e.g. fp32 [E, N1, H], canonical MXFP8Tensor, routed stack)
    fc2: Any  # backend layout of the fc2 stack (e.g. fp32 [E, H, I], ...)
    hook_removers: list = dataclasses.field(default_factory=list)  # HookRemover per registered hook
    repacks: int = 0  # number of per-expert repacks run by write hooks since build (diagnostics)
    # True when fc1/fc2 ARE the canonical stacks (zero copy, no hooks): the canonical bytes are the kernel's
    # only copy, so they are never released and a refit writes straight into what the kernel reads.
    shares_canonical: bool = False

    def attach_repack_hooks_(self, expert_set: "ExpertSet", repack_expert) -> None:
        """Keep ``fc1``/``fc2`` fresh: after every write of expert ``i`` of a linear, call
        ``repack_expert(stack, i, data, scale)`` on this state's stack of that linear (outside inference mode, so
        the stacks stay mutable) and count it in ``repacks``."""

        def repack(linear: str, index: int, data: torch.Tensor, scale: torch.Tensor) -> None:
            with torch.inference_mode(False), torch.no_grad():
                repack_expert(self.fc1 if linear == "fc1" else self.fc2, index, data, scale)
                self.repacks += 1

        self.hook_removers.extend(expert_set.register_write_hook(repack))

    def close(self) -> None:
        """Remove every write hook this state registered (the prepared tensors stay valid)."""
        for remove in self.hook_removers:
            remove()
        self.hook_removers.clear()


ValidTokens = Union[None, int, torch.Tensor]


class MoEBackend(abc.ABC):
    """One backend: support check, build and run (see module docstring). Instances hold no weights."""

    backend: ClassVar[Backend]
    graph_safe: ClassVar[bool] = False  # run() is capturable in a CUDA graph (no host sync)

    @classmethod
    @abc.abstractmethod
    def check_support(cls, caps: DeviceCaps) -> Support:
        """Whether this backend can run on a device with ``caps`` (pure; no device probing)."""

    @classmethod
    def supports_activation(cls, activation: Activation, caps: Optional[DeviceCaps] = None) -> Support:
        """Whether this backend implements ``activation`` (default: all of them); ``caps``, when given, adds what
        depends on the machine (e.g. a library version floor for that activation)."""
        return Support(True, f"{activation.value} supported")

    @abc.abstractmethod
    def build(self, expert_set: "ExpertSet") -> StackState:
        """Prepare the kernel stack from ``expert_set``'s canonical bytes and attach write hooks."""

    @abc.abstractmethod
    def run(
        self,
        state: StackState,
        x: torch.Tensor,
        probs: torch.Tensor,
        routing_map: torch.Tensor,
        *,
        activation: Activation,
        local_expert_offset: int,
        num_global_experts: int,
        valid_tokens: ValidTokens = None,
        rows: Optional[int] = None,
        out: Optional[torch.Tensor] = None,
        route_experts: Optional[int] = None,
    ) -> torch.Tensor:
        """The routed contract (module docstring); returns ``out`` or a new fp32 ``[T, H]`` tensor.

        ``route_experts``: how many experts the map spreads its ``rows * topk`` pairs over, a hint for tile
        choices (default ``num_global_experts``: the dispatcher gathers every EP rank's tokens with global ids;
        the permuted contract's rows all belong to local experts, so it passes the local count).
        """


def check_routed_inputs(
    x: torch.Tensor,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    *,
    hidden_size: int,
    rows: Optional[int],
    out: Optional[torch.Tensor],
) -> int:
    """Validate the routed contract's metadata (host-side only: shapes, dtypes, devices); returns ``rows``.

    Raises MXFP8InputError naming the argument, the expected and the received value.
    """
    if x.dim() != 2 or x.shape[1] != hidden_size:
        raise MXFP8InputError(f"x: expected [T, {hidden_size}], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise MXFP8InputError(f"x: expected a floating dtype (bf16), got {x.dtype}")
    total = x.shape[0]
    if routing_map.dim() != 2 or routing_map.shape[0] != total:
        raise MXFP8InputError(f"routing_map: expected [{total}, topk], got {tuple(routing_map.shape)}")
    if routing_map.dtype not in (torch.int64, torch.int32):
        raise MXFP8InputError(f"routing_map: expected int64 (or int32) global expert ids, got {routing_map.dtype}")
    if tuple(probs.shape) != tuple(routing_map.shape):
        raise MXFP8InputError(f"probs: expected {tuple(routing_map.shape)} like routing_map, got {tuple(probs.shape)}")
    if not probs.is_floating_point():
        raise MXFP8InputError(f"probs: expected fp32, got {probs.dtype}")
    for name, tensor in (("probs", probs), ("routing_map", routing_map)):
        if tensor.device != x.device:
            raise MXFP8InputError(f"{name}: expected device {x.device} like x, got {tensor.device}")
    rows = total if rows is None else int(rows)
    if not 0 <= rows <= total:
        raise MXFP8InputError(f"rows: expected 0 <= rows <= {total}, got {rows}")
    if out is not None:
        if out.dim() != 2 or out.shape[1] != hidden_size or out.shape[0] < rows:
            raise MXFP8InputError(f"out: expected [>= {rows}, {hidden_size}], got {tuple(out.shape)}")
        if out.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise MXFP8InputError(f"out: expected fp32 or bf16, got {out.dtype}")
        if out.device != x.device:
            raise MXFP8InputError(f"out: expected device {x.device} like x, got {out.device}")
    return rows


def valid_row_mask(valid_tokens: ValidTokens, rows: int, device: torch.device) -> Optional[torch.Tensor]:
    """bool ``[rows, 1]``: row ``t < valid_tokens``, computed on the device (graph-safe); None = all valid."""
    if valid_tokens is None:
        return None
    index = torch.arange(rows, device=device)
    if isinstance(valid_tokens, torch.Tensor):
        limit = valid_tokens.reshape(-1)[:1].to(device=device, dtype=torch.int64)
    else:
        limit = torch.tensor([int(valid_tokens)], device=device, dtype=torch.int64)
    return (index < limit).unsqueeze(-1)


def write_result(result: torch.Tensor, total_rows: int, out: Optional[torch.Tensor]) -> torch.Tensor:
    """Place the prefix result ``[rows, H]`` into ``out[:rows]`` (returned) or a zero fp32 ``[T, H]``."""
    rows = result.shape[0]
    if out is not None:
        out[:rows].copy_(result)
        return out
    if rows == total_rows:
        return result.to(torch.float32)
    full = torch.zeros(total_rows, result.shape[1], dtype=torch.float32, device=result.device)
    full[:rows].copy_(result)
    return full


__all__ = [
    "Backend",
    "HookRemover",
    "MoEBackend",
    "StackState",
    "Support",
    "ValidTokens",
    "check_routed_inputs",
    "valid_row_mask",
    "write_result",
]
