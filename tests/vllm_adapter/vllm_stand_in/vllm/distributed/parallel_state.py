"""Stand-in of ``vllm.distributed.parallel_state`` (vLLM 0.33.0): the DCP group's size and rank.

``_DCP`` is the group (``world_size``, ``rank_in_group``); None, as in a process without one, gives
``(1, 0)``. Tests set it to simulate a rank of a DCP group.
"""

from typing import Any, Optional, Tuple

_DCP: Optional[Any] = None


def get_dcp_world_size_and_rank(enabled: bool = True) -> Tuple[int, int]:
    if not enabled or _DCP is None:
        return 1, 0
    return _DCP.world_size, _DCP.rank_in_group
