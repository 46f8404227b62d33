"""Calibrate the statistical tier: run thousands of statistical-tier cases of the correct kernels and record the
false-failure count (must be 0) and the largest error ratio |err|/tol, per kernel, dtype and run mode; then show
that the fp16-accumulator broken kernel still fails under the same tolerance.

Cases come from the suite's own strategies (conformance.strategies.cases, statistical tier), drawn
deterministically (hypothesis, derandomized). Each plan row says how a kernel runs:
  - "interpreter": the Triton kernel itself, in the Triton interpreter (cpu target, ci-profile shapes);
  - "model": the kernel's plain-torch model of its own operands (its load step is real), under a GPU target
    the kernel's gate accepts, with nightly-profile shapes (K up to 2048) -- the interpreter is too slow there;
  - "device": torch_dequant_w4a16 and fp8_group_quant_native are plain torch and run natively on the cpu.
The determinism double-run is off (check_determinism=False): this measures the tolerance model only.

    PYTHONPATH=. python benchmarks/calibrate.py [--scale 1.0] [--procs 2] [--out PATH]
Writes benchmarks/results/calibration.json; exits 1 if a correct kernel failed or the mutant passed everything.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests.unit.broken_kernels"
MUTANT = "broken_fp16_accumulator"

# (kernel, target, profile, expected run mode, number of cases at --scale 1)
PLAN = [
    ("torch_dequant_w4a16", "cpu", "nightly", "device", 500),
    ("torch_dequant_w4a16", "cpu", "ci", "device", 800),
    ("triton_w4a16", "sm90", "nightly", "model", 700),
    ("triton_w4a16", "sm90", "ci", "model", 500),
    ("triton_w4a16", "cpu", "ci", "interpreter", 400),
    ("triton_w4a16_actorder", "gfx942", "nightly", "model", 500),
    ("triton_w4a16_actorder", "cpu", "ci", "interpreter", 300),
    ("rdna3_w4a16", "gfx1100", "nightly", "model", 500),
    ("rdna3_w4a16", "gfx1100", "ci", "model", 300),
    ("rdna_hybrid_w4a16", "gfx1100", "ci", "interpreter+model", 400),  # M <= 5: GEMV model, else Triton skinny
    ("fp8_group_quant_native", "cpu", "nightly", "device", 400),
    ("fp8_group_quant_triton", "cpu", "ci", "interpreter", 200),
]
MUTANT_PLAN = (MUTANT, "cpu", "nightly", "device", 150)
CHUNK = 25


def draw_case_ids(kernel: str, target: str, profile: str, n: int) -> list[str]:
    """n statistical-tier case ids from the suite's strategy, derandomized (same ids every run)."""
    from hypothesis import HealthCheck, Phase, given, settings

    from conformance.cases import strategies

    ids: list[str] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategies.cases(kernel, target, tier="statistical", profile=profile))
    def collect(case):
        ids.append(case.id)

    collect()
    return ids


def _init_worker():
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    from conformance.core import registry

    registry.load_all()
    registry.load_plugin(PLUGIN)


K_BUCKETS = (64, 256, 1024)


def _k_bucket(k: int) -> str:
    """The reduction length's bucket: for K <= 64 the accumulation term is a worst-case bound (K <= 8*sqrt(K))."""
    lo = 0
    for hi in K_BUCKETS:
        if k <= hi:
            return f"K{lo + 1}-{hi}"
        lo = hi
    return f"K>{lo}"


def run_chunk(job):
    """Run one chunk of case ids on its target; returns one small dict per verdict."""
    kernel, target, ids = job
    from conformance.cases.ids import parse_case_id
    from conformance.checks.harness import run_case

    out = []
    for cid in ids:
        c = parse_case_id(cid)
        t0 = time.perf_counter()
        v = run_case(c, kernel, target, check_determinism=False, record=False)
        out.append({"kernel": kernel, "target": target, "case_id": cid, "outcome": v.outcome, "run_mode": v.run_mode,
                    "dtype": c.dtype, "regime": c.regime, "k_bucket": _k_bucket(c.K or c.hidden),
                    "max_ratio": v.metrics.get("max_ratio"),
                    "seconds": time.perf_counter() - t0, "detail": v.detail[:300] if v.outcome != "pass" else ""})
    return out


def _summary(rows: list[dict]) -> dict:
    ratios = [r["max_ratio"] for r in rows if r["max_ratio"] is not None and math.isfinite(r["max_ratio"])]
    worst = max(rows, key=lambda r: -1 if r["max_ratio"] is None else r["max_ratio"]) if rows else None
    fails = [r for r in rows if r["outcome"] in ("fail", "error")]
    srt = sorted(ratios)
    return {"cases": len(rows), "false_failures": len(fails), "skips": sum(r["outcome"] == "skip" for r in rows),
            "max_ratio": max(ratios) if ratios else None,
            "p99_ratio": srt[min(len(srt) - 1, int(0.99 * len(srt)))] if srt else None,
            "median_ratio": srt[len(srt) // 2] if srt else None,
            "worst_case_id": worst["case_id"] if worst else None,
            "run_modes": sorted({r["run_mode"] for r in rows if r["run_mode"]}),
            "seconds": round(sum(r["seconds"] for r in rows), 1),
            "failures": [{"case_id": r["case_id"], "outcome": r["outcome"], "detail": r["detail"]} for r in fails[:20]]}


def _caught(rows: list[dict], key: str) -> dict:
    """'failed/total' of the mutant's cases per value of `key`."""
    out = {}
    for v in sorted({r[key] for r in rows}):
        mine = [r for r in rows if r[key] == v]
        out[v] = f"{sum(r['outcome'] in ('fail', 'error') for r in mine)}/{len(mine)}"
    return out


def _mutant_summary(rows: list[dict]) -> dict:
    s = _summary(rows)
    s.pop("failures")
    s.pop("false_failures")
    return {**s, "caught": sum(r["outcome"] in ("fail", "error") for r in rows),
            "caught_by_dtype": _caught(rows, "dtype"), "caught_by_k_bucket": _caught(rows, "k_bucket"),
            "caught_by_regime": _caught(rows, "regime")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiply every plan row's case count")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "calibration.json"))
    args = p.parse_args(argv)
    import multiprocessing as mp

    _init_worker()  # sets TRITON_INTERPRET=1 on a CPU machine: triton must not be imported before
    import hypothesis
    import torch
    import triton
    t0 = time.perf_counter()
    jobs, plan_doc = [], []
    for kernel, target, profile, mode, n in PLAN + [MUTANT_PLAN]:
        n = max(1, round(n * args.scale))
        ids = draw_case_ids(kernel, target, profile, n)
        plan_doc.append({"kernel": kernel, "target": target, "profile": profile, "run_mode": mode, "cases": len(ids)})
        jobs += [(kernel, target, ids[i:i + CHUNK]) for i in range(0, len(ids), CHUNK)]
    print(f"drew {sum(len(j[2]) for j in jobs)} cases in {time.perf_counter() - t0:.0f} s", flush=True)
    rows: list[dict] = []
    with mp.get_context("spawn").Pool(args.procs, initializer=_init_worker) as pool:
        for i, chunk in enumerate(pool.imap_unordered(run_chunk, jobs)):
            rows += chunk
            if i % 20 == 0:
                print(f"  {len(rows)} cases, {time.perf_counter() - t0:.0f} s", flush=True)
    correct = [r for r in rows if r["kernel"] != MUTANT]
    mutant = [r for r in rows if r["kernel"] == MUTANT]
    by_kd, by_km, by_kr, by_kk = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    for r in correct:
        by_kd[f"{r['kernel']}/{r['dtype']}"].append(r)
        by_km[f"{r['kernel']}/{r['run_mode']}"].append(r)
        by_kr[f"{r['kernel']}/{r['regime']}"].append(r)
        by_kk[("fp8 H" if r["kernel"].startswith("fp8") else "w4a16 ") + r["k_bucket"]].append(r)
    w4 = [r for r in correct if not r["kernel"].startswith("fp8")]
    doc = {
        "what": "statistical-tier calibration: false failures of correct kernels and max |err|/tol (fail above 1)",
        "tolerance": "conformance/checks/tolerance.py (C_ACC = 8, dequant term u_deq*min(S, c*R)); "
                     "fp8: q within one fp8 step, scales within 4 fp32 ulp",
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                        "hypothesis": hypothesis.__version__, "cpus": os.cpu_count(), "processes": args.procs},
        "command": " ".join(["PYTHONPATH=. python benchmarks/calibrate.py", *(sys.argv[1:] if argv is None else argv)]),
        "scale": args.scale,
        "plan": plan_doc,
        "totals": {"cases": len(correct), "w4a16_cases": len(w4),
                   "interpreter_cases": sum(r["run_mode"] == "interpreter" for r in correct),
                   "model_cases": sum(r["run_mode"] == "model" for r in correct),
                   "device_cases": sum(r["run_mode"] == "device" for r in correct),
                   "false_failures": sum(r["outcome"] in ("fail", "error") for r in correct),
                   "max_ratio_w4a16": max((r["max_ratio"] for r in w4 if r["max_ratio"] is not None), default=None)},
        "per_kernel_dtype": {k: _summary(v) for k, v in sorted(by_kd.items())},
        "per_kernel_run_mode": {k: _summary(v) for k, v in sorted(by_km.items())},
        "per_kernel_regime": {k: {"cases": len(v), "max_ratio": _summary(v)["max_ratio"]}
                              for k, v in sorted(by_kr.items())},
        "per_k_bucket": {k: {"cases": len(v), "max_ratio": _summary(v)["max_ratio"],
                             "p99_ratio": _summary(v)["p99_ratio"]} for k, v in sorted(by_kk.items())},
        "fp16_accumulator_mutant": _mutant_summary(mutant),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    t = doc["totals"]
    print(f"{t['cases']} correct-kernel cases ({t['interpreter_cases']} interpreter, {t['model_cases']} model, "
          f"{t['device_cases']} device): {t['false_failures']} false failures, max W4A16 ratio {t['max_ratio_w4a16']}")
    for k, s in doc["per_kernel_dtype"].items():
        print(f"  {k:40s} {s['cases']:5d} cases  false failures {s['false_failures']}  max ratio {s['max_ratio']:.3g}")
    m = doc["fp16_accumulator_mutant"]
    print(f"fp16-accumulator mutant: {m['caught']}/{m['cases']} cases fail, max ratio {m['max_ratio']:.3g}")
    print(f"wrote {args.out} in {doc['seconds']} s")
    return 0 if t["false_failures"] == 0 and m["caught"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
