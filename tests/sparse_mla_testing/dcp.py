"""Decode context parallelism simulated on one device: a cache split into per-rank shards by vLLM's
ownership rule (:class:`sparse_mla.topk_filter.DcpShard`), each rank with its own blocks and block table,
as the tests' stand-in for W GPUs."""

import dataclasses
from typing import List, Sequence

import torch

from sparse_mla.constants import KV_BLOCK_SIZE
from sparse_mla.topk_filter import DcpShard


@dataclasses.dataclass
class RankShard:
    """What one DCP rank holds: its part of every request's positions, in its own cache and block table."""

    dcp: DcpShard
    kv_cache: torch.Tensor  # [blocks of this rank, 64, slot width], the undivided cache's dtype
    block_table: torch.Tensor  # [R, max blocks of this rank] int32


def shard_cache(
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: Sequence[int],
    world_size: int,
    interleave: int,
    generator: torch.Generator,
) -> List[RankShard]:
    """The shards of ``world_size`` ranks of the requests' positions ``[0, seq_lens[r])``.

    Rank ``w`` gets the positions ``p`` with ``DcpShard.owner(p) == w``, each copied from its slot of the
    undivided cache (``block_table``) to its rank-local position in blocks drawn at random from the rank's
    cache; every slot no position lands on is poisoned (NaN in a bf16 cache, bytes 0xFF in an fp8_ds_mla
    one), so reading it spoils the result. Each rank's cache has two spare blocks.
    """
    device = kv_cache.device
    poison = 0xFF if kv_cache.dtype == torch.uint8 else float("nan")
    shards = []
    for rank in range(world_size):
        dcp = DcpShard(rank, world_size, interleave)
        owned = [torch.arange(n, device=device)[dcp.owner(torch.arange(n, device=device)) == rank] for n in seq_lens]
        blocks_per_req = [-(-len(p) // KV_BLOCK_SIZE) for p in owned]
        num_blocks = sum(blocks_per_req) + 2
        pool = torch.randperm(num_blocks, generator=generator, device=device).to(torch.int32)
        table = torch.zeros(len(seq_lens), max(max(blocks_per_req), 1), dtype=torch.int32, device=device)
        cache = torch.full((num_blocks, *kv_cache.shape[1:]), poison, dtype=kv_cache.dtype, device=device)
        start = 0
        for r, (positions, n) in enumerate(zip(owned, blocks_per_req)):
            table[r, :n] = pool[start : start + n]
            start += n
            local = dcp.local_positions(positions)
            source = block_table[r, positions // KV_BLOCK_SIZE].long()
            target = table[r, local // KV_BLOCK_SIZE].long()
            cache[target, local % KV_BLOCK_SIZE] = kv_cache[source, positions % KV_BLOCK_SIZE]
        shards.append(RankShard(dcp, cache, table))
    return shards
