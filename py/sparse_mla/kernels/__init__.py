"""Triton kernels of sparse_mla: top-k index conversion, KV-cache writer, sparse MLA attention."""
