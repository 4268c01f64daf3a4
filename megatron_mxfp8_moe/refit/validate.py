"""Validate a refit batch as a whole and turn it into a plan; nothing here writes a weight byte.

refit: validate (this module) -> quantize_ / copy_ (``apply.py``) -> write hooks repack derived stacks in place.

Targets are found by walking ``model_or_layer.named_modules()`` for experts modules, i.e. modules with

- ``mxfp8_weights() -> dict[str, MXFP8Tensor]`` keyed by LOCAL names ``linear_fc1.weight{i}`` /
  ``linear_fc2.weight{i}`` (``i`` = local expert index; the same tensor objects on every call, since
  their write hooks are what keeps derived kernel stacks in sync),
- ``num_local_experts: int`` and ``local_expert_offset: int`` (global id of local expert 0).

An entry's full name is ``<path in named_modules()>.<local name>`` (see ``names.py``). ``prefix=``, the
path of the refit target in the model the names come from, is stripped from names that start with it.
When the refit target is itself an experts module, names may be relative to it (``linear_fc1.weight3``) or
carry its path in the enclosing model (``decoder.layers.0.mlp.experts.linear_fc1.weight3``); without
``prefix=`` that path is taken from the first such name under ``strict`` only, and only from a name with an
expert index (a second, different path is then an error); with ``strict=False`` or for an index-less
(stacked) name, a path-carrying name needs ``prefix=`` (an error says so), since it could be another module's.

Sources, per entry (target canonical weight ``[M, K]``, ``K % 32 == 0``):

- a logical ``torch.Tensor`` ``[M, K]``, ``bfloat16`` / ``float16`` / ``float32``, strided (any strides:
  apply makes it contiguous), on the target's device, all values finite; quantized with ``quantize_``;
- an MXFP8 tensor, ours or Megatron-Core's ``megatron.core.inference.quantization.mxfp8_tensor.MXFP8Tensor``:
  data ``float8_e4m3fn`` ``[M, K]`` finite, scale ``ceil(M/128)*128 * ceil(K/128)*4`` swizzled E8M0 bytes
  (``float8_e8m0fnu`` or ``uint8``) without the NaN byte 0xFF, both on the target's device; copied with ``copy_``.

No source (a logical tensor as given, an MXFP8 source's data or scale) may overlap the canonical data or scale
bytes of a weight the same batch writes (for a stream: the same module's group): writes run grouped per stack,
not in entry order, so such a source could be overwritten before it is read. A source lying in the bytes of an
expert that the batch does not write is fine. Nor may a source lie in a kernel stack that write hooks of a written
module rewrite (``derived_tensors()`` of the experts module, e.g. a FlashInfer routed or the reference stack).

Every failure raises ``RefitError`` whose message starts with ``refit entry '<name>':`` and says what is
wrong (unknown name, not an expert weight, index out of range, shape, dtype, device, NaN/Inf, scale size,
NaN scale byte, duplicate target, a source overlapping a written weight or a kernel stack its hooks rewrite).

Host cost: per experts module, the name -> target lookup is cached while ``mxfp8_weights()`` returns the same
objects (``_Table``), per (module path, prefix, E) (``_Lookups``), with the per-stack split of the last few lists
of names planned in one piece (``_Layout``: ``RefitValidator._plan_views`` checks such a batch with one pass per
check and stack; any other batch, or one that fails a check, is checked entry by entry, which names the error).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import Any, NoReturn, Optional, Union

import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from ..errors import MXFP8Error, MXFP8InputError, RefitError, ReleasedWeightError
from ..format.checks import check_device, check_shape
from ..format.constants import BLOCK_SIZE, SOURCE_DTYPES
from ..format.swizzle import swizzled_scale_numel
from ..names import ExpertWeightName, join_name, parse_expert_stack_name, parse_expert_weight_name
from ..quant.backends import QuantBackend, resolve_quant_backend
from ..quant.flashinfer import FLASHINFER_SOURCE_DTYPES, flashinfer_source_dtype_problem
from ..tensor import MXFP8Tensor, mxfp8_nan_byte_problem
from .device_check import DeviceScan

Source = Union[torch.Tensor, MegatronMXFP8Tensor]
Weights = Union[Mapping[str, Source], Iterable[tuple[str, Source]]]

_SOURCE_DTYPE_SET = frozenset(SOURCE_DTYPES)

QUANTIZE = "quantize"  # logical source -> target.quantize_(source)
COPY = "copy"  # MXFP8 source -> target.copy_(source)
# refit_experts(nonfinite=...): "reject" checks NaN/Inf before any byte is written (atomic); "detect" lets the quantize
# kernels flag them while writing (one pass over the sources instead of two; the batch is written, then reported)
NONFINITE_MODES = ("reject", "detect")


def _source_error(name: Any, target: MXFP8Tensor, problem: Any) -> RefitError:
    """The RefitError for a source that ``target`` cannot take (the check's message or error, plus the target)."""
    return refit_error(name, f"{problem} (target: {'x'.join(map(str, target.shape))} on {target.device})")


def refit_error(name: Any, reason: str, *, applied_modules: tuple[str, ...] = ()) -> RefitError:
    """A RefitError naming entry ``name``; ``applied_modules`` lists modules already updated (streams only)."""
    error = RefitError(f"refit entry {name!r}: {reason}")
    error.applied_modules = tuple(applied_modules)
    return error


@dataclasses.dataclass(frozen=True, eq=False)
class ExpertsModule:
    """An experts module found in ``named_modules()``.

    path: its path in ``named_modules()`` of the refit target ("" for the target itself).
    module: the module.
    num_local_experts: local experts E; valid local indices are ``0 .. E-1``.
    local_expert_offset: global expert id of local expert 0.
    weights: ``mxfp8_weights()`` as returned once for this refit: local name -> canonical ``MXFP8Tensor``
      ``[M, K]`` (fc1 ``[I or 2*I, H]``, fc2 ``[H, I]``).
    """

    path: str
    module: torch.nn.Module
    num_local_experts: int
    local_expert_offset: int
    weights: Mapping[str, MXFP8Tensor]
    table: Mapping[str, "_Target"] = dataclasses.field(default_factory=dict)  # local name -> resolved target
    in_range: Mapping[str, "_Target"] = dataclasses.field(default_factory=dict)  # ``table``, indices < E only
    # full name as a validator without a guessed prefix looks it up (``[prefix.][path.]local``) -> target, for
    # the names in ``in_range`` (one dict lookup per entry instead of splitting the name)
    names: Mapping[str, "_Target"] = dataclasses.field(default_factory=dict)
    lookups: Optional["_Lookups"] = None  # where ``names`` is cached (with the layouts of the last names planned)
    stacks: tuple = ()  # the stacks its per-expert weights are views of (``_Table.stacks``)
    aligned: bool = True  # every such view's stack slot is its local index (``_Table.aligned``)


@dataclasses.dataclass(frozen=True, eq=False)
class _Target:
    """One canonical weight with what validation needs of it, computed once per experts module."""

    parsed: ExpertWeightName
    target: MXFP8Tensor
    shape: torch.Size
    device: torch.device
    key: Any  # identity of the written bytes (duplicate detection)
    canonical_bytes: int
    stack: Optional[MXFP8Tensor]  # the stack ``target`` is an expert view of (``target.parent``), or None
    index: int  # the view's expert index in ``stack`` (-1 without a stack or for a whole stack)
    whole: bool = False  # ``target`` is a whole stack [E, M, K] (a ``linear_fc1.weight`` entry)
    # whole: the keys of its E experts, in expert order, as a dict (key -> None: a claim copies their hashes)
    keys: Mapping[Any, None] = dataclasses.field(default_factory=dict)
    view_of: Optional[MXFP8Tensor] = None  # ``stack`` for an expert view (``index >= 0``), else None


@dataclasses.dataclass(frozen=True, eq=False)
class _Group:
    """The entries of a ``_Layout`` that write expert views of one stack, in entry order."""

    stack: MXFP8Tensor  # [E, M, K]
    shape: torch.Size  # [M, K], every view's
    device: torch.device
    take: Union[slice, list]  # their positions among the entries (a slice when contiguous)
    indices: list  # their expert indices in ``stack``


@dataclasses.dataclass(frozen=True, eq=False)
class _Layout:
    """A list of entry names that all resolve through one ``_Lookups.full`` to expert views of distinct weights,
    split per stack (``RefitValidator._plan_views``); kept in that ``_Lookups`` for later plans of the same
    names, so it holds exactly as long as the name lookup it was derived from."""

    names: list
    hits: list  # per entry: its ``_Target``
    keys: list  # per entry: its target's key (all distinct)
    groups: Optional[tuple]  # ``_Group`` per stack, in first-entry order; None: names that are not such a batch


@dataclasses.dataclass(eq=False)
class _Lookups:
    """What a validator looks names up in for one (module path, prefix, E), cached on the module's ``_Table``.

    local / full: local name / full name (``[prefix.][path.]local``) -> target, for the local indices below E.
    layouts: the ``_Layout`` of the last ``_LAYOUTS_KEPT`` distinct name lists planned against ``full``, most
    recent first (a loop that refits fc1 and fc2, or two halves of the experts, in turn reuses each).
    """

    local: dict
    full: dict
    layouts: list = dataclasses.field(default_factory=list)


_LAYOUTS_KEPT = 4


@dataclasses.dataclass(eq=False)
class _Table:
    """The lookup table of one experts module, cached per module (``_TABLES``) while ``mxfp8_weights()`` returns
    the same names, in the same order, mapped to the same objects, and no whole stack or lone tensor was released
    since (a lone tensor's key is its storage address while it has storage: after release, that address may
    belong to another tensor)."""

    weights: dict  # mxfp8_weights() when the table was built
    targets: dict  # local name -> _Target
    wholes: tuple  # the whole-stack targets
    top: int  # the largest local index of a per-expert target (-1 for none)
    stacks: tuple = ()  # the stacks the per-expert targets are views of, in first-name order
    aligned: bool = True  # every view's expert index in its stack is its local index
    lones: tuple = ()  # the lone (not a view) targets that had storage when the table was built
    _lookups: dict = dataclasses.field(default_factory=dict)  # (path, strip, E) -> ``lookups()``

    def lookups(self, path: str, strip: Optional[str], num_local: int) -> _Lookups:
        """The names of the targets with a local index below ``num_local`` (what ``RefitValidator._lookup`` may
        resolve without a range check; other names go to ``resolve``'s error), full names as
        ``[strip][path.]local``; built once per module path, prefix and E."""
        key = (path, strip, num_local)
        found = self._lookups.get(key)
        if found is None:
            in_range = self.targets if self.top < num_local else {
                local: hit for local, hit in self.targets.items() if hit.parsed.local_index < num_local
            }
            base = (strip or "") + (path + "." if path else "")
            found = self._lookups[key] = _Lookups(in_range, {base + local: hit for local, hit in in_range.items()})
        return found


_TABLES: "weakref.WeakKeyDictionary[torch.nn.Module, _Table]" = weakref.WeakKeyDictionary()


def _cached_table(module: torch.nn.Module, weights: Mapping[str, MXFP8Tensor]) -> Optional[_Table]:
    """The cached lookup table of ``module`` when ``weights`` holds the same names, in the same order, mapped
    to the same objects as when it was built; else None."""
    cached = _TABLES.get(module)
    if cached is None:
        return None
    old = cached.weights
    if len(old) == len(weights) and list(old) == list(weights) and all(
        map(operator.is_, old.values(), weights.values())
    ) and not any(hit.target.is_released for hit in cached.wholes) and not any(  # no whole-stack entry once released
        target.is_released for target in cached.lones  # a released lone tensor's key is no longer its address
    ):
        return cached
    return None


def _lookup_table(module: torch.nn.Module, weights: Mapping[str, MXFP8Tensor]) -> _Table:
    """Local name -> ``_Target`` for ``weights`` (the caller checked they are MXFP8Tensors), cached per module."""
    table = {}
    for name, target in weights.items():
        parsed = parse_expert_weight_name(name)
        if parsed is None or parsed.module_path:
            continue  # not a local expert-weight name: such an entry resolves to "no such weight"
        parent = target.parent
        # an int key hashes fastest; (stack identity, expert index) names the written bytes of a view
        key = (id(parent[0]) << 20) | parent[1] if parent is not None else _target_key(target)
        stack = parent[0] if parent is not None else None
        table[name] = _Target(parsed, target, torch.Size(target.shape), target.device, key,
                              canonical_nbytes(target.shape), stack, parent[1] if parent is not None else -1,
                              view_of=stack)
    top = max((hit.parsed.local_index for hit in table.values()), default=-1)
    for linear in ("fc1", "fc2"):  # "linear_fc1.weight": the whole stack, when the views are exactly one stack
        views = [hit for hit in table.values() if hit.parsed.linear == linear]
        stack = views[0].stack if views else None
        if stack is None or stack.is_released or any(hit.stack is not stack for hit in views):
            continue
        if sorted(hit.index for hit in views) != list(range(stack.shape[0])):
            continue
        by_index = sorted(views, key=lambda hit: hit.index)
        table[f"linear_{linear}.weight"] = _Target(
            ExpertWeightName("", linear, 0), stack, torch.Size(stack.shape), stack.device, None,
            sum(hit.canonical_bytes for hit in views), stack, -1, True, dict.fromkeys(hit.key for hit in by_index),
        )
    views = [hit for hit in table.values() if hit.index >= 0]
    built = _Table(dict(weights), table, tuple(hit for hit in table.values() if hit.whole), top,
                   tuple({id(hit.stack): hit.stack for hit in views}.values()),
                   all(hit.index == hit.parsed.local_index for hit in views),
                   tuple(hit.target for hit in table.values() if hit.stack is None and not hit.target.is_released))
    try:
        _TABLES[module] = built
    except TypeError:  # a module that cannot be weakly referenced: no cache
        pass
    return built


@dataclasses.dataclass(eq=False, slots=True)
class PlannedWrite:
    """One validated write (five fields, so that a 256-entry plan is cheap to build; the rest are derived).

    name: the entry's name as given.
    experts: the target experts module; ``module_path`` / ``module`` are its path and module.
    linear: ``"fc1"`` / ``"fc2"``; local_index: local expert index; global_index = offset + local_index
      (both -1 for a whole-stack entry ``linear_fc1.weight``, whose ``target`` is the stack ``[E, M, K]``).
    target: the canonical ``MXFP8Tensor`` ``[M, K]`` that is written.
    source: the logical tensor ``[M, K]`` (kind ``"quantize"``) or MXFP8 tensor (kind ``"copy"``).
    canonical_bytes: bytes of the target's canonical storage, ``M*K + Mp*Cp``.
    """

    name: str
    experts: ExpertsModule
    resolved: "_Target"
    source: Source
    kind: str

    @property
    def module_path(self) -> str:
        return self.experts.path

    @property
    def module(self) -> torch.nn.Module:
        return self.experts.module

    @property
    def linear(self) -> str:
        return self.resolved.parsed.linear

    @property
    def local_index(self) -> int:
        return -1 if self.resolved.whole else self.resolved.parsed.local_index

    @property
    def global_index(self) -> int:
        return -1 if self.resolved.whole else self.experts.local_expert_offset + self.resolved.parsed.local_index

    @property
    def target(self) -> MXFP8Tensor:
        return self.resolved.target

    @property
    def canonical_bytes(self) -> int:
        return self.resolved.canonical_bytes


@dataclasses.dataclass(eq=False)
class WriteBatch:
    """Writes that run as one kernel launch: quantize writes of one source dtype into expert views of one
    stack (``stack`` set, ``indices`` / ``sources`` aligned with ``writes``), one write of a whole stack
    (``whole``), or a single other write. ``writes`` is a list, or for a plan from ``_plan_views`` a sequence
    whose writes are made on access."""

    writes: Sequence[PlannedWrite]
    stack: Optional[MXFP8Tensor] = None
    indices: list[int] = dataclasses.field(default_factory=list)
    sources: list[torch.Tensor] = dataclasses.field(default_factory=list)  # contiguous logical sources
    whole: bool = False  # one write of a whole stack: ``sources`` is ``[stacked [E, M, K] source]``
    addresses: Optional[list[int]] = None  # ``data_ptr()`` of ``sources``, where the plan computed them
    flag_entry: int = -1  # a plan's ``detects_nonfinite``: the NaN/Inf flag of ``sources[0]`` (``flags[1 + entry]``)


@dataclasses.dataclass(frozen=True, eq=False)
class RefitPlan:
    """A validated batch: every write in ``writes`` passed every check (NaN/Inf too, unless
    ``finite_on_device``); nothing has been written yet.

    writes: in entry order (a tuple, or a sequence whose writes are made on access). skipped: names skipped under
    ``strict=False`` (not expert weights of this model). backend: the quantizer backend name for ``quantize_``.
    batches: every write exactly once.
    """

    writes: Sequence[PlannedWrite]
    skipped: tuple[str, ...]
    backend: str
    finite_on_device: bool = False  # True: NaN/Inf not checked yet; apply.py checks on the device as it writes
    detects_nonfinite: bool = False  # finite_on_device, no scan: the quantize kernels flag NaN/Inf while writing
    batches: tuple[WriteBatch, ...] = ()  # the writes grouped for launching, in first-write order
    device_scan: Optional[DeviceScan] = None  # finite_on_device: the launched scans and their flags
    experts: tuple[ExpertsModule, ...] = ()  # the experts modules the writes name, in first-write order

    @property
    def canonical_bytes(self) -> int:
        """Canonical bytes the plan writes (fp8 data plus swizzled scales of every target)."""
        return sum(write.canonical_bytes for write in self.writes)

    @property
    def module_paths(self) -> tuple[str, ...]:
        """Paths of the experts modules the plan writes, in first-write order."""
        return tuple(info.path for info in self.experts)

    @property
    def modules(self) -> tuple[torch.nn.Module, ...]:
        """The experts modules the plan's entries name, in first-write order (several may share a stack)."""
        return tuple(info.module for info in self.experts)


def canonical_nbytes(shape) -> int:
    """Canonical bytes of an MXFP8 weight of logical ``shape`` ``[M, K]``: ``M*K`` data + ``Mp*Cp`` scales."""
    rows, cols = int(shape[-2]), int(shape[-1])
    return rows * cols + swizzled_scale_numel(rows, cols // BLOCK_SIZE)


def _is_experts_module(module: torch.nn.Module) -> bool:
    return callable(getattr(module, "mxfp8_weights", None)) and hasattr(module, "num_local_experts")


def _target_key(target: MXFP8Tensor):
    """Identity of a canonical weight's storage, so two names aliasing one weight count as duplicates."""
    if not target.is_released:
        data = target.data
        if data.data_ptr():
            return ("storage", str(data.device), data.data_ptr())
    return ("object", id(target))


class RefitValidator:
    """Resolves and checks refit entries against one model; used once per ``refit_experts`` call.

    Holds the experts modules of the model (walked once), the prefix of a root experts module, and the
    targets already claimed by earlier entries (duplicate detection across a whole stream).
    Not thread-safe.
    """

    def __init__(self, model_or_layer: torch.nn.Module, *, strict: bool = True, backend: str = "auto",
                 prefix: Optional[str] = None, nonfinite: str = "reject"):
        if not isinstance(model_or_layer, torch.nn.Module):
            raise TypeError(f"model_or_layer: expected a torch.nn.Module, got {type(model_or_layer).__name__}")
        if nonfinite not in NONFINITE_MODES:
            raise ValueError(f"nonfinite: expected one of {NONFINITE_MODES}, got {nonfinite!r}")
        self.detect_nonfinite = nonfinite == "detect"  # device-checked plans: flag NaN/Inf while writing, no scan
        if not isinstance(backend, str):
            raise TypeError(f"backend: expected a str, got {type(backend).__name__}")
        self.strict = bool(strict)
        self.backend = backend
        self._flashinfer = backend == "flashinfer"  # its kernel takes no fp32 sources
        self._module_paths: dict[str, torch.nn.Module] = {}
        self._experts_candidates: dict[str, torch.nn.Module] = {}
        for path, module in model_or_layer.named_modules():
            self._module_paths[path] = module
            if _is_experts_module(module):
                self._experts_candidates[path] = module
        self._experts: dict[str, ExpertsModule] = {}
        self._root_is_experts = "" in self._experts_candidates
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(f"prefix: expected a str or None, got {type(prefix).__name__}")
        self._prefix = prefix.rstrip(".") if prefix else None
        self._explicit_prefix = self._prefix is not None
        self._strip = self._prefix + "." if self._explicit_prefix else None  # stripped from names by _lookup
        self._claimed: dict[Any, str] = {}  # target key -> entry name that claimed it
        self._checked_backends: set[torch.device] = set()
        # the module the last successful lookup found, and its full names (a run of names of one module is looked
        # up with one dict access each)
        self._recent: Optional[ExpertsModule] = None
        self._recent_names: Mapping[str, _Target] = {}

    # -- modules -------------------------------------------------------------------------------------
    def _experts_module(self, path: str, name: str) -> ExpertsModule:
        cached = self._experts.get(path)
        if cached is not None:
            return cached
        module = self._experts_candidates[path]
        label = f"experts module {path or type(module).__name__!r}"
        num_local = getattr(module, "num_local_experts", None)
        offset = getattr(module, "local_expert_offset", None)
        for attribute, value in (("num_local_experts", num_local), ("local_expert_offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise refit_error(name, f"{label}: {attribute} must be an int >= 0, got {value!r}")
        weights = module.mxfp8_weights()
        if not isinstance(weights, Mapping):
            raise refit_error(name, f"{label}: mxfp8_weights() must return a dict, got {type(weights).__name__}")
        cached = _cached_table(module, weights)  # a hit: the same objects as last time, checked then
        if cached is None:
            for key, value in weights.items():
                if not isinstance(value, MXFP8Tensor):
                    raise refit_error(
                        name, f"{label}: mxfp8_weights()[{key!r}] must be a megatron_mxfp8_moe.MXFP8Tensor, "
                        f"got {type(value).__name__}"
                    )
            cached = _lookup_table(module, weights)
        lookups = cached.lookups(path, self._strip, num_local)
        info = ExpertsModule(path, module, num_local, offset, weights, cached.targets, lookups.local, lookups.full,
                             lookups, cached.stacks, cached.aligned)
        self._experts[path] = info
        return info

    def _known_paths(self) -> str:
        paths = [repr(path) for path in self._experts_candidates]
        shown = ", ".join(paths[:4]) + (f", ... ({len(paths)} in all)" if len(paths) > 4 else "")
        return shown or "none"

    def _resolve_path(self, parsed: ExpertWeightName, name: str, stacked: bool = False) -> Optional[str]:
        """Path of the experts module ``parsed`` addresses, or None when it addresses none here."""
        path = parsed.module_path
        if path in self._experts_candidates:
            return path
        if self._explicit_prefix or not self._root_is_experts or path == "" or path in self._module_paths:
            return None
        # A name carrying the root experts module's path in the enclosing model.
        if self._prefix is None:
            # Guessed only where a wrong guess cannot pass unnoticed: under strict every later name must carry
            # the same path; an index-less name (a dense MLP's 'mlp.linear_fc1.weight' looks the same) and
            # strict=False (a whole model's names, of which this module's are some) would adopt any path.
            if not self.strict or stacked:
                raise refit_error(
                    name, f"this refit targets one experts module, and the path {path!r} in this name cannot be "
                    f"taken as its path in the enclosing model ({'an index-less name' if stacked else 'strict=False'}"
                    f" could belong to another module); pass prefix= with its path, e.g. prefix={path!r}"
                )
            self._prefix = path
            return ""
        if path == self._prefix:
            return ""
        if self.strict:
            raise refit_error(
                name, f"addresses experts module {path!r}, but this refit targets one experts module whose "
                f"names carry the prefix {self._prefix!r}; pass prefix= to say which one it is"
            )
        return None

    # -- entries -------------------------------------------------------------------------------------
    def _lookup(self, name: Any) -> Optional[tuple[ExpertsModule, _Target]]:
        """Fast path: a well-formed name of a known weight (a full name of the module found last, else a string
        split + table lookups), else None; anything else, and every error message, goes through ``resolve``.
        Modules become known on their first resolve."""
        if type(name) is not str:
            return None
        hit = self._recent_names.get(name)
        if hit is not None:
            return self._recent, hit
        strip = self._strip
        relative = name[len(strip):] if strip is not None and name.startswith(strip) else name
        head, sep, _ = relative.rpartition(".linear_fc")
        if not sep:
            info = self._experts.get("")
            hit = None if info is None else info.in_range.get(relative)
        else:
            info = self._experts.get(head)
            if info is None and head == self._prefix and self._root_is_experts:
                info = self._experts.get("")
            hit = None if info is None else info.in_range.get(relative[len(head) + 1:])
        if hit is None:
            return None
        self._recent, self._recent_names = info, info.names
        return info, hit

    def resolve(self, name: Any) -> Optional[tuple[ExpertsModule, _Target]]:
        """Find the target of ``name``: (experts module, target), or None to skip it (strict=False).

        Raises RefitError for a non-str name, a non-expert or unknown name under ``strict``, an index out of
        range, or a module that does not expose the named weight.
        """
        found = self._lookup(name)
        if found is not None:
            return found
        if not isinstance(name, str):
            raise refit_error(name, f"a name must be a str, got {type(name).__name__}")
        relative = name
        if self._explicit_prefix and name.startswith(self._prefix + "."):
            relative = name[len(self._prefix) + 1:]
        parsed = parse_expert_weight_name(relative)
        stacked = parse_expert_stack_name(relative) if parsed is None else None
        if stacked is not None:
            parsed = ExpertWeightName(stacked[0], stacked[1], 0)
        if parsed is None:
            if self.strict:
                raise refit_error(
                    name, "not an expert weight name (expected '<experts module path>.linear_fc1.weight<i>' "
                    "or '...linear_fc2.weight<i>'); pass strict=False to skip non-expert names"
                )
            return None
        path = self._resolve_path(parsed, name, stacked is not None)
        if path is None:
            if self.strict:
                where = self._module_paths.get(parsed.module_path)
                what = f"a {type(where).__name__}, not an experts module" if where is not None else "no such module"
                raise refit_error(
                    name, f"unknown name: module path {parsed.module_path!r} is {what} in this model "
                    f"(experts modules: {self._known_paths()}); pass strict=False to skip it"
                )
            return None
        info = self._experts_module(path, name)
        if not parsed.local_index < info.num_local_experts:
            raise refit_error(
                name, f"local expert index {parsed.local_index} out of range [0, {info.num_local_experts}) "
                f"of experts module {path!r} (global experts {info.local_expert_offset}.."
                f"{info.local_expert_offset + info.num_local_experts - 1}); names use LOCAL indices"
            )
        local = f"linear_{parsed.linear}.weight" if stacked is not None else parsed.local_name
        hit = info.table.get(local)
        if hit is None:
            why = (" as one stack (its expert weights are not the views 0..E-1 of one stored stack)"
                   if stacked is not None else "")
            raise refit_error(name, f"experts module {path!r} exposes no canonical weight {local!r}{why}")
        self._recent, self._recent_names = info, info.names
        return info, hit

    def check_source(self, name: str, target: MXFP8Tensor, source: Any) -> str:
        """Check ``source`` against ``target`` except for finiteness (of logical tensors, and the NaN bytes of an
        MXFP8 source: ``_PlanBuilder`` launches those scans and reads them all at the plan's end); returns the
        write kind. (``plan`` checks the common case inline and calls this for everything else.)"""
        try:
            if isinstance(source, MegatronMXFP8Tensor):
                target.validate_mxfp8_source(source, name="source", finite=False)
                return COPY
            if not isinstance(source, torch.Tensor):
                raise MXFP8InputError(
                    f"source: expected a torch.Tensor (bf16/fp16/fp32) or an MXFP8Tensor, got {type(source).__name__}"
                )
            if source.layout != torch.strided:
                raise MXFP8InputError(f"source: must be a dense (strided) tensor, got layout {source.layout}")
            if source.dtype not in SOURCE_DTYPES:
                allowed = ", ".join(str(dtype) for dtype in SOURCE_DTYPES)
                hint = "; for MXFP8 bytes pass an MXFP8Tensor" if source.element_size() == 1 else ""
                raise MXFP8InputError(f"source: dtype must be one of ({allowed}), got {source.dtype}{hint}")
            check_shape("source", source, target.shape)
            check_device("source", source, target.device)
        except (MXFP8Error, AttributeError, TypeError) as error:
            raise _source_error(name, target, error) from error
        return QUANTIZE

    def _check_backend(self, name: str, device: torch.device) -> None:
        if device in self._checked_backends:
            return
        try:
            resolve_quant_backend(self.backend, device)
        except (ValueError, MXFP8Error) as error:
            raise refit_error(name, f"quantizer backend {self.backend!r} cannot run on {device}: {error}") from error
        self._checked_backends.add(device)

    def _backend_runs(self, device: torch.device) -> bool:
        """Whether the quantizer backend runs on ``device`` (``_check_backend`` without the error)."""
        try:
            self._check_backend("", device)
        except RefitError:
            return False
        return True

    def plan(self, entries: Iterable[tuple[Any, Any]], *, finite_on_device: bool = False,
             resolved: Optional[Sequence] = None) -> RefitPlan:
        """Validate ``entries`` (name, source) as ONE batch and return its plan; writes nothing.

        Every entry is resolved and checked first; then the NaN/Inf check of the logical sources runs: on the
        host (one multi-tensor reduction and one host sync per device and dtype), or, with
        ``finite_on_device`` and a plan that allows it (``_device_check_possible``), on the device: scans are
        launched chunk by chunk while the entries are validated (``device_check.py``), the plan is marked
        ``finite_on_device``, and ``apply.py`` writes with kernels predicated on the scans' flag. Names that
        are skipped under ``strict=False`` go to ``plan.skipped``. Raises RefitError naming the first offending
        entry. ``resolved``: ``resolve(name)`` of every entry, when the caller has it already (a stream groups
        its entries by module that way); not None for any of them.

        The common entry, a logical source for an expert view that continues the run of the entry before it
        (same stack and source dtype, whose backend checks are done), is checked and batched inline; every
        other entry goes through ``_PlanBuilder.add``, which runs the checks in their documented order. Before
        that, entries that can be read ahead (a dict's items, a list of pairs) are tried as a whole by
        ``_plan_views``, which takes the common batch (expert views of one module) with one pass per check.
        """
        columns = _columns(entries)
        if columns is not None:
            planned = self._plan_views(*columns, finite_on_device, resolved)
            if planned is not None:
                return planned
        scan_capacity = len(entries) if self._scans_ahead(finite_on_device) and hasattr(entries, "__len__") else 0
        builder = _PlanBuilder(self, scan_capacity)
        writes, claimed_here, claimed, skipped = builder.writes, builder.claimed_here, self._claimed, []
        experts, copied = builder.experts, builder.copied
        lookup, add, new_write, tensor = self._lookup, builder.add, PlannedWrite, torch.Tensor
        # Runs: id(stack) -> [its batch of the latest source dtype, that dtype, the batch's next scan-ahead count]
        # (a list, so that the count is updated in place); the current run is also held in locals.
        runs: dict[int, list] = {}
        run = run_stack = run_dtype = record = append_index = append_write = append_source = None
        scan_at = _NEVER  # the run's source count at which its next sources go to the scan-ahead
        found_ahead = iter(resolved) if resolved is not None else None
        recent_info, recent_names = None, {}  # ``_lookup``'s first step, inline (from this plan's first lookup on)
        for name, source in entries:
            hit = recent_names.get(name) if found_ahead is None and type(name) is str else None
            if hit is not None:
                info = recent_info
            else:
                found = lookup(name) if found_ahead is None else next(found_ahead)
                if found is None:
                    found = self.resolve(name)
                    if found is None:
                        skipped.append(name)
                        continue
                info, hit = found
                recent_info, recent_names = self._recent, self._recent_names
                experts[info] = None
            key, stack = hit.key, hit.stack
            if stack is not run_stack and id(stack) in runs:  # entries of several stacks interleave: switch runs
                record = runs[id(stack)]
                run, run_dtype, scan_at = record
                run_stack = stack
                append_index, append_write, append_source = run.indices.append, run.writes.append, run.sources.append
            if (
                stack is run_stack
                and hit.index >= 0  # an expert view (not a whole stack, not a lone tensor)
                and isinstance(source, tensor)
                and source.dtype is run_dtype
                and source.shape == hit.shape
                and source.device == hit.device
                and source.layout is _STRIDED
                and key not in claimed_here
                and key not in claimed
            ):
                claimed_here[key] = name
                write = new_write(name, info, hit, source, QUANTIZE)
                writes.append(write)
                append_index(hit.index)
                append_write(write)
                if source.is_contiguous():
                    append_source(source)
                else:
                    append_source(source.contiguous())
                    copied.append(source)
                if len(run.sources) >= scan_at:
                    scan_at = record[2] = builder.scan_due(run)
                continue
            batch = add(name, info, hit, source)
            if batch is not None:  # this entry starts (or resumes) a run
                record = runs[id(stack)] = [batch, source.dtype, builder.next_scan(batch)]
                run, run_stack, run_dtype, scan_at = batch, stack, source.dtype, record[2]
                append_index, append_write, append_source = batch.indices.append, batch.writes.append, \
                    batch.sources.append
        return builder.finish(finite_on_device, skipped)

    def _scan_ahead_possible(self, stack: MXFP8Tensor) -> bool:
        """Cheap precheck before the first scan-ahead launch (``_device_check_possible`` decides at the end)."""
        return not stack.is_released and not stack.has_write_hooks() and _quantizes_with_triton(self.backend, stack)

    def _plan_views(self, names: list, sources: list, finite_on_device: bool,
                    resolved: Optional[Sequence]) -> Optional[RefitPlan]:
        """The plan of a batch whose entries all quantize logical sources into expert views of ONE experts module
        (names as in its full-name dict, distinct weights, one source dtype per stack), with one pass per check and
        stack (the checks of ``plan``'s inline path); None for any other batch or failed check: ``plan`` then checks
        entry by entry and names the offending entry (this records only what that would too; scans launched here
        are dropped, as after any failed plan). The per-stack split of the names is kept (``_Layout``)."""
        if not names or set(map(type, names)) != {str}:
            return None
        if resolved is None:
            found = self._lookup(names[0]) or self.resolve(names[0])  # entry 0's error is the batch's first
            if found is None:
                return None
            info = found[0]
        else:
            info = resolved[0][0]
            if not all(map(operator.is_, map(_FIRST, resolved), repeat(info))):
                return None
        layout = _cached_layout(info, names)
        if layout is None or resolved is not None and layout.hits != list(map(_SECOND, resolved)):
            return None
        if self._claimed and not self._claimed.keys().isdisjoint(layout.keys):
            return None  # a weight an earlier plan of this stream wrote: ``plan`` names the duplicate
        builder = _PlanBuilder(self, len(names) if self._scans_ahead(finite_on_device) else 0)
        builder.writes = _LazyWrites(info, names, layout.hits, sources)
        for group in layout.groups:  # a stack's scan launches before the next stack is checked (harmless if it fails)
            group_sources = sources[group.take] if type(group.take) is slice else list(
                map(sources.__getitem__, group.take))
            if not self._quantizable_views(group, group_sources):
                return None
            builder.add_views(group, group_sources)
        builder.claimed_here.update(zip(layout.keys, names))
        builder.experts[info] = None
        return builder.finish(finite_on_device, [])

    def _scans_ahead(self, finite_on_device: bool) -> bool:
        """Whether a plan scans its sources for NaN/Inf while it is validated (not with ``nonfinite="detect"``,
        where the quantize kernels flag them while writing)."""
        return finite_on_device and not self.detect_nonfinite

    def _quantizable_views(self, group: _Group, sources: list) -> bool:
        """Whether every source is a strided logical tensor of ``group``'s view shape and device, of one dtype that
        the backend takes there (the checks of ``plan``'s inline path, one pass each)."""
        if not all(map(isinstance, sources, repeat(torch.Tensor))):
            return False
        dtype = sources[0].dtype
        if dtype not in _SOURCE_DTYPE_SET or self._flashinfer and dtype not in FLASHINFER_SOURCE_DTYPES:
            return False
        return (
            all(map(operator.is_, map(_DTYPE, sources), repeat(dtype)))
            and all(map(operator.eq, map(_SHAPE, sources), repeat(group.shape)))
            and all(map(operator.eq, map(_DEVICE, sources), repeat(group.device)))
            and all(map(operator.is_, map(_LAYOUT, sources), repeat(_STRIDED)))
            and (group.device in self._checked_backends or self._backend_runs(group.device))
        )


_STRIDED = torch.strided
_NEVER = sys.maxsize  # a source count no batch reaches
_DICT_ITEMS = type({}.items())
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_DTYPE, _SHAPE, _DEVICE, _LAYOUT = (operator.attrgetter(name) for name in ("dtype", "shape", "device", "layout"))
_VIEW_OF, _KEY, _INDEX = (operator.attrgetter(name) for name in ("view_of", "key", "index"))
_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_DATA_PTR = torch.Tensor.data_ptr


def _columns(entries: Any) -> Optional[tuple[list, list]]:
    """(names, sources) of ``entries`` when they can be read ahead: a dict's items, or a list of 2-tuples; else
    None (an iterator is validated as it is consumed, so that its first bad entry raises first)."""
    if not isinstance(entries, _DICT_ITEMS) and not (
        type(entries) is list and entries and set(map(type, entries)) == {tuple} and set(map(len, entries)) == {2}
    ):
        return None
    return list(map(_FIRST, entries)), list(map(_SECOND, entries))


def _cached_layout(info: ExpertsModule, names: list) -> Optional[_Layout]:
    """The ``_Layout`` of ``names`` in ``info``'s full-name dict: a kept one when its names are equal (moved to the
    front), else built and kept in front (the oldest of ``_LAYOUTS_KEPT`` dropped); None when they are not all
    distinct expert views found there."""
    lookups = info.lookups
    if lookups is None:
        return None
    layouts = lookups.layouts
    for position, layout in enumerate(layouts):
        if layout.names == names:
            if position:
                layouts.insert(0, layouts.pop(position))
            break
    else:
        layout = _build_layout(names, list(map(lookups.full.get, names)))
        layouts.insert(0, layout)
        del layouts[_LAYOUTS_KEPT:]
    return layout if layout.groups is not None else None


def _build_layout(names: list, hits: list) -> _Layout:
    """Split entries (``names``, their targets ``hits``) per stack; without groups unless every target is an
    expert view and no two entries write the same weight."""
    stacks = None if None in hits else list(map(_VIEW_OF, hits))
    keys = None if stacks is None or None in stacks else list(map(_KEY, hits))
    if keys is None or len(set(keys)) != len(keys):
        return _Layout(list(names), [], [], None)
    groups = []
    for stack in dict(zip(map(id, stacks), stacks)).values():
        mask = list(map(operator.is_, stacks, repeat(stack)))
        take = list(compress(range(len(hits)), mask))
        group_hits = list(compress(hits, mask))
        if take[-1] - take[0] + 1 == len(take):
            take = slice(take[0], take[-1] + 1)
        groups.append(_Group(stack, group_hits[0].shape, group_hits[0].device, take, list(map(_INDEX, group_hits))))
    return _Layout(list(names), hits, keys, tuple(groups))


class _LazyWrites(Sequence):
    """The writes of a plan from ``RefitValidator._plan_views``, in entry order: each made on first access and
    kept (one object per write), so that a refit that succeeds makes only the ones it reads."""

    def __init__(self, info: ExpertsModule, names: list, hits: list, sources: list):
        self._columns = (info, names, hits, sources)  # per entry: name, ``_Target``, the source as given
        self._made: list = [None] * len(names)

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        write = self._made[index]
        if write is None:
            info, names, hits, sources = self._columns
            write = self._made[index] = PlannedWrite(names[index], info, hits[index], sources[index], QUANTIZE)
        return write


class _Taken(Sequence):
    """The items of ``Sequence`` ``items`` at ``positions`` (a ``range`` or a list), read through on access."""

    def __init__(self, items: Sequence, positions: Sequence[int]):
        self._items, self._positions = items, positions

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._items[position] for position in self._positions[index]]
        return self._items[self._positions[index]]


def _any_claimed(claims: Mapping[Any, str], keys: Mapping[Any, None]) -> bool:
    """Whether any of ``keys`` is in ``claims`` (a set test, skipped for no claims)."""
    return bool(claims) and not claims.keys().isdisjoint(keys.keys())


class _PlanBuilder:
    """The state of one ``RefitValidator.plan`` call: its writes, the targets they claim, their batches and the
    scan-ahead (NaN/Inf scans launched chunk by chunk while the host validates the rest; harmless if the plan
    later fails or turns out not to allow the device check). Not thread-safe."""

    def __init__(self, validator: RefitValidator, scan_capacity: int):
        self.validator = validator
        self.writes: list[PlannedWrite] = []
        self.claimed_here: dict[Any, str] = {}  # target key -> entry name, for this plan
        self.batches: dict[Any, WriteBatch] = {}
        self.scan: Optional[DeviceScan] = None
        self.scan_capacity = scan_capacity  # 0: no scan-ahead (not asked, unknown length, or a copy ruled it out)
        self._scanned: dict[int, list[int]] = {}  # id(batch) -> [its sources handed to the scan, launch size]
        # MXFP8 copy sources: (write position, bool [2] device flags: NaN data byte, NaN scale byte)
        self.copy_flags: list[tuple[int, torch.Tensor]] = []
        self.experts: dict[ExpertsModule, None] = {}  # the modules of the writes, in first-write order
        self.copied: list[torch.Tensor] = []  # logical sources as given where a batch holds a contiguous copy

    def add_views(self, group: _Group, sources: list) -> None:
        """Record the writes of ``group`` (checked: ``RefitValidator._quantizable_views``) from ``sources`` as one
        batch, and launch their NaN/Inf scan (one launch). ``self.writes`` is the plan's ``_LazyWrites``; claims
        are the caller's."""
        take = group.take
        writes = _Taken(self.writes, range(take.start, take.stop) if type(take) is slice else take)
        if not all(map(_IS_CONTIGUOUS, sources)):
            self.copied += [source for source in sources if not source.is_contiguous()]
            sources = [source if source.is_contiguous() else source.contiguous() for source in sources]
        batch = self.batches[(id(group.stack), sources[0].dtype)] = WriteBatch(writes, group.stack,
                                                                               list(group.indices), sources)
        batch.addresses = pointers = list(map(_DATA_PTR, sources))  # for the scan and ``finish``
        if self.scan_capacity:
            if self.scan is None and self.validator._scan_ahead_possible(group.stack):
                self.scan = DeviceScan(self.scan_capacity, group.device)
            if self.scan is not None:
                self.scan.scan_now(writes, sources, pointers)

    def add(self, name: str, info: ExpertsModule, hit: _Target, source: Any) -> Optional[WriteBatch]:
        """Check and record one entry: duplicates, the source, the backend; returns its batch when it is a
        quantize write into an expert view (``plan`` then records that run's next entries inline), else None."""
        validator, claimed_here, claimed = self.validator, self.claimed_here, self.validator._claimed
        if hit.whole:  # set tests, so the common no-clash case runs no Python loop over the stack's experts
            clash = _any_claimed(claimed_here, hit.keys) or _any_claimed(claimed, hit.keys)
        else:
            clash = hit.key in claimed_here or hit.key in claimed
        if clash:
            for index, key in enumerate(hit.keys if hit.whole else (hit.key,)):
                previous = claimed_here.get(key) or claimed.get(key)
                if previous is not None:
                    weight = f"linear_{hit.parsed.linear}.weight{index}" if hit.whole else hit.parsed.local_name
                    raise refit_error(
                        name, f"duplicate: entry {previous!r} already writes {'an expert of ' if hit.whole else ''}"
                        f"this weight ({join_name(info.path, weight)!r})"
                    )
        if (
            isinstance(source, torch.Tensor)
            and source.dtype in _SOURCE_DTYPE_SET
            and source.shape == hit.shape
            and source.device == hit.device
            and source.layout == torch.strided
        ):
            kind = QUANTIZE
        else:
            kind = validator.check_source(name, hit.target, source)
            if kind == COPY:  # its NaN-byte scan, launched now and read with the others in ``finish``
                self.copy_flags.append((len(self.writes), hit.target.mxfp8_nan_flags(source)))
        if kind == QUANTIZE and hit.device not in validator._checked_backends:
            validator._check_backend(name, hit.device)
        if kind == QUANTIZE and validator._flashinfer and (problem := flashinfer_source_dtype_problem(source.dtype)):
            raise refit_error(name, problem)
        if hit.whole:
            claimed_here.update(dict.fromkeys(hit.keys, name))
        else:
            claimed_here[hit.key] = name
        write = PlannedWrite(name, info, hit, source, kind)
        self.writes.append(write)
        if kind != QUANTIZE or hit.stack is None:
            self.batches[id(write)] = (WriteBatch([write], hit.stack, list(range(hit.shape[0])), whole=True)
                                       if hit.whole else WriteBatch([write]))
            self.scan_capacity, self.scan = 0, None  # a copy (or a lone tensor) rules the device check out
            return None
        if hit.whole:
            batch = self.batches[id(write)] = WriteBatch([], hit.stack, list(range(hit.shape[0])), whole=True)
        else:
            batch = self.batches.get((id(hit.stack), source.dtype))
            if batch is None:
                batch = self.batches[(id(hit.stack), source.dtype)] = WriteBatch([], hit.stack)
            batch.indices.append(hit.index)
        batch.writes.append(write)
        if source.is_contiguous():
            batch.sources.append(source)
        else:
            batch.sources.append(source.contiguous())
            self.copied.append(source)
        if self.scan_capacity:
            self._scan_ahead(batch, hit)
        return None if hit.whole else batch

    def _scan_ahead(self, batch: WriteBatch, hit: _Target) -> None:
        """Start the scan-ahead if the plan may allow it; hand ``batch``'s new source over when it is due."""
        scan = self.scan
        if scan is None:
            if not self.validator._scan_ahead_possible(hit.stack):
                return
            scan = self.scan = DeviceScan(self.scan_capacity, hit.device)
        if batch.whole:  # one source, launched at once when large
            scan.add(id(batch), batch.writes[0], batch.sources[0])
            return
        scanned = self._scanned.get(id(batch))
        if scanned is None:
            scanned = self._scanned[id(batch)] = [0, scan.launch_size(batch.sources[0])]
        if len(batch.sources) >= scanned[0] + scanned[1]:
            self.scan_due(batch)

    def next_scan(self, batch: WriteBatch) -> int:
        """The source count of ``batch`` at which ``scan_due`` is to be called next (``_NEVER``: not scanned)."""
        scanned = self._scanned.get(id(batch))
        return _NEVER if scanned is None or self.scan is None else scanned[0] + scanned[1]

    def scan_due(self, batch: WriteBatch) -> int:
        """Hand the sources of ``batch`` not yet scanned to the scan-ahead; returns ``next_scan(batch)``."""
        scanned = self._scanned.get(id(batch))
        if scanned is None or self.scan is None:
            return _NEVER
        count = len(batch.sources)
        if count > scanned[0]:
            self.scan.extend(id(batch), batch.writes[scanned[0]:], batch.sources[scanned[0]:])
            scanned[0] = count
        return count + scanned[1]

    def finish(self, finite_on_device: bool, skipped: list[str]) -> RefitPlan:
        """The check that no source overlaps a written weight (per write only where a copy or the cheap filter
        calls for it), the NaN/Inf check (on the device where the plan allows it, else on the host), the plan."""
        validator, writes = self.validator, self.writes
        batches = tuple(self.batches.values())
        if self.copy_flags or _logical_sources_may_alias(batches, self.copied):
            _check_sources_alias_no_target(writes)
        _check_sources_avoid_derived_stacks(writes, self.experts)
        _check_writes_land(batches)
        on_device = finite_on_device and _device_check_possible(batches, validator.backend)
        detect = on_device and validator.detect_nonfinite
        scan = self.scan
        if detect:  # no scan: flags that the quantize kernels set while writing
            scan = DeviceScan(len(writes), batches[0].stack.device)
            for batch in batches:
                batch.flag_entry = scan.reserve(batch.writes)
        elif on_device:
            if scan is not None:
                for batch in batches:
                    self.scan_due(batch)
            if scan is None or not scan.valid or scan.count != len(writes):
                # entries without a length, or a source the scan could not take: scan every source now
                scan = DeviceScan(len(writes), batches[0].stack.device)
                for batch in batches:
                    scan.extend(id(batch), batch.writes, batch.sources)
            on_device = scan.finish() is not None
        if not on_device:
            scan = None
            _check_finite(writes, _nan_byte_copies(self.copy_flags))
        validator._claimed.update(self.claimed_here)
        return RefitPlan(writes=tuple(writes) if type(writes) is list else writes,  # else a _LazyWrites
                         skipped=tuple(skipped), backend=validator.backend, finite_on_device=on_device,
                         detects_nonfinite=detect, batches=batches, device_scan=scan, experts=tuple(self.experts))


def _check_writes_land(batches: Sequence[WriteBatch]) -> None:
    """Raise RefitError, before any write, for a write into released storage that would reach no write hook (a
    kernel stack whose hooks were removed after the release, ``StackState.close()``); the writes check this again
    as they run, but by then earlier entries would have been written. Only released targets are looked at."""
    for batch in batches:
        stack = batch.stack
        try:
            if stack is not None:
                if stack.is_released:
                    stack._check_writes_land(None if batch.whole else batch.indices)
            else:
                for write in batch.writes:
                    if write.target.is_released:
                        write.target._check_writes_land()
        except ReleasedWeightError as error:
            raise refit_error(batch.writes[0].name, str(error)) from None


def _byte_extent(tensor: torch.Tensor) -> tuple[int, int]:
    """``[first, last + 1)`` byte addresses a strided tensor can touch (empty for no elements)."""
    start = tensor.data_ptr()
    if tensor.is_contiguous():
        return start, start + tensor.nbytes
    if tensor.numel() == 0:
        return start, start
    span = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride())) + 1
    return start, start + span * tensor.element_size()


def _landing(target: MXFP8Tensor) -> tuple[torch.Tensor, ...]:
    """The canonical bytes a write of ``target`` lands in: its data and scale; for a released view, its stack's
    slices while the stack holds its storage; none once the storage is gone (the write reaches only hooks)."""
    if not target.is_released:
        return target.data, target.scale
    parent = target.parent
    if parent is not None and not parent[0].is_released:
        return parent[0].data[parent[1]], parent[0].scale[parent[1]]
    return ()


def _range_index(ranges: list) -> tuple[list, list, list]:
    """``ranges`` (tuples starting with ``begin, end``) sorted by begin, their begins, and per position the
    furthest end among the ranges up to it: the ranges that overlap ``[begin, end)`` are among those up to the last
    one starting before ``end``, counting back while that furthest end is past ``begin``."""
    ranges.sort(key=_FIRST)
    return ranges, list(map(_FIRST, ranges)), list(itertools.accumulate(map(_SECOND, ranges), max))


def _first_source_overlap(writes: Sequence[PlannedWrite], ranges_by_device: dict) -> Optional[tuple]:
    """``(write, range)`` of the first entry (in entry order) whose source overlaps one of ``ranges_by_device``
    (device -> ``[(begin, end, label), ...]`` byte ranges), or None. A logical source as given; an MXFP8 source's
    data and scale."""
    index = {device: _range_index(ranges) for device, ranges in ranges_by_device.items()}
    for write in writes:
        source = write.source
        for tensor in (source.data, source.scale) if write.kind == COPY else (source,):
            begin, end = _byte_extent(tensor)
            ranges, begins, reach = index.get(tensor.device, ((), (), ()))
            position = bisect.bisect_left(begins, end) - 1  # the last range starting before ``end``
            while begin < end and position >= 0 and reach[position] > begin:
                if ranges[position][1] > begin:
                    return write, ranges[position]
                position -= 1
    return None


def _raise_overlap(write: PlannedWrite, what_it_overlaps: str) -> NoReturn:
    what, copy = ("MXFP8 source", "of its data and scale") if write.kind == COPY else ("source", "source.clone()")
    raise refit_error(write.name, f"the {what} overlaps {what_it_overlaps}, so it could be overwritten before it "
                                  f"is read; pass a copy (e.g. {copy}) instead")


def _check_sources_alias_no_target(writes: Sequence[PlannedWrite]) -> None:
    """Raise for the first entry (in entry order) whose source overlaps the bytes of a weight this batch writes
    (``_landing``): writes are grouped per stack, not run in entry order, so it could be read after it was
    overwritten (or read while written). Compares address ranges per device. A source in the bytes of an expert
    that the batch does not write is fine."""
    written: dict[torch.device, list] = {}
    for write in writes:
        for tensor in _landing(write.target):
            written.setdefault(tensor.device, []).append((*_byte_extent(tensor), write.name))
    overlap = _first_source_overlap(writes, written)
    if overlap is not None:
        _raise_overlap(overlap[0], f"the bytes of a weight this refit writes (the target of entry {overlap[1][2]!r})")


def _check_sources_avoid_derived_stacks(writes: Sequence[PlannedWrite], modules: Iterable[ExpertsModule]) -> None:
    """Raise for the first entry whose source lies in a kernel stack that write hooks of the written modules
    rewrite in place (``derived_tensors()`` of an experts module, e.g. a FlashInfer routed or the reference
    backend's stack): the hooks run as the writes land, so a later entry's source there could be overwritten
    before it is read. Any overlap with such a stack counts (the slot a hook rewrites is the backend's business)."""
    derived: dict[torch.device, list] = {}
    for info in modules:
        tensors = getattr(info.module, "derived_tensors", None)
        for tensor in tensors() if callable(tensors) else ():
            derived.setdefault(tensor.device, []).append((*_byte_extent(tensor), info.path))
    if derived:
        overlap = _first_source_overlap(writes, derived)
        if overlap is not None:
            path = overlap[1][2]
            _raise_overlap(overlap[0], "the kernel stack that write hooks of the experts module "
                                       f"{path or '<the refit target>'!r} rewrite during this refit")


def _logical_sources_may_alias(batches: Sequence[WriteBatch], copied: Sequence[torch.Tensor]) -> bool:
    """Whether a logical source of ``batches`` may overlap the storage of a stack (or lone tensor) they write: the
    negative filter that spares ``finish`` the check per write (``_check_sources_alias_no_target``, which makes
    every write of a one-piece plan). Sources as given: ``copied`` holds those a batch holds a contiguous copy of.
    Per batch, its sorted source addresses (``WriteBatch.addresses``, else read here) and a bisect per stored range
    within their span (sources and stacks do interleave in memory, so a span alone rules little out): exact
    against a stack's whole storage, so only a source inside a stack (maybe in an expert the batch does not write)
    passes. Devices are not told apart (one address space; the check per write tells them apart)."""
    stored, groups = [], []  # (begin, end) written into (contiguous); (sorted source addresses, bytes of each)
    singles = list(copied)  # sources taken one by one
    for batch in batches:
        stack = batch.stack
        for tensor in _landing(stack if stack is not None else batch.writes[0].target):
            begin = tensor.data_ptr()
            stored.append((begin, begin + tensor.nbytes))
        sources = batch.sources
        if sources:  # contiguous, of one shape and dtype
            groups.append((sorted(batch.addresses or map(_DATA_PTR, sources)), sources[0].nbytes))
        elif batch.writes[0].kind == QUANTIZE:  # a lone tensor's source, read as given
            singles.append(batch.writes[0].source)
    for source in singles:
        begin, end = _byte_extent(source)
        groups.append(([begin], end - begin))
    stored, begins, reach = _range_index(stored)
    for starts, size in groups:
        low = starts[0]
        position = bisect.bisect_left(begins, starts[-1] + size) - 1
        while size > 0 and position >= 0 and reach[position] > low:  # the stored ranges within the sources' span
            begin, end = stored[position]
            first = bisect.bisect_right(starts, begin - size)  # the first source ending after ``begin``
            if first < len(starts) and starts[first] < end:
                return True
            position -= 1
    return False


def _device_check_possible(batches: Sequence[WriteBatch], backend: str) -> bool:
    """Whether a plan can be checked for NaN/Inf on the device while being written: only quantize writes,
    into expert views of stacks on one device that hold their storage and have no write hooks (a hook would
    repack bytes that an aborted kernel never wrote), with the triton quantizer."""
    if any(batch.stack is None or batch.writes[0].kind != QUANTIZE for batch in batches):
        return False
    stacks = {id(batch.stack): batch.stack for batch in batches}
    if len({stack.device for stack in stacks.values()}) > 1:
        return False
    return bool(stacks) and all(
        not stack.is_released and not stack.has_write_hooks() and _quantizes_with_triton(backend, stack)
        for stack in stacks.values()
    )


def _quantizes_with_triton(backend: str, stack: MXFP8Tensor) -> bool:
    """Whether quantizer ``backend`` resolves to the triton quantizer on ``stack``'s device."""
    try:
        return resolve_quant_backend(backend, stack.device) is QuantBackend.TRITON
    except (ValueError, MXFP8Error):
        return False


def nonfinite_error(write: PlannedWrite, *, written: bool = False) -> RefitError:
    """The RefitError for an entry whose logical source holds NaN or Inf (counts them: one more host sync);
    ``written``: found while writing (``nonfinite="detect"``), so its batch was written."""
    values = write.source.detach()
    nans, infs = int(torch.isnan(values).sum()), int(torch.isinf(values).sum())
    outcome = ("found while writing (nonfinite='detect'): its batch WAS written, so these weights are now garbage; "
               "refit them again with finite values" if written else "nothing was written")
    return refit_error(write.name, f"source holds {nans} NaN and {infs} Inf value(s); {outcome}")


def _nan_byte_copies(copy_flags: Sequence[tuple[int, torch.Tensor]]) -> dict[int, tuple[bool, ...]]:
    """Write position -> ``MXFP8Tensor.mxfp8_nan_flags`` (NaN data byte, NaN scale byte, a scale byte past 2 ** 120)
    of the MXFP8 copy sources holding such bytes; one host
    sync per device for all of them (``MXFP8Tensor.mxfp8_nan_flags`` launched the scans)."""
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for position, flags in copy_flags:
        by_device.setdefault(flags.device, []).append((position, flags))
    bad = {}
    for entries in by_device.values():
        values = torch.stack([flags for _, flags in entries]).tolist()
        bad.update({position: tuple(pair) for (position, _), pair in zip(entries, values) if any(pair)})
    return bad


def _check_finite(writes: list[PlannedWrite], bad_copies: Optional[Mapping[int, tuple[bool, ...]]] = None) -> None:
    """Raise naming the first entry (in entry order) whose source is not finite: a logical source holding NaN or
    Inf, or an MXFP8 source in ``bad_copies`` (``_nan_byte_copies``: write position -> its bad-byte flags).

    Per (device, dtype), one multi-tensor max-abs reduction over all logical sources (``torch._foreach_norm``
    with ``ord=inf``: NaN and Inf propagate into the norm), then one host sync.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[int, torch.Tensor]]] = {}
    for position, write in enumerate(writes):
        if write.kind == QUANTIZE and write.source.numel():
            source = write.source
            groups.setdefault((source.device, source.dtype), []).append((position, source))
    flags = []  # per (device, dtype) group: (entries, bool [n] on the device); one host sync per group
    for entries in groups.values():
        norms = torch._foreach_norm([source for _, source in entries], float("inf"))
        flags.append((entries, torch.isfinite(torch.stack(norms))))
    bad_positions = list(bad_copies or ())
    for entries, ok in flags:
        bad_positions += [position for (position, _), good in zip(entries, ok.tolist()) if not good]
    if bad_positions:
        first = min(bad_positions)
        if bad_copies and first in bad_copies:
            write = writes[first]
            raise _source_error(write.name, write.target, mxfp8_nan_byte_problem("source", *bad_copies[first]))
        raise nonfinite_error(writes[first])


def as_entries(weights: Any) -> Iterable[tuple[Any, Any]]:
    """``weights`` as an iterable of (name, source): a Mapping's items, or the given pairs (each checked)."""
    if isinstance(weights, Mapping):
        return weights.items()
    if isinstance(weights, (str, bytes, torch.Tensor)) or not isinstance(weights, Iterable):
        raise TypeError(
            "weights: expected a Mapping name -> tensor or an iterable of (name, tensor) pairs, "
            f"got {type(weights).__name__}"
        )
    return (as_pair(item, position) for position, item in enumerate(weights))


def as_pair(item: Any, position: int) -> tuple[Any, Any]:
    """Check that stream item ``position`` is a (name, source) pair."""
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise refit_error(f"<item {position}>", f"stream items must be (name, tensor) pairs, got {type(item).__name__}")
    return item[0], item[1]


def validate_refit(model_or_layer: torch.nn.Module, weights: Weights, *, strict: bool = True,
                   backend: str = "auto", prefix: Optional[str] = None) -> RefitPlan:
    """Validate a whole refit batch against ``model_or_layer`` and return its plan. Writes nothing.

    ``weights``: a Mapping name -> source, or an iterable of (name, source) pairs (consumed and held);
    sources as described in the module docstring. ``strict=False`` skips names that are not expert weights
    of this model (``plan.skipped``). Raises RefitError naming the offending entry; TypeError for a
    ``weights`` that is neither.
    """
    validator = RefitValidator(model_or_layer, strict=strict, backend=backend, prefix=prefix)
    return validator.plan(as_entries(weights))


__all__ = [
    "COPY",
    "QUANTIZE",
    "ExpertsModule",
    "PlannedWrite",
    "RefitPlan",
    "RefitValidator",
    "WriteBatch",
    "canonical_nbytes",
    "validate_refit",
]
