"""A small experts module that follows the refit contract, for the refit tests (not collected by pytest).

Contract: ``mxfp8_weights() -> dict[str, MXFP8Tensor]`` keyed ``linear_fc1.weight{i}`` / ``linear_fc2.weight{i}``,
``num_local_experts``, ``local_expert_offset``. Each linear is ONE stack allocation ``[E, M, K]`` with
per-expert views from ``.expert(i)``; each view has a write hook that mirrors its new bytes into a DERIVED copy
in another layout (data transposed per expert ``[E, K, M]`` uint8, scale bytes ``[E, Mp*Cp]`` uint8), the way
a kernel-specific stack is kept in sync. Load with ``load_fake()`` (tests use --import-mode=importlib).
"""

from __future__ import annotations

import torch

from megatron_mxfp8_moe import MXFP8Tensor, quantize_mxfp8
from megatron_mxfp8_moe.testing import random_weights

HIDDEN = 64  # H
INTERMEDIATE = 96  # I; fc1 is [gate; up] = [2*I, H], fc2 is [H, I]
EXPERTS = 4  # E local experts per layer
FC1_SHAPE = (2 * INTERMEDIATE, HIDDEN)
FC2_SHAPE = (HIDDEN, INTERMEDIATE)
SHAPES = {"fc1": FC1_SHAPE, "fc2": FC2_SHAPE}


def derive(stack: MXFP8Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The derived layout of a canonical stack: (data uint8 ``[E, K, M]``, scale uint8 ``[E, Mp*Cp]``)."""
    return stack.data.view(torch.uint8).transpose(1, 2).contiguous(), stack.scale.view(torch.uint8).clone()


class FakeExperts(torch.nn.Module):
    """Canonical fc1/fc2 stacks + derived copies kept in sync by write hooks; counts hook and refresh calls."""

    def __init__(self, fc1: torch.Tensor, fc2: torch.Tensor, local_expert_offset: int = 0):
        super().__init__()
        self.num_local_experts = fc1.shape[0]
        self.local_expert_offset = local_expert_offset
        self.stacks = {"fc1": quantize_mxfp8(fc1, backend="reference"), "fc2": quantize_mxfp8(fc2, backend="reference")}
        self.derived = {linear: derive(stack) for linear, stack in self.stacks.items()}
        self.hook_calls: list[tuple[str, int]] = []
        self.refresh_calls = 0
        self._views: dict[str, MXFP8Tensor] = {}
        for linear, stack in self.stacks.items():
            for index in range(self.num_local_experts):
                view = stack.expert(index)
                view.register_write_hook(self._mirror(linear, index))
                self._views[f"linear_{linear}.weight{index}"] = view

    def _mirror(self, linear: str, index: int):
        derived_data, derived_scale = self.derived[linear]

        def hook(tensor, data, scale):
            derived_data[index].copy_(data.view(torch.uint8).t())
            derived_scale[index].copy_(scale.view(torch.uint8))
            self.hook_calls.append((linear, index))

        return hook

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        return dict(self._views)

    def refresh_cache(self) -> None:
        self.refresh_calls += 1

    def release_canonical_(self) -> None:
        """Release every per-expert view (the hooks keep the derived copies writable)."""
        for view in self._views.values():
            view.release_storage_()

    def stack_bytes(self) -> list[torch.Tensor]:
        """Clones of every canonical stack and derived copy, as uint8 (the stacks are never released)."""
        out = []
        for linear in ("fc1", "fc2"):
            stack = self.stacks[linear]
            out += [stack.data.view(torch.uint8).clone(), stack.scale.view(torch.uint8).clone()]
            out += [tensor.clone() for tensor in self.derived[linear]]
        return out

    def expert_bytes(self, linear: str, index: int) -> list[torch.Tensor]:
        """Canonical and derived bytes of one expert's weight."""
        stack = self.stacks[linear]
        derived_data, derived_scale = self.derived[linear]
        return [stack.data[index].view(torch.uint8).clone(), stack.scale[index].view(torch.uint8).clone(),
                derived_data[index].clone(), derived_scale[index].clone()]

    def data_ptrs(self) -> list[int]:
        ptrs = []
        for linear in ("fc1", "fc2"):
            ptrs += [self.stacks[linear].data.data_ptr(), self.stacks[linear].scale.data_ptr()]
            ptrs += [tensor.data_ptr() for tensor in self.derived[linear]]
        return ptrs


def random_logical(experts: int = EXPERTS, *, generator=None, dtype=torch.bfloat16, device="cpu"):
    """Fresh random (fc1 ``[E, 2I, H]``, fc2 ``[E, H, I]``) logical weights with MX edge cases."""
    fc1 = random_weights((experts, *FC1_SHAPE), dtype=dtype, device=device, generator=generator)
    fc2 = random_weights((experts, *FC2_SHAPE), dtype=dtype, device=device, generator=generator)
    return fc1, fc2


class Block(torch.nn.Module):
    def __init__(self, fc1, fc2, offset):
        super().__init__()
        self.self_attention = torch.nn.Module()
        self.self_attention.linear_qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.router = torch.nn.Linear(HIDDEN, 8, bias=False)
        self.mlp.experts = FakeExperts(fc1, fc2, local_expert_offset=offset)


class FakeModel(torch.nn.Module):
    """``decoder.layers.{l}.mlp.experts`` = FakeExperts (EP rank 1 of 2: global experts 4..7), plus non-expert params."""

    def __init__(self, layers: int = 2, seed: int = 0, offset: int = EXPERTS):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.decoder = torch.nn.Module()
        self.decoder.layers = torch.nn.ModuleList(
            [Block(*random_logical(generator=generator), offset) for _ in range(layers)]
        )

    def experts(self, layer: int) -> FakeExperts:
        return self.decoder.layers[layer].mlp.experts

    def all_experts(self) -> list[FakeExperts]:
        return [block.mlp.experts for block in self.decoder.layers]

    def snapshot(self) -> list[torch.Tensor]:
        """Every canonical stack and derived copy of every layer (uint8 clones)."""
        return [tensor for experts in self.all_experts() for tensor in experts.stack_bytes()]


def experts_path(layer: int) -> str:
    return f"decoder.layers.{layer}.mlp.experts"


def new_sources(layers=(0, 1), experts=range(EXPERTS), linears=("fc1", "fc2"), *, seed: int = 99,
                dtype=torch.bfloat16, device="cpu") -> dict[str, torch.Tensor]:
    """Fresh random logical sources keyed by full Megatron names (layers x linears x local experts)."""
    generator = torch.Generator().manual_seed(seed)
    sources = {}
    for layer in layers:
        for linear in linears:
            for index in experts:
                sources[f"{experts_path(layer)}.linear_{linear}.weight{index}"] = random_weights(
                    SHAPES[linear], dtype=dtype, device=device, generator=generator
                )
    return sources


def same(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return len(first) == len(second) and all(torch.equal(a, b) for a, b in zip(first, second))


class BareStacks(torch.nn.Module):
    """The refit contract over one fc1 and one fc2 stack with per-expert views and NO write hooks (the stacks
    are what a kernel reads, like the Triton backend's): eligible for the on-device NaN/Inf check."""

    def __init__(self, fc1: MXFP8Tensor, fc2: MXFP8Tensor, local_expert_offset: int = 0):
        super().__init__()
        self.num_local_experts = fc1.shape[0]
        self.local_expert_offset = local_expert_offset
        self.fc1, self.fc2 = fc1, fc2
        self._views = {f"linear_{name}.weight{i}": stack.expert(i)
                       for name, stack in (("fc1", fc1), ("fc2", fc2)) for i in range(fc1.shape[0])}

    def mxfp8_weights(self) -> dict[str, MXFP8Tensor]:
        return dict(self._views)

    def stack_bytes(self) -> list[torch.Tensor]:
        return [t.view(torch.uint8).clone() for stack in (self.fc1, self.fc2) for t in (stack.data, stack.scale)]

