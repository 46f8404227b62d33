"""Shared body of the property-based suite tests: draw a case the kernel accepts, run it, assert pass."""
from __future__ import annotations

import pytest
from hypothesis import strategies as st

from conformance.cases import strategies
from conformance.checks.harness import run_case
from conformance.core import registry


def case_strategy(kernel, target, tier, profile, replay):
    """The strategy a suite test draws from: the replayed case only (--conformance-case), or gate-accepted cases.
    Skips (with the gate's reason) when the kernel accepts nothing on the target."""
    if replay is not None:
        if replay.kernel != kernel.name or replay.tier != tier:
            pytest.skip(f"--conformance-case selects {replay.kernel}/{replay.tier}")
        return st.just(replay)
    if not strategies.has_cases(kernel, target, tier, profile):
        pytest.skip(strategies.refusal_reason(kernel, target))
    hung = registry.gate_hung(kernel.name)
    if hung:  # the class table was built before the gate hung; every draw would now find no accepted shape
        pytest.skip(f"{kernel.name} accepts no case on {target}: {hung} (the run fails on this gate fault)")
    return strategies.cases(kernel, target, tier=tier, profile=profile)


def check_one(data, kernel, target, tier, profile, replay):
    """Draw one case, run it, and assert it passes; a kernel that cannot run here (no model) skips.
    A kernel built for other hardware runs its model on a simulated target it accepts (strategies.suite_target)."""
    if replay is None:
        target = strategies.suite_target(kernel, target, tier, profile)
    case = data.draw(case_strategy(kernel, target, tier, profile, replay), label="case")
    v = run_case(case, kernel, target)
    if v.outcome == "skip":
        refusal = kernel.can_implement(case.config(), target)
        assert refusal is None or replay is not None, f"strategy drew a case the gate refuses: {v.line()}"
        pytest.skip(v.detail)
    assert v.passed, v.line()
