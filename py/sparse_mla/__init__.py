"""sparse_mla: DeepSeek-V3.2 sparse MLA attention for serving engines, on Hopper GPUs (and any GPU or the
CPU through its Triton fallback).

The API an engine calls is named in ``__all__`` and importable from here (each name loads its module on
first use, so ``import sparse_mla`` stays cheap): build a step's :class:`SparseMLAMetadata` once with
:class:`SparseMLAMetadataBuilder` from a :class:`CommonAttentionMetadata`, write the new tokens with
:func:`write_kv`, and run each layer with :meth:`SparseMLAImpl.forward`; :func:`sparse_mla_reference` is
the float32 oracle. Modules: ``backend`` (the API), ``routing`` and ``routes`` (which kernels serve a
step), ``ops.decode`` (our CUDA decode kernels), ``ops.fa3`` (SGLang's FA3 with our index conversion),
``ops.token_metadata`` (the builder's per-token kernel), ``kernels`` (Triton: KV-cache writer, fused
sparse attention), ``kv_cache_format`` and ``fp8_ds_mla`` (the bf16 and fp8 caches), ``reference``,
``constants``, ``checks``, ``topk_filter`` (top-k row lengths and the DCP shard every route applies),
``merge`` (the cross-rank (out, LSE) merge of decode context parallelism).
"""

import importlib

_EXPORTS = {
    "SparseMLABackend": "sparse_mla.backend",
    "SparseMLAImpl": "sparse_mla.backend",
    "SparseMLAMetadata": "sparse_mla.backend",
    "SparseMLAMetadataBuilder": "sparse_mla.backend",
    "CommonAttentionMetadata": "sparse_mla.common_metadata",
    "DEEPSEEK_V32_SOFTMAX_SCALE": "sparse_mla.constants",
    "write_kv": "sparse_mla.kernels.kv_cache_writer",
    "merge_attention_states": "sparse_mla.merge",
    "DcpShard": "sparse_mla.topk_filter",
    "global_slot_ids_reference": "sparse_mla.reference",
    "sparse_mla_reference": "sparse_mla.reference",
}

__all__ = sorted(_EXPORTS)


def __dir__():
    """The module's names and the public ones it loads on first use (so completion finds them)."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str):
    """The public name ``name`` from its module (PEP 562), imported on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sparse_mla' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
