"""How many suite-drawn cases it takes to catch a kernel: the suite's strategy (strategies.cases) + run_case,
under a profile's hypothesis settings (ci: derandomized, so the count is the same on every run), stopping at
the first failing verdict, without shrinking.

    hunt(kernel, tier, max_examples, target=None, profile="ci") -> Hunt

target None is this machine's (detect_target): the interpreter on CPU, the device on a GPU host, where a "cpu"
target would send Triton kernels to their model (no interpreter there) and a launch bug would never run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from hypothesis import Phase, given, settings

from conformance.cases import strategies
from conformance.cases.profiles import get_profile
from conformance.checks.harness import Verdict, run_case
from conformance.core.targets import detect_target

CAUGHT = ("fail", "error")


class _Caught(Exception):
    pass


@dataclass
class Hunt:
    """`examples`: cases run until (and including) the first failure, or all `max_examples` when none failed."""

    kernel: str
    tier: str
    max_examples: int
    verdicts: list[Verdict] = field(default_factory=list)
    caught: Verdict | None = None
    seconds: float = 0.0

    @property
    def examples(self) -> int:
        return len(self.verdicts)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "tier": self.tier, "max_examples": self.max_examples,
                "examples_until_caught": self.examples if self.caught else None,
                "examples_run": self.examples, "caught": self.caught is not None,
                "case_id": self.caught.case_id if self.caught else None,
                "outcome": self.caught.outcome if self.caught else None,
                "detail": self.caught.detail[:300] if self.caught else None,
                "seconds": round(self.seconds, 2)}


def hunt(kernel: str, tier: str, max_examples: int, target=None, profile: str = "ci") -> Hunt:
    """Draw up to `max_examples` cases for `kernel` (gate-accepted, `tier`) and run each; stop at the first
    fail/error. The draw sequence depends only on the profile and on this function's source (hypothesis
    derandomizes from the test function), so two kernels with the same gate see the same cases."""
    h = Hunt(kernel, tier, max_examples)
    p = get_profile(profile)
    if target is None:
        target = detect_target()

    @settings(parent=p.settings(), max_examples=max_examples, phases=[Phase.generate], database=None,
              deadline=None)
    @given(case=strategies.cases(kernel, target, tier=tier, profile=p))
    def probe(case):
        if h.caught is not None:  # hypothesis replays the failing example once more: do not count it
            raise _Caught
        v = run_case(case, kernel, target, record=False)
        h.verdicts.append(v)
        if v.outcome in CAUGHT:
            h.caught = v
            raise _Caught

    t0 = time.perf_counter()
    try:
        probe()
    except _Caught:
        pass
    h.seconds = time.perf_counter() - t0
    return h
