"""Crashes, hangs and retired workers: a crashed xdist worker becomes an `error` record of the case it was running (the
guard's in-flight file names it, or its watchdog did), counted by the crash breaker against that case's kernel
(conformance.checks.guard: from its CRASH_LIMIT-th crash on, the kernel's remaining cases fail at once as `earlier
crash: ID`, so xdist's restart limit is never the end of a run); a hang Python cannot interrupt is recorded before its
process ends (worker: left for the controller; single process: recorded and the report written); a worker whose
device became unusable (a sticky device error) leaves its unreported records for the controller and exits, and xdist
replaces it and reruns the cases it had not finished on the other workers."""
from __future__ import annotations

import json
import os
import sys

from conformance.plugin.report import COVERAGE_KEY, _write_if_asked, take_worker_coverage
from conformance.plugin.state import _PRODUCED_KEY, _RECORDS_ATTR, _STATE_HOLDER, GATE_FAULTS_KEY, _State, _worker_id

# the run directory (= conformance.checks.guard.RUN_DIR_ENV; spelled here so that loading the plugin imports no torch):
# where a worker's watchdog or retirement leaves its records, the guard its in-flight call, the breaker its counts
_HANG_DIR_ENV = "CONFORMANCE_HANG_DIR"


def _hang_record(info: dict, seconds: float) -> dict:
    """The record of a case the watchdog ended (same schema as conformance.core.results.record)."""
    from conformance.checks import timeout

    return {"kernel": info.get("kernel") or "?", "check": info.get("check") or "?", "outcome": "error",
            "run_mode": info.get("run_mode"), "case_id": info.get("case_id"), "metrics": {},
            "detail": f"{timeout.detail(seconds)} (not interruptible: the process was ended)",
            "replay": info.get("replay", ""), "family": info.get("family"), "target": info.get("target")}


def _worker_hang(config, info: dict, seconds: float) -> None:
    """Watchdog hook in an xdist worker: leave the hung case for the controller, which records the crash."""
    d = os.environ.get(_HANG_DIR_ENV)
    if d:
        wid = config.workerinput.get("workerid", "gw?")
        from conformance.reports.files import atomic_write_text

        atomic_write_text(os.path.join(d, f"{wid}.json"), json.dumps(_hang_record(info, seconds), default=str))


def _worker_retire(config, record: dict) -> None:
    """Retire hook in an xdist worker (guard.retire, after a sticky device error was recorded): leave every record this
    process made and did not report yet (the poisoned case's among them) for the controller, then exit; xdist
    replaces the worker and hands the cases it had not finished to the others."""
    from conformance.checks import guard
    from conformance.core import exits, results

    st: _State = config._conformance
    d = os.environ.get(_HANG_DIR_ENV)
    if d:
        from conformance.reports.files import atomic_write_text

        wid = config.workerinput.get("workerid", "gw?")
        doc = {"reason": "sticky device error", "case_id": record.get("case_id"), "kernel": record.get("kernel"),
               "detail": record.get("detail", ""), "records": results.records()[st.attached:]}
        atomic_write_text(os.path.join(d, f"{wid}.json"), json.dumps(doc, default=str))
    sys.stderr.write(f"conformance: worker retired after a sticky device error in {record.get('case_id')}\n")
    sys.stderr.flush()
    exits.REAL_EXIT(guard.EXIT_RETIRED)


def _local_retire(config, record: dict) -> None:
    """Retire hook of a single-process run: nothing can replace this process; later device cases fail at once as
    `earlier device error` (the guard), and the summary says why."""
    config._conformance.crashed.append({"worker": "main", "test": None, "reason": "sticky device error",
                                        "case_id": record.get("case_id"), "detail": record.get("detail", ""),
                                        "replaced": False})


def _local_hang(config, info: dict, seconds: float) -> None:
    """Watchdog hook in a single-process run: record the hung case and write the report before the process ends."""
    st: _State = config._conformance
    st.records.append(_hang_record(info, seconds))
    st.crash_records += 1
    _write_if_asked(config, complete=False, force=True)


def node_down(node, error) -> None:
    """xdist controller (pytest_testnodedown, conformance.plugin.xdist_hooks): a worker's records made outside
    tests and its final count arrive with its workeroutput (a crashed worker has none: its last
    reported running count stands)."""
    out = getattr(node, "workeroutput", None) or {}
    extra = out.get(_RECORDS_ATTR)
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    if extra:
        st.records.extend(json.loads(extra))
    for kernel, reason in (out.get(GATE_FAULTS_KEY) or {}).items():
        st.gate_faults.setdefault(kernel, reason)
    take_worker_coverage(st, out.get(COVERAGE_KEY))
    if _PRODUCED_KEY in out:
        st.produced_by[_worker_id(node)] = out[_PRODUCED_KEY]


def crashed_item(crashitem, report, sched) -> None:
    """xdist controller (pytest_handlecrashitem, conformance.plugin.xdist_hooks): a worker died while running
    `crashitem`. Its kernel gets an `error` record (detail `worker crashed`, or the timeout and case id its watchdog
    left), attached to the failed report so it is merged and counted like any record."""
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    wid = _worker_id(getattr(report, "node", None))
    left = _read_json(os.path.join(st.hang_dir, f"{wid}.json"), remove=True) if st.hang_dir else None
    inflight = _read_json(os.path.join(st.hang_dir, f"inflight-{wid}.json"), remove=True) if st.hang_dir else None
    reason, recs = "crash", []
    if isinstance(left, dict) and isinstance(left.get("records"), list):  # a worker retired: its records, then it
        recs, reason = left["records"], left.get("reason") or "retired"
        culprit = {k: left.get(k) for k in ("kernel", "case_id", "detail")}
        culprit["replay"] = next((r.get("replay", "") for r in recs if r.get("case_id") == left.get("case_id")), "")
    elif isinstance(left, dict):  # the watchdog's record of an uninterruptible hang
        recs, reason, culprit = [left], "hang", left
    else:
        culprit = inflight or {}
    if not recs:  # a crash, or a retirement that left no record: one error record for the test's kernel
        kernel, check = _item_kernel_check(crashitem)
        where = f"while running {culprit['case_id']}" if culprit.get("case_id") else "while running a test"
        recs = [{"kernel": culprit.get("kernel") or kernel, "check": culprit.get("check") or check,
                 "outcome": "error", "run_mode": culprit.get("run_mode"), "case_id": culprit.get("case_id"),
                 "metrics": {}, "detail": f"worker crashed {where} (xdist worker {wid} died in {crashitem})",
                 "replay": culprit.get("replay") or "", "family": culprit.get("family"),
                 "target": culprit.get("target")}]
    for r in recs:
        r.setdefault("test", crashitem)
    kernel = culprit.get("kernel")
    if kernel and kernel != "?":  # the crash breaker: a kernel that keeps ending workers is stopped
        from conformance.checks import guard

        entry = guard.note_crash(kernel, dict(culprit, test=crashitem, detail=recs[-1].get("detail", "")))
        if entry["crashes"] == guard.crash_limit():
            st.stopped[kernel] = guard.earlier_crash_detail(kernel, entry)
    st.crash_records += len(recs)
    st.crashed.append({"worker": wid, "test": crashitem, "detail": recs[-1].get("detail", ""), "reason": reason,
                       "case_id": culprit.get("case_id"), "kernel": kernel, "replaced": True})
    setattr(report, _RECORDS_ATTR, recs)


def _read_json(path: str, *, remove: bool):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if remove:
        try:
            os.unlink(path)
        except OSError:
            pass
    return doc


def _item_kernel_check(nodeid: str) -> tuple[str, str]:
    """(kernel, check) a test id names: a registered kernel among its parameters (else '?'), the tier among them,
    else the test function's name without `test_`."""
    from conformance.cases.ids import TIERS
    from conformance.core import registry

    names = {k.name for k in registry.all_kernels()}
    params = nodeid[nodeid.index("[") + 1:nodeid.rindex("]")].split("-") if "[" in nodeid else []
    kernel = next((p for p in params if p in names), "?")
    tier = next((p for p in params if p in TIERS), None)
    return kernel, tier or nodeid.split("::")[-1].split("[")[0].removeprefix("test_")

