"""The CUDA decode op (:func:`sparse_mla.ops.decode.sparse_mla_decode`) called once on an
:class:`~sparse_mla_testing.AttentionCase`, for the GPU tests of its kernels (tests/ops/)."""

import dataclasses
from typing import Optional, Tuple

import torch

import sparse_mla_testing as testing
from sparse_mla import device_info, kv_cache_format
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, INDEX_TOPK, KV_BLOCK_SIZE
from sparse_mla.ops import decode


def run_decode(
    case: testing.AttentionCase,
    launch: Optional[decode.DecodePlan] = None,
    workspace: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One decode call on ``case`` (DeepSeek-V3.2's softmax scale), then a device synchronize.

    Parameters
    ----------
    case : AttentionCase
        On a CUDA device, its cache bf16 `[num_blocks, 64, 576]` or fp8_ds_mla uint8 `[num_blocks, 64, 656]`.
    launch : DecodePlan, optional
        By default :func:`sparse_mla.ops.decode.plan` of the case's ``(T, N)`` on its device's SMs, with
        ``fp8_ds_mla`` where the case's cache is uint8.
    workspace : torch.Tensor, optional
        uint8 `[bytes]`; by default a zeroed one for ``launch`` (:func:`sparse_mla.ops.decode.workspace_for_plans`).
    out, lse : torch.Tensor, optional
        `[T, N, 512]` bf16 and `[T, N]` fp32 (``lse`` None: not written); with ``out`` None, both new and
        NaN-poisoned (:func:`sparse_mla_testing.poisoned_outputs`).

    Returns
    -------
    Tuple[torch.Tensor, Optional[torch.Tensor]]
        ``(out, lse)`` as written.
    """
    num_tokens, num_heads = case.q_nope.shape[:2]
    device = case.q_nope.device
    if launch is None:
        fp8_ds_mla = case.kv_cache.dtype == kv_cache_format.FP8_DS_MLA.dtype
        launch = decode.plan(num_tokens, num_heads, device_info.num_sms(device), fp8_ds_mla=fp8_ds_mla)
    if workspace is None:
        workspace = decode.workspace_for_plans([launch], device)
    if out is None:
        out, lse = testing.poisoned_outputs(num_tokens, num_heads, device)
    decode.sparse_mla_decode(*case.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


def with_splits(launch: decode.DecodePlan, num_splits: int, topk: int = INDEX_TOPK) -> decode.DecodePlan:
    """``launch`` with about ``num_splits`` splits of ``topk`` positions, each whole granules (``cluster_size *
    cta_chunk`` positions): fewer where ``num_splits`` does not divide ``topk`` into whole granules."""
    granule = launch.cluster_size * launch.cta_chunk
    positions = -(-topk // num_splits // granule) * granule
    return dataclasses.replace(launch, num_splits=-(-topk // positions), positions_per_split=positions)


def case_on_cache(num_tokens: int, num_heads: int, seed: int, cache_format: str,
                  pattern: Optional[str] = None) -> testing.AttentionCase:
    """:func:`sparse_mla_testing.make_attention_case` on the current CUDA device with a fifth of its entries
    dropped and invalid entries of ``pattern`` (by default one of :data:`~sparse_mla_testing.INVALID_PATTERNS`
    by ``seed``), its cache bf16 (``cache_format`` "bf16") or fp8_ds_mla ("fp8_ds_mla")."""
    device = torch.device("cuda", torch.cuda.current_device())
    case = testing.make_attention_case(num_tokens, num_heads, device, seed,
                                       pattern or testing.INVALID_PATTERNS[seed % 3], drop_fraction=0.2)
    return testing.fp8_ds_mla_case(case) if cache_format == "fp8_ds_mla" else case


def mark_every_invalid_kind(case: testing.AttentionCase) -> None:
    """Makes, in place, token 0's row all -1, token 1's first 64 entries past its causal length, token 2's past
    the block table (its causal length unbounded) and some block ids of token 3's request outside the cache
    (past its end, and negative): every kind the kernels must mask without reading. Needs T >= 4."""
    topk = case.topk_indices
    topk[0] = -1
    topk[1, :64] = case.token_kv_len[1] + torch.arange(64, device=topk.device, dtype=torch.int32)
    case.token_kv_len[2] = 1 << 20  # the block table's width decides
    topk[2, :64] = case.block_table.shape[1] * KV_BLOCK_SIZE + torch.arange(64, device=topk.device, dtype=torch.int32)
    used_columns = topk[3][topk[3] >= 0][:32].long() // KV_BLOCK_SIZE
    case.block_table[case.req_id[3].long(), used_columns] = case.num_blocks + 1
    case.block_table[case.req_id[3].long(), used_columns[:4]] = -7
