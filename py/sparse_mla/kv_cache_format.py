"""The KV-cache formats this package reads and writes, and how to tell them apart.

Two formats of the paged latent cache `[num_blocks, 64, slot_width]`, one slot per token:

* ``bfloat16``: bf16 `[num_blocks, 64, 576]`, each slot ``[c_kv (512) | k_rope (64)]``; the engine's
  ``kv_cache_dtype`` ``"auto"`` (the bf16 activation dtype) or ``"bfloat16"``.
* ``fp8_ds_mla``: uint8 `[num_blocks, 64, 656]`, each slot 512 fp8 e4m3 ``c_kv`` values, 4 fp32 scales
  (one per 128 values) and 64 bf16 ``k_rope`` values (:mod:`sparse_mla.fp8_ds_mla`); the engine's
  ``kv_cache_dtype`` ``"fp8_ds_mla"`` (vLLM's name for FlashMLA's sparse fp8 cache; vLLM 0.33.0 allocates
  it as uint8 with 656 bytes per slot, ``MLAAttentionSpec.real_page_size_bytes``).

A cache tensor's dtype alone tells its format (:func:`format_of_cache`), so functions that take a cache
need no format argument.
"""

import dataclasses
from typing import Dict, Optional, Tuple

import torch

from sparse_mla.checks import check_tensor
from sparse_mla.constants import FP8_DS_MLA_SLOT_BYTES, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE


@dataclasses.dataclass(frozen=True)
class KVCacheFormat:
    """One cache format: its name, the cache tensor's dtype and the slot width in elements of that dtype."""

    name: str
    dtype: torch.dtype
    slot_width: int

    @property
    def block_shape(self) -> Tuple[int, int]:
        """``kv_cache.shape[1:]``: `(64, slot_width)`."""
        return (KV_BLOCK_SIZE, self.slot_width)

    @property
    def slot_bytes(self) -> int:
        """Bytes per slot: 1152 (bf16) or 656 (fp8_ds_mla)."""
        return self.slot_width * self.dtype.itemsize


BF16 = KVCacheFormat("bfloat16", torch.bfloat16, KV_CACHE_HEAD_SIZE)
"""bf16 `[num_blocks, 64, 576]`."""

FP8_DS_MLA = KVCacheFormat("fp8_ds_mla", torch.uint8, FP8_DS_MLA_SLOT_BYTES)
"""uint8 `[num_blocks, 64, 656]` (:mod:`sparse_mla.fp8_ds_mla`)."""

FORMATS = (BF16, FP8_DS_MLA)

KV_CACHE_ALIGNMENT = 16
"""Bytes a cache's data pointer is aligned to, in either format: the decode kernel's and FA3's 16-byte row
loads need it, so every route and the writer require it (a slot, 1152 or 656 = 16 * 41 bytes, keeps it)."""

KV_CACHE_DTYPES: Dict[str, KVCacheFormat] = {"auto": BF16, "bfloat16": BF16, "fp8_ds_mla": FP8_DS_MLA}
"""The engine's ``kv_cache_dtype`` strings served, and the format each one means (``"auto"``: the bf16
activation dtype)."""


def serves_kv_cache_dtype(kv_cache_dtype: Optional[str]) -> bool:
    """Whether ``kv_cache_dtype`` is one of :data:`KV_CACHE_DTYPES` (``None`` means ``"auto"``)."""
    return (kv_cache_dtype or "auto") in KV_CACHE_DTYPES


def format_of_kv_cache_dtype(kv_cache_dtype: Optional[str], name: str = "kv_cache_dtype") -> KVCacheFormat:
    """The format an engine's ``kv_cache_dtype`` string names (``None`` means ``"auto"``).

    Raises
    ------
    ValueError
        Naming argument ``name`` and the served strings, when ``kv_cache_dtype`` is none of them.
    """
    if not serves_kv_cache_dtype(kv_cache_dtype):
        raise ValueError(f"sparse_mla: argument '{name}' expected one of {list(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
    return KV_CACHE_DTYPES[kv_cache_dtype or "auto"]


def format_of_cache(name: str, kv_cache: object) -> KVCacheFormat:
    """The format of a cache tensor, from its dtype (bf16 or uint8); the shape is not checked here.

    Raises
    ------
    TypeError
        Naming argument ``name``, when it is not a tensor or has another dtype.
    """
    check_tensor(name, kv_cache, dtype=tuple(fmt.dtype for fmt in FORMATS))
    return BF16 if kv_cache.dtype == BF16.dtype else FP8_DS_MLA


def check_kv_cache(
    name: str, kv_cache: object, fmt: Optional[KVCacheFormat] = None, device: Optional[object] = None
) -> KVCacheFormat:
    """Check a cache tensor's dtype, shape `[num_blocks, 64, slot_width]` and device; return its format.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    kv_cache : object
        The cache to check.
    fmt : KVCacheFormat, optional
        The format the caller expects; by default, whichever :func:`format_of_cache` finds.
    device : torch.device or str, optional
        As in :func:`sparse_mla.checks.check_tensor`.

    Raises
    ------
    TypeError
        Another dtype (than ``fmt``'s, or than bf16 / uint8).
    ValueError
        Another shape or device, or a cache that does not start :data:`KV_CACHE_ALIGNMENT`-byte aligned.
    """
    fmt = fmt or format_of_cache(name, kv_cache)
    check_tensor(name, kv_cache, dtype=fmt.dtype, device=device)  # the dtype first: it names the format
    check_tensor(name, kv_cache, shape=(None, *fmt.block_shape))
    if kv_cache.data_ptr() % KV_CACHE_ALIGNMENT:
        raise ValueError(
            f"sparse_mla: argument '{name}' expected a data pointer aligned to {KV_CACHE_ALIGNMENT} bytes, "
            f"got {kv_cache.data_ptr():#x}"
        )
    return fmt
