"""FlashInfer's element-wise precision bar for sparse MLA decode, shared by its GPU test and tools/precision_bar.py.

FlashInfer's trtllm-gen sparse MLA decode tests compare the output element-wise with
``torch.testing.assert_close(out, ref, rtol=2e-2, atol=8e-4)`` (tests/attention/test_trtllm_gen_mla.py).
"""

from typing import NamedTuple

import torch

RTOL, ATOL = 2e-2, 8e-4


class BarResult(NamedTuple):
    misses: int           # elements with |out - ref| > ATOL + RTOL * |ref|
    worst_excess: float   # max of |out - ref| - (ATOL + RTOL * |ref|): <= 0 when every element passes
    relative_error: float  # ||out - ref|| / ||ref||


def against_bar(out: torch.Tensor, ref: torch.Tensor) -> BarResult:
    """``out`` (any float dtype) against the float32 reference ``ref`` of the same shape."""
    error = (out.float() - ref).abs()
    excess = error - (ATOL + RTOL * ref.abs())
    return BarResult(int((excess > 0).sum()), float(excess.max()), float(error.norm() / ref.norm()))
