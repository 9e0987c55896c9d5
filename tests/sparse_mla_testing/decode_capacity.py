"""The decode kernels' cluster capacity on the H200 as measured, for the CPU tests of the planner and the
workspace sizing (sparse_mla.ops.decode.plan's ``cluster_capacity``)."""

from sparse_mla.ops import decode

H200_SMS = 132

H200_CLUSTERS_PER_WAVE = {16: 45, 32: 15}
"""cudaOccupancyMaxActiveClusters of the kernel on the H200 by CTA stage size, 16 heads per CTA
(2026-11-30, tools/decode_variants.sh: 80 registers, 65 / 130 KB of shared memory)."""

H200_CTAS_PER_WAVE = {(1, 16): 3 * H200_SMS, (1, 32): H200_SMS, (2, 16): 2 * H200_SMS, (2, 32): H200_SMS}
"""The same for one CTA per split by (head tiles, stage size): 16 heads per CTA, 3 CTAs per SM with
16-position stages, 1 with 32 (shared memory); 32 heads per CTA, 2 and 1 (registers, shared memory;
the device's count in the fp8 split sweeps: 264, docs/decode-tuning.md)."""


def h200_capacity(candidate: decode.DecodePlan) -> int:
    """Clusters (CTAs, for one CTA per split) of ``candidate``'s kernel configuration in one H200 wave."""
    assert candidate.head_tiles in decode.HEAD_TILES
    assert candidate.positions_per_split % (candidate.cluster_size * candidate.cta_chunk) == 0
    if candidate.kernel in (decode.WIDE_KERNEL, decode.SWAP_AB_KERNEL, decode.TILE64_KERNEL):
        return H200_SMS  # one CTA per SM (registers and shared memory)
    if candidate.cluster_size == decode.CLUSTER_SIZE:
        return H200_CLUSTERS_PER_WAVE[candidate.cta_chunk]
    return H200_CTAS_PER_WAVE[candidate.head_tiles, candidate.cta_chunk]
