"""A model layer's RMSNorm + FP8 per-token-group quant, over every quant route upstream has.

Routes: "triton" (custom op), "native" (plain torch ops), "cuda" (vLLM's C++ op), "aiter" (ROCm AITER).
Each route is a registered fp8_group_quant kernel; a route whose op is absent here reports why. Plugin kernels that
declare `fusion_route = True` are routes too (`fusion_routes()`), labelled by their kernel name.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

from conformance.core.kernel import kernel_call
from conformance.core.registry import get_kernel
from conformance.core.targets import detect_target
from conformance.families.config import Fp8QuantConfig
from references.errors import require

_ROUTE_MODULES = {"cuda": "vllm", "aiter": "aiter"}  # where the upstream ops come from
ROUTES = {"triton": "fp8_group_quant_triton", "native": "fp8_group_quant_native",
          "cuda": "fp8_group_quant_cuda", "aiter": "fp8_group_quant_aiter"}


def fusion_routes() -> dict[str, str]:
    """Every quant route of the layer: route label -> kernel name, for each registered kernel that declares
    `fusion_route = True` (plugins included). Built-in routes keep their labels (ROUTES); a plugin's route is
    labelled by its kernel name."""
    from conformance.core.registry import all_kernels

    by_kernel = {k: r for r, k in ROUTES.items()}
    return {by_kernel.get(k.name, k.name): k.name for k in all_kernels("fp8_group_quant") if k.fusion_route}


def _route_kernel(route: str) -> str:
    routes = {**ROUTES, **fusion_routes()}
    require(route in routes, "route", route, f"one of {sorted(routes)} (a kernel declaring fusion_route = True)")
    return routes[route]


def route_availability(route: str) -> str | None:
    """None if the route's quant op runs on this machine, else why not."""
    why = get_kernel(_route_kernel(route)).availability(detect_target())
    module = _ROUTE_MODULES.get(route)
    if why is not None and module is not None and importlib.util.find_spec(module) is None:
        why = f"{why}; and the op is absent: module {module!r} is not installed"
    return why


@dataclass
class RmsNormQuantLayer:
    """y = rms_norm(x) * weight, then (q, scales) = the route's group quant of y."""

    config: Fp8QuantConfig
    weight: torch.Tensor
    eps: float = 1e-6
    route: str = "triton"
    kernel_override: str | None = None  # a plugin's quant kernel in place of the route's own

    def __post_init__(self):
        self.kernel = get_kernel(self.kernel_override or _route_kernel(self.route))
        from conformance.checks import guard

        self.params = guard.call(self.kernel, "load", self.config)  # API v1 or v2 alike

    @property
    def kernel_name(self) -> str:
        return self.kernel.name

    def quant(self, y: torch.Tensor):
        return tuple(kernel_call(self.kernel, self.params, y))

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None = None):
        """`weight` overrides the layer's norm weight (tracing passes it as a graph input)."""
        from conformance.checks.fusion import RMS_OP

        return self.quant(RMS_OP(x, self.weight if weight is None else weight, self.eps))
