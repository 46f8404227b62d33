"""What a bisect prints and records: one block per step, the answer, the diff of the kernel's files, a JSON record.

The record (`--json FILE`, folded into benchmarks/results/bisect.json by benchmarks/bisect_results.py) holds
`case_id`, `package`, `find`, `good`, `bad`, the answer (`first_bad` and `last_good` for a break, `first_good` and
`last_bad` for `--find fix`, `first_bad_commit` and `last_good_commit` for a commit bisect; `candidates` when
skipped steps leave several), `steps` (per step: the release or commit, repro's exit code, the answer, the verdict
line, the metrics line, its wall time; with `--repeat N`, also `repeat` N and `failed`, how many replays failed),
`wall_s` for the whole command, and the kernel `files` diffed.
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

ANSWER_WORDS = {"break": ("good", "bad"), "fix": ("bad", "good")}  # (old side, new side) in the user's words


def side_word(direction: str, answer: str) -> str:
    """"old"/"new"/"skip" in the user's words for this direction: good, bad or skip."""
    if answer == "skip":
        return "skip"
    old, new = ANSWER_WORDS[direction]
    return old if answer == "old" else new


def step_lines(n: int, label: str, word: str, verdict) -> list[str]:
    replays = getattr(verdict, "replays", 1)
    count = f"{verdict.failed} of {replays} replays failed, " if replays > 1 else ""
    lines = [f"step {n}: {label}: {word} ({count}exit {verdict.exit_code}, {verdict.wall_s:.1f} s): {verdict.line}"]
    if verdict.metrics:
        lines.append(f"  metrics: {verdict.metrics}")
    return lines


def step_record(label_key: str, label: str, word: str, verdict) -> dict:
    rec = {label_key: label, "exit": verdict.exit_code, "answer": word, "verdict": verdict.line,
           "metrics": verdict.metrics, "wall_s": verdict.wall_s}
    if getattr(verdict, "replays", 1) > 1:
        rec.update(repeat=verdict.replays, failed=verdict.failed)
    return rec


def file_diff(old_site: Path, new_site: Path, files: list[str], old_label: str, new_label: str) -> str:
    """Unified diff of `files` (site-relative) between two sites; a file missing on one side diffs against empty."""
    out = []
    for rel in files:
        a, b = old_site / rel, new_site / rel
        ta = a.read_text(errors="replace").splitlines(keepends=True) if a.is_file() else []
        tb = b.read_text(errors="replace").splitlines(keepends=True) if b.is_file() else []
        if ta != tb:
            out += difflib.unified_diff(ta, tb, f"{old_label}/{rel}", f"{new_label}/{rel}")
    return "".join(out)


def write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
