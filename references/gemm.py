"""The fp64 reference W4A16 GEMM and the tolerance model's scale S = |x| @ |W|."""
from __future__ import annotations

import torch

from .errors import require
from .weight import CanonicalWeight


def _check_x(x: torch.Tensor, weight: CanonicalWeight) -> None:
    require(isinstance(x, torch.Tensor) and x.dim() == 2, "x.shape",
            tuple(x.shape) if isinstance(x, torch.Tensor) else type(x), "a 2-D tensor [M, K]")
    require(x.is_floating_point(), "x.dtype", x.dtype, "a floating-point dtype")
    require(x.shape[1] == weight.K, "x.shape", tuple(x.shape), f"[M, K] with K = weight.K = {weight.K}")


def reference_gemm(x: torch.Tensor, weight: CanonicalWeight, dequant_roundings: int | None = None,
                   dequant_dtype: torch.dtype | None = None,
                   float_zero_dtype: torch.dtype | None = None) -> torch.Tensor:
    """y = x @ W in float64 [M, N], W the logical (dequantized) weight; exact up to fp64 rounding.

    With dequant_roundings (1 or 2, weight.DEQUANT_CONVENTIONS) W is first formed in dequant_dtype (default: the
    scales' dtype) under that convention (float_zero_dtype: the float-zero form, CanonicalWeight.dequantize_rounded):
    the exact tier's reference for a kernel that declares it."""
    _check_x(x, weight)
    if dequant_roundings is None:
        return x.to(torch.float64) @ weight.dequantize(torch.float64)
    W = weight.dequantize_rounded(dequant_dtype or weight.act_dtype, dequant_roundings, float_zero_dtype)
    return x.to(torch.float64) @ W.to(torch.float64)


def abs_bound(x: torch.Tensor, weight: CanonicalWeight) -> torch.Tensor:
    """S = |x| @ |W| in float64 [M, N]: the scale of the dot-product error model."""
    _check_x(x, weight)
    return x.to(torch.float64).abs() @ weight.dequantize(torch.float64).abs()
