"""The fp8_ds_mla cache slot in plain PyTorch: the host implementation the kernels are tested against.

Slot layout (656 bytes, :mod:`sparse_mla.constants`; byte-compatible with FlashMLA's sparse fp8 cache and
vLLM's ``concat_and_cache_ds_mla_kernel``, ``csrc/cache_kernels.cu``)::

    bytes [0, 512)    c_kv as 512 float8 e4m3fn values (torch.float8_e4m3fn)
    bytes [512, 528)  4 little-endian fp32 scales; scale i covers c_kv[128 i : 128 i + 128]
    bytes [528, 656)  k_rope as 64 bf16 values, not quantized

A value reads back as ``fp8 * scale`` (fp32). Readers accept any fp32 scale (FlashMLA's own test
quantizer rounds scales to powers of two; vLLM's writer does not).

Quantizer rule (:func:`quantize_slots`, followed bit for bit by the Triton writer), that of vLLM's
``concat_and_cache_ds_mla_kernel`` (``csrc/cache_kernels.cu``) with its conversion
``scaled_vec_conversion<uint8_t, __nv_bfloat16>`` (``csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh``):

* ``amax`` = largest ``|c_kv|`` of the 128-group, in fp32;
* ``scale = max(amax / 448, FLT_MIN)`` by an IEEE fp32 division (not a reciprocal multiply, not rounded
  to a power of two); vLLM clamps to ``FLT_MIN`` (1.18e-38) for every group;
* each byte is ``e4m3(x / scale)``: the fp32 quotient (IEEE division), rounded to nearest-even and
  saturated to ±448 (CUDA's ``__nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3)``).

One deliberate difference: a group whose values are all zero (``amax == 0``) gets scale ``0.0`` and 128
zero bytes, where vLLM writes scale ``FLT_MIN`` (and ``0x80`` for a ``-0.0`` input). Both read back as
zeros; for every other group the bytes and the scale equal vLLM's.

Non-finite latents, as vLLM's writer stores them: ``amax`` leaves NaN out (CUDA's ``fmaxf``), a NaN latent is
stored as the NaN code ``0x7F``, and an infinite one makes its group's scale infinite (its own code NaN, the
others zero, so the whole group reads back NaN). Readers (the decode and Triton routes, and
:func:`dequantize_cache`) read the NaN codes ``0x7F`` / ``0xFF`` as NaN, so a NaN in a selected slot
propagates to the output and the LSE of its token, as it does from a bf16 cache on those routes. The FA3
route (bf16 only) follows FA3's own softmax, which gives a row whose sum is NaN output 0 and LSE -inf.
"""

import torch

from sparse_mla.checks import check_tensor
from sparse_mla.constants import (
    FP8_DS_MLA_GROUP_SIZE,
    FP8_DS_MLA_NUM_SCALES,
    FP8_DS_MLA_ROPE_OFFSET,
    FP8_DS_MLA_SCALE_OFFSET,
    FP8_DS_MLA_SLOT_BYTES,
    FP8_E4M3_MAX,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)

E4M3_NAN_CODE = 0x7F
"""The NaN code writers store (CUDA's ``__nv_cvt_float_to_fp8`` with ``__NV_SATFINITE``); 0xFF is NaN too."""

FLT_MIN = torch.finfo(torch.float32).smallest_normal
"""Smallest normal fp32 (C's ``FLT_MIN``, 2**-126): the floor of a non-zero group's scale, as in vLLM."""


def group_scales(kv_c_normed: torch.Tensor) -> torch.Tensor:
    """The fp32 scale of each 128-group: ``max(amax / 448, FLT_MIN)`` over its non-NaN values, or 0 for a
    group without a non-zero one.

    Parameters
    ----------
    kv_c_normed : torch.Tensor
        `[T, 512]` bf16 latents.

    Returns
    -------
    torch.Tensor
        `[T, 4]` float32.

    Raises
    ------
    TypeError, ValueError
        ``kv_c_normed`` not a bf16 `[T, 512]` tensor.
    """
    check_tensor("kv_c_normed", kv_c_normed, shape=(None, KV_LORA_RANK), dtype=torch.bfloat16)
    magnitude = kv_c_normed.float().abs()
    magnitude = torch.where(magnitude.isnan(), torch.zeros_like(magnitude), magnitude)  # fmaxf leaves NaN out
    amax = magnitude.reshape(-1, FP8_DS_MLA_NUM_SCALES, FP8_DS_MLA_GROUP_SIZE).amax(dim=-1)
    # A tensor divisor: PyTorch's CUDA division by a Python scalar multiplies by its reciprocal (1 ulp off
    # the IEEE quotient vLLM's kernel and ours compute); tensor by tensor divides exactly on every device.
    scale = torch.clamp(amax / torch.full_like(amax, FP8_E4M3_MAX), min=FLT_MIN)
    return torch.where(amax > 0, scale, torch.zeros_like(scale))


def quantize_slots(kv_c_normed: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
    """The fp8_ds_mla slots of ``T`` tokens (the bytes a writer stores), by the rule of the module docstring.

    Parameters
    ----------
    kv_c_normed : torch.Tensor
        `[T, 512]` bf16 normalized latents ``c_kv`` (non-finite ones as the module docstring says).
    k_pe : torch.Tensor
        `[T, 64]` bf16 rotary keys, stored unchanged.

    Returns
    -------
    torch.Tensor
        `[T, 656]` uint8 slots, on the inputs' device.

    Raises
    ------
    TypeError, ValueError
        A wrong dtype or shape, naming the argument.
    """
    check_tensor("kv_c_normed", kv_c_normed, shape=(None, KV_LORA_RANK), dtype=torch.bfloat16)
    num_tokens = kv_c_normed.shape[0]
    check_tensor("k_pe", k_pe, shape=(num_tokens, QK_ROPE_HEAD_DIM), dtype=torch.bfloat16, device=kv_c_normed.device)
    scale = group_scales(kv_c_normed)  # [T, 4]
    groups = kv_c_normed.float().reshape(num_tokens, FP8_DS_MLA_NUM_SCALES, FP8_DS_MLA_GROUP_SIZE)
    quotient = groups / scale[..., None]  # IEEE fp32 division; NaN in all-zero groups (scale 0), replaced below
    quotient = torch.where((scale[..., None] > 0) | groups.isnan(), quotient, torch.zeros_like(quotient))
    # torch's float -> float8_e4m3fn conversion rounds to nearest-even; saturating (CUDA's __NV_SATFINITE) is
    # explicit here rather than left to how a torch version converts out-of-range values. A quotient can exceed
    # 448 by rounding alone (bf16 1.0234375 / (1.0234375 / 448) = 448.00003 in fp32).
    fp8 = quotient.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    fp8 = torch.where(quotient.isnan(), torch.full_like(fp8, E4M3_NAN_CODE), fp8)  # either sign: 0x7F
    slots = torch.empty(num_tokens, FP8_DS_MLA_SLOT_BYTES, dtype=torch.uint8, device=kv_c_normed.device)
    slots[:, :FP8_DS_MLA_SCALE_OFFSET] = fp8.reshape(num_tokens, KV_LORA_RANK)
    slots[:, FP8_DS_MLA_SCALE_OFFSET:FP8_DS_MLA_ROPE_OFFSET] = scale.view(torch.uint8)  # little-endian hosts
    slots[:, FP8_DS_MLA_ROPE_OFFSET:] = k_pe.contiguous().view(torch.uint8)
    return slots


def dequantize_cache(kv_cache: torch.Tensor) -> torch.Tensor:
    """Read fp8_ds_mla slots back as float32 ``[c_kv (512) | k_rope (64)]`` rows.

    ``c_kv[128 i + j] = float(fp8[128 i + j]) * scale[i]`` (fp32 product) for any fp32 scales, and ``k_rope``
    the stored bf16 values upcast (exact).

    Parameters
    ----------
    kv_cache : torch.Tensor
        `[..., 656]` uint8 slots, e.g. a whole `[num_blocks, 64, 656]` cache or gathered `[T, K, 656]` rows.

    Returns
    -------
    torch.Tensor
        `[..., 576]` float32, on the cache's device.

    Raises
    ------
    TypeError, ValueError
        ``kv_cache`` is not uint8 or its last dimension is not 656.
    """
    check_tensor("kv_cache", kv_cache, dtype=torch.uint8)
    if kv_cache.dim() == 0 or kv_cache.shape[-1] != FP8_DS_MLA_SLOT_BYTES:
        raise ValueError(
            f"sparse_mla: argument 'kv_cache' expected shape (..., {FP8_DS_MLA_SLOT_BYTES}), got {tuple(kv_cache.shape)}"
        )
    lead = kv_cache.shape[:-1]
    fp8 = kv_cache[..., :FP8_DS_MLA_SCALE_OFFSET].contiguous().view(torch.float8_e4m3fn).float()
    scale = kv_cache[..., FP8_DS_MLA_SCALE_OFFSET:FP8_DS_MLA_ROPE_OFFSET].contiguous().view(torch.float32)
    c_kv = fp8.reshape(*lead, FP8_DS_MLA_NUM_SCALES, FP8_DS_MLA_GROUP_SIZE) * scale[..., None]
    k_rope = kv_cache[..., FP8_DS_MLA_ROPE_OFFSET:].contiguous().view(torch.bfloat16).float()
    return torch.cat([c_kv.reshape(*lead, KV_LORA_RANK), k_rope], dim=-1)
