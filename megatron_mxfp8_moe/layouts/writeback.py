"""Write-through from one canonical expert weight to its slot of a repacked kernel stack (routed, CUTLASS).

canonical expert view ``[M, K]`` --write hook--> ``repack(stack, expert, data, scale)`` -> the stack's slot, in place
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import MXFP8InputError
from ..tensor import MXFP8Tensor


def check_canonical(weight: Any, name: str, *, stacked: bool) -> None:
    """Raise MXFP8InputError unless ``weight`` is our MXFP8Tensor, a stack ``[E, M, K]`` or one expert ``[M, K]``."""
    if not isinstance(weight, MXFP8Tensor):
        raise MXFP8InputError(f"{name}: expected a megatron_mxfp8_moe MXFP8Tensor, got {type(weight).__name__}")
    if weight.is_stacked != stacked:
        want = "a stack [E, M, K]" if stacked else "one expert [M, K]"
        raise MXFP8InputError(f"{name}: expected {want}, got shape {tuple(weight.shape)}")


def attach_expert_writeback(
    weight: MXFP8Tensor,
    stack: Any,
    expert: int,
    repack: Callable[[Any, int, torch.Tensor, torch.Tensor], None],
    layout: str,
) -> Callable[[], None]:
    """Register a write hook on canonical expert ``weight`` that calls ``repack(stack, expert, data, scale)``.

    ``stack``: a repacked stack with ``logical_rows``, ``logical_cols`` and ``num_experts`` (``layout`` names it in
    errors). The weight must be one expert of exactly the stack's logical shape and ``expert`` in range; returns
    the function that detaches the hook.
    """
    check_canonical(weight, "weight", stacked=False)
    if tuple(weight.shape) != (stack.logical_rows, stack.logical_cols):
        raise MXFP8InputError(
            f"weight: shape must be ({stack.logical_rows}, {stack.logical_cols}) to match the {layout} stack, "
            f"got {tuple(weight.shape)}"
        )
    if not 0 <= expert < stack.num_experts:
        raise MXFP8InputError(f"expert: must be in [0, {stack.num_experts}), got {expert}")

    def _repack(_tensor: MXFP8Tensor, data: torch.Tensor, scale: torch.Tensor) -> None:
        repack(stack, expert, data, scale)

    return weight.register_write_hook(_repack)


__all__ = ["attach_expert_writeback", "check_canonical"]
