"""sparse_mla: DeepSeek-V3.2 sparse MLA attention on Hopper GPUs.

Modules: ``backend`` (the attention backend an engine calls), ``routing`` and ``routes`` (which kernels
serve a step), ``ops.decode`` (our CUDA decode kernel), ``ops.fa3`` (SGLang's FA3 kernel), ``kernels``
(Triton: index conversion, KV-cache writer, fused sparse attention), ``kv_cache_format`` and
``fp8_ds_mla`` (the bf16 and fp8 caches), ``reference`` (float32 oracle), ``constants``, ``checks``,
``testing`` (random batches for tests and benchmarks).
"""
