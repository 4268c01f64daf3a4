"""``refit_experts``: the validated, in-place weight sync of MXFP8 routed experts for RL loops.

refit: validate (``validate.py``) -> ``quantize_`` / ``copy_`` into the existing canonical storage -> the
weights' write hooks repack derived kernel stacks in place -> ``refresh_cache()`` hooks.

Storage addresses never change, so CUDA graphs captured before a refit replay the new weights.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Optional

import torch

from .validate import (
    COPY,
    ExpertsModule,
    RefitPlan,
    RefitValidator,
    Weights,
    as_entries,
    as_pair,
    nonfinite_error,
    refit_error,
)

logger = logging.getLogger(__name__)

PROGRESS_MIN_ENTRIES = 64  # below this many entries no progress bar is shown


@dataclasses.dataclass(frozen=True)
class RefitReport:
    """What one ``refit_experts`` call wrote.

    experts_updated: distinct (experts module, local expert) pairs with at least one weight written.
    tensors_updated: canonical weights written (one per entry that was not skipped).
    bytes_written: canonical bytes written: per weight ``[M, K]``, ``M*K`` fp8 data + ``Mp*Cp`` scale bytes
      (derived stacks written by hooks are not counted).
    seconds: wall time of the call, validation and hooks included (CUDA work synchronized at the end).
    modules_touched: paths (in ``named_modules()``) of the experts modules written, in first-write order.
    skipped: names skipped under ``strict=False`` (not expert weights of this model), in entry order.
    experts: per touched module, its path and the sorted GLOBAL ids of the experts written.
    """

    experts_updated: int
    tensors_updated: int
    bytes_written: int
    seconds: float
    modules_touched: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    experts: tuple[tuple[str, tuple[int, ...]], ...] = ()


class _Totals:
    """Accumulates writes across the plans of one call (one plan for a mapping, one per module for a stream)."""

    def __init__(self):
        self.tensors = 0
        self.bytes = 0
        self.experts: dict[str, tuple[int, set[int]]] = {}  # module path -> (its local_expert_offset, local ids)
        self.skipped: list[str] = []
        self.devices: set[torch.device] = set()

    def add(self, plan: RefitPlan) -> None:
        self.skipped += plan.skipped
        modules = plan.experts  # one module whose slots are its local indices: it owns every batch's stack
        owners = None if len(modules) == 1 and modules[0].aligned else _stack_owners(modules)
        for batch in plan.batches:
            first = batch.writes[0]
            self.tensors += len(batch.indices) if batch.whole else len(batch.writes)
            self.bytes += first.canonical_bytes * len(batch.writes)  # one stack: one shape
            if batch.stack is None:
                self._ids(first.experts).add(first.local_index)
                self.devices.add(first.target.device)
                continue
            self.devices.add(batch.stack.device)
            owner = first.experts if batch.whole or owners is None else owners.get(id(batch.stack))
            if owner is not None:  # a whole stack's indices are 0..E-1
                self._ids(owner).update(range(len(batch.indices)) if batch.whole else batch.indices)
            else:  # a stack that several modules of the plan name, or views whose slot is not their local index
                for write in batch.writes:
                    self._ids(write.experts).add(write.local_index)

    def _ids(self, info: ExpertsModule) -> set[int]:
        """The local ids written so far of experts module ``info``."""
        return self.experts.setdefault(info.path, (info.local_expert_offset, set()))[1]

    def report(self, seconds: float) -> RefitReport:
        return RefitReport(
            experts_updated=sum(len(ids) for _, ids in self.experts.values()),
            tensors_updated=self.tensors,
            bytes_written=self.bytes,
            seconds=seconds,
            modules_touched=tuple(self.experts),
            skipped=tuple(self.skipped),
            experts=tuple((path, tuple([offset + index for index in sorted(ids)]))
                          for path, (offset, ids) in self.experts.items()),
        )


def _stack_owners(modules: Sequence[ExpertsModule]) -> dict[int, Optional[ExpertsModule]]:
    """id(stack) -> the one module of ``modules`` whose per-expert weights are views of it, when its views' stack
    slots are its local indices (a batch's ``indices`` are then that module's local ids); None for a stack that
    several of them name, or a module whose slots are not its indices."""
    owners: dict[int, Optional[ExpertsModule]] = {}
    for info in modules:
        for stack in info.stacks:
            owners[id(stack)] = None if id(stack) in owners else info if info.aligned else None
    return owners


def _grad_mode(plan: RefitPlan):
    """inference_mode when a target was allocated as an inference tensor (in-place writes need it), else no_grad."""
    for batch in plan.batches:
        target = batch.stack if batch.stack is not None else batch.writes[0].target
        if not target.is_released and target.data.is_inference():
            return torch.inference_mode()
    return torch.no_grad()


def _launch_plan(plan: RefitPlan, progress, applied_modules: Sequence[str]) -> None:
    """Write (launch) every entry of a validated plan; ``_finish_plan`` completes it.

    Quantize writes into per-expert views of one stack go through ``stack.quantize_experts_`` (one kernel
    launch per stack and source dtype with the triton quantizer); copies and lone tensors are written one by
    one. A plan marked ``finite_on_device`` was scanned for NaN/Inf on the device (scans launched during
    validation) and is written with kernels that store nothing once a scan found a bad source; nothing here
    waits for the device. A failure after validation (a write hook raising, out of memory) cannot be undone: it
    raises RefitError naming the entry being written and how many were written before it.
    """
    written = 0
    scan = plan.device_scan if plan.finite_on_device else None  # launched during validation (device_check.py)
    abort = None if scan is None or plan.detects_nonfinite else scan.flags[:1]  # set: the kernels store nothing
    flags = scan.flags if plan.detects_nonfinite else None  # "detect": the kernels flag NaN/Inf while writing
    with _grad_mode(plan):
        for batch in plan.batches:
            first = batch.writes[0]
            nonfinite = None if flags is None else (flags, batch.flag_entry)  # the flags this batch's launch sets
            try:
                if first.kind == COPY:
                    first.target.copy_(first.source, finite_checked=True)
                elif batch.whole:
                    batch.stack.quantize_(batch.sources[0], backend=plan.backend, finite_checked=True, abort_flag=abort,
                                          nonfinite_flags=nonfinite)
                elif batch.stack is None:
                    source = first.source if first.source.is_contiguous() else first.source.contiguous()
                    first.target.quantize_(source, backend=plan.backend, finite_checked=True)
                else:
                    # addresses (None unless the plan read them): the data_ptr()s of this very ``sources`` list, read
                    # after its contiguous copies were made (``_PlanBuilder.add_views``); no source is replaced later
                    batch.stack.quantize_experts_(
                        batch.indices, batch.sources, backend=plan.backend, finite_checked=True, validated=True,
                        abort_flag=abort, source_pointers=batch.addresses,
                        nonfinite_flags=nonfinite,
                    )
            except Exception as error:
                together = (
                    f"; it was written together with {len(batch.writes) - 1} more entries of the same stack "
                    f"({', '.join(repr(write.name) for write in batch.writes[1:4])}"
                    f"{', ...' if len(batch.writes) > 4 else ''}), which may be partly applied"
                    if len(batch.writes) > 1 else ""
                )
                raise refit_error(
                    first.name, f"writing failed after validation ({type(error).__name__}: {error}); "
                    f"{written} earlier entries of this batch were already written and are not rolled back{together}",
                    applied_modules=tuple(applied_modules),
                ) from error
            written += len(batch.writes)
            if progress is not None:
                progress.update(len(batch.writes))


def _finish_plan(plan: RefitPlan, applied_modules: Sequence[str]) -> None:
    """Complete a launched plan: with device flags, ONE host sync reads them; a bad entry raises before the caches
    of the plan's modules are refreshed (its predicated kernels wrote nothing), or, with ``detects_nonfinite``
    (its kernels wrote everything), after them, with the plan's modules counted as applied."""
    scan = plan.device_scan if plan.finite_on_device else None
    bad = None if scan is None else scan.first_bad(plan.writes)  # the one host sync of this plan
    if bad is not None and not plan.detects_nonfinite:
        error = nonfinite_error(bad)
        error.applied_modules = tuple(applied_modules)
        raise error
    refresh_caches(list(plan.modules))  # every module an entry names, also those whose views share one stack
    if bad is not None:
        error = nonfinite_error(bad, written=True)
        error.applied_modules = tuple(applied_modules) + plan.module_paths
        raise error


def refresh_caches(modules: Sequence[torch.nn.Module]) -> None:
    """Call Megatron's post-refit hooks on ``modules`` and their submodules, once each.

    Megatron-Core after 0.19 has ``megatron.core.resharding.execution.refresh_module_caches(modules)``,
    which calls ``refresh_cache()`` on every ``MegatronModule`` below them; it is used when importable.
    Any other module that defines a callable ``refresh_cache()`` (0.19.2 ``MegatronModule`` has none; our
    modules may) is called directly, so this works on its own in 0.19.2.
    """
    if not modules:
        return
    upstream = _upstream_refresh_module_caches()
    covered: tuple[type, ...] = ()
    if upstream is not None:
        upstream(list(modules))
        covered = _megatron_module_type()
    seen: set[int] = set()
    for root in modules:
        for module in root.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            if covered and isinstance(module, covered):
                continue
            hook = getattr(module, "refresh_cache", None)
            if callable(hook):
                hook()


@functools.lru_cache(maxsize=None)  # a failed import is retried (and costs ~0.5 ms) on every call otherwise
def _upstream_refresh_module_caches():
    try:
        from megatron.core.resharding.execution import refresh_module_caches
    except ImportError:
        return None
    return refresh_module_caches


@functools.lru_cache(maxsize=None)
def _megatron_module_type() -> tuple[type, ...]:
    try:
        from megatron.core.transformer.module import MegatronModule
    except ImportError:
        return ()
    return (MegatronModule,)


def _progress_bar(total: Optional[int], enabled: Optional[bool]):
    """A tqdm bar over entries, or None: shown when ``enabled`` is True, or (None) on a tty for long refits."""
    if enabled is None:
        enabled = bool(getattr(sys.stderr, "isatty", lambda: False)()) and (total is None or total >= PROGRESS_MIN_ENTRIES)
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="refit_experts", unit="tensor", leave=False)


def _synchronize(devices: Iterable[torch.device]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def refit_experts(model_or_layer: torch.nn.Module, weights: Weights, *, strict: bool = True, backend: str = "auto",
                  prefix: Optional[str] = None, progress: Optional[bool] = None,
                  nonfinite: str = "reject") -> RefitReport:
    """Write new routed-expert weights into ``model_or_layer``'s canonical MXFP8 storage, in place.

    Args:
        model_or_layer: a model, a PP/VPP chunk, or one experts module; every module in its
            ``named_modules()`` that has ``mxfp8_weights()``, ``num_local_experts`` and ``local_expert_offset``
            is a target (see ``validate.py``).
        weights: EITHER a ``Mapping`` name -> source OR an iterable stream of ``(name, source)`` pairs.
            Names: ``<module path>.linear_fc1.weight<i>`` / ``linear_fc2.weight<i>`` with LOCAL index ``i``
            (relative to ``model_or_layer``; when it is an experts module also its plain local names, or its
            full path in the enclosing model). Sources for a target ``[M, K]`` (fc1 ``[I or 2*I, H]``, fc2
            ``[H, I]``): a logical ``bfloat16``/``float16``/``float32`` tensor ``[M, K]`` on the target's
            device (quantized), or an MXFP8Tensor (ours or Megatron-Core's) of that shape (bytes copied).
            Any subset of experts may be given (partial refit); nothing else changes. Also accepted:
            ``<module path>.linear_fc1.weight`` / ``linear_fc2.weight`` WITHOUT an index for a stacked
            ``[E, M, K]`` source of all local experts of that linear (one entry instead of E; this package's
            extension for trainers that hold stacked expert weights).
        strict: True rejects names that are not expert weights of this model; False skips them (reported in
            ``RefitReport.skipped``). Out-of-range indices, bad sources and duplicates are always errors.
        backend: quantizer backend for logical sources (``"auto"``, ``"reference"``, ``"triton"``,
            ``"flashinfer"``; see ``QuantBackend``: the last takes bf16/fp16 sources only).
        prefix: optional path of ``model_or_layer`` in the model the names come from; stripped from names
            that start with it. When ``model_or_layer`` is one experts module and the names carry its path,
            that path is guessed from the first indexed name under ``strict`` only; with ``strict=False`` or
            index-less names, pass ``prefix`` (else RefitError: another module's weights could land here).
        progress: tqdm bar over entries: None shows it on a tty for ``>= 64`` entries; True/False force it.
        nonfinite: ``"reject"`` (default): NaN/Inf sources are found before any byte is written (atomic, below).
            ``"detect"``: where the device path applies (see NaN/Inf below), the quantize kernels flag NaN/Inf
            while they write, so the sources are read once instead of twice (on an H200, one qwen3-30b-a3b layer
            from stacked bf16 sources: 1.3-1.5x faster);
            a bad source then raises RefitError AFTER its batch (per module for a stream) was written and
            refreshed, naming the first bad entry, with that batch's modules in ``applied_modules``: those
            weights are garbage until the next refit. Every other check still runs before any write, and where
            the device path does not apply NaN/Inf are rejected as with ``"reject"``. For trainers whose weights
            are known finite (vLLM / SGLang weight loading checks nothing).

    Guarantees:
        - Mapping: ATOMIC against bad input. The whole batch is validated first (names, indices, shapes,
          dtypes, devices, NaN/Inf, MXFP8 scale size and NaN bytes, duplicates, sources overlapping the bytes of
          a weight the batch writes: they could be overwritten before they are read); any problem raises
          RefitError naming the offending entry and not one byte of any canonical weight or derived stack
          has been written (with ``nonfinite="detect"``: except NaN/Inf on the device path, see ``nonfinite``).
        - Stream (any iterable that is not a Mapping; consumed once, entries held until the next module is written):
          ATOMIC PER EXPERTS MODULE. Consecutive entries of one experts module are buffered, validated
          together and then written; a module's entries must be contiguous in the stream (a module seen
          again after its group was written raises RefitError). A group is complete when an entry that
          resolves to another module arrives, or the stream ends. When an error is raised, every complete
          group has been fully written and refreshed; the group being buffered (also when the offending entry
          is a name that resolves to no module) and all later ones are untouched. ``error.applied_modules`` lists the modules
          already written (set on any exception raised while the stream is consumed, the generator's own included). Non-expert names skipped under ``strict=False`` do not break a group. A source may
          lie in bytes an earlier group wrote (it is read after that write), not in bytes its own group writes.
          Pipelined: the device writes one module while the host validates the next, so the sources of two experts
          modules are held at a time, and a module's sources are read on the current CUDA stream after the
          generator has moved on to the next module: a generator that reuses its buffers must fill them on
          the current stream (or wait for it) so that the reads of the previous module come first.
        - NaN/Inf: where every write goes into hook-free stacks with the triton quantizer (the Triton
          backend's stacks are the canonical storage), the sources are scanned on the device and the writes are
          predicated on that scan, with ONE host sync per batch (per module for a stream); a bad source raises
          the same RefitError and nothing of its batch is written. Otherwise the scan runs on the host side before any write.
        - Either way, a failure AFTER validation (a write hook raising, out of memory) cannot be rolled back;
          it raises RefitError saying how many entries were already written.
        - Data and scale storage addresses never change; write hooks repack derived stacks in place, also for
          weights whose canonical storage was released. Afterwards ``refresh_cache()`` runs on the touched
          modules (through Megatron's ``refresh_module_caches`` where it exists).

    Returns: a RefitReport; one INFO line is logged. Raises RefitError (see above), TypeError for a
    ``weights`` that is neither a Mapping nor an iterable of pairs. Not thread-safe.
    """
    start = time.perf_counter()
    validator = RefitValidator(model_or_layer, strict=strict, backend=backend, prefix=prefix, nonfinite=nonfinite)
    totals = _Totals()
    streamed = not isinstance(weights, Mapping)
    if not streamed:
        plan = validator.plan(as_entries(weights), finite_on_device=True)
        bar = _progress_bar(len(plan.writes), progress)
        try:
            _launch_plan(plan, bar, ())
            _finish_plan(plan, ())
        finally:
            if bar is not None:
                bar.close()
        totals.add(plan)
    else:
        _refit_stream(validator, weights, totals, progress)
    _synchronize(totals.devices)
    report = totals.report(time.perf_counter() - start)
    if logger.isEnabledFor(logging.INFO):
        _log_report(report, streamed)
    return report


def _log_report(report: RefitReport, streamed: bool) -> None:
    """The one INFO line of a ``refit_experts`` call (formatted only when INFO is enabled)."""
    gigabytes_per_second = report.bytes_written / report.seconds / 1e9 if report.seconds > 0 else float("inf")
    logger.info(
        "refit_experts: %d tensors of %d experts in %d module(s), %.1f MiB canonical in %.3f s (%.2f GB/s)%s%s",
        report.tensors_updated, report.experts_updated, len(report.modules_touched), report.bytes_written / 2**20,
        report.seconds, gigabytes_per_second, " from a stream" if streamed else "",
        f", {len(report.skipped)} non-expert name(s) skipped" if report.skipped else "",
    )


def _refit_stream(validator: RefitValidator, weights: Any, totals: _Totals, progress: Optional[bool]) -> None:
    """Buffer consecutive entries of one experts module, validate them as a batch, write them; repeat.

    Pipelined by one module: module k's writes are launched; then module k+1 is buffered and validated on the
    host (its NaN/Inf scans queue behind k's writes on the device); only then are k's flags read (one host
    sync) and its caches refreshed, and k+1's writes launched. The device writes one module while the host
    validates the next, and the guarantee stays per module: k+1 is written only once k is known good.
    """
    if isinstance(weights, (str, bytes, torch.Tensor)) or not isinstance(weights, Iterable):
        raise TypeError(
            "weights: expected a Mapping name -> tensor or an iterable of (name, tensor) pairs, "
            f"got {type(weights).__name__}"
        )
    total = len(weights) if isinstance(weights, Sequence) else None
    bar = _progress_bar(total, progress)
    applied: list[str] = []  # module paths written completely (launched, flags read, caches refreshed), in order
    group: list[tuple[Any, Any]] = []
    group_hits: list = []  # the target of each group entry (resolved once), handed to plan() with the group's module
    group_info = None  # the group's experts module (validate.ExpertsModule)
    group_path: Optional[str] = None
    pending_skips: list[str] = []
    launched: Optional[RefitPlan] = None  # written, not finished yet: flags unread, caches not refreshed

    def finish_launched() -> None:
        nonlocal launched
        plan, launched = launched, None
        if plan is not None:
            _finish_plan(plan, applied)
            totals.add(plan)
            applied.extend(plan.module_paths)

    def flush() -> None:
        nonlocal group, group_hits, group_path, launched
        if not group:
            return
        plan = validator.plan(group, finite_on_device=True, resolved=list(zip(repeat(group_info), group_hits)))
        group, group_hits, group_path = [], [], None
        finish_launched()
        _launch_plan(plan, bar, applied)
        launched = plan

    try:
        lookup, group_names = validator._lookup, {}  # group_names: full name -> target of the group's module
        for position, item in enumerate(weights):
            if type(item) is not tuple or len(item) != 2:
                item = as_pair(item, position)
            name = item[0]
            hit = group_names.get(name) if type(name) is str else None  # a name of the group's module
            if hit is None:
                resolved = lookup(name) or validator.resolve(name)  # resolve: the names the fast lookup leaves
                if resolved is None:
                    pending_skips.append(name)
                    if bar is not None:
                        bar.update(1)
                    continue
                info, hit = resolved
                if info.path != group_path:
                    flush()
                    if info.path in applied:
                        raise refit_error(
                            name, f"the entries of experts module {info.path!r} are not contiguous in the stream: "
                            "its earlier entries were already validated and written; send each module's entries "
                            "together"
                        )
                    group_path, group_info, group_names = info.path, info, info.names
            group.append(item)
            group_hits.append(hit)
        flush()
        finish_launched()
    except BaseException as error:
        # The module launched before the failure comes first in the stream: finish it, so that it is checked,
        # refreshed and listed as applied. Its own RefitError (a NaN/Inf source) then wins over an Exception;
        # an interrupt (KeyboardInterrupt, SystemExit) stays what it is, with that error logged.
        try:
            finish_launched()
        except Exception:
            if isinstance(error, Exception):
                raise
            logger.exception("refit_experts: finishing the module written before %s failed", type(error).__name__)
        if not getattr(error, "applied_modules", None):  # also on the generator's own errors (a failed broadcast)
            try:
                error.applied_modules = tuple(applied)
            except AttributeError:  # an exception type without a __dict__: the record cannot ride on it
                logger.error("refit_experts: %s raised after these modules were written: %s",
                             type(error).__name__, applied)
        raise
    finally:
        if bar is not None:
            bar.close()
        totals.skipped += pending_skips


__all__ = ["RefitReport", "refit_experts", "refresh_caches"]
