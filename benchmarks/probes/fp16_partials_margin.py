"""The exact tier's margin against fp16 block partial sums (CPU, a few minutes at the defaults).

1. correct kernels on `exact_wide` data: triton_w4a16, triton_w4a16_actorder, rdna_hybrid_w4a16 (Triton in the
   interpreter; its M <= 5 GEMV route as its model) on a simulated gfx1100, torch_dequant_w4a16, and rdna3_w4a16
   (model run, simulated gfx1100): exact-tier cases drawn from each kernel's gate-accepted classes at ci-profile
   sizes (M <= 40, N <= 128, K <= 512); torch_dequant_w4a16 also at K 1024-8192. Every case judged bit for bit
   must be bit-exact (0 mismatches); cases past a declared narrower accumulator are counted apart.
2. broken_fp16_partials (tests/unit/broken_accumulation.py: 32-wide block partials rounded to fp16, declares
   fp32): per K in {64, 128, 256, 512, 1024, 4096}, the share of exact-tier cases that fail on `exact_wide` and,
   for comparison, on `exact`; and the statistical tier's cases failing and error ratio (max and median per dtype
   over finite ratios; NaN/Inf outputs counted apart) on the realistic regimes at the same K.

    PYTHONPATH=. python benchmarks/probes/fp16_partials_margin.py [--cases 200] [--broken-cases 100] [--out PATH]
Writes benchmarks/results/fp16_partials_margin.json (with the commit and whether the tree was clean).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKEN_K = (64, 128, 256, 512, 1024, 4096)
# (kernel, target, K values or None for the ci range): the kernels whose exact tier must stay bit-exact
CORRECT = (("triton_w4a16", "cpu", None), ("triton_w4a16_actorder", "cpu", None),
           ("rdna_hybrid_w4a16", "gfx1100", None), ("torch_dequant_w4a16", "cpu", None),
           ("torch_dequant_w4a16", "cpu", (1024, 2048, 4096, 8192)), ("rdna3_w4a16", "gfx1100", None))
CI = {"m_max": 40, "n_max": 128, "k_max": 512}
M_PICKS = (1, 3, 5, 7, 17, 33)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def draw_cases(kernel, target, tier: str, regimes, n: int, rng: random.Random, k_values=None) -> list:
    """n Cases of `kernel` on `target`: a gate-accepted class, K (from k_values, else the class's K range within
    the ci k_max), a gate-accepted N <= n_max, M (interesting values or uniform), a regime, a seed."""
    from conformance.cases.ids import Case
    from conformance.families import get_family
    from conformance.families.w4a16 import _w4a16_table
    from references.generators import exact_tier_max_k

    fam = get_family("w4a16")
    k_max = max(k_values) if k_values else CI["k_max"]
    table = _w4a16_table(fam, kernel.name, target, "statistical", k_max, CI["n_max"])
    out = []
    while len(out) < n:
        cls, ks = rng.choice(table)
        ks = [K for K in ks if K in k_values] if k_values else list(ks)
        regime = rng.choice(regimes)
        if tier == "exact":
            cap = min(exact_tier_max_k(cls.weight_type, regime=regime), kernel.numerics(None).exact_tier_max_k or k_max)
            ks = [K for K in ks if K <= cap]
        if not ks:
            continue
        K = rng.choice(ks)
        ns = [N for N in range(8, CI["n_max"] + 1, 8) if kernel.can_implement(fam.config(cls, N, K), target) is None]
        if not ns:
            continue
        config = fam.config(cls, rng.choice(ns), K)
        M = rng.choice(M_PICKS) if rng.random() < 0.5 else rng.randint(1, CI["m_max"])
        out.append(Case(family="w4a16", kernel=kernel.name, regime=regime, tier=tier, seed=rng.randrange(2**31),
                        M=M, N=config.N, K=K, group_size=config.group_size, weight_type=cls.weight_type,
                        act_order=cls.act_order, dtype=cls.dtype, format=cls.format))
    return out


def run(cases, kernel, target) -> list:
    from conformance.checks.harness import run_case

    return [run_case(c, kernel, target, check_determinism=False, record=False) for c in cases]


def correct_kernels(n: int, seed: int) -> list[dict]:
    """Section 1: exact_wide verdicts of the correct kernels (bit-exact, judged statistically, failing)."""
    from conformance.core import registry
    from conformance.core.targets import parse_target

    rows = []
    for i, (name, tname, ks) in enumerate(CORRECT):
        k, target = registry.get_kernel(name), parse_target(tname)
        t0 = time.time()
        vs = run(draw_cases(k, target, "exact", ("exact_wide",), n, random.Random(seed + i), ks), k, target)
        exact = [v for v in vs if v.outcome == "pass" and v.detail.startswith("bit-exact")]
        stat = [v for v in vs if v.metrics.get("exact_judged_statistically")]
        bad = [v for v in vs if v.outcome not in ("pass", "skip")]
        row = {"kernel": name, "target": tname, "K": list(ks) if ks else f"<= {CI['k_max']}", "cases": len(vs),
               "bit_exact": len(exact), "judged_statistically": len(stat), "judged_statistically_passed":
               sum(v.outcome == "pass" for v in stat), "skipped": sum(v.outcome == "skip" for v in vs),
               "not_passed": len(bad), "mismatches": sum(v.metrics.get("mismatches", 0) for v in vs if v not in stat),
               "run_modes": sorted({v.run_mode for v in vs if v.run_mode}), "seconds": round(time.time() - t0, 1),
               "failures": [v.line() for v in bad[:5]]}
        print(json.dumps({k2: row[k2] for k2 in row if k2 != "failures"}), flush=True)
        rows.append(row)
    return rows


def broken_margin(n: int, seed: int) -> list[dict]:
    """Section 2: per K, the broken kernel's failing share in the exact tier (exact_wide, exact) and its
    statistical-tier ratios."""
    from conformance.core import registry
    from conformance.core.targets import parse_target
    from conformance.families import get_family

    registry.load_plugin("tests.unit.broken_accumulation")
    k, cpu = registry.get_kernel("broken_fp16_partials"), parse_target("cpu")
    stat_regimes = get_family("w4a16").tier_regimes("statistical")
    rows = []
    for K in BROKEN_K:
        row = {"K": K}
        for label, tier, regimes in (("exact_wide", "exact", ("exact_wide",)), ("exact", "exact", ("exact",)),
                                     ("statistical", "statistical", stat_regimes)):
            vs = run(draw_cases(k, cpu, tier, regimes, n, random.Random(seed + K), (K,)), k, cpu)
            by_dt = {}
            for v in vs:
                dt = "bf16" if "dt=bf16" in v.case_id else "fp16"
                f, c = by_dt.get(dt, (0, 0))
                by_dt[dt] = (f + (v.outcome == "fail"), c + 1)
            cell = {"cases": len(vs), "failed": sum(v.outcome == "fail" for v in vs),
                    "errors": sum(v.outcome == "error" for v in vs),
                    "failed_by_dtype": {dt: f"{f}/{c}" for dt, (f, c) in sorted(by_dt.items())}}
            if tier == "statistical":
                # NaN/Inf outputs (bf16 extreme_scales: partials past fp16's range) fail by the NaN/Inf rule
                cell["nonfinite_failures"] = sum("NaN/Inf" in v.detail for v in vs)
                for dt in ("fp16", "bf16"):
                    r = sorted(v.metrics["max_ratio"] for v in vs if f"dt={dt}" in v.case_id
                               and math.isfinite(v.metrics.get("max_ratio", math.nan)))
                    if r:
                        cell[f"max_ratio_{dt}"], cell[f"median_ratio_{dt}"] = round(r[-1], 4), round(r[len(r) // 2], 4)
            cell["share_failed"] = round(cell["failed"] / max(1, cell["cases"]), 4)
            row[label] = cell
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200, help="exact_wide cases per correct kernel row")
    ap.add_argument("--broken-cases", type=int, default=100, help="cases per K and tier for the broken kernel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fp16_partials_margin.json"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from conformance.core import registry

    registry.load_all()
    commit, clean = _git("rev-parse", "HEAD").strip(), _git("status", "--porcelain").strip() == ""
    t0 = time.time()
    doc = {"commit": commit, "clean": clean,
           "command": f"PYTHONPATH=. python benchmarks/probes/fp16_partials_margin.py --cases {args.cases} "
                      f"--broken-cases {args.broken_cases} --seed {args.seed}",
           "broken_kernel": "broken_fp16_partials: 32-wide block partials rounded to fp16, added in fp32, "
                            "declares fp32 accumulation",
           "correct_kernels": correct_kernels(args.cases, args.seed),
           "broken": broken_margin(args.broken_cases, args.seed)}
    doc["seconds"] = round(time.time() - t0, 1)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
