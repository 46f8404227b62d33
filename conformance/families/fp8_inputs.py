"""Seeded activations for fp8 group-quant cases: references.generators' regimes plus fp8-specific ones.

- all_zero_groups: normal data with ~25% of (row, group) blocks exactly zero (the scale policies differ there).
- saturation: groups spread over many binades whose max |x| occurs several times with both signs, so
  x/scale lands on and (after fp32 rounding of the scale) just past +-fp8_max: the clamp path.
- fp8_boundaries: groups scaled so the scale is an exact power of two (amax = fp8_max * 2^e) and the other
  values sit exactly on fp8 values, on midpoints between neighbours (ties to even, carries into the next
  binade) and one act-dtype ulp either side of them, subnormals and tiny values included.

Trap groups, in every regime (deterministic from the seed, own stream), placed on groups that are not all zero:
- a boundary group: amax pinned at fp8_max * 2^e (scale exactly 2^e under the divide convention and UE8M0), +-fp8_max
  themselves (q on the max), and exact midpoints between adjacent fp8 values after scaling: ties going down and up
  (to even), the carry into the next binade and the first subnormal midpoint;
- a saturation group (when the case has a second group): +-amax where fp32's x / (amax / fp8_max) rounds past
  fp8_max, so q saturates only through the clamp.
"""
from __future__ import annotations

import torch

from conformance.core.dtypes import torch_dtype
from references.fp8 import FP8_DTYPES, FP8_MAX
from references.generators import ACTIVATION_REGIMES, generator, random_activations

FP8_ONLY_REGIMES = ("saturation", "fp8_boundaries")  # activation regimes only fp8 cases draw
FP8_REGIMES = ACTIVATION_REGIMES + FP8_ONLY_REGIMES  # every regime fp8_activations draws: the family's regimes


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
    if regime in ACTIVATION_REGIMES and regime != "all_zero_groups":
        x = random_activations(tokens, hidden, act, regime, seed)
    else:
        x = _fp8_regime(tokens, hidden, act, regime, seed, group_size, fp8_dtype)
    return with_traps(x, group_size, fp8_dtype, seed)


def _fp8_regime(tokens, hidden, act, regime, seed, group_size, fp8_dtype) -> torch.Tensor:
    G = hidden // group_size
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


def _tie_values(fp8_dtype: str) -> torch.Tensor:
    """Midpoints whose round-to-nearest-even goes down, up, carries into the next binade, and the first
    subnormal midpoint (ties to 0), plus +-fp8_max: the boundary group's fixed members (fp64)."""
    g = _fp8_grid(fp8_dtype)
    one = int((g == 1.0).nonzero())
    down, up = (g[one] + g[one + 1]) / 2, (g[one + 1] + g[one + 2]) / 2  # 1 + 1/16 -> 1 (even), 1 + 3/16 -> 1.25
    carry = (g[one - 1] + g[one]) / 2  # the midpoint below 1.0: rounds up to 1.0, the next binade
    fmax = FP8_MAX[fp8_dtype]
    return torch.tensor([fmax, -fmax, float(down), -float(up), float(carry), float(g[1] / 2)], dtype=torch.float64)


def _saturating_amax(act: torch.dtype, fmax: float, gen: torch.Generator) -> float:
    """A positive amax exact in `act` for which fp32 x / (x / fp8_max) exceeds fp8_max (the clamp path); the
    first of 256 draws that does, else the last (it then lands exactly on fp8_max)."""
    f32 = torch.float32
    for _ in range(256):
        a = ((1 + torch.rand((), generator=gen, dtype=torch.float64)) *
             2.0 ** int(torch.randint(-8, 7, (1,), generator=gen))).to(act).to(f32)
        s = a / torch.tensor(fmax, dtype=f32)
        if float(a / s) > fmax:
            break
    return float(a)


def with_traps(x: torch.Tensor, group_size: int, fp8_dtype: str, seed: int) -> torch.Tensor:
    """x with the boundary trap group and (given a second group) the saturation trap group written over groups
    that are not all zero (the all_zero_groups regime keeps its zero groups); deterministic from `seed`."""
    gen = generator(seed, "fp8_trap")
    tokens, hidden = x.shape
    xg = x.to(torch.float64).reshape(tokens * (hidden // group_size), group_size)
    slots = (xg != 0).any(dim=1).nonzero().flatten()
    slots = slots[torch.randperm(slots.numel(), generator=gen)]
    if slots.numel() == 0:
        return x
    fixed = _tie_values(fp8_dtype)[:group_size]
    g = _fp8_grid(fp8_dtype)
    mids = (g[1:] + g[:-1]) / 2
    group = mids[torch.randint(0, mids.numel(), (group_size,), generator=gen)]
    group *= torch.where(torch.rand(group_size, generator=gen) < 0.5, -1.0, 1.0).double()
    group[: fixed.numel()] = fixed
    # 2^e keeps every value (fp8 subnormal midpoints included) exact in fp16, as fp8_boundaries does
    xg[slots[0]] = group * 2.0 ** int(torch.randint(-6, 5, (1,), generator=gen))
    if slots.numel() > 1:
        a = _saturating_amax(x.dtype, FP8_MAX[fp8_dtype], gen)
        body = (torch.rand(group_size, generator=gen, dtype=torch.float64) * 2 - 1) * (a * 0.999)
        body[:4] = torch.tensor([a, -a, a, -a], dtype=torch.float64)[:group_size]
        xg[slots[1]] = body
    return xg.reshape(tokens, hidden).to(x.dtype)
