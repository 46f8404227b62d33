"""Round-to-nearest quantization of a float weight [K, N] into a CanonicalWeight.

Biased types (uint4b8, uint8b128) are symmetric: scale = max(max(w) / (max - bias), -min(w) / bias), the
convention of vLLM's test quantizer. Unbiased types (uint4, uint8) are asymmetric min/max with zero
always representable (range widened to include 0, as GPTQ does). Scales are rounded to `act_dtype` first
and q (and z) are computed from the stored scale, so dequantize() is what a kernel would see.
"""
from __future__ import annotations

import torch

from .errors import require
from .scalar_types import ScalarType, scalar_type
from .weight import ACT_DTYPES, CanonicalWeight, effective_group_size


def _check_g_idx(g_idx: torch.Tensor, K: int, G: int, gs: int) -> None:
    require(isinstance(g_idx, torch.Tensor) and g_idx.dtype == torch.int32, "g_idx.dtype",
            getattr(g_idx, "dtype", type(g_idx)), "torch.int32")
    require(tuple(g_idx.shape) == (K,), "g_idx.shape", tuple(g_idx.shape), f"(K,) = {(K,)}")
    ok = int(g_idx.min()) >= 0 and int(g_idx.max()) < G
    ok = ok and bool((torch.bincount(g_idx.long(), minlength=G) == gs).all())
    require(ok, "g_idx", "inconsistent", f"values in [0, {G}) with each group used exactly group_size={gs} times")


def group_rows(K: int, gs: int, g_idx: torch.Tensor | None) -> torch.Tensor:
    """Row indices [G, gs]: row g lists the k with g(k) = g (ascending)."""
    if g_idx is None:
        return torch.arange(K).reshape(K // gs, gs)
    order = torch.sort(g_idx.long(), stable=True).indices
    return order.reshape(K // gs, gs)


def rtn_quantize(w: torch.Tensor, group_size: int, wtype: ScalarType | str,
                 act_dtype: torch.dtype = torch.float16, g_idx: torch.Tensor | None = None) -> CanonicalWeight:
    """Quantize w [K, N] per (group, column) by round-to-nearest(-even); group_size -1 = channelwise.

    A (group, column) whose stored scale is zero (all-zero weights, or a scale that underflows act_dtype)
    gets scale 1 and q = zero point, so it dequantizes to exactly 0 instead of NaN; for unbiased types its
    zero point is the mid value (8 for uint4, as GPTQ does) so GPTQ v1 (which cannot store z = 0) can hold it.
    """
    wtype = scalar_type(wtype)
    require(isinstance(w, torch.Tensor) and w.dim() == 2, "w.shape",
            tuple(w.shape) if isinstance(w, torch.Tensor) else type(w), "a 2-D tensor [K, N]")
    require(w.is_floating_point(), "w.dtype", w.dtype, "a floating-point dtype")
    require(act_dtype in ACT_DTYPES, "act_dtype", act_dtype, f"one of {ACT_DTYPES}")
    require(bool(torch.isfinite(w).all()), "w", "non-finite values", "finite values only")
    K, N = w.shape
    require(group_size == -1 or group_size > 0, "group_size", group_size, "-1 (channelwise) or a positive integer")
    gs = effective_group_size(group_size, K)
    require(K > 0 and K % gs == 0, "K", K, f"a positive multiple of group_size={group_size}")
    G = K // gs
    if g_idx is not None:
        _check_g_idx(g_idx, K, G, gs)

    w64 = w.to(torch.float64)
    grouped = w64[group_rows(K, gs, g_idx)]  # [G, gs, N]
    wmax = grouped.amax(dim=1).clamp(min=0.0)  # [G, N]; zero kept inside the range
    wmin = grouped.amin(dim=1).clamp(max=0.0)
    if wtype.has_bias():
        pos, neg = wtype.max - wtype.bias, wtype.bias  # 7 and 8 for uint4b8
        s = torch.maximum(wmax / pos, -wmin / neg)
    else:
        s = (wmax - wmin) / wtype.max
    s_stored = s.to(act_dtype)
    degenerate = s_stored == 0
    s_stored = torch.where(degenerate, torch.ones_like(s_stored), s_stored)
    s64 = s_stored.to(torch.float64)

    if wtype.has_bias():
        z64 = torch.full((G, N), float(wtype.bias), dtype=torch.float64)
        zeros = None
    else:
        z64 = torch.round(-wmin / s64).clamp(wtype.min, wtype.max)
        z64 = torch.where(degenerate, torch.full_like(z64, (wtype.max + 1) // 2), z64)
        zeros = z64.to(torch.int32)

    rows_g = torch.arange(K) // gs if g_idx is None else g_idx.long()
    q = torch.round(w64 / s64[rows_g]) + z64[rows_g]
    q = q.clamp(wtype.min, wtype.max).to(torch.int32)
    return CanonicalWeight(q=q, scales=s_stored, zeros=zeros,
                           g_idx=None if g_idx is None else g_idx.clone(),
                           group_size=group_size, wtype=wtype)
