"""Stand-in of ``vllm.platforms.interface.DeviceCapability`` (vLLM 0.33.0): a ``(major, minor)`` named tuple."""

from typing import NamedTuple


class DeviceCapability(NamedTuple):
    major: int
    minor: int
