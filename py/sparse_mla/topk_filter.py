"""Which entries of a token's top-k row a rank attends: the row's length and the rank's decode-context-
parallel (DCP) shard of the KV cache. Every route applies both inside its own index handling (the CUDA
kernels through ``cc/common/topk_filter.h``, the Triton kernel in its index loop); this module holds the
configuration, its checks and the plain-PyTorch version of the rule (tests, references).

DCP, as vLLM 0.33.0 shards the latent cache (``vllm/v1/attention/backends/mla/sparse_utils.py``,
``triton_filter_and_convert_dcp_index``): the indexer emits global request-local positions; position
``p`` is stored on rank ``(p // I) % W`` (``I`` = interleave, vLLM's ``cp_kv_cache_interleave_size``;
``W`` = world size) at rank-local position ``(p // (W * I)) * I + p % I`` of the rank's own block table.
Each rank attends only its positions and returns ``(out, lse)``; the engine merges the ranks
(:func:`sparse_mla.merge.merge_attention_states`, or vLLM's ``cp_lse_ag_out_rs``). The causal length
``token_kv_len`` stays global (vLLM's ``CommonAttentionMetadata.seq_lens`` are the whole request's, its
``dcp_local_seq_lens`` the rank's): it bounds ``p`` before the mapping.
"""

import dataclasses
from typing import Optional

import torch

from sparse_mla.checks import check_int, check_tensor, check_unit_last_stride


@dataclasses.dataclass(frozen=True)
class DcpShard:
    """This rank's shard of the KV cache under decode context parallelism.

    Attributes
    ----------
    rank : int
        This rank in the DCP group, ``0 <= rank < world_size``.
    world_size : int
        Ranks the cache is sharded over (1: no DCP, every position is local).
    interleave : int
        Consecutive positions stored on one rank before the next rank's (vLLM's
        ``cp_kv_cache_interleave_size``), >= 1.

    Raises
    ------
    ValueError
        A field outside its range (the message names it).
    """

    rank: int = 0
    world_size: int = 1
    interleave: int = 1

    def __post_init__(self):
        for name in ("rank", "world_size", "interleave"):  # frozen: the checked ints set through object
            object.__setattr__(self, name, check_int(f"dcp_{name}", getattr(self, name)))
        if self.world_size < 1:
            raise ValueError(f"sparse_mla: argument 'dcp_world_size' expected >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"sparse_mla: argument 'dcp_rank' expected in [0, {self.world_size}), got {self.rank}")
        if self.interleave < 1:
            raise ValueError(f"sparse_mla: argument 'dcp_interleave' expected >= 1, got {self.interleave}")

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """The rank storing each global position (``positions >= 0``), same shape and dtype."""
        return (positions // self.interleave) % self.world_size

    def local_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Each global position (``>= 0``) as a position of its owner's block table, same shape and dtype."""
        span = self.world_size * self.interleave
        return (positions // span) * self.interleave + positions % self.interleave


NO_DCP = DcpShard()
"""The whole cache on one rank."""


def check_topk_length(topk_length: Optional[torch.Tensor], num_tokens: int, device: torch.device) -> None:
    """``topk_length``: ``None`` or `[num_tokens]` int32 on ``device``, unit stride.

    Raises
    ------
    TypeError, ValueError
        Another dtype, shape, device or stride (the message names ``topk_length``).
    """
    if topk_length is None:
        return
    if not (isinstance(topk_length, torch.Tensor) and topk_length.shape == (num_tokens,)
            and topk_length.dtype is torch.int32 and topk_length.device == device):
        check_tensor("topk_length", topk_length, shape=(num_tokens,), dtype=torch.int32, device=device)
    check_unit_last_stride("topk_length", topk_length)


def within_length(topk_indices: torch.Tensor, topk_length: Optional[torch.Tensor]) -> torch.Tensor:
    """``topk_indices`` `[T, K]` with ``-1`` at the columns ``>= topk_length[t]`` (unchanged when None)."""
    if topk_length is None:
        return topk_indices
    columns = torch.arange(topk_indices.shape[1], device=topk_indices.device)
    return torch.where(columns[None, :] < topk_length[:, None], topk_indices, -1)


def attended_positions_reference(
    topk_indices: torch.Tensor,
    token_kv_len: torch.Tensor,
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
) -> torch.Tensor:
    """The rule every route applies, in PyTorch: the rank-local position each entry is looked up at.

    Parameters
    ----------
    topk_indices : torch.Tensor
        `[T, K]` int32 global request-local positions, ``-1`` = none.
    token_kv_len : torch.Tensor
        `[T]` int32 global causal length of each token.
    topk_length : torch.Tensor, optional
        `[T]` int32: entries at columns ``>= topk_length[t]`` count as ``-1``.
    dcp : DcpShard
        This rank's shard.

    Returns
    -------
    torch.Tensor
        `[T, K]` int32: the rank-local position of every entry this rank attends, ``-1`` elsewhere
        (``-1``, past the row's length, ``>= token_kv_len``, or another rank's).
    """
    positions = within_length(topk_indices, topk_length).long()
    keep = (positions >= 0) & (positions < token_kv_len.long()[:, None])
    safe = positions.clamp(min=0)
    keep &= dcp.owner(safe) == dcp.rank
    return torch.where(keep, dcp.local_positions(safe), -1).to(torch.int32)


def rows_to_check(
    topk_indices: torch.Tensor,
    token_kv_len: torch.Tensor,
    topk_length: Optional[torch.Tensor] = None,
    dcp: DcpShard = NO_DCP,
) -> torch.Tensor:
    """The rows :func:`sparse_mla.checks.check_topk_indices` judges in the backend's ``check_indices`` mode:
    columns past ``topk_length`` and other ranks' positions become ``-1``, this rank's in-range positions
    its rank-local ones, and bad entries (``< -1`` or ``>= token_kv_len``) stay, so the check names them.
    Same arguments as :func:`attended_positions_reference`; returns `[T, K]` int32.
    """
    rows = within_length(topk_indices, topk_length)
    if dcp.world_size == 1:
        return rows
    in_range = (rows >= 0) & (rows < token_kv_len[:, None])
    attended = attended_positions_reference(rows, token_kv_len, None, dcp)
    return torch.where(in_range, attended, rows).to(torch.int32)
