"""Providers of the CUDA rules."""

CudaCompileInfo = provider(
    doc = "How a cuda_objects target compiles: lets analysis tests check the command line without a GPU.",
    fields = {
        "flags": "list of string: the nvcc arguments shared by every source, before `-c src -o obj`.",
        "objects": "depset of File: one object per source.",
    },
)
