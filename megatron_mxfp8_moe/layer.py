"""MXFP8ExpertLayer: a Megatron-free module running E local MXFP8 experts through one backend.

canonical experts (ExpertSet) -> lazy build: backend stack (+ write hooks where it is a repacked copy; the
Triton stack is the canonical storage) -> row policy -> backend.run -> out
refit: mxfp8_weights()[name].quantize_/copy_ -> the canonical bytes (what the Triton kernel reads) -> write hooks
repack a repacked backend stack in place

Two call contracts (T rows, H hidden, E local experts, topk):

- routed (Megatron's inference dispatchers): ``forward_routed(x [T, H], probs [T, topk] fp32,
  routing_map [T, topk] int64 global ids, valid_tokens=..., use_bounded_rows=..., out=...)``; rows at or past
  ``valid_tokens`` (device int32 [1], read on the device) are ignored; returns fp32 ``[T, H]`` (or ``out``).
- permuted (Megatron's standard dispatchers): ``forward_permuted(x [R, H] sorted by local expert,
  tokens_per_expert [E], probs [R])``; returns ``[R, H]`` in ``x.dtype`` with ``out[r] = probs[r] * expert(x[r])``.

Lifetime: the backend stack is built once, on the first forward or ``build_()``, after weights are loaded;
its storage then stays put for the layer's life (CUDA-graph addresses survive refits). Moving the layer to
another device is allowed only before the build. Not thread-safe.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Union

import torch

from .errors import MXFP8InputError
from .experts import ExpertSet
from .kernels.base import Backend, StackState, ValidTokens
from .kernels.caps import DeviceCaps, cuda_graph_capturing, detect_caps
from .kernels.select import make_backend, select_backend
from .routing.rows import RowPolicy, select_active_rows
from .tensor import MXFP8Tensor

logger = logging.getLogger(__name__)


def _tensors_in(value) -> list[torch.Tensor]:
    """The tensors held by ``value``: a tensor, an MXFP8Tensor (data and scale unless released), or lists, tuples
    and dataclasses of those (backend stacks)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, MXFP8Tensor):
        return [] if value.is_released else [value.data, value.scale]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _tensors_in(item)]
    if dataclasses.is_dataclass(value):
        return [tensor for field in dataclasses.fields(value) for tensor in _tensors_in(getattr(value, field.name))]
    return []


class MXFP8ExpertLayer(torch.nn.Module):
    """E local MXFP8 experts + one backend (see module docstring).

    Args:
        expert_set: the canonical weights (kept by reference; loads/refits write into it in place).
        backend: ``"auto"``, ``"reference"``, ``"triton"``, ``"flashinfer_routed"`` or a ``Backend``.
        caps: device capabilities for the backend choice; detected for ``expert_set.device`` when None.
        token_capacity: bounded-decode row capacity C (None: always process every row).
        local_expert_offset: global id of local expert 0 (``ep_rank * E``).
        num_global_experts: experts across all EP ranks (default ``E``).
        release_canonical: drop the canonical bytes after the build so only the kernel stack stays resident
            (writes still reach the stack through hooks; reads of the canonical weights raise). Default: True
            for GPU backends, False for the reference backend (the CPU oracle keeps its canonical bytes).
            Ignored for a backend whose stack is the canonical storage itself (``StackState.shares_canonical``).
    """

    def __init__(
        self,
        expert_set: ExpertSet,
        *,
        backend: Union[str, Backend] = "auto",
        caps: Optional[DeviceCaps] = None,
        token_capacity: Optional[int] = None,
        local_expert_offset: int = 0,
        num_global_experts: Optional[int] = None,
        release_canonical: Optional[bool] = None,
    ):
        super().__init__()
        if not isinstance(expert_set, ExpertSet):
            raise MXFP8InputError(f"expert_set: expected an ExpertSet, got {type(expert_set).__name__}")
        if token_capacity is not None and (not isinstance(token_capacity, int) or token_capacity <= 0):
            raise MXFP8InputError(f"token_capacity: expected a positive int or None, got {token_capacity!r}")
        num_global_experts = expert_set.num_experts if num_global_experts is None else int(num_global_experts)
        if not 0 <= local_expert_offset <= num_global_experts - expert_set.num_experts:
            raise MXFP8InputError(
                f"local_expert_offset: expected 0 <= offset <= {num_global_experts - expert_set.num_experts} "
                f"({num_global_experts} global, {expert_set.num_experts} local experts), got {local_expert_offset}"
            )
        self.expert_set = expert_set
        self.token_capacity = token_capacity
        self.local_expert_offset = int(local_expert_offset)
        self.num_global_experts = num_global_experts
        self._backend_request = backend
        self._caps = caps
        self.caps = caps if caps is not None else detect_caps(expert_set.device)
        self.backend, self.backend_reason = select_backend(backend, self.caps, activation=expert_set.activation)
        self._impl = make_backend(self.backend)
        self._state: Optional[StackState] = None
        self._release_canonical = release_canonical
        logger.info("MXFP8ExpertLayer backend %s (%s)", self.backend.value, self.backend_reason)

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def activation(self):
        return self.expert_set.activation

    @property
    def num_local_experts(self) -> int:
        return self.expert_set.num_experts

    @property
    def is_built(self) -> bool:
        return self._state is not None

    @property
    def stack_state(self) -> Optional[StackState]:
        """The backend's prepared stack (None before the build)."""
        return self._state

    def extra_repr(self) -> str:
        return (
            f"{self.expert_set!r}, backend={self.backend.value}, token_capacity={self.token_capacity}, "
            f"local_expert_offset={self.local_expert_offset}"
        )

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        """``{"linear_fc1.weight{i}": MXFP8Tensor, "linear_fc2.weight{i}": ...}``; writes reach the backend stack."""
        return self.expert_set.mxfp8_weights()

    # -- lifecycle ---------------------------------------------------------------------------------
    def build_(self) -> StackState:
        """Build the backend stack from the canonical bytes now (idempotent); attaches the write hooks."""
        if self._state is None:
            if cuda_graph_capturing():
                raise MXFP8InputError(
                    "build_(): the expert stack must be built before CUDA-graph capture (run one eager forward or "
                    "call build_() after loading weights); building allocates and copies outside the graph's pool"
                )
            self._state = self._impl.build(self.expert_set)
            logger.info("built the %s expert stack for %r", self.backend.value, self.expert_set)
            release = self._release_canonical
            if release is None:
                release = self.backend is not Backend.REFERENCE
            if self._state.shares_canonical:
                if release:
                    logger.info("the %s stack is the canonical storage itself: nothing to release",
                                self.backend.value)
            elif release:
                freed = self.expert_set.release_canonical_()
                logger.info("released %.1f MiB of canonical expert bytes; the %s stack is the only copy",
                            freed / 2**20, self.backend.value)
        return self._state

    def resident_bytes(self) -> int:
        """Bytes of expert-weight storage this layer keeps alive (distinct storages, canonical included)."""
        storages: dict[int, int] = {}
        stacks = [self.expert_set.fc1, self.expert_set.fc2]
        if self._state is not None:
            stacks += [self._state.fc1, self._state.fc2]
        for tensor in _tensors_in(stacks):
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())

    def derived_tensors(self) -> list[torch.Tensor]:
        """The tensors of the built kernel stack that write hooks rewrite in place, outside the canonical storage
        (none before ``build_()`` or when the stack is the canonical storage itself). ``refit_experts`` refuses a
        source lying in them: a hook could overwrite it before it is read."""
        state = self._state
        if state is None or state.shares_canonical:
            return []
        canonical = {tensor.untyped_storage().data_ptr()
                     for tensor in _tensors_in([self.expert_set.fc1, self.expert_set.fc2])}
        return [tensor for tensor in _tensors_in([state.fc1, state.fc2])
                if tensor.untyped_storage().data_ptr() not in canonical]

    def _apply(self, fn, *args, **kwargs):
        # Module.to()/cuda(): move the canonical weights too (device only; fp8 bytes never change dtype).
        result = super()._apply(fn, *args, **kwargs)
        probe = fn(torch.empty(0, dtype=torch.uint8, device=self.expert_set.device))
        if probe.device != self.expert_set.device:
            if self._state is not None:
                raise MXFP8InputError(
                    f"cannot move MXFP8ExpertLayer to {probe.device} after its {self.backend.value} stack was built "
                    f"on {self.expert_set.device}: graph addresses and refit hooks are bound to that device"
                )
            self.expert_set = self.expert_set.to_device(probe.device)
            self.caps = self._caps if self._caps is not None else detect_caps(probe.device)
            self.backend, self.backend_reason = select_backend(
                self._backend_request, self.caps, activation=self.expert_set.activation
            )
            self._impl = make_backend(self.backend)
        return result

    # -- row policy ----------------------------------------------------------------------------------
    def row_policy(self, full_rows: int, use_bounded_rows: bool) -> RowPolicy:
        """Processed prefix for a buffer of ``full_rows`` (bounded only with a capacity and the caller's say-so)."""
        return select_active_rows(full_rows, token_capacity=self.token_capacity, use_bounded_rows=use_bounded_rows)

    # -- forward -----------------------------------------------------------------------------------
    def forward_routed(
        self,
        x: torch.Tensor,
        probs: torch.Tensor,
        routing_map: torch.Tensor,
        *,
        valid_tokens: ValidTokens = None,
        use_bounded_rows: bool = False,
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Routed contract (module docstring). ``use_bounded_rows``: the caller guarantees every valid row
        lies in ``[0, token_capacity)`` this step (decode-only on every EP rank); then only that prefix is read.
        Returns ``out`` (rows past the prefix untouched) or a new fp32 ``[T, H]`` (zeros past the prefix)."""
        return self._run(x, probs, routing_map, valid_tokens=valid_tokens, use_bounded_rows=use_bounded_rows, out=out,
                         route_experts=self.num_global_experts)

    def _run(self, x, probs, routing_map, *, valid_tokens, use_bounded_rows, out, route_experts):
        """The backend call of both contracts; ``route_experts``: the experts the map's pairs spread over (global
        for the routed contract, local for the permuted one), a tile-choice hint."""
        state = self.build_()
        policy = self.row_policy(x.shape[0], use_bounded_rows)
        return self._impl.run(
            state,
            x,
            probs,
            routing_map,
            activation=self.activation,
            local_expert_offset=self.local_expert_offset,
            num_global_experts=self.num_global_experts,
            valid_tokens=valid_tokens,
            rows=policy.rows,
            out=out,
            route_experts=route_experts,
        )

    def forward_permuted(
        self,
        x: torch.Tensor,
        tokens_per_expert: torch.Tensor,
        probs: torch.Tensor,
        *,
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Permuted contract: ``x [R, H]`` grouped by local expert (``tokens_per_expert [E]`` rows each, in
        order), ``probs [R]`` (or ``[R, 1]``). Rows past ``sum(tokens_per_expert)`` are padding (the flex dispatcher's
        static-shape / zero-copy mode hands its whole ``[recv_capacity, H]`` buffer): they belong to no expert and
        come out as zeros. Returns ``[R, H]`` in ``x.dtype``, or ``out[:R]`` when ``out`` (``[>= R, H]``, e.g. that
        dispatcher's persistent buffer) is given; rows past R untouched. A CPU ``tokens_per_expert`` that sums to
        more than R raises; a device one is not read on the host (its rows past R are not computed). CPU counts reach a
        CUDA ``x`` through pinned memory, with no stream synchronization, and are refused during CUDA-graph capture."""
        experts = self.num_local_experts
        if not isinstance(tokens_per_expert, torch.Tensor) or tuple(tokens_per_expert.shape) != (experts,):
            shape = tuple(tokens_per_expert.shape) if isinstance(tokens_per_expert, torch.Tensor) else type(tokens_per_expert).__name__
            raise MXFP8InputError(f"tokens_per_expert: expected a tensor [{experts}], got {shape}")
        if x.dim() != 2:
            raise MXFP8InputError(f"x: expected [R, H], got {tuple(x.shape)}")
        total = x.shape[0]
        if probs.numel() != total or probs.dim() not in (1, 2):
            raise MXFP8InputError(f"probs: expected [{total}] (one weight per permuted row), got {tuple(probs.shape)}")
        if out is not None and (out.dim() != 2 or out.shape[0] < total or out.shape[1] != x.shape[1]):
            raise MXFP8InputError(f"out: expected a buffer [>= {total}, {x.shape[1]}], got {tuple(out.shape)}")
        counts = tokens_per_expert.to(torch.int64)
        if counts.device.type == "cpu":
            if cuda_graph_capturing():
                raise MXFP8InputError("tokens_per_expert: on the CPU while a CUDA graph is captured (a replay would "
                                      "not read new counts); pass them on the GPU")
            counted = int(tokens_per_expert.sum())  # the given values (a negative fraction is not cast to 0)
            if counted > total or (tokens_per_expert < 0).any():
                raise MXFP8InputError(f"tokens_per_expert: {tokens_per_expert.tolist()} sums to {counted} (counts "
                                      f"must be >= 0 and sum to at most the {total} rows of x)")
            if x.device.type == "cuda":
                counts = counts.pin_memory()  # a pageable copy would synchronize the stream (training's CPU counts)
        counts = counts.to(x.device, non_blocking=True)  # no-op where they already are on x's device
        # row r belongs to the first expert whose cumulative count exceeds r; rows past the sum get E (-> -1: none)
        ends = torch.cumsum(counts, 0)  # no host sync
        ids = torch.searchsorted(ends, torch.arange(total, device=x.device), right=True)  # [R] in [0, E]
        routing_map = torch.where(ids < experts, ids + self.local_expert_offset, -1).unsqueeze(-1)  # [R, 1] global ids
        # the permuted rows belong to local experts (or none): R pairs over the local experts (not the global count)
        result = self._run(x, probs.reshape(total, 1).to(torch.float32), routing_map, valid_tokens=None,
                           use_bounded_rows=False, out=None, route_experts=experts)
        if out is not None:
            out[:total].copy_(result)  # x may alias out (zero-copy dispatch): result is complete before the copy
            return out[:total]
        return result.to(x.dtype)

    def forward(
        self,
        x: torch.Tensor,
        tokens_per_expert: Optional[torch.Tensor],
        probs: torch.Tensor,
        routing_map: Optional[torch.Tensor] = None,
        *,
        valid_tokens: ValidTokens = None,
        use_bounded_rows: bool = False,
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Megatron's argument order: routed contract when ``routing_map`` is given, else permuted."""
        if routing_map is not None:
            return self.forward_routed(
                x, probs, routing_map, valid_tokens=valid_tokens, use_bounded_rows=use_bounded_rows, out=out
            )
        if tokens_per_expert is None:
            raise MXFP8InputError("tokens_per_expert: required when routing_map is None (permuted contract)")
        return self.forward_permuted(x, tokens_per_expert, probs, out=out)


__all__ = ["MXFP8ExpertLayer"]
