"""sparse_mla: DeepSeek-V3.2 sparse MLA attention on Hopper GPUs.

Modules: ``backend`` (the attention backend an engine calls), ``ops.fa3`` (SGLang's FA3 kernel),
``kernels`` (Triton: index conversion, KV-cache writer, fused sparse attention), ``reference``
(float32 oracle), ``constants``, ``checks``, ``testing`` (random batches for tests and benchmarks).
"""
