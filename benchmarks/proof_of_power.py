"""Measure the suite's power against the broken kernels of tests/unit/broken_kernels.py (CPU, ~5 minutes).

1. hunt: for every broken kernel and tier, how many ci-profile (derandomized) draws of the suite's strategy
   it takes until the first failing verdict, with the cap of the CI test (tests/conformance/
   test_proof_of_power.py, BUDGET) and with a larger cap (--max-examples); hypothesis's draws depend on the
   cap, so both are recorded;
2. suite: the W4A16 suite test itself (conformance/suite/test_w4a16_suite.py::test_w4a16_conformance, same
   function, so the same derandomized draws as CI: 6 examples per tier under the ci profile) called in-process
   on each broken kernel, without the shrink phase: caught or not, and at which example.

    PYTHONPATH=. python benchmarks/proof_of_power.py [--max-examples 200] [--out PATH]
Writes benchmarks/results/proof_of_power.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests.unit.broken_kernels"
BUDGET = 25  # the CI test's cap (tests/conformance/test_proof_of_power.py)


def run_hunts(caps: tuple[int, ...]) -> list[dict]:
    from conformance.core import registry

    registry.load_all()
    registry.load_plugin(PLUGIN)
    import tests.unit.broken_kernels as bk
    from tests.unit.mutant_hunt import hunt

    rows = []
    for name in bk.BROKEN:
        for tier in ("exact", "statistical"):
            row = {"kernel": name, "tier": tier, "base": bk.BASE[name],
                   "bug": " ".join((bk.BROKEN[name].__doc__ or "").split())}
            for cap in caps:
                h = hunt(name, tier, cap).to_dict()
                row[f"cap{cap}"] = {k: h[k] for k in ("examples_until_caught", "examples_run", "case_id", "outcome",
                                                       "detail", "seconds")}
                print(f"{name:34s} {tier:12s} cap {cap:4d}: caught after {h['examples_until_caught']} "
                      f"({h['seconds']:.1f} s) {h['case_id'] or ''}", flush=True)
            rows.append(row)
    return rows


def run_ci_suite_draws() -> dict:
    """test_w4a16_conformance itself, per broken kernel and tier, ci profile, no shrinking."""
    from hypothesis import Phase, settings

    from conformance.cases import profiles
    from conformance.core import results
    from conformance.core.targets import parse_target

    sys.path.insert(0, str(ROOT / "tests" / "conformance"))
    import tests.unit.broken_kernels as bk
    from conformance.suite import test_w4a16_suite as suite

    ci = profiles.load_profile("ci")
    test = settings(parent=ci.settings(), phases=[Phase.explicit, Phase.generate])(suite.test_w4a16_conformance)
    out = {}
    for name in bk.BROKEN:
        for tier in ("exact", "statistical"):
            results.drain()
            try:
                test(conformance_kernel=registry_kernel(name), conformance_tier=tier,
                     conformance_target=parse_target("cpu"), conformance_profile=ci, conformance_case=None)
            except AssertionError:
                pass
            recs = [r for r in results.drain() if r["kernel"] == name]
            first = next((i + 1 for i, r in enumerate(recs) if r["outcome"] in ("fail", "error")), None)
            out[f"{name}/{tier}"] = {"caught": first is not None, "caught_at_example": first,
                                     "examples_run": len(recs) if first is None else first,
                                     "case_id": recs[first - 1]["case_id"] if first else None}
            print(f"ci suite draws {name:34s} {tier:12s} caught at {first} of {ci.max_examples}", flush=True)
    return {"test": "conformance/suite/test_w4a16_suite.py::test_w4a16_conformance", "profile": "ci",
            "max_examples": ci.max_examples, "results": out}


def registry_kernel(name: str):
    from conformance.core import registry

    return registry.get_kernel(name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-examples", type=int, default=200)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "proof_of_power.json"))
    args = p.parse_args(argv)
    from conformance.core import registry

    registry.load_all()  # sets TRITON_INTERPRET=1 on a CPU machine: triton must not be imported before
    import hypothesis
    import torch
    import triton

    t0 = time.perf_counter()
    doc = {"what": "examples until the first failure of each broken kernel (suite strategies, ci profile draws)",
           "profile": "ci", "caps": [BUDGET, args.max_examples],
           "environment": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton.__version__, "hypothesis": hypothesis.__version__,
                           "machine": f"{platform.machine()}, {os.cpu_count()} cpus, Triton interpreter"},
           "hunts": run_hunts((BUDGET, args.max_examples))}
    doc["ci_suite_draws"] = run_ci_suite_draws()
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
