"""Megatron parameter names of routed-expert weights: parsing and formatting only (stdlib, no torch).

Megatron-Core's grouped expert modules (``TEGroupedMLP``, ``InferenceGroupedMLP``) and this package's
expert modules name the weight of LOCAL expert ``i`` (``0 <= i < num_local_experts``)::

    <module path>.linear_fc1.weight<i>      fc1: [gate; up] or up projection, ``[I or 2*I, H]``
    <module path>.linear_fc2.weight<i>      fc2: down projection, ``[H, I]``

for example ``decoder.layers.0.mlp.experts.linear_fc1.weight3``. ``<module path>`` is the path that
``model.named_modules()`` gives the experts module; it is empty when names are relative to that module
(``linear_fc1.weight3``). The index is the local expert index: global expert id =
``local_expert_offset + i``. Indices are plain decimals without leading zeros (``weight03`` is not an
expert weight name). ``refit_experts`` also takes ``<module path>.linear_fc1.weight`` (no index) for a stacked
``[E, M, K]`` tensor of all local experts (``parse_expert_stack_name``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

LINEARS = ("fc1", "fc2")  # Megatron's names of the two expert projections

_EXPERT_WEIGHT = re.compile(r"^(?:(?P<module>.+)\.)?linear_(?P<linear>fc1|fc2)\.weight(?P<index>0|[1-9][0-9]*)\Z")
_EXPERT_STACK = re.compile(r"^(?:(?P<module>.+)\.)?linear_(?P<linear>fc1|fc2)\.weight\Z")


@dataclass(frozen=True)
class ExpertWeightName:
    """One parsed expert-weight name.

    module_path: the experts module's path in ``named_modules()`` ("" when the name is relative to it).
    linear: ``"fc1"`` or ``"fc2"``.
    local_index: local expert index ``i`` (``weight<i>``), ``>= 0``; not range-checked here.
    """

    module_path: str
    linear: str
    local_index: int

    @property
    def local_name(self) -> str:
        """The name relative to the experts module: ``linear_fc1.weight3``."""
        return local_weight_name(self.linear, self.local_index)

    @property
    def full_name(self) -> str:
        """``<module_path>.linear_<fc>.weight<i>`` (just the local name when ``module_path`` is empty)."""
        return join_name(self.module_path, self.local_name)


def local_weight_name(linear: str, local_index: int) -> str:
    """``("fc1", 3)`` -> ``"linear_fc1.weight3"``. Raises ValueError for an unknown linear or a negative index."""
    if linear not in LINEARS:
        raise ValueError(f"linear must be one of {LINEARS}, got {linear!r}")
    if not isinstance(local_index, int) or isinstance(local_index, bool) or local_index < 0:
        raise ValueError(f"local_index must be an int >= 0, got {local_index!r}")
    return f"linear_{linear}.weight{local_index}"


def join_name(module_path: str, local_name: str) -> str:
    """``("decoder.layers.0.mlp.experts", "linear_fc1.weight3")`` -> the full dotted name."""
    return f"{module_path}.{local_name}" if module_path else local_name


def parse_expert_weight_name(name: str) -> Optional[ExpertWeightName]:
    """Parse ``[<module path>.]linear_fc{1,2}.weight<i>``; None when ``name`` is not an expert-weight name.

    Only the syntax is checked: whether ``<module path>`` is an experts module and whether ``i`` is in
    range depends on the model (see ``refit/validate.py``). Raises TypeError when ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"a parameter name must be a str, got {type(name).__name__}")
    match = _EXPERT_WEIGHT.match(name)
    if match is None:
        return None
    return ExpertWeightName(
        module_path=match.group("module") or "",
        linear=match.group("linear"),
        local_index=int(match.group("index")),
    )


def parse_expert_stack_name(name: str) -> Optional[tuple[str, str]]:
    """Parse ``[<module path>.]linear_fc{1,2}.weight`` (no index: ALL local experts of that linear, one stacked
    ``[E, M, K]`` tensor; this package's refit extension, not a Megatron parameter name) into
    ``(module_path, linear)``; None otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"a parameter name must be a str, got {type(name).__name__}")
    match = _EXPERT_STACK.match(name)
    return None if match is None else (match.group("module") or "", match.group("linear"))


__all__ = [
    "LINEARS",
    "ExpertWeightName",
    "join_name",
    "local_weight_name",
    "parse_expert_stack_name",
    "parse_expert_weight_name",
]
