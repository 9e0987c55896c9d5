"""The per-step batch description an engine hands to the metadata builder.

Field names follow vLLM's ``CommonAttentionMetadata`` so that an engine adapter is a field-by-field copy.
"""

import dataclasses

import torch


@dataclasses.dataclass
class CommonAttentionMetadata:
    """One scheduler step: which query tokens belong to which request and where the requests' KV lives.

    Tokens are laid out request after request: the tokens of request ``r`` are
    ``query_start_loc[r] : query_start_loc[r + 1]`` and are the last ``query_len`` positions of its
    ``seq_lens[r]``-long sequence (so token ``i`` of a request with ``query_len`` tokens may attend
    ``seq_lens[r] - (query_len - 1 - i)`` positions).

    CUDA-graph padding: ``num_actual_tokens`` may exceed ``query_start_loc[num_reqs]`` (the real token
    count); the extra tokens are padding. Padded request slots repeat the last ``query_start_loc`` and
    have ``seq_lens`` 0. Every token may be padding.
    """

    query_start_loc: torch.Tensor  # [num_reqs + 1] int32, device
    query_start_loc_cpu: torch.Tensor  # [num_reqs + 1] int32, host copy (sizes only)
    seq_lens: torch.Tensor  # [num_reqs] int32, device: context length including this step's tokens
    seq_lens_cpu: torch.Tensor  # [num_reqs] int32, host copy (sizes only)
    num_reqs: int  # requests, padded request slots included
    num_actual_tokens: int  # query tokens of this step, CUDA-graph padding included
    max_query_len: int  # longest query of this step
    max_seq_len: int  # longest sequence of this step
    slot_mapping: torch.Tensor  # [num_actual_tokens] int64: cache slot of each new token, -1 = padding
    block_table_tensor: torch.Tensor  # [num_reqs, max_blocks] int32 cache block ids (64 slots each)
