"""Graph-stable row choice: a bounded prefix of the dispatcher buffer, or full rows.

The choice is made on the host while a CUDA graph is built, so every replay of that graph sees the same
shapes and addresses. Bounded rows are used only when the caller says the step is decode-only on every EP
rank and the EP-wide token bound fits the capacity (``use_bounded_rows``); otherwise all rows are processed,
so prompt tokens are never truncated.
"""

import dataclasses
import logging
from typing import Optional

logger = logging.getLogger(__name__)

_LOGGED: set = set()


@dataclasses.dataclass(frozen=True)
class RowPolicy:
    """Which prefix of the dispatcher buffer the kernels process."""

    rows: int  # rows processed: the prefix [0, rows) of the buffer
    full_rows: int  # rows in the dispatcher buffer
    token_capacity: Optional[int]  # configured decode capacity, None when unset
    kind: str  # "bounded-decode" | "full-rows" | "full-no-capacity"

    @property
    def bounded(self) -> bool:
        return self.kind == "bounded-decode"


def select_active_rows(full_rows: int, *, token_capacity: Optional[int], use_bounded_rows: bool) -> RowPolicy:
    """Pick the processed prefix; logs each distinct policy once at INFO."""
    if full_rows < 0:
        raise ValueError(f"full_rows must be >= 0, got {full_rows}")
    if token_capacity is not None and token_capacity <= 0:
        raise ValueError(f"token_capacity must be a positive int or None, got {token_capacity}")
    if token_capacity is None:
        policy = RowPolicy(full_rows, full_rows, None, "full-no-capacity")
    elif use_bounded_rows:
        policy = RowPolicy(min(token_capacity, full_rows), full_rows, token_capacity, "bounded-decode")
    else:
        policy = RowPolicy(full_rows, full_rows, token_capacity, "full-rows")
    if policy not in _LOGGED:
        _LOGGED.add(policy)
        logger.info(
            "MoE row policy %s: processing %d of %d rows (token capacity %s)",
            policy.kind, policy.rows, policy.full_rows, policy.token_capacity,
        )
    return policy
