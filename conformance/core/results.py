"""Per-process store of check results; the pytest plugin writes them to JSON and merges workers.

Every harness verdict and every contract check calls `record(...)`. A record is a plain dict so it
crosses process boundaries as JSON unchanged.
"""
from __future__ import annotations

import contextlib
import threading

OUTCOMES = ("pass", "fail", "skip", "error")
RUN_MODES = ("device", "interpreter", "model")  # how a kernel ran; None when it did not run
_lock = threading.Lock()
_records: list[dict] = []


def record(kernel: str, check: str, outcome: str, *, run_mode: str | None = None,
           case_id: str | None = None, metrics: dict | None = None, detail: str = "", **extra) -> dict:
    """Store one result. `check` names what was checked ('exact', 'statistical', 'fake_vs_real', ...);
    `run_mode` says how the kernel ran ('device', 'interpreter', 'model')."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r} is invalid; allowed: {OUTCOMES}")
    if run_mode is not None and run_mode not in RUN_MODES:
        raise ValueError(f"run_mode={run_mode!r} is invalid; allowed: {RUN_MODES} or None")
    rec = {"kernel": kernel, "check": check, "outcome": outcome, "run_mode": run_mode,
           "case_id": case_id, "metrics": metrics or {}, "detail": detail, **extra}
    with _lock:
        _records.append(rec)
    return rec


def records() -> list[dict]:
    with _lock:
        return list(_records)


@contextlib.contextmanager
def isolated():
    """Inside the block, records are kept apart and dropped at exit (a bisect step replayed in this process
    answers the bisect, not this process's results)."""
    with _lock:
        saved = list(_records)
        _records.clear()
    try:
        yield
    finally:
        with _lock:
            _records[:] = saved


def drain() -> list[dict]:
    """Return and clear every stored record."""
    with _lock:
        out = list(_records)
        _records.clear()
        return out
