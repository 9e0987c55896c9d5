"""The metadata builder's per-token work as one CUDA launch: ``sparse_mla_decode::token_metadata``
(``cc/metadata/token_metadata_kernel.cu``, in the decode kernel's op library).

:class:`sparse_mla.backend.SparseMLAMetadataBuilder` uses it on a CUDA device where the library is
built, and eight PyTorch ops (the same function) elsewhere: one dispatcher call instead of eight is
what keeps ``build``'s host time near a bare op's.
"""

import torch

from sparse_mla.ops import decode
from sparse_mla.ops.library import call_op

is_available = decode.is_available
"""The op is in the decode kernel's library: available exactly where that is."""


def token_metadata(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    num_tokens: int,
    end: int,
    index_topk: int,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    kv_len_bound: torch.Tensor,
) -> None:
    """Request id, causal length and key bound of tokens ``[0, num_tokens)``; padding values after.

    Token ``t`` of request ``r`` (``query_start_loc[r] <= t < query_start_loc[r + 1]``) gets
    ``req_id = r`` and ``token_kv_len = max(0, seq_lens[r] - query_start_loc[r + 1] + t + 1)``; tokens at
    or past ``query_start_loc[num_reqs]`` and every entry of ``[num_tokens, end)`` get ``(0, 0)``;
    ``kv_len_bound = clamp(token_kv_len, 1, index_topk)``.

    Parameters
    ----------
    query_start_loc, seq_lens : torch.Tensor
        `[R + 1]` and `[R]` int32 on the CUDA device, the engine's.
    num_tokens, end : int
        Padded tokens of the step, and the end of the entries to write (``>= num_tokens``: where a
        larger earlier step left values to reset).
    index_topk : int
        Top-k width, the bound's upper end.
    req_id, token_kv_len, kv_len_bound : torch.Tensor
        int32 buffers of at least ``end`` elements, written.

    Raises
    ------
    ValueError
        A tensor's dtype, shape or device, or the sizes, are wrong (checked in the op before the launch;
        a stable-ABI op raises no TypeError).
    """
    call_op(torch.ops.sparse_mla_decode.token_metadata, query_start_loc, seq_lens, num_tokens, end, index_topk, req_id,
            token_kv_len, kv_len_bound)
