"""The canonical MXFP8 weight: fp8 e4m3 data plus E8M0 scales in the cuBLAS 128x4 layout.

A subclass of Megatron-Core 0.19's ``MXFP8Tensor`` (``data``, ``scale``, ``backend``, ``scale_2d()``), so
Megatron code takes it unchanged. Layout:

- ``data``: ``float8_e4m3fn`` ``[M, K]``, or a stack ``[E, M, K]``; contiguous.
- ``scale``: ``float8_e8m0fnu`` swizzled bytes ``[Mp * Cp]`` (or ``[E, Mp * Cp]`` for a stack), where
  ``Mp = ceil(M/128)*128``, ``Cp = ceil(K/32/4)*4``; padding bytes are zero (see ``format/swizzle.py``).

Writes (``quantize_``, ``copy_``) go into the existing storage and then run the registered write hooks,
which is how derived kernel stacks stay in sync (refit: validate -> quantize_ -> hooks repack in place).
A write of one expert of a stack (through its view from ``expert(i)``, or ``quantize_experts_``) runs the
hooks of that expert's live views, then the stack's own hooks (with the whole stack's bytes).
After ``release_storage_()`` the canonical bytes are gone: reads raise ``ReleasedWeightError``, and
writes are quantized into temporaries that only the hooks see (a write that would reach no hook raises).

Not thread-safe: concurrent writes to one tensor must be serialized by the caller.
"""

from __future__ import annotations

import copy
import functools
import weakref
from typing import Callable, Optional, Sequence

import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from .errors import MXFP8InputError, ReleasedWeightError
from .format.checks import check_contiguous, check_device, check_dtype, check_finite, check_quantizable, check_shape
from .format.constants import BLOCK_SIZE, DATA_DTYPE, SCALE_DTYPE
from .format.scales import dequantize_from_bytes
from .format.swizzle import swizzle_scales, swizzled_scale_numel, unswizzle_scales
from .quant.backends import QuantBackend, quantize_into, resolve_quant_backend, source_dtype_problem

# A write hook gets (tensor, data, scale): the tensor it was registered on and that tensor's new canonical
# bytes (its own storage, or temporaries when the storage was released). It must not keep references to the
# temporaries. A stack's own hooks also run after writes of single experts, with the whole stack [E, M, K].
WriteHook = Callable[["MXFP8Tensor", torch.Tensor, torch.Tensor], None]

MAX_FINITE_SCALE_BYTE = 247  # E8M0 2 ** 120: the scale of fp32's largest finite value (amax / 448 rounded up)
_CANONICAL_BACKEND = "triton"  # Megatron-Core's name for the 128x4-swizzled scales of its Triton quantizer


@functools.lru_cache(maxsize=64)
def _padding_mask(rows: int, scale_cols: int, device: torch.device) -> torch.Tensor:
    """bool ``[Mp * Cp]``: True at the padding bytes of the swizzled scales of one ``[rows, scale_cols]`` matrix."""
    logical = swizzle_scales(torch.ones(rows, scale_cols, dtype=torch.uint8, device=device))
    return logical == 0


def _check_matrix_shape(name: str, shape: tuple) -> None:
    """``[M, K]`` / ``[E, M, K]`` with M and K positive and K a multiple of 32 (E may be 0)."""
    if shape[-2] < 1 or shape[-1] < 1 or shape[-1] % BLOCK_SIZE:
        raise MXFP8InputError(f"{name}: M and K must be positive, K a multiple of {BLOCK_SIZE}; got shape {shape}")


def _check_source_dtype(name: str, backend: QuantBackend, source: torch.Tensor) -> None:
    problem = source_dtype_problem(backend, source.dtype)
    if problem:
        raise MXFP8InputError(f"{name}: {problem}")


def _check_source(name: str, source: torch.Tensor, shape, device: torch.device, *, finite: bool) -> None:
    """A logical source for quantization into storage of ``shape`` on ``device``; cheap checks before the scan."""
    check_quantizable(name, source, finite=False)
    check_shape(name, source, shape)
    check_device(name, source, device)
    check_contiguous(name, source)
    if finite:
        check_finite(name, source)


class MXFP8Tensor(MegatronMXFP8Tensor):
    """Canonical MXFP8 weight (see module docstring). Construct with ``quantize_mxfp8`` or ``empty``."""

    def __init__(self, data: torch.Tensor, scale: torch.Tensor, backend: Optional[str] = _CANONICAL_BACKEND):
        """``data`` fp8 ``[M, K]`` / ``[E, M, K]`` and ``scale`` (E8M0 or uint8, ``Mp * Cp`` bytes per matrix, any
        shape), both contiguous and on one device; the tensor keeps them (no copy)."""
        if not isinstance(data, torch.Tensor):
            raise MXFP8InputError(f"data: expected a torch.Tensor, got {type(data).__name__}")
        check_dtype("data", data, (DATA_DTYPE,))
        if data.dim() not in (2, 3):
            raise MXFP8InputError(f"data: must be [M, K] or [E, M, K], got shape {tuple(data.shape)}")
        _check_matrix_shape("data", tuple(data.shape))
        check_contiguous("data", data)
        self._released = False
        self._write_hooks: list[WriteHook] = []
        self._parent: Optional[tuple["MXFP8Tensor", int]] = None  # (stack, expert index) for views from expert()
        self._expert_views: dict[int, list] = {}  # expert index -> weakrefs of views made by expert()
        self._view_hooks_registered = 0  # hooks ever registered on those views (0: none can have hooks)
        self._shape = tuple(data.shape)
        self._device = data.device
        super().__init__(data=data, scale=scale, backend=backend)  # through the checking setters below

    # -- storage access (raises once released) ------------------------------------------------------
    @property
    def data(self) -> torch.Tensor:
        """fp8 e4m3 ``[M, K]`` or ``[E, M, K]``."""
        self._raise_if_released("data")
        return self._data

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        """Rebind the data (e.g. Megatron-Core's ``w.data = stacked[i]``): fp8 e4m3, this tensor's shape and
        device, contiguous."""
        if not isinstance(value, torch.Tensor):
            raise MXFP8InputError(f"data: expected a torch.Tensor, got {type(value).__name__}")
        check_dtype("data", value, (DATA_DTYPE,))
        check_shape("data", value, self._shape)
        check_device("data", value, self._device)
        check_contiguous("data", value)
        self._check_rebind("data", value)
        self._data = value

    @property
    def scale(self) -> torch.Tensor:
        """E8M0 swizzled bytes ``[Mp * Cp]`` or ``[E, Mp * Cp]`` (``float8_e8m0fnu``)."""
        self._raise_if_released("scale")
        return self._scale

    @scale.setter
    def scale(self, value: torch.Tensor) -> None:
        """Rebind the scales: E8M0 or uint8, ``Mp * Cp`` bytes per matrix (any shape), this tensor's device,
        contiguous; kept as an E8M0 view ``[Mp * Cp]`` / ``[E, Mp * Cp]`` of ``value``."""
        if not isinstance(value, torch.Tensor):
            raise MXFP8InputError(f"scale: expected a torch.Tensor, got {type(value).__name__}")
        check_dtype("scale", value, (SCALE_DTYPE, torch.uint8))
        per_matrix = swizzled_scale_numel(self._shape[-2], self._shape[-1] // BLOCK_SIZE)
        if value.numel() != per_matrix * (self._shape[0] if self.is_stacked else 1):
            raise MXFP8InputError(
                f"scale: {value.numel()} bytes do not match data {self._shape} ({per_matrix} swizzled bytes per matrix)"
            )
        check_device("scale", value, self._device)
        check_contiguous("scale", value)
        self._check_rebind("scale", value)
        self._scale = value.view(SCALE_DTYPE).reshape((self._shape[0], per_matrix) if self.is_stacked else (per_matrix,))

    def _check_rebind(self, what: str, value: torch.Tensor) -> None:
        """Storage shared with a stack (a view, or a stack with live views) or released cannot move elsewhere."""
        current = self.__dict__.get("_" + what)
        if current is None and not self._released:
            return  # the constructor's first assignment
        if self._released:
            raise ReleasedWeightError(f"{what}: this MXFP8 weight's storage was released; it cannot be rebound")
        if value.data_ptr() == current.data_ptr():
            return
        if self.has_write_hooks():
            raise MXFP8InputError(
                f"{what}: this MXFP8 weight has write hooks (a kernel stack is repacked from it); rebinding its "
                f"storage would bypass them and leave that stack stale (write with quantize_()/copy_())"
            )
        if self._parent is not None:
            raise MXFP8InputError(
                f"{what}: this tensor is expert {self._parent[1]} of a stack (made by expert()) and shares its "
                f"storage; it cannot be rebound (write with quantize_()/copy_())"
            )
        if self._has_live_views():
            raise MXFP8InputError(
                f"{what}: this stack's expert views (made by expert()) share its storage; it cannot be rebound "
                f"(write with quantize_()/copy_())"
            )

    def _raise_if_released(self, what: str) -> None:
        if self._released:
            raise ReleasedWeightError(
                f"this MXFP8 weight's canonical storage was released after its kernel stack took it over; "
                f"reading {what} is not possible. Write new values with quantize_()/copy_(), which reach the "
                f"kernel stack, or read the stack itself."
            )

    # -- logical metadata --------------------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        """Logical shape ``[M, K]`` or ``[E, M, K]``."""
        return torch.Size(self._shape)

    @property
    def dtype(self) -> torch.dtype:
        """The element dtype of the stored data (``float8_e4m3fn``)."""
        return DATA_DTYPE

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def is_released(self) -> bool:
        return self._released

    @property
    def is_stacked(self) -> bool:
        return len(self._shape) == 3

    def size(self, idx: Optional[int] = None):
        return self.shape if idx is None else self.shape[idx]

    def scale_bytes(self) -> torch.Tensor:
        """The swizzled scale bytes as ``uint8`` (a view)."""
        return self.scale.view(torch.uint8)

    def logical_scales(self) -> torch.Tensor:
        """uint8 E8M0 ``[M, K // 32]`` (or ``[E, M, K // 32]``), unswizzled (a copy)."""
        rows, cols = self._shape[-2], self._shape[-1] // BLOCK_SIZE
        return unswizzle_scales(self.scale_bytes(), rows, cols)

    def __repr__(self) -> str:
        state = "released" if self._released else f"device={self._device}"
        return f"MXFP8Tensor(shape={tuple(self._shape)}, {state}, backend={self.backend!r})"

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape, device="cpu") -> "MXFP8Tensor":
        """Zero-filled storage for logical ``shape`` ``[M, K]`` or ``[E, M, K]``."""
        shape = tuple(shape)
        if len(shape) not in (2, 3):
            raise MXFP8InputError(f"shape must be [M, K] or [E, M, K] with K % 32 == 0, got {shape}")
        _check_matrix_shape("shape", shape)
        per_matrix = swizzled_scale_numel(shape[-2], shape[-1] // BLOCK_SIZE)
        scale_shape = (shape[0], per_matrix) if len(shape) == 3 else (per_matrix,)
        data = torch.zeros(shape, dtype=torch.uint8, device=device).view(DATA_DTYPE)
        scale = torch.zeros(scale_shape, dtype=torch.uint8, device=device).view(SCALE_DTYPE)
        return cls(data, scale)

    @classmethod
    def from_megatron(cls, other: MegatronMXFP8Tensor) -> "MXFP8Tensor":
        """A copy of Megatron-Core's MXFP8Tensor (any 1-byte scale dtype) as a canonical tensor."""
        result = cls.empty(tuple(other.data.shape), device=other.data.device)
        result.copy_(other)
        return result

    def expert(self, index: int) -> "MXFP8Tensor":
        """Expert ``index`` of a stack as an ``[M, K]`` tensor sharing this storage."""
        if not self.is_stacked:
            raise MXFP8InputError("expert(): this tensor is not a stack [E, M, K]")
        if isinstance(index, bool) or not isinstance(index, int):
            raise MXFP8InputError(f"expert(): index must be an int, got {type(index).__name__}")
        if not 0 <= index < self._shape[0]:
            raise MXFP8InputError(f"expert(): index {index} out of range [0, {self._shape[0]})")
        view = type(self)(self.data[index], self.scale[index], backend=self.backend)
        view._parent = (self, index)
        self._expert_views.setdefault(index, []).append(weakref.ref(view))
        return view

    def __deepcopy__(self, memo: dict) -> "MXFP8Tensor":
        """An independent copy (``copy.deepcopy``): its own bytes; a stack's copy links the copies of its live expert
        views (those the copied object graph holds), a view's copy the copy of its stack. Refused (MXFP8InputError)
        when a write of this tensor runs write hooks (a built kernel stack's writeback): hooks are closures over the
        original's kernel stack, so the copy's writes would repack the original's."""
        if self.has_write_hooks():
            raise MXFP8InputError(
                "copy.deepcopy: this MXFP8 weight has write hooks (a kernel stack built from it is repacked through "
                "them), which a copy would share: its writes would repack the original's stack. Deep-copy the layer "
                "before building its kernel stack, or build a new one from the weights (state_dict())"
            )
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        for key, value in self.__dict__.items():
            if key != "_expert_views":
                copied.__dict__[key] = copy.deepcopy(value, memo)
        copied._expert_views = {
            index: [weakref.ref(copy.deepcopy(view, memo)) for view in self._live_views(index)]
            for index in self._expert_views
        }
        return copied

    @property
    def parent(self) -> Optional[tuple["MXFP8Tensor", int]]:
        """``(stack, expert index)`` when this tensor is a view made by ``stack.expert(index)``, else None."""
        return self._parent

    # -- reads ---------------------------------------------------------------------------------------
    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """Logical values ``[M, K]`` / ``[E, M, K]`` in ``dtype`` (computed in float32; exact for fp32/fp64)."""
        return dequantize_from_bytes(self.data, self.logical_scales(), dtype)

    # -- writes --------------------------------------------------------------------------------------
    def register_write_hook(self, hook: WriteHook) -> Callable[[], None]:
        """Run ``hook(tensor, data, scale)`` after every write of this tensor; returns a function that removes it.

        On a view from ``stack.expert(i)``: after every write of expert ``i`` (through any view of it, the stack's
        ``quantize_experts_`` or a whole-stack write), with that expert's bytes ``[M, K]``. On a stack: after every
        write of the whole stack or of any of its experts, once per write call, with the whole stack's bytes
        ``[E, M, K]`` (a per-expert repack belongs on the views).
        """
        self._write_hooks.append(hook)
        if self._parent is not None:
            self._parent[0]._view_hooks_registered += 1  # lets has_write_hooks() skip its scan while 0
        return lambda: self._write_hooks.remove(hook) if hook in self._write_hooks else None

    def release_storage_(self) -> None:
        """Drop the canonical bytes; later reads raise, later writes reach only the write hooks.

        Refused (MXFP8InputError, nothing released) unless every later write reaches a hook: a tensor needs its
        own hooks; a view needs a hooked live view of its expert (itself or another) or hooks on its stack; a
        stack needs a hooked live view of every expert and no own hooks, or own hooks and no live views (its own
        hooks take whole-stack bytes, which a write of single experts cannot give once they are gone). Releasing
        a stack releases its live views too (they share its bytes). A view released while its stack keeps the
        storage writes into the stack (nothing is freed until the stack is released).
        """
        problem = self._release_problem()
        if problem is not None:
            raise MXFP8InputError(f"release_storage_(): {problem}")
        self._release()

    def _release_problem(self) -> Optional[str]:
        """Why ``release_storage_()`` would lose later writes, or None."""
        if self._released:
            return None
        attach = "so later writes would be lost; attach the kernel stack first"
        if self._parent is not None:
            stack, index = self._parent
            if self._write_hooks or stack._write_hooks or stack._expert_hooked(index):
                return None
            return f"no write hook is registered on expert {index} or on its stack, {attach}"
        if not self.is_stacked:
            return None if self._write_hooks else f"no write hook is registered, {attach}"
        if self._write_hooks:
            if self._has_live_views():
                return (
                    "this stack has its own write hooks and live expert views; once released, a write through a "
                    "view cannot give the stack's hooks the whole stack's bytes. Register the hooks on the views"
                )
            return None
        missing = self._unhooked_experts(range(self._shape[0]))
        return f"no write hook is registered for expert(s) {missing}, {attach}" if missing else None

    def _release(self) -> None:
        if self.is_stacked:
            for index in list(self._expert_views):
                for view in self._live_views(index):
                    view._release()
        self._data = None
        self._scale = None
        self._released = True

    def _live_views(self, index: int):
        """The live views of expert ``index`` made by ``expert(index)``."""
        for reference in self._expert_views.get(index, ()):
            view = reference()
            if view is not None:
                yield view

    def _has_live_views(self) -> bool:
        return any(reference() is not None for references in self._expert_views.values() for reference in references)

    def _unhooked_experts(self, indices) -> str:
        """The experts among ``indices`` without a hooked live view, for a message ("" when none)."""
        missing = [index for index in indices if not self._expert_hooked(index)]
        return f"{missing[:8]}{'...' if len(missing) > 8 else ''}" if missing else ""

    def _expert_hooked(self, index: int) -> bool:
        """True when a live view of expert ``index`` has a write hook."""
        return bool(self._view_hooks_registered) and any(view._write_hooks for view in self._live_views(index))

    def has_write_hooks(self) -> bool:
        """True when a write of this tensor would run a hook: its own; for a view, also one of another view of its
        expert or of its stack; for a stack, also one of a live view's."""
        if self._write_hooks:
            return True
        if self._parent is not None:
            stack, index = self._parent
            return bool(stack._write_hooks) or stack._expert_hooked(index)
        if not self._view_hooks_registered:  # no view ever had a hook: nothing to scan
            return False
        return any(self._expert_hooked(index) for index in self._expert_views)

    def _check_writes_land(self, indices: Optional[Sequence[int]] = None) -> None:
        """Raise ReleasedWeightError, before anything is written, when a write into released storage would reach
        no hook. ``indices``: the experts of this stack written one by one (None: a write of all of it)."""
        if self._parent is not None:
            stack, index = self._parent
            if self._released and stack._released:
                stack._check_writes_land([index])
            return  # otherwise it lands in the stack's storage
        if not self._released:
            return
        lost = "this MXFP8 weight's canonical storage was released"
        if not self.is_stacked:
            if not self._write_hooks:
                raise ReleasedWeightError(f"{lost} and it has no write hook left: the write would reach nothing")
            return
        if indices is None:
            if self._write_hooks:
                return
            indices = range(self._shape[0])
        elif self._write_hooks:
            raise ReleasedWeightError(
                f"{lost}; this stack's own write hooks take the whole stack's bytes, which a write of single experts "
                f"cannot give: write the whole stack, or register the hooks on the experts' views"
            )
        missing = self._unhooked_experts(indices)
        if missing:
            raise ReleasedWeightError(f"{lost} and expert(s) {missing} have no write hook left: the write would reach nothing")

    def _write_targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Where a write of this whole tensor goes: its storage; for a released view, its stack's slice while the
        stack holds its storage; else zeroed temporaries."""
        if not self._released:
            return self._data, self._scale
        if self._parent is not None and not self._parent[0]._released:
            stack, index = self._parent
            return stack._data[index], stack._scale[index]
        scratch = MXFP8Tensor.empty(self._shape, device=self._device)
        return scratch._data, scratch._scale

    def _run_hooks(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        for hook in list(self._write_hooks):
            hook(self, data, scale)

    def _after_write(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        """Run hooks after a write of this whole tensor (``data``/``scale``: its new bytes). A view's write is a
        write of one expert of its stack, a stack's a write of every expert (see ``_after_expert_writes``)."""
        if self._parent is not None:
            stack, index = self._parent
            stack._after_expert_writes((index,), (None,), data, scale, whole=False)
        elif self.is_stacked:
            self._after_expert_writes(range(self._shape[0]), range(self._shape[0]), data, scale, whole=True)
        else:
            self._run_hooks(data, scale)

    def _after_expert_writes(self, indices, slots, data: torch.Tensor, scale: torch.Tensor, *, whole: bool) -> None:
        """Hooks after writes of experts ``indices`` of this stack, whose new bytes are ``data[slot]`` /
        ``scale[slot]`` (slot None: ``data``/``scale`` themselves, one expert written through a view): the hooks of every live view of each written expert, with those bytes, then this stack's
        own hooks once, with the whole stack's bytes (``data``/``scale`` when ``whole``, else its storage)."""
        if self._view_hooks_registered:
            for index, slot in zip(indices, slots):
                for view in self._live_views(index):
                    if view._write_hooks:
                        view._run_hooks(data if slot is None else data[slot], scale if slot is None else scale[slot])
        if self._write_hooks:
            if whole:
                self._run_hooks(data, scale)
            else:
                self._run_hooks(self._data, self._scale)  # storage held: _check_writes_land ran before the write

    def validate_source(self, source: torch.Tensor, name: str = "source", *, finite: bool = True) -> None:
        """Raise MXFP8InputError unless ``source`` can be quantized into this tensor (``finite=False``
        skips the NaN/Inf scan, for callers that already scanned a whole batch)."""
        _check_source(name, source, self._shape, self._device, finite=finite)

    def quantize_(
        self,
        source: torch.Tensor,
        backend: str = "auto",
        *,
        finite_checked: bool = False,
        abort_flag: Optional[torch.Tensor] = None,
        nonfinite_flags: Optional[tuple[torch.Tensor, int]] = None,
    ) -> "MXFP8Tensor":
        """Requantize logical ``source`` (bf16/fp16/fp32, this tensor's shape and device) in place.

        Storage addresses stay the same. Bad input raises before any byte is written. ``finite_checked=True``
        skips the NaN/Inf scan (one host sync) when the caller has already scanned the source.
        ``abort_flag`` / ``nonfinite_flags``: as in ``quantize_experts_`` (``source`` is the one source, entry ``first``).
        """
        self.validate_source(source, finite=not finite_checked)
        resolved = resolve_quant_backend(backend, self._device)
        _check_source_dtype("source", resolved, source)
        self._check_writes_land()
        if abort_flag is not None or nonfinite_flags is not None:
            self._check_flagged_write(resolved, True)
            from .quant.triton import quantize_into_triton

            quantize_into_triton(source, self._data, self._scale, abort=abort_flag, nonfinite=nonfinite_flags)
            return self  # no hooks to run (checked)
        data, scale = self._write_targets()
        quantize_into(source, data, scale, resolved)
        self._after_write(data, scale)
        return self

    def _check_flagged_write(self, resolved: QuantBackend, one_dtype: bool) -> None:
        """Raise unless a write with device flags is possible (``one_dtype``: the sources share one)."""
        if resolved is not QuantBackend.TRITON or self._released or self.has_write_hooks() or not one_dtype:
            raise MXFP8InputError(
                "abort_flag / nonfinite_flags need the triton quantizer, one source dtype, and a tensor that holds "
                "its storage and has no write hooks (hooks would repack bytes that were never written)"
            )

    def quantize_experts_(
        self,
        indices: Sequence[int],
        sources: Sequence[torch.Tensor],
        backend: str = "auto",
        *,
        finite_checked: bool = False,
        validated: bool = False,
        abort_flag: Optional[torch.Tensor] = None,
        nonfinite_flags: Optional[tuple[torch.Tensor, int]] = None,
        source_pointers: Optional[Sequence[int]] = None,
    ) -> "MXFP8Tensor":
        """Requantize experts ``indices`` of this stack from logical ``sources`` (``[M, K]`` each) in place.

        ``finite_checked`` skips the NaN/Inf scan; ``validated`` skips every per-source check (the caller,
        e.g. ``refit_experts``, already validated the whole batch against this stack's views).
        ``abort_flag``: device int32 ``[1]`` (triton backend, a stack with storage and no write hooks only):
        the kernel writes nothing while it holds a nonzero value, so a caller can scan the sources on the
        device (``quant.triton.scan_nonfinite_triton``) and write in the same stream without a host sync.
        ``nonfinite_flags``: ``(flags, first)`` (same conditions), flags a zeroed device int32 ``[1 + entries]``: the
        kernel sets ``flags[0]`` and ``flags[1 + first + i]`` when ``sources[i]`` holds NaN/Inf, and writes it all
        the same (``refit_experts(nonfinite="detect")``: the check is one pass with the write).
        ``source_pointers`` (internal, for ``refit_experts``): the ``data_ptr()``s of ``sources``, in order, which
        the one-launch triton path then uses instead of reading them again; honoured only with ``validated=True``
        (the caller vouches for them as for the sources) and that path, ignored otherwise.

        With the triton backend this is ONE kernel launch for the whole batch (the refit fast path). Every
        source is validated before any byte is written. Hooks: the hooks of the written experts' views (made
        by ``expert(i)``) run with that expert's slices, then the stack's own hooks once, with the whole stack
        (on a released stack only when every expert is written, in order ``0..E-1``; else this raises).
        """
        if not self.is_stacked:
            raise MXFP8InputError("quantize_experts_(): this tensor is not a stack [E, M, K]")
        indices = list(map(int, indices))
        if len(indices) != len(sources):
            raise MXFP8InputError(f"quantize_experts_(): {len(indices)} indices but {len(sources)} sources")
        if len(set(indices)) != len(indices) or (indices and not 0 <= min(indices) <= max(indices) < self._shape[0]):
            raise MXFP8InputError(f"quantize_experts_(): indices must be distinct and in [0, {self._shape[0]}), got {indices}")
        view_shape = self._shape[1:]
        for index, source in zip(indices, [] if validated else sources):
            _check_source(f"sources[expert {index}]", source, view_shape, self._device, finite=not finite_checked)
        if not indices:
            return self
        resolved = resolve_quant_backend(backend, self._device)
        if resolved is QuantBackend.FLASHINFER:  # before any write: its per-expert loop below would stop part-way
            for index, source in zip(indices, sources):
                _check_source_dtype(f"sources[expert {index}]", resolved, source)
        whole = indices == list(range(self._shape[0]))  # every expert, in order: data/scale are the whole stack
        self._check_writes_land(None if whole else indices)
        one_dtype = len({source.dtype for source in sources}) == 1
        flagged = abort_flag is not None or nonfinite_flags is not None
        if flagged:
            self._check_flagged_write(resolved, one_dtype)
        if self._released:
            scratch = MXFP8Tensor.empty((len(indices),) + view_shape, device=self._device)
            data, scale, slots = scratch._data, scratch._scale, list(range(len(indices)))
        else:
            data, scale, slots = self._data, self._scale, indices
        if resolved is QuantBackend.TRITON and one_dtype:
            from .quant.triton import quantize_experts_into_triton

            quantize_experts_into_triton(list(sources), slots, data, scale, abort=abort_flag,
                                         nonfinite=nonfinite_flags, pointers=source_pointers if validated else None)
        else:
            for slot, source in zip(slots, sources):
                quantize_into(source, data[slot], scale[slot], resolved)
        if flagged:
            return self  # no hooks to run (checked above)
        self._after_expert_writes(indices, slots, data, scale, whole=whole)
        return self

    def validate_mxfp8_source(self, other, name: str = "other", *, finite: bool = True) -> None:
        """Raise MXFP8InputError unless ``other`` (ours or Megatron's MXFP8Tensor) can be copied in.

        ``finite=False`` skips the byte scans (for callers that already ran them): NaN data bytes and NaN bytes
        among the logical scale bytes (the 128x4 layout's padding bytes are not checked: ``copy_`` zeroes them).
        One pass over the data and one over the scales, one host sync for both.
        """
        if not isinstance(other, MegatronMXFP8Tensor):
            raise MXFP8InputError(f"{name}: expected an MXFP8Tensor, got {type(other).__name__}")
        for field in ("data", "scale"):
            if not isinstance(getattr(other, field), torch.Tensor):
                raise MXFP8InputError(f"{name}.{field}: expected a torch.Tensor, got {type(getattr(other, field)).__name__}")
        check_dtype(f"{name}.data", other.data, (DATA_DTYPE,))
        check_shape(f"{name}.data", other.data, self._shape)
        check_device(f"{name}.data", other.data, self._device)
        check_dtype(f"{name}.scale", other.scale, (SCALE_DTYPE, torch.uint8))
        check_device(f"{name}.scale", other.scale, self._device)
        rows, scale_cols = self._shape[-2], self._shape[-1] // BLOCK_SIZE
        per_matrix = swizzled_scale_numel(rows, scale_cols)
        expected = per_matrix * (self._shape[0] if self.is_stacked else 1)
        if other.scale.numel() != expected:
            raise MXFP8InputError(f"{name}.scale: expected {expected} swizzled bytes, got {other.scale.numel()}")
        if finite:
            problem = mxfp8_nan_byte_problem(name, *self.mxfp8_nan_flags(other).tolist())
            if problem:
                raise MXFP8InputError(problem)

    def mxfp8_nan_flags(self, other) -> torch.Tensor:
        """bool ``[3]`` on ``other``'s device, no host sync: (any e4m3 NaN data byte, any E8M0 NaN byte 0xFF among
        the logical scale bytes, any logical scale byte in 248..254). No finite source quantizes to a scale above
        2 ** 120 (byte 247: fp32's largest value over 448 rounds up to it), and one above it times an e4m3 value
        of 448 overflows fp32: such bytes would dequantize to Inf. ``other`` already passed
        ``validate_mxfp8_source(other, finite=False)``."""
        rows, scale_cols = self._shape[-2], self._shape[-1] // BLOCK_SIZE
        scale = other.scale.view(torch.uint8).reshape(-1, swizzled_scale_numel(rows, scale_cols))
        logical = ~_padding_mask(rows, scale_cols, scale.device)
        return torch.stack((
            ((other.data.view(torch.uint8) & 0x7F) == 0x7F).any(),  # e4m3fn has no Inf; NaN is 0x7F / 0xFF
            ((scale == 255) & logical).any(),
            ((scale > MAX_FINITE_SCALE_BYTE) & (scale < 255) & logical).any(),
        ))

    def copy_(self, other, *, finite_checked: bool = False) -> "MXFP8Tensor":
        """Copy bytes in place from another MXFP8 tensor (ours or Megatron-Core's) of the same shape; the padding
        bytes of the 128x4 layout are written as zero whatever the source holds there (as every quantizer here
        writes them, so that the canonical bytes do not depend on where a weight came from).
        ``finite_checked=True`` skips the byte scans of ``validate_mxfp8_source`` when the caller already ran them."""
        self.validate_mxfp8_source(other, finite=not finite_checked)
        self._check_writes_land()
        data, scale = self._write_targets()
        data.copy_(other.data)
        scale_bytes = scale.view(torch.uint8)
        scale_bytes.copy_(other.scale.view(torch.uint8).reshape(scale.shape))
        rows, scale_cols = self._shape[-2], self._shape[-1] // BLOCK_SIZE
        scale_bytes.masked_fill_(_padding_mask(rows, scale_cols, scale_bytes.device), 0)  # broadcasts over experts
        self._after_write(data, scale)
        return self


def mxfp8_nan_byte_problem(name: str, nan_data: bool, nan_scale: bool, huge_scale: bool = False) -> Optional[str]:
    """What is wrong with MXFP8 source ``name`` given its ``MXFP8Tensor.mxfp8_nan_flags`` (the data first), or None."""
    if nan_data:
        return f"{name}.data: holds non-finite value(s) (the e4m3 NaN encoding)"
    if nan_scale:
        return f"{name}.scale: holds the E8M0 NaN byte 0xFF"
    if huge_scale:
        return (f"{name}.scale: holds E8M0 scale bytes above {MAX_FINITE_SCALE_BYTE} (2 ** 120, the largest scale "
                f"a finite source quantizes to); they would dequantize past float32's range (Inf)")
    return None


def quantize_mxfp8(x: torch.Tensor, backend: str = "auto") -> MXFP8Tensor:
    """Quantize bf16/fp16/fp32 ``x`` ``[M, K]`` or ``[E, M, K]`` (K % 32 == 0, finite) to a new MXFP8Tensor.

    ``backend``: ``"auto"`` (triton on CUDA, reference elsewhere), ``"reference"``, ``"triton"``, ``"flashinfer"``.
    """
    check_quantizable("x", x, finite=False)
    check_contiguous("x", x)
    check_finite("x", x)
    resolved = resolve_quant_backend(backend, x.device)
    result = MXFP8Tensor.empty(tuple(x.shape), device=x.device)
    quantize_into(x, result.data, result.scale, resolved)
    return result


__all__ = ["MXFP8Tensor", "QuantBackend", "WriteHook", "quantize_mxfp8"]
