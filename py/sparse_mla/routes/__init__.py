"""The attention routes a step can take, and what each one is made of.

A route serves a whole step (``T`` padded query tokens of ``N`` heads) with one family of kernels. The
metadata builder decides everything that depends only on ``(T, N, SM count, top-k, cache format)`` once
per step, not once per layer; a route therefore is:

* ``plan(num_tokens, num_heads, num_sms, topk, cache_format) -> frozen dataclass``: the host decisions of
  a step (split counts, launch configuration, workspace sizes; ``cache_format`` the name of the builder's
  KV-cache format); a pure function, memoized by the builder;
* ``make_workspace(max_num_tokens, num_heads, num_sms, topk, device, cache_format)``: the route's
  persistent device buffers, allocated once by the builder for its largest step (CUDA graphs see fixed
  addresses);
* ``prepare(plan, workspace, metadata)``: device work done once per step in ``build`` (FA3: its
  tile-scheduler metadata); returns what ``run`` needs of it (``metadata.prepared``);
* ``run(q_nope, q_rope, kv_cache, topk_indices, metadata, softmax_scale, out, lse)``: one layer's
  launches on arguments ``SparseMLAImpl.forward`` validated; writes ``out`` (and ``lse`` when given);
* ``is_available()``, ``runs_on_cpu`` and ``fallback``: where a route cannot run here (its extension
  not built, not Hopper, or the builder's tensors on the CPU for a CUDA-only route),
  :mod:`sparse_mla.routing` takes its fallback instead;
* ``cache_formats``: the names of the KV-cache formats its kernels read (:mod:`sparse_mla.kv_cache_format`);
  a step on a cache of another format takes the fallback too, and ``SparseMLAImpl.forward`` refuses a
  cache its step's route cannot read.

The routing table (:mod:`sparse_mla.routing`) names routes by the keys of :data:`ROUTES`. Adding a
route is one module with those functions and one entry here.
"""

import dataclasses
from typing import Any, Callable, Dict, FrozenSet, Optional

import torch

from sparse_mla import kv_cache_format
from sparse_mla.routes import decode_route, fa3_route, triton_route

BF16_ONLY = frozenset({kv_cache_format.BF16.name})
"""``cache_formats`` of a route that reads only the bf16 cache."""

ALL_FORMATS = frozenset(fmt.name for fmt in kv_cache_format.FORMATS)
"""``cache_formats`` of a route that reads every cache format (bf16 and fp8_ds_mla)."""


def _nothing_to_prepare(plan: Any, workspace: Any, metadata: Any) -> None:
    """``prepare`` of a route without per-step device work."""
    return None


def _always_available() -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Route:
    """One way of serving a step; see the module docstring for each function's contract."""

    name: str
    plan: Callable[[int, int, int, int, str], Any]
    make_workspace: Callable[[int, int, int, int, torch.device, str], Any]
    run: Callable[..., None]
    prepare: Callable[[Any, Any, Any], Any] = _nothing_to_prepare
    is_available: Callable[[], Any] = _always_available  # truthy when the route runs here
    fallback: Optional[str] = None  # route taken instead where this one is unavailable
    runs_on_cpu: bool = False  # serves CPU tensors too (Triton's interpreter), not only CUDA ones
    cache_formats: FrozenSet[str] = BF16_ONLY  # names of the KV-cache formats its kernels read


ROUTES: Dict[str, Route] = {
    "decode": Route(
        name="decode",
        plan=decode_route.plan,
        make_workspace=decode_route.make_workspace,
        run=decode_route.run,
        is_available=decode_route.is_available,
        fallback="fa3",
        cache_formats=ALL_FORMATS,
    ),
    "fa3": Route(
        name="fa3",
        plan=fa3_route.plan,
        make_workspace=fa3_route.Workspace.for_max_tokens,
        prepare=fa3_route.prepare,
        run=fa3_route.run,
        is_available=fa3_route.is_available,
        fallback="triton",  # FA3 cannot read the fp8_ds_mla cache: such steps take Triton
    ),
    "triton": Route(
        name="triton",
        plan=triton_route.plan,
        make_workspace=triton_route.make_workspace,
        run=triton_route.run,
        runs_on_cpu=True,
        cache_formats=ALL_FORMATS,
    ),
}
"""Every route, by routing-table name; on a timing tie the routing table prefers the earlier one
(so a tie goes to the single-launch decode kernel)."""
