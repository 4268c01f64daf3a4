"""Expert activations and their Megatron names. Gated ones read fc1 rows as Megatron's ``[gate; up]``."""

import enum

import torch
import torch.nn.functional as F


class Activation(enum.Enum):
    """Expert activation. ``gated`` ones make fc1 produce ``2 * I`` rows: ``[gate; up]``."""

    SWIGLU = "swiglu"  # silu(gate) * up
    GEGLU = "geglu"  # gelu_tanh(gate) * up
    SQUARED_RELU = "squared_relu"  # relu(x) ** 2
    RELU = "relu"
    SILU = "silu"

    @property
    def gated(self) -> bool:
        return self in (Activation.SWIGLU, Activation.GEGLU)


_BY_NAME = {activation.value: activation for activation in Activation}


def parse_activation(value) -> Activation:
    """An Activation from itself or its name (``"swiglu"``, ``"squared_relu"``, ...)."""
    if isinstance(value, Activation):
        return value
    if value not in _BY_NAME:
        raise ValueError(f"unknown activation {value!r}; choose one of {sorted(_BY_NAME)}")
    return _BY_NAME[value]


def apply_activation(fc1_out: torch.Tensor, activation: Activation, *, up_first: bool = False) -> torch.Tensor:
    """``[..., N1]`` fc1 output -> ``[..., I]`` (``N1 = 2 * I`` for gated activations: Megatron's ``[gate; up]``,
    or FlashInfer's ``[up; gate]`` with ``up_first=True``)."""
    if activation.gated:
        gate, up = fc1_out.chunk(2, dim=-1)
        if up_first:
            gate, up = up, gate
        act = F.silu(gate) if activation is Activation.SWIGLU else F.gelu(gate, approximate="tanh")
        return act * up
    if activation is Activation.SQUARED_RELU:
        return F.relu(fc1_out).square()
    if activation is Activation.RELU:
        return F.relu(fc1_out)
    return F.silu(fc1_out)
