"""Determinism across workers: under one run seed the ci profile draws the same cases, plans the same CI plan rows
and gets the same verdicts in one process (`pytest -n 0`) and on two pytest-xdist workers, compared through their
JSON reports. The two-worker run is `validate -n 2` (the README's main job: a pytest subprocess with a controller and
two workers), so the same run also checks validate's merge: every record a worker made reaches the report, whose
files are all written. The seed is pinned (--conformance-seed), so the comparison does not depend on the checkout's
commit; the hypothesis draws take it (conformance.cases.seeds), as do the plan rows.

A cheap subset keeps it fast: plain-torch kernels of both families (no Triton interpreter), both tiers; the plan
rows of fp8_group_quant_cuda (torch_dequant_w4a16's ~370 and fp8_group_quant_native's ~150 plan rows are left to the
suite run itself: the same plan code, twice the subprocess cost).
fp8_group_quant_native runs on the device on a GPU, where its exact tier is unjudgeable by design (harness.
exact_tier_unjudgeable: its device_inexact_reason) and is recorded as a skip; fp8_group_quant_cuda (its model
wherever vllm._C is absent) keeps the fp8 exact tier in the comparison on every machine.

Each run gets its own cache directory (CONFORMANCE_CACHE_DIR): the user cache holds other runs' failed plan cases and
hypothesis examples, which a run replays first and then drops when they pass, so with a shared cache the first run
would judge cases the second does not.
"""
from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
# one worker for this module's tests under --dist loadgroup (the plugin's choice on a GPU host): each worker that
# runs one of them builds the module's `runs` fixture, two subprocess runs (on an H200 the four tests ran on four
# workers, each paying the runs)
pytestmark = pytest.mark.xdist_group("determinism")
KERNELS = "torch_dequant_w4a16,fp8_group_quant_native,fp8_group_quant_cuda"
TIERS = ("exact", "statistical")
SUITES = ["conformance/suite/test_w4a16_suite.py", "conformance/suite/test_fp8_suite.py",
          "conformance/suite/test_plan.py"]
SEED = "0x5eed"
K_FILTER = "not (test_plan and (torch_dequant or fp8_group_quant_native))"


def _private_env(tmp_path: Path, name: str) -> dict:
    """This test's variables for a run: its own cache directory (see the module docstring)."""
    return {"CONFORMANCE_CACHE_DIR": str(tmp_path / f"cache-{name}")}


def _one_process(tmp_path: Path) -> list[dict]:
    """`pytest -n 0` on the subset: its JSON report's records."""
    report = tmp_path / "report-n0.json"
    cmd = [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-n", "0",
           "--conformance-kernels", KERNELS, "--conformance-profile", "ci", "--conformance-report", str(report),
           "--conformance-seed", SEED, "-k", K_FILTER]
    env = dict(os.environ, **_private_env(tmp_path, "n0"))
    r = warm_python.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    return json.loads(report.read_text())["records"]


def _two_workers(out: Path) -> tuple[dict, int]:
    """`validate -n 2` on the same subset (the -k filter reaches its pytest through PYTEST_ADDOPTS)."""
    from conformance.cases.seeds import parse_seed
    from conformance.core.targets import detect_target
    from conformance.reports.validate import validate

    with pytest.MonkeyPatch.context() as mp:
        for name, value in _private_env(out.parent, "n2").items():
            mp.setenv(name, value)
        mp.setenv("PYTEST_ADDOPTS", f"-k '{K_FILTER}'")
        return validate(detect_target(), kernels=KERNELS, out_dir=out, workers=2, paths=[ROOT / s for s in SUITES],
                        seed=parse_seed("seed", SEED))


def verdicts(records: list[dict]) -> Counter:
    """The multiset of (kernel, check, case id, outcome): what two runs must agree on, whatever the order."""
    return Counter((r["kernel"], r["check"], r["case_id"], r["outcome"]) for r in records)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("determinism")
    doc, code = _two_workers(d / "validate")
    return {"n0": _one_process(d), "validate": (doc, code, d / "validate")}


@pytest.fixture(scope="module")
def reports(runs):
    """The records of each run: 1 (one process) and 2 (two xdist workers)."""
    return {1: runs["n0"], 2: runs["validate"][0]["records"]}


def test_same_cases_and_verdicts_with_one_and_two_workers(reports):
    one, two = verdicts(reports[1]), verdicts(reports[2])
    assert one == two, {"only with -n 0": sorted((one - two).elements())[:10],
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


def _plan_ids() -> Counter:
    """The case ids of fp8_group_quant_cuda's plan rows under the pinned seed, both tiers (the rows the -k filter
    keeps)."""
    from conformance.cases.plan import ci_plan
    from conformance.cases.seeds import parse_seed
    from conformance.cases.strategies import suite_target
    from conformance.core import registry
    from conformance.core.targets import detect_target

    registry.load_all()
    want = Counter()
    k = registry.get_kernel("fp8_group_quant_cuda")
    for tier in TIERS:
        want.update(c.id for c in ci_plan(k, suite_target(k, detect_target(), tier), tier,
                                          seed=parse_seed("seed", SEED)))
    return want


def test_plan_rows_ran_under_the_pinned_seed(reports):
    """Both runs ran fp8_group_quant_cuda's plan rows of the pinned seed, each row once, and no other rows."""
    want = _plan_ids()
    for n, records in reports.items():
        got = Counter(r["case_id"] for r in records if r["case_id"] in want)
        assert got == want, (n, sorted((want - got).elements())[:5], sorted((got - want).elements())[:5])


def test_validate_with_two_workers_loses_no_record(runs):
    """validate -n 2: the merge keeps every record the processes made (each xdist worker reports how many it made),
    each hypothesis suite test drew 1 to max_examples cases, every suite test is in junit.xml and passed (a skip
    mid-test would cut its records short; only a tier unjudgeable here may skip), and the report says PASS."""
    from conformance.cases.profiles import get_profile
    from conformance.core.targets import detect_target

    doc, code, out = runs["validate"]
    assert code == 0, doc.get("problem") or doc["summary"]
    saved = json.loads((out / "report.json").read_text())
    recs = saved["records"]
    produced = saved["records_produced"]
    assert isinstance(produced, int) and produced > 0 and len(recs) == produced
    plan_ids = _plan_ids()
    names = KERNELS.split(",")
    per_test = Counter((r["kernel"], r["check"]) for r in recs if r["case_id"] not in plan_ids)
    assert set(per_test) == {(k, t) for k in names for t in TIERS}
    assert all(1 <= n <= get_profile("ci").max_examples for n in per_test.values()), per_test
    cases = list(ET.parse(out / "junit.xml").getroot().iter("testcase"))
    assert len(cases) == len(names) * len(TIERS) + sum(plan_ids.values()), len(cases)
    assert all(c.find(t) is None for c in cases for t in ("failure", "error"))
    for c in cases:
        if c.find("skipped") is not None:
            kernel, tier = c.get("name").split("[")[1].rstrip("]").split("-")[:2]
            assert _unjudgeable_here(kernel, tier) is not None, c.get("name")
    n_checks = doc["summary"]["n_checks"]
    assert n_checks == len(names) * len(TIERS), doc["summary"]["cells"]
    assert f"PASS: {len(names)} kernels, {n_checks} checks, 0 failures" in (out / "report.html").read_text()
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html", "junit.xml", "pytest.log"}
    here = str(detect_target())
    assert saved["environment"]["target"] == here and saved["coverage"]["target"] == here
    assert "-n 2" in saved["command"]
