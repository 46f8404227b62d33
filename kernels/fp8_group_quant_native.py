"""Plain-torch per-token-group FP8 quant: vLLM's QuantFP8 native path (`_quantize_group_native`), op for op.

Deliberately not a custom op: upstream this path is a sequence of plain aten ops (abs, amax, div, exp2/ceil/
log2, clamp, to) that the RMSNorm + quant fusion pass pattern-matches; wrapping it in an op would hide it
from that matcher. Its conventions differ from the Triton/CUDA kernels (policy "native"): no eps; the scale
is floored at 1/(fp8_max*512) for every group whose amax is below 1/512 (not only all-zero groups), and
that floor is applied after UE8M0 rounding, so such a scale is not a power of two. UE8M0 uses fp32
exp2(ceil(log2 s)), which rounds s DOWN when it lies a few ulp above a power of two (then values at the
group's amax clamp at fp8_max); references.fp8.ue8m0_ambiguous() flags those groups.
"""
from __future__ import annotations

import torch

from conformance.core.registry import Kernel, register_kernel
from conformance.core.targets import Target

from ._fp8_common import (
    Fp8QuantParams,
    check_input,
    device_availability,
    first_refusal,
    gate_family,
    gate_fp8_dtype_for_target,
    gate_hidden_multiple,
    gate_input_dtype,
    params_from_config,
)

NATIVE_FLOOR_DIVISOR = 512.0  # upstream _FP8_MIN_SCALING_FACTOR = 1 / (fp8_max * 512)


def native_group_quant(x: torch.Tensor, p: Fp8QuantParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scales) computed with upstream's ops in upstream's order (eps is not used, as upstream)."""
    check_input(x, p)
    K = x.shape[-1]
    G = K // p.group_size
    if x.numel() == 0:
        scales = torch.empty((*x.shape[:-1], G), dtype=torch.float32, device=x.device)
        return torch.empty(x.shape, dtype=p.torch_fp8, device=x.device), scales
    x_grouped = x.reshape(-1, G, p.group_size)
    absmax = x_grouped.abs().max(dim=-1, keepdim=True)[0].float()  # max in the input dtype is exact
    scales_raw = absmax / p.fp8_max
    if p.ue8m0:
        scales_raw = torch.exp2(torch.ceil(torch.log2(scales_raw)))
    scales = scales_raw.clamp(min=1.0 / (p.fp8_max * NATIVE_FLOOR_DIVISOR))
    x_quant = (x_grouped / scales).clamp(-p.fp8_max, p.fp8_max).to(p.torch_fp8)  # fp16/bf16 / fp32 -> fp32
    scales = scales.squeeze(-1).reshape(*x.shape[:-1], G)
    if p.column_major_scales:
        scales = scales.transpose(-2, -1).contiguous().transpose(-1, -2)
    return x_quant.reshape(x.shape), scales


@register_kernel
class Fp8GroupQuantNative(Kernel):
    name = "fp8_group_quant_native"
    fusion_route = True  # a quant route of the RMSNorm + quant layer (the fusion check)
    family = "fp8_group_quant"
    priority = 0
    deterministic = True
    zero_group_policy = "native"  # scale floored at 1/(fp8_max*512); no eps
    # upstream's `absmax / fp8_max` divides by a Python scalar: torch's CUDA kernel multiplies by the fp32
    # reciprocal instead (not correctly rounded), so on a GPU the scales may differ from IEEE division by 1 ulp
    device_inexact_reason = ("torch on CUDA divides by a Python scalar as a multiplication by its fp32 reciprocal, "
                             "so scales may differ from correctly rounded division by 1 ulp")
    gate_summary = ("any target (plain torch, fusion-matchable ops, no custom op); fp8 dtype of the target; "
                    "fp16/bf16/fp32 in; any group; UE8M0; column-major scales")
    op = None  # plain torch on purpose: see the module docstring

    def can_implement(self, config, target: Target) -> str | None:
        return first_refusal(gate_family(config), gate_hidden_multiple(config), gate_input_dtype(config),
                             gate_fp8_dtype_for_target(config, target))

    def availability(self, target: Target) -> str | None:
        return None if target.is_cpu else device_availability(target)

    def run_mode(self, target: Target) -> str:
        # plain torch runs natively on the cpu target: never through the Triton interpreter
        return "model" if self.availability(target) is not None else "device"

    def load(self, config, _unused=None) -> Fp8QuantParams:
        return params_from_config(config)

    def apply(self, p: Fp8QuantParams, x: torch.Tensor):
        return native_group_quant(x, p)

    def model(self, p: Fp8QuantParams, x: torch.Tensor):
        # the kernel is its own plain-torch reading; on a device-less machine it runs on cpu tensors
        return native_group_quant(x, p)
