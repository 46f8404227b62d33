"""Seeded activations for fp8 group-quant cases: references.generators' regimes plus fp8-specific ones.

- all_zero_groups: normal data with ~25% of (row, group) blocks exactly zero (the scale policies differ there).
- saturation: groups spread over many binades whose max |x| occurs several times with both signs, so
  x/scale lands on and (after fp32 rounding of the scale) just past +-fp8_max: the clamp path.
- fp8_boundaries: groups scaled so the scale is an exact power of two (amax = fp8_max * 2^e) and the other
  values sit exactly on fp8 values, on midpoints between neighbours (ties to even, carries into the next
  binade) and one act-dtype ulp either side of them, subnormals and tiny values included.
"""
from __future__ import annotations

import torch

from conformance.core.dtypes import torch_dtype
from references.fp8 import FP8_DTYPES, FP8_MAX
from references.generators import DATA_REGIMES, generator, random_activations

FP8_ONLY_REGIMES = ("saturation", "fp8_boundaries")  # activation regimes only fp8 cases draw
FP8_REGIMES = DATA_REGIMES + FP8_ONLY_REGIMES  # every regime fp8_activations draws: the family's regimes


def _fp8_grid(fp8_dtype: str) -> torch.Tensor:
    """Every finite non-negative fp8 value <= the clamp bound, ascending (fp64)."""
    v = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8).view(FP8_DTYPES[fp8_dtype]).to(torch.float64)
    v = v[torch.isfinite(v) & (v >= 0) & (v <= FP8_MAX[fp8_dtype])]
    return torch.unique(v)


def boundary_values(fp8_dtype: str) -> torch.Tensor:
    """fp8 values, midpoints between neighbours, and the midpoints nudged by 2^-12 relative (fp64)."""
    g = _fp8_grid(fp8_dtype)
    mid = (g[1:] + g[:-1]) / 2
    return torch.cat([g, mid, mid * (1 + 2.0 ** -12), mid * (1 - 2.0 ** -12)])


def fp8_activations(tokens: int, hidden: int, dtype: str, regime: str, seed: int, group_size: int,
                    fp8_dtype: str) -> torch.Tensor:
    """x [tokens, hidden] in `dtype` for an fp8 regime, drawn from `seed` only."""
    if regime not in FP8_REGIMES:
        raise ValueError(f"regime={regime!r} is invalid; allowed: {list(FP8_REGIMES)}")
    act = torch_dtype(dtype)
    G = hidden // group_size
    if regime in DATA_REGIMES and regime != "all_zero_groups":
        return random_activations(tokens, hidden, act, regime, seed)
    gen = generator(seed, "activation")
    fmax = FP8_MAX[fp8_dtype]
    if regime == "all_zero_groups":
        x = torch.randn((tokens, G, group_size), generator=gen, dtype=torch.float64)
        zero = torch.rand((tokens, G, 1), generator=gen) < 0.25
        zero[torch.randint(0, tokens, (1,), generator=gen), torch.randint(0, G, (1,), generator=gen)] = True
        x = x.masked_fill(zero, 0.0)
    elif regime == "saturation":
        x = torch.randn((tokens, G, group_size), generator=gen, dtype=torch.float64)
        mag = torch.pow(2.0, torch.randint(-12, 12, (tokens, G, 1), generator=gen).double())
        mag = mag * (1 + torch.rand((tokens, G, 1), generator=gen, dtype=torch.float64))
        x = x / x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30) * mag * 0.999
        n_peak = max(1, group_size // 8)
        idx = torch.stack([torch.randperm(group_size, generator=gen)[:n_peak] for _ in range(tokens * G)])
        sign = torch.where(torch.rand(idx.shape, generator=gen) < 0.5, -1.0, 1.0).double()
        x.view(tokens * G, group_size).scatter_(1, idx, sign * mag.reshape(-1, 1))
    else:  # fp8_boundaries
        vals = boundary_values(fp8_dtype)
        pick = torch.randint(0, vals.numel(), (tokens, G, group_size), generator=gen)
        sign = torch.where(torch.rand((tokens, G, group_size), generator=gen) < 0.5, -1.0, 1.0).double()
        x = vals[pick] * sign
        x[..., 0] = fmax  # pins amax, so scale = fmax * 2^e / fmax = 2^e exactly
        # 2^e keeps every value (fp8 subnormals included) representable in fp16's normal-ish range
        e = torch.randint(-6, 5, (tokens, G, 1), generator=gen).double()
        x = x * torch.pow(2.0, e)
    return x.reshape(tokens, hidden).to(act)
