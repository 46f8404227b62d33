"""Runs of the suite on third-party kernels (torch's int4pack GEMMs, torchao's FP8 act quant), recorded as
benchmarks/results/third_party.json.

    python -m benchmarks.third_party record --report R.json --command "..." --machine "..." --out RUN.json
    python -m benchmarks.third_party merge RUN.json [RUN.json ...] --out benchmarks/results/third_party.json
    python -m benchmarks.third_party merge benchmarks/results/third_party.json GPU_RUN.json --out ...   (add runs)

`record` turns one `--conformance-report` into a run (`--kernels a,b`: only those kernels' records): its
command, machine, target, profile, seed, packages, commit and clean flag (benchmarks/provenance.py), per kernel
the verdict counts (cases = records, passed, failed = fail and error, skipped) and how the verdicts ran
(`run_modes`: device, interpreter or model), and every failing case once, with its case id, detail, replay line
and how many of its verdicts failed (hypothesis replays a failure while it shrinks). `merge` collects runs into
the recorded document: keys `commit`, `clean` (of the tree that merged), `packages` (name: version, of every
run), `runs` and `failures` (all runs' failures, each naming its kernel and run index). A run's own commit may
be older than the merge's.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from collections import Counter, defaultdict
from importlib import metadata
from pathlib import Path

from . import provenance

PACKAGES = ("torch", "triton", "torchao", "hypothesis", "pytest")
FAILED = ("fail", "error")
REAL_MODES = ("device", "interpreter")  # a verdict of the kernel itself, not of its model


def package_versions(names=PACKAGES) -> dict:
    """name: version of each installed package in `names` (absent ones left out)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            try:  # torchao installed with --target DIR on PYTHONPATH has no dist-info on sys.path's scan order
                out[n] = __import__(n).__version__
            except Exception:  # noqa: BLE001 - not installed here
                continue
    return out


def summarize(report: dict, command: str, machine: str, kernels=None) -> dict:
    """One run from a --conformance-report document: the records of `kernels` (None: every kernel in it)."""
    per = defaultdict(Counter)
    modes = defaultdict(Counter)
    failures, seen = [], {}
    for r in report.get("records", []):
        k, outcome = r.get("kernel"), r.get("outcome")
        if kernels is not None and k not in kernels:
            continue
        c = per[k]
        c["cases"] += 1
        c["passed" if outcome == "pass" else "failed" if outcome in FAILED else "skipped"] += 1
        if outcome != "skip" and r.get("run_mode"):
            modes[k][r["run_mode"]] += 1
        if outcome in FAILED:
            key = (k, r.get("case_id"), r.get("check"))
            if key in seen:  # the same case judged again (hypothesis replays a failure while it shrinks)
                seen[key]["verdicts"] += 1
                continue
            seen[key] = {"kernel": k, "case_id": r.get("case_id"), "check": r.get("check"),
                         "detail": r.get("detail"), "replay": r.get("replay"), "verdicts": 1}
            failures.append(seen[key])
    kernels = {k: {"cases": c["cases"], "passed": c["passed"], "failed": c["failed"], "skipped": c["skipped"],
                   "run_modes": dict(sorted(modes[k].items()))} for k, c in sorted(per.items())}
    return {"command": command, "machine": machine, "target": report.get("target"),
            "profile": report.get("profile"), "seed": report.get("seed"), "complete": report.get("complete"),
            "packages": package_versions(), **provenance.record_fields(), "kernels": kernels,
            "failures": failures}


def merge(runs: list[dict]) -> dict:
    """The recorded document from runs (see the module docstring)."""
    ident = provenance.code_identity()
    packages: dict = {}
    for run in runs:
        for name, version in run.get("packages", {}).items():
            seen = packages.setdefault(name, version)
            if seen != version and version not in seen.split(" | "):
                packages[name] = f"{seen} | {version}"
    failures = [dict(f, run=i) for i, run in enumerate(runs) for f in run.get("failures", [])]
    return {"commit": ident["commit"], "clean": ident["clean"], "packages": packages, "runs": runs,
            "failures": failures}


def real_verdicts(doc: dict, kernel: str) -> int:
    """Verdicts (pass or fail) of `kernel` itself (device or interpreter runs) over every run of a document."""
    return sum(n for run in doc.get("runs", []) for mode, n in
               run.get("kernels", {}).get(kernel, {}).get("run_modes", {}).items() if mode in REAL_MODES)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.third_party", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="one --conformance-report -> one run JSON")
    rec.add_argument("--report", required=True)
    rec.add_argument("--command", required=True, help="the command that produced the report, as run")
    rec.add_argument("--machine", default=None, help="default: this host's platform and CPU/GPU")
    rec.add_argument("--kernels", default=None, help="comma-separated kernels to keep (default: every kernel)")
    rec.add_argument("--out", required=True)
    mer = sub.add_parser("merge", help="run JSONs (or recorded documents: their runs) -> the recorded document")
    mer.add_argument("runs", nargs="+")
    mer.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        report = json.loads(Path(args.report).read_text())
        machine = args.machine or _machine()
        keep = None if args.kernels is None else {k.strip() for k in args.kernels.split(",") if k.strip()}
        doc = summarize(report, args.command, machine, keep)
    else:
        runs = []
        for p in args.runs:  # a run, or a recorded document whose runs are kept (adding the GPU runs to it)
            d = json.loads(Path(p).read_text())
            runs += d["runs"] if "runs" in d else [d]
        doc = merge(runs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


def _machine() -> str:
    import os

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()} {os.cpu_count()} cores, {gpu}, {platform.system()}"


if __name__ == "__main__":
    sys.exit(main())
