"""Argument checks that name the argument, what was expected and what was given.

Every public entry point validates its tensors here before any kernel runs, so that bad input
raises a Python exception instead of reading out of bounds or corrupting the KV cache.
"""

from typing import Optional, Sequence, Tuple, Union

import torch

DTypes = Union[torch.dtype, Tuple[torch.dtype, ...]]


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
            raise ValueError(f"sparse_mla: argument '{name}' expected device {want_dev}, got {tensor.device}")
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
