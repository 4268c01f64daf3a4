"""@triton.jit bodies of the Hopper weight-only MXFP8 MoE (host side: ``triton_moe.py``).

route (per-chunk histograms, padded offsets and block -> expert, per-chunk scatter; one program or three
launches) -> FC1 (+activation) -> FC2 -> combine.

Swap A/B: every GEMM computes ``out^T [BLOCK_N, BLOCK_T] = W [BLOCK_N, K] @ X^T [K, BLOCK_T]``: the weight tile,
dequantized in registers (``e4m3 -> bf16``, times the exact ``2 ** (byte - 127)`` as a bf16 built from bits),
is the left MMA operand; the tokens of one expert are the narrow right side.
Shape legend: T rows, H hidden, I intermediate, E local experts, N1 fc1 rows (2I gated, ``[gate; up]``).
Weights are the canonical stacks read in place: fp8 ``[E, M, K]`` and the cuBLAS 128x4-swizzled E8M0 bytes
``[E, Mp * Cp]``; a scale tile is addressed with the swizzle formula (``_scale_row_offsets`` + ``_scale_col_offsets``).
v4 small-T path (``direct``): ``_fc1_direct_kernel`` + ``_fc2_combine_kernel``, no route and no combine launch.
v6 GEMV small-T path (``direct`` + ``gemv``): ``_fc1_gemv_kernel`` + ``_fc2_gemv_kernel`` (per (n tile, pair))
+ ``_combine_kernel``: matrix-vector products with CUDA-core block sums instead of MMAs. v7 routed GEMV (``gemv``
without ``direct``): route (block_t 1) + ``_fc1_routed_gemv_kernel`` + ``_fc2_routed_gemv_kernel`` + combine.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

# Activation codes (keep in sync with ``_ACTIVATION_CODE`` in triton_config.py).
ACT_SWIGLU = tl.constexpr(0)
ACT_GEGLU = tl.constexpr(1)
ACT_SQUARED_RELU = tl.constexpr(2)
ACT_RELU = tl.constexpr(3)
ACT_SILU = tl.constexpr(4)


# -- route: the padded, expert-sorted pair table -------------------------------------------------------------
# The valid pairs are cut into n_chunks chunks of CHUNK pairs. (1) per chunk: histogram of local experts into
# counts[chunk, :] (and the -1 padding fill of a slice of sorted_pairs); (2) one program: per expert its blocks and
# first position, num_blocks, block -> expert, and per (chunk, expert) the rank its first pair takes among the
# expert's pairs; (3) per chunk: each local pair's rank is its (chunk, expert) cursor plus the pairs of its expert
# before it in the chunk (one sort of the chunk's keys; no atomics), so an expert's pairs keep pair order and the
# tables are deterministic (equal to ``route_reference``); the rank maps to a position. Small pair counts run the
# three steps in one program over one chunk (``_route_kernel``); larger ones as two launches over the chunks
# (``_route_count_kernel``, then ``_route_plan_scatter_kernel``: session 17, every chunk's program plans from all
# chunks' counts itself, keeps its own cursor row and tables, and writes its share of the block table, so step (2)
# is no longer a one-program launch between the two).
# Tail blocks (TAIL_T > 0): an expert whose count leaves 1..TAIL_T pairs past its last full BLOCK_T block puts them
# in one TAIL_T block of a second table (positions from max_sorted, blocks from tail_block_offset, its count in
# num_blocks[4]) that narrower tiles process; a larger remainder takes one more BLOCK_T block.
# Scratch int32: counts [n_chunks, E_POW2], cursors [n_chunks, E_POW2], then per chunk and expert first position,
# positions in BLOCK_T blocks (cap), first tail position ([n_chunks, 3, E_POW2]).


@triton.jit
def _fill_padding(sorted_pairs_ptr, fill_first, fill_end, CHUNK: tl.constexpr):
    """Padding marker -1 on ``sorted_pairs[fill_first:fill_end]``, CHUNK positions at a time."""
    lanes = tl.arange(0, CHUNK)
    for start in range(fill_first, fill_end, CHUNK):
        offs = start + lanes
        tl.store(sorted_pairs_ptr + offs, tl.full([CHUNK], -1, tl.int32), mask=offs < fill_end)


@triton.jit
def _chunk_experts(routing_map_ptr, valid_pairs, chunk, local_expert_offset, E: tl.constexpr, CHUNK: tl.constexpr):
    """``(local, is_local)`` ``[CHUNK]`` of chunk ``chunk``'s pairs: the local expert id, and whether the pair is
    valid and its expert local."""
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    in_range = offs < valid_pairs
    local, is_local = _local_expert(tl.load(routing_map_ptr + offs, mask=in_range, other=-1), local_expert_offset, E)
    return local, in_range & is_local


@triton.jit
def _local_expert(ids, local_expert_offset, E: tl.constexpr):
    """``(local, is_local)`` of global expert ``ids`` (int32 / int64 as the map holds them): the range check in the
    map's width, so an int64 id such as 2**32 + k is not local expert k after the int32 cast."""
    wide = ids - local_expert_offset
    return wide.to(tl.int32), (wide >= 0) & (wide < E)


@triton.jit
def _expert_order(local, is_local, E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    """A chunk's pairs in expert order (pair order within an expert, non-local pairs last), by one sort of the keys
    ``expert * CHUNK + lane``: per sorted index ``(expert, lane, is_local)``, the expert 0 where not local."""
    keys = tl.sort(tl.where(is_local, local, E_POW2) * CHUNK + tl.arange(0, CHUNK))
    expert = keys // CHUNK
    lane = keys - expert * CHUNK
    is_local = expert < E_POW2
    return tl.where(is_local, expert, 0), lane, is_local


@triton.jit
def _route_count(routing_map_ptr, valid_pairs, sorted_pairs_ptr, counts_ptr, chunk, fill_first, fill_end,
                 local_expert_offset, E: tl.constexpr, E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    """Padding marker -1 on ``sorted_pairs[fill_first:fill_end]``; histogram of chunk ``chunk``'s local experts."""
    _fill_padding(sorted_pairs_ptr, fill_first, fill_end, CHUNK)
    local, is_local = _chunk_experts(routing_map_ptr, valid_pairs, chunk, local_expert_offset, E, CHUNK)
    counts = tl.histogram(tl.where(is_local, local, 0), E_POW2, mask=is_local)
    tl.store(counts_ptr + chunk * E_POW2 + tl.arange(0, E_POW2), counts)


@triton.jit
def _owners(ends, index):
    """``[N]`` owner of each entry of ``index``: the number of experts whose ``ends`` (an inclusive cumsum of their
    blocks, ``[E_POW2]``) are at or before it. (``_store_block_tables`` spells it out: calling this there changed the
    sorting routes' SASS.)"""
    return tl.sum((ends[None, :] <= index[:, None]).to(tl.int32), axis=1)


@triton.jit
def _expert_blocks(totals, BLOCK_T: tl.constexpr, TAIL_T: tl.constexpr, E_POW2: tl.constexpr):
    """From each expert's pair count ``totals`` [E_POW2]: its BLOCK_T blocks, whether it takes a tail block (0 / 1),
    the first block after it (blocks of experts in order), the blocks in all, and its index among the tail blocks."""
    full = totals // BLOCK_T
    rest = totals - full * BLOCK_T
    if TAIL_T > 0:
        has_tail = ((rest > 0) & (rest <= TAIL_T)).to(tl.int32)
        blocks = full + (rest > TAIL_T).to(tl.int32)
    else:
        has_tail = tl.zeros([E_POW2], dtype=tl.int32)
        blocks = full + (rest > 0).to(tl.int32)
    block_end = tl.cumsum(blocks, axis=0)
    return blocks, has_tail, block_end, tl.sum(blocks, axis=0), tl.cumsum(has_tail, axis=0) - has_tail


@triton.jit
def _store_block_tables(block_end, total_blocks, has_tail, tail_index, block_expert_ptr, num_blocks_ptr, max_blocks,
                        tail_block_offset, part, parts, E_POW2: tl.constexpr, TAIL_T: tl.constexpr,
                        CHUNK_B: tl.constexpr):
    """By program ``part`` of ``parts``: every ``parts``-th CHUNK_B slice of ``block_expert`` from slice ``part``
    (block -> expert: the number of experts whose blocks end at or before block b), and (part 0) ``num_blocks`` and
    the tail block table."""
    block_lanes = tl.arange(0, CHUNK_B)
    for start in range(part * CHUNK_B, max_blocks, parts * CHUNK_B):
        b = start + block_lanes
        owner = tl.sum((block_end[None, :] <= b[:, None]).to(tl.int32), axis=1)
        owner = tl.where(b < total_blocks, owner, 0)
        tl.store(block_expert_ptr + b, owner, mask=b < max_blocks)
    if part == 0:
        tl.store(num_blocks_ptr, total_blocks)
        if TAIL_T > 0:
            tl.store(block_expert_ptr + tail_block_offset + tail_index, tl.arange(0, E_POW2), mask=has_tail > 0)
            tl.store(num_blocks_ptr + 4, tl.sum(has_tail, axis=0))


@triton.jit
def _route_plan(counts_ptr, cursor_ptr, tables_ptr, block_expert_ptr, num_blocks_ptr, n_chunks, max_sorted,
                max_blocks, tail_block_offset, part, parts, E: tl.constexpr, E_POW2: tl.constexpr,
                BLOCK_T: tl.constexpr, TAIL_T: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK_B: tl.constexpr):
    """Blocks per expert (experts in order) from every chunk's counts; by program ``part`` of ``parts``: the
    per-expert position tables at ``tables_ptr``, the cursor row of chunk ``part`` (the pairs of each expert in
    earlier chunks), every ``parts``-th CHUNK_B slice of ``block_expert`` from slice ``part``, and (part 0)
    ``num_blocks`` and the tail block table."""
    chunks = tl.arange(0, CHUNKS_POW2)
    experts = tl.arange(0, E_POW2)
    at = chunks[:, None] * E_POW2 + experts[None, :]
    counts = tl.load(counts_ptr + at, mask=(chunks[:, None] < n_chunks) & (experts[None, :] < E), other=0)
    blocks, has_tail, block_end, total_blocks, tail_index = _expert_blocks(tl.sum(counts, axis=0), BLOCK_T, TAIL_T,
                                                                           E_POW2)
    tl.store(tables_ptr + experts, (block_end - blocks) * BLOCK_T)
    tl.store(tables_ptr + E_POW2 + experts, blocks * BLOCK_T)
    tl.store(tables_ptr + 2 * E_POW2 + experts, max_sorted + tail_index * TAIL_T)
    tl.store(cursor_ptr + at, tl.cumsum(counts, axis=0) - counts, mask=chunks[:, None] == part)
    _store_block_tables(block_end, total_blocks, has_tail, tail_index, block_expert_ptr, num_blocks_ptr, max_blocks,
                        tail_block_offset, part, parts, E_POW2, TAIL_T, CHUNK_B)


@triton.jit
def _route_scatter(routing_map_ptr, valid_pairs, sorted_pairs_ptr, counts_ptr, cursor_ptr, tables_ptr, chunk,
                   local_expert_offset, E: tl.constexpr, E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    """Each local pair of chunk ``chunk`` takes rank ``cursor[chunk, e] + (pairs of expert e before it in the
    chunk)`` among its expert's pairs (so ranks follow pair order: deterministic, no atomics): position ``first +
    rank`` inside the expert's BLOCK_T blocks, past them its tail block. The in-chunk rank comes from one sort of
    the keys ``expert * CHUNK + lane``: a pair's sorted index minus the chunk's pairs of smaller experts."""
    lanes = tl.arange(0, CHUNK)
    local, is_local = _chunk_experts(routing_map_ptr, valid_pairs, chunk, local_expert_offset, E, CHUNK)
    expert, lane, is_local = _expert_order(local, is_local, E_POW2, CHUNK)
    # rank of sorted index i = i + cursor[chunk, e] - (chunk pairs of experts < e); kept in the cursor row, which
    # only this program reads after the plan step
    experts = tl.arange(0, E_POW2)
    counts = tl.load(counts_ptr + chunk * E_POW2 + experts)
    cursor_row = cursor_ptr + chunk * E_POW2
    adjusted = tl.load(cursor_row + experts) - (tl.cumsum(counts, axis=0) - counts)
    tl.debug_barrier()  # every thread (replicas included) has read the row before it is overwritten
    tl.store(cursor_row + experts, adjusted)
    tl.debug_barrier()  # the adjusted row is visible to every thread
    rank = lanes + tl.load(cursor_row + expert, mask=is_local, other=0)
    first = tl.load(tables_ptr + expert, mask=is_local, other=0)
    cap = tl.load(tables_ptr + E_POW2 + expert, mask=is_local, other=0)
    tail_first = tl.load(tables_ptr + 2 * E_POW2 + expert, mask=is_local, other=0)
    position = tl.where(rank < cap, first + rank, tail_first + rank - cap)
    tl.store(sorted_pairs_ptr + position, chunk * CHUNK + lane, mask=is_local)


@triton.jit
def _route_kernel(
    routing_map_ptr,  # [rows * topk] int32/int64 global expert ids, row-major (t * topk + k)
    valid_tokens_ptr,  # [1] int32: rows >= valid_tokens are ignored
    sorted_pairs_ptr,  # [max_sorted (+ E * TAIL_T)] int32 out: pair t * topk + k per padded position, -1 for padding
    block_expert_ptr,  # [max_blocks (+ tail table)] int32 out: local expert of each block
    num_blocks_ptr,  # [8] int32 out: [0] BLOCK_T blocks in use, [4] tail blocks in use
    scratch_ptr,  # [5 * E_POW2] int32: counts, cursors, tables
    rows,  # host int: rows processed (prefix of the buffer); rows * topk <= CHUNK
    fill_end,  # host int: length of sorted_pairs
    max_sorted,  # host int: BLOCK_T positions (the tail table starts there)
    max_blocks,  # host int: capacity of the BLOCK_T block table
    tail_block_offset,  # host int: first entry of the tail block table in block_expert
    local_expert_offset,  # host int: first global expert id on this rank
    TOPK: tl.constexpr,
    E: tl.constexpr,
    E_POW2: tl.constexpr,  # next power of two >= E
    BLOCK_T: tl.constexpr,
    TAIL_T: tl.constexpr,  # 0: no tail blocks
    CHUNK: tl.constexpr,
    CHUNK_B: tl.constexpr,
):
    """The whole route in one program, for one chunk of pairs (small pair counts): no host sync, graph-safe."""
    valid_pairs = tl.minimum(tl.load(valid_tokens_ptr), rows) * TOPK
    cursor_ptr = scratch_ptr + E_POW2
    tables_ptr = scratch_ptr + 2 * E_POW2
    _route_count(routing_map_ptr, valid_pairs, sorted_pairs_ptr, scratch_ptr, 0, 0, fill_end, local_expert_offset,
                 E, E_POW2, CHUNK)
    tl.debug_barrier()  # counts visible to every thread
    _route_plan(scratch_ptr, cursor_ptr, tables_ptr, block_expert_ptr, num_blocks_ptr, 1, max_sorted, max_blocks,
                tail_block_offset, 0, 1, E, E_POW2, BLOCK_T, TAIL_T, 2, CHUNK_B)  # a [2, E_POW2] tile, second row masked
    tl.debug_barrier()  # the -1 fill, the cursors and the tables are visible to every thread before the scatter
    _route_scatter(routing_map_ptr, valid_pairs, sorted_pairs_ptr, scratch_ptr, cursor_ptr, tables_ptr, 0,
                   local_expert_offset, E, E_POW2, CHUNK)


@triton.jit
def _route_in_registers_kernel(routing_map_ptr, valid_tokens_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr,
                               rows, fill_end, max_sorted, max_blocks, tail_block_offset, local_expert_offset,
                               TOPK: tl.constexpr, E: tl.constexpr, E_POW2: tl.constexpr, BLOCK_T: tl.constexpr,
                               TAIL_T: tl.constexpr, CHUNK: tl.constexpr, CHUNK_B: tl.constexpr):
    """``_route_kernel``'s tables (the same arguments, no scratch) with its per-expert counts and position tables
    kept in registers: the histogram feeds the plan directly, and each sorted pair takes its expert's entries by
    ``tl.gather`` instead of storing the tables and loading them back behind a barrier (session 30; run 34: 8.4 -> 8.1 us
    at 64 tokens, no layer gain, so not the default)."""
    valid_pairs = tl.minimum(tl.load(valid_tokens_ptr), rows) * TOPK
    _fill_padding(sorted_pairs_ptr, 0, fill_end, CHUNK)
    local, is_local = _chunk_experts(routing_map_ptr, valid_pairs, 0, local_expert_offset, E, CHUNK)
    counts = tl.histogram(tl.where(is_local, local, 0), E_POW2, mask=is_local)  # [E_POW2]
    blocks, has_tail, block_end, total_blocks, tail_index = _expert_blocks(counts, BLOCK_T, TAIL_T, E_POW2)
    _store_block_tables(block_end, total_blocks, has_tail, tail_index, block_expert_ptr, num_blocks_ptr, max_blocks,
                        tail_block_offset, 0, 1, E_POW2, TAIL_T, CHUNK_B)
    # sorted index i of expert e has rank i - (pairs of experts < e) among e's pairs
    expert, lane, is_local = _expert_order(local, is_local, E_POW2, CHUNK)
    rank = tl.arange(0, CHUNK) - tl.gather(tl.cumsum(counts, axis=0) - counts, expert, 0)
    cap = tl.gather(blocks * BLOCK_T, expert, 0)
    position = tl.where(rank < cap, tl.gather((block_end - blocks) * BLOCK_T, expert, 0) + rank,
                        tl.gather(max_sorted + tail_index * TAIL_T, expert, 0) + rank - cap)
    tl.debug_barrier()  # the -1 fill (other threads' stores) lands before the scatter overwrites it
    tl.store(sorted_pairs_ptr + position, lane, mask=is_local)


@triton.jit
def _fill_free_positions(sorted_pairs_ptr, ends, held_end, in_use, n_blocks, part, parts, WIDTH: tl.constexpr,
                         CHUNK_B: tl.constexpr):
    """-1 at every free position of ``parts``-strided CHUNK_B slices (from slice ``part``) of ``n_blocks`` blocks of
    WIDTH positions at ``sorted_pairs_ptr``. A position of block b is held when b < ``in_use`` and it lies before
    ``held_end`` (``[E_POW2]``: where each expert's pairs end) of b's owner (``_owners(ends, b)``). Writes only free
    positions, so it needs no barrier against the scatter of other programs."""
    block_lanes = tl.arange(0, CHUNK_B)
    width_lanes = tl.arange(0, WIDTH)
    for start in range(part * CHUNK_B, n_blocks, parts * CHUNK_B):
        b = start + block_lanes
        used = b < in_use
        end = tl.where(used, tl.gather(held_end, tl.where(used, _owners(ends, b), 0), 0), 0)
        offset = b[:, None] * WIDTH + width_lanes[None, :]
        free = (offset >= end[:, None]) & (b < n_blocks)[:, None]
        tl.store(sorted_pairs_ptr + offset, tl.full([CHUNK_B, WIDTH], -1, tl.int32), mask=free)


@triton.jit
def _route_parallel_kernel(routing_map_ptr, valid_tokens_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr,
                           rows, max_sorted, max_blocks, tail_block_offset, tail_blocks, local_expert_offset,
                           TOPK: tl.constexpr, E: tl.constexpr, E_POW2: tl.constexpr, BLOCK_T: tl.constexpr,
                           TAIL_T: tl.constexpr, CHUNK: tl.constexpr, SLICE: tl.constexpr, CHUNK_B: tl.constexpr):
    """``_route_kernel``'s tables (up to CHUNK pairs) from at least CHUNK / SLICE programs, with no sort, scratch or
    barrier (session 37). Every program takes the histogram of all pairs and plans the blocks from it in registers;
    program ``p`` then scatters pairs ``[p * SLICE, (p + 1) * SLICE)`` (none past the pairs). A pair's rank among
    its expert's pairs is that expert's pairs before the slice (a second, masked histogram) plus those before it in
    the slice (a ``[SLICE, SLICE]`` compare). The program's share of the block tables and of the -1 fill covers only
    free positions (``_fill_free_positions``), so no position is written twice. ``tail_blocks``: the tail table's
    capacity (``route_layout``)."""
    part = tl.program_id(0)
    parts = tl.num_programs(0)
    valid_pairs = tl.minimum(tl.load(valid_tokens_ptr), rows) * TOPK
    local, is_local = _chunk_experts(routing_map_ptr, valid_pairs, 0, local_expert_offset, E, CHUNK)
    experts = tl.where(is_local, local, 0)
    counts = tl.histogram(experts, E_POW2, mask=is_local)  # [E_POW2]
    before = tl.histogram(experts, E_POW2, mask=is_local & (tl.arange(0, CHUNK) < part * SLICE))
    blocks, has_tail, block_end, total_blocks, tail_index = _expert_blocks(counts, BLOCK_T, TAIL_T, E_POW2)
    first = (block_end - blocks) * BLOCK_T
    cap = blocks * BLOCK_T
    # this program's slice of pairs
    mine, mine_local = _chunk_experts(routing_map_ptr, valid_pairs, part, local_expert_offset, E, SLICE)
    mine = tl.where(mine_local, mine, 0)
    lanes = tl.arange(0, SLICE)
    earlier = (mine[:, None] == mine[None, :]) & mine_local[None, :] & (lanes[None, :] < lanes[:, None])
    rank = tl.gather(before, mine, 0) + tl.sum(earlier.to(tl.int32), axis=1)
    slot_cap = tl.gather(cap, mine, 0)
    position = tl.where(rank < slot_cap, tl.gather(first, mine, 0) + rank,
                        tl.gather(max_sorted + tail_index * TAIL_T, mine, 0) + rank - slot_cap)
    tl.store(sorted_pairs_ptr + position, part * SLICE + lanes, mask=mine_local)
    _store_block_tables(block_end, total_blocks, has_tail, tail_index, block_expert_ptr, num_blocks_ptr, max_blocks,
                        tail_block_offset, part, parts, E_POW2, TAIL_T, CHUNK_B)
    _fill_free_positions(sorted_pairs_ptr, block_end, first + tl.minimum(counts, cap), total_blocks, max_blocks, part,
                         parts, BLOCK_T, CHUNK_B)
    if TAIL_T > 0:  # tail block i: the i-th expert with a tail, its pairs past its BLOCK_T blocks
        _fill_free_positions(sorted_pairs_ptr + max_sorted, tail_index + has_tail,
                             tail_index * TAIL_T + counts - cap, tl.sum(has_tail, axis=0), tail_blocks, part, parts,
                             TAIL_T, CHUNK_B)


@triton.jit
def _route_count_kernel(routing_map_ptr, valid_tokens_ptr, sorted_pairs_ptr, scratch_ptr, rows, fill_len,
                        fill_per_chunk, local_expert_offset, TOPK: tl.constexpr, E: tl.constexpr,
                        E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    """Split route, step 1 (grid: n_chunks): -1 fill of ``fill_per_chunk`` positions and this chunk's counts."""
    chunk = tl.program_id(0)
    valid_pairs = tl.minimum(tl.load(valid_tokens_ptr), rows) * TOPK
    fill_first = chunk * fill_per_chunk
    fill_end = tl.minimum(fill_first + fill_per_chunk, fill_len)
    _route_count(routing_map_ptr, valid_pairs, sorted_pairs_ptr, scratch_ptr, chunk, fill_first, fill_end,
                 local_expert_offset, E, E_POW2, CHUNK)


@triton.jit
def _route_plan_scatter_kernel(routing_map_ptr, valid_tokens_ptr, sorted_pairs_ptr, scratch_ptr, block_expert_ptr,
                               num_blocks_ptr, rows, n_chunks, max_sorted, max_blocks, tail_block_offset,
                               local_expert_offset, TOPK: tl.constexpr, E: tl.constexpr, E_POW2: tl.constexpr,
                               BLOCK_T: tl.constexpr, TAIL_T: tl.constexpr, CHUNKS_POW2: tl.constexpr,
                               CHUNK_B: tl.constexpr, CHUNK: tl.constexpr):
    """Split route, steps 2 and 3 (grid: n_chunks): each chunk's program plans from every chunk's counts (its own
    cursor row and tables, its share of the block table), then scatters its chunk."""
    chunk = tl.program_id(0)
    valid_pairs = tl.minimum(tl.load(valid_tokens_ptr), rows) * TOPK
    cursor_ptr = scratch_ptr + n_chunks * E_POW2
    tables_ptr = cursor_ptr + n_chunks * E_POW2 + chunk * 3 * E_POW2
    _route_plan(scratch_ptr, cursor_ptr, tables_ptr, block_expert_ptr, num_blocks_ptr, n_chunks, max_sorted,
                max_blocks, tail_block_offset, chunk, n_chunks, E, E_POW2, BLOCK_T, TAIL_T, CHUNKS_POW2, CHUNK_B)
    tl.debug_barrier()  # this program's cursor row and tables are visible to every thread before the scatter
    _route_scatter(routing_map_ptr, valid_pairs, sorted_pairs_ptr, scratch_ptr, cursor_ptr, tables_ptr, chunk,
                   local_expert_offset, E, E_POW2, CHUNK)


# Dequant modes (keep in sync with ``_DEQUANT_CODE`` in triton_config.py).
DQ_CVT = tl.constexpr(0)  # cvt e4m3x2 -> f16x2 -> bf16, times 2 ** (s - 127) in bf16 (v1/v2)
DQ_FP32 = tl.constexpr(1)  # fp32 convert and multiply (Triton interpreter: its bf16 math is wrong)
DQ_BITS = tl.constexpr(2)  # bit trick in inline PTX (prmt/shift/and/or), two exact bf16 multiplies
DQ_BITS_INT = tl.constexpr(3)  # the same bit trick in plain Triton integer ops, fp32 scale (interpreter check)
DQ_SX = tl.constexpr(5)  # v4: sign-extending prmt + shift + and (3 int ops per 2 weights), two exact bf16 multiplies
# v8 (host mode "sx_auto"): per tile shift = max(0, max scale byte - 134) (``_fc1_tile``, ``_fc2_kernel``), then the
# sign-extending bits times ONE bf16 factor 2 ** (s - 7 - shift) (0 if too small), accumulators times 2 ** shift
DQ_SX_AUTO = tl.constexpr(7)
# Session 12 (host mode "sx4", MMA path): the weight tile is loaded as uint32 words, 4 K-neighbours each, so the
# pipeline copies it with 16-byte cp.async and reads it back with 8/16-byte LDS (fp8 tiles get 8-byte copies and
# 2-byte LDS; NOTES session 11). Byte i of every word is one "plane" (K = 4j + i); each plane is dequantized like DQ_SX
# and multiplied with the matching rows of the token tile: 4 MMAs of K / 4 per step (``_mma_sx4``). Exact products,
# but the planes are summed one after the other: not bit-equal to one MMA over K. DQ_SX4_INT: the same planes in
# plain integer ops with fp32 scales (interpreter check).
DQ_SX4 = tl.constexpr(8)
DQ_SX4_INT = tl.constexpr(9)


@triton.jit
def _fp8_bits_to_bf16(w):
    """fp8 e4m3 -> the bf16 whose value is ``e4m3 * 2 ** -120``, by moving bits (no cvt instructions).

    bf16 bits ``(b & 0x80) << 8 | (b & 0x7F) << 4``: the sign stays the sign, the 4-bit exponent lands in the
    low 4 bits of bf16's 8-bit exponent field (bias 127 instead of 7: a factor 2 ** -120) and the 3 mantissa
    bits on top of bf16's 7. e4m3 subnormals (exponent 0) land on bf16 subnormals with the same factor, so
    every finite byte maps exactly; the e4m3 NaN bytes (0x7F, 0xFF) map to finite values (+-480 * 2 ** -120).
    4 bytes per PTX instance: prmt puts byte i in the high byte of a 16-bit lane, then shift and mask.
    """
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 r<6>;
        prmt.b32 r0, $2, 0, 0x1404;
        prmt.b32 r1, $2, 0, 0x3424;
        shr.b32 r2, r0, 4;
        shr.b32 r3, r1, 4;
        and.b32 r2, r2, 0x07F007F0;
        and.b32 r3, r3, 0x07F007F0;
        and.b32 r4, r0, 0x80008000;
        and.b32 r5, r1, 0x80008000;
        or.b32 $0, r2, r4;
        or.b32 $1, r3, r5;
        }
        """,
        constraints="=r,=r,r",
        args=[w.to(tl.uint8, bitcast=True)],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _fp8_sx_to_bf16(w):
    """fp8 e4m3 -> the bf16 ``e4m3 * 2 ** -120`` (as ``_fp8_bits_to_bf16``), 2 bytes per PTX instance.

    ``prmt`` with selector 0x9180 sign-extends byte 0 and byte 1 into the two 16-bit lanes (lane = int16(b)),
    a 4-bit left shift moves ``eeeemmm`` to bf16 bits 4..10 (and the sign copies to 11..15, one of them into
    the other lane's low nibble), and the mask 0x87F087F0 keeps the sign at bit 15 and bits 4..10 only:
    bf16 bits ``(b & 0x80) << 8 | (b & 0x7F) << 4``. Two bytes per instance match the wgmma register
    fragment (pairs of K-neighbours per thread), so no repacking PRMTs are needed around the asm.
    """
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t;
        cvt.u32.u16 t, $1;
        prmt.b32 t, t, 0, 0x9180;
        shl.b32 t, t, 4;
        and.b32 $0, t, 0x87F087F0;
        }
        """,
        constraints="=r,h",
        args=[w.to(tl.uint8, bitcast=True)],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=2,
    )


@triton.jit
def _sx_factors(s):
    """The two exact bf16 factors ``2 ** (min(s, 134) - 7)`` and ``2 ** (max(s, 134) - 134)`` of E8M0 bytes ``s``
    (DQ_BITS / DQ_SX / DQ_SX4): both normal for every byte, so ``(e4m3 * 2 ** -120) * lo * hi`` is exact."""
    si = s.to(tl.int16)
    lo = ((tl.minimum(si, 134) + 120) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
    hi = ((tl.maximum(si, 134) - 7) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
    return lo, hi


@triton.jit
def _sx_factors_f32(s):
    """``_sx_factors`` as fp32 (the interpreter checks DQ_BITS_INT / DQ_SX4_INT)."""
    si = s.to(tl.int32)
    lo = ((tl.minimum(si, 134) + 120) << 23).to(tl.float32, bitcast=True)  # 2 ** (min(s, 134) - 7)
    hi = ((tl.maximum(si, 134) - 7) << 23).to(tl.float32, bitcast=True)  # 2 ** (max(s, 134) - 134)
    return lo, hi


@triton.jit
def _fp8x4_sx_to_bf16(words):
    """uint32 words of 4 e4m3 bytes -> 4 bf16 tensors, byte ``i`` of each word in the ``i``-th: the value
    ``e4m3 * 2 ** -120`` of ``_fp8_sx_to_bf16`` (selectors 0x9180 / 0xB3A2 sign-extend bytes 0, 1 / 2, 3)."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 a, b;
        prmt.b32 a, $4, 0, 0x9180;
        prmt.b32 b, $4, 0, 0xB3A2;
        shl.b32 a, a, 4;
        shl.b32 b, b, 4;
        and.b32 a, a, 0x87F087F0;
        and.b32 b, b, 0x87F087F0;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        }
        """,
        constraints="=h,=h,=h,=h,r",
        args=[words],
        dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16),
        is_pure=True,
        pack=1,
    )


@triton.jit
def _plane_mma(v, lo, hi, x, acc, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP32_DOT: tl.constexpr):
    """``acc += (v * lo * hi) @ x`` for one byte plane ``v`` ``[BLOCK_N, BLOCK_K // 4]`` (8 values per 32-block)
    and its per-block factors ``[BLOCK_N, BLOCK_K // 32]``."""
    values = tl.reshape(v, [BLOCK_N, BLOCK_K // 32, 8]) * tl.reshape(lo, [BLOCK_N, BLOCK_K // 32, 1])
    values = values * tl.reshape(hi, [BLOCK_N, BLOCK_K // 32, 1])
    return _mma(tl.reshape(values, [BLOCK_N, BLOCK_K // 4]), x, acc, FP32_DOT)


@triton.jit
def _int_plane(words, i: tl.constexpr):
    """Byte plane ``i`` of uint32 words as fp32 ``e4m3 * 2 ** -120`` (plain integer ops: DQ_SX4_INT)."""
    b = ((words >> (8 * i)) & 0xFF).to(tl.int32)
    bits16 = (((b & 0x80) << 8) | ((b & 0x7F) << 4)).to(tl.int16)
    return bits16.to(tl.bfloat16, bitcast=True).to(tl.float32)


@triton.jit
def _x_planes(x, BLOCK_K: tl.constexpr):
    """The 4 byte-plane operands ``[BLOCK_K // 4, BLOCK_T]`` of a K-ordered token tile ``x`` ``[BLOCK_K, BLOCK_T]``:
    plane ``i`` holds rows ``k = 4j + i``. Triton does this in registers and stores each plane back to shared
    memory for the MMA, every K step (compile-only, Triton 3.8: a local_load, the shuffles and 4 local_allocs)."""
    BLOCK_T: tl.constexpr = x.shape[1]
    x4 = tl.reshape(tl.permute(tl.reshape(x, [BLOCK_K // 4, 4, BLOCK_T]), (0, 2, 1)), [BLOCK_K // 4, BLOCK_T, 2, 2])
    x_even, x_odd = tl.split(x4)  # planes 0, 2 / 1, 3 (the last axis of the [2, 2] pair is plane % 2)
    x0, x2 = tl.split(x_even)
    x1, x3 = tl.split(x_odd)
    return x0, x1, x2, x3


@triton.jit
def _load_tokens(ptrs, token_mask, k_left, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """The K-ordered token tile ``[BLOCK_K, BLOCK_T]`` of one K step (``ptrs``), zeros in the columns without a token
    and, unless EVEN_K, past the ``k_left`` K values left."""
    if EVEN_K:
        x = tl.load(ptrs, mask=token_mask[None, :], other=0.0)
    else:
        x = tl.load(ptrs, mask=token_mask[None, :] & (tl.arange(0, BLOCK_K)[:, None] < k_left), other=0.0)
    return x


@triton.jit
def _load_planes(ptrs, token_mask, k_left, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """The 4 plane operands ``[BLOCK_K // 4, BLOCK_T]`` of one K step from tokens stored plane-major per K step
    (``planes_of``: plane ``i`` is the contiguous run from ``i * BLOCK_K // 4``; ``ptrs`` point at plane 0): each
    plane is loaded as its own tile, straight into the MMA's shared layout (no ``_x_planes`` shuffle). ``k_left``:
    K values left from the step's start (unused when EVEN_K)."""
    QUARTER: tl.constexpr = BLOCK_K // 4
    if EVEN_K:
        x0 = tl.load(ptrs, mask=token_mask[None, :], other=0.0)
        x1 = tl.load(ptrs + QUARTER, mask=token_mask[None, :], other=0.0)
        x2 = tl.load(ptrs + 2 * QUARTER, mask=token_mask[None, :], other=0.0)
        x3 = tl.load(ptrs + 3 * QUARTER, mask=token_mask[None, :], other=0.0)
    else:
        k4 = 4 * tl.arange(0, QUARTER)[:, None]  # plane i, row j holds k = 4j + i
        x0 = tl.load(ptrs, mask=token_mask[None, :] & (k4 < k_left), other=0.0)
        x1 = tl.load(ptrs + QUARTER, mask=token_mask[None, :] & (k4 + 1 < k_left), other=0.0)
        x2 = tl.load(ptrs + 2 * QUARTER, mask=token_mask[None, :] & (k4 + 2 < k_left), other=0.0)
        x3 = tl.load(ptrs + 3 * QUARTER, mask=token_mask[None, :] & (k4 + 3 < k_left), other=0.0)
    return x0, x1, x2, x3


@triton.jit
def _plane_cols(cols, PLANE_K: tl.constexpr):
    """Where K-ordered column ``cols`` of a row lives in the plane-major layout of ``PLANE_K``-deep K steps
    (``planes_of``): ``c * PLANE_K + (r % 4) * (PLANE_K // 4) + r // 4`` for ``cols = c * PLANE_K + r``; 0: as is."""
    if PLANE_K > 0:
        r = cols % PLANE_K
        cols = cols - r + (r % 4) * (PLANE_K // 4) + r // 4
    return cols


@triton.jit
def _planes_kernel(x_ptr, out_ptr, rows, K, stride_x, stride_out, PLANE_K: tl.constexpr, BLOCK_R: tl.constexpr):
    """``planes_of`` on the device for rows ``[BLOCK_R]`` and K step ``program_id(1)`` (grid: row blocks, K_PADDED //
    PLANE_K steps): the step ``[BLOCK_R, PLANE_K]`` loaded in K order (zeros from K on), its columns put in plane
    order in registers (``k = 4j + i`` -> ``i * PLANE_K // 4 + j``, ``_plane_cols``), stored contiguously. Session 17:
    storing each value at its plane column instead (2-byte scattered stores) took 11 us for 1 MB of x."""
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    c0 = tl.program_id(1) * PLANE_K
    k = tl.arange(0, PLANE_K // 4)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]  # [1, PLANE_K // 4, 4]
    v = tl.load(x_ptr + r[:, None, None] * stride_x + c0 + k, mask=(r < rows)[:, None, None] & (c0 + k < K),
                other=0.0)
    v = tl.reshape(tl.permute(v, (0, 2, 1)), [BLOCK_R, PLANE_K])  # [r, i, j] -> column i * PLANE_K // 4 + j
    c = tl.arange(0, PLANE_K)
    tl.store(out_ptr + r[:, None] * stride_out + c0 + c[None, :], v, mask=(r < rows)[:, None])


@triton.jit
def _mma_sx4(words, s, x0, x1, x2, x3, acc, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DEQUANT: tl.constexpr,
             FP32_DOT: tl.constexpr):
    """``acc += W @ x`` for one K step: ``words`` ``[BLOCK_N, BLOCK_K // 4]`` uint32 (byte ``i`` of word ``j`` is
    weight ``k = 4j + i``), ``s`` its E8M0 tile ``[BLOCK_N, BLOCK_K // 32]``, ``x0..x3`` the token tile's planes
    ``[BLOCK_K // 4, BLOCK_T]`` bf16 (``_x_planes`` / ``_load_planes``). Four MMAs over K / 4, plane by plane (DQ_SX4 /
    DQ_SX4_INT); the factors are DQ_SX's (exact)."""
    if DEQUANT == DQ_SX4_INT:
        lo, hi = _sx_factors_f32(s)
        acc = _plane_mma(_int_plane(words, 0), lo, hi, x0, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(_int_plane(words, 1), lo, hi, x1, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(_int_plane(words, 2), lo, hi, x2, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(_int_plane(words, 3), lo, hi, x3, acc, BLOCK_N, BLOCK_K, FP32_DOT)
    else:
        v0, v1, v2, v3 = _fp8x4_sx_to_bf16(words)
        lo, hi = _sx_factors(s)
        acc = _plane_mma(v0, lo, hi, x0, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(v1, lo, hi, x1, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(v2, lo, hi, x2, acc, BLOCK_N, BLOCK_K, FP32_DOT)
        acc = _plane_mma(v3, lo, hi, x3, acc, BLOCK_N, BLOCK_K, FP32_DOT)
    return acc


@triton.jit
def _word_rows(w_base, rows, stride_wn):
    """``[BLOCK_N, 1]`` uint32 pointers to the first word of each weight row (DQ_SX4; the host checks that rows
    start at 4-byte aligned addresses)."""
    return w_base.to(tl.pointer_type(tl.uint32)) + rows[:, None] * (stride_wn // 4)


@triton.jit
def _e8m0_f32(s):
    """E8M0 bytes -> the fp32 ``2 ** (s - 127)`` (byte 0: the subnormal ``2 ** -127``)."""
    si = s.to(tl.int32)
    return tl.where(si == 0, 0x00400000, si << 23).to(tl.float32, bitcast=True)


@triton.jit
def _dequant_tile(w, s, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DEQUANT: tl.constexpr, shift=0):
    """fp8 e4m3 ``[BLOCK_N, BLOCK_K]`` and uint8 E8M0 ``[BLOCK_N, BLOCK_K // 32]`` -> exact bf16 values.

    DQ_CVT: e4m3 -> bf16 by cvt, times 2 ** (s - 127) as a bf16 built from bits. DQ_FP32: the same in fp32.
    DQ_BITS / DQ_SX / DQ_BITS_INT: ``_fp8_bits_to_bf16`` / ``_fp8_sx_to_bf16`` (value * 2 ** -120), times 2 ** (min(s, 134) - 7) and then
    2 ** (max(s, 134) - 134): both factors are normal bf16 for every byte s, so the product equals
    e4m3 * 2 ** (s - 127) rounded once exactly like DQ_CVT (the second factor is 1 unless s > 134, scale > 2^7).
    DQ_SX_AUTO: ``_fp8_sx_to_bf16`` times the one factor 2 ** (s - 7 - shift) (0 below the bf16 range), for a
    tile-wide ``shift`` that keeps every factor of the tile normal (``_fc1_tile``, ``_fc2_kernel``; 0 for scales up
    to 2^7). Exact like DQ_CVT for blocks with ``s >= shift + 3`` where the cvt value is finite; the E8M0 NaN byte
    255 (never written by the canonical quantizer, rejected by refit) gives a finite factor here.
    """
    if DEQUANT == DQ_FP32:
        scale32 = _e8m0_f32(s)
        values32 = tl.reshape(w.to(tl.float32), [BLOCK_N, BLOCK_K // 32, 32])
        values32 = values32 * tl.reshape(scale32, [BLOCK_N, BLOCK_K // 32, 1])
        result = tl.reshape(values32, [BLOCK_N, BLOCK_K]).to(tl.bfloat16)
    elif DEQUANT == DQ_BITS_INT:
        b = w.to(tl.uint8, bitcast=True).to(tl.int32)
        bits16 = (((b & 0x80) << 8) | ((b & 0x7F) << 4)).to(tl.int16)
        v32 = bits16.to(tl.bfloat16, bitcast=True).to(tl.float32)  # exact: e4m3 * 2 ** -120
        lo32, hi32 = _sx_factors_f32(s)
        values32 = tl.reshape(v32, [BLOCK_N, BLOCK_K // 32, 32]) * tl.reshape(lo32, [BLOCK_N, BLOCK_K // 32, 1])
        values32 = values32 * tl.reshape(hi32, [BLOCK_N, BLOCK_K // 32, 1])
        result = tl.reshape(values32, [BLOCK_N, BLOCK_K]).to(tl.bfloat16)
    elif DEQUANT == DQ_SX_AUTO:
        v = _fp8_sx_to_bf16(w)
        e = tl.maximum(s.to(tl.int16) + (120 - shift).to(tl.int16), 0)
        scale = (e << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)  # 2 ** (s - 7 - shift), or 0
        values = tl.reshape(v, [BLOCK_N, BLOCK_K // 32, 32]) * tl.reshape(scale, [BLOCK_N, BLOCK_K // 32, 1])
        result = tl.reshape(values, [BLOCK_N, BLOCK_K])
    elif DEQUANT == DQ_BITS or DEQUANT == DQ_SX:
        if DEQUANT == DQ_SX:
            v = _fp8_sx_to_bf16(w)
        else:
            v = _fp8_bits_to_bf16(w)
        lo, hi = _sx_factors(s)
        values = tl.reshape(v, [BLOCK_N, BLOCK_K // 32, 32]) * tl.reshape(lo, [BLOCK_N, BLOCK_K // 32, 1])
        values = values * tl.reshape(hi, [BLOCK_N, BLOCK_K // 32, 1])
        result = tl.reshape(values, [BLOCK_N, BLOCK_K])
    else:
        # 2 ** (b - 127) as bf16 bits is b << 7 for b >= 1; byte 0 is the bf16 subnormal 2 ** -127 (0x0040).
        bits = s.to(tl.int16) << 7
        bits = tl.where(s == 0, 0x40, bits).to(tl.int16)
        scale = bits.to(tl.bfloat16, bitcast=True)
        values = tl.reshape(w.to(tl.bfloat16), [BLOCK_N, BLOCK_K // 32, 32])
        values = values * tl.reshape(scale, [BLOCK_N, BLOCK_K // 32, 1])
        result = tl.reshape(values, [BLOCK_N, BLOCK_K])
    return result


@triton.jit
def _scale_row_offsets(rows):
    """Byte offset of scale column 0 of each weight row inside one expert's 128x4-swizzled scales.

    cuBLAS 128x4 layout (``format/swizzle.py``): logical scale ``(m, c)`` of an expert lives at
    ``((m // 128) * (Cp // 4) + c // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + c % 4``; this is the
    part that depends on ``m`` only, without the ``(m // 128) * (Cp // 4) * 512`` tile-row term (added by the
    caller, which knows ``Cp // 4``).
    """
    return (rows % 32) * 16 + ((rows % 128) // 32) * 4


@triton.jit
def _scale_rows(s_base, rows, scale_tiles):
    """Pointers to scale column 0 of each weight row ``rows`` in one expert's 128x4-swizzled scales at ``s_base``:
    the tile-row term (``scale_tiles`` = Cp // 4 tiles of 512 bytes per 128-row tile row) plus
    ``_scale_row_offsets``."""
    return s_base + (rows // 128) * (scale_tiles * 512) + _scale_row_offsets(rows)


@triton.jit
def _scale_col_offsets(k, SCALE_COLS: tl.constexpr):
    """Byte offsets (within a row's tile run) of the ``SCALE_COLS`` scale columns of K step ``k``."""
    cols = k * SCALE_COLS + tl.arange(0, SCALE_COLS)
    return (cols // 4) * 512 + cols % 4


@triton.jit
def _mma(w, x, acc, FP32_DOT: tl.constexpr):
    """``acc += w @ x`` with bf16 operands; ``FP32_DOT`` 1 (or True): fp32 ieee operands (interpreter); 2: bf16, then
    an identity use of ``acc`` so Triton retires this dot's wgmmas before what follows (``sync_dots``)."""
    if FP32_DOT == 1:
        acc = tl.dot(w.to(tl.float32), x.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(w, x, acc)
        if FP32_DOT == 2:
            acc = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [acc], dtype=tl.float32, is_pure=False,
                                            pack=1)
    return acc


@triton.jit
def _activate(g, u, ACTIVATION: tl.constexpr):
    """fp32 activation; ``u`` is the up half for gated activations (ignored otherwise)."""
    if ACTIVATION == ACT_SWIGLU:
        out = g * tl.sigmoid(g) * u
    elif ACTIVATION == ACT_GEGLU:
        # gelu_tanh(g) = g * sigmoid(2 * sqrt(2 / pi) * (g + 0.044715 g^3))
        out = g * tl.sigmoid(1.5957691216057308 * (g + 0.044715 * g * g * g)) * u
    elif ACTIVATION == ACT_SQUARED_RELU:
        r = tl.maximum(g, 0.0)
        out = r * r
    elif ACTIVATION == ACT_RELU:
        out = tl.maximum(g, 0.0)
    else:
        out = g * tl.sigmoid(g)
    return out


@triton.jit
def _wide_scale_max(s_base, row_first, row_last, scale_tiles, m, CHUNK: tl.constexpr):
    """``max(m, bytes)`` over every scale byte of the 128-row tile rows that hold rows ``row_first..row_last``.

    The whole 128-row tile row (all K) is a superset of the rows a tile dequantizes: a conservative bound.
    """
    run = scale_tiles * 512  # bytes of one 128-row tile row: all its 128x4 tiles side by side
    for tile_row in range(row_first // 128, row_last // 128 + 1):
        for start in range(0, run, CHUNK):
            offs = start + tl.arange(0, CHUNK)
            m = tl.maximum(m, tl.load(s_base + tile_row * run + offs, mask=offs < run, other=0))
    return m


@triton.jit
def _wide_scale_flags(s_base, row_first, row_last, scale_tiles, flags, CHUNK: tl.constexpr):
    """``flags`` OR, over the same bytes as ``_wide_scale_max`` read as uint32 words, of bit 7 of every byte above
    134 (SWAR: a byte ``b`` is above 134 when bit 7 is set and ``(b & 0x7F) + 121`` carries into bit 7; no carry
    crosses bytes). Nonzero iff some byte exceeds 134, i.e. iff sx_auto's shift is positive."""
    words = s_base.to(tl.pointer_type(tl.uint32))  # 128-row tile rows start at multiples of 512 bytes
    run = scale_tiles * 128  # words of one 128-row tile row
    for tile_row in range(row_first // 128, row_last // 128 + 1):
        for start in range(0, run, CHUNK):
            offs = start + tl.arange(0, CHUNK)
            w = tl.load(words + tile_row * run + offs, mask=offs < run, other=0)
            flags = flags | (w & ((w & 0x7F7F7F7F) + 0x79797979) & 0x80808080)
    return flags


@triton.jit
def _sx_auto_shift(s_base, row_first, row_last, second_offset, scale_tiles, TWO_RANGES: tl.constexpr):
    """sx_auto's ``shift = max(0, largest scale byte - 134)`` over the 128-row tile rows that hold rows
    ``row_first..row_last`` (and, with ``TWO_RANGES``, the same rows plus ``second_offset``): the word test first,
    the exact byte maximum only when it finds a byte above 134 (rare: a scale above 2 ** 7)."""
    flags = _wide_scale_flags(s_base, row_first, row_last, scale_tiles, tl.zeros([512], dtype=tl.uint32), 512)
    if TWO_RANGES:
        flags = _wide_scale_flags(s_base, row_first + second_offset, row_last + second_offset, scale_tiles, flags,
                                  512)
    wide = tl.max((flags != 0).to(tl.int32), axis=0)
    shift = wide * 0
    if wide != 0:
        m = _wide_scale_max(s_base, row_first, row_last, scale_tiles, tl.zeros([1024], dtype=tl.uint8), 1024)
        if TWO_RANGES:
            m = _wide_scale_max(s_base, row_first + second_offset, row_last + second_offset, scale_tiles, m, 1024)
        shift = tl.maximum(tl.max(m, axis=0).to(tl.int32) - 134, 0)
    return shift


@triton.jit
def _pow2_f32(shift):
    """``2 ** shift`` as fp32 from its bits (``0 <= shift <= 127``): sx_auto's factor on the accumulators."""
    return ((shift + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _token_ptrs(rows, k_first, BLOCK_K: tl.constexpr, PLANE_MAJOR: tl.constexpr):
    """Pointers to K step ``k_first`` of the token columns whose row pointers are ``rows`` [BLOCK_T]: the K-ordered
    tile ``[BLOCK_K, BLOCK_T]`` or, PLANE_MAJOR (rows stored by ``planes_of``), plane 0 ``[BLOCK_K // 4, BLOCK_T]``."""
    if PLANE_MAJOR:
        ptrs = rows[None, :] + tl.arange(0, BLOCK_K // 4)[:, None] + k_first * BLOCK_K
    else:
        ptrs = rows[None, :] + tl.arange(0, BLOCK_K)[:, None] + k_first * BLOCK_K
    return ptrs


@triton.jit
def _weight_ptrs(w_base, rows, stride_wn, k_first, BLOCK_K: tl.constexpr, WORDS: tl.constexpr):
    """Pointers to K step ``k_first`` of weight ``rows`` (int64 [BLOCK_N]): fp8 ``[BLOCK_N, BLOCK_K]`` or, WORDS = 4
    ("sx4"), uint32 words ``[BLOCK_N, BLOCK_K // 4]``."""
    if WORDS == 4:
        ptrs = _word_rows(w_base, rows, stride_wn) + tl.arange(0, BLOCK_K // 4)[None, :] + k_first * (BLOCK_K // 4)
    else:
        ptrs = w_base + rows[:, None] * stride_wn + tl.arange(0, BLOCK_K)[None, :] + k_first * BLOCK_K
    return ptrs


@triton.jit
def _token_operands(ptrs, token_mask, k_left, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, PLANE_MAJOR: tl.constexpr):
    """The token operands of one K step (``_token_ptrs``) as 4 tiles: the 4 plane tiles of plane-major rows
    (PLANE_MAJOR, ``_load_planes``), or the K-ordered tile 4 times (``_load_tokens``; ``_as_planes`` shuffles it
    into planes for "sx4", ``_mma_step`` reads the first otherwise)."""
    if PLANE_MAJOR:
        x0, x1, x2, x3 = _load_planes(ptrs, token_mask, k_left, BLOCK_K, EVEN_K)
    else:
        x = _load_tokens(ptrs, token_mask, k_left, BLOCK_K, EVEN_K)
        x0, x1, x2, x3 = x, x, x, x
    return x0, x1, x2, x3


@triton.jit
def _as_planes(x0, x1, x2, x3, BLOCK_K: tl.constexpr, SHUFFLE: tl.constexpr):
    """``_token_operands``' tiles as "sx4" plane operands: SHUFFLE (a K-ordered tile) through ``_x_planes``, else
    unchanged. Called after the step's weight load: the order the "sx4" kernels were compiled and timed with."""
    if SHUFFLE:
        x0, x1, x2, x3 = _x_planes(x0, BLOCK_K)
    return x0, x1, x2, x3


@triton.jit
def _mma_step(w, s, x0, x1, x2, x3, acc, shift, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DEQUANT: tl.constexpr,
              FP32_DOT: tl.constexpr):
    """``acc += W @ x`` for one K step: ``w`` / ``s`` from ``_weight_step``, ``x0..x3`` from ``_as_planes``;
    "sx4" words through ``_mma_sx4``, fp8 bytes through ``_dequant_tile`` (``shift``: DQ_SX_AUTO's)."""
    if DEQUANT == DQ_SX4 or DEQUANT == DQ_SX4_INT:
        acc = _mma_sx4(w, s, x0, x1, x2, x3, acc, BLOCK_N, BLOCK_K, DEQUANT, FP32_DOT)
    else:
        acc = _mma(_dequant_tile(w, s, BLOCK_N, BLOCK_K, DEQUANT, shift), x0, acc, FP32_DOT)
    return acc


@triton.jit
def _fc1_steps(acc_g, acc_u, x_rows, w_base, s_base, rows_n, token_mask, N_OUT, steps, K, stride_wn, scale_tiles, shift,
               GATED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
               DEQUANT: tl.constexpr, FP32_DOT: tl.constexpr, X_PLANES: tl.constexpr = False):
    """The ``steps`` K steps of FC1, software-pipelined: ``(acc_g, acc_u)`` plus the tile's products (``acc_u``
    untouched unless GATED). ``x_rows`` [BLOCK_T]: each token column's row pointer; ``rows_n`` [BLOCK_N] int64: the (gate)
    weight rows; ``shift``: DQ_SX_AUTO's exponent shift (0 otherwise); X_PLANES (DQ_SX4 / DQ_SX4_INT): the tokens are
    stored plane-major per K step (``_load_planes``)."""
    SX4: tl.constexpr = DEQUANT == DQ_SX4 or DEQUANT == DQ_SX4_INT
    if SX4:  # K values per weight pointer ("sx4": uint32 words)
        WORDS: tl.constexpr = 4
    else:
        WORDS: tl.constexpr = 1
    x_ptrs = _token_ptrs(x_rows, 0, BLOCK_K, SX4 and X_PLANES)
    wg_ptrs = _weight_ptrs(w_base, rows_n, stride_wn, 0, BLOCK_K, WORDS)
    sg_rows = _scale_rows(s_base, rows_n, scale_tiles)
    if GATED:
        wu_ptrs = wg_ptrs + N_OUT * (stride_wn // WORDS)
        su_rows = _scale_rows(s_base, rows_n + N_OUT, scale_tiles)
    for k in range(0, steps):
        k_left = K - k * BLOCK_K  # unused when EVEN_K
        x0, x1, x2, x3 = _token_operands(x_ptrs, token_mask, k_left, BLOCK_K, EVEN_K, SX4 and X_PLANES)
        wg, sg = _weight_step(wg_ptrs, sg_rows, k, K, BLOCK_K, EVEN_K, WORDS)
        x0, x1, x2, x3 = _as_planes(x0, x1, x2, x3, BLOCK_K, SX4 and not X_PLANES)
        acc_g = _mma_step(wg, sg, x0, x1, x2, x3, acc_g, shift, BLOCK_N, BLOCK_K, DEQUANT, FP32_DOT)
        if GATED:
            wu, su = _weight_step(wu_ptrs, su_rows, k, K, BLOCK_K, EVEN_K, WORDS)
            acc_u = _mma_step(wu, su, x0, x1, x2, x3, acc_u, shift, BLOCK_N, BLOCK_K, DEQUANT, FP32_DOT)
            wu_ptrs += BLOCK_K // WORDS
        x_ptrs += BLOCK_K
        wg_ptrs += BLOCK_K // WORDS
    return acc_g, acc_u


@triton.jit
def _fc1_tile(
    x_rows,  # [BLOCK_T] row pointers of the gathered token columns
    token_mask,  # [BLOCK_T] columns that hold a token
    w_base,  # this expert's fp8 rows
    s_base,  # this expert's swizzled scale bytes
    n_first,  # first output column of this tile (offs_n[0])
    offs_n,  # [BLOCK_N] output columns of this tile
    N_OUT,
    K,
    stride_wn,
    scale_tiles,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DEQUANT: tl.constexpr,
    FP32_DOT: tl.constexpr,
    GATE_MERGE: tl.constexpr = False,
    X_PLANES: tl.constexpr = False,
):
    """``act(W_gate x) [* W_up x]`` for one ``[BLOCK_N, BLOCK_T]`` tile (fp32), the K loop software-pipelined;
    X_PLANES: the token rows are plane-major (``_fc1_steps``).

    GATE_MERGE (gated only): ONE ``[2 * BLOCK_N, BLOCK_T]`` MMA tile whose weight rows alternate 8 gate rows and
    the same 8 up rows (tile row ``i``: output column ``(i // 16) * 8 + i % 8``, up half when ``i // 8`` is odd),
    instead of two ``[BLOCK_N, BLOCK_T]`` tiles. In the wgmma accumulator layout rows ``i`` and ``i + 8`` sit in the
    same thread, so the gate / up split stays in registers; on more than one warpgroup the tile splits by rows, so
    no two warpgroups dequantize the same weights (two separate dots split by tokens and both dequantize).

    DQ_SX_AUTO: one pass over the tile's scale rows gives ``shift = max(0, max byte - 134)``; the K loop then
    dequantizes with one bf16 factor ``2 ** (s - 7 - shift)`` per weight pair (against two for
    DQ_SX) and the fp32 accumulators are multiplied by ``2 ** shift``. ``shift`` is 0 wherever all scales are at
    most ``2 ** 7`` (weights below 57344 in magnitude), and the result is then bit-identical to DQ_SX / DQ_CVT.
    With ``shift > 0`` the weights stay exact down to ``2 ** -131`` of the tile's largest scale, but products
    scaled by ``2 ** -shift`` can underflow fp32 where the unscaled ones would not. The scan also reads the 128x4
    layout's padding bytes, which canonical storage keeps at zero.
    """
    steps = tl.cdiv(K, BLOCK_K)
    shift = 0
    if DEQUANT == DQ_SX_AUTO:  # gated: the gate rows and the up rows N_OUT further
        shift = _sx_auto_shift(s_base, n_first, tl.minimum(n_first + BLOCK_N, N_OUT) - 1, N_OUT, scale_tiles, GATED)
    if GATED and GATE_MERGE:
        i = tl.arange(0, 2 * BLOCK_N)
        cols = n_first + (i // 16) * 8 + i % 8
        rows_m = ((cols % N_OUT) + ((i // 8) % 2) * N_OUT).to(tl.int64)
        acc = tl.zeros([2 * BLOCK_N, BLOCK_T], dtype=tl.float32)
        acc, _ = _fc1_steps(acc, acc, x_rows, w_base, s_base, rows_m, token_mask, N_OUT, steps, K, stride_wn,
                            scale_tiles, shift, False, 2 * BLOCK_N, BLOCK_K, EVEN_K, DEQUANT, FP32_DOT, X_PLANES)
        if DEQUANT == DQ_SX_AUTO:
            acc = acc * _pow2_f32(shift)
        acc = tl.permute(tl.reshape(acc, [BLOCK_N // 8, 2, 8, BLOCK_T]), (0, 2, 3, 1))
        acc_g, acc_u = tl.split(tl.reshape(acc, [BLOCK_N, BLOCK_T, 2]))
        h = _activate(acc_g, acc_u, ACTIVATION)
    else:
        rows_n = (offs_n % N_OUT).to(tl.int64)  # in-bounds loads; the store mask drops the overflow
        acc_g = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
        acc_g, acc_u = _fc1_steps(acc_g, acc_g, x_rows, w_base, s_base, rows_n, token_mask, N_OUT, steps, K,
                                  stride_wn, scale_tiles, shift, GATED, BLOCK_N, BLOCK_K, EVEN_K, DEQUANT, FP32_DOT,
                                  X_PLANES)
        if DEQUANT == DQ_SX_AUTO:
            unshift = _pow2_f32(shift)
            acc_g = acc_g * unshift
            if GATED:
                acc_u = acc_u * unshift
        if GATED:
            h = _activate(acc_g, acc_u, ACTIVATION)
        else:
            h = _activate(acc_g, acc_g, ACTIVATION)
    return h


@triton.jit
def _routed_block(sorted_pairs_ptr, block_expert_ptr, block, BLOCK_T: tl.constexpr):
    """Block ``block`` of the route's tables: its local expert (int64), padded positions, pairs (-1: padding) and
    the mask of the positions that hold a pair."""
    expert = tl.load(block_expert_ptr + block).to(tl.int64)
    positions = block * BLOCK_T + tl.arange(0, BLOCK_T)
    pairs = tl.load(sorted_pairs_ptr + positions)
    return expert, positions, pairs, pairs >= 0


@triton.jit
def _fc1_kernel(
    x_ptr,  # [T, H] bf16 (row stride stride_x, unit column stride)
    w_ptr,  # [E, N1, H] fp8 e4m3, H contiguous
    s_ptr,  # [E, Mp * Cp] uint8: the canonical 128x4-swizzled E8M0 bytes of each expert
    inter_ptr,  # [max_sorted, I] bf16 out, row = padded position
    sorted_pairs_ptr,  # [max_sorted] int32
    block_expert_ptr,  # [max_blocks] int32
    num_blocks_ptr,  # [1] int32
    N_OUT,  # I (gated) or N1: columns of inter
    K,  # H
    stride_x,
    stride_we,
    stride_wn,
    stride_se,  # Mp * Cp: swizzled scale bytes per expert
    scale_tiles,  # Cp // 4: 128x4 scale tiles per 128-row tile row
    stride_inter,
    TOPK: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DEQUANT: tl.constexpr,
    FP32_DOT: tl.constexpr,  # fp32 operands (ieee): for the Triton interpreter, whose bf16 math is wrong
    GATE_MERGE: tl.constexpr = False,  # gated: gate and up rows in one MMA tile (``_fc1_tile``)
    X_PLANES: tl.constexpr = False,  # x rows plane-major per BLOCK_K step (``_load_planes``; "sx4" tiles)
    PLANE_K2: tl.constexpr = 0,  # > 0: inter rows written plane-major per PLANE_K2-deep step of FC2 (``_plane_cols``)
    LAUNCH_DEPENDENTS: tl.constexpr = False,  # let the next kernel (a programmatic dependent launch) start now
):
    """FC1 + activation for one ``[BLOCK_N, BLOCK_T]`` tile of ``inter^T``; tokens gathered by pair index."""
    if LAUNCH_DEPENDENTS:
        gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    if pid_b < tl.load(num_blocks_ptr):
        expert, positions, pairs, token_mask = _routed_block(sorted_pairs_ptr, block_expert_ptr, pid_b, BLOCK_T)
        tokens = tl.where(token_mask, pairs // TOPK, 0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        x_rows = x_ptr + tokens * stride_x  # [BLOCK_T]
        h = _fc1_tile(x_rows, token_mask, w_ptr + expert * stride_we, s_ptr + expert * stride_se, pid_n * BLOCK_N,
                      offs_n, N_OUT, K,
                      stride_wn, scale_tiles, GATED, ACTIVATION, BLOCK_N, BLOCK_T, BLOCK_K, EVEN_K, DEQUANT, FP32_DOT,
                      GATE_MERGE, X_PLANES)
        out_ptrs = inter_ptr + positions[None, :].to(tl.int64) * stride_inter + _plane_cols(offs_n, PLANE_K2)[:, None]
        tl.store(out_ptrs, h.to(tl.bfloat16), mask=token_mask[None, :] & (offs_n[:, None] < N_OUT))


@triton.jit
def _fc1_direct_kernel(
    x_ptr,  # [T, H] bf16
    w_ptr,  # [E, N1, H] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    inter_ptr,  # [rows * topk, I] bf16 out: row = pair index t * topk + k, already times probs[t, k]
    routing_map_ptr,  # [rows * topk] int32/int64 global expert ids, contiguous
    probs_ptr,  # [T, topk] fp32
    valid_tokens_ptr,  # [1] int32
    rows,
    N_OUT,
    K,
    stride_x,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_inter,
    stride_probs,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DEQUANT: tl.constexpr,
    FP32_DOT: tl.constexpr,
):
    """v4 small-T path, no route kernel: program ``(n tile, pair)`` reads its expert straight from the routing
    map and writes ``probs[t, k] * act(fc1[e] x[t])`` (one MMA column used) into the pair's inter row.
    Pairs of invalid rows or of non-local experts write nothing (the FC2 side skips them the same way)."""
    pid_n = tl.program_id(0)
    pair = tl.program_id(1)
    t, expert, live = _local_pair(pair, routing_map_ptr, valid_tokens_ptr, rows, local_expert_offset, TOPK, E)
    if live:
        cols = tl.arange(0, BLOCK_T)
        token_mask = cols == 0
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        x_rows = x_ptr + t.to(tl.int64) * stride_x + cols * 0  # [BLOCK_T], column 0 used
        e64 = expert.to(tl.int64)
        h = _fc1_tile(x_rows, token_mask, w_ptr + e64 * stride_we, s_ptr + e64 * stride_se, pid_n * BLOCK_N, offs_n,
                      N_OUT, K,
                      stride_wn, scale_tiles, GATED, ACTIVATION, BLOCK_N, BLOCK_T, BLOCK_K, EVEN_K, DEQUANT, FP32_DOT)
        p = tl.load(probs_ptr + t.to(tl.int64) * stride_probs + pair % TOPK)
        out_ptrs = inter_ptr + pair.to(tl.int64) * stride_inter + offs_n[:, None] + cols[None, :] * 0
        tl.store(out_ptrs, (h * p).to(tl.bfloat16), mask=token_mask[None, :] & (offs_n[:, None] < N_OUT))


@triton.jit
def _fc2_combine_kernel(
    inter_ptr,  # [rows * topk, I] bf16, probability-weighted rows from _fc1_direct_kernel
    w_ptr,  # [E, H, I] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    out_ptr,  # [>= rows, H] bf16 or fp32
    routing_map_ptr,  # [rows * topk] int32/int64, contiguous
    valid_tokens_ptr,  # [1] int32
    rows,
    N,  # H
    K,  # I
    stride_inter,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_out,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DEQUANT: tl.constexpr,
    FP32_DOT: tl.constexpr,
):
    """v4 small-T path: FC2 and the combine in one launch. Program ``(n tile, token t)`` runs ONE pipelined loop
    over ``topk x K steps`` (expert k in fixed order, then K), accumulating ``fc2[e_k] @ (p_k h_k)`` in fp32, and
    writes ``out[t]`` directly: deterministic, no slot buffer, no combine launch. Non-local / -1 experts and
    rows past ``valid_tokens`` load nothing (masked) and contribute exact zeros."""
    pid_n = tl.program_id(0)
    t = tl.program_id(1)
    valid = t < tl.minimum(tl.load(valid_tokens_ptr), rows)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_n = (offs_n % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    offs_ks = tl.arange(0, BLOCK_K // 32)
    cols = tl.arange(0, BLOCK_T)
    col0 = cols == 0
    w_rows = w_ptr + rows_n[:, None] * stride_wn + offs_k[None, :]
    s_rows = _scale_rows(s_ptr, rows_n, scale_tiles)
    a_cols = inter_ptr + offs_k[:, None] + cols[None, :] * 0
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    k_steps = tl.cdiv(K, BLOCK_K)
    for j in range(0, TOPK * k_steps):
        slot = j // k_steps
        ks = j - slot * k_steps
        pair = t.to(tl.int64) * TOPK + slot
        expert, is_local = _local_expert(tl.load(routing_map_ptr + pair), local_expert_offset, E)
        use = valid & is_local
        e64 = tl.where(use, expert, 0).to(tl.int64)
        w_ptrs = w_rows + e64 * stride_we + ks * BLOCK_K
        s_ptrs = s_rows[:, None] + e64 * stride_se + _scale_col_offsets(ks, BLOCK_K // 32)[None, :]
        a_ptrs = a_cols + pair * stride_inter + ks * BLOCK_K
        if EVEN_K:
            w = tl.load(w_ptrs, mask=use, other=0.0)
            s = tl.load(s_ptrs, mask=use, other=0)
            a = tl.load(a_ptrs, mask=use & col0[None, :], other=0.0)
        else:
            k_left = K - ks * BLOCK_K
            w = tl.load(w_ptrs, mask=use & (offs_k[None, :] < k_left), other=0.0)
            s = tl.load(s_ptrs, mask=use & (offs_ks[None, :] * 32 < k_left), other=0)
            a = tl.load(a_ptrs, mask=use & col0[None, :] & (offs_k[:, None] < k_left), other=0.0)
        acc = _mma(_dequant_tile(w, s, BLOCK_N, BLOCK_K, DEQUANT), a, acc, FP32_DOT)
    out_ptrs = out_ptr + t.to(tl.int64) * stride_out + offs_n[:, None] + cols[None, :] * 0
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=col0[None, :] & (offs_n[:, None] < N))


@triton.jit
def _fc2_steps(acc, a_rows, w_base, s_base, rows_n, token_mask, k_first, k_end, K, stride_wn, scale_tiles, shift,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, DEQUANT: tl.constexpr,
               FP32_DOT: tl.constexpr, X_PLANES: tl.constexpr = False):
    """K steps ``[k_first, k_end)`` of FC2 (a split-K share), software-pipelined; ``shift`` and X_PLANES (the
    inter rows plane-major) as in ``_fc1_steps``."""
    SX4: tl.constexpr = DEQUANT == DQ_SX4 or DEQUANT == DQ_SX4_INT
    if SX4:  # uint32 words (``_fc1_steps``)
        WORDS: tl.constexpr = 4
    else:
        WORDS: tl.constexpr = 1
    a_ptrs = _token_ptrs(a_rows, k_first, BLOCK_K, SX4 and X_PLANES)
    w_ptrs = _weight_ptrs(w_base, rows_n, stride_wn, k_first, BLOCK_K, WORDS)
    s_rows = _scale_rows(s_base, rows_n, scale_tiles)
    for k in range(k_first, k_end):
        k_left = K - k * BLOCK_K  # unused when EVEN_K
        a0, a1, a2, a3 = _token_operands(a_ptrs, token_mask, k_left, BLOCK_K, EVEN_K, SX4 and X_PLANES)
        w, s = _weight_step(w_ptrs, s_rows, k, K, BLOCK_K, EVEN_K, WORDS)
        a0, a1, a2, a3 = _as_planes(a0, a1, a2, a3, BLOCK_K, SX4 and not X_PLANES)
        acc = _mma_step(w, s, a0, a1, a2, a3, acc, shift, BLOCK_N, BLOCK_K, DEQUANT, FP32_DOT)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K // WORDS
    return acc


@triton.jit
def _fc2_kernel(
    inter_ptr,  # [max_sorted, I] bf16, row = padded position
    w_ptr,  # [E, H, I] fp8 e4m3, I contiguous
    s_ptr,  # [E, Mp * Cp] uint8: the canonical 128x4-swizzled E8M0 bytes of each expert
    slot_ptr,  # [rows * topk, H] bf16 out: one row per (token, k) pair
    sorted_pairs_ptr,
    block_expert_ptr,
    num_blocks_ptr,
    N,  # H
    K,  # I
    stride_inter,
    stride_we,
    stride_wn,
    stride_se,  # Mp * Cp
    scale_tiles,  # Cp // 4
    stride_slot,
    stride_split,  # slot elements between two split-K partial buffers (SPLIT_K > 1)
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DEQUANT: tl.constexpr,
    FP32_DOT: tl.constexpr,  # fp32 operands (ieee): for the Triton interpreter, whose bf16 math is wrong
    SPLIT_K: tl.constexpr,  # 1: bf16 slot rows; > 1: fp32 partial rows per K split, summed in the combine
    X_PLANES: tl.constexpr = False,  # inter rows plane-major per BLOCK_K step (``_load_planes``; "sx4" tiles)
):
    """FC2 for one ``[BLOCK_N, BLOCK_T]`` tile of ``out^T``; writes each pair's unweighted row.

    Split-K (program axis 2): split ``s`` takes K steps ``[s * steps, (s + 1) * steps)`` and writes its fp32
    partial into ``slot + s * stride_split``; the combine adds the partials in split order (deterministic).
    """
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    pid_s = tl.program_id(2)
    if pid_b < tl.load(num_blocks_ptr):
        expert, positions, pairs, token_mask = _routed_block(sorted_pairs_ptr, block_expert_ptr, pid_b, BLOCK_T)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_n = (offs_n % N).to(tl.int64)
        a_rows = inter_ptr + positions.to(tl.int64) * stride_inter  # [BLOCK_T]
        w_base = w_ptr + expert * stride_we
        s_base = s_ptr + expert * stride_se
        acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
        k_steps = tl.cdiv(K, BLOCK_K)
        k_first = 0
        if SPLIT_K > 1:
            per_split = tl.cdiv(k_steps, SPLIT_K)
            k_first = pid_s * per_split
            k_steps = tl.minimum(k_steps, k_first + per_split)
        shift = 0
        if DEQUANT == DQ_SX_AUTO:
            n_first = pid_n * BLOCK_N
            shift = _sx_auto_shift(s_base, n_first, tl.minimum(n_first + BLOCK_N, N) - 1, 0, scale_tiles, False)
        acc = _fc2_steps(acc, a_rows, w_base, s_base, rows_n, token_mask, k_first, k_steps, K, stride_wn,
                         scale_tiles, shift, BLOCK_N, BLOCK_K, EVEN_K, DEQUANT, FP32_DOT, X_PLANES)
        if DEQUANT == DQ_SX_AUTO:
            acc = acc * _pow2_f32(shift)
        safe_pairs = tl.where(token_mask, pairs, 0).to(tl.int64)
        out_ptrs = slot_ptr + pid_s.to(tl.int64) * stride_split + safe_pairs[None, :] * stride_slot + offs_n[:, None]
        tl.store(out_ptrs, acc.to(slot_ptr.dtype.element_ty), mask=token_mask[None, :] & (offs_n[:, None] < N))


# v6 GEMV small-T path (``TritonMoEConfig.gemv``): the direct path's two launches without MMAs. At a handful of
# tokens every (token, expert) pair is a matrix-vector product, so the MMA path dequantizes whole weight tiles
# into bf16 MMA fragments (about 5 instructions per weight byte, mostly bit moves and shared-memory reads) for one
# useful column of 16. Here each thread converts its weights straight from 16-byte global loads to fp32
# (``cvt``), multiplies by the token's activations and sums each 32-wide MXFP8 block in fp32 before the block's
# one scale multiply: no MMA padding, small register use (many warps per SM in flight), and no shared memory
# for the weights unless the K loop is pipelined (STAGES > 1: Triton stages those loads through shared memory).


@triton.jit
def _gemv_block_sums(w, s, v, acc, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``acc [BLOCK_N, BLOCK_K // 32]`` fp32 ``+=`` (sum over each 32-block of ``e4m3(w) * v``) ``* 2 ** (s - 127)``.

    ``w`` fp8 e4m3 ``[BLOCK_N, BLOCK_K]``, ``s`` uint8 E8M0 ``[BLOCK_N, BLOCK_K // 32]``, ``v`` ``[BLOCK_K]``
    (bf16 activations). The e4m3 and bf16 values are exact in fp32; products and block sums round in fp32.
    """
    prod = w.to(tl.float32) * v.to(tl.float32)[None, :]
    part = tl.sum(tl.reshape(prod, [BLOCK_N, BLOCK_K // 32, 32]), axis=2)
    bits = tl.where(s == 0, 0x00400000, s.to(tl.int32) << 23)  # 2 ** (s - 127); byte 0 is the subnormal 2 ** -127
    return acc + part * bits.to(tl.float32, bitcast=True)



@triton.jit
def _local_pair(pair, routing_map_ptr, valid_tokens_ptr, rows, local_expert_offset, TOPK: tl.constexpr,
                E: tl.constexpr):
    """``(token, local expert, live)`` of a pair index; ``live``: the token is below ``valid_tokens`` (and
    ``rows``) and the expert is local."""
    t = pair // TOPK
    valid = tl.minimum(tl.load(valid_tokens_ptr), rows)
    expert, is_local = _local_expert(tl.load(routing_map_ptr + pair), local_expert_offset, E)
    return t, expert, (t < valid) & is_local


@triton.jit
def _expert_rows(w_ptr, s_ptr, expert, rows, stride_we, stride_wn, stride_se, scale_tiles, BLOCK_K: tl.constexpr):
    """Pointers to K step 0 of weight ``rows`` (int64 ``[BLOCK_N]``) of ``expert``: fp8 ``[BLOCK_N, BLOCK_K]`` and
    the rows' scale bytes (column 0) in the expert's 128x4-swizzled scales ``[BLOCK_N]``."""
    e64 = expert.to(tl.int64)
    w_ptrs = w_ptr + e64 * stride_we + rows[:, None] * stride_wn + tl.arange(0, BLOCK_K)[None, :]
    s_rows = _scale_rows(s_ptr + e64 * stride_se, rows, scale_tiles)
    return w_ptrs, s_rows


@triton.jit
def _weight_step(w_ptrs, s_rows, k, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, WORDS: tl.constexpr = 1):
    """The fp8 tile at ``w_ptrs`` (or, WORDS = 4, its uint32 words: "sx4") and its E8M0 tile
    ``[BLOCK_N, BLOCK_K // 32]`` for K step ``k`` (zeros past K; a word is loaded whole or not at all)."""
    s_ptrs = s_rows[:, None] + _scale_col_offsets(k, BLOCK_K // 32)[None, :]
    if EVEN_K:
        w = tl.load(w_ptrs)
        s = tl.load(s_ptrs)
    else:
        k_left = K - k * BLOCK_K
        if WORDS == 1:
            w = tl.load(w_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
        else:
            w = tl.load(w_ptrs, mask=tl.arange(0, BLOCK_K // WORDS)[None, :] * WORDS < k_left, other=0)
        s = tl.load(s_ptrs, mask=tl.arange(0, BLOCK_K // 32)[None, :] * 32 < k_left, other=0)
    return w, s


@triton.jit
def _fc1_gemv_kernel(
    x_ptr,  # [T, H] bf16
    w_ptr,  # [E, N1, H] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    inter_ptr,  # [rows * topk, I] bf16 out: row = pair index t * topk + k (no probability applied)
    routing_map_ptr,  # [rows * topk] int32/int64 global expert ids, contiguous
    valid_tokens_ptr,  # [1] int32
    rows,
    N_OUT,
    K,
    stride_x,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_inter,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    STAGES: tl.constexpr,  # software-pipelining depth of the K loop (1: plain loop, loads straight to registers)
):
    """GEMV FC1: program ``(n tile, pair)`` writes ``act(fc1[e] x[t])`` into the pair's inter row; pairs of
    invalid rows or of non-local experts write nothing (as ``_fc1_direct_kernel``), CUDA-core block sums."""
    pid_n = tl.program_id(0)
    pair = tl.program_id(1)
    t, expert, live = _local_pair(pair, routing_map_ptr, valid_tokens_ptr, rows, local_expert_offset, TOPK, E)
    if live:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_n = (offs_n % N_OUT).to(tl.int64)  # in-bounds loads; the store mask drops the overflow
        offs_k = tl.arange(0, BLOCK_K)
        wg_ptrs, sg_rows = _expert_rows(w_ptr, s_ptr, expert, rows_n, stride_we, stride_wn, stride_se, scale_tiles,
                                        BLOCK_K)
        x_ptrs = x_ptr + t.to(tl.int64) * stride_x + offs_k
        acc_g = tl.zeros([BLOCK_N, BLOCK_K // 32], dtype=tl.float32)
        if GATED:
            wu_ptrs = wg_ptrs + N_OUT * stride_wn
            _, su_rows = _expert_rows(w_ptr, s_ptr, expert, rows_n + N_OUT, stride_we, stride_wn, stride_se,
                                      scale_tiles, BLOCK_K)
            acc_u = tl.zeros([BLOCK_N, BLOCK_K // 32], dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
            if EVEN_K:
                v = tl.load(x_ptrs)
            else:
                v = tl.load(x_ptrs, mask=offs_k < K - k * BLOCK_K, other=0.0)
            wg, sg = _weight_step(wg_ptrs, sg_rows, k, K, BLOCK_K, EVEN_K)
            acc_g = _gemv_block_sums(wg, sg, v, acc_g, BLOCK_N, BLOCK_K)
            if GATED:
                wu, su = _weight_step(wu_ptrs, su_rows, k, K, BLOCK_K, EVEN_K)
                acc_u = _gemv_block_sums(wu, su, v, acc_u, BLOCK_N, BLOCK_K)
                wu_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
            wg_ptrs += BLOCK_K
        g = tl.sum(acc_g, axis=1)
        if GATED:
            h = _activate(g, tl.sum(acc_u, axis=1), ACTIVATION)
        else:
            h = _activate(g, g, ACTIVATION)
        tl.store(inter_ptr + pair.to(tl.int64) * stride_inter + offs_n, h.to(tl.bfloat16), mask=offs_n < N_OUT)


@triton.jit
def _fc2_gemv_kernel(
    inter_ptr,  # [rows * topk, I] bf16 rows from _fc1_gemv_kernel (no probability applied)
    w_ptr,  # [E, H, I] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    slot_ptr,  # [rows * topk, H] bf16 out: row = pair index
    routing_map_ptr,  # [rows * topk] int32/int64, contiguous
    valid_tokens_ptr,  # [1] int32
    rows,
    N,  # H
    K,  # I
    stride_inter,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_slot,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    """GEMV FC2 per pair: program ``(n tile, pair)`` writes ``fc2[e] @ h`` into the pair's slot row (``_combine_kernel``
    adds the slots); pairs of invalid rows or of non-local experts write nothing and are skipped by the combine."""
    pid_n = tl.program_id(0)
    pair = tl.program_id(1)
    t, expert, live = _local_pair(pair, routing_map_ptr, valid_tokens_ptr, rows, local_expert_offset, TOPK, E)
    if live:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        w_ptrs, s_rows = _expert_rows(w_ptr, s_ptr, expert, (offs_n % N).to(tl.int64), stride_we, stride_wn,
                                      stride_se, scale_tiles, BLOCK_K)
        a_ptrs = inter_ptr + pair.to(tl.int64) * stride_inter + offs_k
        acc = tl.zeros([BLOCK_N, BLOCK_K // 32], dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
            w, s = _weight_step(w_ptrs, s_rows, k, K, BLOCK_K, EVEN_K)
            if EVEN_K:
                a = tl.load(a_ptrs)
            else:
                a = tl.load(a_ptrs, mask=offs_k < K - k * BLOCK_K, other=0.0)
            acc = _gemv_block_sums(w, s, a, acc, BLOCK_N, BLOCK_K)
            w_ptrs += BLOCK_K
            a_ptrs += BLOCK_K
        out = tl.sum(acc, axis=1)
        tl.store(slot_ptr + pair.to(tl.int64) * stride_slot + offs_n, out.to(tl.bfloat16), mask=offs_n < N)


# v7 routed GEMV (``TritonMoEConfig.gemv`` without ``direct``, tile "q1"): the route kernel sorts the pairs by
# expert (block_t 1: one padded position per pair), then the GEMV kernels run one program per (n tile, position).
# Pairs of one expert land in neighbouring programs and share their weight reads in L2; near one pair per expert
# this beat the unsorted GEMV path by 8-18% (session 6). Session 6 also timed programs that convert each weight
# once for 2-4 pairs of an expert: slower (CUDA-core FMAs, not bytes, bound them; bench/NOTES_triton_moe.md,
# code at commit ec0d347: ``_fc1_group_kernel`` / ``_fc2_group_kernel`` with BLOCK_T 2-4).


@triton.jit
def _routed_pair(sorted_pairs_ptr, src_ptr, position, stride_src, offs_k, BY_POSITION: tl.constexpr,
                 TOPK: tl.constexpr):
    """``(pair, live, row pointers [BLOCK_K])`` of padded ``position``: the source row is the pair's token
    (``BY_POSITION`` False: FC1 reads x) or the position itself (``BY_POSITION`` True: FC2 reads inter)."""
    pair = tl.load(sorted_pairs_ptr + position)
    live = pair >= 0
    if BY_POSITION:
        row = position.to(tl.int64)
    else:
        row = (tl.maximum(pair, 0) // TOPK).to(tl.int64)
    return pair, live, src_ptr + row * stride_src + offs_k


@triton.jit
def _pair_vector(ptrs, live, k, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """One pair's activations ``[BLOCK_K]`` for K step ``k`` (zeros for padding and past K)."""
    if EVEN_K:
        return tl.load(ptrs, mask=live & (tl.arange(0, BLOCK_K) >= 0), other=0.0)
    return tl.load(ptrs, mask=live & (tl.arange(0, BLOCK_K) < K - k * BLOCK_K), other=0.0)


@triton.jit
def _fc1_routed_gemv_kernel(
    x_ptr,  # [T, H] bf16
    w_ptr,  # [E, N1, H] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    inter_ptr,  # [max_sorted, I] bf16 out, row = padded position (no probability applied)
    sorted_pairs_ptr,  # [max_sorted] int32 from _route_kernel (block_t 1)
    block_expert_ptr,  # [max_blocks] int32
    num_blocks_ptr,  # [1] int32
    N_OUT,
    K,
    stride_x,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_inter,
    TOPK: tl.constexpr,
    GATED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Routed GEMV FC1: program ``(n tile, position)`` writes ``act(fc1[e] x[t])`` for the position's pair."""
    pid_n = tl.program_id(0)
    position = tl.program_id(1)
    if position < tl.load(num_blocks_ptr):
        expert = tl.load(block_expert_ptr + position)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_n = (offs_n % N_OUT).to(tl.int64)
        offs_k = tl.arange(0, BLOCK_K)
        wg_ptrs, sg_rows = _expert_rows(w_ptr, s_ptr, expert, rows_n, stride_we, stride_wn, stride_se, scale_tiles,
                                        BLOCK_K)
        if GATED:
            wu_ptrs = wg_ptrs + N_OUT * stride_wn
            _, su_rows = _expert_rows(w_ptr, s_ptr, expert, rows_n + N_OUT, stride_we, stride_wn, stride_se,
                                      scale_tiles, BLOCK_K)
        zeros = tl.zeros([BLOCK_N, BLOCK_K // 32], dtype=tl.float32)
        _, live, x_row = _routed_pair(sorted_pairs_ptr, x_ptr, position, stride_x, offs_k, False, TOPK)
        acc_g = zeros
        acc_u = zeros
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
            wg, sg = _weight_step(wg_ptrs, sg_rows, k, K, BLOCK_K, EVEN_K)
            if GATED:
                wu, su = _weight_step(wu_ptrs, su_rows, k, K, BLOCK_K, EVEN_K)
            v = _pair_vector(x_row + k * BLOCK_K, live, k, K, BLOCK_K, EVEN_K)
            acc_g = _gemv_block_sums(wg, sg, v, acc_g, BLOCK_N, BLOCK_K)
            if GATED:
                acc_u = _gemv_block_sums(wu, su, v, acc_u, BLOCK_N, BLOCK_K)
            wg_ptrs += BLOCK_K
            if GATED:
                wu_ptrs += BLOCK_K
        g = tl.sum(acc_g, axis=1)
        if GATED:
            h = _activate(g, tl.sum(acc_u, axis=1), ACTIVATION)
        else:
            h = _activate(g, g, ACTIVATION)
        tl.store(inter_ptr + position.to(tl.int64) * stride_inter + offs_n, h.to(tl.bfloat16),
                 mask=live & (offs_n < N_OUT))


@triton.jit
def _fc2_routed_gemv_kernel(
    inter_ptr,  # [max_sorted, I] bf16 rows from _fc1_routed_gemv_kernel, row = padded position
    w_ptr,  # [E, H, I] fp8 e4m3
    s_ptr,  # [E, Mp * Cp] uint8 swizzled E8M0
    slot_ptr,  # [rows * topk, H] bf16 out: row = pair index
    sorted_pairs_ptr,
    block_expert_ptr,
    num_blocks_ptr,
    N,  # H
    K,  # I
    stride_inter,
    stride_we,
    stride_wn,
    stride_se,
    scale_tiles,
    stride_slot,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Routed GEMV FC2: program ``(n tile, position)`` writes ``fc2[e] @ h`` into the pair's slot row."""
    pid_n = tl.program_id(0)
    position = tl.program_id(1)
    if position < tl.load(num_blocks_ptr):
        expert = tl.load(block_expert_ptr + position)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        w_ptrs, s_rows = _expert_rows(w_ptr, s_ptr, expert, (offs_n % N).to(tl.int64), stride_we, stride_wn,
                                      stride_se, scale_tiles, BLOCK_K)
        zeros = tl.zeros([BLOCK_N, BLOCK_K // 32], dtype=tl.float32)
        pair, live, a_row = _routed_pair(sorted_pairs_ptr, inter_ptr, position, stride_inter, offs_k, True, 1)
        acc = zeros
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
            w, s = _weight_step(w_ptrs, s_rows, k, K, BLOCK_K, EVEN_K)
            acc = _gemv_block_sums(w, s, _pair_vector(a_row + k * BLOCK_K, live, k, K, BLOCK_K, EVEN_K), acc,
                                   BLOCK_N, BLOCK_K)
            w_ptrs += BLOCK_K
        tl.store(slot_ptr + tl.maximum(pair, 0).to(tl.int64) * stride_slot + offs_n,
                 tl.sum(acc, axis=1).to(tl.bfloat16), mask=live & (offs_n < N))


@triton.jit
def _combine_kernel(
    slot_ptr,  # [rows * topk, H] bf16 rows; SPLITS > 1: SPLITS such fp32 buffers, stride_split apart
    probs_ptr,  # [T, topk] fp32
    routing_map_ptr,  # [rows * topk] int32/int64, contiguous
    valid_tokens_ptr,  # [1] int32
    out_ptr,  # [>= rows, H] bf16 or fp32
    H,
    stride_slot,
    stride_split,
    stride_probs,
    stride_out,
    local_expert_offset,
    TOPK: tl.constexpr,
    E: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SPLITS: tl.constexpr,  # split-K partial buffers to add (in order) per pair row
):
    """``out[t] = sum_k probs[t, k] * slot[t * topk + k]`` over local k in fixed order (fp32); 0 past valid."""
    t = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = offs_h < H
    row_valid = t < tl.load(valid_tokens_ptr)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    t64 = t.to(tl.int64)
    for k in tl.static_range(TOPK):
        _, is_local = _local_expert(tl.load(routing_map_ptr + t64 * TOPK + k), local_expert_offset, E)
        use = row_valid & is_local
        p = tl.load(probs_ptr + t64 * stride_probs + k)
        row_ptrs = slot_ptr + (t64 * TOPK + k) * stride_slot + offs_h
        v = tl.load(row_ptrs, mask=h_mask & use, other=0.0).to(tl.float32)
        for split in tl.static_range(1, SPLITS):
            v += tl.load(row_ptrs + split * stride_split, mask=h_mask & use, other=0.0).to(tl.float32)
        acc += v * tl.where(use, p, 0.0)
    tl.store(out_ptr + t64 * stride_out + offs_h, acc.to(out_ptr.dtype.element_ty), mask=h_mask)
