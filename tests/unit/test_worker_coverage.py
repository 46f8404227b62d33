"""The plan coverage table under xdist: each worker sends the coverage summaries of the plans it ran rows of
(workeroutput), and the controller's plan_summary uses them instead of building every plan again."""
from types import SimpleNamespace

import pytest

from conformance.cases import plan
from conformance.cases.profiles import get_profile
from conformance.plugin.report import plan_summary, take_worker_coverage, worker_coverage
from conformance.plugin.state import _State

KEY = ("fp8_group_quant_native", "statistical", "cpu")  # a cheap plan: a few fp8 rows
SEED = 7


def _config(st: _State):
    opts = {"--conformance-profile": "ci"}
    return SimpleNamespace(_conformance=st, getoption=opts.__getitem__)


def _expected() -> dict:
    return plan.coverage_summary(KEY[0], KEY[2], KEY[1], seed=SEED, profile=get_profile("ci"))


def test_controller_uses_the_workers_summaries_and_builds_no_plan(monkeypatch):
    worker = _State()
    worker.seed, worker.plan_keys = SEED, {KEY}
    doc = worker_coverage(_config(worker))  # what a worker puts in its workeroutput
    controller = _State()
    controller.seed, controller.plan_ran = SEED, {KEY: {0, 1, None}}
    take_worker_coverage(controller, doc)  # pytest_testnodedown
    take_worker_coverage(controller, None)  # a crashed worker sends nothing

    def no_build(*a, **kw):
        raise AssertionError("the xdist controller built a plan for the coverage summary")

    monkeypatch.setattr(plan, "coverage_summary", no_build)
    monkeypatch.setattr(plan, "build_plan", no_build)
    got = plan_summary(_config(controller))
    monkeypatch.undo()
    assert got == [dict(_expected(), rows_ran=2)]


def test_a_plan_no_worker_summarized_is_built_on_the_controller():
    st = _State()
    st.seed, st.plan_ran = SEED, {KEY: {3}}
    assert plan_summary(_config(st)) == [dict(_expected(), rows_ran=1)]


@pytest.mark.parametrize("doc", ["", None])
def test_an_empty_workeroutput_adds_nothing(doc):
    st = _State()
    take_worker_coverage(st, doc)
    assert st.coverage == {}
