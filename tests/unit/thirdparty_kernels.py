"""A third-party kernel package in miniature, NOT in this tree's kernels/: it imports only `conformance.api` and
`references` (plus torch), as an external plugin would. Importing it registers:

- `thirdparty_dequant_w4a16`: every 4-bit format through `references.codecs`, act-order included; dequantizes at
  load time and multiplies in fp32 through its own custom op `thirdparty::dequant_gemm(x, Tensor[] weights)` (a
  `Tensor[]` argument: the contract checks must fake nested tensors too).
- `thirdparty_fp8_quant`: an FP8 per-token-group quant route (`fusion_route = True`) that calls the upstream Triton
  op `torch.ops.conformance.fp8_group_quant_triton` directly (by its op handle, no private import), so the RMSNorm
  + quant fusion pass matches it.

tests/unit/test_plugin_kernels.py runs the whole shipped suite (conformance/suite) on these kernels through
`--conformance-plugin tests.unit.thirdparty_kernels`; tests/unit/thirdparty_broken.py holds their broken twins.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.api import Kernel, detect_target, interpreting, register_kernel, torch_dtype
from references import codecs

PLUGIN = "tests.unit.thirdparty_kernels"


@torch.library.custom_op("thirdparty::dequant_gemm", mutates_args=())
def dequant_gemm(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """x [M, K] @ weights[0] [K, N], summed in fp32, rounded once to x.dtype."""
    return (x.float() @ weights[0].to(x.device).float()).to(x.dtype)


@dequant_gemm.register_fake
def _(x, weights):
    return x.new_empty((x.shape[0], weights[0].shape[1]))


@register_kernel
class ThirdPartyDequantW4A16(Kernel):
    name = "thirdparty_dequant_w4a16"
    family = "w4a16"
    priority = -20  # never changes which built-in kernel is selected
    deterministic = True
    op = torch.ops.thirdparty.dequant_gemm.default
    gate_summary = "third-party plugin: any target; fp16/bf16; uint4/uint4b8; every format; act-order"

    def can_implement(self, config, target):
        if config.family != "w4a16":
            return f"family={config.family!r} not supported (allowed: 'w4a16')"
        if config.weight_type not in ("uint4", "uint4b8"):
            return f"weight_type={config.weight_type!r} not supported (allowed: uint4, uint4b8)"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16)"
        return None

    def availability(self, target):
        return None  # plain torch: runs wherever torch runs

    def run_mode(self, target):
        return "device"

    def dequant_dtype(self, config):
        return torch_dtype(config.dtype)

    def load(self, checkpoint, config=None):
        w = codecs.decode(checkpoint)  # the shared codecs: every format, g_idx applied by dequantize
        return [self.dequantize(w, checkpoint)]

    def dequantize(self, w, checkpoint) -> torch.Tensor:
        """(q - z) * s exact, rounded once into the act dtype."""
        return w.dequantize(checkpoint.act_dtype)

    def apply(self, weights, x):
        return self.op(x, weights)

    def model(self, weights, x):
        return (x.float() @ weights[0].to(x.device).float()).to(x.dtype)


@dataclass(frozen=True)
class QuantParams:
    """What the route's load returns: the upstream op's arguments (fp8_max: vLLM's clamp bound)."""

    group_size: int
    fp8_dtype: str
    fp8_max: float
    ue8m0: bool
    column_major_scales: bool
    eps: float = 1e-10

    @property
    def torch_fp8(self) -> torch.dtype:
        return torch_dtype(self.fp8_dtype)


@register_kernel
class ThirdPartyFp8Quant(Kernel):
    name = "thirdparty_fp8_quant"
    family = "fp8_group_quant"
    priority = -20
    deterministic = True
    fusion_route = True
    zero_group_policy = "triton"  # all-zero group: scale eps / fp8_max, as the upstream Triton op
    op = None  # set lazily: the built-in kernels register the upstream op when the registry loads them
    gate_summary = "third-party plugin: cpu (interpreter) or this machine's GPU; e4m3fn; group 1..128"

    @property
    def upstream_op(self):
        return torch.ops.conformance.fp8_group_quant_triton.default

    def can_implement(self, config, target):
        if config.family != "fp8_group_quant":
            return f"family={config.family!r} not supported"
        if config.fp8_dtype != "float8_e4m3fn":
            return f"fp8_dtype={config.fp8_dtype!r} not supported (allowed: float8_e4m3fn)"
        if not 1 <= config.group_size <= 128:
            return f"group_size={config.group_size} not supported (allowed: 1..128)"
        if config.hidden % config.group_size:
            return f"hidden={config.hidden} not a multiple of group_size={config.group_size}"
        if config.dtype not in ("float16", "bfloat16", "float32"):
            return f"dtype={config.dtype!r} not supported"
        if target.kind not in ("cpu", "cuda"):
            return f"target={target} not supported (allowed: cpu via the interpreter, cuda)"
        return None

    def availability(self, target):
        if target.is_cpu:
            return None if interpreting() else "Triton interpreter not enabled (TRITON_INTERPRET is not 1)"
        if interpreting():
            return f"target={target} needs a GPU but Triton runs in the interpreter here"
        return None if detect_target() == target else f"target={target} is not this machine's device"

    def load(self, config, _unused=None):
        return QuantParams(config.group_size, config.fp8_dtype, 448.0, config.ue8m0, config.column_major_scales)

    def apply(self, p, x):
        return self.upstream_op(x, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0, p.column_major_scales)


ThirdPartyFp8Quant.op = torch.ops.conformance.fp8_group_quant_triton.default if hasattr(
    torch.ops.conformance, "fp8_group_quant_triton") else None
