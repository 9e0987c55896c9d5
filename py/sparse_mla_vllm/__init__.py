"""sparse_mla as a vLLM attention backend: ``--attention-backend SPARSE_MLA``.

This package is the only place that imports vLLM; ``sparse_mla`` itself never does. Written and checked
against vLLM 0.33.0 (commit ``4ba787ec9``); the classes are in :mod:`sparse_mla_vllm.backend`.

vLLM finds :func:`register` through the ``vllm.general_plugins`` entry point that ``py/pyproject.toml``
declares (vLLM loads that group in every process before it parses ``--attention-backend``); call it by
hand in a program that builds ``vllm.LLM`` without the package installed.
"""

BACKEND_NAME = "SPARSE_MLA"
"""The name vLLM selects the backend by: ``--attention-backend SPARSE_MLA``."""

BACKEND_CLASS = "sparse_mla_vllm.backend.SparseMLAVllmBackend"
"""Where vLLM imports the backend from, lazily, once it is selected."""


def register() -> None:
    """Register :data:`BACKEND_NAME` in vLLM's attention-backend registry (``vllm.general_plugins`` hook).

    Idempotent: vLLM may load plugins more than once per process. Imports only vLLM's registry, not the
    backend (vLLM imports that when the backend is selected).
    """
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if BACKEND_NAME in AttentionBackendEnum.__members__:
        register_backend(AttentionBackendEnum[BACKEND_NAME], BACKEND_CLASS)
    else:
        register_backend(BACKEND_NAME, BACKEND_CLASS)
