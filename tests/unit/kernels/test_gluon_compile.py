"""The Gluon FC1 / FC2 kernels compiled for sm_90 on the CPU (no GPU needed: Triton's own ptxas), with the installed
Triton.

They check the structure the speed comes from: the weight words by TMA, the token planes by TMA (FC2) or cp.async
tied to the stage's mbarrier (FC1), asynchronous wgmmas waited for down to one step's outstanding groups (so a
step's dequant overlaps the previous step's MMAs), and no spills (``ptxas -v`` with Triton's own ptxas). And one
thing correctness needs (session 21): in the SASS of the K loop no instruction writes a register that an in-flight
register-A wgmma (HGMMA) still reads, before a ``WARPGROUP.DEPBAR`` retires that HGMMA's group (``kernels.sass_hazards``;
the session-20 kernels had such writes in every configuration). The bits and the speed are checked on an H200
(tests/functional/test_triton_moe_gpu.py, bench/gluon_fc1_probe.py, bench/gluon_fc2_probe.py,
bench/gluon_tail_race_probe.py)."""

import collections
import re

import pytest
import torch

from megatron_mxfp8_moe.kernels.sass_hazards import (
    disassemble,
    k_loop,
    k_loop_paths,
    k_loops,
    register_a_hazards,
    written_registers,
)

gluon = pytest.importorskip("triton.experimental.gluon", reason="needs Triton's Gluon dialect")


def _compile_sm90(fn, types: dict, constants: dict, warps: int, ints: tuple, spills: bool = False,
                  mma: str = "HGMMA", with_sass: bool = False, maxnreg=None):
    """``fn`` compiled for sm_90: pointer and ``ints`` arguments 16-divisible, the rest constexpr. ``spills``: the
    configuration is known to spill (then the SASS hazard check still runs, over the spill loads too). ``mma``: the
    SASS wgmma it must hold at least 8 of (``QGMMA`` for fp8: both operands in shared memory, no register-A check).
    ``maxnreg``: a register cap. Returns the PTX, or ``(ptx, sass)`` with ``with_sass``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    signature = {name: types.get(name, "constexpr") for name in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or name in ints}
    source = GluonASTSource(fn=fn, signature=signature, attrs=attrs,
                            constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
    options = dict(num_warps=warps) if maxnreg is None else dict(num_warps=warps, maxnreg=maxnreg)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    assert ".local" not in ptx  # no local arrays in the PTX
    assert compiled.metadata.shared <= 227 * 1024
    # and no register spills in the SASS, except where known (``spills`` None: not checked)
    if spills is not None:
        assert ("0 bytes spill stores, 0 bytes spill loads" in _ptxas_report(ptx)) != spills
    sass = disassemble(compiled.asm["cubin"])
    assert sass.count(mma) >= 8 and (mma != "HGMMA" or not register_a_hazards(sass))
    return (ptx, sass) if with_sass else ptx


def test_register_a_hazard_check_finds_an_early_write():
    """The SASS check on two hand-written loops: the A register rewritten after a DEPBAR that leaves the group in
    flight (flagged), and after one that retires it (clean)."""
    def loop(depbar):
        return "\n".join([".L_x_1:", "/*0010*/ PRMT R88, R2, 0x5410, R5 ;", "/*0020*/ WARPGROUP.ARRIVE ;",
                          "/*0030*/ HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR20], R24, gsb0 ;",
                          f"/*0040*/ WARPGROUP.DEPBAR.LE gsb0, {depbar} ;", "/*0050*/ @P0 BRA `(.L_x_1) ;"])
    assert [w for _, w in register_a_hazards(loop("0x1"))] == ["PRMT R88, R2, 0x5410, R5"]
    assert register_a_hazards(loop("0x0")) == []
    assert written_registers("@!P1 LDS.64 R88, [R4] ") == {88, 89} and written_registers("STS [R4], R88") == set()


def test_k_loops_and_their_paths_on_hand_written_sass():
    """``k_loops`` finds each innermost loop around HGMMAs (two in a row here, an outer loop and a wait loop without
    HGMMAs left out); ``k_loop_paths`` counts one iteration of the shortest along its branches: the longest path with
    the fewest HMUL2s (the branch around the second multiply taken) and with the most."""
    def line(i, text):
        return f"/*{i:04x}*/ {text} ;"
    body = [".L_x_0:", line(0, "IADD3 R1, R1, 1, RZ"), ".L_x_1:", line(1, "SYNCS.PHASECHK.TRANS64 P1, [UR4], R2"),
            line(2, "@!P1 BRA `(.L_x_1)"), line(3, "HMUL2.BF16_V2 R8, R8, R9"), line(4, "@P2 BRA `(.L_x_2)"),
            line(5, "HMUL2.BF16_V2 R8, R8, R10"), line(6, "LOP3.LUT R3, R3, 0x1, RZ, 0xc0, !PT"), ".L_x_2:",
            line(7, "HGMMA.64x32x16.F32.BF16 R24, R8, gdesc[UR20], R24, gsb0"), line(8, "@P0 BRA `(.L_x_1)"),
            ".L_x_3:", line(9, "HGMMA.64x32x16.F32.BF16 R40, R12, gdesc[UR20], R40, gsb0"),
            line(10, "WARPGROUP.DEPBAR.LE gsb0, 0x0"), line(11, "@P3 BRA `(.L_x_3)"), line(12, "@P4 BRA `(.L_x_0)")]
    sass = "\n".join(body)
    assert [len(loop) for loop in k_loops(sass)] == [8, 3]
    assert k_loop(sass)[0] == "HGMMA.64x32x16.F32.BF16 R40, R12, gdesc[UR20], R40, gsb0"
    assert k_loop_paths(sass) == (3, 3)
    one_loop = "\n".join(body[2:12])  # the first loop alone: 8 instructions, two of them behind the branch
    assert k_loop_paths(one_loop) == (6, 8)


def _assert_barriers_fenced_after_init(ptx: str) -> None:
    """The stage mbarriers' init is made visible to the async proxy (``fence.proxy.async``) before the first expect /
    TMA copy that completes on them (the CUDA programming guide's TMA pattern)."""
    last_init = ptx.rindex("mbarrier.init")
    fence = ptx.index("fence.proxy.async", last_init)
    assert fence < ptx.index("mbarrier.arrive.expect_tx") and fence < ptx.index("cp.async.bulk.tensor")


def _ptxas_report(ptx: str) -> str:
    """``ptxas -v`` of ``ptx`` for sm_90a with the installed Triton's own ptxas (its resource report)."""
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/kernel.ptx"
        with open(path, "w") as handle:
            handle.write(ptx)
        run = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", path, "-o", f"{folder}/kernel.cubin"],
                             capture_output=True, text=True, check=True)
    return run.stderr + run.stdout


def _spilled(ptx: str) -> int:
    """Bytes of spill stores ptxas reports for ``ptx``."""
    return int(re.search(r"(\d+) bytes spill stores", _ptxas_report(ptx)).group(1))


def _assert_ws_spills_bounded(ptx: str) -> None:
    """The ws kernels' spill bound: none with Triton 3.6 (the GPU-tested version), at most 128 bytes with others
    (Triton 3.8's FC1: 124)."""
    import triton

    spilled = _spilled(ptx)
    assert spilled == 0 if triton.__version__.startswith("3.6") else spilled <= 128, spilled


def _registers(ptx: str) -> int:
    """The registers per thread ``ptxas -v`` reports for ``ptx``."""
    return int(re.search(r"Used (\d+) registers", _ptxas_report(ptx)).group(1))


def _words_desc(block_n: int, q: int):
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    words = torch.zeros(4 * 256, 256, dtype=torch.int32)  # descriptors only carry dtypes, blocks and layouts here
    return TensorDescriptor.from_tensor(words, [block_n, q], gl.NVMMASharedLayout.get_default_for([block_n, q],
                                                                                                  gl.int32))


def _compile_fc2(block_n, block_t, stages, warps, chains, overlap, scale_words=False, ring=False, one_factor=False,
                 pdl=False):
    """The Gluon FC2 compiled for sm_90: ``(ptx, sass)``."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_fc2_kernel as kernel

    q = kernel.GLUON_FC2_BLOCK_K // 4
    inter = torch.zeros(4 * block_t, 1024, dtype=torch.bfloat16)
    a_desc = TensorDescriptor.from_tensor(inter, [block_t, q], gl.NVMMASharedLayout.get_default_for([block_t, q],
                                                                                                    gl.bfloat16))
    types = dict(w_desc=mangle_type(_words_desc(block_n, q)), a_desc=mangle_type(a_desc), s_ptr="*u8",
                 slot_ptr="*bf16", sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N="i32",
                 K="i32", stride_se="i32", scale_tiles="i32", stride_slot="i32")
    constants = dict(BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=kernel.GLUON_FC2_BLOCK_K, STAGES=stages,
                     CHAINS=chains, OVERLAP=overlap, SCALE_WORDS=scale_words, RING=ring, ONE_FACTOR=one_factor,
                     STEPS_P2=16 if one_factor else 1, PDL=pdl, num_warps=warps)
    return _compile_sm90(kernel._fc2_gluon_kernel, types, constants, warps, ("N", "K", "stride_se", "stride_slot"),
                         with_sass=True)


# (128, 64, 3, 4): the FC2 of the 64-token Gluon tiles, which spilled a little with two register sets (Triton 3.6: 255
# registers, 8 bytes) until session 27's cross-word dequant (no spill with Triton 3.6 or 3.8)
# (64, 32, 3, 4, 2) / (64, 16, 4, 4, 2): the two-chain FC2 of the 32- / 16-token defaults (session 26); (64, 64, 3, 4,
# 2): two chains at 64-token blocks (the 64-token tiles' "_n64_c2" forms were slower in session 27's layer probes)
# overlap False (session 27's lead): each step's MMAs waited for before the next step's dequant; session 28's gated
# "_nov" defaults: (64, 32, 3, 4, 2) at 8-16 pairs per expert and (128, 32, 3, 4, 1) at 16-28; (64, 32, 2, 4, 2): 2
# stages without the overlap (tools/gpu_next.sh s29a)
@pytest.mark.parametrize("block_n,block_t,stages,warps,chains,overlap", [
    (128, 32, 3, 4, 1, True), (64, 32, 2, 4, 1, True), (64, 16, 3, 4, 1, True), (128, 64, 3, 4, 1, True),
    (64, 32, 3, 4, 2, True), (64, 16, 4, 4, 2, True), (64, 64, 3, 4, 2, True), (64, 32, 3, 4, 2, False),
    (128, 64, 3, 4, 1, False), (128, 32, 3, 4, 1, False), (64, 32, 2, 4, 2, False)])
def test_gluon_fc2_compiles_for_sm90_with_async_wgmma(block_n, block_t, stages, warps, chains, overlap):
    ptx, sass = _compile_fc2(block_n, block_t, stages, warps, chains, overlap)
    # one accumulator per chain and 64-row warpgroup tile: the HGMMAs' destination registers
    assert len(set(re.findall(r"HGMMA\.\S+ (R\d+),", sass))) == chains * block_n // 64
    assert ptx.count("cp.async.bulk.tensor") >= 5  # the weight words and 4 token planes of a stage, by TMA
    assert ptx.count("0xC480") >= 2  # session 27: plane 0 of a word pair by one cross-word prmt (_fp8x4_pair_planes)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk16\.f32\.bf16\.bf16" % block_t, ptx)
    # the previous step's 4 groups only: the overlap; or none, each step's MMAs waited for
    assert ("wgmma.wait_group.sync.aligned 4;" in ptx) == overlap
    _assert_barriers_fenced_after_init(ptx)


def _compile_fc1(gated, activation, block_n, stages, warps, block_t, overlap, scale_words=False, one_factor=False,
                 maxnreg=None, spills=False, launch_dependents=False):
    """The Gluon FC1 compiled for sm_90: ``(ptx, sass)``."""
    from triton.experimental.gluon import language as gl
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_fc1_kernel as kernel

    q = kernel.GLUON_FC1_BLOCK_K // 4
    types = dict(w_desc=mangle_type(_words_desc(block_n, q)), x_ptr="*bf16", s_ptr="*u8", inter_ptr="*bf16",
                 sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N_OUT="i32", N1="i32",
                 K="i32", stride_x="i32", stride_se="i32", scale_tiles="i32", stride_inter="i32")
    constants = dict(TOPK=8, GATED=gated, ACTIVATION=activation, BLOCK_N=block_n, BLOCK_T=block_t,
                     BLOCK_K=kernel.GLUON_FC1_BLOCK_K, STAGES=stages, PLANE_K2=128,
                     X_LAYOUT=gl.NVMMASharedLayout.get_default_for([block_t, q], gl.bfloat16), OVERLAP=overlap,
                     SCALE_WORDS=scale_words, ONE_FACTOR=one_factor, STEPS_P2=16 if one_factor else 1,
                     LAUNCH_DEPENDENTS=launch_dependents, num_warps=warps)
    return _compile_sm90(kernel._fc1_gluon_kernel, types, constants, warps,
                         ("N_OUT", "N1", "K", "stride_x", "stride_se", "stride_inter"), with_sass=True,
                         maxnreg=maxnreg, spills=spills)


_FC1_CASES = [(gated, activation, 64, 3, 4, 32) for gated, activation in
              ((True, 0), (True, 1), (False, 2), (False, 3), (False, 4))]
_FC1_CASES += [(True, 0, 128, 3, 8, 32), (False, 2, 128, 3, 8, 32), (False, 2, 128, 3, 4, 32)]
_FC1_CASES += [(True, 0, 64, 4, 4, 32), (False, 2, 64, 4, 4, 32)]  # 4 stages (2 do not compile with Triton 3.6)
_FC1_CASES += [(True, 0, 64, 3, 4, 16), (True, 0, 64, 3, 4, 64), (False, 2, 64, 3, 4, 64)]  # the other widths
# the squared-ReLU FC1 of the 64-token "_gq" tiles: 128 rows on 4 warps (two m64 chains) at 64-token blocks, which
# spilled with two register sets (255 registers, 56 bytes of stack with Triton 3.6; run 25 timed the tile anyway) until
# session 27's cross-word dequant (no spill with Triton 3.6 or 3.8)
_FC1_CASES += [(False, 2, 128, 3, 4, 64)]
_FC1_CASES = [case + (True,) for case in _FC1_CASES] + [(True, 0, 64, 3, 4, 32, False), (False, 2, 64, 3, 4, 32, False)]
# session 28's defaults without the overlap: the gated "_nov" FC1 (64 rows, 32-token blocks, above) and the squared-ReLU
# "_f1q" FC1 (128 rows on 4 warps) at 16- and 32-token blocks
_FC1_CASES += [(False, 2, 128, 3, 4, 16, False), (False, 2, 128, 3, 4, 32, False)]


@pytest.mark.parametrize("gated,activation,block_n,stages,warps,block_t,overlap", _FC1_CASES)
def test_gluon_fc1_compiles_for_sm90_with_async_wgmma(gated, activation, block_n, stages, warps, block_t, overlap):
    ptx, sass = _compile_fc1(gated, activation, block_n, stages, warps, block_t, overlap)
    # one accumulator per gate / up half and 64-row warpgroup tile: the HGMMAs' destination registers
    assert len(set(re.findall(r"HGMMA\.\S+ (R\d+),", sass))) == (2 if gated else 1) * block_n * 4 // (64 * warps)
    assert ptx.count("cp.async.bulk.tensor") >= (2 if gated else 1) * 2  # weight words by TMA: prologue + loop
    assert ptx.count("cp.async.cg.shared.global") + ptx.count("cp.async.ca.shared.global") >= 8  # token planes
    # the stage's mbarrier also waits for this thread's copies: one expected arrival per thread and the expect's
    assert "cp.async.mbarrier.arrive.noinc" in ptx
    assert re.search(r"mbarrier\.init\.shared(::cta)?\.b64 \[[^\]]+\], %d;" % (1 + 32 * warps), ptx)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk16\.f32\.bf16\.bf16" % block_t, ptx)
    # the previous step's groups only (or, without overlap, none)
    assert (f"wgmma.wait_group.sync.aligned {8 if gated else 4};" in ptx) == overlap
    assert ptx.count("0xC480") >= 2  # session 27: the FC2's cross-word dequant (_fp8x4_pair_planes)
    _assert_barriers_fenced_after_init(ptx)


def _scale_stride(types: dict, constants: dict, ints: tuple, name: str, transposed: bool) -> tuple:
    """The split rows' scale stride ``name`` between blocks: 1 row-major (a constexpr, as Triton specializes an int
    argument equal to 1 at run time), an i32 where the scales are transposed (``split_scales_t``); returns ``ints``."""
    if transposed:
        types[name] = "i32"
        return (*ints, name)
    constants[name] = 1
    return ints


def _compile_f8x2_fc2(block_n, block_t, stages, timing_skip, warps=4, scales_t=False, step_scale=False):
    """(PTX, SASS) of ``_f8x2_fc2_gluon_kernel`` for sm_90 (Triton's compiler, no GPU) on ``warps`` warps, its token
    scales row-major or transposed (``scales_t``), per 32-value block or per 128-value step (``step_scale``)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc2_kernel as kernel

    def desc(rows, block_rows):
        tensor = torch.zeros(rows, 2048, dtype=torch.float8_e4m3fn)  # descriptors carry dtypes, blocks and layouts
        return TensorDescriptor.from_tensor(tensor, [block_rows, 128], gl.NVMMASharedLayout.get_default_for(
            [block_rows, 128], gl.float8e4nv))

    types = dict(w_desc=mangle_type(desc(4 * 256, block_n)), x_desc=mangle_type(desc(4 * block_t, block_t)),
                 qs_ptr="*fp32", s_ptr="*u8", slot_ptr="*bf16", sorted_pairs_ptr="*i32", block_expert_ptr="*i32",
                 num_blocks_ptr="*i32", N="i32", K="i32", stride_qs="i32", stride_se="i32", scale_tiles="i32",
                 stride_slot="i32")
    constants = dict(BLOCK_N=block_n, BLOCK_T=block_t, STAGES=stages, TIMING_SKIP=timing_skip, STEP_SCALE=step_scale,
                     num_warps=warps)
    ints = _scale_stride(types, constants, ("N", "K", "stride_qs", "stride_se", "stride_slot"), "stride_qsb", scales_t)
    return _compile_sm90(kernel._f8x2_fc2_gluon_kernel, types, constants, warps, ints, mma="QGMMA", with_sass=True)


@pytest.mark.parametrize("block_n,block_t,stages,warps", [(64, 16, 4, 4), (64, 32, 4, 4), (128, 32, 3, 4),
                                                          (128, 16, 3, 4), (128, 16, 4, 4), (128, 16, 3, 8)])
def test_gluon_f8x2_fc2_compiles_for_sm90(block_n, block_t, stages, warps):
    """The f8x2 FC2 in Gluon (session 24; run on the H200 since run 28): weights and split rows by TMA (3 copies per stage),
    fp8 wgmmas of depth 32 with the token count as N, retired down to one block's pair of groups in the PTX, the
    barriers fenced after init, no spills; and in the SASS too ptxas keeps the overlap (``WARPGROUP.DEPBAR.LE gsb0,
    0x2``): with a wgmma in flight across the loop's back edge it serialized them all (C7514, Triton 3.6). Session
    34: on 8 warps too (two warpgroups of 64 rows, "_f128w8")."""
    ptx, sass = _compile_f8x2_fc2(block_n, block_t, stages, 0, warps)
    assert ptx.count("cp.async.bulk.tensor") >= 3  # a stage's weights and its two halves of split rows, by TMA
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk32\.f32\.e4m3\.e4m3" % block_t, ptx)
    assert "wgmma.wait_group.sync.aligned 2;" in ptx  # the previous block's 2 groups only
    assert sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x2") >= 3  # blocks 1-3 of a step retire only the block before
    _assert_barriers_fenced_after_init(ptx)


@pytest.mark.parametrize("skip", ["SKIP_WEIGHTS", "SKIP_SPLIT_ROWS", "SKIP_STORE", "SKIP_TOKEN_SCALE_ROWS"])
def test_f8x2_timing_skips_leave_out_only_their_part(skip):
    """The probes' ``TIMING_SKIP`` forms (session 34) of the f8x2 FC2 and FC1 still run every block's wgmmas
    (``_compile_sm90`` asserts them: a dead store would let the compiler drop the sums); they leave out the weight
    copies (FC2: 1 of 3 TMA copies per stage; FC1: its only TMA copy), the split-row copies (FC2: 2 of 3; FC1: its
    cp.async gathers) or the bf16 store's execution (its mask is false at run time, K > 0); the FC2's token scale rows
    (one row per block instead) change no copy or store, and the FC1 ignores that flag."""
    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc2_kernel as kernel

    flag = getattr(kernel, skip).value
    full, _ = _compile_f8x2_fc2(128, 16, 3, 0)
    ptx, _ = _compile_f8x2_fc2(128, 16, 3, flag)
    copies = {"SKIP_WEIGHTS": 2, "SKIP_SPLIT_ROWS": 1, "SKIP_STORE": 3, "SKIP_TOKEN_SCALE_ROWS": 3}[skip]
    assert ptx.count("cp.async.bulk.tensor") * 3 == full.count("cp.async.bulk.tensor") * copies
    assert ptx.count("st.global") == full.count("st.global") > 0  # the store stays in the code (SKIP_STORE: masked)
    full, _ = _compile_f8x2_fc1(128, 16, 3, 128, False, 0)
    ptx, _ = _compile_f8x2_fc1(128, 16, 3, 128, False, flag)
    if skip == "SKIP_TOKEN_SCALE_ROWS":
        assert ptx == full
        return
    assert ("cp.async.bulk.tensor" in ptx) == (skip != "SKIP_WEIGHTS") and "cp.async.bulk.tensor" in full
    gathers = ("cp.async.cg.shared.global", "cp.async.ca.shared.global")
    assert any(g in ptx for g in gathers) == (skip != "SKIP_SPLIT_ROWS") and any(g in full for g in gathers)
    assert "cp.async.mbarrier.arrive.noinc" in ptx  # every thread still arrives on the stage's mbarrier
    assert ptx.count("st.global") == full.count("st.global") > 0


def _compile_f8x2_fc1(block_n, block_t, stages, plane_k2, gated, timing_skip, step_scale=False):
    """(PTX, SASS) of ``_f8x2_fc1_gluon_kernel`` for sm_90 (Triton's compiler, no GPU), 4 warps; x's token scales per
    32-value block or per 128-value step (``step_scale``)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc1_kernel as kernel

    weights = torch.zeros(4 * 256, 2048, dtype=torch.float8_e4m3fn)  # descriptors carry dtypes, blocks and layouts
    box = block_n // 2 if gated else block_n
    w_desc = TensorDescriptor.from_tensor(weights, [box, 128], gl.NVMMASharedLayout.get_default_for(
        [box, 128], gl.float8e4nv))
    types = dict(w_desc=mangle_type(w_desc), q_ptr="*fp8e4nv", qs_ptr="*fp32", s_ptr="*u8", inter_ptr="*bf16",
                 sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N1="i32", K="i32",
                 stride_q="i32", stride_qs="i32", stride_se="i32", scale_tiles="i32", stride_inter="i32")
    constants = dict(TOPK=8, ACTIVATION=0 if gated else 2, BLOCK_N=block_n, BLOCK_T=block_t, STAGES=stages,
                     PLANE_K2=plane_k2, X_LAYOUT=gl.NVMMASharedLayout.get_default_for([block_t, 128], gl.float8e4nv),
                     GATED=gated, TIMING_SKIP=timing_skip, STEP_SCALE=step_scale, num_warps=4)
    return _compile_sm90(kernel._f8x2_fc1_gluon_kernel, types, constants, 4,
                         ("N1", "K", "stride_q", "stride_qs", "stride_se", "stride_inter"), mma="QGMMA",
                         with_sass=True)


# Session 31 (prepared): the f8x2 FC1 in Gluon for ungated activations ("_g1" / "_g1n64" tiles): 128 rows in 3 stages,
# 64 rows in 4, at 16- and 32-token blocks; session 32: writing plane-major rows for a plane tile's FC2 ("_f1x" tiles,
# ``plane_k2`` 128), and gated (64 gate rows and their 64 up rows, two TMA boxes per stage)
@pytest.mark.parametrize("block_n,block_t,stages,plane_k2,gated", [
    (128, 16, 3, 0, False), (64, 16, 4, 0, False), (128, 32, 3, 0, False), (64, 32, 4, 0, False),
    (128, 16, 3, 128, False), (128, 32, 3, 128, False), (128, 16, 3, 128, True), (128, 32, 3, 128, True)])
def test_gluon_f8x2_fc1_compiles_for_sm90(block_n, block_t, stages, plane_k2, gated):
    """The f8x2 FC1 in Gluon (run on the H200 in runs 35-36): the weights by TMA and the gathered split rows by
    cp.async into the same stage, tied to its mbarrier (one arrival per thread); fp8 wgmmas of depth 32 with the token
    count as N, retired down to one block's pair of groups (``WARPGROUP.DEPBAR.LE gsb0, 0x2`` kept by ptxas), no dequant
    (no bf16 wgmma), the scales as words (no byte loads), the barriers fenced after init, no spills; at 16-token blocks
    at most 128 registers (Triton 3.6: 128 / 80 at 128 / 64 rows; 249 / 180 at 32-token blocks). Gated: two TMA boxes
    of ``block_n / 2`` rows per stage (gate, up) into one ``[block_n, 128]`` stage, the pairs through shared memory."""
    ptx, sass = _compile_f8x2_fc1(block_n, block_t, stages, plane_k2, gated, 0)
    assert ptx.count("cp.async.bulk.tensor") >= 2  # the weights of the prologue's stages and of the refill, by TMA
    assert "cp.async.cg.shared.global" in ptx or "cp.async.ca.shared.global" in ptx  # the gathered split rows
    assert "cp.async.mbarrier.arrive.noinc" in ptx  # each thread's copies counted by the stage's mbarrier
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk32\.f32\.e4m3\.e4m3" % block_t, ptx)
    assert "wgmma.wait_group.sync.aligned 2;" in ptx
    assert sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x2") >= 3
    assert "HGMMA" not in sass and "0xC480" not in ptx  # fp8 MMAs only: no bf16 planes, no dequant
    assert "ld.global.b8" not in ptx and "ld.global.u8" not in ptx  # a step's 4 E8M0 bytes per row as one word
    assert block_t > 16 or _registers(ptx) <= 128
    _assert_barriers_fenced_after_init(ptx)


# Session 35 (run 38: bit-equal, the FC2 117.6 -> 111.6 us at 64 tokens on 30b): FC2's split-row scales transposed
# ("_st" tiles, ``split_scales_t``)
def test_gluon_f8x2_fc2_with_transposed_scales_compiles_for_sm90():
    """The f8x2 FC2 (128 x 16, 3 stages) with its token scales' block stride a run-time value (transposed scales)
    keeps its loop: the wgmmas and their overlap (one block's pair of groups outstanding, kept by ptxas), as many
    global loads and stores as with row-major scales (the same 4 token-scale loads a step, only their addresses
    differ), no spills, at most 128 registers."""
    (rows_ptx, _), (ptx, sass) = (_compile_f8x2_fc2(128, 16, 3, 0, scales_t=t) for t in (False, True))
    assert ptx != rows_ptx  # the stride is an argument now
    assert "wgmma.wait_group.sync.aligned 2;" in ptx and sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x2") >= 3
    for op in ("ld.global", "st.global", "cp.async.bulk.tensor"):
        assert ptx.count(op) == rows_ptx.count(op), op
    assert _registers(ptx) <= 128
    _assert_barriers_fenced_after_init(ptx)


# Session 35 (prepared): one token scale per 128-value K step ("_g128" tiles, ``step_scales``)
@pytest.mark.parametrize("kernel", ["fc2", "fc1", "fc1_gated"])
def test_gluon_f8x2_kernels_with_step_scales_compile_for_sm90(kernel):
    """The f8x2 FC2 (128 x 16, 3 stages) and FC1 (128 x 16 plane rows, ungated and gated) with one token scale a K
    step: the wgmmas and their overlap kept (one block's pair of groups outstanding, also in the SASS), fewer global
    loads in the code (one token scale a step instead of four, prologue and loop), fewer FMULs (the blocks' sums
    take the weight factors alone; the step's token scale once), no spills."""
    compile_ = {"fc2": lambda step: _compile_f8x2_fc2(128, 16, 3, 0, step_scale=step),
                "fc1": lambda step: _compile_f8x2_fc1(128, 16, 3, 128, False, 0, step_scale=step),
                "fc1_gated": lambda step: _compile_f8x2_fc1(128, 16, 3, 128, True, 0, step_scale=step)}[kernel]
    (block_ptx, block_sass), (ptx, sass) = compile_(False), compile_(True)
    assert "wgmma.wait_group.sync.aligned 2;" in ptx and sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x2") >= 3
    assert ptx.count("ld.global.b32") + 6 <= block_ptx.count("ld.global.b32")  # 2 token-scale loads against 8
    assert sass.count("FMUL") < block_sass.count("FMUL")
    assert ptx.count("st.global") == block_ptx.count("st.global")
    _assert_barriers_fenced_after_init(ptx)


# Session 32 (prepared): the f8x2 FC1 writing FC2's split rows itself ("_fs" tiles, ``fc1_split_out``)
@pytest.mark.parametrize("block_n,block_t,gated,scales_t", [(128, 16, False, False), (128, 32, False, False),
                                                            (128, 16, True, False), (128, 16, False, True)])
def test_gluon_f8x2_fc1_with_split_rows_compiles_for_sm90(block_n, block_t, gated, scales_t):
    """``_f8x2_fc1_split_gluon_kernel`` (run on the H200 in run 36): the same K loop as the bf16-row kernel (fp8 wgmmas of
    depth 32, one block's pair of groups outstanding, kept by ptxas), then the split in registers: no bf16 store, at
    most 128 registers at 16-token blocks (Triton 3.6: 128, gated too; 248 at 32-token blocks), no spills. Session 35:
    writing FC2's split rows with their scales transposed too (``split_scales_t``)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_f8x2_fc1_kernel as kernel

    box = block_n // 2 if gated else block_n
    weights = torch.zeros(4 * 256, 2048, dtype=torch.float8_e4m3fn)  # descriptors carry dtypes, blocks and layouts
    w_desc = TensorDescriptor.from_tensor(weights, [box, 128], gl.NVMMASharedLayout.get_default_for(
        [box, 128], gl.float8e4nv))
    types = dict(w_desc=mangle_type(w_desc), q_ptr="*fp8e4nv", qs_ptr="*fp32", s_ptr="*u8", q2_ptr="*fp8e4nv",
                 qs2_ptr="*fp32", sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N1="i32",
                 K="i32", stride_q="i32", stride_qs="i32", stride_se="i32", scale_tiles="i32", stride_q2="i32",
                 stride_qs2="i32")
    constants = dict(TOPK=8, ACTIVATION=0 if gated else 2, BLOCK_N=block_n, BLOCK_T=block_t, STAGES=3,
                     X_LAYOUT=gl.NVMMASharedLayout.get_default_for([block_t, 128], gl.float8e4nv), GATED=gated,
                     STEP_SCALE=False, num_warps=4)
    ints = _scale_stride(types, constants, ("N1", "K", "stride_q", "stride_qs", "stride_se", "stride_q2",
                                            "stride_qs2"), "stride_qs2b", scales_t)
    ptx, sass = _compile_sm90(kernel._f8x2_fc1_split_gluon_kernel, types, constants, 4, ints, mma="QGMMA",
                              with_sass=True)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk32\.f32\.e4m3\.e4m3" % block_t, ptx)
    assert "wgmma.wait_group.sync.aligned 2;" in ptx and sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x2") >= 3
    assert "st.global.b16" not in ptx  # no bf16 rows: e4m3 terms and fp32 scales only
    assert block_t > 16 or _registers(ptx) <= 128
    _assert_barriers_fenced_after_init(ptx)


# Session 28 (prepared): the E8M0 bytes as one int32 per row and K step (``SCALE_WORDS``, ``_e8m0_word_factors``):
# the FC2 of the 16- / 32-token defaults and of the 64-token tiles, the gated FC1 without the overlap and the
# squared-ReLU "_f1q" FC1
@pytest.mark.parametrize("kind,case", [("fc2", (64, 32, 3, 4, 2, False)), ("fc2", (64, 16, 4, 4, 2, True)),
                                       ("fc2", (128, 64, 3, 4, 1, True)), ("fc1", (True, 0, 64, 3, 4, 32, False)),
                                       ("fc1", (False, 2, 128, 3, 4, 32, False))])
def test_gluon_scale_words_compile_to_fewer_instructions(kind, case):
    """With ``SCALE_WORDS`` the K loop loads no scale bytes, only 32-bit words, builds the factors with 16x2 min / max,
    and issues fewer SASS instructions than the same kernel with per-element bytes; everything else the compile tests
    check (no spills, no early register-A writes) still holds."""
    compile_ = _compile_fc2 if kind == "fc2" else _compile_fc1
    ptx_bytes, sass_bytes = compile_(*case)
    ptx, sass = compile_(*case, scale_words=True)
    assert "ld.global.b8" in ptx_bytes and "ld.global.b8" not in ptx
    assert "min.u16x2" in ptx and "max.u16x2" in ptx
    assert "VIMNMX.U16x2" in sass
    assert len(k_loop(sass)) < len(k_loop(sass_bytes))


# Session 28 (prepared): the FC2 without the overlap, one loop iteration per turn of the stage ring (``RING``): every
# stage index, shared-memory address and wgmma descriptor a constant
@pytest.mark.parametrize("case", [(64, 32, 3, 4, 2, False), (128, 32, 3, 4, 1, False), (64, 16, 4, 4, 2, False)])
@pytest.mark.parametrize("scale_words", [False, True])
def test_gluon_fc2_ring_compiles_to_fewer_instructions(case, scale_words):
    """With ``RING`` the K loop issues fewer SASS instructions per K step (its steps: the HGMMAs over 4 planes and
    chains) than the loop with a stage index computed per step; no spills, no early register-A writes
    (``_compile_sm90``), and each step's MMAs still retired before the next step's dequant."""
    ptx, sass = _compile_fc2(*case, scale_words=scale_words, ring=True)
    _, sass_plain = _compile_fc2(*case, scale_words=scale_words)
    stages = case[2]
    assert "wgmma.wait_group.sync.aligned 4;" not in ptx
    per_step = len(k_loop(sass)) / stages
    per_step_plain = len(k_loop(sass_plain)) / 2  # the plain loop holds two steps (the register sets)
    assert per_step < per_step_plain, (per_step, per_step_plain)


# Session 29 (prepared): one scale factor where a program's E8M0 bytes are all below 128 (``ONE_FACTOR``; a branch
# uniform over the program around the dequant): the FC2 of the 32- / 16-token defaults, the 16-28 gated FC2, the
# gated FC1 without the overlap and the squared-ReLU "_f1q" FC1
@pytest.mark.parametrize("kind,case", [("fc2", (64, 32, 3, 4, 2, False)), ("fc2", (64, 16, 4, 4, 2, True)),
                                       ("fc2", (128, 32, 3, 4, 1, False)), ("fc1", (True, 0, 64, 3, 4, 32, False)),
                                       ("fc1", (False, 2, 128, 3, 4, 32, False))])
def test_gluon_one_factor_runs_fewer_instructions(kind, case):
    """With ``ONE_FACTOR`` one K-loop iteration on the one-factor path runs at least 10% fewer SASS instructions than
    the scale-word kernel's, the two-factor path at most 5% more (Triton 3.6: 0.2-1.8%, 3.8: up to 4.1%); the loop
    holds both (half the HMUL2s on the first path), and everything ``_compile_sm90`` checks (no spills, no early
    register-A writes) still holds."""
    compile_ = _compile_fc2 if kind == "fc2" else _compile_fc1
    _, sass_words = compile_(*case, scale_words=True)
    ptx, sass = compile_(*case, scale_words=True, one_factor=True)
    words = len(k_loop(sass_words))
    one, two = k_loop_paths(sass)
    assert k_loop_paths(sass_words) == (words, words)  # no such branch without ONE_FACTOR
    assert one < 0.9 * words and two <= 1.05 * words, (one, two, words)
    assert "min.u16x2" in ptx and "mad.lo.u32" in ptx  # the two-factor path is still there
    loop = k_loop(sass)
    assert 2 * sum(i.startswith("HMUL2") for i in loop) == 3 * sum(i.startswith("HMUL2") for i in k_loop(sass_words))


# Session 30: the Gluon FC2 as a programmatic dependent launch of its FC1 (``PDL`` / ``LAUNCH_DEPENDENTS``)
@pytest.mark.parametrize("case", [(64, 16, 4, 4, 2, True), (64, 32, 3, 4, 2, False), (128, 32, 3, 4, 1, False)])
def test_gluon_fc2_waits_for_its_fc1_before_the_token_planes(case):
    """With ``PDL`` the FC2's prologue issues its STAGES - 1 weight copies before ``griddepcontrol.wait`` (SASS
    ``ACQBULK``) and every token-plane copy after it (4 per step), with the K loop and the registers of the kernel
    without it; the FC1 with ``LAUNCH_DEPENDENTS`` lets it start first thing (``PREEXIT``); neither without them."""
    stages = case[2]
    ptx, sass = _compile_fc2(*case, scale_words=True, pdl=True)
    ptx_plain, sass_plain = _compile_fc2(*case, scale_words=True)
    copies = [i for i, line in enumerate(sass.splitlines()) if "UTMALDG" in line]
    wait = next(i for i, line in enumerate(sass.splitlines()) if "ACQBULK" in line)
    assert sum(i < wait for i in copies) == stages - 1
    assert sum(i > wait for i in copies) == 4 * (stages - 1) + 5 * 2  # the prologue's planes, the loop's refills
    assert len(k_loop(sass)) == len(k_loop(sass_plain))
    assert "ACQBULK" not in sass_plain and "griddepcontrol" not in ptx_plain
    assert _registers(ptx) == _registers(ptx_plain)
    _, sass = _compile_fc1(False, 2, 128, 3, 4, 16, False, scale_words=True, launch_dependents=True)
    assert sass.split("PREEXIT")[0].count(";") <= 4  # among the first instructions
    _, sass = _compile_fc1(False, 2, 128, 3, 4, 16, False, scale_words=True)
    assert "PREEXIT" not in sass


def test_gluon_one_factor_squared_relu_fc1_fits_128_registers():
    """The squared-ReLU "_f1q" FC1 (128 rows, 32-token blocks, no overlap) with one factor needs more than 128
    registers uncapped (fewer programs per SM than without it); under the "_of" tiles' cap of 128 it has no spills
    with Triton 3.6, the version the Gluon tiles run with (3.8 spills 8 bytes), and one iteration on the one-factor
    path still runs at least 10% fewer instructions."""
    import triton

    case = (False, 2, 128, 3, 4, 32, False)
    ptx, _ = _compile_fc1(*case, scale_words=True, one_factor=True)
    assert _registers(ptx) > 128
    tested = triton.__version__.startswith("3.6.")
    ptx, sass = _compile_fc1(*case, scale_words=True, one_factor=True, maxnreg=128, spills=False if tested else None)
    assert _registers(ptx) <= 128
    _, sass_words = _compile_fc1(*case, scale_words=True)
    assert k_loop_paths(sass)[0] < 0.9 * len(k_loop(sass_words))


def _compile_ws(fc, block_t, block_k, stages, sx=False, thread_arrive=False, staged=False, persistent=False,
                dstages=2, wstages=0, gated=False, prefetch=False):
    """The warp-specialized FC1 (``fc`` 1, squared ReLU, or ``gated`` SwiGLU) or FC2 (session 39) compiled for sm_90
    at 128 rows: ``(ptx, sass, shared bytes)``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_ws_kernel as kernel
    from megatron_mxfp8_moe.kernels._gluon_fc2_kernel import nvmma_descriptor

    w = torch.zeros(4 * 256, 1024, dtype=torch.float8_e4m3fn)  # descriptors only carry dtypes, blocks and layouts
    w_desc = nvmma_descriptor(w, [64 if gated else 128, block_k])  # gated: one half's box
    a_desc = nvmma_descriptor(torch.zeros(4 * block_t, 1024, dtype=torch.bfloat16), [block_t, block_k])
    constants = dict(BLOCK_N=128, BLOCK_T=block_t, BLOCK_K=block_k, STAGES=stages, WSTAGES=wstages or 2 * stages,
                     DSTAGES=dstages, PRODUCER_WARPS=4, PRODUCER_REGS=152, SX=sx, STEPS_P2=16,
                     THREAD_ARRIVE=thread_arrive, num_warps=8)
    if persistent:
        constants.update(PREFETCH=prefetch)
    else:
        constants.update(STAGED=staged)
    if fc == 1:
        fn = kernel._fc1_ws_persistent_kernel if persistent else kernel._fc1_ws_kernel
        types = dict(w_desc=mangle_type(w_desc), x_ptr="*bf16", s_ptr="*u8", inter_ptr="*bf16",
                     sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N_OUT="i32", N1="i32",
                     K="i32", stride_x="i32", stride_se="i32", scale_tiles="i32", stride_inter="i32")
        constants.update(TOPK=8, ACTIVATION=0 if gated else 2, GATED=gated)
        ints = ("N_OUT", "N1", "K", "stride_x", "stride_se", "stride_inter")
    else:
        fn = kernel._fc2_ws_persistent_kernel if persistent else kernel._fc2_ws_kernel
        types = dict(w_desc=mangle_type(w_desc), a_desc=mangle_type(a_desc), s_ptr="*u8", slot_ptr="*bf16",
                     sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N="i32", K="i32",
                     stride_se="i32", scale_tiles="i32", stride_slot="i32")
        ints = ("N", "K", "stride_se", "stride_slot")
    signature = {name: types.get(name, "constexpr") for name in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or name in ints}
    source = GluonASTSource(fn=fn, signature=signature, attrs=attrs,
                            constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8))
    return compiled.asm["ptx"], disassemble(compiled.asm["cubin"]), compiled.metadata.shared


@pytest.mark.parametrize("fc,block_t,block_k,stages,sx", [(2, 256, 64, 3, False), (2, 128, 64, 3, False),
                                                           (2, 256, 32, 4, False), (2, 256, 64, 4, False),
                                                           (2, 256, 64, 4, True), (1, 256, 64, 3, False),
                                                           (1, 128, 64, 3, False), (1, 256, 32, 4, False),
                                                           (1, 256, 64, 4, False), (1, 256, 64, 4, True)])
def test_warp_specialized_fcs_compile_for_sm90(fc, block_t, block_k, stages, sx):
    """``fc2_ws`` / ``fc1_ws`` (session 39; GPU-tested since session 40): one producer warpgroup beside two consumer
    warpgroups (384 threads, so 168 registers: a 64 x 256 wgmma's accumulator takes 128); the weights by TMA, FC2's
    inter rows by TMA, FC1's gathered x rows by cp.async counted by the stage's mbarrier; every wgmma with both
    operands in shared memory (no register-A operand, so no register hazard), one step's wgmmas left in flight; each
    partition syncs its own warps only (named barriers of 256 and 128 threads); the stage barriers fenced after init.
    No spill with Triton 3.6 (the GPU-tested version); with others at most 128 bytes (Triton 3.8's FC1: 124)."""

    from megatron_mxfp8_moe.kernels.triton_moe import ws_shared_bytes

    ptx, sass, shared = _compile_ws(fc, block_t, block_k, stages, sx)
    assert ".reqntid 384" in ptx and ws_shared_bytes(block_t, block_k, stages) <= shared <= 227 * 1024
    _assert_ws_spills_bounded(ptx)
    assert ptx.count("cp.async.bulk.tensor") >= (1 if fc == 1 else 2) and "setmaxnreg" in ptx
    if fc == 1:
        assert "cp.async.mbarrier.arrive.noinc" in ptx and ptx.count("cp.async.cg.shared.global") >= 2
    mmas = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16 R\d+, (\S+),", sass)
    assert len(mmas) == block_k // 16 and all(int(n) == block_t and a.startswith("gdesc") for n, a in mmas), mmas
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assert {"bar.sync \t0, 256", "bar.sync \t2, 128"} <= set(re.findall(r"bar\.sync \t\d+, \d+", ptx))
    _assert_barriers_fenced_after_init(ptx)
    # the epilogue (session 41): the tile goes through shared memory into a row layout and out in 16-byte stores,
    # 8 consecutive outputs per thread (was 128 two-byte stores per thread), with the rings' memory reused for it
    assert re.findall(r"STG\.E[.\w]*", sass) == ["STG.E.128"] * (128 * block_t // (8 * 256)), sass.count("STG")
    # the producer's dequant: ``ws_sx`` moves bits (sign-extending prmt) and multiplies in bf16x2, with no fp8
    # convert; without it, the fp8 convert and fp32 multiplies
    converts = ptx.count("cvt.rn.f16x2.e4m3x2")
    if sx:
        assert converts == 0 and "prmt.b32 t, t, 0, 0x9180;" in ptx and "HMUL2.BF16" in sass
    else:
        assert converts > 0 and "0x9180" not in ptx


@pytest.mark.parametrize("fc", [1, 2])
def test_ws_thread_arrive_drops_the_consumers_step_barrier(fc):
    """``ws_thread_arrive`` (session 41): each consumer thread frees step k - 1's token and bf16 weight stages with its
    own arrive (the cp.async form, ``.noinc``: those barriers expect 256 per phase) after its own wgmma wait, so the
    consumers' K loop has no 256-thread barrier and no single-thread arrive; shared memory and spills as without it."""
    base_ptx, _, base_shared = _compile_ws(fc, 256, 64, 4)
    ptx, _, shared = _compile_ws(fc, 256, 64, 4, thread_arrive=True)

    def count(text, pattern):
        return len(re.findall(pattern, text))

    per_thread, single = r"cp\.async\.mbarrier\.arrive\.noinc\.shared\.b64", r"mbarrier\.arrive\.shared::cta\.b64"
    assert count(ptx, per_thread) == count(base_ptx, per_thread) + 2
    assert count(ptx, single) == count(base_ptx, single) - 2
    # the loop's barrier gone (Triton 3.6: that one; 3.8 removes 3 in all)
    assert count(ptx, r"bar\.sync \t0, 256") <= count(base_ptx, r"bar\.sync \t0, 256") - 1
    inits = re.findall(r"mbarrier\.init\.shared(?:::cta)?\.b64 \[[^\]]+\], (\d+);", ptx)
    base_inits = re.findall(r"mbarrier\.init\.shared(?:::cta)?\.b64 \[[^\]]+\], (\d+);", base_ptx)
    assert inits.count("256") == base_inits.count("256") + 4 + 2, (inits, base_inits)  # 4 token stages, 2 bf16
    assert shared == base_shared and ".reqntid 384" in ptx
    assert _spilled(ptx) <= _spilled(base_ptx), (_spilled(ptx), _spilled(base_ptx))
    _assert_barriers_fenced_after_init(ptx)


_MBARRIER_INIT = r"mbarrier\.init\.shared(?:::cta)?\.b64 \[[^\]]+\], (\d+);"


@pytest.mark.parametrize("fc", [1, 2])
@pytest.mark.parametrize("stages,dstages,wstages", [(4, 3, 6), (3, 3, 0)])
def test_ws_deeper_bf16_ring_compiles_for_sm90(fc, stages, dstages, wstages):
    """``ws_dstages`` / ``ws_wstages`` (session 42, "_d3"): 3 bf16 weight stages (the producer up to two steps ahead
    of the consumers' MMA), the fp8 ring ``wstages`` deep (0: twice the token stages). One stage barrier more per
    bf16 stage pair (``deq_ready``, ``deq_empty``), one fewer per fp8 stage given up; shared memory within
    ``ws_shared_bytes`` of those depths and 227 KiB (the 4-stage default's 224 KiB with 6 fp8 stages); no spill
    (Triton 3.6); the same wgmmas and 16-byte stores."""

    from megatron_mxfp8_moe.kernels.triton_moe import ws_shared_bytes

    base_ptx, _, _ = _compile_ws(fc, 256, 64, stages)
    ptx, sass, shared = _compile_ws(fc, 256, 64, stages, dstages=dstages, wstages=wstages)
    expected = ws_shared_bytes(256, 64, stages, dstages, wstages=wstages)
    assert expected <= shared <= 227 * 1024 and ".reqntid 384" in ptx
    inits, base_inits = re.findall(_MBARRIER_INIT, ptx), re.findall(_MBARRIER_INIT, base_ptx)
    assert len(inits) == len(base_inits) + 2 * (dstages - 2) + (wstages or 2 * stages) - 2 * stages, inits
    _assert_ws_spills_bounded(ptx)
    assert _sass_ops(sass)["STG.E.128"] == 16
    assert re.findall(r"HGMMA\.64x(\d+)x16", sass) == ["256"] * 4
    _assert_barriers_fenced_after_init(ptx)


def _sass_ops(sass):
    """The SASS opcodes of a kernel, counted."""
    ops = [line.split("*/")[-1].split(";")[0].split() for line in sass.splitlines()
           if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    return collections.Counter(op[1] if op[0].startswith("@") else op[0] for op in ops if op)


@pytest.mark.parametrize("fc", [1, 2])
def test_ws_staged_epilogue_takes_one_round(fc):
    """``ws_staged_epilogue`` (session 41): the epilogue stores its bf16 tile whole into shared memory (stmatrix), one
    barrier, reads it back in the row layout and stores 16-byte pieces; the compiler's conversion without it took 16
    rounds of two barriers each (Triton 3.6). Shared memory unchanged (the rings' bytes, dead by then)."""
    base_ptx, base_sass, base_shared = _compile_ws(fc, 256, 64, 4)
    ptx, sass, shared = _compile_ws(fc, 256, 64, 4, staged=True)
    base, staged = _sass_ops(base_sass), _sass_ops(sass)
    bars = [sum(n for op, n in ops.items() if op.startswith("BAR")) for ops in (base, staged)]
    assert bars[1] <= bars[0] - 24, bars
    assert staged["STG.E.128"] == 16 and staged["STSM.16.MT88.4"] >= 16, staged
    assert shared == base_shared
    assert _spilled(ptx) <= _spilled(base_ptx), (_spilled(ptx), _spilled(base_ptx))


@pytest.mark.parametrize("fc", [1, 2])
@pytest.mark.parametrize("thread_arrive", [False, True])
def test_ws_persistent_kernels_compile_for_sm90(fc, thread_arrive):
    """``ws_persistent`` (session 41): the persistent ws FCs (one program per SM over the live tiles, both partitions
    counting ring positions across tiles) compile for sm_90 at 3 token stages: 384 threads, no spill (Triton 3.6), the
    16-byte epilogue stores, shared memory within ``ws_shared_bytes(..., persistent=True)`` (the rings and the
    epilogue's conversion scratch beside them) and within 227 KiB; the 4-stage rings would not leave room for it."""

    from megatron_mxfp8_moe.kernels.triton_moe import ws_shared_bytes

    ptx, sass, shared = _compile_ws(fc, 256, 64, 3, thread_arrive=thread_arrive, persistent=True)
    assert ".reqntid 384" in ptx and "setmaxnreg" in ptx
    assert ws_shared_bytes(256, 64, 3) < shared <= ws_shared_bytes(256, 64, 3, persistent=True) <= 227 * 1024
    assert ws_shared_bytes(256, 64, 4, persistent=True) > 227 * 1024
    _assert_ws_spills_bounded(ptx)
    assert _sass_ops(sass)["STG.E.128"] == 16
    mmas = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", sass)
    assert len(mmas) == 64 // 16 and set(mmas) == {"256"}, mmas
    _assert_barriers_fenced_after_init(ptx)


@pytest.mark.parametrize("persistent", [False, True])
def test_gated_ws_fc1_compiles_for_sm90(persistent):
    """The gated ws FC1 (session 43, SwiGLU: ``fc1_ws`` with 64 gate rows and their 64 up rows per tile) compiles for
    sm_90 like the ungated one: 384 threads, no spill (Triton 3.6), the same 4 HGMMA 64x256x16 per 64-deep step on
    128 weight rows, shared memory as the ungated kernel's; two TMA boxes per weight stage (gate, up; the ungated
    kernel's copy sites doubled); half the 16-byte epilogue stores (64 outputs per tile); and no shuffle, so neither the
    producer's row interleave nor the consumers' gate / up split moves data between threads."""

    ptx, sass, shared = _compile_ws(1, 256, 64, 3, persistent=persistent, gated=True)
    base_ptx, base_sass, base_shared = _compile_ws(1, 256, 64, 3, persistent=persistent)
    assert ".reqntid 384" in ptx and "setmaxnreg" in ptx and shared == base_shared
    _assert_ws_spills_bounded(ptx)
    mmas = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", sass)
    assert len(mmas) == 64 // 16 and set(mmas) == {"256"}, mmas
    ops, base_ops = _sass_ops(sass), _sass_ops(base_sass)
    assert ops["STG.E.128"] == base_ops["STG.E.128"] // 2 == 8
    assert ptx.count("cp.async.bulk.tensor") == 2 * base_ptx.count("cp.async.bulk.tensor")
    assert not any(op.startswith("SHFL") for op in ops), sorted(op for op in ops if op.startswith("SHFL"))
    assert "ex2.approx" in ptx  # the SwiGLU's sigmoid
    _assert_barriers_fenced_after_init(ptx)


@pytest.mark.parametrize("fc,gated", [(1, False), (1, True), (2, False)])
def test_ws_persistent_kernels_at_4_stages_fit_with_6_weight_stages(fc, gated):
    """The "_p_s4" tiles (session 43): the persistent ws kernels at 4 token stages and 6 fp8 weight stages compile for
    sm_90 within ``ws_shared_bytes(..., wstages=6, persistent=True)`` (216 KiB) and 227 KiB, with no spill (Triton
    3.6); with 8 weight stages they would not fit."""

    from megatron_mxfp8_moe.kernels.triton_moe import TILES, ws_shared_bytes

    ptx, sass, shared = _compile_ws(fc, 256, 64, 4, persistent=True, wstages=6, gated=gated)
    assert shared <= ws_shared_bytes(256, 64, 4, wstages=6, persistent=True) <= 227 * 1024 < ws_shared_bytes(
        256, 64, 4, persistent=True)
    _assert_ws_spills_bounded(ptx)
    for name in ("x256w_sa_t32a_wsb_p_s4", "x256m_sa_t32_wsb_p_s4"):
        tile = TILES[name]
        assert (tile.fc1_stages, tile.fc2_stages, tile.ws_wstages, tile.ws_persistent) == (4, 4, 6, True)


@pytest.mark.parametrize("fc,gated", [(1, False), (1, True), (2, False)])
def test_ws_prefetch_and_decode_forms_compile_for_sm90(fc, gated):
    """Session 44: ``ws_prefetch`` adds the persistent producer's cross-tile copy sites (the weights' TMA, and the
    token rows': FC2 TMA, FC1 cp.async) beside the in-tile ones; the decode ws tiles (16-token blocks, 4 token / 12 fp8
    stages) keep 384 threads, fit their ``ws_shared_bytes`` within 227 KiB and do not spill."""
    from megatron_mxfp8_moe.kernels.triton_moe import ws_shared_bytes

    def copy_sites(ptx):
        return len(re.findall(r"cp\.async\.bulk\.tensor", ptx)), len(re.findall(r"cp\.async\.cg\.shared", ptx))

    base_ptx, _, _ = _compile_ws(fc, 256, 64, 3, persistent=True, gated=gated)
    ptx, _, _ = _compile_ws(fc, 256, 64, 3, persistent=True, gated=gated, prefetch=True)
    (tma, gathers), (base_tma, base_gathers) = copy_sites(ptx), copy_sites(base_ptx)
    assert tma > base_tma and (gathers > base_gathers if fc == 1 else gathers == base_gathers == 0), (
        copy_sites(ptx), copy_sites(base_ptx))
    ptx, _, shared = _compile_ws(fc, 16, 64, 4, persistent=True, gated=gated, prefetch=True, wstages=12)
    assert ws_shared_bytes(16, 64, 4, persistent=True, wstages=12) - 8 * 1024 <= shared <= 227 * 1024
    assert ".reqntid 384" in ptx
    _assert_ws_spills_bounded(ptx)
