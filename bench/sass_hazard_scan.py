"""Scan (session 21, CPU only): register-A wgmma hazards in the SASS of the default Triton FC1 / FC2 launches.

For each token count and activation, ``choose_config`` picks the tile (Triton tiles: Gluon off). A call on the CPU
records the FC1 / FC2 launches of the MMA path (every launched Triton kernel replaced by a recorder, so nothing
runs). Each one is compiled for sm_90 with the installed Triton (``ASTSource``; tensors 16-byte aligned, integers
divisible by 16 marked so, like the JIT), disassembled, and checked with ``kernels.sass_hazards.register_a_hazards``. One JSON
line per launch: tile, kernel, HGMMA count, hazards (with the first pair), and the DEPBAR count. The GEMV paths have
no HGMMA and are skipped. A hazard here is undefined behaviour by PTX, not a measured failure: how long the window
is depends on what runs between the HGMMA and the write.

    python3 bench/sass_hazard_scan.py --tokens 256,1024,4096
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SIGNATURE_DTYPES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.int32: "i32", torch.uint8: "u8",
                     torch.float8_e4m3fn: "fp8e4nv", torch.int64: "i64", torch.int8: "i8"}


class _Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](*args, **kwargs)`` records the launch instead of running it."""

    def __init__(self, name, fn, launches):
        self.name, self.fn, self.launches = name, fn, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.name, self.fn, args, kwargs))


def _compile_sass(fn, args, kwargs) -> tuple[str, int]:
    """The SASS of ``fn`` compiled for sm_90 with a launch's arguments, and its shared memory in bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from megatron_mxfp8_moe.kernels.sass_hazards import disassemble

    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}
    values = dict(zip(fn.arg_names, args), **kwargs)
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params)):
        value = values[name] if name in values else param.default  # a parameter the launch left at its default
        if param.is_constexpr or value is None:
            signature[name], constexprs[(i,)] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name], attrs[(i,)] = "*" + _SIGNATURE_DTYPES[value.dtype], [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32"
            if value and value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            raise TypeError(f"{name}: {type(value).__name__}")
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return disassemble(compiled.asm["cubin"]), compiled.metadata.shared


def _ctas_per_sm(sass: str, shared: int, warps: int) -> tuple[int, int]:
    """(registers per thread, CTAs per H200 SM) from the highest register the SASS names (allocated in units of 8 per
    thread, 64K per SM) and the shared memory (228 KB per SM, 1 KB reserved per CTA)."""
    top = max((int(r) for r in re.findall(r"\bR(\d+)\b", sass)), default=0) + 1
    registers = -(-(top + 2) // 8) * 8  # 2 more: what ptxas reserves beyond the named ones
    by_registers = 65536 // (registers * 32 * warps)
    by_shared = (228 * 1024) // (shared + 1024)
    return registers, min(by_registers, by_shared, 64 // warps)


def main() -> None:
    from triton.runtime.jit import JITFunction

    from bench.triton_moe_probe import parse_config
    from megatron_mxfp8_moe.kernels import _triton_f8x2_kernel as f8x2_kernels
    from megatron_mxfp8_moe.kernels import _triton_moe_kernel as kernels
    from megatron_mxfp8_moe.kernels import triton_launch, triton_moe, triton_tiles
    from megatron_mxfp8_moe.kernels.sass_hazards import register_a_hazards
    from megatron_mxfp8_moe.tensor import quantize_mxfp8
    from megatron_mxfp8_moe.testing import random_routing

    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="64,256,512,640,1024,4096")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--inter", type=int, default=768)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--sync-dots", action="store_true", help="the chosen tile with sync_dots (and its tail)")
    parser.add_argument("--activations", default="swiglu,squared_relu")
    parser.add_argument("--dump", default=None, help="folder for each launch's SASS (<activation>_<tokens>_<tile>_<n><kernel>.sass)")
    parser.add_argument("--configs", default=None,
                        help="comma-separated probe-style tiles (bench/triton_moe_probe.py: name[+field=value...]) "
                             "compiled at each token count instead of choose_config's")
    args = parser.parse_args()
    launches = []
    for module in (kernels, f8x2_kernels):  # the launched kernels only: the helpers they call stay JIT functions
        for name in dir(module):
            if name.endswith("_kernel") and isinstance(getattr(module, name), JITFunction):
                setattr(module, name, _Recorder(name, getattr(module, name), launches))
    triton_launch._side_stream = lambda device: None  # CPU: one stream
    e, h, i = args.experts, args.hidden, args.inter
    names = {id(tile): name for name, tile in triton_moe.TILES.items()}
    for activation in args.activations.split(","):
        gated = activation == "swiglu"
        fc1 = quantize_mxfp8(torch.randn(e, (2 if gated else 1) * i, h, dtype=torch.bfloat16) * 0.02,
                             backend="reference")
        fc2 = quantize_mxfp8(torch.randn(e, h, i, dtype=torch.bfloat16) * 0.02, backend="reference")
        for tokens, named in ((int(t), c) for t in args.tokens.split(",")
                              for c in (args.configs.split(",") if args.configs else [None])):
            if named is None:
                cfg = triton_moe.choose_config(tokens, h, i, gated=gated, topk=8, experts=e, gluon=False)
                tile = names.get(id(cfg), "?")
            else:
                cfg, tile = parse_config(named), named
            if args.sync_dots:
                cfg, tile = triton_tiles._synced(cfg), tile + " (sync_dots)"
            launches.clear()
            x = torch.randn(tokens, h, dtype=torch.bfloat16)
            probs, ids = random_routing(tokens, e, 8)
            triton_moe.triton_mxfp8_moe(x, probs, ids, fc1, fc2, activation=activation, config=cfg,
                                        valid_tokens=torch.tensor([tokens], dtype=torch.int32))
            for n, (kernel, fn, call_args, call_kwargs) in enumerate(launches):
                if kernel not in ("_fc1_kernel", "_fc2_kernel", "_f8x2_fc1_kernel", "_f8x2_fc2_kernel"):
                    continue
                sass, shared = _compile_sass(fn, call_args, call_kwargs)
                registers, ctas = _ctas_per_sm(sass, shared, call_kwargs["num_warps"])
                if args.dump:
                    os.makedirs(args.dump, exist_ok=True)
                    label = re.sub(r"[^A-Za-z0-9_=.-]+", "_", tile)
                    with open(os.path.join(args.dump, f"{activation}_{tokens}_{label}_{n}{kernel}.sass"), "w") as out:
                        out.write(sass)
                hazards = register_a_hazards(sass) if "HGMMA" in sass else []
                print(json.dumps({"activation": activation, "tokens": tokens, "tile": tile,
                                  "kernel": kernel, "block_t": call_kwargs.get("BLOCK_T"),
                                  "hgmma": sass.count("HGMMA"), "hazards": len(hazards),
                                  "first": list(hazards[0]) if hazards else None,
                                  "depbar": sass.count("WARPGROUP.DEPBAR"), "shared": shared,
                                  "registers": registers, "ctas_per_sm": ctas,
                                  "ldgsts_waits": re.findall(r"DEPBAR\.LE SB0, (0x[0-9a-f]+)", sass)}), flush=True)


if __name__ == "__main__":
    main()
