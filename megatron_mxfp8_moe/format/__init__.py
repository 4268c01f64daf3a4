"""The MXFP8 format: constants, the E8M0 scale rule, the cuBLAS 128x4 scale swizzle, input checks."""
