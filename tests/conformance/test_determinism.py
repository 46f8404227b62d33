"""Determinism across workers: the ci profile draws the same cases and gets the same verdicts with `-n 1` and
`-n 2` (pytest-xdist), compared through the merged --conformance-report JSON of two pytest subprocesses.

A cheap subset keeps it fast: the plain-torch kernels of both families (no Triton interpreter), both tiers.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = "torch_dequant_w4a16,fp8_group_quant_native"
SUITES = ["tests/conformance/test_w4a16_suite.py", "tests/conformance/test_fp8_suite.py"]


def _run(tmp_path: Path, workers: int) -> list[dict]:
    report = tmp_path / f"report-n{workers}.json"
    cmd = [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-n", str(workers),
           "--conformance-kernels", KERNELS, "--conformance-profile", "ci", "--conformance-report", str(report)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
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


def test_the_subset_covers_both_families_and_tiers(reports):
    """The comparison is not vacuous: each kernel drew cases in both tiers, and they passed."""
    seen = {(r["kernel"], r["check"]) for r in reports[2] if r["outcome"] == "pass"}
    want = {(k, t) for k in KERNELS.split(",") for t in ("exact", "statistical")}
    assert want <= seen, sorted(want - seen)
    assert all(r["case_id"] for r in reports[2])
