"""The run's Triton programs compiled before its cases, once each, split over the xdist workers (the compiling is
conformance/compile/prewarm.py's). Without it each worker compiles a specialization the first time one of its
cases launches it, and the workers that meet it at the same moment all compile it.

On when all hold: `--conformance-prewarm auto` (the default), xdist workers (-n 2 or more), Triton compiling for a
GPU (not its interpreter) and the run's target is this device's (a simulated target is not warmed). The controller
hands each worker the run's scratch directory (workerinput); worker gwI of N enumerates the programs of the
kernels its collected items test (and the cases its items declare), compiles each program it claims first there
(one exclusive create per program: the shares balance themselves), marks its share done there and waits (at most
WAIT_S) for the other original workers before its first test. A replacement worker (id >= N) does not take part.
The controller puts the workers' figures in the report's "jit": {"prewarm": {...}} and the summary line (its
sessionfinish runs before the one that writes the report).
"""
from __future__ import annotations

import time

import pytest

from conformance.plugin import timeline

WORKERINPUT_KEY = "conformance_prewarm"
WAIT_S = 120.0  # the longest a worker waits for the others' shares (a worker that died before marking costs this)


def wanted(config) -> str | None:
    """Why prewarm is off for this run (a reason), or None when it is on. Asked on the controller."""
    return _run_reason(config) or machine_reason()


def _run_reason(config) -> str | None:
    """Why this run's options leave prewarm off (None: they do not)."""
    if config.getoption("--conformance-prewarm") == "off":
        return "--conformance-prewarm off"
    n = getattr(config.option, "numprocesses", None)
    if not isinstance(n, int) or n < 2:
        return "fewer than 2 xdist workers"
    return None


def machine_reason() -> str | None:
    """Why this machine leaves prewarm off (None: Triton compiles for its GPU); asked where torch is loaded (each
    worker, and the controller at the end: a controller may start its workers before it loads torch)."""
    from conformance.core.interpreter_fixes import interpreting
    from conformance.core.runtime import gpu_present

    if interpreting() or not gpu_present():
        return "Triton runs in its interpreter here (nothing compiles)"
    return None


def worker_input(config) -> dict | None:
    """What the controller hands each worker (None: the options leave it off): the directory the shares are marked
    in. The machine's part each worker asks itself (machine_reason)."""
    st = getattr(config, "_conformance", None)
    if st is None or not st.hang_dir or _run_reason(config) is not None:
        return None
    return {"dir": st.hang_dir}


def _index(config) -> tuple[int, int] | None:
    wid = str(config.workerinput.get("workerid", ""))
    count = int(config.workerinput.get("workercount", 0) or 0)
    if not wid.startswith("gw") or not wid[2:].isdigit() or int(wid[2:]) >= count:
        return None  # a replacement worker: the originals' shares are done or never will be
    return int(wid[2:]), count


def _run_share(session, directory: str, index: int, count: int) -> dict:
    from conformance.compile import prewarm
    from conformance.core import registry
    from conformance.core.targets import detect_target
    from conformance.plugin.collection import item_kernel
    from conformance.plugin.options import _target

    config = session.config
    t0 = time.perf_counter()
    target = _target(config)
    if target != detect_target():
        return {"programs": 0, "compiled": 0, "failed": 0, "seconds": 0.0,
                "skipped": f"the run's target {target} is not this device's ({detect_target()})"}
    names = sorted({k for k in (item_kernel(i) for i in session.items) if k})
    known = {k.name: k for k in registry.all_kernels()}
    kernels = [known[n] for n in names if n in known]
    specs = prewarm.programs(kernels, target, seed=config._conformance.seed,
                             profile=config.getoption("--conformance-profile"), declared=declared_cases(session.items))
    enumerate_s = round(time.perf_counter() - t0, 3)
    stats = prewarm.compile_share(specs, index, count, prewarm.warm, claims=directory)
    stats["enumerate_s"] = enumerate_s
    return stats


MARKER = "conformance_cases"


def declared_cases(items) -> dict:
    """kernel name -> the Cases the run's items declare they will run (`@pytest.mark.conformance_cases(*cases)`,
    for tests whose cases are fixed at collection and are not the lane's: the tile rows), in item order."""
    out: dict = {}
    for item in items:
        for mark in item.iter_markers(MARKER):
            for case in mark.args:
                out.setdefault(case.kernel, []).append(case)
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Before the worker's first test: its share, then the wait for the others'. Returns None: the test loop runs."""
    config = session.config
    info = config.workerinput.get(WORKERINPUT_KEY) if hasattr(config, "workerinput") else None
    where = _index(config) if info else None
    if where is None or config.option.collectonly or machine_reason() is not None:
        return None  # the same answer on every worker of this machine: none waits for a share that never comes
    from conformance.compile import prewarm

    index, count = where
    try:
        stats = _run_share(session, info["dir"], index, count)
    except Exception as e:  # noqa: BLE001 - prewarm only saves time: the cases compile what they launch
        stats = {"programs": 0, "compiled": 0, "failed": 0, "seconds": 0.0,
                 "error": f"{type(e).__name__}: {e}"[:300]}
    prewarm.mark_done(info["dir"], index, stats)  # always: the others wait for it
    stats["waited_s"] = prewarm.wait_for(info["dir"], count, WAIT_S)
    prewarm.mark_done(info["dir"], index, stats)
    timeline.mark("prewarmed")
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Controller: the workers' figures into the run state, before the final report is written (state's
    sessionfinish) and before unconfigure removes the run directory."""
    st = getattr(session.config, "_conformance", None)
    if st is not None and not hasattr(session.config, "workerinput"):
        st.prewarm = controller_summary(session.config)


def controller_summary(config) -> dict | None:
    """The report's "prewarm" entry on the controller: the workers' figures, or {"off": reason}."""
    st = getattr(config, "_conformance", None)
    if st is None or hasattr(config, "workerinput"):
        return None
    why = wanted(config)
    if why is not None or not st.hang_dir:
        return {"off": why or "no run directory"}
    from conformance.compile import prewarm

    return prewarm.summary(prewarm.done(st.hang_dir))


def line(doc: dict | None) -> str:
    if not doc:
        return ""
    if "off" in doc:
        return f"prewarm off ({doc['off']})"
    notes = "; ".join(doc.get("notes") or [])
    return (f"prewarm: {doc['compiled']} of {doc['programs']} programs compiled by {doc['workers']} workers "
            f"(slowest share {doc['slowest_share_s']} s, longest wait {doc['longest_wait_s']} s, "
            f"{doc['failed']} failed)" + (f": {notes}" if notes else ""))
