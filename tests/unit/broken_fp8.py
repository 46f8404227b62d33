"""Test-only broken FP8 per-token-group quant kernels, ONE convention bug each (a conformance plugin).

`_mutant_fp8_kernel` is a copy of fp8_group_quant_triton's kernel with one switch per bug (all off: the shipped
kernel bit for bit, checked by tests/conformance/test_proof_of_power.py::test_fp8_mutant_copy_is_faithful), and
`launch_mutant` a copy of its launch (the same tiles) whose only optional change is the scale strides. The
kernels keep fp8_group_quant_triton's gate and declared numerics (fp8_scale "divide", zero-group policy
"triton"), so the grader holds each to the convention it declares. Load and unload as tests/unit/broken_kernels.py
says; tests/unit/broken_registry.py lists every broken kernel.

Not here: a kernel without the saturation clamp. With s = max(amax, eps) / fp8_max correctly rounded, |x / s| is at
most fp8_max * (1 + 2^-23) after fp32 rounding, which every round-to-nearest fp8 cast takes to fp8_max: dropping
the clamp changes no output (an equivalent mutant: test_fp8_mutant_copy_is_faithful runs it), so no test can kill it.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel
from conformance.core.runtime import cdiv, next_power_of_2

registry.load_all()  # configures Triton (the interpreter on a CPU host) before any @triton.jit below is defined
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from conformance_kernels import _fp8_common as common  # noqa: E402 - the built-in package exists after load_all
from conformance_kernels import fp8_group_quant_triton as ft  # noqa: E402

PLUGIN = "tests.unit.broken_fp8"
Fp8GroupQuantTriton = type(registry.get_kernel("fp8_group_quant_triton"))

BUGS = {
    "reciprocal_scale": "s = amax * fp32(1 / fp8_max) (the reciprocal convention) while declaring divide",
    "ue8m0_round_down": "UE8M0 rounds the scale down to a power of two instead of up (q then saturates)",
    "no_clamp": "q = fp8(x / s) without the clamp to +-fp8_max (equivalent: see the module docstring)",
    "no_eps": "s = amax / fp8_max without the eps floor: an all-zero group gets s = 0 and q = 0/0 = NaN",
    "scales_row_major": "column-major scales written with row-major strides",
    "reciprocal_q": "q = x * fp32(1 / s) (a reciprocal multiply, as AITER does) while declaring q = x / s",
}


@triton.jit
def _mutant_fp8_kernel(x_ptr, q_ptr, s_ptr, M, K, G, stride_xm, stride_sm, stride_sg, eps, fp8_max, inv_fp8_max,
                       GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
                       GPP: tl.constexpr, UE8M0: tl.constexpr,
                       RECIPROCAL_SCALE: tl.constexpr, UE8M0_ROUND_DOWN: tl.constexpr, NO_CLAMP: tl.constexpr,
                       NO_EPS: tl.constexpr, RECIPROCAL_Q: tl.constexpr):
    """fp8_group_quant_triton's _fp8_group_quant_kernel plus five bug switches."""
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = pid_g * GPP + tl.arange(0, GPP)
    cols = tl.arange(0, BLOCK_G)
    row_ok = rows < M
    rg_ok = row_ok[:, None] & (groups < G)[None, :]
    mask = rg_ok[:, :, None] & (cols < GROUP)[None, None, :]
    rows64 = rows.to(tl.int64)
    col = groups[None, :, None] * GROUP + cols[None, None, :]
    x = tl.load(x_ptr + rows64[:, None, None] * stride_xm + col, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=2)
    if NO_EPS:
        amax_e = amax  # BUG: no eps floor
    else:
        amax_e = tl.maximum(amax, eps)
    if RECIPROCAL_SCALE:
        s = amax_e * inv_fp8_max  # BUG: multiplies by fp32(1 / fp8_max)
    else:
        s = tl.math.div_rn(amax_e, fp8_max)
    if UE8M0:
        bits = s.to(tl.int32, bitcast=True)
        if UE8M0_ROUND_DOWN:
            exp = (bits >> 23) & 0xFF  # BUG: the mantissa is dropped, never rounded up
        else:
            exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        s = (exp << 23).to(tl.float32, bitcast=True)
    if RECIPROCAL_Q:
        # BUG: the correctly rounded fp32 reciprocal, then an fp32 multiply (two roundings, not one division)
        y = x * tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)[:, :, None]
    else:
        y = tl.math.div_rn(x, s[:, :, None])
    if NO_CLAMP:
        q = y
    else:
        q = tl.clamp(y, -fp8_max, fp8_max)
    tl.store(q_ptr + rows64[:, None, None] * K + col, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows64[:, None] * stride_sm + groups[None, :] * stride_sg, s, mask=rg_ok)


def launch_mutant(x: torch.Tensor, p: common.Fp8QuantParams, **bugs) -> tuple[torch.Tensor, torch.Tensor]:
    """ft.launch on _mutant_fp8_kernel with the named bugs of BUGS on (all off: the shipped launch, bit for bit)."""
    unknown = sorted(set(bugs) - set(BUGS))
    assert not unknown, f"unknown bugs {unknown}; allowed: {sorted(BUGS)}"
    on = {b: bool(bugs.get(b, False)) for b in BUGS}
    common.check_input(x, p)
    q = torch.empty(x.shape, dtype=p.torch_fp8, device=x.device)
    s = common.empty_scales(x.shape, p.group_size, p.column_major_scales, x.device)
    if x.numel() == 0:
        return q, s
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M, G = x2.shape[0], K // p.group_size
    s2 = s if p.column_major_scales else s.view(M, G)
    stride_sm, stride_sg = s2.stride(0), s2.stride(1)
    if on["scales_row_major"] and p.column_major_scales:
        stride_sm, stride_sg = G, 1  # BUG: row-major strides into the column-major [G, M] buffer
    block_g = next_power_of_2(p.group_size)
    t = ft.default_tile(M, G, block_g)
    grid = (cdiv(M, t.block_m), cdiv(G, t.groups_per_program))
    inv = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(p.fp8_max, dtype=torch.float32))
    _mutant_fp8_kernel[grid](x2, q, s2, M, K, G, x2.stride(0), stride_sm, stride_sg, p.eps, p.fp8_max, inv,
                             GROUP=p.group_size, BLOCK_M=t.block_m, BLOCK_G=block_g, GPP=t.groups_per_program,
                             UE8M0=p.ue8m0, RECIPROCAL_SCALE=on["reciprocal_scale"],
                             UE8M0_ROUND_DOWN=on["ue8m0_round_down"], NO_CLAMP=on["no_clamp"], NO_EPS=on["no_eps"],
                             RECIPROCAL_Q=on["reciprocal_q"], num_warps=t.num_warps)
    return q, s


class _Fp8LaunchMutant(Fp8GroupQuantTriton):
    """fp8_group_quant_triton whose apply runs launch_mutant with `bugs` on. Not registered itself."""

    bugs: tuple[str, ...] = ()

    def apply(self, p, x):
        return launch_mutant(x, p, **dict.fromkeys(self.bugs, True))


@register_kernel
class Fp8ReciprocalScale(_Fp8LaunchMutant):
    """BUG (the convention of vllm#37833, undeclared): s = amax * fp32(1 / fp8_max) while the kernel declares
    fp8_scale="divide"; the two differ in the last bit of s for most amax."""

    name = "broken_fp8_reciprocal_scale"
    bug = "scale by reciprocal multiplication while declaring divide"
    bugs = ("reciprocal_scale",)


@register_kernel
class Fp8Ue8m0RoundDown(_Fp8LaunchMutant):
    """BUG: UE8M0 scales are rounded down to a power of two (the mantissa dropped) instead of up: s < amax /
    fp8_max, so the group's largest values saturate at fp8_max."""

    name = "broken_fp8_ue8m0_round_down"
    bug = "UE8M0 scale rounded down instead of up"
    bugs = ("ue8m0_round_down",)


@register_kernel
class Fp8NoEps(_Fp8LaunchMutant):
    """BUG: s = amax / fp8_max without the eps floor: an all-zero group gets s = 0 and q = 0 / 0 = NaN."""

    name = "broken_fp8_no_eps"
    bug = "no eps floor: an all-zero group gets scale 0 and NaN q"
    bugs = ("no_eps",)


@register_kernel
class Fp8ScalesRowMajor(_Fp8LaunchMutant):
    """BUG: asked for column-major scales ([G, M] storage, strides (1, M)), the kernel writes them with row-major
    strides (G, 1): every scale but those of row 0's first group lands at another (token, group)."""

    name = "broken_fp8_scales_row_major"
    bug = "column-major scales written with row-major strides"
    bugs = ("scales_row_major",)


@register_kernel
class Fp8FnuzMax240(Fp8GroupQuantTriton):
    """BUG: e4m3fnuz quantized with the dtype's own max 240 instead of vLLM's bound 224 (scales 224/240 of the
    reference's, q up to 240)."""

    name = "broken_fp8_fnuz_max_240"
    bug = "e4m3fnuz clamped and scaled at 240 instead of 224"

    def load(self, config, _unused=None):
        return common.params_from_config(config, fp8_max={"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0})


@register_kernel
class Fp8ReciprocalQ(_Fp8LaunchMutant):
    """BUG (AITER's q, undeclared): q = fp8(clamp(x * fp32(1 / s))) while the kernel declares fp8_scale="divide"
    (q = x / s). The product is one fp32 ulp off the quotient for some x, which changes q's byte only next to an fp8
    rounding midpoint, and never where s is a power of two (UE8M0: 1 / s is exact); the reciprocal trap group of
    conformance/families/fp8_inputs.py puts such x in every case with three groups."""

    name = "broken_fp8_reciprocal_q"
    bug = "q = x * fp32(1 / s) (reciprocal multiply) while declaring divide"
    bugs = ("reciprocal_q",)
