"""Measure the suite's power against the broken kernels of tests/unit/broken_kernels.py (CPU, ~5 minutes).

1. hunt: for every broken kernel and tier, how many ci-profile (derandomized) draws of the suite's strategy
   it takes until the first failing verdict (cap --max-examples), and the case id that failed;
2. suite: the ci-profile W4A16 suite itself (tests/conformance/test_w4a16_suite.py, 6 examples per tier, with
   hypothesis shrinking) run on the broken kernels in a pytest subprocess: caught or not, and the shrunk id.

    PYTHONPATH=. python benchmarks/proof_of_power.py [--max-examples 200] [--no-suite] [--out PATH]
Writes benchmarks/results/proof_of_power.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests.unit.broken_kernels"


def run_hunts(max_examples: int) -> list[dict]:
    from conformance import registry

    registry.load_all()
    registry.load_plugin(PLUGIN)
    import tests.unit.broken_kernels as bk
    from tests.unit.mutant_hunt import hunt

    rows = []
    for name in bk.BROKEN:
        for tier in ("exact", "statistical"):
            h = hunt(name, tier, max_examples)
            row = {**h.to_dict(), "base": bk.BASE[name], "doc": (bk.BROKEN[name].__doc__ or "").split("\n")[0]}
            rows.append(row)
            print(f"{name:34s} {tier:12s} caught={row['caught']!s:5s} after {row['examples_run']:4d} "
                  f"({row['seconds']:.1f} s) {row['case_id'] or ''}", flush=True)
    return rows


def run_suite() -> dict:
    import tests.unit.broken_kernels as bk

    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        cmd = [sys.executable, "-m", "pytest", "tests/conformance/test_w4a16_suite.py", "-q", "-p", "no:cacheprovider",
               "--conformance-plugin", PLUGIN, "--conformance-kernels", ",".join(bk.BROKEN),
               "--conformance-profile", "ci", "--conformance-report", report]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        recs = json.load(open(report))["records"]
    out = {}
    for name in bk.BROKEN:
        for tier in ("exact", "statistical"):
            mine = [x for x in recs if x["kernel"] == name and x["check"] == tier]
            bad = [x for x in mine if x["outcome"] in ("fail", "error")]
            # the last failing verdict is hypothesis's shrunk (minimal) example, replayed at the end
            out[f"{name}/{tier}"] = {"caught": bool(bad), "cases_run_incl_shrinking": len(mine),
                                     "first_failure_at": next((i + 1 for i, x in enumerate(mine) if x in bad), None),
                                     "shrunk_case_id": bad[-1]["case_id"] if bad else None}
    return {"command": " ".join(cmd[1:]), "exit_code": r.returncode, "seconds": round(secs, 1), "results": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-examples", type=int, default=200)
    p.add_argument("--no-suite", action="store_true", help="skip the pytest run of the ci suite")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "proof_of_power.json"))
    args = p.parse_args(argv)
    import hypothesis
    import torch
    import triton

    t0 = time.perf_counter()
    doc = {"what": "examples until the first failure of each broken kernel (suite strategies, ci profile draws)",
           "profile": "ci", "max_examples": args.max_examples,
           "environment": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton.__version__, "hypothesis": hypothesis.__version__,
                           "machine": f"{platform.machine()}, {os.cpu_count()} cpus, Triton interpreter"},
           "hunts": run_hunts(args.max_examples)}
    if not args.no_suite:
        doc["ci_suite_run"] = run_suite()
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
