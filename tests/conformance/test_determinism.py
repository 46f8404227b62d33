"""Determinism across workers: under one run seed the ci profile draws the same cases, plans the same CI plan rows
and gets the same verdicts with `-n 1` and `-n 2` (pytest-xdist), compared through the merged --conformance-report
JSON of two pytest subprocesses. The seed is pinned (--conformance-seed), so the comparison does not depend on the
checkout's commit; the hypothesis draws take it (conformance.cases.seeds), as do the plan rows.

A cheap subset keeps it fast: plain-torch kernels of both families (no Triton interpreter), both tiers; the plan
rows of fp8_group_quant_cuda (torch_dequant_w4a16's ~370 and fp8_group_quant_native's ~150 plan rows are left to the
suite run itself: the same plan code, twice the subprocess cost).
fp8_group_quant_native runs on the device on a GPU, where its exact tier is unjudgeable by design (harness.
exact_tier_unjudgeable: its device_inexact_reason) and is recorded as a skip; fp8_group_quant_cuda (its model
wherever vllm._C is absent) keeps the fp8 exact tier in the comparison on every machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = "torch_dequant_w4a16,fp8_group_quant_native,fp8_group_quant_cuda"
TIERS = ("exact", "statistical")
SUITES = ["conformance/suite/test_w4a16_suite.py", "conformance/suite/test_fp8_suite.py",
          "conformance/suite/test_plan.py"]
SEED = "0x5eed"


def _run(tmp_path: Path, workers: int) -> list[dict]:
    report = tmp_path / f"report-n{workers}.json"
    cmd = [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-n", str(workers),
           "--conformance-kernels", KERNELS, "--conformance-profile", "ci", "--conformance-report", str(report),
           "--conformance-seed", SEED, "-k", "not (test_plan and (torch_dequant or fp8_group_quant_native))"]
    # each run its own cache dir: the ci example database replays (and then drops) earlier runs' failures, which
    # would give the first run cases the second does not draw
    env = dict(os.environ, CONFORMANCE_CACHE_DIR=str(tmp_path / f"cache-n{workers}"))
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    return json.loads(report.read_text())["records"]


def verdicts(records: list[dict]) -> Counter:
    """The multiset of (kernel, check, case id, outcome): what two runs must agree on, whatever the order."""
    return Counter((r["kernel"], r["check"], r["case_id"], r["outcome"]) for r in records)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("determinism")
    return {n: _run(d, n) for n in (1, 2)}


def test_same_cases_and_verdicts_with_one_and_two_workers(reports):
    one, two = verdicts(reports[1]), verdicts(reports[2])
    assert one == two, {"only with -n 1": sorted((one - two).elements())[:10],
                        "only with -n 2": sorted((two - one).elements())[:10]}


def _unjudgeable_here(name: str, tier: str) -> str | None:
    """Why the harness cannot judge `tier` for kernel `name` on this machine's own target (None: it can)."""
    from conformance.checks.harness import exact_tier_unjudgeable
    from conformance.core import registry
    from conformance.core.targets import detect_target

    registry.load_all()
    k, t = registry.get_kernel(name), detect_target()
    return exact_tier_unjudgeable(k, k.run_mode(t), t) if tier == "exact" else None


def test_the_subset_covers_both_families_and_tiers(reports):
    """The comparison is not vacuous: both tiers of both families passed, and each kernel drew and passed cases in
    both tiers, except a tier the harness declares unjudgeable for it here, whose records are skips naming why."""
    from conformance.core import registry

    registry.load_all()
    records = reports[2]
    passed = {(r["kernel"], r["check"]) for r in records if r["outcome"] == "pass"}
    names = KERNELS.split(",")
    family = {k: registry.get_kernel(k).family for k in names}
    covered = {(family[k], t) for k, t in passed}
    want = {(f, t) for f in set(family.values()) for t in TIERS}
    assert want <= covered, sorted(want - covered)
    for k in names:
        for t in TIERS:
            if (k, t) in passed:
                continue
            why = _unjudgeable_here(k, t)
            assert why is not None, f"{k} passed no {t}-tier case"
            mine = [r for r in records if (r["kernel"], r["check"]) == (k, t)]
            assert mine and all(r["outcome"] == "skip" and r["detail"] == why for r in mine), (k, t, why, mine[:3])
    assert not [r for r in records if r["outcome"] in ("fail", "error")]
    assert all(r["case_id"] for r in records)


def test_plan_rows_ran_under_the_pinned_seed(reports):
    """Both runs ran fp8_group_quant_cuda's plan rows of the pinned seed, each row once, and no other rows."""
    from conformance.cases.plan import ci_plan
    from conformance.cases.seeds import parse_seed
    from conformance.cases.strategies import suite_target
    from conformance.core import registry
    from conformance.core.targets import detect_target

    registry.load_all()
    want = Counter()
    for name in ("fp8_group_quant_cuda",):  # the plan rows the -k filter keeps
        k = registry.get_kernel(name)
        for tier in TIERS:
            want.update(c.id for c in ci_plan(k, suite_target(k, detect_target(), tier), tier,
                                              seed=parse_seed("seed", SEED)))
    for n, records in reports.items():
        got = Counter(r["case_id"] for r in records if r["case_id"] in want)
        assert got == want, (n, sorted((want - got).elements())[:5], sorted((got - want).elements())[:5])
