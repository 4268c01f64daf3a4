"""MXFP8 quantizers: identical bytes from every backend (reference, triton, flashinfer)."""
