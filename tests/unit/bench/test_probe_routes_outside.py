"""bench/triton_moe_probe.py's "~route" form: each routing map's route runs once, later calls reuse its tables."""

import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
from bench import triton_moe_probe as probe  # noqa: E402


def test_routes_outside_runs_each_route_once_per_map_and_arguments():
    calls = []

    def route(routing_map, valid_tokens, *args):
        calls.append(args)
        return (routing_map.sum().reshape(1), valid_tokens.clone())

    memoized = probe.routes_outside(route, {})
    maps = [torch.randint(0, 8, (4, 2)), torch.randint(0, 8, (4, 2))]
    valid = torch.tensor([3])
    first = memoized(maps[0], valid, 4, 2, 8, 0, 16)
    assert memoized(maps[0], valid, 4, 2, 8, 0, 16) is first  # the same tables, no second launch
    assert len(calls) == 1
    memoized(maps[1], valid, 4, 2, 8, 0, 16)  # another map
    memoized(maps[0], valid, 4, 2, 4, 4, 16)  # another expert group (its size and offset)
    assert calls == [(4, 2, 8, 0, 16), (4, 2, 8, 0, 16), (4, 2, 4, 4, 16)]


def test_route_suffix_patches_the_launch_route_and_restores_it():
    from megatron_mxfp8_moe.kernels import triton_launch

    original = triton_launch._route
    with probe.suffix_patches(["route"]):
        assert triton_launch._route is not original
    assert triton_launch._route is original
