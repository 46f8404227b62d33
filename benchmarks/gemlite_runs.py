"""Does a ci-profile GemLite run end on its own? N consecutive runs of the shipped suite on GemLite, each under a
time limit, their exit codes and walls in one JSON (`bash benchmarks/run_gpu.sh gemlite5` writes
$OUT/gemlite5.json; issue 20 item 3: one such run reached [100%] and did not exit).

    python -m benchmarks.gemlite_runs OUT_JSON --scratch DIR [--runs 5] [--run-s 100] [--budget-s 540]

Each run: `python -m pytest conformance/suite -n 8 -q -p no:cacheprovider --conformance-plugin
conformance.adapters.gemlite --conformance-kernels gemlite_a16w4 --conformance-profile ci` plus a JUnit XML under
DIR and `-p benchmarks.exit_watch` (which names the threads alive at exit and dumps every thread's stack if the
process is still there EXIT_WATCH_S later: where a hang sits). Past --run-s the run's process group gets SIGINT, then
SIGKILL (benchmarks/gpu_ci.timed). A run is only started when the --budget-s left holds a whole one. Per run:
exit_code, wall_s, timed_out, reached_100 ([100%] printed), summary_printed (pytest's final line), ended_on_own
(exited before the limit), counts, and the exit_watch lines. Logs: gemlite5_run<i>.log beside the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ("-m", "pytest", "conformance/suite", "-n", "8", "-q", "-p", "no:cacheprovider", "--conformance-plugin",
        "conformance.adapters.gemlite", "--conformance-kernels", "gemlite_a16w4", "--conformance-profile", "ci",
        "-p", "benchmarks.exit_watch")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--run-s", type=float, default=100.0)
    ap.add_argument("--budget-s", type=float, default=540.0)
    a = ap.parse_args(argv)
    from . import provenance
    from .gpu_ci import run_counts, summary_counts, timed

    out, scratch = Path(a.out), Path(a.scratch)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    ident = provenance.code_identity()
    doc = {"commit": ident["commit"], "clean": ident["clean"], "commit_from": ident["from"],
           "command": " ".join(["python", *ARGS[:-2]]), "runs_wanted": a.runs, "run_limit_s": a.run_s,
           "autotune": os.environ.get("CONFORMANCE_GEMLITE_AUTOTUNE") or "gemlite's own (fast)", "runs": []}
    t0 = time.monotonic()
    for i in range(1, a.runs + 1):
        if a.budget_s - (time.monotonic() - t0) < a.run_s:
            doc["stopped"] = f"budget: {a.budget_s - (time.monotonic() - t0):.0f} s left < one run's {a.run_s:g} s"
            break
        junit, log = scratch / f"run{i}.xml", out.parent / f"gemlite5_run{i}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        rc, wall, timed_out = timed([sys.executable, *ARGS, f"--junitxml={junit}"], env,
                                    a.run_s, log)
        text = log.read_text(errors="replace")
        counts, source = run_counts(junit, text)
        doc["runs"].append({"run": i, "exit_code": rc, "wall_s": wall, "timed_out": timed_out,
                            "ended_on_own": not timed_out, "reached_100": "[100%]" in text,
                            "summary_printed": summary_counts(text) is not None, **counts, "counts_from": source,
                            "exit_watch": [ln for ln in text.splitlines() if ln.startswith("exit_watch[")][:20]})
        out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"gemlite_runs: run {i}: exit {rc} after {wall} s{' (TIMED OUT)' if timed_out else ''}", flush=True)
    doc["all_ended_on_own"] = bool(doc["runs"]) and all(r["ended_on_own"] for r in doc["runs"])
    doc["runs_done"] = len(doc["runs"])
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if doc["all_ended_on_own"] and doc["runs_done"] == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
