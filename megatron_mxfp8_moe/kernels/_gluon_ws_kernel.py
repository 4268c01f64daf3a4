"""FC1 and FC2 of the MMA-bound rows as warp-specialized mixed-input GEMMs in Gluon (session 39, ``fc1_ws`` /
``fc2_ws``; first run on a GPU in session 40, run 43; FC1 gated too since session 43: ``GATED``, 64 gate rows and their
64 up rows per 128-row tile, ``_interleave_halves`` / ``_gate_up``).

Run 42 showed the Triton FCs of the 256-token tiles bound by each K step's chain (weights in, dequant, wgmma, wait)
in each warpgroup, about a third of the tensor cores' rate. Here two partitions of one CTA run that chain as a
pipeline instead:

- producer (``PRODUCER_WARPS`` warps, one warpgroup): each K step's fp8 weight tile ``[BLOCK_N, BLOCK_K]`` by TMA into
  a ring of ``WSTAGES`` stages (``w_ready``), ``WSTAGES`` steps ahead, and its token tile ``[BLOCK_T, BLOCK_K]`` into a
  ring of ``STAGES`` (``x_ready`` / ``x_empty``), ``STAGES - 1`` ahead: for FC2 the FC1 rows of the block's positions
  by TMA (K order: one box), for FC1 the block's token rows of x gathered by cp.async (sorted position -> pair ->
  token: no TMA box); and the dequant: each weight tile from shared memory to registers, times its E8M0 scales (each
  row's scale word loaded a step ahead; exact in fp32, then bf16: the values of the Triton kernels' "cvt" / "fp32"
  modes), into a third ring of ``DSTAGES`` bf16 tiles in the wgmma's shared layout (``deq_ready`` / ``deq_empty``);
- consumer (the kernel's ``num_warps``, 2 warpgroups for 128 rows): asynchronous wgmmas with both operands in shared
  memory, one step in flight while the next is issued, then the epilogue (FC1: the activation into the inter rows by
  position; FC2: the pairs' slot rows), through shared memory (the rings', no longer in use) into a row layout and
  out in 16-byte stores (``_row_store_layout``; session 41, 2-3% of the layer at 4096 tokens).

A weight stage is free once the producer has read it (no barrier: the producer reuses it itself), a token stage and
a bf16 stage once the consumer's MMA that read them has retired. The same bf16 products in the same order per output
element as the Triton FCs with ``dequant="cvt"`` at the same K step (fp32 accumulation), so the float64 oracle
applies; bits are not claimed.

Layouts: weights ``[E, N1, H]`` (FC1; N1 = I, or 2 I gated: Megatron's ``[gate; up]`` rows) / ``[E, H, I]`` (FC2) fp8
e4m3 seen as 2-D ``[E * rows, K]``; x ``[R, H]`` bf16;
inter rows ``[positions, I]`` bf16 in K order; scales ``[E, Mp * Cp]`` uint8 in the cuBLAS 128x4 layout; FC2's out:
each pair's unweighted bf16 row of ``slots`` ``[pairs, H]``.
Hopper only (sm_90 wgmma, TMA); Triton 3.6's Gluon (``gl.warp_specialize``). One producer warpgroup beside the two
consumer warpgroups (384 threads, at most 168 registers each, which the 128-register accumulator of a 64 x 256 wgmma
needs: with a separate loader warp the kernel took 512 threads, and ptxas refused the wgmma at 128 registers).
Compile (Triton 3.6, sm_90, CPU): 168 registers, no spill; shared memory ``triton_moe.ws_shared_bytes``.
Persistent forms of both kernels (``_fc1_ws_persistent_kernel`` / ``_fc2_ws_persistent_kernel``, session 41; first
run in session 42, run 45, and the default from 176 pairs per expert since): one program per SM walks the live tiles,
the rings' positions counted across them. ``PREFETCH`` (``ws_prefetch``, session 44, opt-in; run 47: the same bits, no
faster): a tile's last steps issue the next tile's first weight and token copies, and the next tile's expert, pairs
and first scale words load a tile ahead.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._gluon_fc2_kernel import _scales_below_2_pow_1, nvmma_descriptor, stage_barriers, wgmma_layout
from ._triton_moe_kernel import _activate, _fp8_sx_to_bf16, _scale_row_offsets, _sx_factors

# the barrier among the warps of one partition (a named barrier there): ``gl.thread_barrier`` in Triton 3.6,
# ``gl.barrier`` from 3.7
_partition_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


@gluon.jit
def _issue_weights(w_desc, w8_smem, w_ready, k, g, w_row, up_off, WSTAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                   BLOCK_K: gl.constexpr, GATED: gl.constexpr):
    """K step k's fp8 weight tile by TMA into stage ``(g + k) % WSTAGES`` of the weight ring (``g``: the ring
    positions of earlier tiles, 0 but in the persistent kernels): rows from ``w_row``, or (``GATED``) two boxes of
    ``BLOCK_N // 2`` rows, the gate rows from ``w_row`` into the stage's first half and their up rows, ``up_off``
    rows further, into its second. No wait: only the producer reads that ring, and it has read the stage's last tile (position
    g + k - WSTAGES) before it issues this copy."""
    st = (g + k) % WSTAGES
    if GATED:
        mbarrier.expect(w_ready.index(st), 2 * w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * BLOCK_K], w_ready.index(st),
                                        w8_smem.index(st).slice(0, BLOCK_N // 2))
        tma.async_copy_global_to_shared(w_desc, [w_row + up_off, k * BLOCK_K], w_ready.index(st),
                                        w8_smem.index(st).slice(BLOCK_N // 2, BLOCK_N // 2))
    else:
        mbarrier.expect(w_ready.index(st), w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [w_row, k * BLOCK_K], w_ready.index(st), w8_smem.index(st))


@gluon.jit
def _issue_rows(a_desc, x_smem, x_ready, x_empty, k, g, a_row, STAGES: gl.constexpr, BLOCK_K: gl.constexpr):
    """K step k's token tile (FC2: the inter rows, one TMA box) into stage ``(g + k) % STAGES`` of the token ring,
    once the consumer's MMA on that stage's last tile has retired."""
    st = (g + k) % STAGES
    # the first turn passes: no earlier phase to wait for
    mbarrier.wait(x_empty.index(st), (((g + k) // STAGES) & 1) ^ 1)
    mbarrier.expect(x_ready.index(st), a_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [a_row, k * BLOCK_K], x_ready.index(st), x_smem.index(st))


@gluon.constexpr_function
def _block_layout(warps):
    """The producer's register layout of one 32-value scale block column ``[BLOCK_N, 32]`` of a weight tile: a
    thread holds one row's 32 values (one E8M0 scale)."""
    return gl.BlockedLayout(size_per_thread=[1, 32], threads_per_warp=[32, 1], warps_per_cta=[warps, 1],
                            order=[1, 0])


@gluon.jit
def _scale_word(s_base, row_offs, k, steps, BLOCK_K: gl.constexpr):
    """The int32 word [BLOCK_N] of each weight row's 4 E8M0 scales (128 values of K, the 128x4 layout's 4 bytes) that
    holds K step k's (``BLOCK_K`` <= 128: one word per step); 0 past the last step."""
    c = k * (BLOCK_K // 32)
    return gl.load((s_base + row_offs + (c // 4) * 512).to(gl.pointer_type(gl.int32), bitcast=True),
                   mask=(row_offs >= 0) & (k < steps), other=0)


@gluon.jit
def _dequant_block(w, s, one, SX: gl.constexpr):
    """One 32-value scale block ``w`` ``[BLOCK_N, 32]`` fp8 times ``2 ** (s - 127)`` (``s`` its rows' E8M0 bytes,
    int32) as bf16, the exact product rounded once. ``SX`` False: fp32 convert and multiply, then bf16. ``SX`` True
    (``ws_sx``): the Triton kernels' ``_fp8_sx_to_bf16`` (``e4m3 * 2 ** -120`` by moving bits: 3 instructions per
    2 weights where the fp32 convert takes 5) times one bf16 factor ``2 ** (s - 7)`` where ``one`` (every byte of the
    program's rows below 128, a uniform scalar), else times the two factors of ``_sx_factors`` (both normal: the same
    value)."""
    if SX:
        v = _fp8_sx_to_bf16(w)
        if one:
            f = ((s + 120) << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)
            out = v * f[:, None]
        else:
            lo, hi = _sx_factors(s)
            out = v * lo[:, None] * hi[:, None]
    else:
        # 2 ** (s - 127) in fp32: the exponent field, or the subnormal 2 ** -127 for byte 0
        scale = gl.where(s == 0, 0x00400000, s << 23).to(gl.float32, bitcast=True)
        out = (w.to(gl.float32) * scale[:, None]).to(gl.bfloat16)
    return out


@gluon.constexpr_function
def _out_rows(block_n, gated):
    """Output rows of an FC1 tile of ``block_n`` weight rows: half of them where ``gated`` (gate rows and their up
    rows), else all."""
    return block_n // 2 if gated else block_n


@gluon.jit
def _interleave_halves(t, BLOCK_N: gl.constexpr):
    """The gated producer's tile ``t`` ``[BLOCK_N, C]`` (gate rows, then their up rows) with its rows reordered for
    the wgmma: row ``16 j + 8 h + r`` holds half h's row ``8 j + r``. A wgmma accumulator thread holds rows r and
    r + 8 of each 16 (``_gate_up``), so gate and up of one output land in one thread. Register indices only: each
    thread keeps its values (a bit permutation of the row index)."""
    c: gl.constexpr = t.shape[1]
    return t.reshape([2, BLOCK_N // 16, 8, c]).permute((1, 0, 2, 3)).reshape([BLOCK_N, c])


@gluon.jit
def _gate_up(acc, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr):
    """``(gate, up)`` ``[BLOCK_N // 2, BLOCK_T]`` of the gated consumers' accumulator ``[BLOCK_N, BLOCK_T]`` (rows in
    ``_interleave_halves``'s order); both values of an output sit in one thread (rows r and r + 8 of a 16-row wgmma
    block), so no data moves."""
    pairs = acc.reshape([BLOCK_N // 16, 2, 8, BLOCK_T]).permute((0, 2, 3, 1)).reshape([BLOCK_N // 2, BLOCK_T, 2])
    return gl.split(pairs)


@gluon.jit
def _dequant_step(k, g, w_desc, w8_smem, wb_smem, w_ready, deq_ready, deq_empty, w_row, up_off, s_base, row_offs,
                  steps, word, one, nxt_w_row, nxt_live, WSTAGES: gl.constexpr, DSTAGES: gl.constexpr,
                  BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr,
                  GATED: gl.constexpr):
    """Step k's fp8 weight tile (its stage of the copy ring) times its E8M0 scales (``word``: ``_scale_word`` of step
    k, loaded a step ahead so that its latency is off this chain) into the bf16 ring, one 32-value scale block at a
    time (32 values per thread live, not the tile's 64), and hands the bf16 tile to the consumer; then refills the fp8
    stage just read (every producer warp has) with step k + WSTAGES's weights, or past this tile's last steps, where
    ``nxt_live`` (``ws_prefetch``), with the next tile's (rows from ``nxt_w_row``; ring position ``g + k + WSTAGES``
    either way). Returns step k + 1's scale word, loaded before this step's waits. Ring positions ``g + k``
    (``_issue_weights``); ``GATED``: the bf16 rows in ``_interleave_halves``'s order."""
    next_word = _scale_word(s_base, row_offs, k + 1, steps, BLOCK_K)
    layout: gl.constexpr = _block_layout(PRODUCER_WARPS)
    st = (g + k) % WSTAGES
    d = (g + k) % DSTAGES
    mbarrier.wait(w_ready.index(st), ((g + k) // WSTAGES) & 1)
    mbarrier.wait(deq_empty.index(d), (((g + k) // DSTAGES) & 1) ^ 1)
    for b in gl.static_range(BLOCK_K // 32):
        c = k * (BLOCK_K // 32) + b
        s = (word >> (8 * (c % 4))) & 0xFF
        w = w8_smem.index(st).slice(32 * b, 32, 1).load(layout)
        v = _dequant_block(w, s, one, SX)
        if GATED:
            v = _interleave_halves(v, BLOCK_N)
        wb_smem.index(d).slice(32 * b, 32, 1).store(v)
    fence_async_shared()  # the generic-proxy stores, visible to the wgmma's async proxy
    _partition_barrier()  # every warp of the partition has read the fp8 stage and written the bf16 tile
    mbarrier.arrive(deq_ready.index(d))
    if k + WSTAGES < steps:
        _issue_weights(w_desc, w8_smem, w_ready, k + WSTAGES, g, w_row, up_off, WSTAGES, BLOCK_N, BLOCK_K, GATED)
    elif nxt_live:  # (a literal False but in ``PREFETCH``)
        _issue_weights(w_desc, w8_smem, w_ready, k + WSTAGES - steps, g + steps, nxt_w_row, up_off, WSTAGES, BLOCK_N,
                       BLOCK_K, GATED)
    return next_word


@gluon.jit
def _weight_rows(n_first, up_off, BLOCK_N: gl.constexpr, PRODUCER_WARPS: gl.constexpr, GATED: gl.constexpr):
    """The expert's weight rows of a tile as the producer holds them (``_block_layout``'s rows): ``[n_first,
    n_first + BLOCK_N)``, or (``GATED``) ``BLOCK_N // 2`` gate rows from ``n_first``, then their up rows, ``up_off``
    rows further."""
    i = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, _block_layout(PRODUCER_WARPS)))
    if GATED:
        rows = gl.where(i < BLOCK_N // 2, n_first + i, n_first + up_off + (i - BLOCK_N // 2))
    else:
        rows = n_first + i
    return rows


@gluon.jit
def _row_offsets(n_first, up_off, scale_tiles, BLOCK_N: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                 GATED: gl.constexpr):
    """``row_offs`` of ``_dequant_step``: the byte offsets of a tile's weight rows (``_weight_rows``) in the expert's
    128x4 scales (``_scale_rows`` without the base, as int32)."""
    rows = _weight_rows(n_first, up_off, BLOCK_N, PRODUCER_WARPS, GATED)
    return (rows // 128) * (scale_tiles * 512) + _scale_row_offsets(rows)


@gluon.jit
def _first_weights(w_desc, w8_smem, w_ready, g, w_row, up_off, steps, WSTAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                   BLOCK_K: gl.constexpr, GATED: gl.constexpr):
    """A tile's first ``WSTAGES`` weight copies (ring positions from ``g``)."""
    for i in gl.static_range(WSTAGES):
        if i < steps:
            _issue_weights(w_desc, w8_smem, w_ready, i, g, w_row, up_off, WSTAGES, BLOCK_N, BLOCK_K, GATED)


@gluon.jit
def _first_word(s_base, n_first, up_off, scale_tiles, live, steps, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                PRODUCER_WARPS: gl.constexpr, GATED: gl.constexpr):
    """``PREFETCH``: a tile's step-0 scale word (``_scale_word``), loaded a tile ahead; 0 where not ``live``."""
    return _scale_word(s_base, _row_offsets(n_first, up_off, scale_tiles, BLOCK_N, PRODUCER_WARPS, GATED), 0,
                       gl.where(live, steps, 0), BLOCK_K)


@gluon.jit
def _one_factor(s_base, n_first, up_off, steps, scale_tiles, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                STEPS_P2: gl.constexpr, PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr, GATED: gl.constexpr):
    """``one`` of ``_dequant_block``: with ``SX``, whether every E8M0 byte of this program's weight rows
    (``_weight_rows``) over its ``steps`` K steps is below 128 (``_scales_below_2_pow_1``: one int32 word per row and
    128 values; ``STEPS_P2`` a power of two >= the K extent / 128); False without ``SX`` (unused there)."""
    if SX:
        rows = _weight_rows(n_first, up_off, BLOCK_N, PRODUCER_WARPS, GATED)
        one = _scales_below_2_pow_1(s_base, rows, gl.cdiv(steps * BLOCK_K, 128), scale_tiles, STEPS_P2,
                                    PRODUCER_WARPS)
    else:
        one = False
    return one


@gluon.jit
def _fc2_producer(w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty, w_row,
                  a_row, s_base, n_first, steps, scale_tiles, g, word, nxt_w_row, nxt_a_row, nxt_live, issue,
                  STAGES: gl.constexpr, WSTAGES: gl.constexpr, DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_K: gl.constexpr, PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr, STEPS_P2: gl.constexpr,
                  PREFETCH: gl.constexpr):
    """FC2's producer of one tile (from ring position ``g``): the weight copies by TMA ``WSTAGES`` steps ahead, the
    inter rows' ``STAGES - 1``, and the dequant. ``PREFETCH`` (persistent, ``ws_prefetch``): the first copies only
    where ``issue`` (the previous tile has not made them), ``word`` the step-0 scale word loaded a tile ahead, and past
    its last steps the copies run on into the next tile (``nxt_w_row`` / ``nxt_a_row``, where ``nxt_live``)."""
    row_offs = _row_offsets(n_first, 0, scale_tiles, BLOCK_N, PRODUCER_WARPS, False)
    if issue:  # (a literal True but in PREFETCH: no branch)
        _first_weights(w_desc, w8_smem, w_ready, g, w_row, 0, steps, WSTAGES, BLOCK_N, BLOCK_K, False)
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                _issue_rows(a_desc, x_smem, x_ready, x_empty, i, g, a_row, STAGES, BLOCK_K)
    one = _one_factor(s_base, n_first, 0, steps, scale_tiles, BLOCK_N, BLOCK_K, STEPS_P2, PRODUCER_WARPS, SX, False)
    if not PREFETCH:
        word = _scale_word(s_base, row_offs, 0, steps, BLOCK_K)
    for k in range(steps):
        word = _dequant_step(k, g, w_desc, w8_smem, wb_smem, w_ready, deq_ready, deq_empty, w_row, 0, s_base,
                             row_offs, steps, word, one, nxt_w_row, nxt_live, WSTAGES, DSTAGES, BLOCK_N, BLOCK_K,
                             PRODUCER_WARPS, SX, False)
        # only now the rows into step k - 1's stage: the consumer frees it after step k's MMA, which needs the tile
        # just stored (issued before it, this wait would never end)
        if k + STAGES - 1 < steps:
            _issue_rows(a_desc, x_smem, x_ready, x_empty, k + STAGES - 1, g, a_row, STAGES, BLOCK_K)
        elif nxt_live:  # (a literal False but in PREFETCH)
            _issue_rows(a_desc, x_smem, x_ready, x_empty, k + STAGES - 1 - steps, g + steps, nxt_a_row, STAGES,
                        BLOCK_K)


@gluon.constexpr_function
def _copy_layout(block_k, warps):
    """The FC1 producer's layout of a gathered token tile ``[BLOCK_T, BLOCK_K]``: 8 bf16 (16 bytes, one cp.async) per
    thread."""
    return gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[32 // (block_k // 8), block_k // 8],
                            warps_per_cta=[warps, 1], order=[1, 0])


@gluon.jit
def _block_pairs(sorted_pairs_ptr, pid_b, BLOCK_T: gl.constexpr, BLOCK_K: gl.constexpr,
                 PRODUCER_WARPS: gl.constexpr):
    """The pair (or -1) of each of token block ``pid_b``'s ``BLOCK_T`` sorted positions, in ``_copy_layout``'s rows."""
    positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, _copy_layout(BLOCK_K,
                                                                                             PRODUCER_WARPS)))
    return gl.load(sorted_pairs_ptr + positions)


@gluon.jit
def _gathered_offsets(pairs, cols, stride_x, TOPK: gl.constexpr):
    """``(x_offs, live_rows)`` of ``_issue_gathered`` for a block's ``pairs``: int32 element offsets of the token rows
    (the launcher checks that x fits; pointers made per copy: half the live registers) and the rows that hold a
    pair."""
    tokens = gl.where(pairs >= 0, pairs // TOPK, 0)
    return tokens[:, None] * stride_x + cols[None, :], (pairs >= 0)[:, None]


@gluon.jit
def _issue_gathered(x_smem, x_ready, x_empty, x_ptr, x_offs, live_rows, cols, k, g, K, STAGES: gl.constexpr,
                    BLOCK_K: gl.constexpr):
    """FC1's token rows of K step k into stage ``(g + k) % STAGES`` of the token ring once it is free, by cp.async
    (gathered: no TMA box), each producer thread's copies counted by the stage's mbarrier once landed."""
    st = (g + k) % STAGES
    mbarrier.wait(x_empty.index(st), (((g + k) // STAGES) & 1) ^ 1)
    async_copy.async_copy_global_to_shared(x_smem.index(st), x_ptr + (x_offs + k * BLOCK_K),
                                           mask=live_rows & (k * BLOCK_K + cols < K)[None, :])
    # one expected arrival per thread, once its copies have landed (no count increment: see _gluon_fc1_kernel)
    async_copy.mbarrier_arrive(x_ready.index(st), increment_count=False)


@gluon.jit
def _fc1_producer(w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty,
                  deq_ready, deq_empty, w_row, pid_b, s_base, n_first, steps, K, scale_tiles, g, n_out, pairs, word,
                  nxt_w_row, nxt_pairs, nxt_live, issue, TOPK: gl.constexpr, STAGES: gl.constexpr,
                  WSTAGES: gl.constexpr, DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                  BLOCK_K: gl.constexpr, PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr, STEPS_P2: gl.constexpr,
                  GATED: gl.constexpr, PREFETCH: gl.constexpr):
    """FC1's producer of one tile (from ring position ``g``): the weight copies by TMA ``WSTAGES`` steps ahead, the
    gathered token rows (sorted position -> pair -> token row of x; padding positions copy nothing: zeros) by cp.async
    ``STAGES - 1``, and the dequant. ``GATED``: the tile's ``BLOCK_N // 2`` gate rows from ``n_first`` (``w_row`` in
    the stack) and their up rows ``n_out`` further. ``PREFETCH``: as ``_fc2_producer``'s, with the block's ``pairs``
    (``_block_pairs``) and the next tile's ``nxt_pairs`` loaded a tile ahead."""
    copy_layout: gl.constexpr = _copy_layout(BLOCK_K, PRODUCER_WARPS)
    if not PREFETCH:
        pairs = _block_pairs(sorted_pairs_ptr, pid_b, BLOCK_T, BLOCK_K, PRODUCER_WARPS)
    cols = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, copy_layout))
    x_offs, live_rows = _gathered_offsets(pairs, cols, stride_x, TOPK)
    row_offs = _row_offsets(n_first, n_out, scale_tiles, BLOCK_N, PRODUCER_WARPS, GATED)
    if issue:  # (a literal True but in PREFETCH: no branch)
        _first_weights(w_desc, w8_smem, w_ready, g, w_row, n_out, steps, WSTAGES, BLOCK_N, BLOCK_K, GATED)
        for i in gl.static_range(STAGES - 1):
            if i < steps:
                _issue_gathered(x_smem, x_ready, x_empty, x_ptr, x_offs, live_rows, cols, i, g, K, STAGES, BLOCK_K)
    one = _one_factor(s_base, n_first, n_out, steps, scale_tiles, BLOCK_N, BLOCK_K, STEPS_P2, PRODUCER_WARPS, SX,
                      GATED)
    if not PREFETCH:
        word = _scale_word(s_base, row_offs, 0, steps, BLOCK_K)
    for k in range(steps):
        word = _dequant_step(k, g, w_desc, w8_smem, wb_smem, w_ready, deq_ready, deq_empty, w_row, n_out, s_base,
                             row_offs, steps, word, one, nxt_w_row, nxt_live, WSTAGES, DSTAGES, BLOCK_N, BLOCK_K,
                             PRODUCER_WARPS, SX, GATED)
        if k + STAGES - 1 < steps:  # (after the dequant: _fc2_producer says why)
            _issue_gathered(x_smem, x_ready, x_empty, x_ptr, x_offs, live_rows, cols, k + STAGES - 1, g, K, STAGES,
                            BLOCK_K)
        elif nxt_live:  # (a literal False but in PREFETCH): the next tile's rows
            nxt_offs, nxt_rows = _gathered_offsets(nxt_pairs, cols, stride_x, TOPK)
            _issue_gathered(x_smem, x_ready, x_empty, x_ptr, nxt_offs, nxt_rows, cols, k + STAGES - 1 - steps,
                            g + steps, K, STAGES, BLOCK_K)


@gluon.jit
def _release(deq_empty, x_empty, p, STAGES: gl.constexpr, DSTAGES: gl.constexpr, THREAD_ARRIVE: gl.constexpr):
    """The consumers free ring position ``p``'s token and bf16 weight stages (its MMA has retired): after a barrier of
    the consumer warps, one arrival; or (``THREAD_ARRIVE``, ``ws_thread_arrive``) one arrival per consumer thread
    after its own wait, with no barrier (``x_empty`` and ``deq_empty`` then expect ``32 * num_warps``; the cp.async
    form of arrive is the per-thread one, and a consumer has no cp.async pending, so it arrives at once)."""
    if THREAD_ARRIVE:
        async_copy.mbarrier_arrive(deq_empty.index(p % DSTAGES), increment_count=False)
        async_copy.mbarrier_arrive(x_empty.index(p % STAGES), increment_count=False)
    else:
        _partition_barrier()
        mbarrier.arrive(deq_empty.index(p % DSTAGES))
        mbarrier.arrive(x_empty.index(p % STAGES))


@gluon.jit
def _mma_steps(wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, g, steps, STAGES: gl.constexpr,
               DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, THREAD_ARRIVE: gl.constexpr,
               num_warps: gl.constexpr):
    """One tile's K steps (ring positions ``g`` to ``g + steps - 1``): step k's wgmma on the bf16 weights and the
    tokens, one step left in flight, step k - 1's stages released once its MMA retires (``_release``). Returns the
    fp32 accumulator ``[BLOCK_N, BLOCK_T]`` with every MMA retired; the last step's stages are not released."""
    mma: gl.constexpr = wgmma_layout(BLOCK_T, num_warps)
    acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, mma)
    for k in range(steps):
        st = (g + k) % STAGES
        d = (g + k) % DSTAGES
        mbarrier.wait(deq_ready.index(d), ((g + k) // DSTAGES) & 1)
        mbarrier.wait(x_ready.index(st), ((g + k) // STAGES) & 1)
        fence_async_shared()  # FC1's tokens come by cp.async (generic proxy); the wgmma reads through the async proxy
        acc = warpgroup_mma(wb_smem.index(d), x_smem.index(st).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        if k > 0:
            _release(deq_empty, x_empty, g + k - 1, STAGES, DSTAGES, THREAD_ARRIVE)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def _mma_partition(wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, steps, STAGES: gl.constexpr,
                   DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, THREAD_ARRIVE: gl.constexpr,
                   num_warps: gl.constexpr):
    """Consumer of the one-tile kernels: ``_mma_steps`` from ring position 0. Returns ``(acc,)``."""
    acc = _mma_steps(wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, 0, steps, STAGES, DSTAGES, BLOCK_N,
                     BLOCK_T, THREAD_ARRIVE, num_warps)
    return (acc,)  # warp_specialize takes the default partition's results as a tuple


@gluon.jit
def _block_of(num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, pid_b, K, BLOCK_K: gl.constexpr):
    """``(live, expert, steps, s_base)`` of token block ``pid_b``. There is no branch around the warp-specialized
    region (inside one, ptxas held the whole kernel to the launch's register count and refused the wgmma): a block
    past ``num_blocks[0]`` runs 0 K steps and stores nothing."""
    live = pid_b < gl.load(num_blocks_ptr)
    expert = gl.load(block_expert_ptr + pid_b)
    return live, expert, gl.where(live, gl.cdiv(K, BLOCK_K), 0), s_ptr + expert.to(gl.int64) * stride_se


@gluon.jit
def _rings(w_desc, X_LAYOUT: gl.constexpr, X_ARRIVALS: gl.constexpr, STAGES: gl.constexpr, WSTAGES: gl.constexpr,
           DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, BLOCK_K: gl.constexpr,
           RELEASES: gl.constexpr):
    """The three rings and their barriers: the bf16 token stages ``[STAGES, BLOCK_T, BLOCK_K]`` (``X_LAYOUT``) with
    ``x_ready`` (``X_ARRIVALS`` per phase) and ``x_empty``; the fp8 weight stages ``[WSTAGES, BLOCK_N, BLOCK_K]``
    (TMA's layout) with ``w_ready``; the bf16 weight stages ``[DSTAGES, BLOCK_N, BLOCK_K]`` (the wgmma's) with
    ``deq_ready`` and ``deq_empty``; ``x_empty`` and ``deq_empty`` expect ``RELEASES`` arrivals per phase
    (``_releases``). Returns ``(x_smem, x_ready, x_empty, w8_smem, wb_smem, w_ready, deq_ready, deq_empty)``."""
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_T, BLOCK_K], X_LAYOUT)
    x_ready = stage_barriers(STAGES, X_ARRIVALS)
    x_empty = stage_barriers(STAGES, RELEASES)
    w8_smem = gl.allocate_shared_memory(gl.float8e4nv, [WSTAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    wb_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], gl.bfloat16)
    wb_smem = gl.allocate_shared_memory(gl.bfloat16, [DSTAGES, BLOCK_N, BLOCK_K], wb_layout)
    return (x_smem, x_ready, x_empty, w8_smem, wb_smem, stage_barriers(WSTAGES, 1), stage_barriers(DSTAGES, 1),
            stage_barriers(DSTAGES, RELEASES))


@gluon.constexpr_function
def _releases(thread_arrive, num_warps):
    """Arrivals per phase of the stages the consumers free (``x_empty``, ``deq_empty``): one per consumer thread with
    ``THREAD_ARRIVE``, else one."""
    return 32 * num_warps if thread_arrive else 1


@gluon.constexpr_function
def _row_store_layout(block_n, num_warps):
    """The epilogues' store layout for a ``[block_n, BLOCK_T]`` tile written to rows ``[token, n]``: 8 consecutive n
    per thread (one 16-byte store), 16 threads along n and 2 tokens per warp (8 and 4 at ``block_n`` 64: the gated
    FC1's outputs)."""
    along_n = min(16, block_n // 8)
    return gl.BlockedLayout([8, 1], [along_n, 32 // along_n], [1, num_warps], [0, 1])


@gluon.jit
def _rows_of(tile, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, STAGED: gl.constexpr, num_warps: gl.constexpr):
    """The consumers' bf16 tile ``[BLOCK_N, BLOCK_T]`` (wgmma layout) in ``_row_store_layout``: through the compiler's
    layout conversion (rounds of a small scratch, two barriers each: 16 rounds at 128 x 256), or (``STAGED``,
    ``ws_staged_epilogue``) stored whole into shared memory (the rings' bytes, dead by now) and read back after one
    barrier."""
    out: gl.constexpr = _row_store_layout(BLOCK_N, num_warps)
    if STAGED:
        staged = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, BLOCK_T], gl.SwizzledSharedLayout(8, 1, 8, [0, 1]))
        staged.store(tile)
        _partition_barrier()
        rows = staged.load(out)
    else:
        rows = gl.convert_layout(tile, out)
    return rows


@gluon.jit
def _store_slots(vals, slot_ptr, sorted_pairs_ptr, stride_slot, pid_b, n_first, N, live, BLOCK_N: gl.constexpr,
                 BLOCK_T: gl.constexpr, num_warps: gl.constexpr):
    """FC2's epilogue: ``vals`` ``[BLOCK_N, BLOCK_T]`` bf16 (``_row_store_layout``) into the slot rows of block
    ``pid_b``'s pairs (padding positions, and every position where not ``live``, store nothing)."""
    out: gl.constexpr = _row_store_layout(BLOCK_N, num_warps)
    positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out))
    pairs = gl.load(sorted_pairs_ptr + positions)
    offs_n = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, out))
    keep = (pairs >= 0) & live
    ptrs = slot_ptr + gl.where(keep, pairs, 0).to(gl.int64)[None, :] * stride_slot + offs_n[:, None]
    gl.store(ptrs, vals, mask=keep[None, :] & (offs_n < N)[:, None])


@gluon.jit
def _store_inter(h, inter_ptr, sorted_pairs_ptr, stride_inter, pid_b, n_first, N_OUT, live, BLOCK_N: gl.constexpr,
                 BLOCK_T: gl.constexpr, num_warps: gl.constexpr):
    """FC1's epilogue: ``h`` ``[BLOCK_N, BLOCK_T]`` bf16 (``_row_store_layout``) into the inter rows of block
    ``pid_b``'s positions (int32 offsets: the launcher checks that inter fits)."""
    out: gl.constexpr = _row_store_layout(BLOCK_N, num_warps)
    positions = pid_b * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out))
    keep = (gl.load(sorted_pairs_ptr + positions) >= 0) & live
    offs_n = n_first + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, out))
    ptrs = inter_ptr + (positions[None, :] * stride_inter + offs_n[:, None])
    gl.store(ptrs, h, mask=keep[None, :] & (offs_n < N_OUT)[:, None])


@gluon.jit
def _fc2_ws_kernel(w_desc, a_desc, s_ptr, slot_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N, K,
                   stride_se, scale_tiles, stride_slot, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                   BLOCK_K: gl.constexpr, STAGES: gl.constexpr, WSTAGES: gl.constexpr, DSTAGES: gl.constexpr,
                   PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr, SX: gl.constexpr,
                   STEPS_P2: gl.constexpr, THREAD_ARRIVE: gl.constexpr, STAGED: gl.constexpr,
                   num_warps: gl.constexpr):
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    live, expert, steps, s_base = _block_of(num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, pid_b, K, BLOCK_K)
    x_layout: gl.constexpr = a_desc.layout
    # the token rows by TMA: one arrival (the expect) per phase
    x_smem, x_ready, x_empty, w8_smem, wb_smem, w_ready, deq_ready, deq_empty = _rings(
        w_desc, x_layout, 1, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K, _releases(THREAD_ARRIVE, num_warps))
    n_first = pid_n * BLOCK_N
    acc = gl.warp_specialize([
        (_mma_partition, (wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, steps, STAGES, DSTAGES, BLOCK_N,
                          BLOCK_T, THREAD_ARRIVE, num_warps)),
        (_fc2_producer, (w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty,
                         expert * N + n_first, pid_b * BLOCK_T, s_base, n_first, steps, scale_tiles, 0, 0, 0, 0,
                         False, True, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2,
                         False)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])[0]
    vals = _rows_of(acc.to(gl.bfloat16), BLOCK_N, BLOCK_T, STAGED, num_warps)
    _store_slots(vals, slot_ptr, sorted_pairs_ptr, stride_slot, pid_b, n_first, N, live, BLOCK_N, BLOCK_T, num_warps)


@gluon.jit
def _activated(acc, ACTIVATION: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, GATED: gl.constexpr):
    """FC1's fp32 activation of the consumers' accumulator ``[BLOCK_N, BLOCK_T]``: of its gate and up halves
    (``_gate_up``: ``[BLOCK_N // 2, BLOCK_T]``) where ``GATED``, else of the one accumulator."""
    if GATED:
        gate, up = _gate_up(acc, BLOCK_N, BLOCK_T)
        out = _activate(gate, up, ACTIVATION)
    else:
        out = _activate(acc, acc, ACTIVATION)
    return out


@gluon.jit
def _fc1_ws_kernel(w_desc, x_ptr, s_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N_OUT, N1, K,
                   stride_x, stride_se, scale_tiles, stride_inter, TOPK: gl.constexpr, ACTIVATION: gl.constexpr,
                   BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                   WSTAGES: gl.constexpr, DSTAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr, SX: gl.constexpr, STEPS_P2: gl.constexpr,
                   THREAD_ARRIVE: gl.constexpr, STAGED: gl.constexpr, GATED: gl.constexpr,
                   num_warps: gl.constexpr):
    pid_n = gl.program_id(0)
    pid_b = gl.program_id(1)
    live, expert, steps, s_base = _block_of(num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, pid_b, K, BLOCK_K)
    OUT_N: gl.constexpr = _out_rows(BLOCK_N, GATED)
    x_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, BLOCK_K], gl.bfloat16)
    # the token rows by cp.async: every producer thread's copies count one arrival per phase
    x_smem, x_ready, x_empty, w8_smem, wb_smem, w_ready, deq_ready, deq_empty = _rings(
        w_desc, x_layout, 32 * PRODUCER_WARPS, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
        _releases(THREAD_ARRIVE, num_warps))
    n_first = pid_n * OUT_N
    acc = gl.warp_specialize([
        (_mma_partition, (wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, steps, STAGES, DSTAGES, BLOCK_N,
                          BLOCK_T, THREAD_ARRIVE, num_warps)),
        (_fc1_producer, (w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready,
                         x_empty, deq_ready, deq_empty, expert * N1 + n_first, pid_b, s_base, n_first, steps, K,
                         scale_tiles, 0, N_OUT, 0, 0, 0, 0, False, True, TOPK, STAGES, WSTAGES, DSTAGES, BLOCK_N,
                         BLOCK_T, BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2, GATED, False)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])[0]
    h = _rows_of(_activated(acc, ACTIVATION, BLOCK_N, BLOCK_T, GATED).to(gl.bfloat16), OUT_N, BLOCK_T, STAGED,
                 num_warps)
    _store_inter(h, inter_ptr, sorted_pairs_ptr, stride_inter, pid_b, n_first, N_OUT, live, OUT_N, BLOCK_T,
                 num_warps)


# Persistent forms (session 41, ``ws_persistent``; GPU-tested and the default since session 42): one program per SM
# walks the live tiles ``t = program, program + programs, ...`` (tile t: token block ``t // n_tiles``, row tile
# ``t % n_tiles``; the block count read from ``num_blocks`` on the GPU, so a captured graph's grid stays fixed). Both
# partitions walk the same tiles and count ring positions across them (``g``), so the producer starts a tile's copies
# and dequant while the consumers finish the previous tile's MMAs and store it: no program start or end left exposed
# at one CTA per SM. The consumers free each tile's last stages after its final wait (``_release``).


@gluon.jit
def _tile_of(t, n_tiles, block_expert_ptr, s_ptr, stride_se, rows, BLOCK_N: gl.constexpr):
    """``(pid_b, n_first, w_row, s_base)`` of persistent tile ``t``: its token block, first output row, first row of
    the weights seen as ``[E * rows, K]``, and its expert's scales."""
    pid_b = t // n_tiles
    n_first = (t % n_tiles) * BLOCK_N
    expert = gl.load(block_expert_ptr + pid_b)
    return pid_b, n_first, expert * rows + n_first, s_ptr + expert.to(gl.int64) * stride_se


@gluon.jit
def _next_tile(t, live, n_tiles, block_expert_ptr, s_ptr, stride_se, rows, up_off, steps, scale_tiles,
               BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, PRODUCER_WARPS: gl.constexpr, GATED: gl.constexpr):
    """``ws_prefetch``: ``_tile_of`` tile ``t`` and its step-0 scale word (``_first_word``; 0 where not ``live``),
    loaded a tile ahead of their use. ``BLOCK_N``: the tile's output rows."""
    pid_b, n_first, w_row, s_base = _tile_of(t, n_tiles, block_expert_ptr, s_ptr, stride_se, rows, BLOCK_N)
    return pid_b, n_first, w_row, s_base, _first_word(s_base, n_first, up_off, scale_tiles, live, steps,
                                                      2 * BLOCK_N if GATED else BLOCK_N, BLOCK_K, PRODUCER_WARPS,
                                                      GATED)


@gluon.jit
def _runs_on(steps, STAGES: gl.constexpr, WSTAGES: gl.constexpr):
    """``ws_prefetch``: whether a tile's last steps issue the next tile's first copies (both rings no deeper than a
    tile's steps; else each tile starts its own)."""
    return (steps >= WSTAGES) & (steps >= STAGES)


@gluon.jit
def _starts(g, steps, STAGES: gl.constexpr, WSTAGES: gl.constexpr):
    """``ws_prefetch``: whether the tile at ring position ``g`` issues its own first copies (the program's first
    tile, or the previous one did not run on: ``_runs_on``)."""
    return (g == 0) | (steps < WSTAGES) | (steps < STAGES)


@gluon.jit
def _fc2_producer_p(w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty,
                    num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, N, K, scale_tiles, STAGES: gl.constexpr,
                    WSTAGES: gl.constexpr, DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                    BLOCK_K: gl.constexpr, PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr, STEPS_P2: gl.constexpr,
                    PREFETCH: gl.constexpr):
    """``_fc2_producer`` over the program's persistent tiles; ``PREFETCH``: each tile's copies run on into the next
    tile's (``_next_tile``)."""
    n_tiles = gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    total = gl.load(num_blocks_ptr) * n_tiles
    g = 0
    if PREFETCH:
        t0 = gl.program_id(0)
        _, n_first, w_row, s_base, word = _next_tile(t0, t0 < total, n_tiles, block_expert_ptr, s_ptr, stride_se, N,
                                                     0, steps, scale_tiles, BLOCK_N, BLOCK_K, PRODUCER_WARPS, False)
        for t in range(t0, total, gl.num_programs(0)):
            more = t + gl.num_programs(0) < total
            nxt_b, nxt_first, nxt_w_row, nxt_s_base, nxt_word = _next_tile(
                gl.where(more, t + gl.num_programs(0), t), more, n_tiles, block_expert_ptr, s_ptr, stride_se, N, 0,
                steps, scale_tiles, BLOCK_N, BLOCK_K, PRODUCER_WARPS, False)
            _fc2_producer(w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty,
                          w_row, (t // n_tiles) * BLOCK_T, s_base, n_first, steps, scale_tiles, g, word, nxt_w_row,
                          nxt_b * BLOCK_T, more & _runs_on(steps, STAGES, WSTAGES), _starts(g, steps, STAGES, WSTAGES),
                          STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2, True)
            g += steps
            n_first, w_row, s_base, word = nxt_first, nxt_w_row, nxt_s_base, nxt_word
    else:
        for t in range(gl.program_id(0), total, gl.num_programs(0)):
            pid_b, n_first, w_row, s_base = _tile_of(t, n_tiles, block_expert_ptr, s_ptr, stride_se, N, BLOCK_N)
            _fc2_producer(w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty,
                          w_row, pid_b * BLOCK_T, s_base, n_first, steps, scale_tiles, g, 0, 0, 0, False, True, STAGES,
                          WSTAGES, DSTAGES, BLOCK_N, BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2, False)
            g += steps


@gluon.jit
def _consumer_p(wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, out_ptr, sorted_pairs_ptr, num_blocks_ptr, N,
                K, stride_out, FC1: gl.constexpr, ACTIVATION: gl.constexpr, STAGES: gl.constexpr,
                DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, BLOCK_K: gl.constexpr,
                THREAD_ARRIVE: gl.constexpr, GATED: gl.constexpr, num_warps: gl.constexpr):
    """The consumers over the program's persistent tiles: each tile's MMAs (``_mma_steps``), its last stages freed,
    then its rows stored: ``FC1``, the activated inter rows (``_activated``, ``_store_inter``; ``N`` the output rows,
    ``BLOCK_N // 2`` per tile where ``GATED``); else the slot rows (``_store_slots``)."""
    OUT_N: gl.constexpr = _out_rows(BLOCK_N, GATED)
    n_tiles = gl.cdiv(N, OUT_N)
    steps = gl.cdiv(K, BLOCK_K)
    g = 0
    for t in range(gl.program_id(0), gl.load(num_blocks_ptr) * n_tiles, gl.num_programs(0)):
        acc = _mma_steps(wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, g, steps, STAGES, DSTAGES, BLOCK_N,
                         BLOCK_T, THREAD_ARRIVE, num_warps)
        _release(deq_empty, x_empty, g + steps - 1, STAGES, DSTAGES, THREAD_ARRIVE)
        g += steps
        if FC1:
            acc = _activated(acc, ACTIVATION, BLOCK_N, BLOCK_T, GATED)
        rows = _rows_of(acc.to(gl.bfloat16), OUT_N, BLOCK_T, False, num_warps)  # (rings live: not staged)
        pid_b = t // n_tiles
        n_first = (t % n_tiles) * OUT_N
        if FC1:
            _store_inter(rows, out_ptr, sorted_pairs_ptr, stride_out, pid_b, n_first, N, True, OUT_N, BLOCK_T,
                         num_warps)
        else:
            _store_slots(rows, out_ptr, sorted_pairs_ptr, stride_out, pid_b, n_first, N, True, BLOCK_N, BLOCK_T,
                         num_warps)


@gluon.jit
def _fc2_ws_persistent_kernel(w_desc, a_desc, s_ptr, slot_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr, N,
                              K, stride_se, scale_tiles, stride_slot, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                              BLOCK_K: gl.constexpr, STAGES: gl.constexpr, WSTAGES: gl.constexpr,
                              DSTAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                              SX: gl.constexpr, STEPS_P2: gl.constexpr, THREAD_ARRIVE: gl.constexpr,
                              PREFETCH: gl.constexpr, num_warps: gl.constexpr):
    x_layout: gl.constexpr = a_desc.layout
    x_smem, x_ready, x_empty, w8_smem, wb_smem, w_ready, deq_ready, deq_empty = _rings(
        w_desc, x_layout, 1, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
        _releases(THREAD_ARRIVE, num_warps))
    gl.warp_specialize([
        (_consumer_p, (wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, slot_ptr, sorted_pairs_ptr,
                       num_blocks_ptr, N, K, stride_slot, False, 0, STAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
                       THREAD_ARRIVE, False, num_warps)),
        (_fc2_producer_p, (w_desc, a_desc, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty, deq_ready, deq_empty,
                           num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, N, K, scale_tiles, STAGES, WSTAGES,
                           DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2, PREFETCH)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])


@gluon.jit
def _fc1_producer_p(w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready, x_empty,
                    deq_ready, deq_empty, num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, N1, N_OUT, K,
                    scale_tiles, TOPK: gl.constexpr, STAGES: gl.constexpr, WSTAGES: gl.constexpr,
                    DSTAGES: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, BLOCK_K: gl.constexpr,
                    PRODUCER_WARPS: gl.constexpr, SX: gl.constexpr, STEPS_P2: gl.constexpr, GATED: gl.constexpr,
                    PREFETCH: gl.constexpr):
    """``_fc1_producer`` over the program's persistent tiles (``BLOCK_N // 2`` output rows each where ``GATED``);
    ``PREFETCH``: as ``_fc2_producer_p``'s, with the next block's pairs loaded a tile ahead too."""
    OUT_N: gl.constexpr = _out_rows(BLOCK_N, GATED)
    n_tiles = gl.cdiv(N_OUT, OUT_N)
    steps = gl.cdiv(K, BLOCK_K)
    total = gl.load(num_blocks_ptr) * n_tiles
    g = 0
    if PREFETCH:
        t0 = gl.program_id(0)
        pid_b, n_first, w_row, s_base, word = _next_tile(t0, t0 < total, n_tiles, block_expert_ptr, s_ptr, stride_se,
                                                         N1, N_OUT, steps, scale_tiles, OUT_N, BLOCK_K,
                                                         PRODUCER_WARPS, GATED)
        pairs = _block_pairs(sorted_pairs_ptr, pid_b, BLOCK_T, BLOCK_K, PRODUCER_WARPS)
        for t in range(t0, total, gl.num_programs(0)):
            more = t + gl.num_programs(0) < total
            nxt_b, nxt_first, nxt_w_row, nxt_s_base, nxt_word = _next_tile(
                gl.where(more, t + gl.num_programs(0), t), more, n_tiles, block_expert_ptr, s_ptr, stride_se, N1,
                N_OUT, steps, scale_tiles, OUT_N, BLOCK_K, PRODUCER_WARPS, GATED)
            nxt_pairs = _block_pairs(sorted_pairs_ptr, nxt_b, BLOCK_T, BLOCK_K, PRODUCER_WARPS)
            _fc1_producer(w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready,
                          x_empty, deq_ready, deq_empty, w_row, t // n_tiles, s_base, n_first, steps, K, scale_tiles,
                          g, N_OUT, pairs, word, nxt_w_row, nxt_pairs, more & _runs_on(steps, STAGES, WSTAGES),
                          _starts(g, steps, STAGES, WSTAGES), TOPK, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T,
                          BLOCK_K, PRODUCER_WARPS, SX, STEPS_P2, GATED, True)
            g += steps
            n_first, w_row, s_base, word, pairs = nxt_first, nxt_w_row, nxt_s_base, nxt_word, nxt_pairs
    else:
        for t in range(gl.program_id(0), total, gl.num_programs(0)):
            pid_b, n_first, w_row, s_base = _tile_of(t, n_tiles, block_expert_ptr, s_ptr, stride_se, N1, OUT_N)
            _fc1_producer(w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready,
                          x_empty, deq_ready, deq_empty, w_row, pid_b, s_base, n_first, steps, K, scale_tiles, g,
                          N_OUT, 0, 0, 0, 0, False, True, TOPK, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
                          PRODUCER_WARPS, SX, STEPS_P2, GATED, False)
            g += steps


@gluon.jit
def _fc1_ws_persistent_kernel(w_desc, x_ptr, s_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr, num_blocks_ptr,
                              N_OUT, N1, K, stride_x, stride_se, scale_tiles, stride_inter, TOPK: gl.constexpr,
                              ACTIVATION: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr,
                              BLOCK_K: gl.constexpr, STAGES: gl.constexpr, WSTAGES: gl.constexpr,
                              DSTAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                              SX: gl.constexpr, STEPS_P2: gl.constexpr, THREAD_ARRIVE: gl.constexpr,
                              GATED: gl.constexpr, PREFETCH: gl.constexpr, num_warps: gl.constexpr):
    x_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, BLOCK_K], gl.bfloat16)
    x_smem, x_ready, x_empty, w8_smem, wb_smem, w_ready, deq_ready, deq_empty = _rings(
        w_desc, x_layout, 32 * PRODUCER_WARPS, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
        _releases(THREAD_ARRIVE, num_warps))
    gl.warp_specialize([
        (_consumer_p, (wb_smem, x_smem, x_ready, x_empty, deq_ready, deq_empty, inter_ptr, sorted_pairs_ptr,
                       num_blocks_ptr, N_OUT, K, stride_inter, True, ACTIVATION, STAGES, DSTAGES, BLOCK_N, BLOCK_T,
                       BLOCK_K, THREAD_ARRIVE, GATED, num_warps)),
        (_fc1_producer_p, (w_desc, x_ptr, stride_x, sorted_pairs_ptr, w8_smem, x_smem, wb_smem, w_ready, x_ready,
                           x_empty, deq_ready, deq_empty, num_blocks_ptr, block_expert_ptr, s_ptr, stride_se, N1,
                           N_OUT, K, scale_tiles, TOPK, STAGES, WSTAGES, DSTAGES, BLOCK_N, BLOCK_T, BLOCK_K,
                           PRODUCER_WARPS, SX, STEPS_P2, GATED, PREFETCH)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    """The persistent kernels' program count bound: ``device``'s streaming multiprocessors (one program each)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _kernel_grid(one_tile, persistent_kernel, tiles: int, grid_blocks: int, device: torch.device,
                 staged_epilogue: bool, persistent: bool, prefetch: bool):
    """``(kernel, grid, extra constexprs)`` of a ws launch over ``tiles`` row tiles x ``grid_blocks`` token blocks:
    the one-tile kernel on every tile, or the persistent one (``prefetch``: its copies running on across tiles) on at
    most one program per SM."""
    if persistent:
        return persistent_kernel, (min(tiles * grid_blocks, _sm_count(device)),), dict(PREFETCH=prefetch)
    return one_tile, (tiles, grid_blocks), dict(STAGED=staged_epilogue)


def gathered_rows_problem(x: torch.Tensor, inter_elements: int) -> str:
    """Why ``_fc1_ws_kernel`` cannot take ``x`` and an inter buffer of ``inter_elements`` (rows times row stride; its
    cp.async copies x rows in 16-byte pieces, its gather and epilogue use int32 element offsets), or "" where it
    can."""
    if x.stride(1) != 1 or x.stride(0) % 8 or x.data_ptr() % 16:
        return (f"x rows must be 16-byte aligned (cp.async): strides {tuple(x.stride())}, address {x.data_ptr()}; "
                "copy x")
    if x.shape[0] * x.stride(0) >= 2 ** 31 or inter_elements >= 2 ** 31:
        return f"x {tuple(x.shape)} (row stride {x.stride(0)}) or {inter_elements} inter values are past int32 offsets"
    return ""


def launch_gluon_ws_fc1(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int, inter: torch.Tensor,
                        sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_blocks: torch.Tensor,
                        grid_blocks: int, *, n_out: int, activation: int, topk: int, block_n: int = 128,
                        block_t: int = 256, block_k: int = 64, stages: int = 3, dstages: int = 2,
                        num_warps: int = 8, producer_warps: int = 4, producer_regs: int = 152,
                        sx: bool = False, thread_arrive: bool = False, staged_epilogue: bool = False,
                        persistent: bool = False, wstages: int = 0, gated: bool = False,
                        prefetch: bool = False) -> None:
    """One ``_fc1_ws_kernel`` launch (``stages`` token stages, ``wstages`` fp8 weight stages (0: twice as many),
    ``dstages`` bf16 ones: ``ws_shared_bytes``): ``x`` ``[R, H]`` bf16 (row stride a multiple of 8, 16-byte aligned:
    cp.async), ``w`` ``[E, N1, H]`` fp8 contiguous (N1 = ``n_out``, or ``gated``: 2 ``n_out``, Megatron's ``[gate;
    up]`` rows, each tile ``block_n // 2`` gate rows and their up rows), ``scales`` as ``launch_gluon_ws_fc2``'s,
    ``inter`` ``[positions, n_out]`` bf16 rows by sorted position in K order; ``activation`` the Triton kernels'
    code. Needs H a multiple of 16 (TMA rows), ``block_k`` a multiple of 32 and, gated, ``n_out`` a multiple of
    ``block_n // 2``. ``persistent``: ``_fc1_ws_persistent_kernel`` on at most one program per SM in place of one
    program per tile; ``prefetch`` (with it): each tile's last steps issue the next tile's first copies."""
    experts, n1, hidden = w.shape
    out_n = _out_rows(block_n, gated)
    if hidden % 16 or block_k % 32 or n1 != (2 if gated else 1) * n_out or (gated and n_out % out_n):
        raise ValueError(f"launch_gluon_ws_fc1: needs H % 16 == 0, block_k % 32 == 0 and {'2 x ' if gated else ''}"
                         f"n_out FC1 rows{f' with n_out % {out_n} == 0' if gated else ''}; got H {hidden}, block_k "
                         f"{block_k}, FC1 rows {n1}, n_out {n_out}")
    problem = gathered_rows_problem(x, inter.shape[0] * inter.stride(0))
    if problem:
        raise ValueError(f"launch_gluon_ws_fc1: {problem}")
    w_desc = nvmma_descriptor(w.view(experts * n1, hidden), [out_n, block_k])  # gated: one half's box
    kernel, grid, extra = _kernel_grid(_fc1_ws_kernel, _fc1_ws_persistent_kernel, triton.cdiv(n_out, out_n),
                                       grid_blocks, x.device, staged_epilogue, persistent, prefetch)
    kernel[grid](
        w_desc, x, scales, inter, sorted_pairs, block_expert, num_blocks, n_out, n1, hidden, x.stride(0),
        scales.stride(0), scale_tiles, inter.stride(0), TOPK=topk, ACTIVATION=activation, BLOCK_N=block_n,
        BLOCK_T=block_t, BLOCK_K=block_k, STAGES=stages, WSTAGES=wstages or 2 * stages, DSTAGES=dstages,
        PRODUCER_WARPS=producer_warps, PRODUCER_REGS=producer_regs, SX=sx,
        STEPS_P2=triton.next_power_of_2(triton.cdiv(hidden, 128)), THREAD_ARRIVE=thread_arrive, GATED=gated,
        num_warps=num_warps, **extra)


def launch_gluon_ws_fc2(inter: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, scale_tiles: int,
                        slots: torch.Tensor, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                        num_blocks: torch.Tensor, grid_blocks: int, *, block_n: int = 128, block_t: int = 256,
                        block_k: int = 64, stages: int = 3, dstages: int = 2, num_warps: int = 8,
                        producer_warps: int = 4, producer_regs: int = 152, sx: bool = False,
                        thread_arrive: bool = False, staged_epilogue: bool = False,
                        persistent: bool = False, wstages: int = 0, prefetch: bool = False) -> None:
    """One ``_fc2_ws_kernel`` launch (``stages`` token stages, ``wstages`` fp8 weight stages (0: twice as many),
    ``dstages`` bf16 ones) over ``grid_blocks`` token blocks of ``block_t`` positions (blocks past ``num_blocks[0]``
    exit): ``inter`` ``[positions, I]`` bf16 in K order (row stride a multiple of 8), ``w`` ``[E, H, I]`` fp8
    contiguous, ``scales`` ``[E, Mp * Cp]`` uint8 with ``scale_tiles`` = Cp // 4, ``slots`` ``[pairs, H]`` bf16.
    Needs I a multiple of 16 (TMA rows), ``block_k`` a multiple of 32 and H a multiple of ``block_n``.
    ``persistent``: ``_fc2_ws_persistent_kernel`` on at most one program per SM in place of one program per tile;
    ``prefetch`` (with it): each tile's last steps issue the next tile's first copies."""
    experts, hidden, inner = w.shape
    if inner % 16 or block_k % 32 or hidden % block_n:
        raise ValueError(f"launch_gluon_ws_fc2: needs I % 16 == 0, block_k % 32 == 0 and H % block_n == 0; got I "
                         f"{inner}, block_k {block_k}, H {hidden}, block_n {block_n}")
    w_desc = nvmma_descriptor(w.view(experts * hidden, inner), [block_n, block_k])
    a_desc = nvmma_descriptor(inter, [block_t, block_k])
    kernel, grid, extra = _kernel_grid(_fc2_ws_kernel, _fc2_ws_persistent_kernel, triton.cdiv(hidden, block_n),
                                       grid_blocks, inter.device, staged_epilogue, persistent, prefetch)
    kernel[grid](
        w_desc, a_desc, scales, slots, sorted_pairs, block_expert, num_blocks, hidden, inner, scales.stride(0),
        scale_tiles, slots.stride(0), BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=block_k, STAGES=stages,
        WSTAGES=wstages or 2 * stages, DSTAGES=dstages, PRODUCER_WARPS=producer_warps, PRODUCER_REGS=producer_regs,
        SX=sx, STEPS_P2=triton.next_power_of_2(triton.cdiv(inner, 128)), THREAD_ARRIVE=thread_arrive,
        num_warps=num_warps, **extra)
