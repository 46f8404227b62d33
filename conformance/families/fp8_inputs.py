"""Seeded activations for fp8 group-quant cases: references.generators' regimes plus fp8-specific ones.

- all_zero_groups: normal data with ~25% of (row, group) blocks exactly zero (the scale policies differ there).
- saturation: groups spread over many binades whose max |x| occurs several times with both signs, so
  x/scale lands on and (after fp32 rounding of the scale) just past +-fp8_max: the clamp path.
- fp8_boundaries: groups scaled so the scale is exact (amax = fp8_max * c * 2^e, s = c * 2^e) and the other
  values sit exactly on fp8 values, on midpoints between neighbours (ties to even, carries into the next
  binade) and one act-dtype ulp either side of them, subnormals and tiny values included. c is 1 (s a power of
  two, exact under every scale convention and UE8M0) or, for about half the groups, RECIPROCAL_TRAP_FACTOR (7):
  those groups hold at least one reciprocal tie (below).

Trap groups, in every regime (deterministic from the seed, own stream), placed on groups that are not all zero:
- a boundary group: amax pinned at fp8_max * 2^e (scale exactly 2^e under the divide convention and UE8M0), +-fp8_max
  themselves (q on the max), and exact midpoints between adjacent fp8 values after scaling: ties going down and up
  (to even), the carry into the next binade and the first subnormal midpoint;
- a saturation group (when the case has a second group): +-amax where fp32's x / (amax / fp8_max) rounds past
  fp8_max, so q saturates only through the clamp;
- a reciprocal group (when the case has a third group): amax = fp8_max * 7 * 2^e, so s = 7 * 2^e exactly under the
  divide convention, and at least one element x = 7 * 2^e * v for each v of reciprocal_ties(): x / s is exactly the
  fp8 midpoint v, while x * fp32(1 / s) rounds one fp32 ulp above it (see reciprocal_ties), so a kernel that forms
  q by a reciprocal multiply gets another fp8 byte there.

Why 7: the trap needs s exact and not a power of two (a power-of-two s has an exact reciprocal: x * (1/s) == x / s,
so no UE8M0 group can tell the two apart), and x = s * v exact in the input dtype for a 5-significant-bit midpoint
v: 7 * v has at most 8 bits, exact even in bf16. With s = 7 * 2^e, fp32(1/s) = fp32(1/7) * 2^-e and
7 * fp32(1/7) = 1 + 3 * 2^-26, so x * fp32(1/s) = v * (1 + 3 * 2^-26) exactly before its fp32 rounding; that
rounds up to v + ulp(v) when v's significand exceeds 4/3 (3 * 2^-26 * sig > 2^-24, half an ulp). Where the tie at v
goes down to the even neighbour (significands 25/16 and 29/16 of every binade, and 13 * 2^-10 among e4m3fn's
subnormal midpoints), divide gives the lower fp8 value and the reciprocal multiply the upper one. 3 and 5, the
other odd 3-bit factors, are useless (3 * fp32(1/3) = 1 + 2^-25 and 5 * fp32(1/5) = 1 + 2^-26 never move v).
The construction holds for the divide convention and the native policy (the same s for amax >= 1/512); under the
reciprocal convention s = fp32(amax * fp32(1/fp8_max)) = (7 + 2^-21) * 2^e is one ulp off, x / s sits just below
the midpoint, and both forms round down: there these groups are ordinary data.
"""
from __future__ import annotations

import functools

import torch

from conformance.core.dtypes import torch_dtype
from references.errors import require
from references.fp8 import FP8_DTYPES, FP8_MAX, fp32_reciprocal
from references.generators import ACTIVATION_REGIMES, generator, random_activations

FP8_ONLY_REGIMES = ("saturation", "fp8_boundaries")  # activation regimes only fp8 cases draw
FP8_REGIMES = ACTIVATION_REGIMES + FP8_ONLY_REGIMES  # every regime fp8_activations draws: the family's regimes
RECIPROCAL_TRAP_FACTOR = 7  # s = 7 * 2^e: exact, not a power of two, 7 * (5-bit midpoint) exact in bf16
# 2^e, e in [-6, 4], for trap and boundary groups: fp8 subnormal midpoints times 2^-6 stay exact in fp16, and
# 7 * 448 * 2^4 = 50176 stays below fp16's max 65504
TRAP_EXPONENTS = (-6, 5)  # torch.randint bounds (high exclusive)


def _fp8_grid(fp8_dtype: str) -> torch.Tensor:
    """Every finite non-negative fp8 value <= the clamp bound, ascending (fp64; a fresh copy)."""
    return _fp8_grid_once(fp8_dtype).clone()


@functools.cache
def _fp8_grid_once(fp8_dtype: str) -> torch.Tensor:
    v = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8).view(FP8_DTYPES[fp8_dtype]).to(torch.float64)
    v = v[torch.isfinite(v) & (v >= 0) & (v <= FP8_MAX[fp8_dtype])]
    return torch.unique(v)


@functools.cache
def _reciprocal_ties(fp8_dtype: str) -> tuple:
    fmax = FP8_MAX[fp8_dtype]
    g = _fp8_grid(fp8_dtype)
    mids = (g[1:] + g[:-1]) / 2
    f32, f8 = torch.float32, FP8_DTYPES[fp8_dtype]
    s = torch.tensor(float(RECIPROCAL_TRAP_FACTOR), dtype=f32)
    x = (mids * RECIPROCAL_TRAP_FACTOR).to(f32)
    assert torch.equal(x.double(), mids * RECIPROCAL_TRAP_FACTOR)  # exact: 7 * a 5-bit midpoint fits fp32
    div = (x / s).clamp(-fmax, fmax).to(f8).view(torch.uint8)
    rcp = (x * fp32_reciprocal(float(s))).clamp(-fmax, fmax).to(f8).view(torch.uint8)
    return tuple(mids[div != rcp].tolist())


def reciprocal_ties(fp8_dtype: str) -> torch.Tensor:
    """The positive fp8 midpoints v (fp64) for which, with s = 7 (exact), fp8(clamp(x / s)) and
    fp8(clamp(x * fp32(1 / s))) differ for x = 7 * v: selected by computing both in torch (the module docstring says
    why they are the midpoints with significand 25/16 or 29/16, and e4m3fn's subnormal 13 * 2^-10). Scaling s and x
    by the same 2^e keeps every one of them (fp32 stays normal)."""
    require(fp8_dtype in FP8_MAX, "fp8_dtype", fp8_dtype, f"one of {sorted(FP8_MAX)}")
    return torch.tensor(_reciprocal_ties(fp8_dtype), dtype=torch.float64)


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
        x[..., 0] = fmax  # pins amax, so scale = fmax * c * 2^e / fmax = c * 2^e exactly
        # 2^e keeps every value (fp8 subnormals included) representable in fp16's normal-ish range
        e = torch.randint(*TRAP_EXPONENTS, (tokens, G, 1), generator=gen).double()
        # c = 7 in about half the groups, each holding a reciprocal tie at a random place after the amax (drawn after
        # the draws above, so the c = 1 groups are what they were)
        c = torch.where(torch.rand((tokens, G, 1), generator=gen) < 0.5, float(RECIPROCAL_TRAP_FACTOR), 1.0).double()
        ties = reciprocal_ties(fp8_dtype)
        tie = ties[torch.randint(0, ties.numel(), (tokens, G, 1), generator=gen)] * sign[..., 1:2]
        at = torch.randint(1, max(2, group_size), (tokens, G, 1), generator=gen)
        if group_size > 1:
            x.scatter_(2, at, torch.where(c > 1, tie, x.gather(2, at)))
        x = x * c * torch.pow(2.0, e)
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
    xg[slots[0]] = group * 2.0 ** int(torch.randint(*TRAP_EXPONENTS, (1,), generator=gen))
    if slots.numel() > 1:
        a = _saturating_amax(x.dtype, FP8_MAX[fp8_dtype], gen)
        body = (torch.rand(group_size, generator=gen, dtype=torch.float64) * 2 - 1) * (a * 0.999)
        body[:4] = torch.tensor([a, -a, a, -a], dtype=torch.float64)[:group_size]
        xg[slots[1]] = body
    if slots.numel() > 2:
        xg[slots[2]] = _reciprocal_group(group_size, fp8_dtype, gen)
    return xg.reshape(tokens, hidden).to(x.dtype)


def _reciprocal_group(group_size: int, fp8_dtype: str, gen: torch.Generator) -> torch.Tensor:
    """The reciprocal trap group (fp64): fp8_max (the amax), reciprocal ties (a quarter of the group, at least one,
    at most all of them) and fp8 values and midpoints, random signs and places, all times 7 * 2^e: s = 7 * 2^e."""
    g = _fp8_grid(fp8_dtype)
    fill = torch.cat([g, (g[1:] + g[:-1]) / 2])
    group = fill[torch.randint(0, fill.numel(), (group_size,), generator=gen)]
    ties = reciprocal_ties(fp8_dtype)
    n = min(ties.numel(), group_size - 1, max(1, group_size // 4))
    group[1:1 + n] = ties[torch.randperm(ties.numel(), generator=gen)[:n]]
    group *= torch.where(torch.rand(group_size, generator=gen) < 0.5, -1.0, 1.0).double()
    group[0] = FP8_MAX[fp8_dtype]
    group = group[torch.randperm(group_size, generator=gen)]
    e = int(torch.randint(*TRAP_EXPONENTS, (1,), generator=gen))
    return group * RECIPROCAL_TRAP_FACTOR * 2.0 ** e
