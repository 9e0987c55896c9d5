"""Triton kernels of sparse_mla: the KV-cache writer and the fused sparse MLA attention (the fallback route)."""
