"""Run state and records: the per-run _State, records attached to each test report (workers and single process)
and merged on the controller in arrival order, plan rows that ran, per-family throughput, and session start/end."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from conformance.plugin import jit, skips, timeline
from conformance.plugin.options import _is_worker
from conformance.plugin.report import COVERAGE_KEY, _write_if_asked, tested_gate_faults, worker_coverage

_RECORDS_ATTR = "conformance_records"
_PRODUCED_KEY = "conformance_produced"
GATE_FAULTS_KEY = "conformance_gate_faults"  # a worker's {kernel: reason} of gates that raised (workeroutput)


class _State:
    def __init__(self):
        self.records: list[dict] = []  # merged (controller / single process)
        self.attached = 0  # how many of this process's results.records() went into reports
        self.produced_by: dict[str, int] = {}  # xdist worker id -> records it made (running, then final count)
        self.crash_records = 0  # records the controller made for crashed workers
        self.crashed: list[dict] = []  # {"worker", "test"} per crashed worker
        self.last_write = 0.0
        self.ledger: list[dict] | None = None
        self.hang_dir: str | None = None
        self.seed: int = 0  # the run seed (conformance.cases.seeds); the same on every xdist worker
        self.seed_source: str = ""
        self.replays: list | None = None  # the replay file's entries, read once by the controller (cases.plan)
        self.plan_ran: dict = {}  # (kernel, tier, target) -> row indices whose tests reported (controller)
        self.plan_keys: set = set()  # (kernel, tier, target) of the plans this xdist worker ran rows of
        self.coverage: dict = {}  # (kernel, tier, target) -> the workers' coverage summary (controller)
        self.plan_failed: list[dict] = []  # failed plan / replayed cases: the replay file's new entries
        self.plan_passed: set = set()  # case ids that passed: dropped from the replay file
        self.family_cases: Counter = Counter()  # family -> cases judged (pass/fail/error), from records
        self.family_seconds: Counter = Counter()  # family -> seconds of the tests that judged them
        self.commit: str | None = None  # the commit under test (seeds.commit_sha; controller), for merge-reports
        self.kernel_cases: Counter = Counter()  # kernel -> cases judged, as family_cases
        self.kernel_seconds: Counter = Counter()  # kernel -> seconds of the tests that judged them
        self.jit: dict = {}  # kernel -> [compiles, seconds, disk-cache hits] (conformance.plugin.jit; controller)
        self.jit_mode: str | None = None  # jit.install()'s mode in this process
        self.prewarm: dict | None = None  # the workers' prewarm figures, or why it was off (conformance.plugin.prewarm)
        self.skipped: list[dict] = []  # {"test", "reason"}: every skipped test's full reason (controller)
        self.threads: dict | None = None  # conformance.plugin.threads.decide: the run's thread share
        self.threads_undo: dict | None = None  # what threads.apply changed in this process (unconfigure undoes it)
        self.timeline: timeline.Timeline | None = None  # per-worker startup, busy and end (controller)
        self.planned: set | None = None  # node ids of the run's items once collected (controller); None: unknown
        self.reported: set = set()  # node ids that got a report (controller)
        self.gate_faults: dict[str, str] = {}  # kernel -> the first reason its gate raised, in any process
        self.stopped: dict[str, str] = {}  # kernel -> why the crash breaker stopped it (controller)
        self.interrupted = False  # the session ended early (Ctrl-C, xdist's crash limit, -x)

    def missing(self) -> list[str]:
        """Planned items with no report at all (never run: the run stopped early), sorted."""
        return sorted((self.planned or set()) - self.reported)

    def complete(self) -> bool:
        """Every planned item reported, every record made reached the merge, and the session was not cut short."""
        return (self.planned is not None and not self.missing() and not self.interrupted
                and len(self.records) == self.produced())

    def produced(self) -> int:
        """Records made by every process: this one, each worker (its final or last reported count), crash records."""
        return self.attached + sum(self.produced_by.values()) + self.crash_records


def _retire_pending_sticky() -> None:
    """A sticky device error the guard raised in this test phase and no caller retired (one that recorded it as a
    plain error, or swallowed it): record it if nothing did, then retire the process now, before this phase's report
    (an xdist worker exits here, so the controller attaches its records to this test, not to the next one)."""
    import sys

    guard = sys.modules.get("conformance.checks.guard")  # not imported: no guarded call ran, nothing is pending
    pending = guard.pending_sticky() if guard is not None else None
    if pending is None:
        return
    from conformance.core import results

    rec = next((r for r in reversed(results.records()) if r.get("case_id") == pending.get("case_id")
                and r.get("kernel") == pending.get("kernel") and r.get("outcome") == "error"), None)
    if rec is None:
        rec = results.record(pending.get("kernel") or "?", pending.get("check") or pending.get("call") or "?",
                             "error", run_mode=pending.get("run_mode"), case_id=pending.get("case_id"),
                             detail=pending["detail"], replay=pending.get("replay") or "",
                             family=pending.get("family"), target=pending.get("target"))
    guard.retire(dict(rec))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _retire_pending_sticky()
    outcome = yield
    rep = outcome.get_result()
    from conformance.checks import timeout
    from conformance.core import results

    st: _State = item.config._conformance
    recs = results.records()
    new = recs[st.attached:]
    st.attached = len(recs)
    if new:
        setattr(rep, _RECORDS_ATTR, new)
    setattr(rep, _PRODUCED_KEY, st.attached)  # this process's running count: the controller's loss check
    if call.excinfo is not None and call.excinfo.errisinstance(timeout.CaseTimeout):
        e = call.excinfo.value  # one line, not a traceback: the verdict (case id, replay) is in the records
        rep.longrepr = e.verdict.line() if e.verdict is not None else f"ERROR -- {e}"
    skips.shorten(rep)  # one line of at most 200 characters; the full reason rides on the report
    marks = timeline.take_marks()
    if marks:
        setattr(rep, timeline.REPORT_ATTR, marks)  # this process's startup phases, on its first report only
    compiles = jit.take()
    if compiles:
        setattr(rep, jit.REPORT_ATTR, compiles)  # this test's JIT compiles, per kernel (merged on the controller)


def pytest_runtest_logreport(report):
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    recs = getattr(report, _RECORDS_ATTR, None)
    if recs:
        st.records.extend(recs)
    if _CONFIG_HOLDER and _is_worker(_CONFIG_HOLDER[0]):
        st.plan_keys.update(_plan_keys(report))
    elif _CONFIG_HOLDER:
        _note_plan(st, report)
        _note_throughput(st, report, recs or [])
        jit.add(st.jit, getattr(report, jit.REPORT_ATTR, None) or {})
        full = skips.full_reason(report)
        if full is not None:
            st.skipped.append({"test": report.nodeid, "reason": full})
    st.reported.add(report.nodeid)
    node = getattr(report, "node", None)  # xdist controller: the worker this report came from
    if st.timeline is not None:
        st.timeline.note(_worker_id(node) if node is not None else timeline.MAIN, report)
    count = getattr(report, _PRODUCED_KEY, None)
    if node is not None and isinstance(count, int):
        wid = _worker_id(node)
        st.produced_by[wid] = max(st.produced_by.get(wid, 0), count)
    if _CONFIG_HOLDER:
        _write_if_asked(_CONFIG_HOLDER[0], complete=False)


_STATE_HOLDER: list[_State] = []
_CONFIG_HOLDER: list = []
_PLAN_PROPERTY = "conformance_plan"  # user property of a plan test (xdist carries it to the controller)


def _note_plan(st: _State, report) -> None:
    """Controller: a plan test's outcome (its call, or a setup that did not pass): which rows of which plan ran,
    and the case ids that passed or failed (the replay file's update at session end)."""
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    for name, value in getattr(report, "user_properties", ()):
        if name != _PLAN_PROPERTY or not isinstance(value, dict):
            continue
        if value.get("role") != "case":  # a --conformance-case replay says nothing about the plan's coverage
            st.plan_ran.setdefault((value["kernel"], value["tier"], value["target"]), set()).add(value.get("index"))
        cid = value.get("case_id")
        if cid and report.failed:
            st.plan_failed.append({k: value[k] for k in ("case_id", "kernel", "tier", "target")} | {"seed": st.seed})
        elif cid and report.passed:
            st.plan_passed.add(cid)


def _plan_keys(report) -> list[tuple]:
    """The (kernel, tier, target) of a plan test's report (a --conformance-case replay names none)."""
    return [(v["kernel"], v["tier"], v["target"]) for name, v in getattr(report, "user_properties", ())
            if name == _PLAN_PROPERTY and isinstance(v, dict) and v.get("role") != "case"]


def _note_throughput(st: _State, report, recs: list[dict]) -> None:
    """Controller: cases judged (pass/fail/error records of a tier check) and the seconds of the test that judged
    them, per family and per kernel; a test's seconds are shared among its records' families (kernels)."""
    from conformance.cases.ids import TIERS

    if report.when != "call":
        return
    judged = [r for r in recs
              if r.get("check") in TIERS and r.get("outcome") in ("pass", "fail", "error") and r.get("family")]
    for key, cases, seconds in (("family", st.family_cases, st.family_seconds),
                                ("kernel", st.kernel_cases, st.kernel_seconds)):
        for name, n in Counter(r.get(key) for r in judged).items():
            cases[name] += n
            seconds[name] += report.duration * n / len(judged)


def _registered_gate_faults() -> dict[str, str]:
    """This process's gate faults of kernels still registered at the end of the session (a test that registers a
    misbehaving kernel on purpose, and unregisters it, is not the run's fault)."""
    from conformance.core import registry

    names = {k.name for k in registry.all_kernels()}
    return {k: r for k, r in registry.gate_faults().items() if k in names}


def gate_fault_line(kernel: str, reason: str) -> str:
    """The one line a run prints (and fails with) for a kernel whose gate raised."""
    return (f"conformance: kernel {kernel}: its {reason} (a gate must return None or a reason, never raise): the run "
            "fails, since the cases this gate was asked about were not judged")


def _worker_id(node) -> str:
    gw = getattr(node, "gateway", None)
    return getattr(gw, "id", None) or getattr(node, "workerinput", {}).get("workerid", "gw?")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _STATE_HOLDER[:] = [session.config._conformance]
    _CONFIG_HOLDER[:] = [session.config]
    if not _is_worker(session.config):
        import time

        session.config._conformance.timeline = tl = timeline.Timeline(time.time(), timeline.process_age_s())
        tl.kernels_loaded = getattr(session.config, "_conformance_kernels_loaded", None)  # None: after the start


def pytest_collection_finish(session):
    """Single process: the planned items (an xdist controller learns them from its workers, xdist_hooks). None
    under --collect-only: nothing is planned to run, so nothing can be missing."""
    timeline.mark("collected")
    if session.config.option.collectonly:
        return
    if not _is_worker(session.config) and not session.config.pluginmanager.hasplugin("dsession"):
        # --collect-only plans no test run: nothing can be missing from it
        collect_only = session.config.option.collectonly
        session.config._conformance.planned = set() if collect_only else {item.nodeid for item in session.items}


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    st: _State = config._conformance
    from conformance.core import results

    leftovers = results.records()[st.attached:]  # recorded outside any test (e.g. session fixtures)
    st.attached += len(leftovers)
    if _is_worker(config):
        config.workeroutput[_RECORDS_ATTR] = json.dumps(leftovers)
        config.workeroutput[_PRODUCED_KEY] = st.attached  # the controller checks its merge against this count
        config.workeroutput[GATE_FAULTS_KEY] = _registered_gate_faults()
        config.workeroutput[COVERAGE_KEY] = worker_coverage(config)  # the controller builds no plan for its summary
        return
    st.records.extend(leftovers)
    for kernel, reason in _registered_gate_faults().items():
        st.gate_faults.setdefault(kernel, reason)
    st.interrupted = st.interrupted or exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR) \
        or bool(session.shouldstop) or bool(session.shouldfail)
    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is not None and getattr(dsession, "_summary_report", None):  # xdist's crash limit ended the run
        st.interrupted = True
    faults = tested_gate_faults(config)
    if faults and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a gate that raised judged nothing: never a green run
    if st.plan_failed or st.plan_passed:  # the controller only: failed plan cases run first next time
        from conformance.cases.replays import remember_failures

        remember_failures(st.plan_passed, st.plan_failed)
    _write_if_asked(config, complete=True, force=True)

