"""The on-device route of the Triton MXFP8 MoE: (token, k) pairs sorted by local expert into token blocks
(``_route``, graph-safe, no host sync), its buffer sizes (``route_layout``, ``routing_capacity``) and launch shape,
and ``route_reference``, the same tables in plain torch (the CPU oracle)."""

from __future__ import annotations

import torch

from ..errors import MXFP8InputError


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def routing_capacity(rows: int, topk: int, experts: int, block_t: int) -> tuple[int, int]:
    """``(max_sorted, max_blocks)``: padded positions and BLOCK_T blocks that any routing can need.

    Each expert with ``c > 0`` pairs takes ``ceil(c / block_t)`` blocks, so the total is at most
    ``pairs / block_t + min(E, pairs)`` blocks; with ``block_t`` 1 exactly one block per pair.
    """
    pairs = rows * topk
    max_blocks = max(1, pairs) if block_t == 1 else pairs // block_t + min(experts, pairs) + 1
    return max_blocks * block_t, max_blocks


def route_reference(
    routing_map: torch.Tensor, valid_tokens: int, *, experts: int, local_expert_offset: int, block_t: int,
    tail_t: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pure-torch twin of the route kernels: (sorted_pairs, block_expert, num_blocks) on the CPU, laid out as
    ``route_layout``. With ``tail_t`` > 0, ``num_blocks`` is ``(blocks, tail_blocks)``: an expert's last 1..tail_t
    pairs past its full ``block_t`` blocks go to its tail block at ``max_sorted + i * tail_t`` (entry
    ``tail_block_offset + i`` of ``block_expert``), a larger remainder to one more ``block_t`` block.

    Pairs of one expert appear in ascending order, as the kernels place them: the tables are equal position by
    position.
    """
    rows, topk = routing_map.shape
    max_sorted, max_blocks, sorted_len, tail_block_offset = route_layout(rows, topk, experts, block_t, tail_t)
    flat = routing_map.reshape(-1).to(torch.int64).cpu()
    valid_pairs = max(0, min(int(valid_tokens), rows)) * topk
    local = flat[:valid_pairs] - local_expert_offset
    sorted_pairs = torch.full((sorted_len,), -1, dtype=torch.int32)
    block_expert = torch.zeros(tail_block_offset + (min(experts, rows * topk) if tail_t else 0), dtype=torch.int32)
    block = tail = 0
    for expert in range(experts):
        members = torch.nonzero(local == expert).flatten().to(torch.int32)
        count = members.numel()
        rest = count % block_t
        in_blocks = count - rest if 0 < rest <= tail_t else count
        blocks = -(-in_blocks // block_t)
        sorted_pairs[block * block_t: block * block_t + in_blocks] = members[:in_blocks]
        block_expert[block: block + blocks] = expert
        block += blocks
        if in_blocks < count:
            sorted_pairs[max_sorted + tail * tail_t: max_sorted + tail * tail_t + rest] = members[in_blocks:]
            block_expert[tail_block_offset + tail] = expert
            tail += 1
    return sorted_pairs, block_expert, ((block, tail) if tail_t else block)


# Route launch shapes: up to _ROUTE_ONE_PROGRAM_PAIRS pairs one program does the whole route (one launch); above,
# two launches over chunks of _ROUTE_CHUNK pairs or more, at most _ROUTE_MAX_CHUNKS of them (each plan-and-scatter
# program holds the [chunks, E] tile of counts). The single-program form took 150 us at 32768 pairs (4096 tokens,
# top-8) on an H200 (session 8).
_ROUTE_ONE_PROGRAM_PAIRS = 1024
_ROUTE_CHUNK = 256
_ROUTE_MAX_CHUNKS = 64


def route_launch_shape(pairs: int) -> tuple[bool, int, int]:
    """``(one_program, chunk, n_chunks)`` of the route for ``pairs = rows * topk`` (host-side, fixed per graph)."""
    if pairs <= _ROUTE_ONE_PROGRAM_PAIRS:
        chunk = max(32, _pow2_at_least(pairs))
        return True, chunk, 1
    chunk = max(_ROUTE_CHUNK, _pow2_at_least(-(-pairs // _ROUTE_MAX_CHUNKS)))
    return False, chunk, -(-pairs // chunk)


def route_layout(rows: int, topk: int, experts: int, block_t: int, tail_t: int = 0) -> tuple[int, int, int, int]:
    """``(max_sorted, max_blocks, sorted_len, tail_block_offset)`` of the route tables: ``sorted_pairs`` holds
    ``sorted_len`` positions, the BLOCK_T blocks' ``max_sorted`` first, then (``tail_t`` > 0) one ``tail_t`` block
    per expert at most; ``block_expert`` holds ``max_blocks`` entries, then the tail table from
    ``tail_block_offset`` (16-byte aligned)."""
    max_sorted, max_blocks = routing_capacity(rows, topk, experts, block_t)
    if not tail_t:
        return max_sorted, max_blocks, max_sorted, max_blocks
    tail_blocks = min(experts, rows * topk)
    return max_sorted, max_blocks, max_sorted + tail_blocks * tail_t, -(-max_blocks // 4) * 4


def _route(routing_map, valid_tokens, rows, topk, experts, local_expert_offset, block_t, tail_t=0, warps=None,
           in_registers=False, parallel_pairs=0):
    """``(sorted_pairs [sorted_len], block_expert, num_blocks [8])`` int32 on the map's device (``route_layout``):
    pairs grouped by local expert, each expert padded to ``block_t`` positions, or with ``tail_t`` its last
    1..tail_t pairs in a tail block; ``num_blocks[0]`` / ``[4]`` count the blocks / tail blocks in use.
    ``route_reference`` is the torch twin. ``in_registers``: the one-program form without scratch
    (``TritonMoEConfig.route_in_registers``); ``parallel_pairs``: up to that many pairs from several programs
    (``route_parallel_pairs``)."""
    import triton

    from . import _triton_moe_kernel as kernels

    pairs = rows * topk
    device = routing_map.device
    max_sorted, max_blocks, sorted_len, tail_block_offset = route_layout(rows, topk, experts, block_t, tail_t)
    sorted_pairs = torch.empty(sorted_len, dtype=torch.int32, device=device)
    block_expert = torch.empty(tail_block_offset + (min(experts, pairs) if tail_t else 0), dtype=torch.int32,
                               device=device)
    num_blocks = torch.empty(8, dtype=torch.int32, device=device)
    e_pow2 = _pow2_at_least(experts)
    tables = dict(E=experts, E_POW2=e_pow2, BLOCK_T=block_t, TAIL_T=tail_t,
                  CHUNK_B=min(128, _pow2_at_least(max_blocks)))
    if pairs <= parallel_pairs:
        # at least 8 programs (16 tokens at top-8: 2 slices of pairs; run 40, 2 programs: 5.8 us against 3.8 for 8
        # at 64 tokens), those past the pairs only share the block table and the -1 fill
        chunk = max(32, _pow2_at_least(pairs))
        slice_pairs = min(64, chunk)
        parts = max(8, chunk // slice_pairs)
        # each program's share of the block table and the -1 fill, at most 4096 positions per step
        tables["CHUNK_B"] = min(_pow2_at_least(triton.cdiv(max_blocks, parts)), 4096 // max(block_t, tail_t))
        kernels._route_parallel_kernel[(parts,)](
            routing_map, valid_tokens, sorted_pairs, block_expert, num_blocks, rows, max_sorted, max_blocks,
            tail_block_offset, min(experts, pairs) if tail_t else 0, local_expert_offset, TOPK=topk, CHUNK=chunk,
            SLICE=slice_pairs, **tables, num_warps=4 if chunk <= 1024 else 8)
        return sorted_pairs, block_expert, num_blocks
    one_program, chunk, n_chunks = route_launch_shape(pairs)
    if (e_pow2 + 1) * chunk >= 2 ** 31:  # the scatter sorts int32 keys expert * chunk + lane
        raise MXFP8InputError(f"triton_mxfp8_moe: {pairs} (token, expert) pairs over {experts} local experts "
                              f"exceed the route's int32 sort keys ({e_pow2 + 1} x {chunk} >= 2**31)")
    scratch = torch.empty(5 * n_chunks * e_pow2, dtype=torch.int32, device=device)
    if one_program:
        layout = (rows, sorted_len, max_sorted, max_blocks, tail_block_offset, local_expert_offset)
        options = dict(TOPK=topk, CHUNK=chunk, **tables, num_warps=warps or (8 if chunk >= 512 else 4))
        if in_registers:
            kernels._route_in_registers_kernel[(1,)](routing_map, valid_tokens, sorted_pairs, block_expert,
                                                     num_blocks, *layout, **options)
        else:
            kernels._route_kernel[(1,)](routing_map, valid_tokens, sorted_pairs, block_expert, num_blocks, scratch,
                                        *layout, **options)
        return sorted_pairs, block_expert, num_blocks
    kernels._route_count_kernel[(n_chunks,)](
        routing_map, valid_tokens, sorted_pairs, scratch, rows, sorted_len, triton.cdiv(sorted_len, n_chunks),
        local_expert_offset, TOPK=topk, E=experts, E_POW2=e_pow2, CHUNK=chunk, num_warps=4,
    )
    # the scatter sorts its chunk in registers: more warps for long chunks (compile-only, Triton 3.8, sm_90: 16384
    # lanes on 4 warps take 255 registers and spill 2.9 KB, on 16 warps 128 registers and no spill)
    kernels._route_plan_scatter_kernel[(n_chunks,)](
        routing_map, valid_tokens, sorted_pairs, scratch, block_expert, num_blocks, rows, n_chunks, max_sorted,
        max_blocks, tail_block_offset, local_expert_offset, TOPK=topk, CHUNK=chunk,
        CHUNKS_POW2=_pow2_at_least(n_chunks), **tables, num_warps=min(16, max(4, chunk // 512)),
    )
    return sorted_pairs, block_expert, num_blocks
