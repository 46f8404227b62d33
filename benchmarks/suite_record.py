"""pytest plugin for device runs of the suite: the GPU each test ran on, and a summary JSON written as the run goes.

    python -m pytest conformance/suite -n 8 -p benchmarks.suite_record --suite-summary OUT/suite_summary.json

(`benchmarks.suite_record` with the repository root on PYTHONPATH, as run_gpu.sh sets it; `conformance_bench.
suite_record` where the package is installed.) In every process (each xdist worker, or the one process) each
test report carries the process's GPU (`gpu_identity`: the visibility variable the worker pinning narrowed, and
the current device's name and UUID once CUDA is up), and each conformance record attached to it gets `worker`,
`gpu` and `test`, so `--conformance-report` says which worker and GPU produced every verdict. The controller
writes the summary: passed / failed / skipped / error per test file, each failing test with its case ids and
replay lines, the GPU of every worker, the commit and clean flag (benchmarks/provenance.py) and `complete`.
It is rewritten atomically at most every WRITE_INTERVAL_S during the run, so a run killed at its time limit
keeps what it judged.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict

import pytest

from . import provenance

RECORDS_ATTR = "conformance_records"  # what conformance.pytest_plugin attaches each test report's records as
GPU_PROPERTY = "conformance_gpu"  # the report user property that carries the process's GPU
WRITE_INTERVAL_S = 2.0
MAX_CASE_IDS = 20  # per failing test: hypothesis shrinking records many failing examples of one bug
STATUSES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")
VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
_gpu_cache: list = []


def pytest_addoption(parser):
    parser.getgroup("conformance").addoption(
        "--suite-summary", default=None, metavar="PATH",
        help="write a JSON summary of the run (per test file counts, failing case ids, GPU per worker, commit) "
             "to PATH, rewritten as the run goes")


def gpu_identity(environ=None) -> dict | None:
    """This process's GPU: the visibility variables set here and, where torch sees a GPU, the current device's
    index, name and UUID; None without a GPU and without a visibility variable."""
    import torch

    env = os.environ if environ is None else environ
    ident = {v: env[v] for v in VISIBILITY_VARS if env.get(v)}
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        ident.update(index=i, name=p.name, uuid=str(uuid) if uuid is not None else None)
    return ident or None


def _process_gpu():
    if not _gpu_cache:  # after pytest_configure: the worker pinning has narrowed the visibility by now
        _gpu_cache.append(gpu_identity())
    return _gpu_cache[0]


def _worker(config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Outermost wrapper, so it runs after the conformance plugin attached this phase's records."""
    outcome = yield
    rep = outcome.get_result()
    gpu, wid = _process_gpu(), _worker(item.config)
    rep.user_properties.append((GPU_PROPERTY, {"worker": wid, "gpu": gpu}))
    for r in getattr(rep, RECORDS_ATTR, None) or ():
        r.setdefault("worker", wid)
        r.setdefault("gpu", gpu)
        r.setdefault("test", item.nodeid)


# ---- the controller's summary --------------------------------------------------------------------------------

class Summary:
    """Test outcomes as reports arrive; `doc()` is the JSON summary."""

    def __init__(self, path: str, args: list[str]):
        self.path, self.args = path, args
        self.t0, self.started = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.code = provenance.record_fields()
        self.status: dict[str, str] = {}  # nodeid -> status
        self.bad_records: dict[str, list] = defaultdict(list)  # nodeid -> failing records
        self.test_worker: dict[str, str] = {}
        self.workers: dict[str, dict] = {}
        self.record_outcomes: Counter = Counter()
        self.messages: dict[str, str] = {}
        self.collected: int | None = None
        self.last_write = 0.0

    def add(self, report) -> None:
        nid, when = report.nodeid, report.when
        worker = getattr(getattr(report, "node", None), "gateway", None)
        wid = getattr(worker, "id", None)
        for name, value in getattr(report, "user_properties", ()):
            if name == GPU_PROPERTY:
                wid = wid or value["worker"]
                w = self.workers.setdefault(value["worker"], {"gpu": value["gpu"], "tests": 0})
                w["gpu"] = w["gpu"] or value["gpu"]
        wid = wid or "main"
        self.test_worker.setdefault(nid, wid)
        for r in getattr(report, RECORDS_ATTR, None) or ():
            r.setdefault("worker", wid)  # a crash record the controller made has no worker yet
            self.record_outcomes[r.get("outcome")] += 1
            if r.get("outcome") in ("fail", "error"):
                self.bad_records[nid].append(r)
        status = _status(report)
        if status is None:
            return
        if when == "call" or nid not in self.status or status == "error":
            if nid not in self.status:
                self.workers.setdefault(wid, {"gpu": None, "tests": 0})["tests"] += 1
            self.status[nid] = status
        if status in ("failed", "error") and nid not in self.messages:
            self.messages[nid] = _first_line(report)

    def doc(self, complete: bool, exitstatus=None) -> dict:
        files: dict[str, Counter] = defaultdict(Counter)
        for nid, st in self.status.items():
            files[nid.split("::")[0]][st] += 1
        totals = Counter(self.status.values())
        failures = []
        for nid, st in self.status.items():
            if st not in ("failed", "error"):
                continue
            recs = self.bad_records.get(nid, [])
            ids = list(dict.fromkeys(r["case_id"] for r in recs if r.get("case_id")))
            failures.append({"test": nid, "status": st, "worker": self.test_worker.get(nid),
                             "message": self.messages.get(nid, ""), "case_ids": ids[:MAX_CASE_IDS],
                             "more_case_ids": max(0, len(ids) - MAX_CASE_IDS),
                             "replays": list(dict.fromkeys(r["replay"] for r in recs if r.get("replay")))[:5]})
        return {"kind": "conformance suite summary", "args": self.args, **self.code,
                "seed_env": os.environ.get("CONFORMANCE_SEED"), "started_utc": self.started,
                "elapsed_s": round(time.monotonic() - self.t0, 1), "complete": complete, "exitstatus": exitstatus,
                "collected": self.collected, "totals": {s: totals[s] for s in STATUSES},
                "files": {f: {s: c[s] for s in STATUSES} for f, c in sorted(files.items())},
                "failures": failures, "workers": dict(sorted(self.workers.items())),
                "record_outcomes": dict(sorted(self.record_outcomes.items(), key=lambda kv: str(kv[0])))}

    def write(self, complete: bool = False, exitstatus=None, force: bool = False) -> None:
        from conformance.reports.files import atomic_write_text

        now = time.monotonic()
        if not force and now - self.last_write < WRITE_INTERVAL_S:
            return
        self.last_write = now
        atomic_write_text(self.path, json.dumps(self.doc(complete, exitstatus), indent=1, default=str) + "\n",
                          "--suite-summary")


def _status(report) -> str | None:
    """A phase report's contribution to its test's status (pytest's own accounting: a setup or teardown failure
    is an error, a skip in setup skips the test); None for a phase that says nothing new (a passing setup)."""
    xfail = hasattr(report, "wasxfail")
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    if report.when == "call":
        return "xpassed" if xfail else "passed"
    return None


def _first_line(report) -> str:
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if ln.startswith("E ")), lines[-1] if lines else "")  # the exception line
    return pick[:400]


_SUMMARY: list[Summary] = []


def pytest_configure(config):
    path = config.getoption("--suite-summary")
    if path and not hasattr(config, "workerinput"):
        from conformance.reports.files import writable_file
        from references.errors import InvalidInput

        try:
            writable_file("--suite-summary", path)
        except InvalidInput as e:
            raise pytest.UsageError(str(e)) from None
        _SUMMARY[:] = [Summary(path, list(config.invocation_params.args))]
        _SUMMARY[0].write(force=True)


def pytest_collection_finish(session):
    if _SUMMARY and session.items:  # an xdist controller collects nothing itself: its workers report below
        _SUMMARY[0].collected = len(session.items)
        _SUMMARY[0].write(force=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    if _SUMMARY:
        _SUMMARY[0].collected = max(_SUMMARY[0].collected or 0, len(ids))


def pytest_runtest_logreport(report):
    if _SUMMARY:
        _SUMMARY[0].add(report)
        _SUMMARY[0].write()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _SUMMARY:
        if _SUMMARY[0].collected is None:
            _SUMMARY[0].collected = getattr(session, "testscollected", None)
        _SUMMARY[0].write(complete=True, exitstatus=int(exitstatus), force=True)
