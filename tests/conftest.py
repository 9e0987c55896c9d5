"""pytest set-up shared by every test file, under Bazel (tools/testing/pytest_main.py) or a plain
``python3 -m pytest tests/...`` with ``py/`` on ``PYTHONPATH``: pytest puts this folder on ``sys.path``, so the
fixtures of ``sparse_mla_testing/`` import, and without a CUDA device Triton's kernels run in its interpreter
(set before any test module imports Triton)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
