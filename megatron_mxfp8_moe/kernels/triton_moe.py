"""Hopper (SM90) weight-only MXFP8 fused MoE in Triton: host side (tables, grid, strides, tile choice).

x [T, H] bf16 --route (on device)--> FC1 (gather rows, dequant fp8 weights in registers, activation)
  --> inter [padded positions, I] bf16 --> FC2 --> per-(token, k) rows --> combine (probs, fixed order) --> out

Weights: the canonical ``MXFP8Tensor`` stacks themselves (fp8 e4m3 ``[E, M, K]`` and the cuBLAS 128x4-swizzled
E8M0 bytes ``[E, Mp * Cp]``, read in place: no repacked copy, no write hook, so a refit writes straight into what
the kernel reads), bf16 activations, fp32 accumulation. No host
synchronization and no data-dependent shapes: the call captures in a CUDA graph and replays correctly with
new routing and a new ``valid_tokens``. The token count ``rows`` picks the tile configuration on the host,
which is fixed per graph. Every output element is one MMA column (on the GEMV small-T path: fp32 block sums in a
fixed order) plus a top-k sum in fixed order, and the route places each expert's pairs in pair order (no
atomics), so the same inputs give the same bits, with tail tiles (``TritonMoEConfig.tail``) too: which of an
expert's pairs run on the narrower tail tile (its last ones) is fixed by the routing. Independent launches may run
on a second stream (``TritonMoEConfig.side_stream``): event waits only, same launches, same bits.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Optional

import torch

from ..activations import Activation, parse_activation
from ..errors import BackendUnavailableError, MXFP8InputError
from ..format.constants import BLOCK_SIZE, DATA_DTYPE
from ..format.swizzle import padded_scale_shape
from ..quant.triton import on_device
from ..tensor import MXFP8Tensor

logger = logging.getLogger(__name__)

# Hopper only: the kernel relies on SM90's bf16 conversions (cvt.bf16.f16) and was tuned on an H200.
_SUPPORTED_MAJOR = 9
_MIN_TRITON = (3, 4)

_ACTIVATION_CODE = {  # keep in sync with ACT_* in _triton_moe_kernel.py
    Activation.SWIGLU: 0,
    Activation.GEGLU: 1,
    Activation.SQUARED_RELU: 2,
    Activation.RELU: 3,
    Activation.SILU: 4,
}

# keep in sync with DQ_* (kernel). "sx_auto" (MMA path only): per tile, shift = max(0, largest scale byte of its rows
# - 134), one bf16 factor 2 ** (s - 7 - shift) per weight pair, accumulators times 2 ** shift (``_fc1_tile``).
# "sx4" (MMA path only, session 12): weights read as uint32 words (16-byte copies), 4 byte-plane MMAs per K step
# (``_mma_sx4``); "sx4_int" the same in plain integer ops (Triton interpreter).
# "f8x2" (MMA path only, session 24): no weight dequant at all; fp8 x fp8 wgmmas on an exact two-term e4m3 split of the
# activations (``_triton_f8x2_kernel.py``; not bit-equal to the other modes).
_DEQUANT_CODE = {"cvt": 0, "fp32": 1, "bits": 2, "bits_int": 3, "sx": 5, "sx_auto": 7, "sx4": 8, "sx4_int": 9,
                 "f8x2": 10}
_WORD_MODES = ("sx4", "sx4_int")
_WORD_DEQUANT = tuple(_DEQUANT_CODE[mode] for mode in _WORD_MODES)


@dataclasses.dataclass(frozen=True)
class TritonMoEConfig:
    """Tile configuration of one call; chosen on the host from the row count (fixed per CUDA graph)."""

    block_t: int  # token columns per tile (MMA N side); also the per-expert padding unit
    fc1_block_n: int  # fc1 weight rows per tile (per half for gated activations)
    fc1_block_k: int
    fc1_warps: int
    fc1_stages: int
    fc2_block_n: int
    fc2_block_k: int
    fc2_warps: int
    fc2_stages: int
    dequant_fp32: bool = False  # scale multiply in fp32 instead of bf16 (both exact); overrides ``dequant``
    fp32_dot: bool = False  # fp32 MMA operands: only for the Triton interpreter (CPU tests), slow on a GPU
    # "cvt" (v1/v2: cvt chains), "bits" (v3: bit-moving fp8 -> bf16 in inline PTX, GPU only), "bits_int" (the
    # same bit trick in plain Triton integer ops with an fp32 scale: runs under the interpreter), "sx" (v4:
    # sign-extending prmt, 3 integer ops per 2 weights; the default where it was faster), "sx_auto" (v8: "sx" bits
    # times one factor per weight pair after a per-tile scale scan; bit-identical to "cvt" while the tile's scales
    # are <= 2 ** 7; MMA path only).
    dequant: str = "cvt"
    fc2_split_k: int = 1  # > 1: FC2 splits K (= I) over programs, fp32 partials summed in the combine
    # v4 small-T path (meant for a handful of tokens): no route kernel (FC1 program per (n tile, (token, k) pair),
    # expert read from the routing map) and FC2 fused with the combine (program per (n tile, token), one pipelined
    # loop over its top-k experts in fixed order, out written directly). Two launches instead of four. Each pair
    # streams its expert's weights on its own, so it only pays off while pairs rarely share an expert.
    direct: bool = False
    # v6, with ``direct``: matrix-vector products on CUDA cores (fp32 block sums, no MMA; block_t unused): FC1 per
    # (n tile, pair), FC2 per (n tile, pair) into slot rows, then the combine kernel. fc1/fc2 block_n x block_k are
    # the weight tiles one program reads per K step, fc1/fc2 stages the K loops' pipelining depth (1: none).
    # v7, without ``direct`` ("routed GEMV", block_t 1): the route kernel sorts the pairs by expert; FC1 and FC2
    # run the GEMV per (n tile, sorted position), then the combine kernel.
    gemv: bool = False
    # ptxas register cap per thread for the FC1 / FC2 kernels (None: Triton's choice). Run 7, compile-only: the
    # default 16-token tiles take 216 (FC1) and 157 (FC2, 8 warps: one CTA per SM) registers; a cap trades
    # a few spilled bytes for more CTAs per SM ("s16k_sx_r": FC2 at 128, timed faster in session 5).
    fc1_maxnreg: Optional[int] = None
    fc2_maxnreg: Optional[int] = None
    # Tail tiles (MMA path, session 8): an expert whose pairs leave 1..tail.block_t past its last full block_t block
    # puts them in one tail block that this narrower MMA configuration processes (two more launches); a larger
    # remainder takes one more block_t block. With uniform routing at 256 pairs per expert about half the experts
    # would otherwise run a 128-token tile for a few pairs.
    tail: Optional["TritonMoEConfig"] = None
    # Gated FC1 on the MMA path (session 10): gate and up rows in ONE [2 * fc1_block_n, block_t] MMA tile, 8 gate rows
    # then their 8 up rows, split in registers after the K loop (``_fc1_tile``), instead of two tiles.
    fc1_gate_merge: bool = False
    # Warps of the one-program route (up to 1024 pairs; None: 4, 8 from 512 pairs). A probe knob (session 12): the
    # route took 9.4 us of a 232 us layer at 64 tokens (30b), serial work in one CTA. Run 16 profile at 512 pairs
    # (30b, 64 tokens): 14.5 / 9.3 / 8.4 / 8.7 us on 2 / 4 / 8 / 16 warps.
    route_warps: Optional[int] = None
    # Session 30 (run 34: the same tables, no layer gain; a probe knob): the one-program route with its counts and
    # position tables in registers (``_route_in_registers_kernel``: the histogram feeds the plan, sorted pairs take
    # their expert's entries by ``tl.gather``), without the stores and loads through scratch behind barriers between
    # its steps. Run 34: the route 8.4 -> 8.1 us at 64 tokens (30b squared ReLU), the layer -1.0% to +0.5% at 16-128
    # tokens (inside the spread).
    route_in_registers: bool = False
    # Session 37: the route of up to ``route_parallel_pairs`` pairs from several programs instead of one
    # (``_route_parallel_kernel``: each plans from the histogram of all pairs in registers and scatters up to 64 pairs,
    # their ranks from a masked second histogram and a [64, 64] compare; no sort, scratch or barrier). The same tables.
    # Run 40 (30b, profile): the route 7.7 -> 3.6 / 8.4 -> 3.8 / 11.1 -> 3.9 us at 16 / 64 / 128 tokens; layer probes
    # 1.5-3.9% faster at 16-128 tokens with both activations, even at 8 (q1). 0: the one-program form up to 1024 pairs
    # (which ``route_warps`` and ``route_in_registers`` tune), the chunked form above; at most 8192.
    route_parallel_pairs: int = 1024
    # "sx4" tiles (session 14): the MMA's token operands arrive plane-major (``planes_of``): the host copies x
    # that way once per call and FC1 writes its output rows that way for FC2, so each K step loads the 4 plane
    # tiles straight into the MMA's shared layout. Without it every K step reloads the K-ordered tile from shared
    # memory, shuffles it into planes in registers and stores the 4 planes back (compile-only, Triton 3.8).
    planes: bool = False
    # Session 16: a second CUDA stream beside the call's own (MMA path, CUDA only; same bits, other order of
    # independent launches). 1: the plane-major copies of x (``planes``) run beside the route; 2: also the tail
    # tile's launch pair beside the main pair (it waits only for the route), so neither pair's last wave leaves
    # SMs idle while the other has work. 0: one stream. Forks and joins are event waits: graph-safe, no host sync.
    side_stream: int = 0
    # Session 18: FC2 as the Gluon kernel (``_gluon_fc2_kernel``: asynchronous wgmma, TMA stages; the same bits as the
    # Triton FC2 at the same 128-deep K steps). For the plane tiles ("sx4", ``planes``, ``fc2_block_k`` 128, no
    # split-K); ``fc2_block_n`` (a multiple of 64 rows), ``fc2_stages`` and ``fc2_warps`` (4 or 8) are its tile.
    # Shapes need I % 128 == 0 and H % fc2_block_n == 0; ``fc2_maxnreg`` is ignored.
    fc2_gluon: bool = False
    # Session 19: FC1 (+ activation) as the Gluon kernel (``_gluon_fc1_kernel``: asynchronous wgmma, weight words by
    # TMA, gathered token planes by cp.async; the same bits as the Triton FC1 at the same 128-deep K steps with
    # separate gate / up tiles). For the plane tiles ("sx4", ``planes``, ``fc1_block_k`` 128, ``fc1_gate_merge``
    # off); ``fc1_block_n`` (a multiple of 16 * ``fc1_warps``), ``fc1_stages`` and ``fc1_warps`` (4 or 8) are its
    # tile. Shapes need H % 128 == 0 and n_out % fc1_block_n == 0. ``fc1_maxnreg`` (session 29; no default Gluon tile
    # sets it) caps its registers too.
    fc1_gluon: bool = False
    # Session 21: retire each ``tl.dot``'s wgmmas before the next dequant (an identity use of the accumulator after
    # the dot, MMA path only). Triton's pipelining otherwise leaves register-A wgmmas in flight while later code
    # writes their registers in some tiles (bench/sass_hazard_scan.py; Triton 3.6: the gate-merged 128- / 256-token
    # FC1, the 32-token tails at 4096 tokens). The same MMAs in the same order, so the same bits; not timed yet.
    sync_dots: bool = False
    # Session 26: the Gluon FC2's accumulator chains per program (``fc2_gluon`` only): 2 puts each K step's byte
    # planes 0-1 and 2-3 on two accumulators, summed after the K loop, so the wgmmas of one warpgroup form two
    # dependent chains the tensor cores overlap (a lone warpgroup is bound by its chain's latency: bench/NOTES,
    # session 26). Another summation order than the Triton FC2: not its bits (the float64 oracle still holds).
    fc2_chains: int = 1
    # Session 27: False runs the Gluon FC1 / FC2 without the step overlap, each K step's MMAs waited for before the
    # next step's dequant (one register set of planes: fewer registers, more programs per SM; the same values and
    # order, so the same bits). ``fc1_gluon`` / ``fc2_gluon`` only. Session 28: the "_nov" / "_f1q" defaults.
    fc1_overlap: bool = True
    fc2_overlap: bool = True
    # Session 28 (on the defaults since session 29, run 32): the Gluon FC1 / FC2 read each row's 4 E8M0 bytes of a K
    # step as one int32 (per thread 2 loads per step instead of 8 byte loads and their address arithmetic) and build the
    # two bf16x2 factors from it (``_e8m0_word_factors``); the same factors, so the same bits. SASS instructions in the
    # K loop (Triton 3.6, CPU compile): FC2 64 x 32 two chains without overlap 812 -> 785, 64 x 16 two chains 764 ->
    # 740, 128 x 64 1306 -> 1232; FC1 gated 64 x 32 without overlap 1301 -> 1174, squared ReLU 128 x 32 ("_f1q") 1300 ->
    # 1151. Needs a Gluon FC and 4-byte aligned scales.
    scale_words: bool = False
    # Session 28 (no layer gain in run 32: opt-in): the Gluon FC2 without the overlap runs one loop iteration per turn
    # of its stage ring, so every stage index, shared-memory address and wgmma descriptor is a constant; the same steps
    # in the same order, so the same bits. K-loop SASS per step (Triton 3.6): 64 x 32 two chains 406 -> 355, 128 x 32
    # 654 -> 619. Needs fc2_overlap=False and I a multiple of 128 * fc2_stages (checked per call).
    fc2_ring: bool = False
    # Session 29 (no layer gain in run 33: opt-in): with ``scale_words``, a Gluon FC1 / FC2 program whose E8M0 bytes are
    # all below 128 (scales at most 1: weights with |w| <= 448; trained weights are far smaller) multiplies its planes
    # by one factor instead of two (``_gluon_fc2_kernel._sx4_planes``; a branch uniform over the program, decided once
    # from all its scale words before the K loop); the others by both. The second factor is then exactly 1: the same
    # values, so the same bits. Instructions one K-loop iteration runs (``sass_hazards.k_loop_paths``, Triton 3.6): FC2
    # 64 x 32 two chains 785 -> 678 (the two-factor path 788), 128 x 32 1235 -> 1015; FC1 gated 64 x 32 1174 -> 975,
    # squared ReLU 128 x 32 1151 -> 931. Registers: FC2 unchanged or fewer; the 32-token FC1s 128 -> 141 (gated) / 159
    # (squared ReLU), so fewer programs per SM.
    fc1_one_factor: bool = False
    fc2_one_factor: bool = False
    # Session 30 (run 33: the same bits, no layer gain; opt-in): the Gluon FC2 as a programmatic dependent launch (PDL)
    # of the FC1 before it. The FC1's programs let it start at once (``griddepcontrol.launch_dependents``), so FC2
    # programs take the SMs that the FC1's last wave frees, issue their first stages' weight copies and load their
    # scales, and wait for the FC1's end (``griddepcontrol.wait``: its writes visible) before copying its output. The
    # same arithmetic, so the same bits.
    fc2_pdl: bool = False
    # Session 32: FC1 as the Gluon f8x2 FC1 (``_gluon_f8x2_fc1_kernel``: fp8 wgmmas on the TMA-copied weights against x
    # split in two e4m3 terms, each 32-deep block's sum scaled, so no dequant on the consumer's chain) on a plane tile,
    # writing its bf16 rows plane-major for the tile's own FC2. Needs ``fc1_gluon`` (its ``fc1_block_n`` /
    # ``fc1_stages`` are the tile: gated, ``fc1_block_n`` gate rows and their up rows per program) on 4 warps. Other
    # arithmetic than the dequantizing FC1 (x in two e4m3 terms per 32-block scale), so not its bits: held to the
    # float64 oracle.
    fc1_f8x2: bool = False
    # Session 32 (run 36: bit-equal to the split launch, no layer gain; opt-in): an "f8x2" tile's Gluon FC1 writes
    # FC2's split rows itself (``_f8x2_fc1_split_gluon_kernel``: the activated rows rounded to bf16, split per 32-column
    # block in registers) instead of bf16 rows that one more launch splits (6.8 us at 64 tokens, 30b, run 35). Needs
    # dequant "f8x2" and ``fc1_gluon``.
    fc1_split_out: bool = False
    # Session 35: an "f8x2" tile's FC2 input (FC1's split rows by position) with its fp32 block scales stored
    # transposed, ``[KP // 32, rows]`` (``split_rows_buffers``): a K step's 16 token columns of one block are then 64
    # adjacent bytes, where row-major rows put them in 16 sectors. The same values, so the same bits. Run 38: the f8x2
    # FC2 117.6 -> 111.6 us (30b, 64 tokens; 235b 411.6 -> 391.7). x's split stays row-major: transposed, the f8x2
    # FC1 (tokens gathered, 4 loads of scattered columns a step instead of one row's 16 bytes) went 101.6 -> 107.6 us
    # (235b 382.0 -> 409.6). Needs the Gluon f8x2 FC1 and FC2 (the Triton f8x2 kernels read rows).
    split_scales_t: bool = False
    # Session 35 (prepared, compile-checked only): one token scale per 128-value K step in the split rows this tile
    # reads (x's for the f8x2 FC1, FC1's output for an "f8x2" tile's FC2; ``split_rows_buffers(..., group=128)``)
    # instead of one per 32-value block. The Gluon f8x2 kernels then sum a step's 4 blocks with the weight factors
    # alone and apply the token scale once (per accumulator element 5 operations a step instead of 8; 1 token-scale
    # load instead of 4). Other split values, so other bits: held to the float64 oracle (bench/fp8_split_numerics.py:
    # the split's own error about 2x the 32-block one, 7.5e-6 with 100x outlier channels). Needs the Gluon f8x2
    # kernels on every split buffer the tile reads, and not ``fc1_split_out`` (its split writer makes 32-blocks).
    step_scales: bool = False
    # Session 39 (run on a GPU in session 40, run 43): FC2 as a warp-specialized mixed-input GEMM
    # (``_gluon_ws_kernel``): a producer warpgroup copies each K step's fp8 weights and K-ordered inter rows by TMA
    # and dequantizes the weights into shared memory; two consumer warpgroups run asynchronous wgmmas with both
    # operands there, one step in flight. Run 42 (one H100): the Triton FC2 of the 256-token tiles is bound by each
    # warpgroup's per-step chain (dequant, wgmma, wait), about a third of the tensor cores' rate. For the Triton tiles
    # that read tokens in K order (no "sx4" words, planes, Gluon or f8x2 kernels): ``fc2_block_n`` 128 on
    # ``fc2_warps`` 8, ``fc2_block_k`` 32 or 64, ``fc2_stages`` >= 2, ``block_t`` a multiple of 16 up to 256, no
    # split-K; the FC1 and the tail are unchanged. The products and their order per output element are the Triton
    # FC2's at the same K step, but bits are not claimed: held to the float64 oracle.
    fc2_ws: bool = False
    # Session 39 (run in session 40; both on the squared-ReLU default from 176 pairs per expert, "_wsb_s4"): FC1 the
    # same way (``_gluon_ws_kernel._fc1_ws_kernel``): the producer gathers the block's token rows by cp.async (no TMA
    # box) beside the weights' TMA copies; ``fc1_block_n`` 128 (ungated) or, gated (session 43, run 46; the SwiGLU
    # default from 176 pairs per expert since), 64 gate rows and their 64 up rows in one 128-row tile (I a multiple of
    # 64), on ``fc1_warps`` 8, ``fc1_block_k`` 32 or 64, ``fc1_stages`` >= 2, no ``fc1_gate_merge``; ``fc1_maxnreg`` is
    # ignored. Held to the float64 oracle.
    fc1_ws: bool = False
    # Session 40 (run 44: GPU tests passed; 2-8% slower at 4096 tokens, see the "_sx" tiles): the ws producers'
    # dequant by moving bits (``_fp8_sx_to_bf16``, 3 integer instructions per 2 weights) times one bf16 factor where
    # the program's scale bytes are all below 128 (a scan of its rows' scale words before the first step), else two,
    # instead of the fp32 convert and multiply (about 6 per 2 weights): the same exact values. Needs ``fc1_ws`` or
    # ``fc2_ws``.
    ws_sx: bool = False
    # Session 41 (run 45: the same bits, no faster at 4096 tokens; opt-in): the ws consumers free each step's token and
    # bf16 weight stages with one arrival per thread after its own wgmma wait (``x_empty`` / ``deq_empty`` expect 256),
    # in place of a barrier of the 8 consumer warps and one arrival: the two warpgroups no longer wait for each other
    # every K step (run 43's ncu: barrier stalls 1.2-1.7 of 10-10.4 cycles per issued instruction). The same values.
    # Needs ``fc1_ws`` or ``fc2_ws``.
    ws_thread_arrive: bool = False
    # Session 41 (run 45: the same bits, within 1% at 4096 tokens; opt-in): the ws epilogues stage their bf16 tile whole
    # in shared memory (the rings' bytes, dead by then) and read it back in the row layout after one barrier, in place
    # of the compiler's layout conversion in 16 rounds of two barriers each at 128 x 256 (one CTA per SM: the epilogue
    # is not hidden behind another program). The same values. Needs ``fc1_ws`` or ``fc2_ws``.
    ws_staged_epilogue: bool = False
    # Session 41 (run 45, session 42: the same bits, 3-10% faster per layer at 4096 tokens; the default from 176 pairs
    # per expert for both activations, ``_WS_TWINS``; SwiGLU's with the gated ws FC1 since session 43): the ws FCs as
    # persistent kernels, one program per SM over the live tiles (``_fc1_ws_persistent_kernel`` /
    # ``_fc2_ws_persistent_kernel``): a program's next tile's copies and dequant overlap its last MMAs and its store,
    # where one program per tile at one CTA per SM leaves each program's start and end exposed. Its epilogue's layout
    # conversion needs scratch beside the live rings (4 KiB at 128 x 256; ``ws_shared_bytes(..., persistent=True)``), so
    # 3 token stages at 256 tokens. Not with ``ws_staged_epilogue``. The same values. Needs ``fc1_ws`` or ``fc2_ws``.
    ws_persistent: bool = False
    # Session 42 (run 45: the same bits, 0.7-2.7% slower at 4096 tokens; opt-in): the ws rings' depths. ``ws_dstages``:
    # the bf16 weight stages the producer dequantizes into (2: it may run one step ahead of the MMA the consumers wait
    # on, so its whole handoff, the consumers' release, its dequant, fence, barrier and arrival, must fit inside one MMA
    # step); ``ws_wstages``: the fp8 weight stages (0: twice the token stages). "_d3" takes 3 bf16 stages in the 4-stage
    # default's 224 KiB by giving up two fp8 weight stages (6 instead of 8). The same values. Needs ``fc1_ws`` or
    # ``fc2_ws``.
    ws_dstages: int = 2
    ws_wstages: int = 0
    # Session 44 (run 47: the same bits, -0.4% to +1.8% at 4096 tokens, 1-6% faster on the decode ws tiles; opt-in):
    # with ``ws_persistent``, each tile's last K steps issue the next tile's first weight and token copies (the same
    # ring positions), and the next tile's step-0 scale words, expert and pairs load a whole tile ahead. Without it the
    # producer starts each tile's copies only after the last dequant of the previous tile, so every tile opens with a
    # full HBM round trip. Rings deeper than a tile's steps start each tile on their own. The same values.
    ws_prefetch: bool = False

    def __post_init__(self):
        if self.tail is not None:
            t = self.tail
            if self.direct or self.gemv or t.direct or t.gemv or t.tail is not None:
                raise ValueError("TritonMoEConfig: tail tiles are for the MMA path (no direct / gemv, no nested tail)")
            if not 1 < t.block_t < self.block_t:
                raise ValueError(f"TritonMoEConfig: tail.block_t must be in (1, {self.block_t}), got {t.block_t}")
            if t.fc2_split_k != self.fc2_split_k:  # both launches write the same split slots
                raise ValueError(f"TritonMoEConfig: tail.fc2_split_k {t.fc2_split_k} differs from {self.fc2_split_k}")
            if t.split_scales_t != self.split_scales_t and t.dequant == self.dequant == "f8x2":
                raise ValueError(f"TritonMoEConfig: tail.split_scales_t {t.split_scales_t} differs from "
                                 f"{self.split_scales_t} on the FC2 split rows both read")
            if t.step_scales != self.step_scales and _reads_x_split(t) and _reads_x_split(self):
                raise ValueError(f"TritonMoEConfig: tail.step_scales {t.step_scales} differs from "
                                 f"{self.step_scales} on the split rows of x both read")
        if self.ws_dstages not in (2, 3, 4) or not (self.ws_wstages == 0 or self.ws_wstages >= 2):
            raise ValueError(f"TritonMoEConfig: ws_dstages must be 2, 3 or 4 and ws_wstages 0 (twice the token stages) "
                             f"or at least 2; got {self.ws_dstages} / {self.ws_wstages}")
        for fc in (1, 2):
            if getattr(self, f"fc{fc}_ws"):
                self._check_ws(fc)
        for field, what in (("ws_sx", "dequant"), ("ws_thread_arrive", "stage release"),
                            ("ws_staged_epilogue", "epilogue"), ("ws_persistent", "persistent form")):
            if getattr(self, field) and not (self.fc1_ws or self.fc2_ws):
                raise ValueError(f"TritonMoEConfig: {field} is the warp-specialized FCs' {what}; it needs fc1_ws or "
                                 "fc2_ws")
        if (self.ws_dstages, self.ws_wstages) != (2, 0) and not (self.fc1_ws or self.fc2_ws):
            raise ValueError("TritonMoEConfig: ws_dstages / ws_wstages are the warp-specialized FCs' ring depths; they "
                             "need fc1_ws or fc2_ws")
        if self.ws_persistent and self.ws_staged_epilogue:
            raise ValueError("TritonMoEConfig: ws_persistent does not take ws_staged_epilogue (its rings stay live "
                             "through the epilogue)")
        if self.ws_prefetch and not self.ws_persistent:
            raise ValueError("TritonMoEConfig: ws_prefetch runs the copies on across a persistent program's tiles; it "
                             "needs ws_persistent")
        if self.fc1_gate_merge and (self.direct or self.gemv or self.fc1_block_n % 8):
            raise ValueError("TritonMoEConfig: fc1_gate_merge is for the MMA path (direct=False, gemv=False) with "
                             f"fc1_block_n a multiple of 8, got fc1_block_n={self.fc1_block_n}")
        if self.dequant == "f8x2":
            self._check_f8x2()
        if self.dequant in ("sx_auto", *_WORD_MODES) and (self.direct or self.gemv):
            raise ValueError(f"TritonMoEConfig: dequant={self.dequant!r} is for the MMA path (direct=False, gemv=False)")
        if self.dequant in _WORD_MODES and (self.fc1_block_k % 64 or self.fc2_block_k % 64):
            raise ValueError(f"TritonMoEConfig: dequant={self.dequant!r} needs block_k multiples of 64 (4 planes of "
                             f"at least 16), got {self.fc1_block_k} / {self.fc2_block_k}")
        if self.planes and self.dequant not in _WORD_MODES:
            raise ValueError(f"TritonMoEConfig: planes is for the 'sx4' tiles (dequant {_WORD_MODES}), got "
                             f"dequant={self.dequant!r}")
        if self.fc2_gluon and self.dequant != "f8x2" and not (
                self.planes and self.dequant == "sx4" and self.fc2_block_k == 128 and self.fc2_split_k == 1
                and self.fc2_block_n % 64 == 0 and self.fc2_warps in (4, 8) and self.fc2_stages >= 2):
            raise ValueError("TritonMoEConfig: fc2_gluon needs planes=True, dequant='sx4', fc2_block_k=128, "
                             "fc2_split_k=1, fc2_block_n a multiple of 64, fc2_warps 4 or 8 and fc2_stages >= 2; got "
                             f"planes={self.planes}, dequant={self.dequant!r}, fc2_block_k={self.fc2_block_k}, "
                             f"fc2_split_k={self.fc2_split_k}, fc2_block_n={self.fc2_block_n}, "
                             f"fc2_warps={self.fc2_warps}, fc2_stages={self.fc2_stages}")
        # with fc1_f8x2 the dequant mode is the FC2's alone (its FC1 does not dequantize)
        fc1_dequant = self.dequant == "sx4" or (self.fc1_f8x2 and self.dequant in _WORD_MODES)
        if self.fc1_gluon and self.dequant != "f8x2" and not (
                self.planes and fc1_dequant and self.fc1_block_k == 128 and not self.fc1_gate_merge
                and self.fc1_warps in (4, 8) and self.fc1_block_n % (16 * self.fc1_warps) == 0
                and self.fc1_stages >= 3):
            raise ValueError("TritonMoEConfig: fc1_gluon needs planes=True, dequant='sx4', fc1_block_k=128, "
                             "fc1_gate_merge=False, fc1_warps 4 or 8, fc1_block_n a multiple of 16 * fc1_warps and "
                             "fc1_stages >= 3 (at 2 stages Triton 3.6 fails to compile it: an LLVM assertion in "
                             f"ConvertTritonGPUToLLVM); got planes={self.planes}, dequant={self.dequant!r}, "
                             f"fc1_block_k={self.fc1_block_k}, fc1_gate_merge={self.fc1_gate_merge}, "
                             f"fc1_warps={self.fc1_warps}, fc1_block_n={self.fc1_block_n}, "
                             f"fc1_stages={self.fc1_stages}")
        if self.fc2_chains not in (1, 2) or (self.fc2_chains == 2 and (not self.fc2_gluon or self.dequant == "f8x2")):
            raise ValueError(f"TritonMoEConfig: fc2_chains must be 1, or 2 with the Gluon FC2 of the plane tiles "
                             f"(fc2_gluon, dequant 'sx4'); got fc2_chains={self.fc2_chains}, "
                             f"fc2_gluon={self.fc2_gluon}, dequant={self.dequant!r}")
        if self.scale_words and (self.dequant == "f8x2" or not (self.fc1_gluon or self.fc2_gluon)):
            raise ValueError("TritonMoEConfig: scale_words=True needs a Gluon FC1 or FC2 of the plane tiles "
                             f"(fc1_gluon / fc2_gluon, dequant 'sx4'); got fc1_gluon={self.fc1_gluon}, fc2_gluon={self.fc2_gluon}, "
                             f"dequant={self.dequant!r}")
        if self.fc2_ring and not (self.fc2_gluon and not self.fc2_overlap and self.dequant == "sx4"):
            raise ValueError("TritonMoEConfig: fc2_ring=True needs the Gluon FC2 of the plane tiles without the "
                             f"overlap (fc2_gluon, fc2_overlap=False); got fc2_gluon={self.fc2_gluon}, "
                             f"fc2_overlap={self.fc2_overlap}, dequant={self.dequant!r}")
        for flag, gluon, name in ((self.fc1_one_factor, self.fc1_gluon, "fc1"),
                                  (self.fc2_one_factor, self.fc2_gluon, "fc2")):
            if flag and not (gluon and self.scale_words):
                raise ValueError(f"TritonMoEConfig: {name}_one_factor=True needs the Gluon {name.upper()} with "
                                 f"scale_words; got {name}_gluon={gluon}, scale_words={self.scale_words}")
        if self.fc1_f8x2 and not (self.fc1_gluon and self.dequant in _WORD_MODES and self.fc1_warps == 4
                                  and self.fc1_block_n % 64 == 0 and not self.fc1_one_factor):
            raise ValueError("TritonMoEConfig: fc1_f8x2=True needs the Gluon FC1 of the plane tiles (fc1_gluon, "
                             f"dequant in {_WORD_MODES}: their FC2's) on 4 warps, fc1_block_n a multiple of 64, "
                             f"without fc1_one_factor; got fc1_gluon={self.fc1_gluon}, dequant={self.dequant!r}, "
                             f"fc1_warps={self.fc1_warps}, fc1_block_n={self.fc1_block_n}, "
                             f"fc1_one_factor={self.fc1_one_factor}")
        if self.fc1_split_out and not (self.dequant == "f8x2" and self.fc1_gluon):
            raise ValueError("TritonMoEConfig: fc1_split_out=True needs an f8x2 tile with the Gluon FC1 (dequant "
                             f"'f8x2', fc1_gluon); got dequant={self.dequant!r}, fc1_gluon={self.fc1_gluon}")
        if self.split_scales_t and not (self.dequant == "f8x2" and self.fc1_gluon and self.fc2_gluon):
            raise ValueError("TritonMoEConfig: split_scales_t=True needs an 'f8x2' tile with the Gluon FC1 and FC2 "
                             f"(fc1_gluon, fc2_gluon); got dequant={self.dequant!r}, fc1_gluon={self.fc1_gluon}, "
                             f"fc2_gluon={self.fc2_gluon}")
        if self.step_scales and not (  # fc1_f8x2 is a plane tile's (checked above)
                self.fc1_f8x2 or (self.dequant == "f8x2" and self.fc1_gluon and self.fc2_gluon
                                  and not self.fc1_split_out)):
            raise ValueError("TritonMoEConfig: step_scales=True needs the Gluon f8x2 kernels on every split buffer "
                             "(a plane tile with fc1_f8x2, or an 'f8x2' tile with fc1_gluon and fc2_gluon, without "
                             f"fc1_split_out); got dequant={self.dequant!r}, fc1_f8x2={self.fc1_f8x2}, "
                             f"fc1_gluon={self.fc1_gluon}, fc2_gluon={self.fc2_gluon}, "
                             f"fc1_split_out={self.fc1_split_out}")
        if self.fc2_pdl and not (self.fc2_gluon and self.dequant == "sx4"):
            raise ValueError("TritonMoEConfig: fc2_pdl=True needs the Gluon FC2 of the plane tiles (fc2_gluon, "
                             f"dequant 'sx4'); got fc2_gluon={self.fc2_gluon}, dequant={self.dequant!r}")
        for flag, gluon, name in ((self.fc1_overlap, self.fc1_gluon, "fc1"), (self.fc2_overlap, self.fc2_gluon, "fc2")):
            if not flag and not gluon:
                raise ValueError(f"TritonMoEConfig: {name}_overlap=False needs the Gluon {name.upper()} "
                                 f"({name}_gluon); the Triton kernels have no such switch")
        if self.side_stream not in (0, 1, 2):
            raise ValueError(f"TritonMoEConfig: side_stream must be 0, 1 or 2, got {self.side_stream}")
        if self.route_warps is not None and self.route_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"TritonMoEConfig: route_warps must be a power of two up to 32, got {self.route_warps}")
        if not 0 <= self.route_parallel_pairs <= 8192:
            raise ValueError(f"TritonMoEConfig: route_parallel_pairs must be 0-8192, got {self.route_parallel_pairs}")
        if self.route_parallel_pairs and (self.route_in_registers or self.route_warps is not None):
            raise ValueError("TritonMoEConfig: route_in_registers and route_warps tune the one-program route; they "
                             "need route_parallel_pairs=0")
        if self.gemv and not self.direct and self.block_t != 1:
            raise ValueError(f"TritonMoEConfig: the routed GEMV path (gemv without direct) runs one pair per "
                             f"program and needs block_t=1, got block_t={self.block_t}")

    def _check_ws(self, fc: int) -> None:
        """``fc1_ws`` / ``fc2_ws`` (``_gluon_ws_kernel``): an MMA-path tile that reads tokens in K order, the kernel's
        128 rows on 8 warps (two consumer warpgroups), 32- or 64-deep steps in 2 or more stages, ``block_t`` a multiple
        of 16 up to 256 (one wgmma's N); FC1 without its Gluon / f8x2 kernels or ``fc1_gate_merge``, FC2 without its
        Gluon kernel or split-K. FC1's ``fc1_block_n`` may be 64 too: 64 gate rows and their up rows (gated layers;
        ``_gluon_problem`` matches it to the activation)."""
        block_n, warps, block_k, stages = (getattr(self, f"fc{fc}_{field}")
                                           for field in ("block_n", "warps", "block_k", "stages"))
        if fc == 1:
            own, needs = self.fc1_gluon or self.fc1_f8x2 or self.fc1_gate_merge, "f8x2 or Gluon FC1, no fc1_gate_merge"
        else:
            own, needs = self.fc2_gluon or self.fc2_split_k != 1, "f8x2 or Gluon FC2, fc2_split_k=1"
        if (own or self.direct or self.gemv or self.planes or self.dequant in (*_WORD_MODES, "f8x2")
                or block_n not in ((64, 128) if fc == 1 else (128,)) or warps != 8 or block_k not in (32, 64)
                or stages < 2 or self.block_t % 16 or not 16 <= self.block_t <= 256
                or ws_shared_bytes(self.block_t, block_k, stages, self.ws_dstages, wstages=self.ws_wstages,
                                   persistent=self.ws_persistent) > 227 * 1024):
            raise ValueError(f"TritonMoEConfig: fc{fc}_ws=True needs an MMA-path tile that reads tokens in K order (no "
                             f"planes, 'sx4', {needs}), fc{fc}_block_n=128 (FC1: or 64, gated) on "
                             f"fc{fc}_warps=8, fc{fc}_block_k 32 or 64, fc{fc}_stages >= 2, block_t a multiple of 16 "
                             f"up to 256 and rings within 227 KiB of shared memory (ws_shared_bytes; with "
                             f"ws_persistent, its epilogue's scratch too); got {self}")

    def _check_f8x2(self) -> None:
        """``dequant="f8x2"`` is an MMA-path tile of its own (``_triton_f8x2_kernel.py``; FC2 optionally in Gluon, and
        FC1 too: gated on 64 gate rows and their up rows, ``_gluon_problem``)."""
        problems = [what for what, bad in (
            ("direct / gemv", self.direct or self.gemv),
            ("planes", self.planes),
            ("fc1_gluon without fc1_block_k 128, 4 warps and 2 or more stages",
             self.fc1_gluon and not (self.fc1_block_k == 128 and self.fc1_warps == 4 and self.fc1_stages >= 2)),
            ("fc1_gate_merge", self.fc1_gate_merge),
            ("fc2_split_k > 1", self.fc2_split_k != 1),
            ("sync_dots", self.sync_dots),
            ("block_k other than 32 / 64 / 128", {self.fc1_block_k, self.fc2_block_k} - {32, 64, 128}),
            ("block_n not a multiple of 64", self.fc1_block_n % 64 or self.fc2_block_n % 64),
            ("block_t below 16", self.block_t < 16),
            ("fc2_gluon without fc2_block_k 128, 4 warps (or 8 on a multiple of 128 rows) and 2 or more stages",
             self.fc2_gluon and not (self.fc2_block_k == 128 and self.fc2_stages >= 2 and (
                 self.fc2_warps == 4 or (self.fc2_warps == 8 and self.fc2_block_n % 128 == 0)))),
        ) if bad]
        if problems:
            raise ValueError(f"TritonMoEConfig: dequant='f8x2' does not take {'; '.join(problems)}; got {self}")

    @property
    def dequant_code(self) -> int:
        return _DEQUANT_CODE["fp32" if self.dequant_fp32 else self.dequant]

    @property
    def dot_mode(self) -> int:
        """``_mma``'s mode (the kernels' ``FP32_DOT``): 1 fp32 operands (interpreter), 2 bf16 with ``sync_dots``, 0
        bf16."""
        return 1 if self.fp32_dot else 2 if self.sync_dots else 0

    @property
    def launch_tiles(self) -> tuple["TritonMoEConfig", ...]:
        """The tiles of the MMA launch pairs: this one, and its tail tile if it has one."""
        return (self,) if self.tail is None else (self, self.tail)

    def launch_options(self, fc: int) -> dict:
        """Triton launch options of the FC1 (``fc=1``) or FC2 (``fc=2``) kernel."""
        warps, stages, maxnreg = ((self.fc1_warps, self.fc1_stages, self.fc1_maxnreg) if fc == 1
                                  else (self.fc2_warps, self.fc2_stages, self.fc2_maxnreg))
        options = dict(num_warps=warps, num_stages=stages)
        if maxnreg is not None:
            options["maxnreg"] = maxnreg
        return options


def _major_minor(triton_version: str) -> tuple[int, ...]:
    """``(major, minor)`` of a Triton version string such as "3.6.0+git1234"."""
    return tuple(int(p) for p in triton_version.split("+")[0].split(".")[:2] if p.isdigit())


def triton_moe_support(capability, triton_version: Optional[str] = None) -> tuple[bool, str]:
    """Pure support check: ``capability`` is ``(major, minor)`` or None (no CUDA); returns ``(ok, reason)``."""
    if capability is None:
        return False, "the Triton MXFP8 MoE needs a CUDA GPU (none visible)"
    major, minor = capability
    if major != _SUPPORTED_MAJOR:
        return False, f"the Triton MXFP8 MoE needs an SM90 Hopper GPU (H100/H200); this one is SM{major}{minor}"
    if triton_version is not None:
        if _major_minor(triton_version) < _MIN_TRITON:
            return False, f"the Triton MXFP8 MoE needs Triton >= {'.'.join(map(str, _MIN_TRITON))}, found {triton_version}"
    return True, f"SM{major}{minor} Hopper: weight-only MXFP8 Triton MoE available"


def _reads_x_split(tile: TritonMoEConfig) -> bool:
    """Whether ``tile``'s FC1 reads the split rows of x (the f8x2 FC1s, Triton or Gluon)."""
    return tile.dequant == "f8x2" or tile.fc1_f8x2


# The tile sets ``choose_config`` returns (and earlier defaults the tests and benchmarks still name), by the names
# ``bench/moe_layer.py`` and the GPU tests use (fields:
# block_t, fc1 n / k / warps / stages, fc2 n / k / warps / stages). Measured and GPU-tested on an H200 (runs 5 and 7,
# bench/NOTES_triton_moe.md): "d" direct small-T path, "s"/"m"/"l" token tiles of 16/32/64-128, "_sx" the
# sign-extending dequant (the others convert with cvt).
TILES = {
    # v6 GEMV small-T path (session 5 sweep on the H200, bench/NOTES_triton_moe.md): "p" = FC2 per pair + combine
    # kernel (the only form kept), "3" = K loops pipelined 3 deep through shared memory; block_t is unused there.
    "g16p3": TritonMoEConfig(16, 16, 256, 4, 3, 32, 256, 4, 3, direct=True, gemv=True),
    "g16p": TritonMoEConfig(16, 16, 512, 4, 1, 32, 256, 4, 1, direct=True, gemv=True),
    "g32p": TritonMoEConfig(16, 32, 256, 4, 1, 16, 256, 2, 1, direct=True, gemv=True),
    # v7 routed GEMV: route by expert, then g32p's tiles per pair. Pairs of one expert run side by side and share
    # weight reads in L2 (session 6 probe on the H200: 8-18% faster than g32p at 16 tokens).
    "q1": TritonMoEConfig(1, 32, 256, 4, 1, 16, 256, 2, 1, gemv=True),
    "d4_sx": TritonMoEConfig(16, 32, 256, 2, 4, 16, 256, 1, 6, dequant="sx", direct=True),
    "s16a": TritonMoEConfig(16, 32, 128, 4, 4, 64, 128, 4, 4),
    "s16k_sx": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx"),
    # s16k_sx with FC2 capped at 128 registers (8 bytes spilled): two FC2 CTAs per SM instead of one. Session 5
    # sweep on the H200: 6-7% faster (SwiGLU) and 9% (squared ReLU) at 16 and 64 tokens on both shapes.
    "s16k_sx_r": TritonMoEConfig(16, 64, 256, 4, 3, 128, 256, 8, 3, dequant="sx", fc2_maxnreg=128),
    "m32l_sx": TritonMoEConfig(32, 64, 256, 4, 2, 128, 256, 8, 3, dequant="sx"),
    "m32a": TritonMoEConfig(32, 64, 128, 4, 3, 128, 128, 8, 3),
    "l64a": TritonMoEConfig(64, 128, 64, 8, 3, 128, 64, 8, 3),
    "l64b": TritonMoEConfig(64, 64, 64, 4, 3, 128, 64, 4, 3),
    "l128a": TritonMoEConfig(128, 64, 64, 4, 3, 128, 64, 8, 3),
    # v8 "sx_auto" (session 7): the sign-extending dequant with ONE bf16 factor per weight pair, 2 ** (s - 7 - shift),
    # where a per-program scan of the tile's scale rows sets shift = max(0, largest byte - 134) and the accumulators
    # are multiplied by 2 ** shift. Bit-identical to "cvt" while the tile's scales are <= 2 ** 7 (shift 0). Session 7
    # probes on the H200: l128a_sa 7-10% faster than l64b / l64a at 1024 tokens, 17-21% at 4096.
    "l64b_sa": TritonMoEConfig(64, 64, 64, 4, 3, 128, 64, 4, 3, dequant="sx_auto"),
    "l128a_sa": TritonMoEConfig(128, 64, 64, 4, 3, 128, 64, 8, 3, dequant="sx_auto"),
    # Session 10 (run 13, H200 probes): squared ReLU's FC1 keeps a single accumulator, so its tiles can take 128
    # weight rows per program. "l128w_sa": 128-token tiles, 128 FC1 rows on 8 warps, FC1 capped at 128 registers
    # (two CTAs per SM; 141 uncapped, compile-only; uncapped it was 3-6% SLOWER than l128a_sa): 0.7-5.0% faster
    # than l128a_sa at 64-192 pairs per expert. "x256w_sa": 256-token tiles (wgmma N = 256; FC1 219 / FC2 206
    # registers, one CTA per SM): each dequantized weight tile feeds twice the tokens; 11-15% faster at 192-256
    # pairs per expert, 23-25% slower at 128.
    # Gated layers (session 10): gate and up rows in ONE FC1 MMA tile (``fc1_gate_merge``) on 8 warps, which split
    # it by rows; two separate tiles on 8 warps split by tokens and both warpgroups dequantize the same weights.
    # H200 probes (SwiGLU, us per layer against the two-tile default of the same call): 64 tokens 251.3 vs 259.6
    # (30b) and 827.3 vs 871.3 (235b) with FC1 capped at 128 registers (two CTAs per SM; 279.1 / 930.1 uncapped);
    # 1024 tokens 468.9 vs 496.8, 4096 tokens 1086.2 (128-token tiles) and 1020.5 (256) vs 1165.2 (30b), 3751.5
    # (256) vs 4211.8 (235b). At 256 tokens (m32l_sx) it was 11-22% slower. Bit-identical to the two-tile FC1.
    "s16k_sx_rm": TritonMoEConfig(16, 64, 256, 8, 3, 128, 256, 8, 3, dequant="sx", fc1_maxnreg=128, fc2_maxnreg=128,
                                  fc1_gate_merge=True),
    # Session 11 (run 14, H200 probes): at 1.5-24 pairs per expert, more and smaller CTAs per SM. FC2 on 4 warps with
    # 64 rows capped at 168 registers (three CTAs per SM; compile-only, Triton 3.8: 145-167 registers, no spill);
    # gated FC1 merged on 4 warps with 32 + 32 rows, 2 stages, capped at 168 (146 / 167 registers, no spill; three
    # CTAs per SM where the 8-warp s16k_sx_rm fitted two and m32l_sx's 4-warp FC1 used 255 registers). SwiGLU, us
    # per layer against the previous default in the same call: 64 tokens 231.9 vs 249.4 (30b) and 793.0 vs 832.9
    # (235b); 256 tokens 285.2 vs 315.5 and 993.8 vs 1068.5. Squared ReLU (FC2 change only; its FC1 on 4 warps with
    # 64 rows and a cap was not faster): 64 tokens 294.6 vs 304.2, 1022.4 vs 1053.6; 256 tokens (m32a's 128-deep K
    # and 3 stages kept) 363.3 vs 383.1, 1295.4 vs 1367.9.
    "s16k4_sx_m": TritonMoEConfig(16, 32, 256, 4, 2, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                  fc1_gate_merge=True),
    # session 12: s16k4_sx_m with 3 FC1 stages (58 KB shared, 142 registers: still three CTAs per SM)
    "s16k4_sx_m3": TritonMoEConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                   fc1_gate_merge=True),
    # session 12, call 5: s16k4_sx_m3 with its weight rows read as uint32 words (16-byte copies, 4 byte-plane MMAs)
    "s16k4_sx4_m3": TritonMoEConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc1_maxnreg=168,
                                    fc2_maxnreg=168, fc1_gate_merge=True),
    "m32l4_sx_m": TritonMoEConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, dequant="sx", fc1_maxnreg=168, fc2_maxnreg=168,
                                  fc1_gate_merge=True),
    "s16k_sx_f4": TritonMoEConfig(16, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx", fc2_maxnreg=168),
    # session 13: s16k_sx_f4 with "sx4" (run 16 probes, squared ReLU at 64 tokens: 277.9 vs 293.5 / 295.1 us on 30b,
    # 972.9 vs 1028.6 / 1047.4 on 235b)
    "s16k_sx4_f4": TritonMoEConfig(16, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc2_maxnreg=168),
    "m32a_f4": TritonMoEConfig(32, 64, 128, 4, 3, 64, 128, 4, 3, fc2_maxnreg=168),
    "l128m_sa": TritonMoEConfig(128, 64, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_gate_merge=True),
    "x256m_sa": TritonMoEConfig(256, 64, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_gate_merge=True),
    "l128w_sa": TritonMoEConfig(128, 128, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto", fc1_maxnreg=128),
    "x256w_sa": TritonMoEConfig(256, 128, 64, 8, 3, 128, 64, 8, 3, dequant="sx_auto"),
}
# Session 8: l128a_sa with tail tiles (``TritonMoEConfig.tail``): an expert's last 1..16 / 32 / 64 pairs past its
# full 128-token blocks run on the 16 / 32 / 64-token tiles.
TILES.update({
    "l128a_sa_t16": dataclasses.replace(TILES["l128a_sa"], tail=TILES["s16k_sx_r"]),
    "l128a_sa_t32": dataclasses.replace(TILES["l128a_sa"], tail=TILES["m32l_sx"]),
    "l128a_sa_t32a": dataclasses.replace(TILES["l128a_sa"], tail=TILES["m32a"]),
    "l128a_sa_t64": dataclasses.replace(TILES["l128a_sa"], tail=TILES["l64b_sa"]),
    "l128w_sa_t32a": dataclasses.replace(TILES["l128w_sa"], tail=TILES["m32a"]),
    "l128w_sa_t64": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64b_sa"]),
    "x256w_sa_t32a": dataclasses.replace(TILES["x256w_sa"], tail=TILES["m32a"]),
    "l128m_sa_t64": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64b_sa"]),
    "l128m_sa_t32": dataclasses.replace(TILES["l128m_sa"], tail=TILES["m32l_sx"]),
    "x256m_sa_t32": dataclasses.replace(TILES["x256m_sa"], tail=TILES["m32l_sx"]),
    # Session 13, the defaults from 8 to 16 pairs per expert: the 32-token tiles with the 16-token "sx4" tiles as
    # tails (an expert with 1-16 pairs past its last full 32-token block runs them on the 16-token tile).
    "m32l4_sx_m_t16": dataclasses.replace(TILES["m32l4_sx_m"], tail=TILES["s16k4_sx4_m3"]),
    "m32a_f4_t16": dataclasses.replace(TILES["m32a_f4"], tail=TILES["s16k_sx4_f4"]),
    # Session 14 (run 17): the "sx4" tiles with plane-major token operands (``planes``), and the 32-token tiles in
    # "sx4" with them (without planes "sx4" was 22-29% slower there: every K step shuffled 32 token columns).
    "s16k4_sx4p_m3": dataclasses.replace(TILES["s16k4_sx4_m3"], planes=True),
    "s16k_sx4p_f4": dataclasses.replace(TILES["s16k_sx4_f4"], planes=True),
    "m32l4_sx4p_m": dataclasses.replace(TILES["m32l4_sx_m"], dequant="sx4", planes=True),
    "m32k_sx4p_f4": TritonMoEConfig(32, 64, 256, 4, 3, 64, 256, 4, 2, dequant="sx4", fc2_maxnreg=168, planes=True),
})
TILES.update({
    "m32l4_sx4p_m_t16": dataclasses.replace(TILES["m32l4_sx4p_m"], tail=TILES["s16k4_sx4p_m3"]),
    "m32k_sx4p_f4_t16": dataclasses.replace(TILES["m32k_sx4p_f4"], tail=TILES["s16k_sx4p_f4"]),
    # Session 15 (run 18): the 32-token plane tiles with 64 tokens. Gated: FC1 uncapped ("mu"; compile-only, Triton
    # 3.8: 194 registers, no spill; capped at 168 it spilled 76 bytes, and its 82 KB of shared memory fit two CTAs per
    # SM either way). Squared ReLU: 2 FC1 stages ("k2": 82 KB shared, two CTAs per SM; 3 stages took 132 KB, one).
    "l64_sx4p_m": dataclasses.replace(TILES["m32l4_sx4p_m"], block_t=64),
    "l64_sx4p_mu": dataclasses.replace(TILES["m32l4_sx4p_m"], block_t=64, fc1_maxnreg=None),
    "l64k_sx4p_f4": dataclasses.replace(TILES["m32k_sx4p_f4"], block_t=64),
    "l64k2_sx4p_f4": dataclasses.replace(TILES["m32k_sx4p_f4"], block_t=64, fc1_stages=2),
})
TILES.update({
    "l64_sx4p_mu_t32": dataclasses.replace(TILES["l64_sx4p_mu"], tail=TILES["m32l4_sx4p_m"]),
    "l64k_sx4p_f4_t32": dataclasses.replace(TILES["l64k_sx4p_f4"], tail=TILES["m32k_sx4p_f4"]),
    "l128m_sa_t64p": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64_sx4p_m"]),
    "l128w_sa_t64p": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64k_sx4p_f4"]),
    # session 16: the 128-token tiles with the uncapped / 2-stage 64-token plane tiles as tails
    "l128m_sa_t64pu": dataclasses.replace(TILES["l128m_sa"], tail=TILES["l64_sx4p_mu"]),
    "l128w_sa_t64p2": dataclasses.replace(TILES["l128w_sa"], tail=TILES["l64k2_sx4p_f4"]),
    # session 17: the 2-stage squared-ReLU 64-token plane tile with 32-token tails (timed with the second stream)
    "l64k2_sx4p_f4_t32": dataclasses.replace(TILES["l64k2_sx4p_f4"], tail=TILES["m32k_sx4p_f4"]),
})
# Session 16: the plane / tail defaults below 72 pairs per expert with the second stream (``side_stream`` 2: the plane
# copies of x beside the route, the tail pair beside the main pair), "_s2"; the same launches, so the same bits.
# Session 17: also the 128-token tiles with 32-token tails (72-176 pairs per expert).
TILES.update({f"{name}_s2": dataclasses.replace(TILES[name], side_stream=2) for name in (
    "s16k4_sx4p_m3", "m32l4_sx4p_m_t16", "m32k_sx4p_f4_t16", "m32l4_sx4p_m", "m32k_sx4p_f4", "l64_sx4p_mu_t32",
    "l64k_sx4p_f4_t32", "l64_sx4p_mu", "l64k2_sx4p_f4", "l128m_sa_t64pu", "l128w_sa_t64p2", "l64k2_sx4p_f4_t32",
    "l128m_sa_t32", "l128w_sa_t32a")})
# Session 18: the 32-token plane tiles with the Gluon FC2 (``fc2_gluon``: 128 rows, 3 stages, 128-deep K steps),
# "_g_s2". Run 21 probes at 256 tokens, us per layer against the "_s2" tile before / after: 30b 296.6 vs 307.9 / 307.7
# (squared ReLU), 222.9 vs 230.9 / 230.4 (gated); 235b 1043.7 vs 1064.2 / 1086.3, 782.6 vs 809.8 / 826.9. Run 22
# (session 19) at 384 tokens: 30b 299.0 vs 321.5 / 324.3, 249.7 vs 263.6 / 263.5; 235b 1127.6 vs 1162.8 / 1180.1,
# 889.6 vs 916.6 / 948.0; the full benchmark with them: 256 tokens 222.8 / 291.5 us (30b) against run 21's 228.7 /
# 301.3. The defaults since session 19.
_GLUON_FC2_TILE = dict(fc2_block_k=128, fc2_gluon=True, fc2_block_n=128, fc2_stages=3, fc2_maxnreg=None)
# Session 19: also FC1 in Gluon (``fc1_gluon``: 64 rows per gate / up tile, 3 stages, 4 warps, 128-deep K steps),
# "_gg_s2". Run 22 kernel probe (bench/gluon_fc1_probe.py, 16 pairs per expert) against the Triton default FC1,
# before / after: gated 30b 141.0 vs 156.0 / 152.5 us, 235b 503.2 vs 571.4 / 538.6. Run 22 layer probes against
# "_g_s2" before / after (us): gated 30b 219.1 vs 224.6 / 225.6 (256 tokens), 244.9 vs 250.8 / 254.7 (384); 235b 802.0
# vs 828.6 / 894.8, 914.3 vs 922.5 / 990.1: the gated default. Squared ReLU (FC1 2 I x H, no up half) lost: 30b 298.2
# vs 295.2 / 295.9, 235b 1120.3 vs 1080.3 / 1095.6 (256 tokens); there it keeps the Triton FC1.
_GLUON_FC1_TILE = dict(fc1_block_k=128, fc1_gluon=True, fc1_block_n=64, fc1_stages=3, fc1_warps=4,
                       fc1_gate_merge=False, fc1_maxnreg=None)
# Session 20: the Gluon FC2 also on the other plane tiles (the 16-token gated tile, the 64-token tiles; Gluon tails:
# below). Run 22 probes, us per layer, "_s2" / "_g_s2" / "_s2": 64 tokens gated s16k4_sx4p_m3 30b 205.0 / 191.5 /
# 205.5; 640 tokens l64_sx4p_mu 30b 353.2 / 316.6 / 353.4, 235b 1227.6 / 1119.9 / 1229.9; squared ReLU l64k2_sx4p_f4
# 30b 458.9 / 386.3 / 461.0. Run 23 (session 20): 235b 64 tokens gated 714.2 / 699.2 / 718.5; 512 tokens (the 64-token
# tiles with 32-token tails) gated 301.1 / 284.9 / 300.9 (30b), 1069.9 / 1027.2 / 1089.1 (235b), squared ReLU 381.0 /
# 352.4 / 384.3, 1402.9 / 1350.6 / 1426.0; 235b squared ReLU 640 tokens 1651.0 / 1497.7 / 1701.1. Their 17 GPU bit
# tests passed (run 23 call 1): defaults in session 20. Session 21 removed the 64-token Gluon tiles ("l64*_g_s2",
# "_gg_s2", "_gq_s2", "_gt", and the 128-token tiles with Gluon 64-token tails): they write NaN rows in 3-5% of calls
# (``_GLUON_TWINS``; bench/gluon_tail_race_probe.py reproduced it).
# Session 22 (run 25): with the two-register-set kernels the 64-token ones are back, behind the switch: the race probe
# (300 fresh inputs per case, bit-compared with the Triton form) found 0 failures in 9 cases, among them the rebuilt
# 64-token tile with both FCs in Gluon and the 128-token tiles with Gluon 64-token tails at 1024 tokens, both
# activations, where the one-set kernels had failed 3-5% of calls.
_GLUON_BASES = ("s16k4_sx4p_m3", "m32l4_sx4p_m_t16", "m32k_sx4p_f4_t16", "m32l4_sx4p_m", "m32k_sx4p_f4",
                "l64_sx4p_mu_t32", "l64k2_sx4p_f4_t32", "l64_sx4p_mu", "l64k2_sx4p_f4")


def _gluon_fc2(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` (a plane tile) with the Gluon FC2 tile (``_GLUON_FC2_TILE``)."""
    return dataclasses.replace(cfg, **_GLUON_FC2_TILE)


TILES.update({f"{name}_g_s2": _gluon_fc2(TILES[f"{name}_s2"]) for name in _GLUON_BASES})
TILES.update({f"{name}_gg_s2": dataclasses.replace(TILES[f"{name}_g_s2"], **_GLUON_FC1_TILE) for name in _GLUON_BASES})


# Session 20 (run 23): (1) the tails in Gluon too ("_gt"; an expert's last pairs run on the tail tile: at 16 pairs per
# expert about half of all pairs); (2) the Gluon FC1 on the 64-token tiles (kernel probe, bench/gluon_fc1_probe.py,
# 40 pairs per expert in 64-token blocks, 30b, us, Triton default / Gluon / Triton default: gated 64 rows 3 stages
# 206.6 / 183.4 / 205.2, squared ReLU 128 rows on 4 warps ("_gq") 207.3 / 194.5 / 210.1, bit-equal to the Triton FC1
# at 128-deep steps; at 16-token blocks gated 122.3 / 125.7 / 120.1, not faster); (3) the Gluon FC2 on the
# squared-ReLU 16-token tile, with planes. Layer probes (call 4), us per layer, previous default / new / previous:
# squared ReLU 64 tokens 30b 274.5 / 255.5 / 273.0; 256 tokens gated 30b 215.9 / 210.6 / 218.5, squared ReLU 294.0
# / 283.3 / 294.6; 512 tokens gated 285.3 / 258.1 / 286.3 (30b; the Gluon FC1 without Gluon tails 270.1), 1016.3 /
# 1003.0 / 1028.1 (235b; without 991.3), squared ReLU 350.3 / 336.8 / 351.9, 1296.5 / 1267.4 / 1378.6; 640 tokens
# (30b) gated 315.7 / 294.5 / 319.0, squared ReLU 387.2 / 382.6 / 396.5; 1024 tokens (30b) gated 411.7 / 393.4 /
# 411.9, squared ReLU 531.8 / 494.6 / 531.6 (the 128-token tiles with Gluon tails: not defaults, below). All 13 GPU
# tests passed (bits equal to the Triton forms, graph replays) in call 4. Of these, session 21 keeps the 16- /
# 32-token ones (the 64-token ones: above).
TILES.update({
    "s16k_sx4p_f4_g_s2": _gluon_fc2(dataclasses.replace(TILES["s16k_sx4p_f4"], side_stream=2)),
    "m32l4_sx4p_m_t16_gg_s2_gt": dataclasses.replace(TILES["m32l4_sx4p_m_t16_gg_s2"],
                                                     tail=_gluon_fc2(TILES["s16k4_sx4p_m3"])),
    "m32k_sx4p_f4_t16_g_s2_gt": dataclasses.replace(TILES["m32k_sx4p_f4_t16_g_s2"],
                                                    tail=_gluon_fc2(TILES["s16k_sx4p_f4"])),
})
# Session 22: session 20's 64-token Gluon tiles again (two register sets): the gated 64-token tile with both FCs in
# Gluon and its 32-token Gluon tails, the squared-ReLU one with 128 FC1 rows on 4 warps ("_gq": two m64 wgmma chains),
# and the 128-token tiles with the Gluon FC2 on their 64-token tails ("_gt"). Run 25 layer probes (call 5), us per
# layer, Triton tile / Gluon twin / Triton tile: 640 tokens gated 30b 353.6 / 300.3 / 354.9, 235b 1234.5 / 1109.4 /
# 1242.1; squared ReLU 30b 454.4 / 410.0 / 458.0, 235b 1654.3 / 1556.9 / 1697.0; 1024 tokens gated 30b 409.5 / 401.3 /
# 412.5, 235b 1486.1 / 1479.3 / 1523.7; squared ReLU 30b 531.7 / 506.3 / 533.2, 235b 1969.1 / 1905.6 / 2011.3.
_GLUON_SQ_FC1_TILE = dict(_GLUON_FC1_TILE, fc1_block_n=128)  # 128 rows on 4 warps: two m64 wgmma chains
TILES.update({
    "l64_sx4p_mu_t32_gg_s2_gt": dataclasses.replace(TILES["l64_sx4p_mu_t32_gg_s2"],
                                                    tail=dataclasses.replace(TILES["m32l4_sx4p_m_gg_s2"],
                                                                             side_stream=0)),
    "l64k2_sx4p_f4_gq_s2": dataclasses.replace(TILES["l64k2_sx4p_f4_g_s2"], **_GLUON_SQ_FC1_TILE),
    "l128m_sa_t64pu_s2_gt": dataclasses.replace(TILES["l128m_sa_t64pu_s2"], tail=_gluon_fc2(TILES["l64_sx4p_mu"])),
    "l128w_sa_t64p2_s2_gt": dataclasses.replace(TILES["l128w_sa_t64p2_s2"], tail=_gluon_fc2(TILES["l64k2_sx4p_f4"])),
})
TILES["l64k2_sx4p_f4_t32_gq_s2_gt"] = dataclasses.replace(TILES["l64k2_sx4p_f4_gq_s2"],
                                                          tail=_gluon_fc2(TILES["m32k_sx4p_f4"]))
# Session 22: the 16-token Gluon tiles with 64-row FC2 programs. Run 25 kernel probe (bench/gluon_fc2_probe.py, 30b
# FC2, 8 pairs per expert in 16-token blocks): 64 rows 78.4 us against 87.4 with 128 rows and 85.2 / 86.2 for the
# Triton FC2 (32-token blocks: 64 rows 92.2 against 87.5, so not there). Run 26 layer probes (30b, 64 tokens, us,
# Triton / Gluon 128 rows / Gluon 64 rows / Triton): gated 205.2 / 203.8 / 196.7 / 206.5, squared ReLU 274.1 / 274.0 /
# 263.7 / 274.9; Triton / Gluon 64 rows / Triton: 235b 64 tokens gated 712.0 / 706.3 / 720.8, squared ReLU 992.6 /
# 980.0 / 1022.6; 30b 128 tokens 216.5 / 209.3 / 216.8 and 287.9 / 277.3 / 288.6. The Gluon twins of the 16-token
# tiles since session 23 (``_GLUON_TWINS``), on by default (``_GLUON_BY_DEFAULT``).
TILES.update({f"{name}_n64": dataclasses.replace(TILES[name], fc2_block_n=64)
              for name in ("s16k4_sx4p_m3_g_s2", "s16k_sx4p_f4_g_s2")})
# Session 24: "f8x2" tiles (``_triton_f8x2_kernel.py``): no weight dequant; per 32-deep E8M0 block one 64-deep fp8
# wgmma on the exact hi / lo e4m3 split of the activations, then one scale product and FMA per output element; two
# independent accumulator chains per program (gate / up rows, else two halves of the rows). 4 warps, 128-deep K
# steps, the split of x beside the route ("_s2"). "q": 128 FC1 rows for the ungated activations (two 64-row halves).
# Experimental, not defaults: run 27 layer probes (30b, us, default / f8x2 / default): squared ReLU 64 tokens 263.3 /
# 399.1 / 262.2, 256 tokens 304.2 / 477.2 / 303.0; SwiGLU 197.5 / 321.1 / 198.5 and 230.7 / 391.4 / 230.6. Triton 3.6
# waits for each block's wgmma before its FMAs (``WARPGROUP.DEPBAR.LE gsb0, 0x0``), so every 32-deep block pays the
# MMA latency; bench/NOTES_triton_moe.md (session 24) has the variants and what a faster form would need.
_F8X2 = dict(dequant="f8x2", fc1_block_n=64, fc1_block_k=128, fc1_warps=4, fc1_stages=2, fc2_block_n=128,
             fc2_block_k=128, fc2_warps=4, fc2_stages=2)
TILES.update({
    "s16_f8": TritonMoEConfig(16, **_F8X2),
    "m32_f8": TritonMoEConfig(32, **_F8X2),
    "l64_f8": TritonMoEConfig(64, **_F8X2),
})
TILES.update({f"{name}q": dataclasses.replace(TILES[name], fc1_block_n=128) for name in ("s16_f8", "m32_f8", "l64_f8")})
TILES.update({
    "m32_f8_t16": dataclasses.replace(TILES["m32_f8"], tail=TILES["s16_f8"]),
    "l64_f8_t32": dataclasses.replace(TILES["l64_f8"], tail=TILES["m32_f8"]),
    "m32_f8q_t16": dataclasses.replace(TILES["m32_f8q"], tail=TILES["s16_f8q"]),
    "l64_f8q_t32": dataclasses.replace(TILES["l64_f8q"], tail=TILES["m32_f8q"]),
})
TILES.update({f"{name}_s2": dataclasses.replace(TILES[name], side_stream=2)
              for name in ("s16_f8", "m32_f8_t16", "l64_f8_t32", "s16_f8q", "m32_f8q_t16", "l64_f8q_t32")})
# ... and with FC2 in Gluon ("_gf", ``_gluon_f8x2_fc2_kernel.py``: TMA stages, no weight copy, scales loaded straight
# into the accumulator's layout, each block's wgmmas in flight while the previous block's sum is scaled and added; 64
# rows, 4 stages). Compile-only so far (Triton 3.6: 78 registers and 49 KB of shared memory at 16-token blocks).
TILES.update({f"{name}_gf": dataclasses.replace(TILES[name], fc2_gluon=True, fc2_block_n=64, fc2_stages=4)
              for name in ("s16_f8_s2", "s16_f8q_s2", "m32_f8_t16_s2", "m32_f8q_t16_s2")})
# ... and, for squared ReLU, with FC1 in Gluon too ("_g1": ``_gluon_f8x2_fc1_kernel.py``, session 31: no dequant on
# the consumer's chain, which run 34 found to be what holds the dequantizing kernels at 81-85% of HBM read; 128 rows
# in 3 stages, or "_g1n64" 64 rows in 4; the main tile only). Compile-only so far (tools/gpu_next.sh s32a).
TILES.update({f"{name}_gf_g1": dataclasses.replace(TILES[f"{name}_gf"], fc1_gluon=True, fc1_stages=3)
              for name in ("s16_f8q_s2", "m32_f8q_t16_s2")})
TILES.update({f"{name}_gf_g1n64": dataclasses.replace(TILES[f"{name}_gf"], fc1_gluon=True, fc1_block_n=64,
                                                      fc1_stages=4) for name in ("s16_f8q_s2", "m32_f8q_t16_s2")})
# Session 32 (run 35 call 1, 30b, 64 tokens): the "_g1" tile's f8x2 FC1 took 104.8 us against the dequantizing FC1's
# 111.3, its Gluon f8x2 FC2 on 64 rows 136.6 against the dequantizing two-chain FC2's 118.1. That FC1 runs 128 rows
# (two m64 wgmma chains per block); "_f128": the FC2 on 128 rows too, in 3 or 4 stages (run 36 below).
TILES.update({
    "s16_f8q_s2_gf_g1_f128": dataclasses.replace(TILES["s16_f8q_s2_gf_g1"], fc2_block_n=128, fc2_stages=3),
    "s16_f8q_s2_gf_g1_f128s4": dataclasses.replace(TILES["s16_f8q_s2_gf_g1"], fc2_block_n=128, fc2_stages=4),
})
# Session 34 (run 37 call 4): that FC2 spends 70% of its time in its own chain of wgmmas, scale loads and FMAs (81.3 of
# 116.9 us without its weight copies). "_f128w8": on 8 warps, two warpgroups of 64 rows (74 registers, Triton 3.6),
# twice the warps per SM to hide that chain (prepared: tools/gpu_next.sh s35a).
TILES["s16_f8q_s2_gf_g1_f128w8"] = dataclasses.replace(TILES["s16_f8q_s2_gf_g1_f128"], fc2_warps=8)
# ... "_fs": their FC1 writing FC2's split rows itself (``fc1_split_out``; no split launch between the FCs)
TILES.update({f"{name}_fs": dataclasses.replace(TILES[name], fc1_split_out=True)
              for name in ("s16_f8q_s2_gf_g1", "s16_f8q_s2_gf_g1_f128")})
# Run 36 call 1 (30b / 235b, 64 tokens, us; 21 GPU tests passed; not taken): "_f128" 236.7, 239.0 / 830.2, 824.8
# and "_f128_fs" 235.6, 232.1 / 817.3, 816.6 against the default's 230.7, 230.3 / 823.6, 846.1; the f8x2 FC2 on 128
# rows 117.2 against the default dequantizing FC2's 116.1, the "_fs" FC1 104.9 against 101.5. Session 33 also ran that
# FC2 on 2 / 4 adjacent tiles per program, its stage ring running on across them (call 5; the same bits; code not
# kept, the patch is bench/results/run36/fc2_n_tiles.patch): FC2 117.9 -> 116.3 / 141.8 us, the layer 238.4, 239.9 ->
# 238.4, 240.0 / 264.3, 265.0 (30b), so fewer, longer programs are not what that FC2 lacks.
# Session 35 (run 38 call 1, 30b squared ReLU, 64 tokens, per-kernel profile): the "_f128" tile's f8x2 FC2 took 117.6
# us, 109.8 with every token column's block scales read from one row (timing only; 235b 411.6 -> 395.3), 80.8 without
# its weight copies (its FC1 101.6 / 72.6): the scattered scale loads by position cost it 7%. "_st": the FC2 split
# rows' scales transposed (``split_scales_t``; the same bits; tools/gpu_next.sh s35c).
TILES.update({f"{name}_st": dataclasses.replace(TILES[name], split_scales_t=True)
              for name in ("s16_f8q_s2_gf_g1_f128", "s16_f8q_s2_gf_g1_f128_fs")})


def map_launch_tiles(cfg: TritonMoEConfig, change) -> TritonMoEConfig:
    """``cfg`` with ``change`` (a tile -> tile function) applied to it and to its tail tile (``launch_tiles``; the
    pair checked as changed, never the new main tile with the old tail)."""
    tail = None if cfg.tail is None else change(cfg.tail)
    return dataclasses.replace(change(dataclasses.replace(cfg, tail=None)), tail=tail)


def replace_launch_tiles(cfg: TritonMoEConfig, **changes) -> TritonMoEConfig:
    """``cfg`` with ``changes`` applied to it and to its tail tile (``launch_tiles``)."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, **changes))


def triton_form(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with each Gluon kernel (its tail's too) replaced by the Triton kernel at the same 128-deep steps: the
    same values in the same MMA order, hence the same bits (what the GPU tests and the race probe compare with), unless
    a Gluon FC2 ran on two chains (``same_bits_as_triton_form``)."""
    return replace_launch_tiles(cfg, fc1_gluon=False, fc2_gluon=False, fc2_chains=1, fc1_overlap=True,
                                fc2_overlap=True, scale_words=False, fc2_ring=False, fc1_one_factor=False,
                                fc2_one_factor=False, fc2_pdl=False, fc1_f8x2=False, fc1_split_out=False,
                                split_scales_t=False, step_scales=False, fc2_ws=False, fc1_ws=False, ws_sx=False,
                                ws_thread_arrive=False, ws_staged_epilogue=False, ws_persistent=False, ws_dstages=2,
                                ws_wstages=0, ws_prefetch=False)


def same_bits_as_triton_form(cfg: TritonMoEConfig) -> bool:
    """Whether ``cfg`` gives the bits of ``triton_form(cfg)``: no launch tile sums its FC2 on two chains, runs a Gluon
    f8x2 FC1 (``fc1_f8x2``, or an "f8x2" tile's ``fc1_gluon``: it rounds its rows to bf16 before the split), splits
    with one scale per 128 values (``step_scales``) or runs a warp-specialized FC (``fc1_ws`` / ``fc2_ws``: bits not
    claimed before a GPU has compared them)."""
    return all(t.fc2_chains == 1 and not t.fc1_f8x2 and not (t.dequant == "f8x2" and t.fc1_gluon)
               and not t.step_scales and not t.fc2_ws and not t.fc1_ws for t in cfg.launch_tiles)


def _synced(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` and its tail with ``sync_dots``."""
    return replace_launch_tiles(cfg, sync_dots=True)


# Session 21: "_sd", the default 128- / 256-token tiles with ``sync_dots`` (candidates, not defaults; untimed).
TILES.update({f"{name}_sd": _synced(TILES[name]) for name in (
    "l128m_sa_t64pu_s2", "l128w_sa_t64p2_s2", "l128m_sa_t32_s2", "l128w_sa_t32a_s2", "x256m_sa_t32", "x256w_sa_t32a")})
# Session 26: the Gluon FC2 on two accumulator chains ("_c2", ``fc2_chains``; tails with a Gluon FC2 too; "_n64": 64-row
# FC2 programs on main and tail tiles; "_st4": 4 FC2 stages). Why: a persistent warp-specialized form of this FC2
# (bench/results/run29/persistent_fc2.patch, not kept) ran on one program per SM at 258.5 us against 211.2 with two
# chains (30b squared-ReLU FC2, 16 pairs in 32-token blocks): one warpgroup waits on its chain of dependent wgmmas.
# Kernel probe (bench/gluon_fc2_probe.py, run 29 call 4, us, one chain -> two): 32-token blocks 156.8 (128 rows) ->
# 148.8 (64 rows, 4 stages); 16-token blocks 138.6 -> 129.6 (4 stages). Layer probes (call 5, 30b, us, Triton /
# "_c2" / Triton): squared ReLU 192 tokens 298.0 / 279.9 / 297.2 and 256 tokens 305.5 / 291.7 / 304.7
# (``m32k_sx4p_f4_t16_g_s2_gt_n64_c2``), 384 tokens 323.3 / 315.5 / 324.4 (``m32k_sx4p_f4_g_s2_n64_c2``); SwiGLU 192 /
# 256 tokens 213.9 / 207.7 / 215.3, 231.5 / 227.3 / 231.6 (``m32l4_sx4p_m_t16_gg_s2_gt_n64_c2``), 384 tokens 263.0 /
# 264.8 / 264.6 (no gain: stays Triton); 16-token tiles (Gluon "_n64" / "_c2" / "_c2_st4" / "_n64"): squared ReLU 64
# tokens 265.2 / 260.4 / 258.1 / 266.9, 128 tokens 277.8 / 272.3 / 269.7 / 275.7; SwiGLU 196.6 / 194.2 / 194.2 / 195.4
# and 205.9 / 202.8 / 203.2 / 205.1; 235b SwiGLU 64 tokens 680.1 / 676.9 ("_c2_st4") / 691.2, 256 tokens 799.4 / 798.0
# / 806.6. Their GPU tests passed (float64 oracle on both shapes, 20 fresh calls each against the one-chain form, graph
# replays): the twins of ``_GLUON_BY_DEFAULT`` at 1.5-16 pairs per expert and, squared ReLU, 16-28.
def _chained(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc2_chains=2`` on its Gluon FC2 launches (main tile and, if its FC2 is Gluon, the tail)."""
    tail = cfg.tail if cfg.tail is None or not cfg.tail.fc2_gluon else dataclasses.replace(cfg.tail, fc2_chains=2)
    return dataclasses.replace(cfg, tail=tail, fc2_chains=2)


TILES.update({f"{name}_c2": _chained(TILES[name]) for name in (
    "s16k4_sx4p_m3_g_s2_n64", "s16k_sx4p_f4_g_s2_n64", "m32k_sx4p_f4_t16_g_s2_gt", "m32l4_sx4p_m_t16_gg_s2_gt",
    "l64_sx4p_mu_t32_gg_s2_gt", "l64k2_sx4p_f4_t32_gq_s2_gt")})
TILES.update({f"{name}_n64_c2": _chained(replace_launch_tiles(TILES[name], fc2_block_n=64)) for name in (
    "m32k_sx4p_f4_t16_g_s2_gt", "m32l4_sx4p_m_t16_gg_s2_gt", "m32k_sx4p_f4_g_s2", "m32l4_sx4p_m_gg_s2")})
TILES.update({f"{name}_c2_st4": dataclasses.replace(TILES[f"{name}_c2"], fc2_stages=4) for name in (
    "s16k4_sx4p_m3_g_s2_n64", "s16k_sx4p_f4_g_s2_n64")})
# Session 28: "_nov", the main tile's Gluon kernels without the step overlap (``fc1_overlap`` / ``fc2_overlap`` False
# where that FC is Gluon; the tail keeps it): each K step's MMAs are waited for before the next step's dequant, one
# register set, more programs per SM; the same values in the same order, so the bits of the tile without "_nov".
# Kernel probes (run 31 call 1, bench/gluon_fc1_probe.py / gluon_fc2_probe.py, us, overlap / none): gated FC1 at
# 32-token blocks 149.5 / 135.0 (30b), 530.5 / 486.7 (235b; Triton 575.5); the 64-row two-chain FC2 at 32-token
# blocks 148.8 / 141.3; at 16-token blocks (FC2 127.1 / 133.4) and 64-token blocks (FC1 179.6 / 187.6) slower. Layer
# probes (us, tile / "_nov" / tile): SwiGLU 8-16 pairs per expert (``m32l4_sx4p_m_t16_gg_s2_gt_n64_c2``) 30b 160
# tokens 205.8 / 204.4 / 204.7, 192 206.4 / 205.8 / 208.3, 256 223.8 / 211.3 / 224.6, 235b 192 733.9 / 720.0 / 742.1,
# 256 813.0 / 769.3 / 797.4; 16-28 (``m32l4_sx4p_m_gg_s2``, until now opt-in: the Triton ``m32l4_sx4p_m_s2`` was the
# default) 30b 384 tokens 255.6 / 229.1, Triton 263.2. Squared ReLU (FC2 only; ``m32k_sx4p_f4_t16_g_s2_gt_n64_c2``)
# mixed, not taken: 30b 160 / 192 / 256 tokens 269.3 / 269.4 / 271.6, 276.5 / 274.3 / 276.5, 290.5 / 283.5 / 288.6,
# 235b 192 991.8 / 990.8 / 1022.7, 256 1048.8 / 1097.4 / 1044.7; 384 tokens (``m32k_sx4p_f4_g_s2_n64_c2``) 306.2 /
# 305.9 / 312.3.
def _no_overlap(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with its main tile's Gluon FC1 / FC2 run without the step overlap (the tail unchanged)."""
    return dataclasses.replace(cfg, fc1_overlap=not cfg.fc1_gluon, fc2_overlap=not cfg.fc2_gluon)


TILES.update({f"{name}_nov": _no_overlap(TILES[name]) for name in (
    "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2", "m32l4_sx4p_m_gg_s2")})
# ... and "_f1q": the squared-ReLU 16- / 32-token tiles with the Gluon FC1 on 128 rows (4 warps, two m64 chains, 3
# stages; the main tile only) without the overlap, in place of the Triton FC1 (256-deep K). Layer probes (run 31 call
# 4, us, tile / "_f1q" / tile): 30b 64 tokens 252.6 / 242.3 / 249.8, 256 tokens 288.0 / 273.3 / 284.9; 235b 256
# tokens 1015.2 / 1025.6 / 1036.5; with 64 FC1 rows 244.9 (30b 64), 280.6 (30b 256), 1039.9 (235b 256); 128 rows with
# the overlap 282.3 (30b 256).
TILES.update({f"{name}_f1q": dataclasses.replace(TILES[name], **_GLUON_SQ_FC1_TILE, fc1_overlap=False) for name in (
    "s16k_sx4p_f4_g_s2_n64_c2_st4", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2")})
# Session 29: "_sw", the tiles above with ``scale_words`` on every launch tile that runs a Gluon FC (main and tail):
# a row's 4 E8M0 bytes of a 128-deep K step read as one int32, the same factors, so the same bits (GPU tests
# ``test_scale_words_*``, run 32 call 1: choose_config's Gluon picks at 64 / 256 / 384 / 640 tokens (30b) and 200
# (235b), both activations, and with E8M0 bytes > 134). Kernel probes (run 32 call 1, us, per-byte / words): gated FC1
# at 32-token blocks 132.9 / 127.0 (30b), 477.4 / 457.2 (235b); squared-ReLU FC1 on 128 rows 133.0 / 125.3; FC2 (30b)
# 64 rows two chains without the overlap 137.4 / 133.2, 128 rows at 64-token blocks 174.7 / 166.1. Layer probes (call
# 2, 30b, us, tile / main tile with words / tile): SwiGLU 64 tokens 191.8 / 189.2 / 191.6, 256 211.7 / 208.2 / 212.2,
# 384 230.8 / 222.1 / 233.8; squared ReLU 64 248.1 / 236.2 / 247.5, 256 279.8 / 285.7 / 283.5 (the one loss); 235b 256
# tokens squared ReLU 1059.8 / 1039.2 / 1102.1. The FC2 ring loop (``fc2_ring``) gained nothing in the layer: SwiGLU
# 256 tokens 211.9 (ring) and 208.4 (ring and words), 384 233.2 / 223.0; it stays opt-in.
def _word_scaled(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``scale_words`` on each launch tile (main, tail) that runs a Gluon FC."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, scale_words=True)
                            if tile.fc1_gluon or tile.fc2_gluon else tile)


# Triton tile -> its Gluon twin, picked where H and I tile by 128 and GLUON_ENV allows it (``_tile``). Session 21
# (run 24, bench/gluon_tail_race_probe.py, 150 fresh inputs per case bit-compared with the Triton form): every tile
# with a 64-token Gluon kernel wrote one FC2 CTA's outputs (128 columns of every token of one block) as NaN in 3-5%
# of calls: gated 512 / 640 / 1024 tokens 7 / 7 / 7 of 150 (1024 also on one stream),
# squared ReLU 512 / 640 5 / 6 of 150, the 128-token tiles with Gluon 64-token tails 1-3 of 30, a fence after the
# mbarrier init changed nothing; their Triton forms 0 of 150 (gated 640 / 1024, squared ReLU 640). The 64-token
# Gluon tiles were therefore taken out of the package (``_GLUON_BASES``). The 16- / 32-token ones (64 and 256 tokens: 0 of
# 150 each) stay behind the switch. The SASS of those kernels shows the likely cause in every configuration: the next
# step's dequant overwrote the registers that the previous step's in-flight register-A wgmmas still read. Session 21
# rewrote both Gluon kernels with two register sets (the CPU compile test checks the SASS). Session 22 (run 25): that
# form passed the race probe (0 of 300 calls in 9 cases) and the Gluon GPU tests, and the 64-token twins came back
# (above). Session 23 (run 26): choose_config's picks at 512 / 640 / 1024 tokens kept the bits of their Triton forms
# (GPU tests, 40 fresh calls at 640), the race probe found 0 of 300 bad calls at 512 / 640 on both activations, and
# they are faster (run 25, us per layer, Triton / Gluon, 30b / 235b: 640 tokens SwiGLU 353.6 / 300.3, 1234.5 /
# 1109.4, squared ReLU 454.4 / 410.0, 1654.3 / 1556.9; 1024 tokens 1-5%; run 26's full benchmark at 1024 tokens
# SwiGLU 396.9 / 1429.8, squared ReLU 503.5 / 1890.8 against run 24's Triton 410.6 / 1504.0, 530.9 / 2015.6): they
# are on by default (``_GLUON_BY_DEFAULT``), as are the 16-token twins with 64-row FC2 programs (below). The 32-token
# twins gained nothing (run 25) until session 26's two-chain FC2 ("_c2", above): since then the 16- and 32-token
# twins sum their FC2 on two chains (not the Triton forms' bits: ``same_bits_as_triton_form``), and the 32-token ones
# are defaults too, except the gated tile without tails (16-28 pairs per expert), opt-in until session 28 took its
# form without the step overlap ("_nov"); the gated 8-16 tile is "_nov" too since then. Since session 29 every twin
# reads its scales as words ("_sw", below).
_GLUON_TWINS = {
    "s16k4_sx4p_m3_s2": "s16k4_sx4p_m3_g_s2_n64_c2_st4",
    "s16k_sx4_f4": "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q",
    "m32l4_sx4p_m_t16_s2": "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov",
    "m32k_sx4p_f4_t16_s2": "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q",
    "m32l4_sx4p_m_s2": "m32l4_sx4p_m_gg_s2_nov",
    "m32k_sx4p_f4_s2": "m32k_sx4p_f4_g_s2_n64_c2",
    "l64_sx4p_mu_t32_s2": "l64_sx4p_mu_t32_gg_s2_gt",
    "l64k2_sx4p_f4_t32_s2": "l64k2_sx4p_f4_t32_gq_s2_gt",
    "l64_sx4p_mu_s2": "l64_sx4p_mu_gg_s2",
    "l64k2_sx4p_f4_s2": "l64k2_sx4p_f4_gq_s2",
    "l128m_sa_t64pu_s2": "l128m_sa_t64pu_s2_gt",
    "l128w_sa_t64p2_s2": "l128w_sa_t64p2_s2_gt",
}
TILES.update({f"{twin}_sw": _word_scaled(TILES[twin]) for twin in _GLUON_TWINS.values()})
_GLUON_TWINS = {name: f"{twin}_sw" for name, twin in _GLUON_TWINS.items()}


def _one_factored(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc1_one_factor`` / ``fc2_one_factor`` on each Gluon FC of each launch tile (scale words on)."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, fc1_one_factor=tile.fc1_gluon,
                                                                  fc2_one_factor=tile.fc2_gluon))


# Session 29 (run 33: bit-equal, no layer gain; tools/gpu_next.sh s30a): "_of", the default twins with one scale factor
# in every program whose E8M0 bytes are all below 128 (``fc1_one_factor`` / ``fc2_one_factor``; the same bits)
TILES.update({f"{twin}_of": _one_factored(TILES[twin]) for twin in _GLUON_TWINS.values()})
# ... the squared-ReLU "_f1q" FC1 (128 rows, no overlap) under a 128-register cap: 4 programs per SM as without one
# factor (ptxas -v, Triton 3.6, 32-token blocks: 159 registers uncapped; capped 128 and no spills, one iteration 925
# instructions against 1151 with scale words)
for _twin in ("s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw"):
    TILES[f"{_twin}_of"] = dataclasses.replace(TILES[f"{_twin}_of"], fc1_maxnreg=128)


def ws_shared_bytes(block_t: int, block_k: int, stages: int, dstages: int = 2, block_n: int = 128,
                    persistent: bool = False, wstages: int = 0) -> int:
    """Shared memory of one ``_gluon_ws_kernel`` program's rings: ``stages`` bf16 token tiles ``[block_t, block_k]``,
    ``wstages`` (0: ``2 * stages``) fp8 weight tiles and ``dstages`` bf16 weight tiles ``[block_n, block_k]``;
    ``persistent``: and 8 KiB for the epilogue's layout conversion beside the live rings (4 KiB at 128 x 256 with
    Triton 3.6 and 3.8)."""
    rings = (stages * block_t * block_k * 2 + (wstages or 2 * stages) * block_n * block_k
             + dstages * block_n * block_k * 2)
    return rings + (8 * 1024 if persistent else 0)


def _ws_forms(cfg: TritonMoEConfig) -> dict:
    """The ws launchers' keyword arguments for ``cfg``'s forms of the warp-specialized FCs (the same for FC1 and FC2)."""
    return dict(sx=cfg.ws_sx, thread_arrive=cfg.ws_thread_arrive, staged_epilogue=cfg.ws_staged_epilogue,
                persistent=cfg.ws_persistent, dstages=cfg.ws_dstages, wstages=cfg.ws_wstages,
                prefetch=cfg.ws_prefetch)


def _dependent_launched(cfg: TritonMoEConfig) -> TritonMoEConfig:
    """``cfg`` with ``fc2_pdl`` on each launch tile whose FC2 is Gluon."""
    return map_launch_tiles(cfg, lambda tile: dataclasses.replace(tile, fc2_pdl=tile.fc2_gluon))


# Session 30 (run 33: bit-equal, no layer gain; tools/gpu_next.sh s30c): "_pdl", the default twins with each Gluon FC2 a
# programmatic dependent launch of its FC1 (``fc2_pdl``; the same bits)
TILES.update({f"{twin}_pdl": _dependent_launched(TILES[twin]) for twin in _GLUON_TWINS.values()})

# Session 39 (first run in session 40, run 43: tools/gpu_next.sh s40a-s40f): the MMA-bound defaults (72+ pairs per
# expert) with the warp-specialized FC2 (``fc2_ws``) on their main tile, "_ws"; FC1s and tails unchanged
TILES.update({f"{name}_ws": dataclasses.replace(TILES[name], fc2_ws=True)
              for name in ("x256w_sa_t32a", "x256m_sa_t32", "l128w_sa_t32a_s2", "l128m_sa_t32_s2")})
# and for squared ReLU (ungated) the warp-specialized FC1 (``fc1_ws``) alone, "_ws1", and both FCs, "_wsb"
TILES.update({f"{name}_{suffix}": dataclasses.replace(TILES[name], fc1_ws=True, fc2_ws=suffix == "wsb")
              for name in ("x256w_sa_t32a", "l128w_sa_t32a_s2") for suffix in ("ws1", "wsb")})
# and "_wsb_k32": both at 32-deep K steps in 4 stages (a second point for the first GPU probes: half the shared memory
# per stage, twice the handoffs)
TILES["x256w_sa_t32a_wsb_k32"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb"], fc1_block_k=32, fc1_stages=4,
                                                     fc2_block_k=32, fc2_stages=4)
# Session 40 (run 43 call 2: the "_ws" / "_wsb" tiles correct but no faster at 4096 tokens): "_s4", their rings at 4
# stages (224 KiB of shared memory at 256 tokens with the weight ring at 8: ``ws_shared_bytes``): more copies in flight
TILES["x256w_sa_t32a_ws_s4"] = dataclasses.replace(TILES["x256w_sa_t32a_ws"], fc2_stages=4)
TILES["x256w_sa_t32a_wsb_s4"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb"], fc1_stages=4, fc2_stages=4)
# Session 40 (run 43 call 5, one H100, the weight ring split from the token ring, squared ReLU, 4096 tokens, us per
# layer, the default / "_wsb_s4" per pair of runs): 235b 4938.2 / 4565.7 and 5010.1 / 4580.4 (7.5-8.6% faster), 30b
# 1331.8 / 1312.8 and 1328.7 / 1334.8 (a tie); "_ws" (FC2 only) 3.3-4.6% / 1.6-2.3% faster; SwiGLU "_ws" 0-5% slower.
# So from 176 pairs per expert the squared-ReLU pick is "_wsb_s4" where H and I tile by 128 (``GLUON_ENV`` as for the
# Gluon twins; not in ``_GLUON_TWINS``: its bits are not the Triton tile's, it is held to the float64 oracle).
# Session 42 (run 45, one H100, 4096 tokens, us per layer, two rounds in one call): the persistent ws FCs ("_p", one
# program per SM over the tiles) against the defaults: squared ReLU "_wsb_p" 4121.5 / 4310.3 against "_wsb_s4" 4421.4 /
# 4456.3 on 235b (-5.0%), 1152.7 / 1182.5 against 1286.1 / 1287.4 on 30b (-9.3%); SwiGLU "x256m_sa_t32_ws_p" (FC2 only)
# 3555.8 / 3616.2 against 3703.8 / 3859.8 (-5.2%) and 1002.0 / 1016.4 against 1041.4 / 1040.4 (-3.0%). So from 176 pairs
# per expert both activations take them.
# Session 43 (run 46, one H100, SwiGLU, us per layer, two rounds in one call): the gated ws FC1 too ("_wsb_p") against
# the FC2-only "_ws_p": 4096 tokens 3245.1 / 3278.8 against 3525.8 / 3600.8 on 235b (-8.5%), 935.4 / 928.3 against
# 998.2 / 999.9 on 30b (-6.7%); 2816 tokens (176 pairs per expert) 2625.2 / 2637.0 against 2900.4 / 2934.4 (-9.8%),
# 748.4 / 746.9 against 824.5 / 823.1 (-9.2%), where the 128-token default "l128m_sa_t32_s2" took 3282.9 / 881.3. At
# 2048 tokens "l128m_sa_t32_s2" stays faster (2397.2 / 638.9 against 2494.5 / 734.2), so the threshold stays.
_WS_TWINS = {"x256w_sa_t32a": "x256w_sa_t32a_wsb_p", "x256m_sa_t32": "x256m_sa_t32_wsb_p"}
# and "_sx" (session 40): the producers' dequant by moving bits (``ws_sx``), on the default and on the FC2-only tile of
# both activations. Run 44 (H100, 4096 tokens): correct (GPU tests passed) but slower, squared ReLU +7.4-7.8% against
# "_wsb_s4", SwiGLU +2-3% against "_ws" (likely: the producer is not the limit, and the scan before the first step
# adds to each program's start). Opt-in only.
TILES.update({f"{name}_sx": dataclasses.replace(TILES[name], ws_sx=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256w_sa_t32a_ws_s4", "x256m_sa_t32_ws")})
# and "_ta" (session 41, prepared, compile-checked only; tools/gpu_next.sh s42c): the consumers' stage release by one
# arrival per thread (``ws_thread_arrive``), on the squared-ReLU default and on SwiGLU's FC2-only tile
TILES.update({f"{name}_ta": dataclasses.replace(TILES[name], ws_thread_arrive=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256m_sa_t32_ws")})
# and "_se" (session 41, prepared, compile-checked only; s42c): the epilogue tile staged whole in shared memory
# (``ws_staged_epilogue``), on the same two tiles, and "_ta_se" with both
TILES.update({f"{name}_se": dataclasses.replace(TILES[name], ws_staged_epilogue=True)
              for name in ("x256w_sa_t32a_wsb_s4", "x256m_sa_t32_ws")})
TILES["x256w_sa_t32a_wsb_s4_ta_se"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4_ta"], ws_staged_epilogue=True)
# and "_p" (session 41, prepared, compile-checked only; s42c): the persistent ws FCs (``ws_persistent``) at 3 token
# stages (the 4-stage rings leave no room for the epilogue's scratch), on both activations' ws tiles; "_p_ta" with the
# per-thread stage release
TILES.update({f"{name}_p": dataclasses.replace(TILES[name], ws_persistent=True)
              for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws")})
TILES["x256w_sa_t32a_wsb_p_ta"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_p"], ws_thread_arrive=True)
# and "_d3" (session 42, prepared, compile-checked only; s42e): 3 bf16 weight stages (``ws_dstages``), so the producer
# may run two steps ahead of the consumers' MMA; the 4-stage default keeps its 224 KiB with 6 fp8 weight stages, the
# 3-stage tiles take 6 as before (192 KiB)
TILES["x256w_sa_t32a_wsb_s4_d3"] = dataclasses.replace(TILES["x256w_sa_t32a_wsb_s4"], ws_dstages=3, ws_wstages=6)
TILES.update({f"{name}_d3": dataclasses.replace(TILES[name], ws_dstages=3)
              for name in ("x256w_sa_t32a_wsb", "x256m_sa_t32_ws")})
# and SwiGLU's "_wsb" / "_wsb_p" (session 43; run 46: float64 and graph tests passed, "_wsb_p" the SwiGLU default
# from 176 pairs per expert, ``_WS_TWINS``): the gated warp-specialized FC1 too (``fc1_ws`` with ``fc1_block_n`` 64:
# each tile's 64 gate rows and their 64 up rows, the producer's bf16 rows interleaved so that one consumer thread holds
# both halves of an output), beside the ws FC2
TILES["x256m_sa_t32_wsb"] = dataclasses.replace(TILES["x256m_sa_t32_ws"], fc1_ws=True, fc1_gate_merge=False)
TILES["x256m_sa_t32_wsb_p"] = dataclasses.replace(TILES["x256m_sa_t32_wsb"], ws_persistent=True)
# and "_p_s4" (session 43, prepared, compile-checked only; tools/gpu_next.sh s44b): the persistent defaults at 4 token
# stages, which fit beside the epilogue's scratch with 6 fp8 weight stages (216 KiB by ``ws_shared_bytes``, 212 KiB
# compiled); one-tile 4 against 3 stages was a tie in run 45
TILES.update({f"{name}_s4": dataclasses.replace(TILES[name], fc1_stages=4, fc2_stages=4, ws_wstages=6)
              for name in ("x256w_sa_t32a_wsb_p", "x256m_sa_t32_wsb_p")})
# Run 47 (session 44, one H100): "_p_s4" against the 3-stage defaults at 4096 tokens, two rounds: squared ReLU 235b
# 4150.9 / 4266.7 against 4099.5 / 4204.4 (+1.3%), 30b 1155.1 / 1173.8 against 1159.4 / 1158.5; SwiGLU 235b 3276.5 /
# 3329.1 against 3267.3 / 3286.5, 30b 933.9 / 943.7 against 935.8 / 959.5 (a tie). Their bit tests passed. Not adopted.
# Session 44: "_pf", the persistent defaults with ``ws_prefetch`` (each tile's last steps issue the next tile's first
# copies), and the persistent ws FCs on decode-sized token blocks ("w16_wsb_pf" ...: squared ReLU, "m16_wsb_pf" ...:
# SwiGLU; 16 / 32 / 64 tokens, no tail, 4 token stages, 12 fp8 weight stages): at 16-256 tokens the layer streams
# weights and each program's tiles are short (30b squared ReLU FC1: 32 steps of 8 KiB), so a deep ring that runs on
# across tiles, with the dequant off the MMA warps, might keep more bytes in flight than the Gluon decode kernels
# (78-86% of the read roofline at 64 tokens). Run 47 call 3 (one H100; 12 GPU tests passed: the same bits with and
# without the prefetch, float64, graph replays), us per layer: the decode tiles 1.8-1.9x the defaults' time at 16 / 64
# tokens (30b squared ReLU at 16 tokens 353.2 against 196.4, without the prefetch 373.9; 235b 1301.1 against 720.3),
# 1.6-1.8x at 256 on 32-token blocks; "_pf" at 4096 tokens -0.4% to +1.8% against the persistent defaults. Opt-in.
TILES.update({f"{name}_pf": dataclasses.replace(TILES[name], ws_prefetch=True)
              for name in ("x256w_sa_t32a_wsb_p", "x256m_sa_t32_wsb_p")})
TILES.update({f"{act}{block_t}_wsb_pf": dataclasses.replace(
    TILES[f"{base}_pf"], block_t=block_t, tail=None, fc1_stages=4, fc2_stages=4, ws_wstages=12)
    for act, base in (("w", "x256w_sa_t32a_wsb_p"), ("m", "x256m_sa_t32_wsb_p")) for block_t in (16, 32, 64)})
# Run 47 call 4 (one H100, 30b squared ReLU, us per layer at 16 / 64 tokens; the default 196.8 / 293.6): "w16_wsb_pf"
# 363.7 / 547.5; with 4 bf16 stages 355.2 / 528.4; with 8 producer warps and one consumer warpgroup (a
# ``ws_producer_warps`` field, since removed) 379.8 / 569.0, both 373.9 / 557.4. So neither the producer's dequant nor
# its 2-stage handoff held the decode ws tiles to half the HBM rate. bench/results/run47/decode_ws_forms.patch restores
# these forms.


def _f8x2_fc1(tile: TritonMoEConfig, **changes) -> TritonMoEConfig:
    """``tile`` (a plane tile) with the Gluon f8x2 FC1 (``fc1_f8x2``; 128 rows, 3 stages unless ``changes`` say
    otherwise: gated tiles take ``fc1_block_n=64``, 64 gate rows and their 64 up rows)."""
    return dataclasses.replace(tile, **{**_GLUON_SQ_FC1_TILE, **changes}, fc1_f8x2=True)


# Session 32: the squared-ReLU default twins with the Gluon f8x2 FC1 (``fc1_f8x2``) in place of the dequantizing Gluon
# FC1, their FC2 unchanged. Run 35 call 1 (the "_g1" f8x2 tiles, 30b, 64 tokens, per-kernel profile): the f8x2 FC1
# took 104.8 us against the dequantizing "_f1q" FC1's 111.3, but the f8x2 FC2 136.6 against 118.1. "_f1x": on the main
# tile; "_f1x64": 64 rows in 4 stages; "_f1xt": on the 16-token tail only; "_f1xa": on both.
_SQ_TWIN16, _SQ_TWIN32 = "s16k_sx4p_f4_g_s2_n64_c2_st4_f1q_sw", "m32k_sx4p_f4_t16_g_s2_gt_n64_c2_f1q_sw"
TILES.update({
    f"{_SQ_TWIN16}_f1x": _f8x2_fc1(TILES[_SQ_TWIN16]),
    f"{_SQ_TWIN16}_f1x64": _f8x2_fc1(TILES[_SQ_TWIN16], fc1_block_n=64, fc1_stages=4),
    f"{_SQ_TWIN32}_f1x": _f8x2_fc1(TILES[_SQ_TWIN32]),
    f"{_SQ_TWIN32}_f1x64": _f8x2_fc1(TILES[_SQ_TWIN32], fc1_block_n=64, fc1_stages=4),
    f"{_SQ_TWIN32}_f1xt": dataclasses.replace(TILES[_SQ_TWIN32], tail=_f8x2_fc1(TILES[_SQ_TWIN32].tail)),
    f"{_SQ_TWIN32}_f1xa": map_launch_tiles(TILES[_SQ_TWIN32], _f8x2_fc1),
})
# Run 35 call 2 (layer probes alternating with the "_sw" twin, us, twin / f8x2 FC1 per pair of runs; the GPU tests of
# all 5 passed: float64 oracle at 64 / 256 tokens (30b) and 64 (235b), graph replays, the gated refusal): "_f1x" at 64
# tokens 30b 238.9 / 233.2 and 240.2 / 235.7, 235b 908.8 / 884.3 and 925.3 / 953.8, at 128 tokens (30b) 249.3 / 248.1
# and 250.2 / 249.0 ("_f1x64" slower: 242.6 / 245.2, 944.6 / 948.8); "_f1xt" at 256 tokens 30b 271.1 / 266.8 and
# 276.1 / 267.6, 235b 1043.0 / 1015.2 and 1080.0 / 1053.3 ("_f1x" on the 32-token main tile slower: 277.5 / 282.6,
# 1084.5 / 1111.0; "_f1xa" 272.5 / 270.6, 1060.0 / 1075.0). Per-kernel profile (30b): at 64 tokens FC1 111.3 -> 105.4
# us (FC2 117.8 / 119.1); at 256 tokens the f8x2 FC1 at 32-token blocks took 76.1 us against the dequantizing 63.4.
# Since session 32 the squared-ReLU twins of 1.5-8 and 8-16 pairs per expert (``_GLUON_TWINS``).
_GLUON_TWINS.update({"s16k_sx4_f4": f"{_SQ_TWIN16}_f1x", "m32k_sx4p_f4_t16_s2": f"{_SQ_TWIN32}_f1xt"})
# ... and the gated twins with the gated Gluon f8x2 FC1 (session 32: 64 gate rows and their up rows per program, two
# TMA boxes per stage, 126 registers at 16-token blocks with Triton 3.6): "_f1x" on the 16-token tile, "_f1xt" on the
# 32-token tile's 16-token tail, "_f1xa" on both (252 registers at 32-token blocks)
_GW16, _GW32 = "s16k4_sx4p_m3_g_s2_n64_c2_st4_sw", "m32l4_sx4p_m_t16_gg_s2_gt_n64_c2_nov_sw"
TILES.update({
    f"{_GW16}_f1x": _f8x2_fc1(TILES[_GW16], fc1_block_n=64),
    f"{_GW32}_f1xt": dataclasses.replace(TILES[_GW32], tail=_f8x2_fc1(TILES[_GW32].tail, fc1_block_n=64)),
    f"{_GW32}_f1xa": map_launch_tiles(TILES[_GW32], lambda tile: _f8x2_fc1(tile, fc1_block_n=64)),
})
# Run 36 call 2 (tools/gpu_next.sh s33b; the 13 GPU tests passed: float64 oracle, graph replays, the 128-row refusal):
# layer probes alternating with the twin, us, twin / f8x2 FC1 per pair of runs: "_f1x" at 64 tokens 30b 190.4 / 181.5
# and 189.2 / 180.2, 235b 652.4 / 622.1 and 655.7 / 668.7; "_f1xt" at 256 tokens 30b 203.0 / 198.6 and 203.4 / 197.6,
# 235b 728.3 / 707.5 and 760.7 / 712.1 ("_f1xa" slower: 210.3 / 210.5, 758.8 / 786.5). Per-kernel profile (30b, 64
# tokens): the Triton gated FC1 114.9 us, the gated Gluon f8x2 FC1 103.4 (FC2 63.3 / 63.7). Since session 33 the gated
# twins of 1.5-8 and 8-16 pairs per expert.
_GLUON_TWINS.update({"s16k4_sx4p_m3_s2": f"{_GW16}_f1x", "m32l4_sx4p_m_t16_s2": f"{_GW32}_f1xt"})
# Session 35 (prepared, compile-checked only; tools/gpu_next.sh s36a): "_g128", one token scale per 128-value step
# (``step_scales``) on the f8x2 FC1 of the default twins (both activations; the 32-token twins' 16-token tails) and
# on both FCs of "_f128_st"
TILES.update({f"{name}_g128": map_launch_tiles(
    TILES[name], lambda tile: dataclasses.replace(tile, step_scales=_reads_x_split(tile)))
    for name in (f"{_SQ_TWIN16}_f1x", f"{_GW16}_f1x", f"{_SQ_TWIN32}_f1xt", f"{_GW32}_f1xt",
                 "s16_f8q_s2_gf_g1_f128_st")})
# The Triton tiles whose Gluon twins ``choose_config`` picks by default: 1.5-8 pairs per expert (the 16-token tiles;
# from 1 pair per expert, in place of q1, since session 34; Gluon FC2 on 64 rows: run 26 probes above, 0 of 300 bad
# calls at 64 / 100 tokens; two chains and 4 stages since session 26), 8-16 (the 32-token tiles with 16-token tails,
# session 26), 16-28 (squared ReLU since session 26, gated since session 28) and 28-72 (the 64-token tiles and the
# 128-token tiles' 64-token tails). Since session 28 the gated 8-28 twins are "_nov" and the squared-ReLU 1.5-16 ones
# "_f1q"; since sessions 32 / 33 the 1.5-16 twins of both activations run the Gluon f8x2 FC1 ("_f1x" / "_f1xt", above).
_GLUON_BY_DEFAULT = frozenset({"s16k4_sx4p_m3_s2", "s16k_sx4_f4", "m32l4_sx4p_m_t16_s2", "m32k_sx4p_f4_t16_s2",
                               "m32l4_sx4p_m_s2", "m32k_sx4p_f4_s2", "l64_sx4p_mu_t32_s2", "l64k2_sx4p_f4_t32_s2",
                               "l64_sx4p_mu_s2", "l64k2_sx4p_f4_s2", "l128m_sa_t64pu_s2", "l128w_sa_t64p2_s2",
                               "x256w_sa_t32a", "x256m_sa_t32"})
# Environment switch for the Gluon twins (``_GLUON_TWINS``), used where H and I are multiples of 128: unset, empty
# or "auto" (the default): the twins of ``_GLUON_BY_DEFAULT`` only, and only with the Triton that ran them on a GPU
# (``_GPU_TESTED_TRITON``; other versions compile them in the CPU tests at most); "1" / true / yes / on / all: every
# twin, with any Triton; "0" / false / no / off: none (Triton tiles only). A call whose Gluon tile cannot run here
# (``_gluon_problem``: no GPU, no Gluon, odd shapes) runs ``choose_config(..., gluon=False)``.
GLUON_ENV = "MEGATRON_MXFP8_MOE_GLUON"
_GLUON_POLICIES = {"": "auto", "auto": "auto", "1": "all", "true": "all", "yes": "all", "on": "all", "all": "all",
                   "0": "off", "false": "off", "no": "off", "off": "off"}


def gluon_policy() -> str:
    """Which Gluon twins ``choose_config`` may pick, from ``GLUON_ENV``: "auto" (unset: ``_GLUON_BY_DEFAULT``),
    "all" or "off". Raises ValueError for any other value."""
    value = os.environ.get(GLUON_ENV, "").strip().lower()
    if value not in _GLUON_POLICIES:
        raise ValueError(f"{GLUON_ENV}={os.environ[GLUON_ENV]!r}: expected auto (the default, also unset), "
                         "1 / true / yes / on / all, or 0 / false / no / off")
    return _GLUON_POLICIES[value]


@functools.lru_cache(maxsize=None)
def _gpu_tested_triton() -> bool:
    """Whether the installed Triton is the one every GPU run used (``_GPU_TESTED_TRITON``): "auto" takes the Gluon
    twins (an experimental Triton API) only there."""
    try:
        import triton
    except ImportError:
        return False
    return _major_minor(triton.__version__) == _GPU_TESTED_TRITON


def _tile(name: str, hidden: int, intermediate: int, gluon: Optional[bool] = None) -> TritonMoEConfig:
    """``TILES[name]`` (a Triton tile), or where H and I tile by 128 its Gluon twin (``_GLUON_TWINS``, or
    ``_WS_TWINS``: the warp-specialized FCs): with ``gluon`` True every twin, False none, None as ``gluon_policy()``
    says (by default those of ``_GLUON_BY_DEFAULT``, and only with the GPU-tested Triton)."""
    twins = _WS_TWINS if name in _WS_TWINS else _GLUON_TWINS
    if hidden % 128 or intermediate % 128 or name not in twins or gluon is False:
        return TILES[name]
    if gluon is None:
        policy = gluon_policy()
        gluon = policy == "all" or (policy == "auto" and name in _GLUON_BY_DEFAULT and _gpu_tested_triton())
    return TILES[twins[name]] if gluon else TILES[name]


# Pairs per expert below which the routed GEMV q1 runs rather than the 16-token Gluon twins with the f8x2 FC1.
_Q1_BELOW_TWIN_PAIRS = 1.0
# Session 36 (run 39 layer probes, us, squared ReLU, the 16-token twin / the all-f8x2 "_f128_st" per pair of runs):
# on 235b (H 4096) "_f128_st" is faster at every token count of the twin's range, at 16 tokens 533.4 / 522.4 and 531.6
# / 523.2, 32 725.7 / 695.6 and 729.7 / 699.3, 64 838.6 / 803.0 and 869.8 / 805.8, 128 874.2 / 834.2 and 926.7 /
# 838.1; on 30b (H 2048) slower, 16 158.8 / 164.1 and 159.0 / 164.5, 32 207.8 / 211.0, 64 227.9 / 233.3, 128 240.3 /
# 246.4. Its f8x2 FC2 saves 2.5 us on 30b (112.0 / 114.5 at 64 tokens) and about 25 on 235b (run 38), against about 6
# us on 30b for the launch that splits FC1's rows for it. From H 4096 the squared-ReLU 16-token pick is therefore
# "_f128_st" wherever its twin is picked. Session 37 (run 40, the same pairs of runs, squared ReLU): H 3072 / I 1152
# 312.3 / 313.0 and 312.3 / 312.4 at 16 tokens, 482.4 / 467.5 and 483.6 / 469.2 at 64, 506.7 / 488.4 and 506.9 /
# 489.1 at 128; H 7168 / I 1024 3-10% faster, 8 experts top-2 (H 4096 / I 7168) 1-12% faster at 4-32 tokens. So the
# cut is H 3072 (between 30b's 2048, slower, and 3072, a tie at 16 tokens and 3-4% faster from 64).
_ALL_F8X2_16, _ALL_F8X2_FROM_HIDDEN = "s16_f8q_s2_gf_g1_f128_st", 3072
# Below one pair per expert q1 against "_f128_st" (235b squared ReLU, us, q1 / "_f128_st" per pair of runs): run 39
# 8 tokens 338.4 / 362.7, 336.9 / 363.0, 10 416.8 / 422.6, 418.0 / 423.4, 12 480.6 / 485.7, 486.0 / 464.3; run 40 12
# tokens 469.9 / 446.1, 472.9 / 447.1, 13 510.5 / 485.3, 511.6 / 485.9, 14 575.3 / 504.8, 549.3 / 506.6. So q1 keeps
# less than 0.75 pairs per expert where "_f128_st" is the 16-token pick.
_Q1_BELOW_ALL_F8X2_PAIRS = 0.75


def _sixteen_token_tile(gated: bool, hidden: int, intermediate: int, gluon: Optional[bool]) -> TritonMoEConfig:
    """The 16-token tile of 1-8 pairs per expert (and below, down to where q1 keeps the pairs): the Gluon twin with
    the f8x2 FC1 where ``_tile`` picks it (squared ReLU from H ``_ALL_F8X2_FROM_HIDDEN``: the all-f8x2 "_f128_st" in
    its place), else the Triton tile."""
    small = _tile("s16k4_sx4p_m3_s2" if gated else "s16k_sx4_f4", hidden, intermediate, gluon)
    if not gated and small.fc1_f8x2 and hidden >= _ALL_F8X2_FROM_HIDDEN:
        return TILES[_ALL_F8X2_16]
    return small


def choose_config(rows: int, hidden: int, intermediate: int, *, gated: bool, topk: int, experts: int,
                  gluon: Optional[bool] = None) -> TritonMoEConfig:
    """Tile configuration for ``rows`` tokens (a pure function of shapes; tuned on an H200): one of ``TILES``.

    Small batches are weight-bandwidth bound: narrow token tiles (16) to limit per-expert padding, narrow
    weight tiles so that every SM streams weights, deep K tiles and pipelines. Large batches are MMA bound:
    wide tiles so each dequantized weight tile is reused by many tokens. ``experts``: the experts the routing
    spreads the ``rows * topk`` pairs over, i.e. the GLOBAL count under expert parallelism (a rank that sees all
    tokens but holds E / EP experts gets about ``rows * topk / experts`` pairs per local expert). ``gluon``: whether
    the Gluon twins may be picked (True: all, False: none, None: as ``gluon_policy()`` says, by default those of
    ``_GLUON_BY_DEFAULT``).
    """
    pairs_per_expert = rows * topk / max(experts, 1)
    # Up to 1.5 pairs per expert (sessions 5-6): the GEMV paths. Every (token, expert) pair is then a
    # matrix-vector product; CUDA-core block sums stream the weights at 43-77% of the roofline where the MMA path
    # (one useful column of 16) reached 20-60%. Gated: g16p3 at 1-2 tokens, g32p up to 0.25 pairs per expert.
    # Squared ReLU: g16p up to 4 tokens. Then up to 1.5 pairs per expert, q1 (session 6 probes at 8-32 tokens on
    # both shapes: at 16 tokens 8-18% faster than g32p and 9-19% faster than s16k_sx_r; at 8 tokens 11% faster
    # than g32p on 235b, 4% slower on 30b; at 24 tokens equal to s16k_sx_r on 235b, 5-13% faster on 30b; at 32
    # tokens q1 took 4-16% longer than s16k_sx_r). Its pairs come sorted by expert, so pairs of one expert run
    # side by side and share their weight reads in L2. Programs that convert each weight once for 2-4 pairs were
    # slower: CUDA-core FMAs per weight, not bytes, set their time.
    # Up to 8 pairs per expert: BLOCK_K 256 (the scale tile is then pipelined with the weights), "sx" dequant; until
    # session 10 with FC2 on 8 warps capped at 128 registers (two CTAs per SM). Gated at 16-24 pairs per expert:
    # BLOCK_K 256, "sx". Squared ReLU keeps the v2 tiles' 128-deep K at 256 tokens, where "sx" was not faster for
    # it. Each token block re-reads its expert's weights, so block_t covers the typical pairs per
    # expert. From 64 pairs per expert, both activations (session 7 probes on the H200): 128-token tiles with
    # "sx_auto", one bf16 multiply per weight pair after a per-program scan of the tile's scale rows; 7-10%
    # faster than l64b / l64a at 1024 tokens and 17-21% faster than l64b / l128a / l64a at 4096, on both shapes.
    # At 64-256 tokens the scan cost more than the multiply it saves (s16k / m32l tiles 56-65% slower).
    if gated and pairs_per_expert <= 0.125:
        return TILES["g16p3"]
    if pairs_per_expert <= 0.25:
        return TILES["g32p" if gated else "g16p"]
    if pairs_per_expert <= 1.5:
        # Session 34 (run 37 probes, us per layer, q1 / twin twice each): the 16-token Gluon twins with the f8x2
        # FC1 overtake q1 from about one pair per expert: 16 tokens squared ReLU 160.3 / 157.0, 160.9 / 158.1
        # (30b), 602.9 / 590.4, 622.3 / 537.6 (235b), SwiGLU 126.4 / 126.4, 126.2 / 126.6 and 455.5 / 406.7,
        # 487.8 / 419.9; 24 tokens 13-24% faster (30b squared ReLU 227.1 / 189.9, 235b SwiGLU 661.5 / 512.8); at 8
        # tokens q1 is 5-12% faster (30b squared ReLU 95.8 / 107.0). Where the twin is not picked, q1 up to 1.5; where
        # "_f128_st" is, it runs from 0.75 pairs per expert (``_Q1_BELOW_ALL_F8X2_PAIRS``).
        small = _sixteen_token_tile(gated, hidden, intermediate, gluon)
        q1_below = _Q1_BELOW_ALL_F8X2_PAIRS if small is TILES[_ALL_F8X2_16] else _Q1_BELOW_TWIN_PAIRS
        return small if pairs_per_expert >= q1_below and _reads_x_split(small) else TILES["q1"]
    # Session 11: from 1.5 to 24 pairs per expert the 4-warp FC2 (and gated, the 4-warp merged FC1) tiles: three
    # CTAs per SM, 3-10% faster than s16k_sx_rm / s16k_sx_r / m32l_sx / m32a at 64 and 256 tokens (TILES).
    # Session 12: gated, up to 8 pairs per expert, 3 FC1 stages (64 tokens: 1.1-2.3% faster than 2 stages in three
    # probes on both shapes) and the weight rows read as uint32 words ("sx4": 16-byte copies and 8/16-byte shared
    # loads instead of 8-byte copies and 2-byte loads; 64 tokens 6.7% / 6.5% faster than "sx" on 30b / 235b; at 256
    # tokens m32l4_sx_m with "sx4" spilled under its cap and was 3.5% slower on 30b). Both activations: the 32-token
    # tiles up to 32 pairs per expert (448 / 512 tokens, both shapes: gated 16% / 0.7-1.8% faster than
    # l128m_sa_t64, squared ReLU 18-19% / 3.3-3.5% faster than l64a). Session 13: squared ReLU up to 8 pairs per
    # expert with "sx4" too (64 tokens: 5.6% / 6.3% faster on 30b / 235b); "sx4" on the 32-token tiles was 26-29%
    # slower (squared ReLU, 128-deep K) and 22-26% slower (gated, uncapped or 128-deep K) at 256 tokens.
    # Session 14 (run 17 probes, us per layer, against the tile without planes in the same call): gated 64 tokens
    # s16k4_sx4p_m3 206.5 / 207.4 vs 213.5 / 212.9 (30b), 694.6 / 710.1 vs 729.7 / 736.4 (235b); squared ReLU
    # with planes was not faster there (30b 277.8 / 278.1 vs 274.1 / 272.0), so it keeps s16k_sx4_f4. Session 20: with
    # planes and the Gluon FC2 it is (``_GLUON_TWINS``: 30b 64 tokens 255.5 vs 274.5 / 273.0).
    if pairs_per_expert <= 8:
        return _sixteen_token_tile(gated, hidden, intermediate, gluon)
    # Session 13: from 8 to 16 pairs per expert the 32-token tiles put an expert's last 1-16 pairs on the 16-token
    # "sx4" tile (tail). Run 16 probes, us per layer against the tile without tails: gated 256 tokens 268.8 vs 285.9
    # / 286.0 (30b), 898.5 vs 997.0 / 1008.6 (235b); 192 tokens 245.5 vs 285.7, 848.4 vs 994.0 (s16k4_sx4_m3 there:
    # 240.7 / 873.7); squared ReLU 256 tokens 337.2 vs 362.9 / 365.2 (30b). Past 16 the tails stop paying: 30b
    # gated 384 tokens 309.4 vs 298.1 (slower), 512 tokens 391.1 vs 394.4.
    # Session 14: there the 32-token tiles in "sx4" with planes, their tails too (run 17 probes at 256 tokens,
    # against m32l4_sx_m_t16 / m32a_f4_t16 twice in the same call): gated 252.5 vs 269.9 / 267.5 (30b), 873.4 vs
    # 884.3 / 892.8 (235b); squared ReLU (m32k_sx4p_f4_t16: 256-deep K, FC1 3 stages) 320.8 vs 338.2 / 336.8, 1100.1
    # vs 1168.9 / 1212.1. From 16 to 32 pairs per expert the same tiles without tails (run 17 probes at 384 / 512
    # tokens against m32l4_sx_m / m32a_f4 twice): gated 270.9 vs 299.9 / 301.6 and 347.3 vs 394.4 / 394.9 (30b),
    # 917.5 vs 1035.2 / 1059.5 and 1266.9 vs 1385.7 / 1397.5 (235b); squared ReLU 327.4 vs 377.8 / 377.3 and 437.9
    # vs 498.4 / 500.5 (30b), 1177.5 vs 1351.3 / 1356.7 and 1639.8 vs 1843.6 / 1837.3 (235b). The cut at 32 pairs
    # per expert dates from the tiles without planes (0.7-3.5% faster than the 128 / 64-token tiles at 512 tokens).
    if pairs_per_expert <= 16:
        return _tile("m32l4_sx4p_m_t16_s2" if gated else "m32k_sx4p_f4_t16_s2", hidden, intermediate, gluon)
    if pairs_per_expert < 28:
        return _tile("m32l4_sx4p_m_s2" if gated else "m32k_sx4p_f4_s2", hidden, intermediate, gluon)
    # Session 15 (run 18 probes, us per layer, 30b / 235b): the plane tiles with 64 tokens. At 32 pairs per expert
    # (512 tokens) with 32-token plane tails: gated 323.9 / 1116.5 vs m32l4_sx4p_m 345.0 / 1250.8, squared ReLU
    # 415.9 / 1481.4 vs m32k_sx4p_f4 435.3 / 1618.2. From 40 without tails: gated 640 tokens 358.3 / 1274.8 (tails
    # 371.2 / 1243.4) vs l128m_sa_t64 398.4, 395.4 / 1419.5, 1432.6 (call 1), 768 tokens 368.6 / 1303.9 (tails
    # 389.8 / 1359.9) vs 425.8, 425.3 / 1459.8, 1466.3; squared ReLU with 2 FC1 stages 640 tokens 463.4 / 1683.6 vs
    # l64a 523.6, 522.7 / 1929.0, 1929.7, 768 tokens 470.7 (30b; 235b with 3 stages 1769.1) vs 527.7, 524.0 / 1947.7,
    # 1946.4. At 64 pairs per expert the 64-token tiles pad most experts to two blocks (1024 tokens: 10-12% slower
    # than l128m_sa_t64); there they became the 128-token tiles' tails (below). The cut at 28 (call 3, the 64-token
    # tiles with tails against the 32-token ones): 24 pairs per expert (384 tokens) gated 286.9 vs 269.3 / 936.9 vs
    # 925.7, squared ReLU 346.1 vs 329.4 / 1195.7 vs 1168.3 (slower on both shapes); 28 (448 tokens) gated 300.0 vs
    # 294.7 / 1004.0 vs 1072.9, squared ReLU 373.0 vs 364.2 / 1325.1 vs 1339.7 (slower on 30b, faster on 235b).
    # Session 17 (run 20, 512 tokens, us per layer, 30b / 235b): squared ReLU with the 2-stage tile and tails,
    # 395.6 / 1448.4 vs l64k_sx4p_f4_t32_s2 413.1, 413.7 / 1433.4, 1452.9 (30b 4.3% faster, 235b within its spread).
    if pairs_per_expert < 40:
        return _tile("l64_sx4p_mu_t32_s2" if gated else "l64k2_sx4p_f4_t32_s2", hidden, intermediate, gluon)
    if pairs_per_expert < 64:
        return _tile("l64_sx4p_mu_s2" if gated else "l64k2_sx4p_f4_s2", hidden, intermediate, gluon)
    # Tail tiles (session 8): an expert's last pairs past its full 128-token blocks run on a narrower tile. While most
    # experts have a single, partial block: 64-token tails (1024 tokens: 7-10% faster than l128a_sa, SwiGLU both shapes
    # and squared ReLU on 30b; session 9, SwiGLU: 0.4-7.0% faster than l64b at 32 and 48 pairs per expert, both shapes).
    # Past that 32-token tails (2048 / 4096 tokens: 4-9% faster; the 16-token tails 1% faster to 2.7% slower; session 9:
    # 4-8% faster than 64-token tails at 80 pairs per expert, SwiGLU). Squared ReLU keeps l64a below 64 pairs per expert
    # (session 9: 2-7% faster than l128a_sa_t64 at 32 and 48). Session 10: squared ReLU takes 128 FC1 rows per program
    # from 64 pairs per expert (l128w_sa: 0.7-2.9% faster at 64 and 128, 4.6-5.0% at 192), and 256-token tiles from 176
    # (x256w_sa: 11-15% faster at 192 and 256, 23-25% slower at 128; from 176 both tile sets pad an expert's pairs
    # alike; the cut itself was not timed). Gated layers: gate and up rows in one FC1 tile on 8 warps, in the same
    # regions as squared ReLU (l128m_sa: 5.6% faster at 64 pairs per expert on 30b; x256m_sa: 12.4% / 10.9% faster at
    # 256 on 30b / 235b). With two FC1 tiles 256-token tiles were 0.1-4.7% slower at 4096-8192 tokens (40-53% at 2048),
    # 128 FC1 rows per half 2-4% and 256 FC2 rows 4-9% slower at 1024-4096. Session 15: the 64-token tails are the plane
    # tiles (1024 tokens, run 18 call 2: gated l128m_sa_t64p 448.1 / 1567.5 vs l128m_sa_t64 466.0 / 1639.5, squared ReLU
    # l128w_sa_t64p 575.0 / 2088.3 vs l128w_sa_t64 591.2 / 2202.6; 32-token plane tails at 4096 tokens on 235b were 1.0%
    # / 0.9% slower than x256m_sa_t32 / x256w_sa_t32a). Session 16: the second stream (run 19 probes, us per layer,
    # against one stream in the same call, 30b / 235b): at 1024 tokens with the uncapped / 2-stage 64-token tails, gated
    # 438.5 (t64p beside: 446.3) vs 479.9, 478.8 / 1595.0 (1603.1) vs 1629.8, 1651.8; squared ReLU 558.4 (574.4) vs
    # 609.1, 608.5 / 2082.5 (2088.1) vs 2118.4, 2160.1. At 256 tokens gated 238.2, 237.3 vs 261.0, 261.5 (30b), on 235b
    # 910.6, 883.5, 852.6, 890.0 vs 869.8, 876.6, 864.1, 870.8 (a spread with two streams, none with one); squared ReLU
    # 312.7 vs 332.2, 332.0 / 1133.4 vs 1141.6, 1201.5. 64 tokens (the plane copy beside the route) 207.0 vs 214.4,
    # 214.1 / 728.6 vs 730.0, 781.7. 512 tokens (30b) gated 315.9 vs 339.5, 338.4, squared ReLU 414.8 vs 426.5, 426.2.
    # Squared ReLU at 4096 tokens (x256w_sa_t32a) was not faster (1320.7 vs 1301.6, 1311.6 / 4988.1 vs 4979.1, 5031.7):
    # the 256-token tiles keep one stream. 16-28 and 40-64 pairs per expert (the plane copy beside the route, no tails;
    # call 5, one sample): 384 tokens gated 273.1 vs 282.4 / 959.0 vs 966.2, squared ReLU 332.4 vs 342.5 / 1270.6 vs
    # 1224.6 (slower); 768 tokens gated 380.7 vs 394.3 / 1356.0 vs 1352.3, squared ReLU 486.6 vs 496.3 / 1784.3 vs
    # 1792.5. Session 17 (run 20, 2048 tokens = 128 pairs per expert, against one stream twice): the 128-token tiles
    # with 32-token tails on two streams, gated 627.4 vs 648.9, 652.4 / 2316.9 vs 2339.8, 2401.2, squared ReLU 816.7 vs
    # 823.4, 861.9 / 3073.6 vs 3090.8, 3233.5.
    if pairs_per_expert < 72:
        return _tile("l128m_sa_t64pu_s2" if gated else "l128w_sa_t64p2_s2", hidden, intermediate, gluon)
    if not gated:
        return (TILES["l128w_sa_t32a_s2"] if pairs_per_expert < 176
                else _tile("x256w_sa_t32a", hidden, intermediate, gluon))  # (its twin: the ws FCs, session 40)
    if pairs_per_expert < 176:
        return TILES["l128m_sa_t32_s2"]
    return _tile("x256m_sa_t32", hidden, intermediate, gluon)  # (its twin: both FCs persistent ws, session 43)


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


# -- weights ---------------------------------------------------------------------------------------


def _check_stack(name: str, weight) -> None:
    """A canonical ``MXFP8Tensor`` stack ``[E, M, K]`` with its storage (K contiguous, scales ``[E, Mp * Cp]``)."""
    if not isinstance(weight, MXFP8Tensor):
        raise MXFP8InputError(f"{name}: expected a canonical MXFP8Tensor stack [E, M, K], got {type(weight).__name__}")
    if not weight.is_stacked:
        raise MXFP8InputError(f"{name}: expected a stack [E, M, K], got shape {tuple(weight.shape)}")
    if weight.is_released:
        raise MXFP8InputError(f"{name}: the canonical storage was released; the Triton kernel reads it in place")
    experts, rows, cols = weight.shape
    padded_rows, padded_cols = padded_scale_shape(rows, cols // BLOCK_SIZE)
    scale = weight.scale_bytes()
    if tuple(scale.shape) != (experts, padded_rows * padded_cols) or scale.stride(1) != 1:
        raise MXFP8InputError(
            f"{name}: expected swizzled scales [E={experts}, {padded_rows * padded_cols}] with unit stride, "
            f"got {tuple(scale.shape)} strides {scale.stride()}"
        )


def _scale_args(weight: MXFP8Tensor) -> tuple[torch.Tensor, int, int]:
    """(uint8 swizzled scales ``[E, Mp * Cp]``, bytes per expert, ``Cp // 4``) for the kernels."""
    scale = weight.scale_bytes()
    _, padded_cols = padded_scale_shape(weight.shape[1], weight.shape[2] // BLOCK_SIZE)
    return scale, scale.stride(0), padded_cols // 4


def _check_inputs(x, probs, routing_map, fc1, fc2, activation, rows, valid_tokens, out):
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise MXFP8InputError(f"x: expected bf16 [T, H], got {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise MXFP8InputError("x: the hidden dimension must be contiguous (stride 1)")
    tokens, hidden = x.shape
    if routing_map.dim() != 2 or routing_map.shape[0] != tokens or routing_map.dtype not in (torch.int32, torch.int64):
        raise MXFP8InputError(
            f"routing_map: expected int32/int64 [T={tokens}, topk], got {routing_map.dtype} {tuple(routing_map.shape)}"
        )
    if probs.shape != routing_map.shape or probs.dtype != torch.float32 or probs.stride(1) != 1:
        raise MXFP8InputError(
            f"probs: expected fp32 {tuple(routing_map.shape)} with unit column stride, got {probs.dtype} "
            f"{tuple(probs.shape)}"
        )
    if not isinstance(valid_tokens, torch.Tensor) or valid_tokens.numel() != 1 or valid_tokens.dtype != torch.int32:
        raise MXFP8InputError("valid_tokens: expected a device int32 tensor [1]")
    for name, tensor in (("probs", probs), ("routing_map", routing_map), ("valid_tokens", valid_tokens)):
        if tensor.device != x.device:
            raise MXFP8InputError(f"{name}: on {tensor.device}, x is on {x.device}")
    _check_stack("fc1_stack", fc1)
    _check_stack("fc2_stack", fc2)
    experts, n1, h1 = fc1.data.shape
    experts2, h2, inner = fc2.data.shape
    if fc1.data.dtype != DATA_DTYPE or fc2.data.dtype != DATA_DTYPE:
        raise MXFP8InputError("fc1_stack/fc2_stack: data must be float8_e4m3fn")
    if experts2 != experts:
        raise MXFP8InputError(f"fc2_stack: {experts2} experts, fc1_stack has {experts}")
    if h1 != hidden or h2 != hidden:
        raise MXFP8InputError(f"fc1_stack [E, N1, {h1}] / fc2_stack [E, {h2}, I] do not match hidden {hidden}")
    expected_n1 = 2 * inner if activation.gated else inner
    if n1 != expected_n1:
        raise MXFP8InputError(
            f"fc1_stack: {n1} rows, but {activation.value} with fc2 input {inner} needs {expected_n1}"
            + (" ([gate; up])" if activation.gated else "")
        )
    if hidden % BLOCK_SIZE or inner % BLOCK_SIZE:
        raise MXFP8InputError(f"hidden {hidden} and intermediate {inner} must be multiples of {BLOCK_SIZE}")
    for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
        if weight.data.device != x.device or weight.scale.device != x.device:
            raise MXFP8InputError(f"{name}: on {weight.data.device}, x is on {x.device}")
        if weight.data.stride(2) != 1:
            raise MXFP8InputError(f"{name}: K must be contiguous in data")
    if not 0 <= rows <= tokens:
        raise MXFP8InputError(f"rows: {rows} must be in [0, T={tokens}]")
    if out is not None:
        if out.dtype not in (torch.bfloat16, torch.float32) or out.dim() != 2 or out.shape[1] != hidden:
            raise MXFP8InputError(f"out: expected bf16/fp32 [>= {rows}, {hidden}], got {out.dtype} {tuple(out.shape)}")
        if out.shape[0] < rows or out.stride(1) != 1 or out.device != x.device:
            raise MXFP8InputError(f"out: needs >= {rows} rows, unit column stride and device {x.device}")
    return experts, hidden, inner


def triton_mxfp8_moe(
    x: torch.Tensor,
    probs: torch.Tensor,
    routing_map: torch.Tensor,
    fc1_stack: MXFP8Tensor,
    fc2_stack: MXFP8Tensor,
    *,
    activation="swiglu",
    local_expert_offset: int = 0,
    valid_tokens: torch.Tensor,
    rows: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
    config: Optional[TritonMoEConfig] = None,
    route_experts: Optional[int] = None,
) -> torch.Tensor:
    """Weight-only MXFP8 MoE on Hopper: ``out[t] = sum_k probs[t, k] * fc2[e] @ act(fc1[e] @ x[t])``.

    Args:
        x: bf16 ``[T, H]``; only ``x[:rows]`` is read.
        probs: fp32 ``[T, topk]``.
        routing_map: int32/int64 ``[T, topk]`` GLOBAL expert ids; ids outside
            ``[local_expert_offset, local_expert_offset + E)`` (and -1) contribute nothing.
        fc1_stack: ``[E, N1, H]`` (``N1 = 2I``, ``[gate; up]``, for gated activations): a canonical
            ``MXFP8Tensor`` stack, read in place (fp8 bytes and 128x4-swizzled scales; nothing is prepared).
        fc2_stack: ``[E, H, I]``, the same.
        activation: ``Activation`` or its name: swiglu, geglu (gated), squared_relu, relu, silu.
        valid_tokens: device int32 ``[1]``; rows ``>= valid_tokens`` give zeros.
        rows: processed prefix (default ``T``); ``out[:rows]`` is written, nothing else.
        out: optional bf16/fp32 ``[>= rows, H]`` destination; default a new bf16 ``[rows, H]``.
        config: tile override (benchmarks); default ``choose_config(rows, ...)``.
        route_experts: the experts the map spreads its ``rows * topk`` pairs over (default: the local E): the
            global count when every EP rank's tokens arrive with global ids (the inference dispatcher). The tile
            choice expects ``rows * topk / route_experts`` pairs per local expert.

    Returns ``out`` (or the new bf16 tensor). Graph-safe: no host sync, shapes fixed by ``rows``.
    """
    activation = parse_activation(activation)
    fc1, fc2 = fc1_stack, fc2_stack
    rows = x.shape[0] if rows is None else int(rows)
    experts, hidden, inner = _check_inputs(x, probs, routing_map, fc1, fc2, activation, rows, valid_tokens, out)
    if route_experts is not None and route_experts < experts:
        raise MXFP8InputError(f"route_experts: {route_experts} is below the {experts} local experts")
    topk = routing_map.shape[1]
    if out is None:
        out = torch.empty(rows, hidden, dtype=torch.bfloat16, device=x.device)
    if rows == 0:
        return out
    cfg = config or choose_config(rows, hidden, inner, gated=activation.gated, topk=topk,
                                  experts=route_experts or experts)
    codes = {tile.dequant_code for tile in cfg.launch_tiles}
    if _DEQUANT_CODE["sx_auto"] in codes:
        for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
            if weight.scale_bytes().data_ptr() % 4:  # sx_auto tests the scale rows as 32-bit words
                raise MXFP8InputError(f"{name}: the swizzled scales must start at a 4-byte aligned address for the "
                                      "'sx_auto' tiles; got a storage offset that is not (copy the stack)")
    if not codes.isdisjoint(_WORD_DEQUANT):
        for name, weight in (("fc1_stack", fc1), ("fc2_stack", fc2)):
            data = weight.data
            if data.data_ptr() % 4 or data.stride(0) % 4 or data.stride(1) % 4:  # rows read as uint32 words
                raise MXFP8InputError(f"{name}: the 'sx4' tiles read weight rows as 32-bit words; the fp8 rows must "
                                      f"start at 4-byte aligned addresses (strides {tuple(data.stride())}, address "
                                      f"{data.data_ptr()}; copy the stack)")
    problem = next(filter(None, (_gluon_problem(tile, fc1, fc2, x.device) for tile in cfg.launch_tiles)), None)
    if problem is None and any(tile.fc1_ws for tile in cfg.launch_tiles):  # x and the whole inter buffer
        from ._gluon_ws_kernel import gathered_rows_problem

        sorted_len = route_layout(rows, topk, experts, cfg.block_t, cfg.tail.block_t if cfg.tail else 0)[2]
        reason = gathered_rows_problem(x, sorted_len * inner)  # inter: [sorted_len, I] (no planes with fc1_ws)
        problem = MXFP8InputError(f"fc1_ws: {reason}") if reason else None
    if problem is not None:
        if config is not None:
            raise problem
        logger.debug("Gluon tiles not used (%s): the Triton tiles run", problem)
        cfg = choose_config(rows, hidden, inner, gated=activation.gated, topk=topk, experts=route_experts or experts,
                            gluon=False)
    with on_device(x.device):  # Triton launches on the current device
        _launch(cfg, x, probs, routing_map, fc1, fc2, activation, local_expert_offset, valid_tokens, rows, out,
                experts, hidden, inner, topk)
    return out


def _gluon_problem(cfg: TritonMoEConfig, fc1: MXFP8Tensor, fc2: MXFP8Tensor,
                   device: torch.device) -> Optional[Exception]:
    """None where ``cfg`` has no Gluon kernel or its Gluon kernels can run here on these stacks; else the error to
    raise (before any launch) when the caller chose ``cfg``."""
    if not (cfg.fc1_gluon or cfg.fc2_gluon or cfg.fc2_ws or cfg.fc1_ws):
        return None
    if cfg.fc1_ws:
        hidden, n_out = fc1.data.shape[2], fc2.data.shape[2]
        gated = fc1.data.shape[1] == 2 * n_out
        if cfg.fc1_block_n != (64 if gated else 128) or (gated and n_out % 64):
            return MXFP8InputError(f"fc1_ws: the warp-specialized FC1 runs 128 weight rows per tile: fc1_block_n 128 "
                                   f"ungated, or gated 64 gate rows and their 64 up rows (fc1_block_n 64, I a multiple "
                                   f"of 64); got fc1_block_n {cfg.fc1_block_n} for the FC1 stack "
                                   f"{tuple(fc1.data.shape)} and I {n_out}")
        if hidden % 16 or not fc1.data.is_contiguous():
            return MXFP8InputError(f"fc1_ws: the FC1 stack {tuple(fc1.data.shape)} must be contiguous with H % 16 == 0 "
                                   "(a TMA descriptor over [E * N1, H] with 16-byte rows)")
    if cfg.fc2_ws:
        _, hidden, inner = fc2.data.shape
        if inner % 16 or hidden % cfg.fc2_block_n:
            return MXFP8InputError(f"fc2_ws: the FC2 stack {tuple(fc2.data.shape)} needs I % 16 == 0 (16-byte TMA rows) "
                                   f"and H % fc2_block_n ({cfg.fc2_block_n}) == 0")
        if not fc2.data.is_contiguous():
            return MXFP8InputError("fc2_ws: the FC2 stack must be contiguous (a TMA descriptor over [E * H, I])")
    if cfg.fc1_gluon:
        hidden, n_out = fc1.data.shape[2], fc2.data.shape[2]  # FC1's output width: I, gated or not
        if hidden % 128 or n_out % cfg.fc1_block_n:
            return MXFP8InputError(f"fc1_gluon: the FC1 stack {tuple(fc1.data.shape)} needs H % 128 == 0 and its "
                                   f"output width ({n_out}) a multiple of fc1_block_n ({cfg.fc1_block_n})")
        gated = fc1.data.shape[1] != n_out
        if gated and (cfg.dequant == "f8x2" or cfg.fc1_f8x2) and cfg.fc1_block_n != 64:
            return MXFP8InputError(f"fc1_gluon: the gated Gluon f8x2 FC1 takes fc1_block_n 64 (64 gate rows and their "
                                   f"64 up rows per program), got {cfg.fc1_block_n}")
    if cfg.fc2_gluon:
        _, hidden, inner = fc2.data.shape
        if inner % 128 or hidden % cfg.fc2_block_n:
            return MXFP8InputError(f"fc2_gluon: the FC2 stack {tuple(fc2.data.shape)} needs I % 128 == 0 and H % "
                                   f"fc2_block_n ({cfg.fc2_block_n}) == 0")
        if cfg.fc2_ring and inner // 128 % cfg.fc2_stages:
            return MXFP8InputError(f"fc2_ring: the FC2 stack {tuple(fc2.data.shape)} needs I a multiple of 128 * "
                                   f"fc2_stages ({128 * cfg.fc2_stages})")
    for flag, name, weight in ((cfg.fc1_gluon, "fc1", fc1), (cfg.fc2_gluon, "fc2", fc2)):  # (fc2_ws: checked above)
        if flag and not (weight.data.is_contiguous() and weight.scale_bytes().is_contiguous()):
            return MXFP8InputError(f"{name}_gluon: the {name.upper()} stack and its scales must be contiguous (TMA "
                                   "descriptors)")
        words = cfg.scale_words or cfg.dequant == "f8x2" or cfg.fc1_f8x2
        if flag and words and weight.scale_bytes().data_ptr() % 4:
            return MXFP8InputError(f"{'scale_words' if cfg.scale_words else 'f8x2'}: the {name.upper()} scales must "
                                   "start at a 4-byte aligned address (read as int32 words); got a storage offset "
                                   "that is not (copy the stack)")
    if device.type != "cuda":
        return BackendUnavailableError("the Gluon kernels (fc1_gluon / fc2_gluon / fc1_ws / fc2_ws) run on a Hopper "
                                       "GPU only (Gluon has no CPU interpreter)")
    try:
        from . import (  # noqa: F401
            _gluon_f8x2_fc1_kernel,
            _gluon_f8x2_fc2_kernel,
            _gluon_fc1_kernel,
            _gluon_fc2_kernel,
            _gluon_ws_kernel,
        )
    except ImportError as error:
        return BackendUnavailableError("fc1_gluon / fc2_gluon need Triton's Gluon dialect with its Hopper API "
                                       f"(triton.experimental.gluon; Triton 3.6 was tested): {error}")
    return None


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
    inter = torch.empty(sorted_len, inter_cols, dtype=torch.bfloat16, device=device)
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
    # main tile and tail agree on the buffers both read (__post_init__)
    group = 128 if any(t.step_scales for t in cfg.launch_tiles) else BLOCK_SIZE
    x_split = split_rows_buffers(rows, hidden, device, group=group) if split_x else None
    scales_t = any(t.split_scales_t for t in cfg.launch_tiles)
    inter_split = split_rows_buffers(sorted_len, n_out, device, scales_t, group) if split_tiles else None
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
    route = _route(routing_map, valid_tokens, rows, topk, experts, local_expert_offset, cfg.block_t, tail_t,
                   cfg.route_warps, cfg.route_in_registers, cfg.route_parallel_pairs)
    sorted_pairs, block_expert, num_blocks = route
    if side is not None:
        if tails_beside:
            side.wait_stream(main)  # the tail pair needs the route's tables
        main.wait_stream(side)  # the main pair needs the planes
    def operands(tile, first, last):  # a tile's FC1 input and its inter rows [first, last)
        if tile.dequant == "f8x2":
            return x_split, tuple(buffer[first:last] for buffer in (*inter_split, inter))
        if tile.fc1_f8x2:
            return x_split, inter[first:last]
        return x_planes[tile.fc1_block_k] if tile.planes else x, inter[first:last]

    _launch_mma(cfg, *operands(cfg, 0, max_sorted), dims, weights, slots, route, max_blocks, activation, topk,
                split_k)
    if tail_t:  # the tail blocks: narrower tiles over the second table (positions from max_sorted)
        tail = cfg.tail
        tail_route = (sorted_pairs[max_sorted:], block_expert[tail_block_offset:], num_blocks[4:])
        with torch.cuda.stream(side if tails_beside else None):
            _launch_mma(tail, *operands(tail, max_sorted, sorted_len), dims, weights, slots, tail_route,
                        min(experts, rows * topk), activation, topk, split_k)
    if tails_beside:
        main.wait_stream(side)  # join before the combine reads every slot row
    _launch_combine(slots, probs, routing_map, valid_tokens, out, rows, experts, local_expert_offset)


_SIDE_STREAMS: dict = {}


def _side_stream(device: torch.device):
    """This process's second stream on ``device`` (``TritonMoEConfig.side_stream``), or None for a CPU device (the
    Triton interpreter) and where it is the current stream itself (then everything runs in order on that one)."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _SIDE_STREAMS.get(index)
    if stream is None:
        stream = _SIDE_STREAMS[index] = torch.cuda.Stream(device=index)
    return None if stream == torch.cuda.current_stream(index) else stream


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


_GPU_TESTED_TRITON = (3, 6)  # the Triton of every GPU run (torch 2.11 on the lent H200s)


def untested_triton_note(triton_version: str) -> Optional[str]:
    """A warning for a Triton other than the GPU-tested one (``_GPU_TESTED_TRITON``), else None. Session 21's SASS
    scan (bench/sass_hazard_scan.py) found Triton 3.8 pipelining the gated decode FC1 so that in-flight register-A
    wgmmas have their registers overwritten (undefined in PTX), where 3.6 waits; no GPU has run 3.8."""
    if _major_minor(triton_version) == _GPU_TESTED_TRITON:
        return None
    tested = ".".join(map(str, _GPU_TESTED_TRITON))
    return (f"the Triton MXFP8 MoE was tested on a GPU with Triton {tested} only, this is Triton {triton_version}; "
            f"its SASS may overwrite registers of in-flight wgmmas (bench/sass_hazard_scan.py checks a version)")


@functools.lru_cache(maxsize=None)
def warn_untested_triton(triton_version: str) -> None:
    """Log ``untested_triton_note`` once per process and version."""
    note = untested_triton_note(triton_version)
    if note:
        logger.warning(note)


def check_triton_moe_available(device: torch.device) -> None:
    """Raise ``BackendUnavailableError`` naming the requirement unless this backend runs on ``device``."""
    capability = torch.cuda.get_device_capability(device) if torch.cuda.is_available() and device.type == "cuda" else None
    try:
        import triton

        version = triton.__version__
    except ImportError as error:
        raise BackendUnavailableError("the Triton MXFP8 MoE needs the 'triton' package") from error
    ok, reason = triton_moe_support(capability, version)
    if not ok:
        raise BackendUnavailableError(reason)


__all__ = [
    "TILES",
    "kernel_path",
    "TritonMoEConfig",
    "check_triton_moe_available",
    "choose_config",
    "replace_launch_tiles",
    "route_launch_shape",
    "route_layout",
    "route_reference",
    "routing_capacity",
    "triton_mxfp8_moe",
    "triton_moe_support",
]
