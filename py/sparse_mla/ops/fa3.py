"""FA3 (SGLang's sgl-attn FlashAttention-3 for Hopper) as the torch op ``sparse_mla_fa3::fwd``.

The op library is built by Bazel (``bazel build //py:sparse_mla --config=sm90`` puts
``cc/libsparse_mla_fa3.so`` beside this package in the runfiles); outside Bazel, point
``SPARSE_MLA_FA3_LIBRARY`` at the built ``libsparse_mla_fa3.so``.

Sparse MLA maps onto FA3's paged-KV decode: ``q`` = q_rope, ``qv`` = q_nope, ``k_cache`` = k_rope
and ``v_cache`` = c_kv viewed as pages of one slot, ``page_table`` = each token's global slot ids
(valid ones first) and ``cache_seqlens`` = their count; every query token is a sequence of length 1.
"""

import dataclasses
import functools
import os
from pathlib import Path
from typing import Optional, Tuple, Union

import torch

from sparse_mla.checks import check_same_device, check_tensor

LIBRARY_NAME = "libsparse_mla_fa3.so"
LIBRARY_ENV = "SPARSE_MLA_FA3_LIBRARY"
REQUIRED_MAJOR_CAPABILITY = 9
"""The kernels are compiled for sm_90a only, which runs on Hopper (compute capability 9.x) alone."""


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether FA3 can run here; false with the reason when it cannot. Truthy when available."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def library_path() -> Optional[Path]:
    """Where the op library is: ``$SPARSE_MLA_FA3_LIBRARY``, else beside the package (Bazel runfiles).

    Paths are not resolved: Bazel's runfiles are symlinks into the source tree, where no build
    output lives.
    """
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return Path(override)
    package_dir = Path(os.path.abspath(__file__)).parent.parent
    for candidate in (package_dir / LIBRARY_NAME, package_dir.parent.parent / "cc" / LIBRARY_NAME):
        if candidate.exists():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def is_available() -> Availability:
    """Load the op library once and say whether FA3 runs on the current CUDA device.

    Returns
    -------
    Availability
        Truthy when usable; otherwise ``reason`` says why: no CUDA device, not Hopper, the
        extension was not built (or not found), or it failed to load.
    """
    if not torch.cuda.is_available():
        return Availability(False, "no CUDA device")
    major, minor = torch.cuda.get_device_capability()
    if major != REQUIRED_MAJOR_CAPABILITY:
        return Availability(False, f"FA3 is built for sm_90a and needs compute capability 9.x, got {major}.{minor}")
    path = library_path()
    if path is None:
        return Availability(
            False,
            f"the FA3 extension is not built: run 'bazel build //py:sparse_mla --config=sm90' or set {LIBRARY_ENV}",
        )
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as error:
        return Availability(False, f"loading {path} failed: {error}")
    _register_fake()
    return Availability(True)


def _register_fake() -> None:
    """Shape-only implementation so ``torch.compile`` can trace through the op."""

    @torch.library.register_fake("sparse_mla_fa3::fwd")
    def _fwd_fake(q, k, v, k_new, v_new, q_v, out, cu_seqlens_q, *args):
        value_dim = q_v.shape[-1] if q_v is not None else v.shape[-1]
        out_shape = (*q.shape[:-1], value_dim)
        result = q.new_empty(out_shape) if out is None else out
        if q.dim() == 3:  # varlen: [total_q, heads, dim]
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        else:  # [batch, seqlen_q, heads, dim]
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return result, lse, q.new_empty((0,), dtype=torch.float32), q.new_empty((0,), dtype=torch.float32)


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    qv: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    cache_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    out: Optional[torch.Tensor] = None,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """FA3 forward over a paged KV cache (the subset of FA3's ``flash_attn_with_kvcache`` sparse MLA uses).

    Parameters
    ----------
    q : torch.Tensor
        `[total_q, N, d]` with ``cu_seqlens_q``, else `[B, seqlen_q, N, d]`; bf16, CUDA. For sparse
        MLA: q_rope, d = 64.
    k_cache : torch.Tensor
        `[num_pages, page_size, N_kv, d]` bf16; the last dimension contiguous. Sparse MLA: the
        k_rope part of the cache as pages of one slot, `[num_blocks * 64, 1, 1, 64]`.
    v_cache : torch.Tensor
        `[num_pages, page_size, N_kv, dv]` bf16. Sparse MLA: c_kv, `[num_blocks * 64, 1, 1, 512]`.
    qv : torch.Tensor, optional
        `[total_q, N, dv]` (or `[B, seqlen_q, N, dv]`) bf16, multiplied with ``v_cache`` and added
        to the scores (MLA's absorbed q_nope).
    page_table : torch.Tensor, optional
        `[B, max_pages]` int32 page ids of each sequence; only the first pages covering
        ``cache_seqlens`` are read, and those must lie in ``[0, num_pages)``.
    cache_seqlens : torch.Tensor, optional
        `[B]` int32 KV length of each sequence.
    cu_seqlens_q : torch.Tensor, optional
        `[B + 1]` int32 query offsets (varlen ``q``).
    max_seqlen_q : int, optional
        Longest query sequence; required with ``cu_seqlens_q``.
    softmax_scale : float, optional
        Score scale; default ``(d + dv) ** -0.5`` as in FA3.
    causal : bool
        Causal mask (bottom-right aligned).
    num_splits : int
        Split-KV partitions; 0 lets FA3's heuristic choose, 1 disables split-KV. Each split adds
        an fp32 partial output of ``B·seqlen_q·N·dv·4`` bytes to the workspace.
    return_softmax_lse : bool
        Also return the log-sum-exp of the scaled scores.
    out : torch.Tensor, optional
        Output buffer shaped like ``qv`` (or `[..., dv]`), written in place.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``out`` `[total_q, N, dv]` bf16, and with ``return_softmax_lse`` the LSE `[N, total_q]`
        float32 (varlen) or `[B, N, seqlen_q]`.

    Raises
    ------
    RuntimeError
        If FA3 is not available here (the reason is in the message) or FA3 rejects the arguments.
    TypeError, ValueError
        For arguments of the wrong type, dtype, rank or device.
    """
    availability = is_available()
    if not availability:
        raise RuntimeError(f"sparse_mla: FA3 is not available: {availability.reason}")
    device = q.device
    check_tensor("q", q, dtype=torch.bfloat16, device=device)
    if q.dim() != (3 if cu_seqlens_q is not None else 4):
        raise ValueError(f"sparse_mla: argument 'q' expected {3 if cu_seqlens_q is not None else 4} dimensions, got {q.dim()}")
    check_tensor("k_cache", k_cache, shape=(None, None, None, q.shape[-1]), dtype=torch.bfloat16, device=device)
    check_tensor("v_cache", v_cache, shape=(k_cache.shape[0], k_cache.shape[1], k_cache.shape[2], None), dtype=torch.bfloat16, device=device)
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    for name, t, dtype in (
        ("qv", qv, torch.bfloat16),
        ("page_table", page_table, torch.int32),
        ("cache_seqlens", cache_seqlens, torch.int32),
        ("cu_seqlens_q", cu_seqlens_q, torch.int32),
        ("out", out, torch.bfloat16),
    ):
        if t is not None:
            check_tensor(name, t, dtype=dtype)
            tensors[name] = t
    check_same_device(**tensors)
    if cu_seqlens_q is not None and max_seqlen_q is None:
        raise ValueError("sparse_mla: argument 'max_seqlen_q' expected an int with cu_seqlens_q, got None")
    if softmax_scale is None:
        softmax_scale = (q.shape[-1] + (qv.shape[-1] if qv is not None else 0)) ** -0.5
    out, softmax_lse, *_ = torch.ops.sparse_mla_fa3.fwd(
        q, k_cache, v_cache,
        None, None, qv, out,  # k_new, v_new, q_v, out
        cu_seqlens_q, None, None,  # cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new
        None, cache_seqlens,  # seqused_q, seqused_k
        max_seqlen_q, None,  # max_seqlen_q, max_seqlen_k
        page_table, None, None,  # page_table, kv_batch_idx, leftpad_k
        None, None, None,  # rotary_cos, rotary_sin, seqlens_rotary
        None, None, None,  # q_descale, k_descale, v_descale
        softmax_scale, causal,
        -1, -1, 0,  # window_size_left, window_size_right, attention_chunk
        0.0, True,  # softcap, is_rotary_interleaved
        None, num_splits, None, 0,  # scheduler_metadata, num_splits, pack_gqa, sm_margin
        None,  # sinks
    )
    return (out, softmax_lse) if return_softmax_lse else out
