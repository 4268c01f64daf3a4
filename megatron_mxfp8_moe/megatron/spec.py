"""Plugging MXFP8Experts into Megatron-Core: a MoE layer spec, and an in-place swap for built models.

spec:  partial(MoELayer, submodules=MoESubmodules(router=router_for_config, experts=partial(MXFP8Experts, ...)))
swap:  every MoELayer in a model: BF16/MXFP8 experts -> quantize/copy -> MXFP8Experts (same EP placement)

The router is chosen by the config when the layer is built (``router_for_config``): ``InferenceTopKRouter`` for
``transformer_impl="inference_optimized"`` (0.19.2's GPT inference spec path leaves the training ``TopKRouter`` in
place, whose dense ``[T, E]`` routing map the inference dispatchers cannot use), the training ``TopKRouter`` otherwise
(under Megatron's engines ``InferenceTopKRouter`` returns ``[T, topk]`` ids, which the standard dispatchers take for
a ``[T, E]`` mask).
"""

from __future__ import annotations

import logging
import types
import unittest.mock
from functools import partial
from typing import Optional

import torch
from megatron.core.transformer.moe.moe_layer import MoELayer, MoESubmodules
from megatron.core.transformer.moe.router import InferenceTopKRouter, TopKRouter

from ..errors import MXFP8InputError
from .experts import MXFP8Experts

logger = logging.getLogger(__name__)

_DEFAULT = object()


def _shared_experts_unavailable(missing: list[str]):
    """A shared-experts builder that raises MXFP8InputError when MoELayer builds it (only with shared experts)."""

    def build(*args, **kwargs):
        raise MXFP8InputError(
            f"shared_experts: config.moe_shared_expert_intermediate_size is set, but Megatron's inference-optimized "
            f"shared-expert spec has no usable {', '.join(missing)} here (Transformer Engine is not installed, so "
            f"Megatron put MagicMock placeholders there). Install Transformer Engine, or pass "
            f"get_mxfp8_moe_layer_spec(shared_experts=...) a builder, e.g. partial(SharedExpertMLP, "
            f"submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear))"
        )

    return build


def _inference_shared_experts():
    """The shared-experts builder of Megatron's inference-optimized MoE spec.

    Without Transformer Engine that spec holds ``MagicMock`` linear layers (its forward fails obscurely), so a
    builder that raises a clear MXFP8InputError when instantiated is returned instead.
    """
    from megatron.core.models.gpt.moe_module_specs import get_inference_optimized_moe_spec

    builder = get_inference_optimized_moe_spec().keywords["submodules"].shared_experts
    submodules = getattr(builder, "keywords", {}).get("submodules")
    missing = [
        name for name in ("linear_fc1", "linear_fc2")
        if isinstance(getattr(submodules, name, None), unittest.mock.NonCallableMock)
    ]
    return _shared_experts_unavailable(missing) if missing else builder


def router_for_config(*, config, **kwargs):
    """The router ``MoELayer`` builds: ``InferenceTopKRouter(config=config, ...)`` where ``config.transformer_impl`` is
    ``"inference_optimized"`` (the inference dispatchers take its ``[T, topk]`` ids), else ``TopKRouter`` (the
    standard dispatchers need its dense ``[T, E]`` map; ``InferenceTopKRouter`` gives ``[T, topk]`` ids whenever
    Megatron's ``InferenceMode`` is active, as its engines make it)."""
    router = InferenceTopKRouter if getattr(config, "transformer_impl", None) == "inference_optimized" else TopKRouter
    return router(config=config, **kwargs)


def get_mxfp8_moe_layer_spec(
    *,
    backend: str = "auto",
    token_capacity: Optional[int] = None,
    shared_experts=_DEFAULT,
    router=router_for_config,
    **experts_kwargs,
):
    """An MoE layer builder (the ``mlp`` entry of a layer spec) with MXFP8 routed experts.

    ``shared_experts``: a shared-experts builder; by default the one of Megatron's inference-optimized spec
    (only instantiated when ``config.moe_shared_expert_intermediate_size`` is set; without Transformer Engine a
    builder that raises MXFP8InputError, since that spec then holds mock linear layers); None for none.
    ``router``: the router builder (by default ``router_for_config``: ``InferenceTopKRouter`` for
    ``transformer_impl="inference_optimized"``, else ``TopKRouter``).
    ``experts_kwargs``: further keyword arguments of ``MXFP8Experts`` (e.g. ``release_canonical``).
    Returns ``partial(MoELayer, submodules=MoESubmodules(router=..., experts=partial(MXFP8Experts, ...)))``.
    """
    if shared_experts is _DEFAULT:
        shared_experts = _inference_shared_experts()
    experts = partial(MXFP8Experts, backend=backend, token_capacity=token_capacity, **experts_kwargs)
    return partial(MoELayer, submodules=MoESubmodules(experts=experts, shared_experts=shared_experts, router=router))


@torch.no_grad()
def swap_experts_to_mxfp8_(model: torch.nn.Module, *, backend: str = "auto", token_capacity: Optional[int] = None,
                           quant_backend: str = "auto") -> list[str]:
    """Replace the experts of every ``MoELayer`` in ``model`` with ``MXFP8Experts``, in place.

    The old experts' weights (BF16 parameters of TEGroupedMLP / InferenceGroupedMLP / SequentialMLP, or
    Megatron MXFP8Tensors) are quantized (or copied) into the new module on the same device; the old module
    is dropped. Run after loading the checkpoint and before building CUDA graphs. Returns the swapped
    module names. ``quant_backend`` picks the quantizer (``"auto"``, ``"reference"``, ``"triton"``...).
    """
    swapped = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, MoELayer) or isinstance(module.experts, MXFP8Experts):
            continue
        old = module.experts
        if old is None:
            raise MXFP8InputError(f"{name}: MoELayer has no experts to swap")
        reference = next(iter(old.parameters()), None)
        pg_collection = types.SimpleNamespace(ep=module.ep_group, expt_tp=getattr(old, "tp_group", None))
        new = MXFP8Experts(
            module.num_local_experts,
            module.config,
            pg_collection=pg_collection,
            name=f"{name}.experts",
            backend=backend,
            token_capacity=token_capacity,
            initialize=False,
        )
        if reference is not None and reference.device != new.expert_set.device:
            new = new.to(reference.device)
        new.load_from_module_(old, backend=quant_backend)
        new.train(module.training)
        module.experts = new
        swapped.append(f"{name}.experts" if name else "experts")
        logger.info("swapped %s to MXFP8Experts (%s backend)", swapped[-1], new.backend.value)
    return swapped


__all__ = ["get_mxfp8_moe_layer_spec", "router_for_config", "swap_experts_to_mxfp8_"]
