"""Measure the CI plan's power against the broken kernels of tests/unit/broken_registry.py, over several run seeds.

For every numeric broken kernel and run seed: the 1-based position of the first failing row of its CI plan (both
tiers side by side, in plan order: tests/unit/mutant_hunt.py; rows a one-path bug cannot reach are left out), the
killing case id and its path, and any `error` (not a kill); per kernel the kill rate over the seeds (it must be
100%). Every contract mutant is run through the contract check that must fail it. The JSON records the commit,
whether the tree was clean, the kernel digest and the environment; docs/proof-of-power.md's table is generated:

    PYTHONPATH=. python benchmarks/proof_of_power.py [--seeds 0 1 2 3 4 5 6 7] [--out PATH]   # measure (CPU)
    PYTHONPATH=. python benchmarks/proof_of_power.py --write-docs     # regenerate the docs table from the JSON
    PYTHONPATH=. python benchmarks/proof_of_power.py --check-docs     # exit 1 when the docs table differs

The first seed is the CI test's (tests/conformance/test_proof_of_power.py, SEED).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "proof_of_power.json"
DOCS = ROOT / "docs" / "proof-of-power.md"
SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)  # SEEDS[0] is the CI test's run seed
BEGIN = ("<!-- proof-of-power table: generated from benchmarks/results/proof_of_power.json by "
         "`PYTHONPATH=. python benchmarks/proof_of_power.py --write-docs`; do not edit -->")
END = "<!-- end of the generated proof-of-power table -->"


def _provenance() -> dict:
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import provenance

    return dict(provenance.code_identity(), kernel_digest=provenance.kernel_digest())


def measure_numeric(reg: dict, seeds, log=print) -> list[dict]:
    """One row per numeric broken kernel: its hunt at every seed."""
    from tests.unit.mutant_hunt import hunt

    rows = []
    for b in sorted(reg.values(), key=lambda b: (b.module, b.name)):
        if not b.numeric:
            continue
        runs = []
        for seed in seeds:
            # a bug one path (format, dtype) runs: the rows it cannot reach are left out (they run shipped code)
            h = hunt(b.name, seed, only=b.reaches if b.confined else None).to_dict()
            runs.append({k: h[k] for k in ("seed", "position", "rows_run", "rows_skipped", "plan_rows", "case_id",
                                           "kill_path", "kill_role", "tier", "detail", "error", "seconds")})
            log(f"{b.name:40s} seed {seed}: row {h['position']} ({h['rows_run']} run, {h['seconds']:.1f} s)"
                + (f" ERROR {h['error'][:200]}" if h["error"] else ""))
        positions = [r["position"] for r in runs if r["position"] is not None]
        rows.append({"kernel": b.name, "module": b.module, "base": b.base, "bug": b.bug, "kill": b.kill,
                     "path": b.path, "formats": b.formats, "dtypes": b.dtypes,
                     "runs": runs, "kill_rate": len(positions) / len(runs),
                     "median_position": statistics.median(positions) if positions else None,
                     "max_position": max(positions) if positions else None})
    return rows


def measure_contract(reg: dict, log=print) -> list[dict]:
    """One row per contract mutant: does the check that must kill it report a failure (ContractFailure)?"""
    from conformance.checks import contracts
    from conformance.core import registry, results
    from tests.unit.broken_registry import contract_check

    rows = []
    record = results.record
    results.record = lambda *a, **kw: {}  # deliberate failures stay out of any report
    try:
        for b in sorted(reg.values(), key=lambda b: (b.module, b.name)):
            if b.numeric:
                continue
            t0 = time.perf_counter()
            k = registry.get_kernel(b.name)
            try:
                contracts.run_check(b.kill, k, contract_check(b.kill, k))
                outcome, detail = "pass", "the check passed: the mutant survived"
            except contracts.ContractFailure as e:
                outcome, detail = "fail", str(e)
            except Exception as e:  # noqa: BLE001 - an error is recorded as such, never as a kill
                outcome, detail = "error", f"{type(e).__name__}: {e}"
            rows.append({"kernel": b.name, "module": b.module, "base": b.base, "bug": b.bug, "kill": b.kill,
                         "outcome": outcome, "detail": " ".join(detail.split())[:300],
                         "seconds": round(time.perf_counter() - t0, 2)})
            log(f"{b.name:40s} {b.kill}: {outcome}")
    finally:
        results.record = record
    return rows


def measure(seeds) -> dict:
    from conformance.core import registry

    registry.load_all()  # sets TRITON_INTERPRET=1 on a CPU machine: triton must not be imported before
    import hypothesis
    import torch
    import triton

    from conformance.core.targets import detect_target
    from tests.unit import broken_registry

    t0 = time.perf_counter()
    reg = broken_registry.load()
    try:
        numeric = measure_numeric(reg, seeds)
        contract = measure_contract(reg)
    finally:
        broken_registry.unload()
    per_seed = {}
    for i, seed in enumerate(seeds):
        pos = [r["runs"][i]["position"] for r in numeric]
        med = statistics.median(p if p is not None else float("inf") for p in pos)  # a survivor counts as last
        per_seed[str(seed)] = {"median_position": None if med == float("inf") else med,
                               "killed": sum(p is not None for p in pos), "kernels": len(pos)}
    return {"what": "first failing CI-plan row of each numeric broken kernel per run seed (both tiers side by side, "
                    "in plan order; only a fail kills), and the contract check of each contract mutant",
            "command": "PYTHONPATH=. python benchmarks/proof_of_power.py --seeds " + " ".join(map(str, seeds)),
            "provenance": _provenance(), "target": str(detect_target()), "seeds": list(seeds),
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "triton": triton.__version__, "hypothesis": hypothesis.__version__,
                            "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                            "triton_interpret": os.environ.get("TRITON_INTERPRET", "")},
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "numeric": numeric, "contract": contract, "per_seed": per_seed,
            "seconds": round(time.perf_counter() - t0, 1)}


# ---- the docs table ------------------------------------------------------------------------------------------------

def _kind(module: str) -> str:
    return module.rsplit(".", 1)[-1].removeprefix("broken_")


def _path(r: dict) -> str:
    """The path column: the path the bug breaks ("every": all of them), with the formats / dtypes it breaks there."""
    only = [*(r.get("formats") or ()), *(r.get("dtypes") or ())]
    return r.get("path", "every") + (f" ({', '.join(only)})" if only else "")


def render(doc: dict) -> str:
    """The generated block of docs/proof-of-power.md (markers included), from the JSON alone."""
    prov, seeds = doc["provenance"], doc["seeds"]
    state = {True: "clean tree", False: "uncommitted changes", None: "tree state unknown"}[prov.get("clean")]
    numeric, contract = doc["numeric"], doc["contract"]
    medians = ", ".join(f"{s}: {v['median_position']}" for s, v in doc["per_seed"].items())
    out = [BEGIN, "",
           f"Measured {doc['time_utc']} at commit {str(prov.get('commit'))[:12]} ({state}), kernel digest "
           f"{prov.get('kernel_digest')}, on {doc['target']} ({doc['environment']['machine']}; torch "
           f"{doc['environment']['torch']}, triton {doc['environment']['triton']}), run seeds {seeds} "
           f"({doc['seconds']} s). Numeric broken kernels: {len(numeric)}, killed at every seed: "
           f"{sum(r['kill_rate'] == 1.0 for r in numeric)}. Median first failing row per seed: {medians}.", "",
           "| broken kernel | kind | base | path | the one bug | kill rate | first failing row per seed | median | "
           f"killing case (seed {seeds[0]}) |",
           "|---|---|---|---|---|---:|---|---:|---|"]
    path_rows = []  # kills by a path row: no class or large-K row of either tier killed the kernel there
    for r in numeric:
        rows = " ".join("x" if run["position"] is None else str(run["position"]) for run in r["runs"])
        first = r["runs"][0]
        case = f"`{first['case_id']}`" if first["case_id"] else f"not killed: {first['error'] or 'survived'}"
        if first["case_id"] and first.get("kill_path"):
            case += f" ({first['kill_path']}, {first.get('kill_role')} row)"
        rate = f"{round(100 * r['kill_rate'])}%"
        out.append(f"| `{r['kernel']}` | {_kind(r['module'])} | {r['base']} | {_path(r)} | {r['bug']} | {rate} | "
                   f"{rows} | {r['median_position']} | {case} |")
        by_path = [str(run["seed"]) for run in r["runs"] if run.get("kill_role") == "path"]
        if by_path:
            path_rows.append(f"`{r['kernel']}` at seeds {', '.join(by_path)}")
    if path_rows:
        out += ["", "Killed first by a path row (no class or large-K row of either tier killed it at that seed): "
                + "; ".join(path_rows) + "."]
    out += ["", "| contract mutant | base | the one bug | the check that must fail it | outcome |",
            "|---|---|---|---|---|"]
    for r in contract:
        out.append(f"| `{r['kernel']}` | {r['base']} | {r['bug']} | `{r['kill']}` | {r['outcome']} |")
    return "\n".join(out + ["", END])


def current_block(text: str) -> str:
    """The docs block between the markers (markers included); ValueError when they are missing or out of order."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"{DOCS}: no generated block (lines {BEGIN!r} ... {END!r})")
    return text[i:j + len(END)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="run seeds (default: %(default)s)")
    p.add_argument("--out", default=str(RESULT), help="the JSON to write or read (default: %(default)s)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write-docs", action="store_true", help="regenerate the docs table from the JSON (no run)")
    mode.add_argument("--check-docs", action="store_true", help="exit 1 when the docs table is not the JSON's")
    args = p.parse_args(argv)
    if args.write_docs or args.check_docs:
        block = render(json.loads(Path(args.out).read_text()))
        text = DOCS.read_text()
        if args.check_docs:
            same = current_block(text) == block
            print("docs table is current" if same else f"{DOCS} differs from the table generated from {args.out}")
            return 0 if same else 1
        DOCS.write_text(text.replace(current_block(text), block, 1))
        print(f"wrote the table of {DOCS}")
        return 0
    if any(s < 0 for s in args.seeds):
        p.error(f"--seeds {args.seeds}: run seeds are non-negative ints")
    sys.path.insert(0, str(ROOT))
    doc = measure(tuple(args.seeds))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
