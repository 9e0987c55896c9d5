"""Host-side facts about a device, read once and cached (no device synchronization)."""

import functools
from typing import Optional, Tuple

import torch

INTERPRETER_NUM_SMS = 4
"""SM count assumed for a CPU device, where Triton's interpreter runs the kernels: few programs, fast tests."""


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (the current one when it has no index), or
    :data:`INTERPRETER_NUM_SMS` for the CPU."""
    if device.type != "cuda":
        return INTERPRETER_NUM_SMS
    return _cuda_num_sms(torch.cuda.current_device() if device.index is None else device.index)


@functools.lru_cache(maxsize=None)
def _cuda_num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


KIB = 1024

OPTIN_SHARED_MEMORY_PER_BLOCK = {
    (8, 0): 163 * KIB,
    (8, 6): 99 * KIB,
    (8, 7): 163 * KIB,
    (8, 9): 99 * KIB,
    (9, 0): 227 * KIB,
    (10, 0): 227 * KIB,
    (12, 0): 99 * KIB,
}
"""Most shared memory one block may opt in to, in bytes, per compute capability: the CUDA C++ Programming
Guide's table "Technical Specifications per Compute Capability" (maximum shared memory per thread block).
A visible device's own ``shared_memory_per_block_optin`` takes precedence."""

REFERENCE_NUM_SMS = 132
"""SM count assumed for a compute capability whose device is not visible here: the H200 (and H100 SXM),
where the kernels' launch configurations were measured."""


def _visible_device_index(capability: Tuple[int, int]) -> Optional[int]:
    """The current CUDA device's index when it has ``capability``, else ``None``."""
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    return index if tuple(torch.cuda.get_device_capability(index)) == tuple(capability) else None


def optin_shared_memory_per_block(capability: Tuple[int, int]) -> Optional[int]:
    """Bytes of shared memory a block may use on a device of ``capability``: the current device's own
    figure when it has that capability, else :data:`OPTIN_SHARED_MEMORY_PER_BLOCK`'s (``None`` if unknown)."""
    index = _visible_device_index(capability)
    if index is not None:
        return torch.cuda.get_device_properties(index).shared_memory_per_block_optin
    return OPTIN_SHARED_MEMORY_PER_BLOCK.get(tuple(capability))


def num_sms_for_capability(capability: Tuple[int, int]) -> int:
    """SMs of the current device when it has ``capability``, else :data:`REFERENCE_NUM_SMS`."""
    index = _visible_device_index(capability)
    return REFERENCE_NUM_SMS if index is None else _cuda_num_sms(index)
