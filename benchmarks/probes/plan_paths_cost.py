"""What the CI plan's path rows cost on a CPU machine (conformance/cases/plan.py, "paths"; docs/ci-plan.md).

For triton_w4a16 and triton_w4a16_actorder (the built-in kernels with several paths in the interpreter), both
tiers, on the cpu target:
- rows by role (class, large_k, path) at run seeds 0-7: the plan's extra cases;
- CPU seconds of judging the path rows and the class rows at run seed 0, as the suite judges them (run_case,
  determinism re-run as declared), after one warm-up case per kernel, best of ROUNDS;
- CPU seconds of building every registered kernel's plans (both tiers, each kernel on its suite target, as one
  xdist worker collects them) with the path rows and with them switched off, best of ROUNDS, fresh caches.

Usage (repo root, CPU machine): python benchmarks/probes/plan_paths_cost.py [OUT.json]
The recorded figure is benchmarks/results/plan_paths_cost.json.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KERNELS = ("triton_w4a16", "triton_w4a16_actorder")
TIERS = ("exact", "statistical")
SEEDS = range(8)
ROUNDS = 3


def _clear(plan) -> None:
    for fn in (plan._build, plan._class_plan, plan._path_candidates, plan.path_entries, plan._launch):
        fn.cache_clear()


def _build_all(plan, registry, strategies, cpu) -> float:
    _clear(plan)
    t0 = time.process_time()
    for k in registry.all_kernels():
        for tier in TIERS:
            plan.build_plan(k, strategies.suite_target(k, cpu, tier), tier, seed=0)
    return time.process_time() - t0


def _judge(plan, run_case, k, cpu, cases) -> float:
    t0 = time.process_time()
    for c in cases:
        v = run_case(c, k, cpu, record=False)
        assert v.passed, v.line()
    return time.process_time() - t0


def measure() -> dict:
    from conformance.core import registry
    from conformance.core.runtime import configure_triton, interpreting

    configure_triton()
    if not interpreting():
        raise SystemExit("plan_paths_cost: run on a machine without a GPU (Triton in its interpreter)")
    registry.load_all()
    from conformance.cases import plan, strategies
    from conformance.checks.harness import run_case
    from conformance.core.targets import parse_target

    cpu = parse_target("cpu")
    rows = {}
    for name in KERNELS:
        for tier in TIERS:
            rows[f"{name} {tier}"] = {
                str(seed): {role: sum(r.role == role for r in plan.build_plan(name, cpu, tier, seed=seed).rows)
                            for role in ("class", "large_k", "path")} for seed in SEEDS}
    cost = {}
    for name in KERNELS:
        k = registry.get_kernel(name)
        for tier in TIERS:
            p = plan.build_plan(k, cpu, tier, seed=0)
            run_case(p.rows[0].case, k, cpu, record=False)  # first-call costs out of the timed rounds
            out = {}
            for role in ("class", "path"):
                cases = [r.case for r in p.rows if r.role == role]
                best = min(_judge(plan, run_case, k, cpu, cases) for _ in range(ROUNDS))
                out[role] = {"cases": len(cases), "cpu_s": round(best, 2),
                             "cpu_s_per_case": round(best / max(len(cases), 1), 4)}
            cost[f"{name} {tier}"] = out
    with_paths = min(_build_all(plan, registry, strategies, cpu) for _ in range(ROUNDS))
    add = plan._add_path_rows
    plan._add_path_rows = lambda *a, **kw: ()  # the plan as it was before paths: no path rows, no probes
    try:
        without = min(_build_all(plan, registry, strategies, cpu) for _ in range(ROUNDS))
    finally:
        plan._add_path_rows = add
        _clear(plan)
    return {"rows_per_seed": rows, "cost_seed_0": cost,
            "path_rows_seed_0": sum(v["path"]["cases"] for v in cost.values()),
            "path_rows_cpu_s_seed_0": round(sum(v["path"]["cpu_s"] for v in cost.values()), 2),
            "plan_build_cpu_s": {"with_paths": round(with_paths, 3), "without_paths": round(without, 3)}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from conformance.core import registry
    from conformance.core.tree import import_tree_package

    registry.load_all()  # sets TRITON_INTERPRET=1 on a CPU machine: triton must not be imported before
    import_tree_package("conformance_bench")
    import torch
    import triton
    from conformance_bench import provenance

    doc = {**provenance.record_fields(), "python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "rounds": ROUNDS,
           "timer": "process CPU seconds, best of the rounds", "kernels": list(KERNELS), **measure()}
    text = json.dumps(doc, indent=1)
    print(text)
    if argv:
        Path(argv[0]).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
