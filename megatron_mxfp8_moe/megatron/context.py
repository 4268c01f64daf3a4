"""Decode-only knowledge for bounded rows: is every valid row of this step inside the token capacity?

The expert layer gets no inference context from Megatron-Core 0.19.2's ``MoELayer``, so this module says,
on the host and fixed per CUDA graph, whether the step is decode-only on EVERY EP rank and an upper bound on
the dispatcher ROWS that can hold a valid token (``ep_token_bound``). Rows, not tokens: the inference
dispatchers lay rank r's rows after every lower rank's PADDED rows (CUDA-graph padding included), and a graph
is replayed for any real count up to its padded size, so the bound is ``padded_local_tokens * ep_size``
(``padded_local_tokens``: the rows this rank hands the dispatcher, e.g. the graph's
``padded_batch_dimensions.token_count``), never a count of real tokens. Two sources, first match wins:

1. ``bounded_decode_rows(decode_only, ep_token_bound, ep_group=...)``: a context manager the controller enters
   around a step (or around building one graph). With an EP group of size > 1 it all-reduces the flag (AND) and
   the bound (MAX) over the group once, on entry, on the host side; entering it during CUDA-graph capture is
   refused (a collective must not be captured there). The group's size is recorded (``DecodeRows.group_size``):
   a layer with EP size > 1 uses bounded rows only when the agreement ran over a group of its EP size.
2. ``attach_inference_context(ctx)``: a Megatron ``DynamicInferenceContext``; read per forward through
   ``is_decode_only()``, ``using_cuda_graph_this_step()`` and ``padded_batch_dimensions.token_count``.
   With EP = 1 this is exact. With EP > 1 it is trusted only for NCCL-dispatcher graph steps, whose graphs are
   decode-only and EP-matched by construction (0.19.2 forces non-decode graphs off for NCCL and all-reduces
   the token counts); the bound is then ``token_count * ep_size`` rows. Anything else with EP > 1 (NVLS,
   eager steps) gives "not agreed", i.e. full rows, since 0.19.2 has no EP-wide decode-only agreement there.

``use_bounded_rows(token_capacity, ..., required_rows=...)`` turns this into the layer's flag; the layer passes
``required_rows``, the rows its dispatcher geometry says can be valid (see ``MXFP8Experts``), and a bound below
them is refused (full rows, or an error where EP ranks could disagree). The layer then picks the row policy
through ``routing.rows.select_active_rows`` (each distinct policy logged once at INFO).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import weakref
from typing import Optional

import torch
import torch.distributed as dist

from ..errors import MXFP8InputError
from ..kernels.caps import cuda_graph_capturing

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DecodeRows:
    """What is known about the current step's rows, on the host.

    decode_only: True only when every rank of the agreement group is decode-only.
    ep_token_bound: upper bound on the dispatcher rows that can hold a valid token (padded rows of every EP
        rank: ``padded_local_tokens * ep_size``), None when unknown.
    source: where this came from (for logs and tests).
    group_size: ranks that agreed on ``decode_only`` / ``ep_token_bound`` (1: this rank alone).
    """

    decode_only: bool
    ep_token_bound: Optional[int]
    source: str
    group_size: int = 1


_UNKNOWN = DecodeRows(False, None, "none")
_ACTIVE: contextvars.ContextVar[Optional[DecodeRows]] = contextvars.ContextVar("mxfp8_decode_rows", default=None)
_ATTACHED: Optional["weakref.ReferenceType"] = None
_LOGGED: set = set()


def _log_once(message: str, *args, level: int = logging.INFO) -> None:
    key = (message,) + args
    if key not in _LOGGED:
        _LOGGED.add(key)
        logger.log(level, message, *args)


def _group_size(ep_group) -> int:
    if ep_group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(ep_group)


def agree_across_ep(decode_only: bool, ep_token_bound: int, ep_group=None) -> tuple[bool, int]:
    """EP-wide agreement on the host: (AND of ``decode_only``, MAX of ``ep_token_bound``) over ``ep_group``.

    One all-reduce of an int64 ``[2]`` tensor (on the CPU for gloo groups, on the current CUDA device
    otherwise). Identity without a group or with one rank. Raises MXFP8InputError during CUDA-graph capture.
    """
    if not isinstance(ep_token_bound, int) or isinstance(ep_token_bound, bool) or ep_token_bound < 0:
        raise MXFP8InputError(f"ep_token_bound: expected an int >= 0, got {ep_token_bound!r}")
    if _group_size(ep_group) == 1:
        return bool(decode_only), ep_token_bound
    if cuda_graph_capturing():
        raise MXFP8InputError(
            "bounded_decode_rows: the EP agreement is a collective and cannot run inside CUDA-graph capture; "
            "enter bounded_decode_rows before capturing the graph"
        )
    backend = dist.get_backend(ep_group)
    device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", torch.cuda.current_device())
    flags = torch.tensor([0 if decode_only else 1, ep_token_bound], dtype=torch.int64, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=ep_group)
    not_decode, bound = flags.tolist()
    return not_decode == 0, int(bound)


@contextlib.contextmanager
def bounded_decode_rows(decode_only: bool, ep_token_bound: int, *, ep_group=None):
    """Publish this step's decode-only flag and dispatcher-row bound to the MXFP8 expert layers inside the block.

    ``ep_token_bound``: in dispatcher ROWS, ``padded_local_tokens * ep_size`` where ``padded_local_tokens`` is
    the row count this rank hands the dispatcher this step (the CUDA graph's padded token count, not the number
    of requests); the MAX over ranks then bounds every rank's rows (module docstring). ``ep_group``: the EP
    group; required when EP > 1 (without it an EP > 1 layer processes full rows and warns once). Collective
    when ``ep_group`` has more than one rank: every EP rank must enter it. Yields the agreed ``DecodeRows``.
    """
    agreed_decode, agreed_bound = agree_across_ep(decode_only, ep_token_bound, ep_group)
    rows = DecodeRows(agreed_decode, agreed_bound, "bounded_decode_rows", _group_size(ep_group))
    token = _ACTIVE.set(rows)
    try:
        yield rows
    finally:
        _ACTIVE.reset(token)


def attach_inference_context(context) -> None:
    """Read decode-only state from ``context`` (a Megatron ``DynamicInferenceContext``; held weakly)."""
    global _ATTACHED
    for name in ("is_decode_only", "using_cuda_graph_this_step"):
        if not callable(getattr(context, name, None)):
            raise MXFP8InputError(f"context: expected a DynamicInferenceContext with {name}(), got {type(context).__name__}")
    _ATTACHED = weakref.ref(context)


def detach_inference_context() -> None:
    """Forget the attached inference context."""
    global _ATTACHED
    _ATTACHED = None


def attached_inference_context():
    """The attached context, or None (also after it was garbage-collected)."""
    return None if _ATTACHED is None else _ATTACHED()


def current_decode_rows(*, ep_size: int = 1, nccl_dispatcher: bool = False) -> DecodeRows:
    """The ``DecodeRows`` for a forward now (see module docstring for the precedence and EP rules)."""
    explicit = _ACTIVE.get()
    if explicit is not None:
        return explicit
    context = attached_inference_context()
    if context is None:
        return _UNKNOWN
    dims = getattr(context, "padded_batch_dimensions", None)
    tokens = getattr(dims, "token_count", None)
    decode_only = bool(context.is_decode_only())
    if ep_size == 1:
        return DecodeRows(decode_only, tokens, "inference-context")
    if nccl_dispatcher and context.using_cuda_graph_this_step():
        bound = None if tokens is None else int(tokens) * ep_size
        return DecodeRows(decode_only, bound, "inference-context:nccl-graph", ep_size)  # EP-matched by Megatron
    _log_once(
        "MXFP8 experts: EP size %d without an EP-wide decode-only agreement (%s); processing full rows. "
        "Use bounded_decode_rows(...) to enable bounded decode rows.",
        ep_size, "NCCL eager step" if nccl_dispatcher else "NVLS dispatcher",
    )
    return DecodeRows(False, None, "inference-context:ep-unagreed")


def use_bounded_rows(
    token_capacity: Optional[int],
    *,
    ep_size: int = 1,
    nccl_dispatcher: bool = False,
    required_rows: Optional[int] = None,
) -> bool:
    """True when the current step is agreed decode-only and its row bound fits ``token_capacity``.

    ``ep_size`` > 1: the ``DecodeRows`` must come from an agreement over ``ep_size`` ranks, else full rows
    (warned once). ``required_rows``: the dispatcher rows this rank knows can hold a valid token (None: no
    check); a bound below them is a caller error. With the NCCL dispatcher or EP = 1 every rank sees the same
    ``required_rows``, so all fall back to full rows together (warned once); with NVLS (EP > 1) ranks hold
    different row counts and a rank that fell back alone could not stop the others from truncating, so
    MXFP8InputError is raised. Host values only (no device reads).
    """
    if token_capacity is None:
        return False
    rows = current_decode_rows(ep_size=ep_size, nccl_dispatcher=nccl_dispatcher)
    if not rows.decode_only or rows.ep_token_bound is None or rows.ep_token_bound > token_capacity:
        return False
    if ep_size > 1 and rows.group_size != ep_size:
        _log_once(
            "MXFP8 experts: decode-only rows (%s) were agreed over %d rank(s), but the layer's EP size is %d; "
            "processing full rows. Pass ep_group=<the EP group> to bounded_decode_rows(...).",
            rows.source, rows.group_size, ep_size, level=logging.WARNING,
        )
        return False
    if required_rows is not None and rows.ep_token_bound < required_rows:
        message = (
            f"ep_token_bound={rows.ep_token_bound} is below the {required_rows} dispatcher rows that can hold a "
            f"valid token on this rank; ep_token_bound counts dispatcher rows: padded_local_tokens * ep_size "
            f"(the padded graph token count, not the number of requests)"
        )
        if ep_size > 1 and not nccl_dispatcher:
            raise MXFP8InputError(f"bounded_decode_rows: {message}; other EP ranks may already truncate rows")
        _log_once("MXFP8 experts: %s; processing full rows.", message, level=logging.WARNING)
        return False
    return True


__all__ = [
    "DecodeRows",
    "agree_across_ep",
    "attach_inference_context",
    "attached_inference_context",
    "bounded_decode_rows",
    "current_decode_rows",
    "detach_inference_context",
    "use_bounded_rows",
]
