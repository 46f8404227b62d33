"""Where a run's wall time goes, per worker: when each worker's first test started (its startup: the process, the
imports, collection), how long its tests kept it busy, and when its last test ended, all in seconds after the
controller's session start (the JSON report's "workers"; the terminal summary prints one line of it).

A kernel CI's wall is startup + busy / workers + the tail: on a GPU host with 16 workers a slow startup (imports,
bytecode, CUDA init) can cost as much as the tests. Measured from the test reports' own timestamps (pytest's
`report.start` / `report.stop`, wall clock of the same machine), on the controller, so workers need no extra hook.

Where a worker's startup went: each process marks the moments it passes the startup phases (`mark`: PHASES, wall
clock) and its first test report carries them (REPORT_ATTR); the doc gives each phase's min / median / max in seconds
after the controller's session start ("startup"), so a slow first test shows as imports, collection or prewarm.
"""
from __future__ import annotations

import os
import statistics
import time

MAIN = "main"  # the worker id of a run without xdist workers
# a worker's startup, in the order it passes them: the process started, the plugin's pytest_configure began (pytest
# and the plugins imported) and ended (torch, Triton and the kernels loaded), collection finished (the CI plan built),
# prewarm's compiles and its wait for the other workers ended (conformance.plugin.prewarm; absent where it is off)
PHASES = ("process", "configure", "configured", "collected", "prewarmed")
REPORT_ATTR = "conformance_startup"  # test report attribute: this process's phase marks, on its first report only
_marks: dict[str, float] = {}
_taken: list[bool] = [False]


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where that cannot be read. Both ends are read on the
    boot clock (/proc/uptime, 10 ms steps), not against the wall clock's boot time (/proc/stat's btime is whole
    seconds: up to a second off)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return round(max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK")), 2)
    except (OSError, ValueError, IndexError):
        return None


def mark(phase: str) -> None:
    """This process passes `phase` now (the first time counts). "configure" starts a session's marks anew (an
    in-process pytest run after another one) and notes when the process started."""
    if phase not in PHASES:
        raise ValueError(f"timeline phase {phase!r} is not one of {', '.join(PHASES)}")
    now = time.time()
    if phase == "configure":
        _marks.clear()
        _taken[0] = False
        age = process_age_s()
        if age is not None:
            _marks["process"] = now - age
    _marks.setdefault(phase, now)


def take_marks() -> dict | None:
    """The marks, once per session (for its first test report); None after that or before any mark."""
    if _taken[0] or not _marks:
        return None
    _taken[0] = True
    return dict(_marks)


class Timeline:
    """Per worker: [first start, last stop, busy seconds, tests] from the reports the controller sees."""

    def __init__(self, session_start: float, controller_startup_s: float | None = None):
        self.session_start = session_start
        self.controller_startup_s = controller_startup_s  # process start -> session start (imports, plugin load)
        self.workers: dict[str, list] = {}
        self.startup: dict[str, dict] = {}  # worker -> its phase marks (wall clock), from its first report
        self.kernels_loaded: float | None = None  # when this process had loaded the kernels (wall clock)

    def note(self, worker: str, report) -> None:
        marks = getattr(report, REPORT_ATTR, None)
        if isinstance(marks, dict) and worker not in self.startup:
            self.startup[worker] = {k: v for k, v in marks.items() if k in PHASES and isinstance(v, (int, float))}
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if not isinstance(start, (int, float)) or not isinstance(stop, (int, float)) or not start:
            return
        w = self.workers.setdefault(worker, [start, stop, 0.0, 0])
        w[0], w[1] = min(w[0], start), max(w[1], stop)
        w[2] += max(stop - start, 0.0)
        w[3] += report.when == "call"

    def doc(self) -> dict | None:
        """{"count", "controller_startup_s", "controller_kernels_loaded_s", "first_test_s": {min, median, max},
        "startup": {phase: {min, median, max}}, "last_test_end_s", "busy_s", "busy_share", "per_worker": {id:
        {"first_test_s", "last_test_end_s", "busy_s", "tests", "startup": {phase: s}}}}; None before any test
        reported. Seconds after the session start (a single process's phases come before it: negative; the
        controller's kernels too, unless it started its workers first: conformance.plugin.spawn); busy_share: the
        busy worker-seconds over count x last_test_end_s."""
        if not self.workers:
            return None
        t0 = self.session_start
        per = {wid: {"first_test_s": round(a - t0, 2), "last_test_end_s": round(b - t0, 2), "busy_s": round(busy, 2),
                     "tests": n} for wid, (a, b, busy, n) in sorted(self.workers.items())}
        for wid, marks in self.startup.items():
            if wid in per:
                per[wid]["startup"] = {k: round(marks[k] - t0, 2) for k in PHASES if k in marks}
        firsts = [p["first_test_s"] for p in per.values()]
        end = max(p["last_test_end_s"] for p in per.values())
        busy = sum(p["busy_s"] for p in per.values())
        loaded = None if self.kernels_loaded is None else round(self.kernels_loaded - t0, 2)
        return {"count": len(per), "controller_startup_s": self.controller_startup_s,
                "controller_kernels_loaded_s": loaded,
                "first_test_s": {"min": min(firsts), "median": round(statistics.median(firsts), 2),
                                 "max": max(firsts)},
                "startup": _spread(p.get("startup", {}) for p in per.values()),
                "last_test_end_s": end, "busy_s": round(busy, 2),
                "busy_share": round(busy / (len(per) * end), 3) if end > 0 else None, "per_worker": per}


def _spread(phase_maps) -> dict:
    """{phase: {"min", "median", "max"}} over the workers that passed it, in PHASES order."""
    seen: dict[str, list] = {}
    for m in phase_maps:
        for k, v in m.items():
            seen.setdefault(k, []).append(v)
    return {k: {"min": min(seen[k]), "median": round(statistics.median(seen[k]), 2), "max": max(seen[k])}
            for k in PHASES if k in seen}


def startup_line(doc: dict | None) -> str | None:
    """`worker startup (median s after session start): process 0.1, configure 0.6, configured 3.2, collected 4.5,
    prewarmed 6.0`; None without phase marks."""
    phases = (doc or {}).get("startup") or {}
    if not phases:
        return None
    return "worker startup (median s after session start): " + ", ".join(
        f"{k} {v['median']}" for k, v in phases.items())


def line(doc: dict | None) -> str | None:
    """One terminal line: `workers: 16, first test at 5.1-7.9 s (median 6.2) after session start, tests busy
    310.2 worker-s (78% of 16 x 25.0 s), last test done at 25.0 s; controller startup 4.1 s`."""
    if not doc:
        return None
    f = doc["first_test_s"]
    startup = f"; controller startup {doc['controller_startup_s']} s" if doc.get("controller_startup_s") else ""
    share = f" ({doc['busy_share']:.0%} of {doc['count']} x {doc['last_test_end_s']} s)" if doc["busy_share"] else ""
    return (f"workers: {doc['count']}, first test at {f['min']}-{f['max']} s (median {f['median']}) after session "
            f"start, tests busy {doc['busy_s']} worker-s{share}, last test done at {doc['last_test_end_s']} s"
            f"{startup}")
