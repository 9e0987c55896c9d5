"""A stand-in for the few pieces of vLLM 0.33.0 that ``sparse_mla_vllm`` touches, for CPU tests without vLLM.

Written for this project (no vLLM code): class and method names, signatures and defaults follow vLLM
0.33.0 (``vllm/v1/attention/backend.py``, ``vllm/v1/attention/backends/registry.py``), so the adapter
sees the interface it sees in vLLM; ``tests/vllm_adapter/test_vllm_signatures.py`` compares them with a real vLLM
where one is installed. Behaviour is the minimum the adapter relies on.
"""

__version__ = "0.33.0+stand-in"
