"""A pytest run that a test starts keeps its temporary files in this test run's tree (the root conftest's
TMP_ROOT_ENV): it neither makes a numbered directory under the machine's temporary root nor deletes one there."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[2]


def _subruns(root: Path) -> set:
    return {p.name for p in root.glob("subrun-*")}


def test_a_pytest_run_started_by_a_test_takes_its_basetemp_under_this_runs_tree(tmp_path_factory):
    mine = tmp_path_factory.getbasetemp()
    assert os.environ.get(conftest.TMP_ROOT_ENV) == str(mine)  # what the processes this test starts inherit
    before = _subruns(mine)
    # a run that collects nothing (conftest.py is no test file), without the conformance plugin (no torch import):
    # its session still starts, and so makes its temporary root
    r = subprocess.run([sys.executable, "-m", "pytest", "conftest.py", "-q", "-p", "no:cacheprovider",
                        "-p", "no:conformance.pytest_plugin"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r.stdout + r.stderr  # 5: no tests collected
    new = _subruns(mine) - before
    assert len(new) == 1, (sorted(new), r.stdout + r.stderr)


def test_a_given_basetemp_is_kept(tmp_path):
    mine = Path(os.environ[conftest.TMP_ROOT_ENV])
    before = _subruns(mine)
    base = tmp_path / "given"
    r = subprocess.run([sys.executable, "-m", "pytest", "conftest.py", "-q", "-p", "no:cacheprovider",
                        "-p", "no:conformance.pytest_plugin", "--basetemp", str(base)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r.stdout + r.stderr
    assert base.is_dir() and _subruns(mine) == before
