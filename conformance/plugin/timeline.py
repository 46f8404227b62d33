"""Where a run's wall time goes, per worker: when each worker's first test started (its startup: the process, the
imports, collection), how long its tests kept it busy, and when its last test ended, all in seconds after the
controller's session start (the JSON report's "workers"; the terminal summary prints one line of it).

A kernel CI's wall is startup + busy / workers + the tail: on a GPU host with 16 workers a slow startup (imports,
bytecode, CUDA init) can cost as much as the tests. Measured from the test reports' own timestamps (pytest's
`report.start` / `report.stop`, wall clock of the same machine), on the controller, so workers need no extra hook.
"""
from __future__ import annotations

import os
import statistics
import time

MAIN = "main"  # the worker id of a run without xdist workers


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return round(time.time() - (btime + start_ticks / os.sysconf("SC_CLK_TCK")), 2)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class Timeline:
    """Per worker: [first start, last stop, busy seconds, tests] from the reports the controller sees."""

    def __init__(self, session_start: float, controller_startup_s: float | None = None):
        self.session_start = session_start
        self.controller_startup_s = controller_startup_s  # process start -> session start (imports, plugin load)
        self.workers: dict[str, list] = {}

    def note(self, worker: str, report) -> None:
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if not isinstance(start, (int, float)) or not isinstance(stop, (int, float)) or not start:
            return
        w = self.workers.setdefault(worker, [start, stop, 0.0, 0])
        w[0], w[1] = min(w[0], start), max(w[1], stop)
        w[2] += max(stop - start, 0.0)
        w[3] += report.when == "call"

    def doc(self) -> dict | None:
        """{"count", "controller_startup_s", "first_test_s": {min, median, max}, "last_test_end_s", "busy_s",
        "busy_share", "per_worker": {id: {"first_test_s", "last_test_end_s", "busy_s", "tests"}}}; None before
        any test reported. busy_share: the busy worker-seconds over count x last_test_end_s."""
        if not self.workers:
            return None
        t0 = self.session_start
        per = {wid: {"first_test_s": round(a - t0, 2), "last_test_end_s": round(b - t0, 2), "busy_s": round(busy, 2),
                     "tests": n} for wid, (a, b, busy, n) in sorted(self.workers.items())}
        firsts = [p["first_test_s"] for p in per.values()]
        end = max(p["last_test_end_s"] for p in per.values())
        busy = sum(p["busy_s"] for p in per.values())
        return {"count": len(per), "controller_startup_s": self.controller_startup_s,
                "first_test_s": {"min": min(firsts), "median": round(statistics.median(firsts), 2),
                                 "max": max(firsts)},
                "last_test_end_s": end, "busy_s": round(busy, 2),
                "busy_share": round(busy / (len(per) * end), 3) if end > 0 else None, "per_worker": per}


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
