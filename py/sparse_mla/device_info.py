"""Host-side facts about a device, read once and cached (no device synchronization)."""

import functools

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
