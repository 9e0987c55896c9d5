"""The attention routes a step can take, and what each one is made of.

A route serves a whole step (``T`` padded query tokens of ``N`` heads) with one family of kernels. The
metadata builder decides everything that depends only on the step's :class:`StepContext` (shape, device,
cache format) once per padded ``T``, not once per layer: a route is a :class:`Route` whose ``plan``,
``make_workspace``, ``prepare`` and ``run`` follow one contract (:mod:`sparse_mla.routes.route`), and the
step's metadata carries a :class:`~sparse_mla.backend.StepPlan` of the types below.

The routing table (:mod:`sparse_mla.routing`) names routes by the keys of :data:`ROUTES`. Adding a route is
one module with a :class:`Route` subclass, one entry here and its types in the unions below.
"""

from typing import Dict, Optional, Union

import torch

from sparse_mla.kernels import sparse_mla_attention
from sparse_mla.ops import decode
from sparse_mla.routes import fa3_route
from sparse_mla.routes.decode_route import DecodeRoute
from sparse_mla.routes.route import ALL_FORMATS, BF16_ONLY, Route, StepContext
from sparse_mla.routes.triton_route import TritonRoute

__all__ = ["ALL_FORMATS", "BF16_ONLY", "ROUTES", "PreparedStep", "Route", "RoutePlan", "RouteWorkspace",
           "StepContext"]

ROUTES: Dict[str, Route] = {route.name: route for route in (DecodeRoute("decode"), fa3_route.Fa3Route("fa3"),
                                                             TritonRoute("triton"))}
"""Every route, by routing-table name; on a timing tie the routing table prefers the earlier one
(so a tie goes to the single-launch decode kernel)."""

RoutePlan = Union[decode.DecodePlan, fa3_route.Plan, sparse_mla_attention.LaunchPlan]
"""What a route's ``plan`` returns."""

RouteWorkspace = Union[torch.Tensor, fa3_route.Workspace, sparse_mla_attention.SplitWorkspace]
"""What a route's ``make_workspace`` returns."""

PreparedStep = Optional[fa3_route.Step]
"""What a route's ``prepare`` returns (only FA3 prepares a step)."""
