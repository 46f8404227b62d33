"""The project as a user installs it: build a wheel (offline), install it into a scratch directory, and run
`python -m conformance validate` from that installed copy, outside the checkout.

The installed copy is put first on PYTHONPATH so it shadows the editable install of this checkout (whose
finder comes after sys.path); a decoy `kernels` package beside it stands for the unrelated PyPI `kernels`
hub, which must never be mistaken for our kernels (`conformance_kernels`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "conformance", "references", "kernels", "benchmarks")
KERNEL = "fp8_group_quant_native"  # plain torch with the cheapest CI plan (~5 ms a case; torch_dequant_w4a16 plans
# ~370 rows, ~40 s on 2 cores)


def _run(cmd, *, cwd, env=None, timeout=240) -> subprocess.CompletedProcess:
    p = warm_python.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built offline from a copy of the sources (the build writes build/ and *.egg-info beside its
    sources: a copy keeps them out of the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", "*.egg-info")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=ignore)
        else:
            shutil.copy2(p, src / name)
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
          "-q", "-w", str(tmp / "dist")], cwd=tmp)
    (whl,) = (tmp / "dist").glob("*.whl")
    return whl


def test_the_wheel_holds_the_package_data_and_the_suite(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"conformance_kernels/tiles/{p.name}" for p in (ROOT / "kernels" / "tiles").glob("*.json")}
    want |= {f"conformance/reports/templates/{p.name}" for p in (ROOT / "conformance/reports/templates").glob("*.j2")}
    want |= {f"conformance/suite/{p.name}" for p in (ROOT / "conformance" / "suite").glob("*.py")}
    assert any(w.startswith("conformance_kernels/tiles/") for w in want), "no tile table in the checkout?"
    assert any(w.endswith(".j2") for w in want), "no report template in the checkout?"
    # every package of the checkout (a directory with __init__.py) and the compile lane's HIP header shim
    for init in (ROOT / "conformance").rglob("__init__.py"):
        want |= {str(p.relative_to(ROOT)) for p in init.parent.glob("*.py")}
    shim = ROOT / "conformance/compile/hip_shim"
    want |= {str(p.relative_to(ROOT)) for p in shim.rglob("*.h")}
    assert any(w.startswith("conformance/compile/hip_shim/hip/") for w in want), "no HIP shim in the checkout?"
    assert want <= names, f"missing from {wheel.name}: {sorted(want - names)}"
    assert "conformance_bench/bench.py" in names and "references/gemm.py" in names
    assert not any(n.startswith(("kernels/", "benchmarks/", "tests/")) for n in names), \
        "the trees must be installed as conformance_kernels / conformance_bench only"


def test_validate_runs_from_the_installed_wheel(wheel, tmp_path):
    site, cwd, out = tmp_path / "site", tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
          str(wheel)], cwd=tmp_path)
    decoy = site / "kernels"  # as if the PyPI `kernels` hub were installed in the same site-packages
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy kernels package was imported')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CONFORMANCE_", "PYTHON"))}
    # the suite's regression and fusion modules run their own kernels whatever --kernels says (~30 s on 2 cores), and
    # the plan's rows repeat what the checkout's run covers: collected (so imported from the installed copy), not run
    env.update(PYTHONPATH=str(site), PYTEST_ADDOPTS="-k 'not test_regressions and not test_fusion and not test_plan'")
    # this test's own cache dir (remembered failures and examples stay here); inductor's compile cache is the user's,
    # as in the checkout's own run (a cold compile costs ~20 s)
    from conformance.core.tree import cache_dir

    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir("inductor") / "inductor"))
    env["CONFORMANCE_CACHE_DIR"] = str(tmp_path / "cache")

    # one process (a fresh torch import costs ~4 s): where the imports come from, then `python -m conformance
    # validate` itself (runpy runs the installed conformance/__main__.py as -m does)
    probe = ("import json, runpy, sys, conformance, conformance.suite\n"
             "from conformance.core import registry\n"
             "registry.load_all()\n"
             "import conformance_kernels.triton_w4a16 as tw\n"
             "print('PROBE ' + json.dumps([conformance.__file__, conformance.suite.__file__,"
             " tw.__file__, sorted(k.name for k in registry.all_kernels())]), flush=True)\n"
             f"sys.argv = ['conformance', 'validate', '--kernels', {KERNEL!r}, '--out', {str(out)!r}, '-n', '0']\n"
             "runpy.run_module('conformance', run_name='__main__', alter_sys=True)\n")
    p = _run([sys.executable, "-c", probe], cwd=cwd, env=env)
    files = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("PROBE "))[len("PROBE "):])
    kernels = files.pop()
    for f in files:
        assert Path(f).resolve().is_relative_to(site.resolve()), f"{f} is not the installed copy under {site}"
    assert KERNEL in kernels and "triton_w4a16" in kernels and "torch_dequant_w4a16" in kernels, kernels

    assert (out / "report.html").stat().st_size > 0, p.stdout
    doc = json.loads((out / "report.json").read_text())
    assert doc["exit_code"] == 0 and doc["pytest_exit_code"] == 0, doc.get("problem")
    suite_dir = str((site / "conformance" / "suite").resolve())
    assert suite_dir in doc["command"] and "-p conformance.pytest_plugin" in doc["command"], doc["command"]
    mine = [r for r in doc["records"] if r["kernel"] == KERNEL]
    assert {r["check"] for r in mine} >= {"exact", "statistical"}, sorted({r["check"] for r in mine})
    # on a GPU the kernel runs on the device, where its exact tier is unjudgeable by design (device_inexact_reason):
    # those records are skips that say why
    from conformance.checks.harness import exact_tier_unjudgeable
    from conformance.core import registry
    from conformance.core.targets import detect_target

    registry.load_all()
    k, here = registry.get_kernel(KERNEL), detect_target()
    why = exact_tier_unjudgeable(k, k.run_mode(here), here)
    assert all(r["outcome"] == "pass" or (r["outcome"] == "skip" and r["check"] == "exact" and why
                                          and r["detail"] == why) for r in mine), \
        [r for r in mine if r["outcome"] != "pass"][:3]
    assert any(r["outcome"] == "pass" for r in mine)
    assert KERNEL in (out / "report.html").read_text()
    assert not (cwd / "report").exists() and not list(cwd.iterdir()), "validate wrote into the current directory"
