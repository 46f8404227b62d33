"""Fold `python -m conformance bisect ... --json FILE` records into benchmarks/results/bisect.json.

    python benchmarks/bisect_results.py add FILE.json [--machine "..."] [--note "..."] [--out PATH]

The file's keys: `commit`, `clean` (benchmarks/provenance.py, of the tree that folded) and `answers`: one record per
(case_id, package, find, kind) as the bisect wrote it (case_id, package, good, bad, first_bad / first_good /
first_bad_commit, steps, wall_s, ...), plus `machine`, `note` and the `commit` the bisect ran at. A new record of the
same key replaces the old one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "bisect.json"


def _key(r: dict) -> tuple:
    return (r["case_id"], r["package"], r.get("find", "break"), "commit" if "over" in r else "release")


def add(record: dict, machine: str, note: str, out: Path = OUT, commit: str | None = None) -> dict:
    from benchmarks.provenance import code_identity

    ident = code_identity()
    data = json.loads(out.read_text()) if out.exists() else {}
    rec = dict(record, machine=machine, commit=commit or ident["commit"])
    if note:
        rec["note"] = note
    answers = [a for a in data.get("answers", []) if _key(a) != _key(rec)] + [rec]
    data = {"commit": ident["commit"], "clean": ident["clean"], "answers": answers}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add")
    a.add_argument("record", type=Path)
    a.add_argument("--machine", default="cpu (2 cores, shared; Triton 3.9 interpreter, torch 2.13)")
    a.add_argument("--note", default="")
    a.add_argument("--commit", default=None, help="the commit the bisect ran at, where it is not this checkout's HEAD")
    a.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not args.record.is_file():
        print(f"error: record={str(args.record)!r} is not a file (allowed: a `bisect --json` file)", file=sys.stderr)
        return 2
    data = add(json.loads(args.record.read_text()), args.machine, args.note, args.out, args.commit)
    print(f"{len(data['answers'])} answers -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
