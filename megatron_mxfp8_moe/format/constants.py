"""Numbers of the MXFP8 format (OCP MX v1.0, e4m3 elements, E8M0 block scales).

Shape legend used package-wide:
  format code: data ``[M, K]`` (or a stack ``[E, M, K]``), logical scales ``[M, K // 32]``.
  MoE code: ``T`` rows (tokens), ``H`` hidden, ``I`` intermediate, ``E`` local experts, ``topk``.
"""

import torch

BLOCK_SIZE = 32  # values along K that share one E8M0 scale
E4M3_MAX = 448.0  # largest finite float8_e4m3fn
E8M0_BIAS = 127  # scale byte b encodes 2 ** (b - 127)
E8M0_NAN = 255  # the E8M0 NaN encoding; never produced by the quantizer

SWIZZLE_ROWS = 128  # rows of one cuBLAS block-scale tile
SWIZZLE_COLS = 4  # scale columns (K blocks) of one tile
SWIZZLE_TILE_BYTES = SWIZZLE_ROWS * SWIZZLE_COLS  # 512

DATA_DTYPE = torch.float8_e4m3fn
SCALE_DTYPE = torch.float8_e8m0fnu  # Megatron-Core's Triton quantizer returns scales with this dtype
SOURCE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
