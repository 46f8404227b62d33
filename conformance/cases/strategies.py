"""Hypothesis strategies that draw Cases a given kernel accepts on a given target, by construction.

The discrete part of a config (the family's config classes: `Family.config_classes`) is drawn only from
classes the kernel's own gate accepts (`can_implement` is pure, so it is probed, then cached); shapes are drawn
from the gate-accepted values for that class. `assume` guards only the rare joint shape refusal. The drawing
itself is the family's (`Family.draw_case`); this module wraps its fields into a Case.

Entry points (all keyword-only besides kernel/target):
  cases(kernel, target, *, tier, profile=None) -> SearchStrategy[Case]     # any family
`kernel` is a registry.Kernel or its name, `target` a Target or its name, `tier` "exact" | "statistical"
| None (either), `profile` a profiles.Profile or its name (default ci: it sets the shape ceilings).
Building blocks: m_values, n_values, seeds, regimes, tiers.
"""
from __future__ import annotations

from hypothesis import strategies as st

from conformance.cases.ids import TIERS, Case
from conformance.cases.profiles import DEFAULT_PROFILE, Profile, get_profile
from conformance.core import registry
from conformance.core.targets import Target, parse_target
from conformance.families import all_families, get_family
from conformance.families.draws import INTERESTING_M, m_values, n_values, seeds  # noqa: F401 - building blocks


def _kernel(kernel) -> registry.Kernel:
    return registry.get_kernel(kernel) if isinstance(kernel, str) else kernel


def _target(target) -> Target:
    return parse_target(target) if isinstance(target, str) else target


def _profile(profile) -> Profile:
    if profile is None:
        return get_profile(DEFAULT_PROFILE)
    return get_profile(profile) if isinstance(profile, str) else profile


def tiers(tier: str | None = None) -> st.SearchStrategy[str]:
    return st.sampled_from(TIERS) if tier is None else st.just(tier)


def regimes(family: str, tier: str) -> st.SearchStrategy[str]:
    """The data regimes a tier of `family` draws (the family's `tier_regimes`)."""
    return st.sampled_from(get_family(family).tier_regimes(tier))


def classes(kernel, target, tier: str = "statistical", profile=None) -> list[tuple]:
    """The config classes (the family's Class tuples) the gate accepts for some shape within the profile."""
    k = _kernel(kernel)
    return get_family(k.family).accepted_classes(k, _target(target), tier, _profile(profile))


@st.composite
def cases(draw, kernel, target, *, tier: str | None = None, profile=None) -> Case:
    """A Case for `kernel` (any family) that its gate accepts on `target`, within the profile's shape ceilings."""
    k, t, p = _kernel(kernel), _target(target), _profile(profile)
    tier = draw(tiers(tier))
    fields = get_family(k.family).draw_case(draw, k, t, tier, p)
    return Case(family=k.family, kernel=k.name, tier=tier, **fields)


def any_case_ids() -> st.SearchStrategy[Case]:
    """Any valid Case of any family, no gate involved (for case-id round-trip tests)."""
    kernels = st.from_regex(r"[a-z][a-z0-9_.]{0,20}", fullmatch=True)
    return st.one_of([st.builds(lambda kn, f, name=fam.name: Case(family=name, kernel=kn, **f), kernels,
                                fam.any_case_fields()) for fam in all_families()])


def refusal_reason(kernel, target) -> str:
    """Why `kernel` gets no cases on `target`: its gate's reason for a representative config."""
    from conformance.checks.harness import exact_tier_unjudgeable

    k, t = _kernel(kernel), _target(target)
    if exact_tier_unjudgeable(k):
        return f"{k.name}: {exact_tier_unjudgeable(k)}"
    why = k.can_implement(get_family(k.family).representative_config(), t)
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
    return bool(classes(k, target, tier, profile))
