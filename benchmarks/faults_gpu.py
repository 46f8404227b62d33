"""The fault matrix on a GPU (docs/faults.md): kernels that wreck their CUDA context, run beside triton_w4a16 under
pytest-xdist, must not change one of triton_w4a16's verdicts. Writes faults.json (recorded as
benchmarks/results/h200/faults.json).

    python -m benchmarks.faults_gpu OUT_JSON --scratch DIR [--workers 4] [--seed 0x1234] [--budget-s 560]
                                    [--matrix-timeout-s 5] [--compile-bytecode]

Runs, in order, each `python -m pytest ... -n WORKERS --conformance-seed SEED` (the ci profile, the plugin's
defaults otherwise) with its own JUnit XML, conformance report and log (beside OUT_JSON):
  clean             conformance/suite, triton_w4a16 alone: the verdicts every other run must reproduce
  illegal_address   conformance/suite, fault_gpu_illegal_address beside triton_w4a16: the fault kernel's first call
                    in each process launches a Triton store 1 TiB outside its buffer (CUDA: "an illegal memory
                    access was encountered", for the rest of the process)
  device_assert     the same with fault_gpu_device_assert: a failing tl.device_assert (compiled with debug=True)
  cpu_fault_matrix  every CPU fault kernel (tests/unit/fault_kernels.py: hangs, exits, raises, SIGSEGV, NaN, wrong
                    shape / dtype / device, ...) on its matrix rows, beside triton_w4a16's CI-plan rows;
                    CONFORMANCE_CRASH_LIMIT=1 and --conformance-timeout MATRIX_TIMEOUT_S, as in the CPU matrix
The fault kernels come from tests/unit/fault_kernels.py through the plugin module tests/unit/fault_plugin.py.

Per run the JSON holds: command, wall_s, exit_code, timed_out, the JUnit counts, `records` (all of the run's records)
and per kernel, `complete`, `workers_replaced`, `stopped_kernels`, `gate_faults`; per fault run also
`verdicts_equal` (triton_w4a16's set of (case id, check, outcome) equals the clean run's: the whole set for the
suite runs; for cpu_fault_matrix the clean run's records of its CI-plan case ids, every one of them present),
`triton_w4a16_records`, the first differences, and `fault_fired` (a fault run: some record of its fault kernel says
"sticky device error" with the CUDA error's text). `all_equal` is the conjunction. Exit 0 when every fault run kept
triton_w4a16's verdicts, fired its fault and reported complete.

Triton and inductor caches are shared by the runs (the clean run compiles, the others reuse); each run gets a fresh
CONFORMANCE_CACHE_DIR (no replay of another run's failures) and no OMP_NUM_THREADS / MKL_NUM_THREADS. Each run is
limited by its cap (RUN_CAP_S; the matrix's from its hangs, matrix_cap_s: 200 s at 4 workers and 5 s) and by what
the budget has left; a run past it gets SIGINT, then SIGKILL (benchmarks/gpu_ci.py `timed`), and the
JSON is rewritten after every run, so a cut call still returns what finished.
Code identity: CONFORMANCE_COMMIT / CONFORMANCE_TREE_CLEAN (benchmarks/provenance.py; the device copy has no .git).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "tests" / "unit"
CORRECT = "triton_w4a16"
FAULTS = {"illegal_address": ("fault_gpu_illegal_address", "illegal memory access"),
          "device_assert": ("fault_gpu_device_assert", "device-side assert")}
RUN_CAP_S = {"clean": 180, "illegal_address": 150, "device_assert": 150}  # cpu_fault_matrix: matrix_cap_s
MATRIX_BASE_S = 120  # the matrix run less its hangs: every process collects every kernel's plan, triton's rows run
WORKERS, MATRIX_TIMEOUT_S = 4, 5.0  # the defaults of --workers and --matrix-timeout-s
BUDGET_S = 560  # all runs together: inside the GPU machine's 10-minute command, less its start and the bytecode step
SHOWN = 20  # differences listed per run


def verdicts(doc: dict | None, kernel: str) -> set:
    """{(case_id, check, outcome)} of `kernel`'s records in a conformance report."""
    return {(r.get("case_id"), r.get("check"), r.get("outcome")) for r in (doc or {}).get("records", [])
            if r.get("kernel") == kernel}


def compare(run: set, clean: set, case_ids: set | None = None) -> dict:
    """Whether `run` equals `clean` (restricted to `case_ids` when given: then each of them must have a record)."""
    want = clean if case_ids is None else {v for v in clean if v[0] in case_ids}
    missing_ids = sorted(case_ids - {v[0] for v in run}) if case_ids is not None else []
    only_run, only_clean = sorted(run - want, key=str), sorted(want - run, key=str)
    return {"verdicts_equal": not only_run and not only_clean and not missing_ids, "correct_records": len(run),
            "clean_records_compared": len(want),
            "only_in_this_run": [list(v) for v in only_run[:SHOWN]],
            "only_in_clean_run": [list(v) for v in only_clean[:SHOWN]],
            "case_ids_without_record": missing_ids[:SHOWN]}


def fault_fired(doc: dict | None, kernel: str, text: str) -> dict:
    """How the fault kernel's records read: how many, how many are the sticky device error itself, the first one."""
    recs = [r for r in (doc or {}).get("records", []) if r.get("kernel") == kernel]
    sticky = [r for r in recs if "sticky device error" in (r.get("detail") or "") and text in r.get("detail", "")]
    return {"fault_records": len(recs), "sticky_records": len(sticky), "fault_fired": bool(sticky),
            "first_sticky": {k: sticky[0].get(k) for k in ("case_id", "check", "detail")} if sticky else None,
            "earlier_crash_records": sum("earlier crash" in (r.get("detail") or "") for r in recs)}


def matrix_cap_s(workers: int, timeout_s: float, kernels) -> float:
    """The cpu_fault_matrix run's wall cap: MATRIX_BASE_S plus every time limit its hangs can cost, as if none
    overlapped. A hanging kernel costs at most one limit per process (its later cases there fail at once as `earlier
    hang`) and at most one per matrix item of it; a hanging gate costs one in every process's collection. The
    processes: the workers plus one replacement per matrix item of a worker-ending kernel (crash limit 1)."""
    from fault_kernels import GATE_ONLY, HANGING, WORKER_KILLING, matrix_items

    killing, hanging = {c.name for c in WORKER_KILLING}, {c.name for c in HANGING}
    processes = workers + sum(len(matrix_items([k])) for k in kernels if k in killing)
    limits = sum(processes if k in GATE_ONLY else min(len(matrix_items([k])), processes)
                 for k in kernels if k in hanging)
    return MATRIX_BASE_S + timeout_s * limits


def plan_node_ids(junit: Path, kernel: str) -> list[str]:
    """The node ids of `kernel`'s CI-plan rows in a run's JUnit XML (xdist's `@group` suffix dropped)."""
    out = []
    for c in ET.parse(junit).getroot().iter("testcase"):
        name = c.get("name", "")
        if c.get("classname", "").endswith("test_plan") and name.startswith(f"test_plan[{kernel}-"):
            if name.rfind("@") > name.rfind("]"):
                name = name[:name.rfind("@")]
            if name[len(f"test_plan[{kernel}-"):-1].rsplit("-", 1)[-1].isdigit():  # a row, not an empty plan's item
                out.append(f"conformance/suite/test_plan.py::{name}")
    return out


def plan_case_ids(kernel: str, seed: int) -> set:
    """The case ids of `kernel`'s CI plan on this machine, both tiers, as the plugin collects them (collection.plan_rows
    without replays: every run here has a fresh CONFORMANCE_CACHE_DIR)."""
    from conformance.cases import plan, strategies
    from conformance.cases.profiles import get_profile
    from conformance.core import registry
    from conformance.core.targets import detect_target

    registry.load_all()
    k, prof = registry.get_kernel(kernel), get_profile("ci")
    ids = set()
    for tier in ("exact", "statistical"):
        t = strategies.suite_target(k, detect_target(), tier, prof)
        ids |= {r.case.id for r in plan.build_plan(k, t, tier, seed=seed, profile=prof).rows}
    return ids


def summary(doc: dict | None) -> dict:
    if doc is None:
        return {"report": None}
    per_kernel: dict = {}
    for r in doc.get("records", []):
        per_kernel.setdefault(r.get("kernel"), {}).setdefault(r.get("outcome"), 0)
        per_kernel[r.get("kernel")][r.get("outcome")] += 1
    return {"records": len(doc.get("records", [])), "records_per_kernel": per_kernel, "complete": doc.get("complete"),
            "planned": doc.get("planned"), "missing": len(doc.get("missing") or []),
            "workers_replaced": doc.get("workers_replaced"), "stopped_kernels": doc.get("stopped_kernels"),
            "gate_faults": doc.get("gate_faults")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON to write (faults.json)")
    ap.add_argument("--scratch", required=True, help="a directory for caches and reports (created)")
    ap.add_argument("--workers", type=int, default=WORKERS)
    ap.add_argument("--seed", default="0x1234")
    ap.add_argument("--budget-s", type=float, default=float(BUDGET_S),
                    help="wall budget of all runs together (default %(default)s s)")
    ap.add_argument("--matrix-timeout-s", type=float, default=MATRIX_TIMEOUT_S,
                    help="--conformance-timeout of the cpu_fault_matrix run (its hangs cost this per worker)")
    ap.add_argument("--correct", default=CORRECT, help="the kernel whose verdicts must hold (default %(default)s)")
    ap.add_argument("--suite", default="conformance/suite",
                    help="what the clean and device-fault runs collect (default %(default)s; a CPU dry run of this "
                         "script's plumbing passes conformance/suite/test_plan.py)")
    ap.add_argument("--compile-bytecode", action="store_true",
                    help="compile missing .pyc files first (as benchmarks/gpu_ci.py; recorded, outside the budget)")
    a = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(UNIT)]
    from . import gpu_ci, provenance

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(a.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    seed = int(a.seed, 0)
    ident = provenance.code_identity()
    doc = {"commit": ident["commit"], "clean": ident["clean"], "commit_from": ident["from"],
           "kernel_digest": provenance.kernel_digest(), **dict.fromkeys(("device", "torch", "triton")),
           "seed": a.seed, "workers": a.workers, "budget_s": a.budget_s, "complete": False, "all_equal": None}
    doc["python_bytecode"] = gpu_ci.python_bytecode(a.compile_bytecode)
    caches = {"TRITON_CACHE_DIR": scratch / "triton", "TORCHINDUCTOR_CACHE_DIR": scratch / "inductor"}
    for d in caches.values():
        d.mkdir(parents=True, exist_ok=True)
    from fault_kernels import ALL, matrix_items

    matrix_kernels = [c.name for c in ALL]
    caps = dict(RUN_CAP_S, cpu_fault_matrix=matrix_cap_s(a.workers, a.matrix_timeout_s, matrix_kernels))
    doc["run_caps_s"] = caps
    t0 = time.monotonic()

    def run(name: str, kernels: list[str], targets: list[str], env_extra: dict, opts: list[str]) -> dict | None:
        left = a.budget_s - (time.monotonic() - t0)
        if left < 30:
            doc[name] = {"skipped": f"the budget ({a.budget_s:g} s) was spent"}
            return None
        junit, report = scratch / f"{name}.xml", scratch / f"{name}.json"
        faults = [k for k in kernels if k != a.correct]
        cmd = [sys.executable, "-m", "pytest", *targets, "-n", str(a.workers), "-q", "--tb=line", "-p",
               "no:cacheprovider", "--conformance-kernels", ",".join(kernels), "--conformance-seed", a.seed, *opts,
               *(["--conformance-plugin", "fault_plugin"] if faults else []),
               f"--junitxml={junit}", f"--conformance-report={report}"]
        env = {k: v for k, v in os.environ.items() if k not in gpu_ci.THREAD_VARS}
        env.update({k: str(v) for k, v in caches.items()}, PYTHONUNBUFFERED="1", CONFORMANCE_NO_ENTRY_POINTS="1",
                   CONFORMANCE_CACHE_DIR=tempfile.mkdtemp(prefix=f"{name}-conformance-", dir=scratch),
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(UNIT), *filter(None, [env.get("PYTHONPATH")])]),
                   FAULT_KERNELS=",".join(faults), **env_extra)
        limit = min(caps[name], left - 5)
        rc, wall, timed_out = gpu_ci.timed(cmd, env, limit, out.parent / f"faults_{name}.log")
        counts = gpu_ci.junit_counts(junit) or {}
        try:
            rep = json.loads(report.read_text())
        except (OSError, ValueError):
            rep = None
        shown = " ".join(["python", *cmd[1:]]).replace(str(scratch), "SCRATCH")
        doc[name] = {"command": shown, "env": {k: v for k, v in env_extra.items()}, "wall_s": wall,
                     "exit_code": rc, "timed_out": timed_out, "limit_s": round(limit, 1), **counts, **summary(rep)}
        print(f"faults_gpu: {name}: {wall} s, exit {rc}, {counts}", flush=True)
        return rep

    correct = a.correct
    clean = run("clean", [correct], [a.suite], {}, [])
    base = verdicts(clean, correct)
    doc["clean_verdicts"] = len(base)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    equal = []
    for name, (kernel, text) in FAULTS.items():
        rep = run(name, [kernel, correct], [a.suite], {}, [])
        if rep is not None:
            doc[name].update(fault_kernel=kernel, **compare(verdicts(rep, correct), base),
                             **fault_fired(rep, kernel, text))
            equal.append(doc[name]["verdicts_equal"] and doc[name]["fault_fired"] and rep.get("complete") is True)
        else:
            equal.append(False)
        out.write_text(json.dumps(doc, indent=2) + "\n")
    rows = plan_node_ids(scratch / "clean.xml", correct) if (scratch / "clean.xml").exists() else []
    rep = run("cpu_fault_matrix", [correct, *matrix_kernels], [*rows, *matrix_items(matrix_kernels)],
              {"CONFORMANCE_CRASH_LIMIT": "1", "CONFORMANCE_TIMEOUT_GRACE": "5"},
              ["--conformance-timeout", f"{a.matrix_timeout_s:g}"])
    if rep is not None:
        doc["cpu_fault_matrix"].update(plan_rows=len(rows), fault_kernels=matrix_kernels,
                                       **compare(verdicts(rep, correct), base, plan_case_ids(correct, seed)))
        equal.append(doc["cpu_fault_matrix"]["verdicts_equal"] and rep.get("complete") is True and bool(rows))
    else:
        equal.append(False)
    doc.update(gpu_ci.environment(), all_equal=all(equal), complete=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"faults_gpu: all_equal={doc['all_equal']} -> {out}", flush=True)
    return 0 if doc["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
