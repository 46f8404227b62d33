"""benchmarks/results/compile_lane.json from a `python -m conformance compile` run, and the check that a native run
on a GPU host gives the same verdicts as the cross-compiled one.

    python benchmarks/compile_lane.py record RUN/compile.json --commit SHA --clean 1 --command "..."
    python benchmarks/compile_lane.py record RUN/compile.json --merge --commit SHA --clean 1 --command "..."
    python benchmarks/compile_lane.py compare CPU/compile.json NATIVE/compile.json --target sm90

record: the run's records (verdicts, messages, resources, ids), the table kernel x target, the failures with their
replay ids, and where the figures came from (the commit the run was made at and whether its tree was clean, the
command, its wall time). record --merge: the run's kernels replace only their own records, table rows, counts,
failures and launch errors in the existing file; the rest is kept, and the run is listed under `sections` with its
own commit, tree_clean, command and wall time (the file's top-level ones stay those of the run it was made from).
compare: the verdict of every compile id present in both runs for the target; exit 0 when
they agree, 1 otherwise (each difference printed)."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "compile_lane.json"
KEEP = ("kernel", "target", "key", "verdict", "message", "resources", "id", "path", "cases")  # per record


def record(run: dict, commit: str, clean: bool, command: str) -> dict:
    recs = run["records"]
    counts: dict = {}
    for r in recs:
        c = counts.setdefault(r["kernel"], {}).setdefault(r["target"], {})
        c[r["verdict"]] = c.get(r["verdict"], 0) + 1
    failures = [{k: r[k] for k in ("kernel", "target", "verdict", "message", "id")} for r in recs
                if r["verdict"] != "pass"]
    baseline = [dict({k: v for k, v in b.items() if k != "resources"}, resources_changed=len(b["resources"]))
                for b in run.get("baseline") or []]
    return {"commit": commit, "tree_clean": clean, "command": command, "wall_s": run["wall_s"], "seed": run["seed"],
            "profile": run["profile"], "sets": run["sets"], "targets": run["targets"], "table": run["kernels"],
            "verdicts": counts, "failures": failures, "launch_errors": run["launch_errors"],
            "baseline": baseline, "records": [{k: r[k] for k in KEEP} for r in recs]}


def merge(existing: dict, run: dict, commit: str, clean: bool, command: str) -> dict:
    """`existing` with the kernels of `run` replaced by the run's (see the module docstring)."""
    new = record(run, commit, clean, command)
    ks = set(run["kernels"])
    out = dict(existing)
    out["records"] = [r for r in existing["records"] if r["kernel"] not in ks] + new["records"]
    for field in ("table", "verdicts"):
        out[field] = {**{k: v for k, v in existing[field].items() if k not in ks}, **new[field]}
    out["failures"] = [f for f in existing["failures"] if f["kernel"] not in ks] + new["failures"]
    out["launch_errors"] = [e for e in existing["launch_errors"] if e.split(" on ", 1)[0] not in ks] + \
        new["launch_errors"]
    section = {k: new[k] for k in ("commit", "tree_clean", "command", "wall_s", "seed", "profile", "sets", "targets")}
    out["sections"] = [s for s in existing.get("sections", []) if not ks & set(s["kernels"])] + [
        dict(section, kernels=sorted(ks))]
    return out


def compare(a: dict, b: dict, target: str) -> list[str]:
    va = {r["id"]: r["verdict"] for r in a["records"] if r["target"] == target}
    vb = {r["id"]: r["verdict"] for r in b["records"] if r["target"] == target}
    both = sorted(set(va) & set(vb))
    diffs = [f"{i}: {va[i]} vs {vb[i]}" for i in both if va[i] != vb[i]]
    return [f"{len(both)} compile ids in both runs for {target}; {len(diffs)} differ"] + diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("run")
    r.add_argument("--commit", required=True)
    r.add_argument("--clean", choices=("0", "1"), required=True)
    r.add_argument("--command", required=True)
    r.add_argument("--out", default=str(OUT))
    r.add_argument("--merge", action="store_true", help="replace only the run's kernels in the existing --out file")
    c = sub.add_parser("compare")
    c.add_argument("cpu")
    c.add_argument("native")
    c.add_argument("--target", default="sm90")
    c.add_argument("--record", metavar="JSON", help="also write the comparison into this results file (key "
                   "'native'), with --commit, --clean and --machine")
    c.add_argument("--commit")
    c.add_argument("--clean", choices=("0", "1"))
    c.add_argument("--machine")
    a = p.parse_args(argv)
    if a.cmd == "record":
        run = json.loads(Path(a.run).read_text())
        doc = (merge(json.loads(Path(a.out).read_text()), run, a.commit, a.clean == "1", a.command) if a.merge
               else record(run, a.commit, a.clean == "1", a.command))
        Path(a.out).write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {a.out}: {len(doc['records'])} records, {len(doc['failures'])} failures")
        return 0
    native = json.loads(Path(a.native).read_text())
    lines = compare(json.loads(Path(a.cpu).read_text()), native, a.target)
    print("\n".join(lines))
    agree = len(lines) == 1 and not lines[0].startswith("0 ")
    if a.record:
        if not (a.commit and a.clean and a.machine):
            print("compare --record needs --commit, --clean and --machine", file=sys.stderr)
            return 2
        doc = json.loads(Path(a.record).read_text())
        ids = [r for r in native["records"] if r["target"] == a.target]
        doc["native"] = {"target": a.target, "machine": a.machine, "commit": a.commit, "tree_clean": a.clean == "1",
                         "compiles": len(ids), "verdicts": dict(sorted(Counter(r["verdict"] for r in ids).items())),
                         "kernels": sorted({r["kernel"] for r in ids}), "comparison": lines,
                         "verdicts_equal": agree}
        Path(a.record).write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
