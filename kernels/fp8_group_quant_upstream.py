"""Adapters for the upstream group-quant ops that are not built here: vLLM's CUDA op and AITER's HIP op.

`apply` binds to the op when it is importable on this machine's matching GPU; `availability()` says why
not otherwise. `model` is a plain-torch reading of each op's documented conventions, so selection, gates
and load steps are tested everywhere.

- fp8_group_quant_cuda: torch.ops._C.per_token_group_fp8_quant(x, q, s, group, eps, -fp8_max, fp8_max, ue8m0)
  (vllm csrc/quantization/w8a8/fp8/per_token_group_quant.cu). vLLM calls it only on CUDA platforms, for
  contiguous x. amax starts at eps; s = amax / fp8_max; UE8M0 rounds max(s, 1e-10) up to a power of two,
  so an all-zero group (and any group with amax < 448e-10) gets 2^-33 (policy "ue8m0_cuda"); q = clamp(x / s).
- fp8_group_quant_aiter: vLLM's rocm_aiter_group_fp8_quant = aiter get_hip_quant(QuantType.per_1x128), group
  size 128 whatever is asked, fp32 row-major scales, no UE8M0. AITER's own conventions (csrc/kernels/
  quant_kernels.cu, dynamic_per_group_scaled_quant_kernel): amax starts at 1e-10; fp8_max is the dtype's
  (240 for e4m3fnuz on gfx942, not vLLM's 224; 448 on gfx950); s = amax * fp32(1/fp8_max); q = x * fp32(1/s)
  (reciprocal multiplies, not divisions). Policy "aiter": not one of the reference's policies, so neither
  its scales nor its q match the 224-clamped reference; compare its dequantized values with a bound.
"""
from __future__ import annotations

import importlib
import importlib.util

import torch

from conformance.core.registry import Kernel, register_kernel
from conformance.core.targets import Target

from ._fp8_common import (
    Fp8QuantParams,
    check_input,
    device_availability,
    empty_scales,
    f32,
    first_refusal,
    gate_family,
    gate_fp8_dtype_for_target,
    gate_hidden_multiple,
    gate_input_dtype,
    params_from_config,
    quantize_groups,
    ue8m0_ceil,
)

CUDA_UE8M0_FLOOR = 1e-10  # fmaxf(s, 1e-10f) inside the CUDA kernel's UE8M0 rounding
AITER_GROUP_SIZE = 128  # vLLM binds QuantType.per_1x128
AITER_EPS = 1e-10
AITER_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0}  # opus::finfo<fp8_t>::max()


def _module_availability(module: str, what: str) -> str | None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"{module.split('.')[0]} is not installed ({what})"
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means the op is absent; say which
        return f"{module} failed to import ({type(e).__name__}: {e}); {what}"
    return None


@register_kernel
class Fp8GroupQuantCuda(Kernel):
    name = "fp8_group_quant_cuda"
    fusion_route = True  # a quant route of the RMSNorm + quant layer (the fusion check)
    family = "fp8_group_quant"
    priority = 20  # upstream prefers the CUDA op over the Triton fallback on CUDA
    deterministic = True
    zero_group_policy = "ue8m0_cuda"
    gate_summary = "cuda sm89+ (op from vllm._C); e4m3fn; fp16/bf16/fp32 in; any group; UE8M0; column-major"
    op = None  # a mutating out-param op of vllm._C; resolved by bound_op() where it exists

    def can_implement(self, config, target: Target) -> str | None:
        kind = None if target.kind == "cuda" else (
            f"target={target} not supported (allowed: cuda; vLLM calls this op only on CUDA platforms)")
        return first_refusal(gate_family(config), kind, gate_hidden_multiple(config), gate_input_dtype(config),
                             gate_fp8_dtype_for_target(config, target))

    def availability(self, target: Target) -> str | None:
        why = device_availability(target)
        if why is None:
            why = _module_availability("vllm._C", "torch.ops._C.per_token_group_fp8_quant is built into vllm._C")
        if why is None and not hasattr(torch.ops._C, "per_token_group_fp8_quant"):
            why = "vllm._C imported but has no per_token_group_fp8_quant op"
        return why

    def bound_op(self):
        return torch.ops._C.per_token_group_fp8_quant

    def load(self, config, _unused=None) -> Fp8QuantParams:
        return params_from_config(config)

    def apply(self, p: Fp8QuantParams, x: torch.Tensor):
        check_input(x, p)
        x = x.contiguous()  # the op checks contiguity
        q = torch.empty(x.shape, dtype=p.torch_fp8, device=x.device)
        s = empty_scales(x.shape, p.group_size, p.column_major_scales, x.device)
        self.bound_op()(x, q, s, p.group_size, p.eps, -p.fp8_max, p.fp8_max, p.ue8m0)
        return q, s

    def model(self, p: Fp8QuantParams, x: torch.Tensor):
        def scale(amax):
            s = torch.maximum(amax, f32(p.eps)) / f32(p.fp8_max)
            return ue8m0_ceil(torch.maximum(s, f32(CUDA_UE8M0_FLOOR))) if p.ue8m0 else s

        return quantize_groups(x, p, scale)


@register_kernel
class Fp8GroupQuantAiter(Kernel):
    name = "fp8_group_quant_aiter"
    fusion_route = True  # a quant route of the RMSNorm + quant layer (the fusion check)
    family = "fp8_group_quant"
    priority = 20  # vLLM takes AITER's op on ROCm when AITER linear fp8 is enabled
    deterministic = True
    zero_group_policy = "aiter"  # scale 1e-10 * fp32(1/fp8_max), fp8_max 240 on gfx942
    gate_summary = "rocm gfx94x/gfx95x (op from aiter); group 128 only; fp16/bf16 in; no UE8M0; row-major scales"
    op = None  # resolved by bound_op() where aiter exists

    def can_implement(self, config, target: Target) -> str | None:
        kind = None if target.gfx_family in ("gfx94", "gfx95") else (
            f"target={target} not supported (allowed: rocm gfx94x or gfx95x, where AITER is built)")
        group = None if config.group_size == AITER_GROUP_SIZE else (
            f"group_size={config.group_size} not supported (allowed: {AITER_GROUP_SIZE}; "
            "vLLM binds QuantType.per_1x128 whatever group it is asked for)")
        ue8m0 = None if not config.ue8m0 else "ue8m0=True not supported (allowed: False; AITER writes fp32 scales)"
        colmajor = None if not config.column_major_scales else (
            "column_major_scales=True not supported (allowed: False; vLLM calls it without transpose_scale)")
        return first_refusal(gate_family(config), kind, group, gate_hidden_multiple(config),
                             gate_input_dtype(config, ("float16", "bfloat16")), ue8m0, colmajor,
                             gate_fp8_dtype_for_target(config, target))

    def availability(self, target: Target) -> str | None:
        why = device_availability(target)
        return why if why is not None else _module_availability(
            "aiter", "the op is aiter.get_hip_quant(QuantType.per_1x128) from ROCm/aiter")

    def bound_op(self):
        from aiter import QuantType, get_hip_quant

        return get_hip_quant(QuantType.per_1x128)

    def load(self, config, _unused=None) -> Fp8QuantParams:
        return params_from_config(config, fp8_max=AITER_FP8_MAX, eps=AITER_EPS)

    def apply(self, p: Fp8QuantParams, x: torch.Tensor):
        check_input(x, p)
        return self.bound_op()(x.contiguous(), quant_dtype=p.torch_fp8)

    def model(self, p: Fp8QuantParams, x: torch.Tensor):
        inv_max = f32(1.0 / p.fp8_max)  # fp32 of the double 1/max, as the kernel's constant
        return quantize_groups(x, p, lambda amax: torch.maximum(amax, f32(p.eps)) * inv_max, divide=False)
