"""KV-cache writer: store each new token's `[c_kv | k_rope]` in its cache slot.

Slot ``s`` is row ``s % 64`` of block ``s // 64`` of the `[num_blocks, 64, 576]` bf16 cache; the row
becomes ``[kv_c_normed[t] (512) | k_pe[t] (64)]``. Slot ``-1`` marks a padding token and is skipped.
A slot outside ``[0, num_blocks * 64)`` is skipped as well, so a bad slot mapping can never write
outside the cache; ``check=True`` turns it into an error instead.
"""

import torch
import triton
import triton.language as tl

from sparse_mla.checks import check_same_device, check_tensor
from sparse_mla.constants import KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.kernels.triton_support import kernel_device_type

PADDING_SLOT = -1
"""``slot_mapping`` entry of a token that is not written (CUDA-graph padding)."""

_NUM_WARPS = 2
"""One program per token copies 1152 bytes: two warps are plenty."""


@triton.jit
def _write_kv_kernel(
    kv_c_ptr,  # [T, 512] bf16
    kv_c_stride_t,
    kv_c_stride_d,
    k_pe_ptr,  # [T, 64] bf16
    k_pe_stride_t,
    k_pe_stride_d,
    slot_mapping_ptr,  # [T] int64
    slot_mapping_stride,
    kv_cache_ptr,  # [num_blocks, 64, 576] bf16, written
    kv_cache_stride_b,
    kv_cache_stride_r,
    kv_cache_stride_d,
    num_slots,
    LORA_RANK: tl.constexpr,
    ROPE_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token * slot_mapping_stride).to(tl.int64)
    if (slot >= 0) & (slot < num_slots):
        row = kv_cache_ptr + (slot // BLOCK_SIZE) * kv_cache_stride_b + (slot % BLOCK_SIZE) * kv_cache_stride_r
        c_cols = tl.arange(0, LORA_RANK)
        c_kv = tl.load(kv_c_ptr + token * kv_c_stride_t + c_cols * kv_c_stride_d)
        tl.store(row + c_cols * kv_cache_stride_d, c_kv)
        pe_cols = tl.arange(0, ROPE_DIM)
        k_rope = tl.load(k_pe_ptr + token * k_pe_stride_t + pe_cols * k_pe_stride_d)
        tl.store(row + (LORA_RANK + pe_cols) * kv_cache_stride_d, k_rope)


def write_kv(
    kv_c_normed: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    check: bool = False,
) -> None:
    """Write the new tokens' latent and rotary keys into the paged KV cache, in place.

    One kernel launch, no host synchronization (without ``check``), CUDA-graph safe. Inputs are read
    through their strides, so row views of larger tensors (e.g. ``kv_c_normed`` split off a
    `[T, 576]` projection) need no copy.

    Parameters
    ----------
    kv_c_normed : torch.Tensor
        `[T, 512]` bf16 normalized latent ``c_kv`` of the new tokens. Any strides.
    k_pe : torch.Tensor
        `[T, 64]` or `[T, 1, 64]` bf16 rotary keys (after RoPE). Any strides.
    kv_cache : torch.Tensor
        `[num_blocks, 64, 576]` bf16 cache, written in place at the given slots only. Any strides.
    slot_mapping : torch.Tensor
        `[T]` int64 cache slot of each token (``block * 64 + row``); ``-1`` = padding, not written.
        Slots outside ``[0, num_blocks * 64)`` are skipped.
    check : bool
        Debugging mode: raise on the first token whose slot is neither ``-1`` nor inside the cache.
        Synchronizes with the host; not for CUDA graphs.

    Raises
    ------
    TypeError
        A tensor has another dtype.
    ValueError
        A shape or device is wrong, or (with ``check``) a slot is out of range; the message names the token.

    Example
    -------
    >>> write_kv(kv_c_normed, k_pe, kv_cache, attn_metadata.slot_mapping)
    """
    device = kernel_device_type()
    check_tensor("kv_c_normed", kv_c_normed, shape=(None, KV_LORA_RANK), dtype=torch.bfloat16, device=device)
    num_tokens = kv_c_normed.shape[0]
    if k_pe.dim() == 3:
        check_tensor("k_pe", k_pe, shape=(num_tokens, 1, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16, device=device)
    else:
        check_tensor("k_pe", k_pe, shape=(num_tokens, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16, device=device)
    check_tensor(
        "kv_cache", kv_cache, shape=(None, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE), dtype=torch.bfloat16, device=device
    )
    check_tensor("slot_mapping", slot_mapping, shape=(num_tokens,), dtype=torch.int64, device=device)
    check_same_device(kv_c_normed=kv_c_normed, k_pe=k_pe, kv_cache=kv_cache, slot_mapping=slot_mapping)
    num_slots = kv_cache.shape[0] * KV_BLOCK_SIZE
    if check:
        bad = ((slot_mapping < PADDING_SLOT) | (slot_mapping >= num_slots)).nonzero()
        if len(bad):
            t = int(bad[0, 0])
            raise ValueError(
                f"sparse_mla: token {t}: slot_mapping expected -1 or in [0, num_blocks * {KV_BLOCK_SIZE} = "
                f"{num_slots}), got {int(slot_mapping[t])}"
            )
    if num_tokens == 0:
        return
    _write_kv_kernel[(num_tokens,)](
        kv_c_normed,
        kv_c_normed.stride(0),
        kv_c_normed.stride(1),
        k_pe,
        k_pe.stride(0),
        k_pe.stride(-1),
        slot_mapping,
        slot_mapping.stride(0),
        kv_cache,
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        num_slots,
        LORA_RANK=KV_LORA_RANK,
        ROPE_DIM=QK_ROPE_HEAD_DIM,
        BLOCK_SIZE=KV_BLOCK_SIZE,
        num_warps=_NUM_WARPS,
    )
