"""The replay file: the CI plan's cases that failed in earlier runs, replayed first in the next one
(conformance.cases.plan.replay_case_ids turns its entries into the plan's replayed rows).

    read_replays() -> [entry]                  # {"case_id", "kernel", "tier", "target", "seed", "time"}
    remember_failures(passed, failed)          # the pytest controller, once, at session end

Imports no torch: the pytest controller reads the file before it starts its xdist workers.
"""
from __future__ import annotations

import json
import os
import tempfile
import time

REPLAY_FILE = ("plan", "failed-cases.json")  # under conformance.core.tree.cache_dir()
REPLAY_KEEP = 200  # remembered failures kept at most (oldest dropped)


def _replay_path():
    from conformance.core.tree import cache_dir

    return cache_dir(*REPLAY_FILE)


def read_replays() -> list[dict]:
    """The replay file's entries now (one read; [] when it is missing or unreadable)."""
    try:
        doc = json.loads(_replay_path().read_text())
    except (OSError, ValueError):
        return []
    entries = doc.get("failed") if isinstance(doc, dict) else None
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("case_id"), str)] if isinstance(
        entries, list) else []


def remember_failures(passed: set, failed: list[dict]) -> None:
    """Update the replay file after a run (the pytest controller calls this once, at session end; never an xdist
    worker): case ids that passed are dropped, failed ones (dicts with case_id, kernel, tier, target, seed) are
    added; every other entry is kept, so a run of some kernels keeps the others' failures. At most REPLAY_KEEP
    entries (the oldest go)."""
    failed_ids = {e["case_id"] for e in failed}
    keep = [e for e in read_replays() if e["case_id"] not in passed and e["case_id"] not in failed_ids]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries = (keep + [dict(e, time=now) for e in {e["case_id"]: e for e in failed}.values()])[-REPLAY_KEEP:]
    path = _replay_path()
    if not entries and not path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".failed-cases-", dir=path.parent)  # temp file + rename: never torn
    with os.fdopen(fd, "w") as f:
        json.dump({"failed": entries}, f, indent=1)
    os.replace(tmp, path)
