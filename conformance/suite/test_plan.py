"""The CI plan (conformance.cases.plan): one test per plan row of every registered kernel and tier (class, large-K
and path rows: every path the kernel takes meets every checkpoint format and weight type), ids
`<kernel>-<tier>-<row index>`; failed cases an earlier run remembered run first (`<kernel>-<tier>-replayN`).

Each row is run by the harness and must pass; a failure prints its verdict line (case id and replay command). A
kernel built for other hardware runs its model on the simulated target the suite draws for
(strategies.suite_target); a (kernel, tier) with no accepted class is one skipped test naming the gate's reason.
The rows are a pure function of the kernel, target, tier, profile and run seed (--conformance-seed), so every
xdist worker collects the same items (the pytest plugin parametrizes `conformance_plan_row`).
"""
import pytest

from conformance.checks.harness import run_case
from conformance.core import registry


def test_plan(conformance_plan_row, request):
    row = conformance_plan_row
    # the controller reads this from the report: coverage per plan, and the replay file's update
    request.node.user_properties.append(("conformance_plan", row.properties()))
    if row.case is None:
        pytest.skip(row.skip)
    kernel = registry.get_kernel(row.kernel)
    v = run_case(row.case, kernel, row.target)
    if v.outcome == "skip":
        refusal = kernel.can_implement(row.case.config(), row.target)
        # plan rows are gate-accepted by construction; a remembered or given case may no longer be
        assert refusal is None or row.role in ("replayed", "case"), f"the plan holds a case the gate refuses: " \
                                                                     f"{v.line()}"
        pytest.skip(v.detail)
    assert v.passed, v.line()
