"""KV-cache writer: store each new token's `[c_kv | k_rope]` in its cache slot.

Slot ``s`` is row ``s % 64`` of block ``s // 64`` of the cache. Slot ``-1`` marks a padding token and is
skipped. A slot outside ``[0, num_blocks * 64)`` is skipped as well, so a bad slot mapping can never write
outside the cache; ``check=True`` turns it into an error instead. The cache's dtype selects its format
(:mod:`sparse_mla.kv_cache_format`):

* bf16 `[num_blocks, 64, 576]`: the row becomes ``[kv_c_normed[t] (512) | k_pe[t] (64)]``;
* uint8 `[num_blocks, 64, 656]` (fp8_ds_mla): the kernel quantizes ``kv_c_normed[t]`` in 128-groups and
  stores the 512 fp8 e4m3 bytes, the 4 fp32 scales and ``k_pe[t]`` as bf16, byte for byte what
  :func:`sparse_mla.fp8_ds_mla.quantize_slots` gives (vLLM's quantizer rule, see there).

fp8 in Triton's interpreter (triton 3.6.0, how the CPU tests run this kernel): its fp32 -> ``tl.float8e4nv``
conversion drops the carry when rounding crosses a power of two (31.78 becomes 16, not 32), so the writer
encodes e4m3 bytes arithmetically from the fp32 bits (:func:`_e4m3fn_bytes`), which is exact on both the
interpreter and the GPU: one code path, tested on the CPU. Divisions use ``tl.math.div_rn`` (IEEE
round-to-nearest), as vLLM's CUDA ``x / scale``; Triton's plain ``/`` on fp32 may compile to an
approximate division. A compiled kernel may flush fp32 subnormals to zero, so a group made only of bf16
values below ``2**-126`` can encode differently on the GPU; no other input does.
"""

import torch
import triton
import triton.language as tl

from sparse_mla import kv_cache_format
from sparse_mla.checks import check_kv_cache_slot_strides, check_same_device, check_tensor
from sparse_mla.constants import (
    FP8_DS_MLA_GROUP_SIZE,
    FP8_DS_MLA_NUM_SCALES,
    FP8_DS_MLA_ROPE_OFFSET,
    FP8_DS_MLA_SCALE_OFFSET,
    FP8_E4M3_MAX,
    KV_BLOCK_SIZE,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla.fp8_ds_mla import E4M3_NAN_CODE as NAN_CODE, FLT_MIN
from sparse_mla.kernels.triton_support import kernel_device_type

PADDING_SLOT = -1
"""``slot_mapping`` entry of a token that is not written (CUDA-graph padding)."""

_NUM_WARPS = 2
"""One program per token writes 1152 (or 656) bytes: two warps are plenty."""

# Constants the kernels read as globals: compiled Triton kernels may only read globals that are constexpr.

FP8_MAX = tl.constexpr(FP8_E4M3_MAX)
"""448, the largest finite e4m3fn magnitude: a group's amax maps to it, larger quotients saturate to it."""

SCALE_FLOOR = tl.constexpr(FLT_MIN)
"""``FLT_MIN``: the smallest scale of a non-zero group (vLLM's clamp, :mod:`sparse_mla.fp8_ds_mla`)."""

E4M3_MIN_NORMAL = tl.constexpr(2.0**-6)
"""Smallest normal float8 e4m3fn magnitude; below it the codes are subnormals ``m * 2**-9``, ``m`` in 0..7."""

F32_BIAS_OVER_E4M3 = tl.constexpr((127 - 7) << 3)
"""fp32 exponent bias 127 minus e4m3's 7, in the position of an e4m3 code's exponent field (above 3 mantissa bits)."""

SUBNORMAL_ROUNDER = tl.constexpr(2.0**14)
"""fp32 ``2**14`` has an ulp of ``2**-9``, e4m3's subnormal step: ``a + 2**14`` rounds ``a < 2**-6`` to that step
(nearest-even, by the fp32 addition) and leaves ``m`` in the low mantissa bits."""

E4M3_NAN_CODE = tl.constexpr(NAN_CODE)
""":data:`sparse_mla.fp8_ds_mla.E4M3_NAN_CODE`, the code a NaN latent is stored as (vLLM's writer)."""

SUBNORMAL_ROUNDER_BITS = tl.constexpr((127 + 14) << 23)
"""The fp32 bits of :data:`SUBNORMAL_ROUNDER`: subtracted from the bits of ``a + 2**14`` they leave ``m``."""


@triton.jit
def _token_row(
    slot_mapping_ptr, slot_mapping_stride, kv_cache_ptr, kv_cache_stride_b, kv_cache_stride_r, num_slots,
    BLOCK_SIZE: tl.constexpr,
):
    """This program's token, whether its slot is in the cache (-1 and slots past ``num_slots`` are
    skipped) and the pointer to that slot's row (only dereferenced when it is)."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token * slot_mapping_stride).to(tl.int64)
    row = kv_cache_ptr + (slot // BLOCK_SIZE) * kv_cache_stride_b + (slot % BLOCK_SIZE) * kv_cache_stride_r
    return token, (slot >= 0) & (slot < num_slots), row


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
    token, in_cache, row = _token_row(
        slot_mapping_ptr, slot_mapping_stride, kv_cache_ptr, kv_cache_stride_b, kv_cache_stride_r, num_slots, BLOCK_SIZE
    )
    if in_cache:
        c_cols = tl.arange(0, LORA_RANK)
        c_kv = tl.load(kv_c_ptr + token * kv_c_stride_t + c_cols * kv_c_stride_d)
        tl.store(row + c_cols * kv_cache_stride_d, c_kv)
        pe_cols = tl.arange(0, ROPE_DIM)
        k_rope = tl.load(k_pe_ptr + token * k_pe_stride_t + pe_cols * k_pe_stride_d)
        tl.store(row + (LORA_RANK + pe_cols) * kv_cache_stride_d, k_rope)


@triton.jit
def _e4m3fn_bytes(y):
    """float8 e4m3fn codes (int32 in [0, 255]) of fp32 ``y``: round to nearest-even, saturate to +-448.

    Arithmetic on the fp32 bits (see the module docstring for why not ``y.to(tl.float8e4nv)``): a magnitude
    ``a >= 2**-6`` keeps 3 mantissa bits, rounded to nearest-even by adding ``0x7FFFF`` plus the lowest kept
    bit (a carry into the exponent is the correct rounding up); its code is then the fp32 exponent and top 3
    mantissa bits, re-biased from 127 to 7. Smaller magnitudes are subnormal codes (:data:`SUBNORMAL_ROUNDER`);
    code 8 (``2**-6``) continues them exactly. A NaN ``y`` gives :data:`E4M3_NAN_CODE`.
    """
    a = tl.minimum(tl.abs(y), FP8_MAX)
    bits = a.to(tl.int32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - F32_BIAS_OVER_E4M3
    subnormal = (a + SUBNORMAL_ROUNDER).to(tl.int32, bitcast=True) - SUBNORMAL_ROUNDER_BITS
    magnitude = tl.where(a >= E4M3_MIN_NORMAL, normal, subnormal)
    sign = (y.to(tl.int32, bitcast=True) >> 24) & 0x80
    return tl.where(y != y, E4M3_NAN_CODE, magnitude | sign)


@triton.jit
def _write_kv_fp8_ds_mla_kernel(
    kv_c_ptr,  # [T, 512] bf16
    kv_c_stride_t,
    kv_c_stride_d,
    k_pe_ptr,  # [T, 64] bf16
    k_pe_stride_t,
    k_pe_stride_d,
    slot_mapping_ptr,  # [T] int64
    slot_mapping_stride,
    kv_cache_ptr,  # [num_blocks, 64, 656] uint8, written; slots contiguous and 4-byte aligned
    kv_cache_stride_b,
    kv_cache_stride_r,
    num_slots,
    NUM_GROUPS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    ROPE_DIM: tl.constexpr,
    SCALE_OFFSET: tl.constexpr,
    ROPE_OFFSET: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    token, in_cache, row = _token_row(
        slot_mapping_ptr, slot_mapping_stride, kv_cache_ptr, kv_cache_stride_b, kv_cache_stride_r, num_slots, BLOCK_SIZE
    )
    if in_cache:
        groups = tl.arange(0, NUM_GROUPS)
        cols = groups[:, None] * GROUP_SIZE + tl.arange(0, GROUP_SIZE)[None, :]  # [4, 128] c_kv columns = byte offsets
        c_kv = tl.load(kv_c_ptr + token * kv_c_stride_t + cols * kv_c_stride_d).to(tl.float32)
        is_nan = c_kv != c_kv
        amax = tl.max(tl.where(is_nan, 0.0, tl.abs(c_kv)), axis=1)  # [4]; NaN left out, as CUDA's fmaxf does
        scale = tl.where(amax > 0, tl.maximum(tl.math.div_rn(amax, FP8_MAX), SCALE_FLOOR), 0.0)
        nonzero = scale > 0  # an all-zero group: scale 0 and zero bytes (but NaN codes for NaN latents)
        quotient = tl.math.div_rn(c_kv, tl.where(nonzero, scale, 1.0)[:, None])
        codes = tl.where(nonzero[:, None] | is_nan, _e4m3fn_bytes(quotient), 0)
        tl.store(row + cols, codes.to(tl.uint8))
        tl.store((row + SCALE_OFFSET).to(tl.pointer_type(tl.float32)) + groups, scale)
        pe_cols = tl.arange(0, ROPE_DIM)
        k_rope = tl.load(k_pe_ptr + token * k_pe_stride_t + pe_cols * k_pe_stride_d)
        tl.store((row + ROPE_OFFSET).to(tl.pointer_type(tl.bfloat16)) + pe_cols, k_rope)


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
        The cache, written in place at the given slots only: `[num_blocks, 64, 576]` bf16 (any strides), or
        `[num_blocks, 64, 656]` uint8 fp8_ds_mla (contiguous slots, a block stride of whole slots, as
        :func:`sparse_mla.checks.check_kv_cache_slot_strides` says, 4-byte aligned).
    slot_mapping : torch.Tensor
        `[T]` int64 cache slot of each token (``block * 64 + row``); ``-1`` = padding, not written.
        Slots outside ``[0, num_blocks * 64)`` are skipped.
    check : bool
        Debugging mode: raise on the first token whose slot is neither ``-1`` nor inside the cache, and on
        two tokens given the same slot. Synchronizes with the host; not for CUDA graphs.

    Two tokens given the same slot (an engine bug) leave that slot undefined: one token's row, the other's,
    or parts of both. ``check=True`` finds it.

    Raises
    ------
    TypeError
        A tensor has another dtype (``kv_cache``: neither bf16 nor uint8).
    ValueError
        A shape, device or (fp8_ds_mla) stride is wrong, or (with ``check``) a slot is out of range or given
        to two tokens; the message names the tokens.

    Example
    -------
    >>> write_kv(kv_c_normed, k_pe, kv_cache, attn_metadata.slot_mapping)
    """
    device = kernel_device_type()
    check_tensor("kv_c_normed", kv_c_normed, shape=(None, KV_LORA_RANK), dtype=torch.bfloat16, device=device)
    num_tokens = kv_c_normed.shape[0]
    if isinstance(k_pe, torch.Tensor) and k_pe.dim() == 3:
        check_tensor("k_pe", k_pe, shape=(num_tokens, 1, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16, device=device)
    else:
        check_tensor("k_pe", k_pe, shape=(num_tokens, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16, device=device)
    fmt = kv_cache_format.check_kv_cache("kv_cache", kv_cache, device=device)
    if fmt is kv_cache_format.FP8_DS_MLA:
        check_kv_cache_slot_strides("kv_cache", kv_cache)
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
        written = (slot_mapping >= 0).nonzero().flatten()
        slots, order = torch.sort(slot_mapping[written], stable=True)
        repeated = (slots[1:] == slots[:-1]).nonzero()
        if len(repeated):
            i = int(repeated[0, 0])
            first, second = int(written[order[i]]), int(written[order[i + 1]])
            raise ValueError(
                f"sparse_mla: tokens {first} and {second}: slot_mapping expected distinct slots, got "
                f"{int(slots[i])} for both"
            )
    if num_tokens == 0:
        return
    # Both kernels take the tokens' inputs and the cache's block and slot strides first.
    inputs = (kv_c_normed, kv_c_normed.stride(0), kv_c_normed.stride(1), k_pe, k_pe.stride(0), k_pe.stride(-1),
              slot_mapping, slot_mapping.stride(0), kv_cache, kv_cache.stride(0), kv_cache.stride(1))
    if fmt is kv_cache_format.FP8_DS_MLA:
        _write_kv_fp8_ds_mla_kernel[(num_tokens,)](
            *inputs,
            num_slots,
            NUM_GROUPS=FP8_DS_MLA_NUM_SCALES,
            GROUP_SIZE=FP8_DS_MLA_GROUP_SIZE,
            ROPE_DIM=QK_ROPE_HEAD_DIM,
            SCALE_OFFSET=FP8_DS_MLA_SCALE_OFFSET,
            ROPE_OFFSET=FP8_DS_MLA_ROPE_OFFSET,
            BLOCK_SIZE=KV_BLOCK_SIZE,
            num_warps=_NUM_WARPS,
        )
    else:
        _write_kv_kernel[(num_tokens,)](
            *inputs,
            kv_cache.stride(2),
            num_slots,
            LORA_RANK=KV_LORA_RANK,
            ROPE_DIM=QK_ROPE_HEAD_DIM,
            BLOCK_SIZE=KV_BLOCK_SIZE,
            num_warps=_NUM_WARPS,
        )
