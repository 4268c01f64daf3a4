"""MoE kernels: the reference oracle, the Hopper Triton path and the FlashInfer launchers."""
