"""``TritonMoEConfig``: the tile configuration of one Triton MXFP8 MoE call (token block, FC1 / FC2 tiles, dequant
mode, Gluon and warp-specialized forms, streams), checked when built; the kernels' activation and dequant codes;
``ws_shared_bytes``, the shared memory of a warp-specialized program's rings."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..activations import Activation

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
    # Session 47: the local experts as ``expert_groups`` contiguous groups of about E / groups, each with its own route
    # and FC1 -> FC2 launch pair on a stream of its own (the first on the call's stream; a tail tile's pair after the
    # main pair on the group's stream, or with ``side_stream`` 2 beside it on one more stream), one combine after the
    # join (MMA path; CUDA only, on a CPU device the groups run in order). So one group's FC2 can start on the SMs
    # another group's FC1 leaves idle in its last wave. A pair's block holds the same pairs in the same order as in one
    # route, so the bits equal ``expert_groups=1``'s. More launches per call: worth it under CUDA graphs (the decode
    # path), where their host cost is paid once at capture.
    expert_groups: int = 1
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
        if not 1 <= self.expert_groups <= 8:
            raise ValueError(f"TritonMoEConfig: expert_groups must be 1-8, got {self.expert_groups}")
        if self.expert_groups > 1 and (self.gemv or self.direct):
            raise ValueError("TritonMoEConfig: expert_groups > 1 needs the MMA path (no gemv or direct)")
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


def _reads_x_split(tile: TritonMoEConfig) -> bool:
    """Whether ``tile``'s FC1 reads the split rows of x (the f8x2 FC1s, Triton or Gluon)."""
    return tile.dequant == "f8x2" or tile.fc1_f8x2


def ws_shared_bytes(block_t: int, block_k: int, stages: int, dstages: int = 2, block_n: int = 128,
                    persistent: bool = False, wstages: int = 0) -> int:
    """Shared memory of one ``_gluon_ws_kernel`` program's rings: ``stages`` bf16 token tiles ``[block_t, block_k]``,
    ``wstages`` (0: ``2 * stages``) fp8 weight tiles and ``dstages`` bf16 weight tiles ``[block_n, block_k]``;
    ``persistent``: and 8 KiB for the epilogue's layout conversion beside the live rings (4 KiB at 128 x 256 with
    Triton 3.6 and 3.8)."""
    rings = (stages * block_t * block_k * 2 + (wstages or 2 * stages) * block_n * block_k
             + dstages * block_n * block_k * 2)
    return rings + (8 * 1024 if persistent else 0)
