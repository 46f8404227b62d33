"""Run profiles (ci, nightly, exhaustive): hypothesis settings plus the shape ranges strategies draw from.

Each profile is registered as the hypothesis settings profile `conformance-<name>`; the pytest plugin
loads the one named by --conformance-profile (default ci). The ci profile is derandomized for any caller outside
a suite run (the same examples every run), with deadline off (the Triton interpreter's first call compiles), and
keeps shapes small enough for the interpreter. In a pytest run the suite's own hypothesis tests draw from the run
seed instead (conformance.cases.seeds; `seeded_settings`: derandomize off, the seed fixes the draws, and the ci
profile's example database `seeded_database` replays an earlier run's failures first). Its `max_examples` is small:
the CI plan (conformance.cases.plan, `plan_budget_s`) covers the config classes; hypothesis explores beyond it.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from conformance.core.tree import cache_dir
from references.errors import require

DEFAULT_PROFILE = "ci"


@dataclass(frozen=True)
class Profile:
    """Hypothesis knobs and shape ceilings. m_max/n_max/k_max bound W4A16 cases; tokens_max/hidden_max FP8."""

    name: str
    max_examples: int
    derandomize: bool
    database: str | None  # example database directory under the user cache dir (core.tree.cache_dir), None: none
    m_max: int
    n_max: int
    k_max: int
    tokens_max: int
    hidden_max: int
    plan_budget_s: float = 12.0  # CI plan (conformance.cases.plan): CPU seconds of class rows per kernel and tier
    seeded_database: str | None = None  # example database of seeded suite draws (None: `database`)

    @property
    def hypothesis_profile(self) -> str:
        return f"conformance-{self.name}"

    def settings(self) -> settings:
        return settings.get_profile(self.hypothesis_profile)


PROFILES: dict[str, Profile] = {
    p.name: p for p in (
        # ci: interpreter cost is ~7 ms per (program x K tile): M<=40, N<=128, K<=512 keep a case < 0.5 s
        Profile("ci", max_examples=3, derandomize=True, database=None,
                m_max=40, n_max=128, k_max=512, tokens_max=33, hidden_max=1024, seeded_database="hypothesis-ci"),
        Profile("nightly", max_examples=100, derandomize=False, database="hypothesis",
                m_max=160, n_max=512, k_max=2048, tokens_max=257, hidden_max=4096, plan_budget_s=600.0),
        Profile("exhaustive", max_examples=1000, derandomize=False, database="hypothesis",
                m_max=1024, n_max=4096, k_max=4096, tokens_max=1024, hidden_max=8192, plan_budget_s=6000.0),
    )
}


def seeded_settings(profile: Profile, parent: settings) -> settings:
    """Settings of a suite test whose draws the run seed fixes (the pytest plugin sets the seed): `parent` with
    derandomize off and the profile's example database (`seeded_database`, else `database`; under
    core.tree.cache_dir), so a failure found by one run is replayed first by the next. With a seed and no stored
    failure the draws are the same every run."""
    name = profile.seeded_database or profile.database
    db = None if name is None else DirectoryBasedExampleDatabase(str(cache_dir(name)))
    return settings(parent=parent, derandomize=False, database=db)


def seed_test(test, profile: Profile, seed: int):
    """Make the @given function `test` draw from `seed` under seeded_settings(profile, its settings); returns it.
    Not hypothesis.seed(): that decorator also drops the example database, and the database is the point (a
    private attribute pair, as hypothesis's own pytest plugin sets them)."""
    test._hypothesis_internal_use_seed = seed
    test._hypothesis_internal_use_settings = seeded_settings(profile, test._hypothesis_internal_use_settings)
    return test


def get_profile(name: str) -> Profile:
    require(name in PROFILES, "profile", name, f"one of {list(PROFILES)}")
    return PROFILES[name]


def register_hypothesis_profiles() -> None:
    """Register every profile with hypothesis (idempotent)."""
    for p in PROFILES.values():
        settings.register_profile(
            p.hypothesis_profile,
            max_examples=p.max_examples,
            derandomize=p.derandomize,
            deadline=None,
            database=None if p.database is None else DirectoryBasedExampleDatabase(str(cache_dir(p.database))),
            print_blob=True,
            # cases are drawn from gate-filtered choices; the suite's fixtures are per-test, not per-example
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                   HealthCheck.differing_executors],
        )


def load_profile(name: str) -> Profile:
    """Register all profiles and make `name` hypothesis's active settings profile."""
    p = get_profile(name)
    register_hypothesis_profiles()
    settings.load_profile(p.hypothesis_profile)
    freeze_local_constants()
    return p


def freeze_local_constants() -> bool:
    """Stop hypothesis from mixing literal constants of whatever local modules happen to be imported into its
    draws. Which of our modules a process has imported depends on test order and on the xdist worker, so with
    them the same seed could draw different cases on -n 1 and -n 2 (the suite's determinism promise). Private
    hypothesis API (hypothesis.internal.conjecture.providers._get_local_constants, 6.13x-6.17x): patched only
    when present; returns whether it was. The built-in constant pool (0, 1, boundaries) still applies."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return False
    empty = getattr(providers, "_conformance_no_local_constants", None)
    if empty is None:
        if not callable(getattr(providers, "_get_local_constants", None)):
            return False
        empty = type(providers._local_constants)(integers=type(providers._local_constants.integers)(),
                                                 floats=type(providers._local_constants.floats)(key=providers.float_to_int),
                                                 bytes=type(providers._local_constants.bytes)(),
                                                 strings=type(providers._local_constants.strings)())
        providers._conformance_no_local_constants = empty
        providers._conformance_original_get_local_constants = providers._get_local_constants
        providers._get_local_constants = lambda: empty
    return True


register_hypothesis_profiles()
