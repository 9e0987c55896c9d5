"""The merge of attention computed over disjoint key sets, for an engine that merges the ranks of decode
context parallelism itself (vLLM merges with its own ``cp_lse_ag_out_rs``, on the same layout).

Each rank ``w`` returns ``out_w`` (softmax-weighted values over its keys) and ``lse_w`` (natural-log
log-sum-exp of its scaled scores), as :meth:`sparse_mla.backend.SparseMLAImpl.forward` with
``return_lse=True`` does. Over the union of the keys, ``lse = log Σ_w exp(lse_w)`` and
``out = Σ_w exp(lse_w - lse) out_w``.
"""

from typing import Tuple

import torch

from sparse_mla.checks import check_tensor


def merge_attention_states(outs: torch.Tensor, lses: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge the attention of ``W`` disjoint key sets into the attention over their union.

    Parameters
    ----------
    outs : torch.Tensor
        `[W, T, N, D]` floating point (bf16 from the backend; D = 512), rank ``w``'s output in ``outs[w]``.
    lses : torch.Tensor
        `[W, T, N]` float32, natural log (the base ``forward`` returns); ``-inf`` where a rank attended no
        key (its ``outs`` row is then ignored).

    Returns
    -------
    out : torch.Tensor
        `[T, N, D]` in ``outs``' dtype, computed in float32; 0 where every rank is ``-inf``.
    lse : torch.Tensor
        `[T, N]` float32 natural log; ``-inf`` where every rank is ``-inf``.

    Raises
    ------
    TypeError, ValueError
        ``outs`` not floating point, not 4-D or without a rank (``W = 0``), ``lses`` not float32 `[W, T, N]` on
        ``outs``' device.
    """
    check_tensor("outs", outs, shape=(None, None, None, None))
    if not outs.dtype.is_floating_point:
        raise TypeError(f"sparse_mla: argument 'outs' expected a floating-point dtype, got {outs.dtype}")
    if outs.shape[0] == 0:
        raise ValueError("sparse_mla: argument 'outs' expected at least one rank (W >= 1), got shape "
                         f"{tuple(outs.shape)}")
    check_tensor("lses", lses, shape=tuple(outs.shape[:3]), dtype=torch.float32, device=outs.device)
    top = lses.max(dim=0).values  # [T, N]
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all -inf: any finite shift
    lse = torch.log(torch.exp(lses - top).sum(dim=0)) + top  # log(0) = -inf where every rank is empty
    shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weights = torch.exp(lses - shift)  # [W, T, N]; 0 for an empty rank and where every rank is empty
    out = torch.zeros(outs.shape[1:], dtype=torch.float32, device=outs.device)
    for w in range(outs.shape[0]):  # skips empty ranks' rows: 0 * NaN would poison the sum
        out += torch.where(weights[w, ..., None] > 0, weights[w, ..., None] * outs[w].float(), 0.0)
    return out.to(outs.dtype), lse
