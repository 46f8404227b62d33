"""Fold suite reports of the vLLM adapter into benchmarks/results/vllm_VERSION.json (0.33.0 or 0.34.0).

    python benchmarks/vllm_results.py add REPORT.json --command "..." --machine "..." [--vllm 0.34.0] [--out PATH]

REPORT.json is a `--conformance-report` file of a suite run with `--conformance-plugin conformance.adapters.vllm`.
`add` appends a run, or, for a target and machine already recorded, replaces the kernels the new report covers
(their counts and failures) and keeps the others (a report covering every kernel of the old run replaces it).
The file's keys: `commit`, `clean` (benchmarks/provenance.py, of the tree that ran: the report's own commit when
it names one), `vllm_version`, `runs` (command, machine, target, profile, seed, complete, and per kernel:
cases, passed, failed, errors, skipped, run_modes) and `failures` (case id, kernel, target, outcome, detail,
replay line). Every verdict of a vllm_* kernel counts; a failure is an outcome of fail or error.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VLLM_VERSION = "0.33.0"  # the default release; --vllm names another
VLLM_VERSIONS = ("0.33.0", "0.34.0")


def out_path(version: str) -> Path:
    return ROOT / "benchmarks" / "results" / f"vllm_{version}.json"


OUT = out_path(VLLM_VERSION)


def summarize(report: dict) -> tuple[dict, list[dict]]:
    """(per-kernel counts, failures) of the vllm_* kernels' records in one suite report."""
    kernels: dict = collections.defaultdict(lambda: {"cases": 0, "passed": 0, "failed": 0, "errors": 0,
                                                     "skipped": 0, "run_modes": {}})
    failures = []
    for r in report.get("records", []):
        name = r.get("kernel", "")
        if not name.startswith("vllm_"):
            continue
        k = kernels[name]
        k["cases"] += 1
        outcome = r.get("outcome")
        key = {"pass": "passed", "fail": "failed", "error": "errors", "skip": "skipped"}.get(outcome, "errors")
        k[key] += 1
        if r.get("run_mode"):
            k["run_modes"][r["run_mode"]] = k["run_modes"].get(r["run_mode"], 0) + 1
        if outcome in ("fail", "error"):
            failures.append({"case_id": r.get("case_id"), "kernel": name, "check": r.get("check"),
                             "target": r.get("target") or report.get("target"), "outcome": outcome,
                             "run_mode": r.get("run_mode"), "detail": (r.get("detail") or "")[:600],
                             "replay": r.get("replay")})
    return {n: kernels[n] for n in sorted(kernels)}, failures


def add(report_path: Path, command: str, machine: str, out: Path = OUT, commit: str | None = None,
        version: str = VLLM_VERSION) -> dict:
    from benchmarks.provenance import code_identity

    report = json.loads(report_path.read_text())
    data = json.loads(out.read_text()) if out.exists() else {}
    ident = code_identity()
    kernels, failures = summarize(report)
    run = {"command": command, "machine": machine, "target": report.get("target"), "profile": report.get("profile"),
           "seed": report.get("seed"), "complete": report.get("complete"),
           "commit": commit or report.get("commit"), "kernels": kernels}
    if commit and report.get("commit") not in (None, commit):
        run["report_commit"] = report.get("commit")  # what the run's own git said (a stale copy of the tree's .git)
    runs = data.get("runs", [])
    old = next((r for r in runs if r["target"] == run["target"] and r["machine"] == machine), None)
    if old is not None and not set(old["kernels"]) <= set(kernels):  # a later report of the same target and
        run["kernels"] = {**old["kernels"], **kernels}  # machine replaces the kernels it covers, keeps the others
        if old["command"] != command:
            run["command"] = f"{old['command']}; then, for {', '.join(kernels)}: {command}"
    runs = [r for r in runs if r is not old] + [run]
    # a failure's own target may be a simulated one (the hybrid's gfx1100 on an H200): its run is named by run_target
    kept = [f for f in data.get("failures", [])
            if not (f.get("run_target", f["target"]) == run["target"] and f["machine"] == machine
                    and f["kernel"] in kernels)]
    data = {"commit": ident["commit"], "clean": ident["clean"], "vllm_version": version, "runs": runs,
            "failures": kept + [dict(f, machine=machine, run_target=run["target"]) for f in failures]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="fold one suite report into the results file")
    a.add_argument("report", type=Path)
    a.add_argument("--command", required=True, help="the command that produced the report")
    a.add_argument("--machine", required=True, help="e.g. 'cpu (2 cores, Triton interpreter)' or 'H200'")
    a.add_argument("--vllm", default=VLLM_VERSION, help=f"the release the report ran on, one of {VLLM_VERSIONS} "
                   "(default: %(default)s); it names the default --out")
    a.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/vllm_VERSION.json")
    a.add_argument("--commit", default=None,
                   help="the commit that ran, where the report's own is wrong (a machine whose copy of the tree "
                        "carries a stale .git)")
    args = p.parse_args(argv)
    if args.commit is not None and not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        print(f"error: --commit={args.commit!r} is invalid (allowed: a full 40-hex-digit commit sha)", file=sys.stderr)
        return 2
    if not args.report.is_file():
        print(f"error: report={str(args.report)!r} is not a file (allowed: a --conformance-report JSON)",
              file=sys.stderr)
        return 2
    if args.vllm not in VLLM_VERSIONS:
        print(f"error: --vllm={args.vllm!r} is invalid (allowed: one of {list(VLLM_VERSIONS)})", file=sys.stderr)
        return 2
    args.out = args.out or out_path(args.vllm)
    data = add(args.report, args.command, args.machine, args.out, commit=args.commit, version=args.vllm)
    for r in data["runs"]:
        counts = ", ".join(f"{k} {v['passed']}/{v['cases']}" for k, v in r["kernels"].items())
        print(f"{r['machine']} {r['target']}: {counts}")
    print(f"{len(data['failures'])} failures -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
