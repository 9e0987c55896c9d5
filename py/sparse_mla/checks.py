"""Argument checks that name the argument, what was expected and what was given.

Every public entry point validates its tensors here before any kernel runs, so that bad input
raises a Python exception instead of reading out of bounds or corrupting the KV cache.
"""

import math
import numbers
import operator
from typing import Optional, Sequence, Tuple, Union

import torch

from sparse_mla.constants import KV_BLOCK_SIZE, MAX_NUM_HEADS

DTypes = Union[torch.dtype, Tuple[torch.dtype, ...]]

NO_POSITION = -1
"""Marks an empty entry of a top-k row."""


def _fmt_shape(shape: Sequence[Optional[int]]) -> str:
    """Like ``str(tuple(shape))``, with ``*`` for a size that may be anything."""
    parts = ["*" if s is None else str(s) for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def check_tensor(
    name: str,
    tensor: object,
    *,
    shape: Optional[Sequence[Optional[int]]] = None,
    dtype: Optional[DTypes] = None,
    device: Optional[Union[torch.device, str]] = None,
) -> torch.Tensor:
    """Check one tensor argument and return it.

    Parameters
    ----------
    name : str
        The argument's name as the caller knows it, e.g. ``"q_nope"``.
    tensor : object
        The value to check.
    shape : sequence of int or None, optional
        Expected sizes; ``None`` matches any size in that dimension. The rank must match.
    dtype : torch.dtype or tuple of torch.dtype, optional
        Accepted dtypes.
    device : torch.device or str, optional
        Expected device. A bare type (``"cuda"``, ``"cpu"``) matches any index of that type.

    Returns
    -------
    torch.Tensor
        ``tensor`` itself.

    Raises
    ------
    TypeError
        If ``tensor`` is not a tensor or has another dtype.
    ValueError
        If the rank, a size or the device differs.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"sparse_mla: argument '{name}' expected a torch.Tensor, got {type(tensor).__name__}")
    if shape is not None:
        ok = tensor.dim() == len(shape) and all(s is None or s == t for s, t in zip(shape, tensor.shape))
        if not ok:
            raise ValueError(
                f"sparse_mla: argument '{name}' expected shape {_fmt_shape(shape)}, got {tuple(tensor.shape)}"
            )
    if dtype is not None:
        accepted = dtype if isinstance(dtype, tuple) else (dtype,)
        if tensor.dtype not in accepted:
            want = " or ".join(str(d) for d in accepted)
            raise TypeError(f"sparse_mla: argument '{name}' expected dtype {want}, got {tensor.dtype}")
    if device is not None:
        want_dev = torch.device(device)
        same_type = tensor.device.type == want_dev.type
        if not same_type or (want_dev.index is not None and tensor.device.index != want_dev.index):
            hint = ""
            if want_dev.type == "cuda" and tensor.device.type == "cpu" and not torch.cuda.is_available():
                hint = " (no CUDA device here: CPU tensors run in Triton's interpreter, set TRITON_INTERPRET=1)"
            raise ValueError(f"sparse_mla: argument '{name}' expected device {want_dev}, got {tensor.device}{hint}")
    return tensor


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    """Check that all given tensors live on one device and return it.

    Raises
    ------
    ValueError
        Naming the first argument whose device differs from the first one's.
    """
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"sparse_mla: argument '{name}' expected device {first.device} (as '{first_name}'), got {t.device}"
            )
    return first.device


def check_unit_last_stride(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Check that ``tensor``'s last dimension is contiguous (stride 1) and return it; the other strides
    may be anything, e.g. vLLM's ``ql_nope``, a `[N, T, 512]` bmm result viewed as `[T, N, 512]`.

    Raises
    ------
    ValueError
        Naming the argument and its strides.
    """
    if tensor.dim() and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"sparse_mla: argument '{name}' expected unit stride in the last dim, got strides {tensor.stride()}")
    return tensor


def check_int(name: str, value: int) -> int:
    """``value`` as a Python int (a symbolic one as it is); ``TypeError`` naming ``name`` unless it is an integer
    (a Python, NumPy or symbolic one, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, torch.SymInt)):
        raise TypeError(f"sparse_mla: argument '{name}' expected an int, got {type(value).__name__} {value!r}")
    return value if isinstance(value, torch.SymInt) else operator.index(value)


def check_num_heads(name: str, num_heads: int) -> int:
    """``num_heads`` as a Python int (:func:`check_int`); ``ValueError`` unless ``1 <= num_heads <= MAX_NUM_HEADS``
    (128)."""
    num_heads = check_int(name, num_heads)
    if not 1 <= num_heads <= MAX_NUM_HEADS:
        raise ValueError(f"sparse_mla: argument '{name}' expected 1 <= num_heads <= {MAX_NUM_HEADS}, got {num_heads}")
    return num_heads


def check_finite_real(name: str, value: float) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is a real number (not a bool), ``ValueError`` unless it
    is finite."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"sparse_mla: argument '{name}' expected a real number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"sparse_mla: argument '{name}' expected a finite number, got {value}")


def check_kv_cache_slot_strides(name: str, kv_cache: torch.Tensor) -> int:
    """Check that a `[num_blocks, 64, slot_width]` cache can be read as rows of one slot and return its block
    stride in slots (``block_stride_rows``, vLLM's name).

    The slot width is the last dimension: 576 bf16 values, or 656 bytes for the uint8 fp8_ds_mla cache
    (:mod:`sparse_mla.kv_cache_format`). FA3's page-size-1 view and the slot ids of
    the index conversion (``cc/fa3/topk_to_slots_kernel.cu``) address slot ``p`` of block ``b`` as row
    ``b * block_stride_rows + p`` of a flat `[rows, slot_width]` view, which needs slot stride
    ``slot_width``, unit element stride, and a block stride that is a whole number of slots:
    ``stride(0) % slot_width == 0`` and ``stride(0) >= 64 * slot_width``. vLLM pads the block stride when
    other layers' pages sit between a layer's blocks (``flat_kv_row_view`` in vLLM 0.33.0
    ``vllm/v1/attention/backends/mla/sparse_utils.py`` makes the same demand); a contiguous cache
    has ``block_stride_rows = 64``.

    Raises
    ------
    ValueError
        Naming the argument, the expected strides and the actual ones.
    """
    slot_width = kv_cache.shape[-1]
    stride_block, stride_slot, stride_elem = kv_cache.stride()
    min_stride = KV_BLOCK_SIZE * slot_width
    if stride_elem != 1 or stride_slot != slot_width:
        raise ValueError(
            f"sparse_mla: argument '{name}' expected strides (*, {slot_width}, 1) (contiguous slots), "
            f"got {kv_cache.stride()}"
        )
    if stride_block % slot_width or stride_block < min_stride:
        raise ValueError(
            f"sparse_mla: argument '{name}' expected a block stride that is a multiple of {slot_width} "
            f"elements (one slot, for page-size-1 views of the cache) and >= {min_stride}, got stride(0) = "
            f"{stride_block} ({stride_block} % {slot_width} = {stride_block % slot_width})"
        )
    return stride_block // slot_width


def check_topk_indices(
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    num_blocks: int,
) -> None:
    """Raise on the first top-k entry that is neither ``-1`` nor valid (the backend's ``check_indices`` mode).

    Arguments: ``topk_indices`` `[T, K]`, ``req_id`` and ``token_kv_len`` `[T]` int32, ``block_table``
    `[R, max_blocks]` int32 and the cache's block count. Synchronizes with the host. Rows with
    ``token_kv_len == 0`` (padding tokens) are not checked.

    Raises
    ------
    ValueError
        Naming the token (and the column) of the first negative ``token_kv_len``, ``req_id`` outside
        ``[0, R)``, position outside ``[0, token_kv_len)``, position past the block table, or block id
        outside ``[0, num_blocks)``, in row-major order.
    """
    num_reqs, max_blocks = block_table.shape
    lengths = token_kv_len.long()
    negative = (lengths < 0).nonzero()
    if len(negative):
        t = int(negative[0, 0])
        raise ValueError(f"sparse_mla: token {t}: token_kv_len expected >= 0, got {int(lengths[t])}")
    checked = lengths > 0  # rows of padding tokens are not checked
    reqs = req_id.long()
    bad_req = (checked & ((reqs < 0) | (reqs >= num_reqs))).nonzero()
    if len(bad_req):
        t = int(bad_req[0, 0])
        raise ValueError(f"sparse_mla: token {t}: req_id expected in [0, {num_reqs}), got {int(reqs[t])}")

    pos = topk_indices.long()
    block_col = torch.div(pos, KV_BLOCK_SIZE, rounding_mode="floor")
    in_table = (pos >= 0) & (block_col < max_blocks)
    block = torch.full_like(pos, -1)  # no block where the table is empty (every checked row is bad then)
    if num_reqs and max_blocks:
        rows = block_table[reqs.clamp(0, num_reqs - 1)].long()  # [T, max_blocks]
        block = torch.gather(rows, 1, block_col.clamp(0, max_blocks - 1))
    bad_position = (pos < NO_POSITION) | ((pos >= 0) & (pos >= lengths[:, None]))
    bad_column = (pos >= 0) & ~bad_position & ~in_table
    bad_block = in_table & ~bad_position & ((block < 0) | (block >= num_blocks))
    bad = checked[:, None] & (bad_position | bad_column | bad_block)
    first = bad.nonzero()
    if not len(first):
        return
    t, c = int(first[0, 0]), int(first[0, 1])
    p = int(pos[t, c])
    where = f"sparse_mla: token {t}, column {c}: top-k index {p}"
    if bad_position[t, c]:
        raise ValueError(f"{where} expected -1 or in [0, token_kv_len = {int(lengths[t])}), got {p}")
    if bad_column[t, c]:
        raise ValueError(
            f"{where} lies in block-table column {int(block_col[t, c])}, expected < max_blocks = {max_blocks}"
        )
    raise ValueError(
        f"{where}: block_table[{int(reqs[t])}, {int(block_col[t, c])}] expected in [0, num_blocks = {num_blocks}), "
        f"got {int(block[t, c])}"
    )
