"""Reference per-token-group FP8 activation quant, computed in float32 the way the kernels do.

Per row, per contiguous group of `group_size` along the last dim: amax = max|x| (x converted to fp32, exact),
scale = amax-derived fp32 value (see ZERO_GROUP_POLICIES), q = fp8(clamp(x / scale, -fp8_max, fp8_max)):
IEEE fp32 division (not a reciprocal multiply), clamp in fp32, then one round-to-nearest-even cast.

Upstream facts this follows (vLLM fp8_utils / input_quant_fp8 / csrc per_token_group_quant.cu):
- fp8_max is 448 for float8_e4m3fn; float8_e4m3fnuz (gfx94x) is clamped at 224, not the dtype's 240.
- column_major_scales: upstream allocates an fp32 buffer [G, M] and returns its transpose, so the logical
  shape is [M, G] with strides (1, M): scale (m, g) lives at offset g * M + m. No padding. Upstream only
  supports it for 2-D x (its allocation permutes the last two dims of (G, *x.shape[:-1])), so do we.
- Triton's fp32 `/` on NVIDIA GPUs lowers to div.full.f32 (not correctly rounded, ~2 ulp); IEEE division here
  matches the Triton CPU interpreter and CUDA `/`, and can differ from a GPU Triton kernel in the last bit of
  a scale and, rarely, in a q next to an fp8 rounding boundary.
- fp8_scale (FP8_SCALE_CONVENTIONS): "divide" forms s = max(amax, eps) / fp8_max by IEEE fp32 division;
  "reciprocal" (vLLM main since vllm#37833, its Triton `_absmax * (1.0 / fp8_max)`) multiplies by the correctly
  rounded fp32 1/fp8_max, which can move s by 1 ulp. Both then compute q = x / s (a division).
- UE8M0: upstream computes exp2(ceil(log2(s))) in fp32. For s a few ulp above a power of two, fp32 log2
  rounds to the integer and the scale is rounded DOWN. We round up exactly (frexp); ue8m0_ambiguous()
  flags the groups where implementations may legitimately differ.
"""
from __future__ import annotations

import torch

from .errors import require

FP8_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e4m3fnuz": torch.float8_e4m3fnuz}
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 224.0}  # fnuz clamped at 224, not the dtype's 240

# How the scale of a group is formed (they differ visibly only for all-zero and tiny groups):
#   "triton":     s = max(amax, eps) / fp8_max, then UE8M0 rounding     -> zero group: eps/fp8_max (2^-42 UE8M0)
#   "native":     s = amax / fp8_max, UE8M0 rounding (0 stays 0), then s = max(s, 1/(fp8_max*512))
#                 (a floor for every group with amax < 1/512, and not a power of two even with UE8M0)
#   "ue8m0_cuda": CUDA kernel: s = max(amax, eps) / fp8_max; UE8M0 rounds max(s, 1e-10) -> zero group 2^-33
#                 (without UE8M0 it equals "triton")
ZERO_GROUP_POLICIES = ("triton", "native", "ue8m0_cuda")
# how the raw scale is formed from amax: "divide" amax / fp8_max, "reciprocal" amax * fp32(1 / fp8_max)
FP8_SCALE_CONVENTIONS = ("divide", "reciprocal")
UE8M0_CUDA_FLOOR = 1e-10  # the CUDA kernel's floor inside log2f
NATIVE_FLOOR_DIVISOR = 512.0  # native torch path: min scale = 1 / (fp8_max * 512)
# UE8M0 groups whose raw scale is within this relative distance above a power of two may be rounded down
# by an fp32 log2 (torch, libdevice, approximate hardware log2): 2^-16 covers |exponent| <= 127 plus a few ulp.
UE8M0_AMBIGUOUS_REL = 2.0 ** -16

_F32 = torch.float32


def _f32(v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=_F32)


def ue8m0_round_up(s: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(s)) computed exactly for positive fp32 s (powers of two stay); 0 stays 0."""
    mant, exp = torch.frexp(s)  # s = mant * 2^exp, mant in [0.5, 1)
    up = torch.where(mant == 0.5, exp - 1, exp)
    return torch.where(s > 0, torch.ldexp(torch.ones_like(s), up), torch.zeros_like(s))


def ue8m0_ambiguous(scale_raw: torch.Tensor) -> torch.Tensor:
    """True where scale_raw is just above a power of two, so fp32 exp2(ceil(log2(.))) may round it down."""
    mant, _ = torch.frexp(scale_raw.to(torch.float64))
    rel = mant * 2 - 1  # distance above the power of two below, relative
    return (rel > 0) & (rel <= UE8M0_AMBIGUOUS_REL)


def fp32_reciprocal(v: float) -> torch.Tensor:
    """1 / v correctly rounded to fp32 (a 0-d tensor): the fp32 nearest the exact quotient, ties to even."""
    from fractions import Fraction

    exact = 1 / Fraction(v)
    near = _f32(1.0 / v)  # the double quotient rounded again: checked against its neighbours below
    cands = [torch.nextafter(near, _f32(-1.0)), near, torch.nextafter(near, _f32(2.0))]
    dist = [abs(Fraction(float(c)) - exact) for c in cands]
    best = min(dist)
    ties = [c for c, d in zip(cands, dist) if d == best]
    return min(ties, key=lambda c: int(c.view(torch.int32)) & 1)  # a tie goes to the even significand


def _scale_of(amax: torch.Tensor, fp8_max: float, fp8_scale: str) -> torch.Tensor:
    if fp8_scale == "reciprocal":
        return amax * fp32_reciprocal(fp8_max)
    return amax / _f32(fp8_max)


def group_scales_raw(amax: torch.Tensor, fp8_max: float, eps: float, policy: str,
                     fp8_scale: str = "divide") -> torch.Tensor:
    """The fp32 scale before UE8M0 rounding and floors, per policy and scale convention (amax fp32)."""
    require(fp8_scale in FP8_SCALE_CONVENTIONS, "fp8_scale", fp8_scale, f"one of {FP8_SCALE_CONVENTIONS}")
    if policy == "native":
        return _scale_of(amax, fp8_max, fp8_scale)
    return _scale_of(torch.maximum(amax, _f32(eps)), fp8_max, fp8_scale)


def group_scales(amax: torch.Tensor, fp8_max: float, eps: float, ue8m0: bool, policy: str,
                 fp8_scale: str = "divide") -> torch.Tensor:
    """fp32 scales from fp32 group amax, following `policy` (see ZERO_GROUP_POLICIES) and `fp8_scale`."""
    s = group_scales_raw(amax, fp8_max, eps, policy, fp8_scale)
    if ue8m0:
        if policy == "ue8m0_cuda":
            s = torch.maximum(s, _f32(UE8M0_CUDA_FLOOR))
        s = ue8m0_round_up(s)
    if policy == "native":
        s = torch.maximum(s, _f32(1.0) / _f32(fp8_max * NATIVE_FLOOR_DIVISOR))
    return s


def _check_common(fp8_dtype: str, group_size: int, zero_group_policy: str) -> None:
    require(fp8_dtype in FP8_DTYPES, "fp8_dtype", fp8_dtype, f"one of {sorted(FP8_DTYPES)}")
    require(isinstance(group_size, int) and group_size > 0, "group_size", group_size, "a positive int")
    require(zero_group_policy in ZERO_GROUP_POLICIES, "zero_group_policy", zero_group_policy,
            f"one of {ZERO_GROUP_POLICIES}")


def _quantize(xg: torch.Tensor, scales: torch.Tensor, fp8_dtype: str) -> torch.Tensor:
    fp8_max = FP8_MAX[fp8_dtype]
    return (xg / scales.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(FP8_DTYPES[fp8_dtype])


def _group_scales_shape(t: torch.Tensor, field: str, scales: torch.Tensor, group_size: int) -> tuple:
    """Require t's last dim a multiple of group_size and fp32 scales [*t.shape[:-1], G]; returns that shape."""
    K = t.shape[-1]
    require(K % group_size == 0, f"{field}.shape[-1]", K, f"a multiple of group_size={group_size}")
    want = (*t.shape[:-1], K // group_size)
    require(tuple(scales.shape) == want, "scales.shape", tuple(scales.shape), f"{want} ({field}.shape[:-1] + (G,))")
    require(scales.dtype == _F32, "scales.dtype", scales.dtype, "torch.float32")
    return want


def fp8_quantize_with_scales(x: torch.Tensor, scales: torch.Tensor, group_size: int,
                             fp8_dtype: str = "float8_e4m3fn") -> torch.Tensor:
    """q = fp8(clamp(x / scale, -fp8_max, fp8_max)) with given fp32 scales [*x.shape[:-1], G] (saturating)."""
    _check_common(fp8_dtype, group_size, "triton")
    want = _group_scales_shape(x, "x", scales, group_size)
    xg = x.to(_F32).reshape(*want, group_size)
    return _quantize(xg, scales, fp8_dtype).reshape(x.shape)


def fp8_group_quant_reference(x: torch.Tensor, group_size: int, fp8_dtype: str = "float8_e4m3fn",
                              ue8m0: bool = False, column_major_scales: bool = False, eps: float = 1e-10,
                              zero_group_policy: str = "triton",
                              fp8_scale: str = "divide") -> tuple[torch.Tensor, torch.Tensor]:
    """(q [*x.shape] in fp8_dtype, scales float32 [*x.shape[:-1], K // group_size]) for finite x.

    column_major_scales returns the same values with strides (1, M) (2-D x only), as upstream allocates them.
    fp8_scale: "divide" (s = amax / fp8_max) or "reciprocal" (s = amax * fp32(1/fp8_max)); q = x / s in both.
    """
    _check_common(fp8_dtype, group_size, zero_group_policy)
    require(fp8_scale in FP8_SCALE_CONVENTIONS, "fp8_scale", fp8_scale, f"one of {FP8_SCALE_CONVENTIONS}")
    require(isinstance(x, torch.Tensor) and x.dim() >= 1, "x.shape",
            tuple(x.shape) if isinstance(x, torch.Tensor) else type(x), "a tensor with at least 1 dim")
    require(x.dtype in (torch.float16, torch.bfloat16, torch.float32), "x.dtype", x.dtype,
            "torch.float16, torch.bfloat16 or torch.float32")
    K = x.shape[-1]
    require(K % group_size == 0, "x.shape[-1]", K, f"a multiple of group_size={group_size}")
    require(not column_major_scales or x.dim() == 2, "x.shape", tuple(x.shape),
            "a 2-D tensor [M, K] when column_major_scales=True (upstream supports only 2-D)")
    xf = x.to(_F32)
    require(bool(torch.isfinite(xf).all()), "x", "non-finite values", "finite values only")
    fp8_max = FP8_MAX[fp8_dtype]
    G = K // group_size
    xg = xf.reshape(*x.shape[:-1], G, group_size)
    amax = xg.abs().amax(dim=-1) if xg.numel() else torch.zeros(xg.shape[:-1], dtype=_F32)
    scales = group_scales(amax, fp8_max, eps, ue8m0, zero_group_policy, fp8_scale)
    q = _quantize(xg, scales, fp8_dtype).reshape(x.shape)
    if column_major_scales:
        scales = scales.t().contiguous().t()
    return q, scales


def dequantize_fp8_groups(q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """x_hat = q * scale per group, float32 (one fp32 rounding of the exact product), shape of q."""
    require(q.dtype in FP8_DTYPES.values(), "q.dtype", q.dtype, f"one of {list(FP8_DTYPES.values())}")
    require(isinstance(group_size, int) and group_size > 0, "group_size", group_size, "a positive int")
    want = _group_scales_shape(q, "q", scales, group_size)
    qf = q.to(_F32).reshape(*want, group_size)
    return (qf * scales.unsqueeze(-1)).reshape(q.shape)


def fp8_max_of(fp8_dtype: str) -> float:
    """The clamp bound used for `fp8_dtype` (224 for e4m3fnuz, 448 for e4m3fn)."""
    require(fp8_dtype in FP8_MAX, "fp8_dtype", fp8_dtype, f"one of {sorted(FP8_MAX)}")
    return FP8_MAX[fp8_dtype]

