"""ExpertSet: the canonical MXFP8 fc1/fc2 weights of E local experts, one stack allocation per linear.

Shapes (T rows, H hidden, I intermediate, E local experts):

- ``fc1``: MXFP8Tensor stack ``[E, N1, H]``; ``N1 = 2*I`` for gated activations (Megatron's ``[gate; up]``
  row order), else ``N1 = I``.
- ``fc2``: MXFP8Tensor stack ``[E, H, I]``.
- ``fc1_expert(i)`` / ``fc2_expert(i)``: ``[N1, H]`` / ``[H, I]`` views of expert ``i`` sharing the stack
  storage. Each view object is created once, so hooks registered on it persist; ``mxfp8_weights()``
  returns exactly these objects under Megatron's names ``linear_fc1.weight{i}`` / ``linear_fc2.weight{i}``.

Lifetime: the storage is allocated once, at construction. Loads and refits (``quantize_``/``copy_`` on the
views or the stacks) write in place, so data and scale addresses never change; write hooks registered
through ``register_write_hook`` then see every write (this is how derived kernel stacks stay fresh).
Not thread-safe: serialize writes.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Optional, Sequence, Union

import torch
from megatron.core.inference.quantization.mxfp8_tensor import MXFP8Tensor as MegatronMXFP8Tensor

from .activations import parse_activation
from .errors import MXFP8InputError
from .format.checks import check_finite, check_quantizable
from .names import local_weight_name
from .tensor import MXFP8Tensor

# hook(linear, index, data, scale): expert ``index`` of ``linear`` ("fc1"/"fc2") now holds ``data`` fp8
# ``[M, K]`` and ``scale`` swizzled E8M0 bytes. The tensors may be temporaries: do not keep them.
ExpertWriteHook = Callable[[str, int, torch.Tensor, torch.Tensor], None]

_SEQUENTIAL_NAME = re.compile(r"^local_experts\.(?P<index>0|[1-9][0-9]*)\.linear_(?P<linear>fc1|fc2)\.weight\Z")
_GROUPED_NAME = re.compile(r"^linear_(?P<linear>fc1|fc2)\.weight(?P<index>0|[1-9][0-9]*)\Z")

WeightSource = Union[torch.Tensor, MegatronMXFP8Tensor]


def is_expert_weight_name(local: str) -> bool:
    """Whether ``local`` (a state-dict key without its module prefix) names an expert weight in either accepted form:
    ``linear_fc{1,2}.weight{i}`` or ``local_experts.{i}.linear_fc{1,2}.weight``."""
    return bool(_GROUPED_NAME.match(local) or _SEQUENTIAL_NAME.match(local))


def _unwrap_mxfp8(value) -> Optional[MegatronMXFP8Tensor]:
    """The MXFP8 tensor inside ``value`` (itself, or a Parameter whose ``.data`` is one), else None."""
    if isinstance(value, MegatronMXFP8Tensor):
        return value
    inner = getattr(value, "data", None)
    if isinstance(inner, MegatronMXFP8Tensor):
        return inner
    return None


class ExpertSet:
    """Canonical MXFP8 expert weights (see module docstring). Construct with ``empty`` or ``from_bf16``."""

    def __init__(self, fc1: MXFP8Tensor, fc2: MXFP8Tensor, activation):
        activation = parse_activation(activation)
        if not (isinstance(fc1, MXFP8Tensor) and fc1.is_stacked):
            raise MXFP8InputError(f"fc1: expected a stacked MXFP8Tensor [E, N1, H], got {fc1!r}")
        if not (isinstance(fc2, MXFP8Tensor) and fc2.is_stacked):
            raise MXFP8InputError(f"fc2: expected a stacked MXFP8Tensor [E, H, I], got {fc2!r}")
        experts, fc1_rows, hidden = fc1.shape
        ffn = fc1_rows // 2 if activation.gated else fc1_rows
        if activation.gated and fc1_rows % 2:
            raise MXFP8InputError(f"fc1: gated {activation.value} needs an even row count [gate; up], got {fc1_rows}")
        if tuple(fc2.shape) != (experts, hidden, ffn):
            raise MXFP8InputError(
                f"fc2: expected [{experts}, {hidden}, {ffn}] to match fc1 {tuple(fc1.shape)} ({activation.value}), "
                f"got {tuple(fc2.shape)}"
            )
        if fc1.device != fc2.device:
            raise MXFP8InputError(f"fc2: expected device {fc1.device} like fc1, got {fc2.device}")
        self.activation = activation
        self.fc1 = fc1
        self.fc2 = fc2
        self._views = {
            "fc1": [fc1.expert(i) for i in range(experts)],
            "fc2": [fc2.expert(i) for i in range(experts)],
        }

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def empty(cls, num_experts: int, hidden_size: int, ffn_hidden_size: int, activation, device="cpu") -> "ExpertSet":
        """Zero-filled stacks: fc1 ``[E, N1, H]``, fc2 ``[E, H, I]``; H and I must be multiples of 32."""
        activation = parse_activation(activation)
        for name, value in (("num_experts", num_experts), ("hidden_size", hidden_size), ("ffn_hidden_size", ffn_hidden_size)):
            if not isinstance(value, int) or value <= 0:
                raise MXFP8InputError(f"{name}: expected a positive int, got {value!r}")
        for name, value in (("hidden_size", hidden_size), ("ffn_hidden_size", ffn_hidden_size)):
            if value % 32:
                raise MXFP8InputError(f"{name}: expected a multiple of 32 (MXFP8 block), got {value}")
        fc1_rows = 2 * ffn_hidden_size if activation.gated else ffn_hidden_size
        fc1 = MXFP8Tensor.empty((num_experts, fc1_rows, hidden_size), device=device)
        fc2 = MXFP8Tensor.empty((num_experts, hidden_size, ffn_hidden_size), device=device)
        return cls(fc1, fc2, activation)

    @classmethod
    def from_bf16(cls, fc1: torch.Tensor, fc2: torch.Tensor, activation, backend: str = "auto") -> "ExpertSet":
        """Quantize BF16/FP32 ``fc1 [E, N1, H]`` and ``fc2 [E, H, I]`` into a new set on their device."""
        activation = parse_activation(activation)
        if fc1.dim() != 3 or fc2.dim() != 3:
            raise MXFP8InputError(f"fc1/fc2: expected [E, N1, H] and [E, H, I], got {tuple(fc1.shape)}, {tuple(fc2.shape)}")
        ffn = fc2.shape[2]
        result = cls.empty(fc1.shape[0], fc1.shape[2], ffn, activation, device=fc1.device)
        result.load_bf16_(fc1, fc2, backend=backend)
        return result

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def num_experts(self) -> int:
        return self.fc1.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.fc1.shape[2]

    @property
    def ffn_hidden_size(self) -> int:
        return self.fc2.shape[2]

    @property
    def device(self) -> torch.device:
        return self.fc1.device

    def __repr__(self) -> str:
        return (
            f"ExpertSet(E={self.num_experts}, H={self.hidden_size}, I={self.ffn_hidden_size}, "
            f"activation={self.activation.value}, device={self.device})"
        )

    # -- per-expert views ----------------------------------------------------------------------------
    def expert_weight(self, linear: str, index: int) -> MXFP8Tensor:
        """The persistent view of expert ``index``'s ``linear`` (``"fc1"`` ``[N1, H]`` or ``"fc2"`` ``[H, I]``)."""
        if linear not in self._views:
            raise MXFP8InputError(f"linear: expected 'fc1' or 'fc2', got {linear!r}")
        if not isinstance(index, int) or not 0 <= index < self.num_experts:
            raise MXFP8InputError(f"index: expected a local expert in [0, {self.num_experts}), got {index!r}")
        return self._views[linear][index]

    def fc1_expert(self, index: int) -> MXFP8Tensor:
        return self.expert_weight("fc1", index)

    def fc2_expert(self, index: int) -> MXFP8Tensor:
        return self.expert_weight("fc2", index)

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        """``{"linear_fc1.weight0": view, ..., "linear_fc2.weight{E-1}": view}``: the refit targets.

        The same objects on every call. Writes into them land in the stacks and reach every write hook.
        """
        names = self.__dict__.get("_weight_names")
        if names is None:  # built once: the views live as long as the set
            names = {
                local_weight_name(linear, index): view
                for linear in ("fc1", "fc2")
                for index, view in enumerate(self._views[linear])
            }
            self._weight_names = names
        return dict(names)

    # -- write hooks -------------------------------------------------------------------------------
    def register_write_hook(self, hook: ExpertWriteHook) -> list[Callable[[], None]]:
        """Call ``hook(linear, index, data, scale)`` after every write to an expert view or a whole stack.

        Hooks sit on the per-expert views; a whole-stack write runs them once per expert (the stack's
        ``_after_write`` fans out to its views). Returns the removers (one per view hooked).
        """
        removers = []
        for linear, views in self._views.items():
            for index, view in enumerate(views):
                removers.append(
                    view.register_write_hook(
                        lambda _tensor, data, scale, _linear=linear, _index=index: hook(_linear, _index, data, scale)
                    )
                )
        return removers

    # -- releasing the canonical bytes ---------------------------------------------------------------
    @property
    def is_released(self) -> bool:
        """True once ``release_canonical_()`` dropped the canonical stacks."""
        return self.fc1.is_released

    def release_canonical_(self) -> int:
        """Drop the canonical stacks and per-expert views' bytes once a kernel stack holds them.

        Every expert view must have a write hook (the kernel stack's repack), so later ``quantize_``/``copy_``
        still reach the stack; reads of the canonical weights then raise ReleasedWeightError. Both stacks are
        checked before either is released (MXFP8InputError, nothing released); releasing a stack releases its
        views. Storage that the kernel stack shares zero-copy stays alive through the stack. Returns the
        canonical bytes released.
        """
        if self.is_released:
            return 0
        for linear, stack in (("fc1", self.fc1), ("fc2", self.fc2)):
            problem = stack._release_problem()
            if problem is not None:
                raise MXFP8InputError(f"release_canonical_(): {linear}: {problem}; nothing was released")
        released = sum(t.data.numel() + t.scale.numel() for t in (self.fc1, self.fc2))
        self.fc1.release_storage_()
        self.fc2.release_storage_()
        return released

    # -- loading (all writes in place) ---------------------------------------------------------------
    def load_bf16_(
        self,
        fc1: Union[torch.Tensor, Sequence[torch.Tensor]],
        fc2: Union[torch.Tensor, Sequence[torch.Tensor]],
        backend: str = "auto",
    ) -> "ExpertSet":
        """Quantize logical weights into every expert: ``fc1`` ``[E, N1, H]`` (or E tensors ``[N1, H]``), ``fc2`` likewise.

        Every value is checked (type, dtype, shape, finiteness) before the first byte is written.
        """
        fc1_list, fc2_list = list(fc1), list(fc2)
        checked = []
        for linear, values in (("fc1", fc1_list), ("fc2", fc2_list)):
            if len(values) != self.num_experts:
                raise MXFP8InputError(f"{linear}: expected {self.num_experts} experts, got {len(values)}")
            for index, value in enumerate(values):
                checked.append((linear, index, self._checked_source(linear, index, value, f"{linear}[{index}]")))
        self._write_checked(checked, backend)
        return self

    def _checked_source(self, linear: str, index: int, value: WeightSource, name: str):
        """``value`` checked against expert ``index`` of ``linear`` without writing: an MXFP8 tensor (same device,
        ``validate_mxfp8_source``) or a BF16/FP16/FP32 tensor (any device; dtype, shape, finite). Returns it
        (the MXFP8 tensor unwrapped from a Parameter)."""
        view = self.expert_weight(linear, index)
        mxfp8 = _unwrap_mxfp8(value)
        if mxfp8 is None and not isinstance(value, torch.Tensor):
            raise MXFP8InputError(f"{name}: expected a tensor or an MXFP8Tensor, got {type(value).__name__}")
        shape = tuple((value if mxfp8 is None else mxfp8.data).shape)
        if shape != tuple(view.shape):
            raise MXFP8InputError(f"{name}: expected shape {tuple(view.shape)}, got {shape}")
        if mxfp8 is not None:
            view.validate_mxfp8_source(mxfp8, name=name)
            return mxfp8
        check_quantizable(name, value, finite=False)
        check_finite(name, value.detach())
        return value

    def _write_checked(self, checked, backend: str) -> None:
        """Write ``[(linear, index, source)]`` checked by ``_checked_source`` (no second NaN/Inf scan)."""
        with torch.no_grad():
            for linear, index, source in checked:
                view = self.expert_weight(linear, index)
                if isinstance(source, MegatronMXFP8Tensor):
                    view.copy_(source, finite_checked=True)
                else:
                    view.quantize_(source.detach().to(device=view.device).contiguous(), backend=backend,
                                   finite_checked=True)

    def load_weight_(self, linear: str, index: int, value: WeightSource, backend: str = "auto") -> None:
        """Write one expert weight in place: a BF16/FP16/FP32 tensor is quantized, an MXFP8 tensor copied."""
        name = local_weight_name(linear, index) if linear in self._views else "linear"
        self._write_checked([(linear, index, self._checked_source(linear, index, value, name))], backend)

    def expert_keys(self, keys, prefix: str = "") -> tuple[dict[tuple[str, int], str], list[tuple[str, int]], list[str]]:
        """Sort ``keys`` under ``prefix``: ``(found, out_of_range, missing)``, where ``found`` maps ``(linear,
        local index)`` to the key of that expert weight, ``out_of_range`` lists ``(key, index)`` of expert-weight
        keys whose index is ``>= E`` and ``missing`` the names (``prefix + "linear_fc{1,2}.weight{i}"``) of the absent experts.
        Names as in ``load_state_dict_``; other keys are ignored."""
        found: dict[tuple[str, int], str] = {}
        out_of_range: list[tuple[str, int]] = []
        for key in keys:
            if not key.startswith(prefix):
                continue
            local = key[len(prefix):]
            match = _GROUPED_NAME.match(local) or _SEQUENTIAL_NAME.match(local)
            if match is None:
                continue
            index = int(match.group("index"))
            if index >= self.num_experts:
                out_of_range.append((key, index))
            else:
                found[(match.group("linear"), index)] = key
        missing = [
            prefix + local_weight_name(linear, index)
            for linear in ("fc1", "fc2")
            for index in range(self.num_experts)
            if (linear, index) not in found
        ]
        return found, out_of_range, missing

    def load_state_dict_(self, state_dict: Mapping[str, WeightSource], prefix: str = "", backend: str = "auto", *,
                         partial: bool = False) -> "ExpertSet":
        """Load every expert from a state dict, relative to ``prefix``.

        Accepted names: ``linear_fc1.weight{i}`` / ``linear_fc2.weight{i}`` (TEGroupedMLP,
        InferenceGroupedMLP, this package) or ``local_experts.{i}.linear_fc1.weight`` (SequentialMLP).
        Values: BF16/FP16/FP32 tensors (quantized) or MXFP8 tensors (copied). All ``2 * E`` weights must be
        present (``partial``: those present are loaded) and valid (type, dtype, shape, device of MXFP8 tensors,
        finiteness); every check runs before anything is written.
        """
        found, out_of_range, missing = self.expert_keys(state_dict, prefix)
        if out_of_range:
            key, index = out_of_range[0]
            raise MXFP8InputError(f"{key}: local expert {index} out of range [0, {self.num_experts})")
        if missing and not partial:
            raise MXFP8InputError(f"state_dict: missing expert weights {missing[:4]}{'...' if len(missing) > 4 else ''}")
        checked = [
            (linear, index, self._checked_source(linear, index, state_dict[key], prefix + local_weight_name(linear, index)))
            for (linear, index), key in sorted(found.items())
        ]
        self._write_checked(checked, backend)
        return self

    def load_from_module_(self, module: torch.nn.Module, backend: str = "auto") -> "ExpertSet":
        """Load from a Megatron experts module: TEGroupedMLP / InferenceGroupedMLP (``linear_fc1.weight{i}``,
        BF16 parameters or Megatron MXFP8Tensors), SequentialMLP (``local_experts.{i}.linear_fc1.weight``), or any
        module with ``mxfp8_weights()`` (copied)."""
        if hasattr(module, "mxfp8_weights"):
            return self.load_state_dict_(module.mxfp8_weights(), backend=backend)
        weights: dict[str, WeightSource] = {}
        if hasattr(module, "local_experts"):
            for index, expert in enumerate(module.local_experts):
                for linear in ("fc1", "fc2"):
                    weights[f"local_experts.{index}.linear_{linear}.weight"] = getattr(expert, f"linear_{linear}").weight
        else:
            for linear in ("fc1", "fc2"):
                submodule = getattr(module, f"linear_{linear}", None)
                if submodule is None:
                    raise MXFP8InputError(
                        f"module: {type(module).__name__} has no linear_{linear}; expected TEGroupedMLP, "
                        f"InferenceGroupedMLP, SequentialMLP or a module with mxfp8_weights()"
                    )
                for index in range(self.num_experts):
                    value = getattr(submodule, f"weight{index}", None)
                    if value is not None:
                        weights[local_weight_name(linear, index)] = value
        return self.load_state_dict_(weights, backend=backend)

    def to_device(self, device) -> "ExpertSet":
        """A copy on ``device`` (new storage; hooks are not carried over). Use before any kernel stack is built."""
        fc1 = MXFP8Tensor.empty(tuple(self.fc1.shape), device=device)
        fc2 = MXFP8Tensor.empty(tuple(self.fc2.shape), device=device)
        fc1.data.copy_(self.fc1.data)
        fc1.scale.view(torch.uint8).copy_(self.fc1.scale.view(torch.uint8))
        fc2.data.copy_(self.fc2.data)
        fc2.scale.view(torch.uint8).copy_(self.fc2.scale.view(torch.uint8))
        return ExpertSet(fc1, fc2, self.activation)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Logical weights ``(fc1 [E, N1, H], fc2 [E, H, I])`` in ``dtype`` (exact in fp32/fp64)."""
        return self.fc1.dequantize(dtype), self.fc2.dequantize(dtype)


__all__ = ["ExpertSet", "ExpertWriteHook"]
