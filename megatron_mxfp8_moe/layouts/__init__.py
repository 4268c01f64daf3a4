"""Byte-exact repacks of canonical MXFP8 expert stacks into kernel layouts; each ``prepare_*`` has its ``unpack_*``.

canonical experts (fp8 bytes + 128x4 E8M0 bytes) -> row permutation / zero padding / re-interleave -> kernel stack.
Nothing here re-quantizes: every output byte is a canonical byte or a zero padding byte.
"""
