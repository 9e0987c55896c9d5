"""Which attention kernel serves a batch: FA3 or the fused Triton kernel.

The choice depends only on the number of query heads and the padded token count, so a CUDA graph
captured for one padded batch size always replays the same kernel.

Interim rule of issue 3: every batch goes to FA3 until the Triton kernel of issue 4 lands; issue 4
replaces the threshold below with crossovers measured on the H200.
"""

import sys

TRITON_MIN_TOKENS = sys.maxsize
"""Padded batches of at least this many query tokens go to the Triton kernel; the rest go to FA3.

``sys.maxsize``: never, for now (issue 3 routes everything to FA3)."""


def choose_kernel(num_heads: int, num_tokens: int) -> str:
    """``"fa3"`` or ``"triton"`` for a batch of ``num_tokens`` (padded) query tokens of ``num_heads`` heads."""
    del num_heads  # the interim rule does not depend on it
    return "triton" if num_tokens >= TRITON_MIN_TOKENS else "fa3"
