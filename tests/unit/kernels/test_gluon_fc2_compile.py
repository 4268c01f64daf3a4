"""The Gluon FC2 kernel compiled for sm_90 on the CPU (no GPU needed: Triton's own ptxas), with the installed Triton.

It checks the structure the speed comes from: TMA copies of the stages, asynchronous wgmmas waited for down to one
step's 4 outstanding groups (so a step's dequant overlaps the previous step's MMAs), and no spills. The bits and
the speed are checked on an H200 (tests/functional/test_triton_moe_gpu.py, bench/gluon_fc2_probe.py)."""

import re

import pytest
import torch

gluon = pytest.importorskip("triton.experimental.gluon", reason="needs Triton's Gluon dialect")


@pytest.mark.parametrize("block_n,block_t,stages,warps", [(128, 32, 3, 4), (64, 32, 2, 4), (64, 16, 3, 4)])
def test_gluon_fc2_compiles_for_sm90_with_async_wgmma(block_n, block_t, stages, warps):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from megatron_mxfp8_moe.kernels import _gluon_fc2_kernel as kernel

    q = kernel.GLUON_FC2_BLOCK_K // 4
    words = torch.zeros(4 * 256, 256, dtype=torch.int32)  # descriptors only carry dtypes, blocks and layouts here
    inter = torch.zeros(4 * block_t, 1024, dtype=torch.bfloat16)
    w_desc = TensorDescriptor.from_tensor(words, [block_n, q], gl.NVMMASharedLayout.get_default_for([block_n, q],
                                                                                                    gl.int32))
    a_desc = TensorDescriptor.from_tensor(inter, [block_t, q], gl.NVMMASharedLayout.get_default_for([block_t, q],
                                                                                                    gl.bfloat16))
    fn = kernel._fc2_gluon_kernel
    types = dict(w_desc=mangle_type(w_desc), a_desc=mangle_type(a_desc), s_ptr="*u8", slot_ptr="*bf16",
                 sorted_pairs_ptr="*i32", block_expert_ptr="*i32", num_blocks_ptr="*i32", N="i32", K="i32",
                 stride_se="i32", scale_tiles="i32", stride_slot="i32")
    constants = dict(BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=kernel.GLUON_FC2_BLOCK_K, STAGES=stages,
                     num_warps=warps)
    signature = {name: types.get(name, "constexpr") for name in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or name in ("N", "K", "stride_se", "stride_slot")}
    source = GluonASTSource(fn=fn, signature=signature, attrs=attrs,
                            constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    ptx = compiled.asm["ptx"]
    assert ptx.count("cp.async.bulk.tensor") >= 5  # the weight words and 4 token planes of a stage, by TMA
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n%d k16\.f32\.bf16\.bf16".replace(" ", "") % block_t, ptx)
    assert "wgmma.wait_group.sync.aligned 4;" in ptx  # the previous step's 4 groups only: the overlap
    assert ".local" not in ptx  # no local-memory (spill) traffic
    assert compiled.metadata.shared <= 227 * 1024
