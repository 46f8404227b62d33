"""Crashes and hangs: a crashed xdist worker becomes an `error` record (with the case its watchdog named), and a
hang Python cannot interrupt is recorded before its process ends (worker: left for the controller; single process:
recorded and the report written)."""
from __future__ import annotations

import json
import os

from conformance.plugin.report import _write_if_asked
from conformance.plugin.state import _PRODUCED_KEY, _RECORDS_ATTR, _STATE_HOLDER, _State, _worker_id

_HANG_DIR_ENV = "CONFORMANCE_HANG_DIR"  # where a worker's watchdog leaves the case it was running (controller reads)


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
    rec = None
    if st.hang_dir:
        path = os.path.join(st.hang_dir, f"{wid}.json")
        try:
            with open(path) as f:
                rec = json.load(f)
            os.unlink(path)
        except (OSError, ValueError):
            rec = None
    if rec is None:
        kernel, check = _item_kernel_check(crashitem)
        rec = {"kernel": kernel, "check": check, "outcome": "error", "run_mode": None, "case_id": None,
               "metrics": {}, "detail": f"worker crashed (xdist worker {wid} died while running {crashitem})",
               "replay": ""}
    rec["test"] = crashitem
    st.crash_records += 1
    st.crashed.append({"worker": wid, "test": crashitem, "detail": rec["detail"]})
    setattr(report, _RECORDS_ATTR, [rec])


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

