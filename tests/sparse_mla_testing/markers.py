"""pytest markers the test files share (apart from the fixtures, which the benchmark imports too)."""

import pytest
import torch

from sparse_mla.kernels.triton_support import interpreting

requires_compiled_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreting(), reason="needs a CUDA GPU and compiled Triton (no TRITON_INTERPRET)"
)
"""The ``pytestmark`` of GPU tests whose Triton kernels must be compiled, not interpreted."""

requires_triton_device = pytest.mark.skipif(
    not interpreting() and not torch.cuda.is_available(),
    reason="needs TRITON_INTERPRET=1 (CPU) or a CUDA device to run the Triton kernels",
)
"""The ``pytestmark`` of device-agnostic tests of Triton kernels: the interpreter on the CPU, compiled on a GPU."""
