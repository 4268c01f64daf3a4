"""Kernel launches of one Triton MXFP8 MoE call: route, the split / plane copies of x, FC1 / FC2 (Triton, Gluon,
warp-specialized, GEMV) and the combine, on one stream or two (``_launch``; event waits only, graph-safe)."""

from __future__ import annotations

import torch

from ..errors import MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE
from ..format.swizzle import padded_scale_shape
from ..tensor import MXFP8Tensor
from .triton_config import _ACTIVATION_CODE, TritonMoEConfig
from .triton_route import _pow2_at_least, _route, route_layout


def _ws_forms(cfg: TritonMoEConfig) -> dict:
    """The ws launchers' keyword arguments for ``cfg``'s forms of the warp-specialized FCs (the same for FC1 and FC2)."""
    return dict(sx=cfg.ws_sx, thread_arrive=cfg.ws_thread_arrive, staged_epilogue=cfg.ws_staged_epilogue,
                persistent=cfg.ws_persistent, dstages=cfg.ws_dstages, wstages=cfg.ws_wstages,
                prefetch=cfg.ws_prefetch)


def _scale_args(weight: MXFP8Tensor) -> tuple[torch.Tensor, int, int]:
    """(uint8 swizzled scales ``[E, Mp * Cp]``, bytes per expert, ``Cp // 4``) for the kernels."""
    scale = weight.scale_bytes()
    _, padded_cols = padded_scale_shape(weight.shape[1], weight.shape[2] // BLOCK_SIZE)
    return scale, scale.stride(0), padded_cols // 4


_MAX_GRID_Y = 65535  # CUDA grid axis 1 (the pairs / positions of the direct and routed GEMV launches)


def planes_of(x: torch.Tensor, block_k: int) -> torch.Tensor:
    """``x`` ``[R, K]`` plane-major per ``block_k``-deep K step: ``[R, Kp]`` (``Kp`` = K rounded up to ``block_k``,
    zero past K), column ``c * block_k + i * block_k // 4 + j`` holding ``x[:, c * block_k + 4 * j + i]``. Byte
    plane ``i`` of the "sx4" weight words (the weights ``k = 4j + i``) then meets a contiguous run of tokens. The torch
    twin of ``_planes_into`` (one Triton launch), which the calls use."""
    rows, k = x.shape
    if block_k % 4:
        raise ValueError(f"planes_of: block_k must be a multiple of 4, got {block_k}")
    padded = -(-k // block_k) * block_k
    if padded != k:
        x = torch.nn.functional.pad(x, (0, padded - k))
    return x.reshape(rows, padded // block_k, block_k // 4, 4).transpose(2, 3).reshape(rows, padded)


def kernel_path(cfg: TritonMoEConfig, pairs: int) -> str:
    """Which launch sequence runs ``cfg`` for ``pairs = rows * topk``: "direct" (v4), "gemv" (v6), "routed_gemv"
    (v7) or "routed" (the MMA path). A direct config with more pairs than grid axis 1 holds runs the MMA path with
    its tiles; the routed GEMV has no such fallback (block_t 1) and rejects it."""
    if cfg.direct:
        if pairs > _MAX_GRID_Y:
            return "routed"
        return "gemv" if cfg.gemv else "direct"
    if cfg.gemv:
        if pairs > _MAX_GRID_Y:
            raise MXFP8InputError(
                f"config: the routed GEMV path (gemv without direct) takes at most {_MAX_GRID_Y} (token, expert) "
                f"pairs per call, got {pairs}; use an MMA tile (choose_config picks one)")
        return "routed_gemv"
    return "routed"


def _launch(cfg, x, probs, routing_map, fc1, fc2, activation, local_expert_offset, valid_tokens, rows, out,
            experts, hidden, inner, topk) -> None:
    """The launches of ``triton_mxfp8_moe`` (inputs checked, ``rows`` > 0, ``out`` allocated)."""
    import triton

    from . import _triton_moe_kernel as kernels

    routing_map = routing_map.contiguous()
    device = x.device
    n_out = inner if activation.gated else fc1.data.shape[1]
    s1, s1_stride, s1_tiles = _scale_args(fc1)
    s2, s2_stride, s2_tiles = _scale_args(fc2)
    path = kernel_path(cfg, rows * topk)
    if path in ("direct", "gemv"):
        inter = torch.empty(rows * topk, n_out, dtype=torch.bfloat16, device=device)
        if path == "gemv":
            _launch_gemv(cfg, x, fc1, fc2, s1, s2, (s1_stride, s1_tiles), (s2_stride, s2_tiles), inter, out,
                         routing_map, probs, valid_tokens, rows, topk, experts, activation, local_expert_offset)
            return
        kernels._fc1_direct_kernel[(triton.cdiv(n_out, cfg.fc1_block_n), rows * topk)](
            x, fc1.data, s1, inter, routing_map, probs, valid_tokens,
            rows, n_out, hidden, x.stride(0),
            fc1.data.stride(0), fc1.data.stride(1), s1_stride, s1_tiles, inter.stride(0), probs.stride(0),
            local_expert_offset,
            TOPK=topk, E=experts, GATED=activation.gated, ACTIVATION=_ACTIVATION_CODE[activation],
            BLOCK_N=cfg.fc1_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc1_block_k,
            EVEN_K=hidden % cfg.fc1_block_k == 0, DEQUANT=cfg.dequant_code, FP32_DOT=cfg.fp32_dot,
            **cfg.launch_options(1),
        )
        kernels._fc2_combine_kernel[(triton.cdiv(hidden, cfg.fc2_block_n), rows)](
            inter, fc2.data, s2, out, routing_map, valid_tokens,
            rows, hidden, inner, inter.stride(0),
            fc2.data.stride(0), fc2.data.stride(1), s2_stride, s2_tiles, out.stride(0), local_expert_offset,
            TOPK=topk, E=experts, BLOCK_N=cfg.fc2_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc2_block_k,
            EVEN_K=inner % cfg.fc2_block_k == 0, DEQUANT=cfg.dequant_code, FP32_DOT=cfg.fp32_dot,
            **cfg.launch_options(2),
        )
        return
    tail_t = cfg.tail.block_t if cfg.tail is not None else 0
    max_sorted, max_blocks, sorted_len, tail_block_offset = route_layout(rows, topk, experts, cfg.block_t, tail_t)
    inter_cols = max(triton.cdiv(n_out, t.fc2_block_k) * t.fc2_block_k if t.planes else n_out
                     for t in cfg.launch_tiles)
    split_tiles = any(t.dequant == "f8x2" for t in cfg.launch_tiles)
    split_x = split_tiles or any(t.fc1_f8x2 for t in cfg.launch_tiles)
    if all(t.dequant == "f8x2" and (not t.fc1_gluon or t.fc1_split_out) for t in cfg.launch_tiles):
        inter_cols = 0  # no bf16 rows: FC1 writes FC2's split rows (a Gluon f8x2 FC1 may write bf16 rows, then split)
    # main tile and tail agree on the buffers both read (__post_init__)
    group = 128 if any(t.step_scales for t in cfg.launch_tiles) else BLOCK_SIZE
    scales_t = any(t.split_scales_t for t in cfg.launch_tiles)
    pair_rows = (inter_cols, n_out, split_tiles, scales_t, group)  # what _pair_rows needs besides the positions
    # FC1's output rows by sorted position (expert groups: one set per group, made by _launch_expert_groups)
    inter, inter_split = _pair_rows(sorted_len, *pair_rows, device) if cfg.expert_groups == 1 else (None, None)
    if path == "routed_gemv":
        route = _route(routing_map, valid_tokens, rows, topk, experts, local_expert_offset, cfg.block_t, 0,
                       cfg.route_warps, cfg.route_in_registers, cfg.route_parallel_pairs)
        _launch_routed_gemv(cfg, x, fc1, fc2, s1, s2, (s1_stride, s1_tiles), (s2_stride, s2_tiles), inter, route,
                            max_blocks, out, routing_map, probs, valid_tokens, rows, topk, experts, activation,
                            local_expert_offset)
        return
    split_k = max(1, min(cfg.fc2_split_k, triton.cdiv(inner, cfg.fc2_block_k)))
    if split_k > 1:  # fp32 partial rows per split, added in split order by the combine
        slots = torch.empty(split_k, rows * topk, hidden, dtype=torch.float32, device=device)
    else:
        slots = torch.empty(1, rows * topk, hidden, dtype=torch.bfloat16, device=device)
    weights = (fc1, fc2, s1, s2, (s1_stride, s1_tiles), (s2_stride, s2_tiles))
    dims = (hidden, n_out, inner)
    # one plane-major copy of x per FC1 depth that a launch pair reads (all buffers come from this stream)
    x_planes = {t.fc1_block_k: torch.empty(rows, triton.cdiv(hidden, t.fc1_block_k) * t.fc1_block_k,
                                           dtype=x.dtype, device=device)
                for t in cfg.launch_tiles if t.planes and not t.fc1_f8x2}
    x_split = split_rows_buffers(rows, hidden, device, group=group) if split_x else None
    side = _side_stream(device) if cfg.side_stream and (x_planes or x_split or tail_t) else None
    tails_beside = side is not None and cfg.side_stream == 2 and bool(tail_t)
    main = torch.cuda.current_stream(device) if side is not None else None
    if side is not None:
        side.wait_stream(main)  # fork: x and the buffers are ready
    with torch.cuda.stream(side):  # None: the current stream (a no-op)
        for block_k, planes in x_planes.items():
            _planes_into(x[:rows], planes, block_k)
        if x_split is not None:
            _split_into(x[:rows], *x_split)
    if cfg.expert_groups > 1:
        if side is not None:
            main.wait_stream(side)  # the groups' FC1s read the planes / split rows of x
        _launch_expert_groups(cfg, (x, x_planes, x_split), pair_rows, dims, weights, slots, routing_map, valid_tokens,
                              rows, topk, experts, local_expert_offset, activation, split_k)
        _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset)
        return
    route = _route(routing_map, valid_tokens, rows, topk, experts, local_expert_offset, cfg.block_t, tail_t,
                   cfg.route_warps, cfg.route_in_registers, cfg.route_parallel_pairs)
    if side is not None:
        if tails_beside:
            side.wait_stream(main)  # the tail pair needs the route's tables
        main.wait_stream(side)  # the main pair needs the planes
    x_in = (x, x_planes, x_split)
    _launch_mma(cfg, *_tile_operands(cfg, x_in, inter, inter_split, 0, max_sorted), dims, weights, slots, route,
                max_blocks, activation, topk, split_k)
    if tail_t:  # the tail blocks: narrower tiles over the second table (positions from max_sorted)
        tail = cfg.tail
        with torch.cuda.stream(side if tails_beside else None):
            _launch_mma(tail, *_tile_operands(tail, x_in, inter, inter_split, max_sorted, sorted_len), dims, weights,
                        slots, _tail_table(route, max_sorted, tail_block_offset), min(experts, rows * topk),
                        activation, topk, split_k)
    if tails_beside:
        main.wait_stream(side)  # join before the combine reads every slot row
    _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset)


class _ExpertSlice:
    """Experts ``[first, last)`` of a stack as the launchers read it (``.data``: the fp8 rows ``[last - first, M, K]``)."""

    __slots__ = ("data",)

    def __init__(self, data: torch.Tensor):
        self.data = data


def _pair_rows(sorted_len: int, inter_cols: int, n_out: int, split_tiles: bool, scales_t: bool, group: int,
               device) -> tuple:
    """FC1's output rows for ``sorted_len`` sorted positions: bf16 ``[sorted_len, inter_cols]``, and where a launch tile
    is "f8x2" the split rows of them that its FC2 reads (``split_rows_buffers``), else None."""
    inter = torch.empty(sorted_len, inter_cols, dtype=torch.bfloat16, device=device)
    return inter, split_rows_buffers(sorted_len, n_out, device, scales_t, group) if split_tiles else None


def _tile_operands(tile: TritonMoEConfig, x_in: tuple, inter, inter_split, first: int, last: int) -> tuple:
    """``tile``'s FC1 input (from ``x_in`` = (x, its plane copies by FC1 depth, its split rows)) and its FC1 output
    rows ``[first, last)``: with an "f8x2" FC2 also their split rows."""
    x, x_planes, x_split = x_in
    if tile.dequant == "f8x2":
        return x_split, tuple(buffer[first:last] for buffer in (*inter_split, inter))
    if tile.fc1_f8x2:
        return x_split, inter[first:last]
    return x_planes[tile.fc1_block_k] if tile.planes else x, inter[first:last]


def _tail_table(route: tuple, max_sorted: int, tail_block_offset: int) -> tuple:
    """The tail tile's view of ``route`` = (sorted_pairs, block_expert, num_blocks): its positions from
    ``max_sorted``, its blocks from ``tail_block_offset``, its block count at ``num_blocks[4]``."""
    sorted_pairs, block_expert, num_blocks = route
    return sorted_pairs[max_sorted:], block_expert[tail_block_offset:], num_blocks[4:]


def _launch_expert_groups(cfg, x_in, pair_rows, dims, weights, slots, routing_map, valid_tokens, rows, topk, experts,
                          local_expert_offset, activation, split_k) -> None:
    """``cfg.expert_groups`` routes and launch pairs over contiguous groups of the local experts, group ``g`` on
    stream ``g`` (0: the current one), into the shared ``slots`` (each pair's row is written by its expert's group);
    with a tail tile, each group's tail pair follows its main pair on the group's stream, or with ``side_stream`` 2
    runs beside it on a stream of its own (after the group's route). The current stream waits for every stream before
    returning. ``x_in``: (x, its plane copies, its split rows); ``pair_rows``: ``_pair_rows``' sizes but the
    positions. The groups' FC1 rows come from the current stream (freed after the join); each route's tables from its
    group's stream, which alone uses them."""
    fc1, fc2, s1, s2, s1_args, s2_args = weights
    tail_t = cfg.tail.block_t if cfg.tail is not None else 0
    count = min(cfg.expert_groups, experts)
    bounds = [experts * g // count for g in range(count + 1)]
    groups = []
    for first, last in zip(bounds, bounds[1:]):
        layout = route_layout(rows, topk, last - first, cfg.block_t, tail_t)
        group_weights = (_ExpertSlice(fc1.data[first:last]), _ExpertSlice(fc2.data[first:last]), s1[first:last],
                         s2[first:last], s1_args, s2_args)
        groups.append((first, last - first, layout, _pair_rows(layout[2], *pair_rows, slots.device), group_weights))
    lanes_per_group = 2 if tail_t and cfg.side_stream == 2 else 1  # "side_stream" 2: each tail pair on a lane of its own
    streams = _streams(slots.device, count * lanes_per_group - 1)
    main = torch.cuda.current_stream(slots.device) if streams else None
    lanes = [main, *streams] if streams else [None] * (count * lanes_per_group)  # None: the current stream, in order
    for stream in streams:
        stream.wait_stream(main)  # fork: x, its copies and every group's buffers are ready
    for index, (first, size, layout, (inter, inter_split), group_weights) in enumerate(groups):
        max_sorted, max_blocks, sorted_len, tail_block_offset = layout
        own, beside = lanes[index * lanes_per_group], lanes[index * lanes_per_group + lanes_per_group - 1]
        with torch.cuda.stream(own):
            route = _route(routing_map, valid_tokens, rows, topk, size, local_expert_offset + first, cfg.block_t,
                           tail_t, cfg.route_warps, cfg.route_in_registers, cfg.route_parallel_pairs)
        if beside is not own:
            beside.wait_stream(own)  # the tail pair needs the group's route
        tables = (route, _tail_table(route, max_sorted, tail_block_offset))
        spans = ((0, max_sorted, max_blocks), (max_sorted, sorted_len, min(size, rows * topk)))
        for lane, tile, table, (begin, end, grid) in zip((own, beside), cfg.launch_tiles, tables, spans):
            with torch.cuda.stream(lane):
                _launch_mma(tile, *_tile_operands(tile, x_in, inter, inter_split, begin, end), dims, group_weights,
                            slots, table, grid, activation, topk, split_k)
    for stream in streams:
        main.wait_stream(stream)  # join before the combine reads every slot row


_STREAMS: dict = {}


def _streams(device: torch.device, count: int) -> list:
    """``count`` streams of this process on ``device`` beside the current one (cached per device; the first is the
    side stream of ``TritonMoEConfig.side_stream``, the rest serve ``expert_groups``); [] for a CPU device (the Triton
    interpreter) and where the current stream is one of them (then everything runs in order on that one)."""
    if device.type != "cuda" or count == 0:
        return []
    index = device.index if device.index is not None else torch.cuda.current_device()
    streams = _STREAMS.setdefault(index, [])
    while len(streams) < count:
        streams.append(torch.cuda.Stream(device=index))
    current = torch.cuda.current_stream(index)
    return [] if any(stream == current for stream in streams[:count]) else streams[:count]


def _side_stream(device: torch.device):
    """This process's second stream on ``device`` (``TritonMoEConfig.side_stream``; ``_streams``' first), or None
    where ``_streams`` gives none."""
    streams = _streams(device, 1)
    return streams[0] if streams else None


def _planes_into(x: torch.Tensor, planes: torch.Tensor, block_k: int) -> None:
    """``planes[:] = planes_of(x, block_k)`` in one launch (``_planes_kernel``); ``planes`` ``[R, Kp]``."""
    import triton

    from . import _triton_moe_kernel as kernels

    rows, k = x.shape
    kernels._planes_kernel[(triton.cdiv(rows, 8), planes.shape[1] // block_k)](
        x, planes, rows, k, x.stride(0), planes.stride(0), PLANE_K=block_k, BLOCK_R=8, num_warps=4,
    )


def split_rows_buffers(rows: int, k: int, device, scales_t: bool = False,
                       group: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty split rows of ``[rows, k]`` activations ("f8x2", ``_triton_f8x2_kernel.py``): e4m3 ``[rows, 2 * KP]``
    (``KP`` = k rounded up to 128; 32-column block ``b``'s hi values in columns ``[64 b, 64 b + 32)``, its lo values
    in the next 32) and fp32 scales ``[rows, KP // group]`` (one power of two per row and ``group`` values: 32, or
    128 for ``TritonMoEConfig.step_scales``; with ``scales_t`` a transposed view of ``[KP // group, rows]``: strides
    ``(1, rows)``, ``TritonMoEConfig.split_scales_t``)."""
    kp = -(-k // 128) * 128
    q = torch.empty(rows, 2 * kp, dtype=DATA_DTYPE, device=device)
    if scales_t:
        return q, torch.empty(kp // group, rows, dtype=torch.float32, device=device).t()
    return q, torch.empty(rows, kp // group, dtype=torch.float32, device=device)


def split_rows_reference(x: torch.Tensor, group: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of ``_split_into`` (CPU tests): ``(q, s)`` as ``split_rows_buffers`` with every column written
    (zeros past k); ``x = s * (hi + lo)`` per 32-column block, ``s`` the power of two that puts the largest magnitude
    of the block's ``group`` (32 or 128) columns in ``[128, 256)``."""
    rows, k = x.shape
    kp = -(-k // 128) * 128
    v = torch.nn.functional.pad(x.float(), (0, kp - k)).reshape(rows, kp // group, group)
    amax = v.abs().amax(dim=2)
    e = ((amax.view(torch.int32) >> 23) & 0xFF).clamp(min=8)
    s = ((e - 7) << 23).view(torch.float32)
    y = v * ((261 - e) << 23).view(torch.float32)[:, :, None]
    hi = y.to(DATA_DTYPE)
    lo = (y - hi.float()).to(DATA_DTYPE).float()
    lo = torch.where(lo == 0, 0.0, lo).to(DATA_DTYPE)  # +0 where a tiny negative residual rounds to -0, as the kernel
    blocks = (rows, kp // BLOCK_SIZE, BLOCK_SIZE)  # the terms per 32-column block, whatever the scales' group
    return torch.cat([hi.reshape(blocks), lo.reshape(blocks)], dim=2).reshape(rows, 2 * kp), s


def _split_into(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, block_r: int = 8, block_k: int = 128,
                num_warps: int = 4) -> None:
    """``(q, s) = split_rows_reference(x, group)`` in one launch (``_split_rows_kernel``; ``group`` from ``s``'s
    columns; ``block_r`` rows and ``block_k`` columns per program, the same bits for any)."""
    import triton

    from . import _triton_f8x2_kernel as kernels

    rows, k = x.shape
    kernels._split_rows_kernel[(triton.cdiv(rows, block_r), q.shape[1] // (2 * block_k))](
        x, q, s, rows, k, x.stride(0), q.stride(0), s.stride(0), s.stride(1), BLOCK_R=block_r, BLOCK_K=block_k,
        GROUP=q.shape[1] // 2 // s.shape[1], num_warps=num_warps,
    )


def _launch_f8x2(cfg, x_split, dims, weights, inter_split, slots, route, grid_blocks, activation, topk) -> None:
    """``_launch_mma`` for an "f8x2" tile: ``x_split`` = (e4m3 rows, fp32 scales) of x (``split_rows_buffers``),
    ``inter_split`` = the same of FC1's output rows and its bf16 rows (which a Gluon FC1 without ``fc1_split_out``
    writes, then splits)."""
    import triton

    from . import _triton_f8x2_kernel as kernels

    fc1, fc2, s1, s2, (s1_stride, s1_tiles), (s2_stride, s2_tiles) = weights
    hidden, n_out, inner = dims
    (q1, qs1), (q2, qs2, inter) = x_split, inter_split
    if cfg.fc1_gluon:  # FC2's split rows, or bf16 rows split by one more launch
        _launch_gluon_f8x2_fc1(cfg, x_split, fc1.data, s1, s1_tiles, inter, route, grid_blocks, activation, topk,
                               split_out=(q2, qs2) if cfg.fc1_split_out else ())
        if not cfg.fc1_split_out:
            _split_into(inter[:, :n_out], q2, qs2)
    else:
        kernels._f8x2_fc1_kernel[(triton.cdiv(n_out, cfg.fc1_block_n), grid_blocks)](
            q1, qs1, fc1.data, s1, q2, qs2, *route,
            n_out, hidden, q1.stride(0), qs1.stride(0),
            fc1.data.stride(0), fc1.data.stride(1), s1_stride, s1_tiles, q2.stride(0), qs2.stride(0),
            TOPK=topk, GATED=activation.gated, ACTIVATION=_ACTIVATION_CODE[activation],
            BLOCK_N=cfg.fc1_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc1_block_k,
            EVEN_K=hidden % cfg.fc1_block_k == 0, **cfg.launch_options(1),
        )
    if cfg.fc2_gluon:  # checked by _gluon_problem before any launch
        from ._gluon_f8x2_fc2_kernel import launch_gluon_f8x2_fc2

        launch_gluon_f8x2_fc2(q2, qs2, fc2.data, s2, s2_tiles, slots[0], *route, grid_blocks,
                              block_n=cfg.fc2_block_n, block_t=cfg.block_t, stages=cfg.fc2_stages,
                              num_warps=cfg.fc2_warps, step_scale=cfg.step_scales)
        return
    kernels._f8x2_fc2_kernel[(triton.cdiv(hidden, cfg.fc2_block_n), grid_blocks)](
        q2, qs2, fc2.data, s2, slots, *route,
        hidden, inner, q2.stride(0), qs2.stride(0),
        fc2.data.stride(0), fc2.data.stride(1), s2_stride, s2_tiles, slots.stride(1),
        BLOCK_N=cfg.fc2_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc2_block_k,
        EVEN_K=inner % cfg.fc2_block_k == 0, **cfg.launch_options(2),
    )


def _launch_gluon_f8x2_fc1(cfg, x_split, w, s1, s1_tiles, inter, route, grid_blocks, activation, topk,
                           split_out=()) -> None:
    """The Gluon f8x2 FC1 of ``cfg`` (an "f8x2" tile with ``fc1_gluon``, or a plane tile with ``fc1_f8x2``: then its
    bf16 rows are written plane-major per ``cfg.fc2_block_k`` for the tile's FC2) on ``x_split`` into ``inter``, or
    into ``split_out`` = FC2's split rows (``fc1_split_out``)."""
    from ._gluon_f8x2_fc1_kernel import launch_gluon_f8x2_fc1

    launch_gluon_f8x2_fc1(*x_split, w, s1, s1_tiles, inter, *route, grid_blocks,
                          activation=_ACTIVATION_CODE[activation], topk=topk, block_n=cfg.fc1_block_n,
                          block_t=cfg.block_t, stages=cfg.fc1_stages, num_warps=cfg.fc1_warps,
                          plane_k2=cfg.fc2_block_k if cfg.fc1_f8x2 else 0, gated=activation.gated,
                          split_out=split_out, step_scale=cfg.step_scales)


def _launch_mma(cfg, x, inter, dims, weights, slots, route, grid_blocks, activation, topk, split_k) -> None:
    """FC1 (+ activation) into ``inter`` rows by sorted position and FC2 into the pairs' ``slots`` rows, MMA tiles
    of ``cfg`` over the blocks of ``route`` = (sorted_pairs, block_expert, num_blocks) (``grid_blocks`` programs
    per n tile: the table's capacity; blocks past ``num_blocks[0]`` exit at once). ``dims`` = (hidden, n_out,
    inner); with ``cfg.planes`` ``x`` is ``planes_of(x, cfg.fc1_block_k)`` (with ``cfg.fc1_f8x2`` the split of x,
    ``split_rows_buffers``) and FC1 writes ``inter``'s rows plane-major for FC2 (``inter`` then has ``n_out`` rounded
    up to ``cfg.fc2_block_k`` columns)."""
    import triton

    from . import _triton_moe_kernel as kernels

    if cfg.dequant == "f8x2":
        _launch_f8x2(cfg, x, dims, weights, inter, slots, route, grid_blocks, activation, topk)
        return
    fc1, fc2, s1, s2, (s1_stride, s1_tiles), (s2_stride, s2_tiles) = weights
    hidden, n_out, inner = dims
    if cfg.fc1_ws:  # checked by _gluon_problem (and x's alignment by _launch) before any launch
        from ._gluon_ws_kernel import launch_gluon_ws_fc1

        launch_gluon_ws_fc1(x, fc1.data, s1, s1_tiles, inter, *route, grid_blocks, n_out=n_out,
                            activation=_ACTIVATION_CODE[activation], topk=topk,
                            block_n=cfg.fc1_block_n * (2 if activation.gated else 1), block_t=cfg.block_t,
                            block_k=cfg.fc1_block_k, stages=cfg.fc1_stages, num_warps=cfg.fc1_warps,
                            gated=activation.gated, **_ws_forms(cfg))
    elif cfg.fc1_f8x2:  # checked by _gluon_problem before any launch; x is the split (e4m3, scales) of x
        _launch_gluon_f8x2_fc1(cfg, x, fc1.data, s1, s1_tiles, inter, route, grid_blocks, activation, topk)
    elif cfg.fc1_gluon:  # checked by _gluon_problem before any launch
        from ._gluon_fc1_kernel import launch_gluon_fc1

        launch_gluon_fc1(x, fc1.data, s1, s1_tiles, inter, *route, grid_blocks, n_out=n_out, gated=activation.gated,
                         activation=_ACTIVATION_CODE[activation], topk=topk, block_n=cfg.fc1_block_n,
                         block_t=cfg.block_t, stages=cfg.fc1_stages, num_warps=cfg.fc1_warps,
                         plane_k2=cfg.fc2_block_k, overlap=cfg.fc1_overlap, scale_words=cfg.scale_words,
                         one_factor=cfg.fc1_one_factor, maxnreg=cfg.fc1_maxnreg, launch_dependents=cfg.fc2_pdl)
    else:
        kernels._fc1_kernel[(triton.cdiv(n_out, cfg.fc1_block_n), grid_blocks)](
            x, fc1.data, s1, inter, *route,
            n_out, hidden, x.stride(0),
            fc1.data.stride(0), fc1.data.stride(1), s1_stride, s1_tiles, inter.stride(0),
            TOPK=topk, GATED=activation.gated, ACTIVATION=_ACTIVATION_CODE[activation],
            BLOCK_N=cfg.fc1_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc1_block_k,
            EVEN_K=hidden % cfg.fc1_block_k == 0, DEQUANT=cfg.dequant_code, FP32_DOT=cfg.dot_mode,
            GATE_MERGE=cfg.fc1_gate_merge, X_PLANES=cfg.planes, PLANE_K2=cfg.fc2_block_k if cfg.planes else 0,
            LAUNCH_DEPENDENTS=cfg.fc2_pdl, **cfg.launch_options(1),
        )
    if cfg.fc2_ws:  # checked by _gluon_problem before any launch; one split: slots[0] is [pairs, H]
        from ._gluon_ws_kernel import launch_gluon_ws_fc2

        launch_gluon_ws_fc2(inter, fc2.data, s2, s2_tiles, slots[0], *route, grid_blocks, block_n=cfg.fc2_block_n,
                            block_t=cfg.block_t, block_k=cfg.fc2_block_k, stages=cfg.fc2_stages,
                            num_warps=cfg.fc2_warps, **_ws_forms(cfg))
        return
    if cfg.fc2_gluon:  # checked by _gluon_problem before any launch; one split: slots[0] is [pairs, H]
        from ._gluon_fc2_kernel import launch_gluon_fc2

        launch_gluon_fc2(inter, fc2.data, s2, s2_tiles, slots[0], *route, grid_blocks, block_n=cfg.fc2_block_n,
                         block_t=cfg.block_t, stages=cfg.fc2_stages, num_warps=cfg.fc2_warps,
                         chains=cfg.fc2_chains, overlap=cfg.fc2_overlap, scale_words=cfg.scale_words,
                         ring=cfg.fc2_ring, one_factor=cfg.fc2_one_factor, pdl=cfg.fc2_pdl)
        return
    kernels._fc2_kernel[(triton.cdiv(hidden, cfg.fc2_block_n), grid_blocks, split_k)](
        inter, fc2.data, s2, slots, *route,
        hidden, inner, inter.stride(0),
        fc2.data.stride(0), fc2.data.stride(1), s2_stride, s2_tiles,
        slots.stride(1), slots.stride(0),
        BLOCK_N=cfg.fc2_block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.fc2_block_k,
        EVEN_K=inner % cfg.fc2_block_k == 0, DEQUANT=cfg.dequant_code, FP32_DOT=cfg.dot_mode, SPLIT_K=split_k,
        X_PLANES=cfg.planes, **cfg.launch_options(2),
    )


def _launch_gemv(cfg, x, fc1, fc2, s1, s2, s1_args, s2_args, inter, out, routing_map, probs, valid_tokens, rows,
                 topk, experts, activation, local_expert_offset) -> None:
    """The three launches of the GEMV small-T path (``cfg.gemv``): FC1 per (n tile, pair) into ``inter``
    (``[rows * topk, n_out]`` bf16), FC2 per (n tile, pair) into bf16 slot rows, and the combine kernel."""
    import triton

    from . import _triton_moe_kernel as kernels

    hidden, n_out, inner = x.shape[1], inter.shape[1], fc2.data.shape[2]
    kernels._fc1_gemv_kernel[(triton.cdiv(n_out, cfg.fc1_block_n), rows * topk)](
        x, fc1.data, s1, inter, routing_map, valid_tokens,
        rows, n_out, hidden, x.stride(0),
        fc1.data.stride(0), fc1.data.stride(1), *s1_args, inter.stride(0), local_expert_offset,
        TOPK=topk, E=experts, GATED=activation.gated, ACTIVATION=_ACTIVATION_CODE[activation],
        BLOCK_N=cfg.fc1_block_n, BLOCK_K=cfg.fc1_block_k, EVEN_K=hidden % cfg.fc1_block_k == 0,
        STAGES=cfg.fc1_stages, **cfg.launch_options(1),
    )
    slots = torch.empty(1, rows * topk, hidden, dtype=torch.bfloat16, device=x.device)
    kernels._fc2_gemv_kernel[(triton.cdiv(hidden, cfg.fc2_block_n), rows * topk)](
        inter, fc2.data, s2, slots, routing_map, valid_tokens, rows, hidden, inner, inter.stride(0),
        fc2.data.stride(0), fc2.data.stride(1), *s2_args, slots.stride(1), local_expert_offset,
        TOPK=topk, E=experts, BLOCK_N=cfg.fc2_block_n, BLOCK_K=cfg.fc2_block_k, EVEN_K=inner % cfg.fc2_block_k == 0,
        STAGES=cfg.fc2_stages, **cfg.launch_options(2),
    )
    _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset)


def _launch_routed_gemv(cfg, x, fc1, fc2, s1, s2, s1_args, s2_args, inter, route, max_blocks, out, routing_map,
                        probs, valid_tokens, rows, topk, experts, activation, local_expert_offset) -> None:
    """FC1, FC2 and combine of the routed GEMV path (``cfg.gemv`` without ``cfg.direct``), after the route kernel
    (block_t 1): ``route`` = (sorted_pairs, block_expert, num_blocks); ``inter`` ``[max_sorted, n_out]`` bf16 by
    sorted position; one program per (n tile, position)."""
    import triton

    from . import _triton_moe_kernel as kernels

    hidden, n_out, inner = x.shape[1], inter.shape[1], fc2.data.shape[2]
    kernels._fc1_routed_gemv_kernel[(triton.cdiv(n_out, cfg.fc1_block_n), max_blocks)](
        x, fc1.data, s1, inter, *route, n_out, hidden, x.stride(0),
        fc1.data.stride(0), fc1.data.stride(1), *s1_args, inter.stride(0),
        TOPK=topk, GATED=activation.gated, ACTIVATION=_ACTIVATION_CODE[activation],
        BLOCK_N=cfg.fc1_block_n, BLOCK_K=cfg.fc1_block_k, EVEN_K=hidden % cfg.fc1_block_k == 0,
        STAGES=cfg.fc1_stages, **cfg.launch_options(1),
    )
    slots = torch.empty(1, rows * topk, hidden, dtype=torch.bfloat16, device=x.device)
    kernels._fc2_routed_gemv_kernel[(triton.cdiv(hidden, cfg.fc2_block_n), max_blocks)](
        inter, fc2.data, s2, slots, *route, hidden, inner, inter.stride(0),
        fc2.data.stride(0), fc2.data.stride(1), *s2_args, slots.stride(1),
        BLOCK_N=cfg.fc2_block_n, BLOCK_K=cfg.fc2_block_k, EVEN_K=inner % cfg.fc2_block_k == 0,
        STAGES=cfg.fc2_stages, **cfg.launch_options(2),
    )
    _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset)


def _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset) -> None:
    """``out[:rows]`` = the probability-weighted sum of each token's slot rows (``slots``: ``[splits, rows * topk,
    H]``, split-K partials added in order), zeros past ``valid_tokens``: ``_combine_kernel``."""
    import triton

    from . import _triton_moe_kernel as kernels

    splits, _, hidden = slots.shape
    block_h = min(2048, _pow2_at_least(hidden))
    kernels._combine_kernel[(rows, triton.cdiv(hidden, block_h))](
        slots, probs, routing_map, valid_tokens, out,
        hidden, slots.stride(1), slots.stride(0), probs.stride(0), out.stride(0), local_expert_offset,
        TOPK=routing_map.shape[1], E=experts, BLOCK_H=block_h, SPLITS=splits, num_warps=4,
    )
