"""Hypothesis strategies that draw Cases a given kernel accepts on a given target, by construction.

The discrete part of a config (weight type, group kind, act-order, dtype, format; for fp8: group, dtype,
fp8 dtype, UE8M0, scale layout) is drawn only from combinations the kernel's own gate accepts
(`can_implement` is pure, so it is probed, then cached); K and N are drawn from the gate-accepted values
for that combination. `assume` guards only the rare joint (K, N) refusal.

Entry points (all keyword-only besides kernel/target):
  cases(kernel, target, *, tier, profile=None) -> SearchStrategy[Case]     # dispatch on kernel.family
  w4a16_cases(kernel, target, *, tier, profile=None) -> SearchStrategy[Case]
  fp8_cases(kernel, target, *, tier, profile=None) -> SearchStrategy[Case]
`kernel` is a registry.Kernel or its name, `target` a Target or its name, `tier` "exact" | "statistical"
| None (either), `profile` a profiles.Profile or its name (default ci: it sets the shape ceilings).
Building blocks: m_values, n_values, seeds, regimes, w4a16_classes, fp8_classes.
"""
from __future__ import annotations

import functools
import math

from hypothesis import assume
from hypothesis import strategies as st

from conformance.cases.ids import FP8_REGIMES, TIERS, W4A16_REGIMES, Case
from conformance.cases.profiles import DEFAULT_PROFILE, Profile, get_profile
from conformance.core import registry
from conformance.core.targets import Target, parse_target
from conformance.families.config import Fp8QuantConfig, W4A16Config
from references.checkpoint import CHECKPOINT_FORMATS

W4A16_WEIGHT_TYPES = ("uint4b8", "uint4")
GROUP_KINDS = (128, -1, 32, 64, 256, "K")  # "K": group_size == K (one explicit group); -1: channelwise
ACT_DTYPE_NAMES = ("float16", "bfloat16")
FP8_GROUPS = (128, 64)
FP8_ACT_DTYPES = ("bfloat16", "float16", "float32")
FP8_DTYPE_NAMES = ("float8_e4m3fn", "float8_e4m3fnuz")
# M values that hit no block multiple: 1 (decode), odd, primes straddling common tiles 16/32/64/128
INTERESTING_M = (1, 3, 5, 7, 17, 33, 63, 65, 127, 129, 255, 257)


def _kernel(kernel) -> registry.Kernel:
    return registry.get_kernel(kernel) if isinstance(kernel, str) else kernel


def _target(target) -> Target:
    return parse_target(target) if isinstance(target, str) else target


def _profile(profile) -> Profile:
    if profile is None:
        return get_profile(DEFAULT_PROFILE)
    return get_profile(profile) if isinstance(profile, str) else profile


def m_values(m_max: int) -> st.SearchStrategy[int]:
    """Rows of x: 1, odd and prime values that are multiples of no block size, else any in [1, m_max]."""
    picks = [m for m in INTERESTING_M if m <= m_max]
    return st.one_of(st.sampled_from(picks), st.integers(1, max(1, m_max)))


def n_values(n_max: int) -> st.SearchStrategy[int]:
    """Output columns: multiples of 8 from 8 up to n_max (shrinks toward 8)."""
    return st.integers(1, max(1, n_max // 8)).map(lambda i: 8 * i)


def seeds() -> st.SearchStrategy[int]:
    """Data seeds (the only randomness of a case; shown in its id)."""
    return st.integers(0, 2 ** 31 - 1)


def tiers(tier: str | None = None) -> st.SearchStrategy[str]:
    return st.sampled_from(TIERS) if tier is None else st.just(tier)


def regimes(family: str, tier: str) -> st.SearchStrategy[str]:
    """Data regimes a tier uses: w4a16 exact tier = the exact regime; otherwise every realistic regime.
    FP8's exact tier (bit-exact q and scales) holds on any data, so it draws every fp8 regime."""
    if family == "w4a16":
        return st.just("exact") if tier == "exact" else st.sampled_from(W4A16_REGIMES[1:])
    return st.sampled_from(FP8_REGIMES)


def _exact_k_cap(weight_type: str) -> int:
    from references.generators import exact_tier_max_k

    return exact_tier_max_k(weight_type)


def _k_candidates(group_kind, k_max: int) -> list[int]:
    """K values (multiples of 8 and of the group) up to k_max, smallest first; K == group first."""
    if group_kind == "K" or group_kind == -1:
        return list(range(8, k_max + 1, 8))
    step = group_kind * 8 // math.gcd(group_kind, 8)
    return list(range(step, k_max + 1, step))


def _w4a16_config(cls: tuple, K: int, N: int) -> W4A16Config:
    wt, gk, ao, dt, fmt = cls
    return W4A16Config(weight_type=wt, group_size=K if gk == "K" else gk, act_order=ao, dtype=dt, format=fmt,
                       N=N, K=K)


@functools.cache
def _w4a16_table(kernel_name: str, target: Target, tier: str, k_max: int, n_max: int) -> tuple:
    """((class, (K, ...)), ...) for every discrete class with at least one gate-accepted K."""
    k = registry.get_kernel(kernel_name)
    out = []
    n_probe = sorted({8, 64 if n_max >= 64 else 8, n_max // 8 * 8})
    for wt in W4A16_WEIGHT_TYPES:
        cap = min(k_max, _exact_k_cap(wt), k.numerics(None).exact_tier_max_k or k_max) if tier == "exact" else k_max
        for gk in GROUP_KINDS:
            for ao in (False, True):
                for dt in ACT_DTYPE_NAMES:
                    for fmt in CHECKPOINT_FORMATS:
                        if ao and fmt == "awq":
                            continue  # AWQ checkpoints have no g_idx
                        cls = (wt, gk, ao, dt, fmt)
                        ks = tuple(K for K in _k_candidates(gk, cap)
                                   if any(k.can_implement(_w4a16_config(cls, K, N), target) is None for N in n_probe))
                        if ks:
                            out.append((cls, ks))
    return tuple(out)


def w4a16_classes(kernel, target, tier: str = "statistical", profile=None) -> list[tuple]:
    """The (weight_type, group_kind, act_order, dtype, format) combinations the gate accepts for some shape."""
    p = _profile(profile)
    return [c for c, _ in _w4a16_table(_kernel(kernel).name, _target(target), tier, p.k_max, p.n_max)]


@st.composite
def w4a16_cases(draw, kernel, target, *, tier: str | None = None, profile=None) -> Case:
    """A W4A16 Case that `kernel`'s gate accepts on `target`, within the profile's shape ceilings."""
    k, t, p = _kernel(kernel), _target(target), _profile(profile)
    tier = draw(tiers(tier))
    table = _w4a16_table(k.name, t, tier, p.k_max, p.n_max)
    if not table:
        raise ValueError(f"kernel={k.name!r} accepts no w4a16 class on target={t} within profile {p.name}")
    cls, ks = draw(st.sampled_from(table))
    K = draw(st.sampled_from(ks))
    ns = [N for N in range(8, p.n_max + 1, 8) if k.can_implement(_w4a16_config(cls, K, N), t) is None]
    assume(ns)  # rare: the gate accepted K only for some N in the probe set
    N = draw(st.sampled_from(ns))
    wt, gk, ao, dt, fmt = cls
    return Case(family="w4a16", kernel=k.name, regime=draw(regimes("w4a16", tier)), tier=tier,
                seed=draw(seeds()), group_size=K if gk == "K" else gk, dtype=dt, M=draw(m_values(p.m_max)),
                N=N, K=K, weight_type=wt, act_order=ao, format=fmt)


def _fp8_config(cls: tuple, hidden: int) -> Fp8QuantConfig:
    g, dt, f8, ue, cm = cls
    return Fp8QuantConfig(group_size=g, dtype=dt, fp8_dtype=f8, ue8m0=ue, column_major_scales=cm, hidden=hidden)


@functools.cache
def _fp8_table(kernel_name: str, target: Target, hidden_max: int) -> tuple:
    k = registry.get_kernel(kernel_name)
    out = []
    for g in FP8_GROUPS:
        for dt in FP8_ACT_DTYPES:
            for f8 in FP8_DTYPE_NAMES:
                for ue in (False, True):
                    for cm in (False, True):
                        cls = (g, dt, f8, ue, cm)
                        hs = tuple(h for h in range(g, max(g, hidden_max) + 1, g)
                                   if k.can_implement(_fp8_config(cls, h), target) is None)
                        if hs:
                            out.append((cls, hs))
    return tuple(out)


def fp8_classes(kernel, target, profile=None) -> list[tuple]:
    """The (group_size, dtype, fp8_dtype, ue8m0, column_major_scales) combinations the gate accepts."""
    p = _profile(profile)
    return [c for c, _ in _fp8_table(_kernel(kernel).name, _target(target), p.hidden_max)]


@st.composite
def fp8_cases(draw, kernel, target, *, tier: str | None = None, profile=None) -> Case:
    """An fp8 group-quant Case that `kernel`'s gate accepts on `target` (hidden == group included)."""
    k, t, p = _kernel(kernel), _target(target), _profile(profile)
    tier = draw(tiers(tier))
    table = _fp8_table(k.name, t, p.hidden_max)
    if not table:
        raise ValueError(f"kernel={k.name!r} accepts no fp8_group_quant class on target={t} within profile {p.name}")
    cls, hs = draw(st.sampled_from(table))
    g, dt, f8, ue, cm = cls
    return Case(family="fp8_group_quant", kernel=k.name, regime=draw(regimes("fp8_group_quant", tier)), tier=tier,
                seed=draw(seeds()), group_size=g, dtype=dt, tokens=draw(m_values(p.tokens_max)),
                hidden=draw(st.sampled_from(hs)), fp8_dtype=f8, ue8m0=ue, column_major_scales=cm)


def cases(kernel, target, *, tier: str | None = None, profile=None) -> st.SearchStrategy[Case]:
    """Cases for `kernel` (any family) that its gate accepts on `target`."""
    k = _kernel(kernel)
    if k.family == "w4a16":
        return w4a16_cases(k, target, tier=tier, profile=profile)
    return fp8_cases(k, target, tier=tier, profile=profile)


def any_case_ids() -> st.SearchStrategy[Case]:
    """Any valid Case of either family, no gate involved (for case-id round-trip tests)."""
    kernels = st.from_regex(r"[a-z][a-z0-9_.]{0,20}", fullmatch=True)
    w4 = st.builds(
        lambda kn, tier, reg, seed, gs_mult, gk, M, N, wt, ao, dt, fmt: Case(
            family="w4a16", kernel=kn, regime="exact" if tier == "exact" else reg, tier=tier, seed=seed,
            group_size=-1 if gk == -1 else gk, dtype=dt, M=M, N=N, K=(gk if gk > 0 else 8) * gs_mult,
            weight_type=wt, act_order=ao and fmt != "awq", format=fmt),
        kernels, st.sampled_from(TIERS), st.sampled_from(W4A16_REGIMES), seeds(), st.integers(1, 64),
        st.sampled_from((-1, 8, 32, 64, 128, 256, 24)), st.integers(1, 4096), n_values(8192),
        st.sampled_from(("uint4", "uint4b8", "uint8", "uint8b128")), st.booleans(),
        st.sampled_from(ACT_DTYPE_NAMES), st.sampled_from(CHECKPOINT_FORMATS))
    f8 = st.builds(
        lambda kn, tier, reg, seed, g, mult, T, dt, f8, ue, cm: Case(
            family="fp8_group_quant", kernel=kn, regime=reg, tier=tier, seed=seed, group_size=g, dtype=dt,
            tokens=T, hidden=g * mult, fp8_dtype=f8, ue8m0=ue, column_major_scales=cm),
        kernels, st.sampled_from(TIERS), st.sampled_from(FP8_REGIMES), seeds(), st.sampled_from((32, 64, 128)),
        st.integers(1, 64), st.integers(1, 4096), st.sampled_from(FP8_ACT_DTYPES), st.sampled_from(FP8_DTYPE_NAMES),
        st.booleans(), st.booleans())
    return st.one_of(w4, f8)


def refusal_reason(kernel, target) -> str:
    """Why `kernel` gets no cases on `target`: its gate's reason for a representative config."""
    from conformance.checks.harness import exact_tier_unjudgeable

    k, t = _kernel(kernel), _target(target)
    if exact_tier_unjudgeable(k):
        return f"{k.name}: {exact_tier_unjudgeable(k)}"
    if k.family == "w4a16":
        cfg = W4A16Config(weight_type="uint4b8", group_size=128, act_order=False, dtype="float16", N=64, K=256)
    else:
        cfg = Fp8QuantConfig(group_size=128, dtype="bfloat16", hidden=512)
    why = k.can_implement(cfg, t)
    return f"{k.name} accepts no case on {t}: " + (why or "no class within the profile's shapes passes its gate")


# Targets on which a kernel that refuses the run target is exercised through its model (load step and
# plain-torch reading of its operands), in this order; the harness labels such runs run_mode="model".
SIMULATION_TARGETS = ("rocm:gfx1100", "rocm:gfx1201", "rocm:gfx942", "cuda:sm90")


def suite_target(kernel, target, tier: str, profile=None):
    """The target the suite draws `kernel`'s cases for: `target` if the gate accepts a class there; else, on a
    machine whose own target is `target` (nothing simulated), the first SIMULATION_TARGETS entry the gate
    accepts, so kernels built for other hardware still have their load step and model tested everywhere."""
    from conformance.core.targets import detect_target

    k, t = _kernel(kernel), _target(target)
    if has_cases(k, t, tier, profile) or t != detect_target():
        return t
    if not k.has_model:  # no model of its own: nothing can run off its hardware
        return t
    for name in SIMULATION_TARGETS:
        sim = _target(name)
        if has_cases(k, sim, tier, profile):
            return sim
    return t


def has_cases(kernel, target, tier: str, profile=None) -> bool:
    """True when the gate accepts at least one class (so `cases(...)` can draw) and the tier can judge it."""
    from conformance.checks.harness import exact_tier_unjudgeable

    k = _kernel(kernel)
    if tier == "exact" and exact_tier_unjudgeable(k):
        return False
    if k.family == "w4a16":
        return bool(w4a16_classes(k, target, tier, profile))
    return bool(fp8_classes(k, target, profile))
