"""The dependency lock and the latest-releases lane: the lock covers every dependency pyproject.toml names, setup.sh
refuses an unknown lane in one line, and deps_drift's comparisons say what moved."""
import importlib.util
import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("deps_drift", ROOT / "scripts" / "deps_drift.py")
drift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drift)


def test_lock_pins_every_declared_dependency():
    """A dependency added to pyproject.toml without `bash scripts/lock.sh` would be missing on a fresh machine
    (setup installs the lock with --no-deps)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("dev", "interop"):
        declared += project["optional-dependencies"][extra]
    names = {drift.canonical(re.match(r"[A-Za-z0-9._-]+", d).group(0)) for d in declared}
    pins = drift.read_lock((ROOT / "requirements" / "lock.txt").read_text())
    missing = sorted(names - set(pins) - {"torch", "triton"})
    assert not missing, f"requirements/lock.txt lacks {missing}: run `bash scripts/lock.sh`"
    assert "torch" not in pins and "triton" not in pins  # setup.sh installs those only where missing
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values()), pins


def test_setup_refuses_an_unknown_lane():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env={"CONFORMANCE_DEPS": "newest",
                       "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "setup: CONFORMANCE_DEPS=newest is not a dependency lane (allowed: lock, latest)"


def test_version_moves_and_verdict_changes():
    locked = drift.read_lock("numpy==2.4.6\n    # via x\nPyYAML==6.0.4\nzeta==1.0 ; python_version<'3.12'\n")
    assert locked == {"numpy": "2.4.6", "pyyaml": "6.0.4", "zeta": "1.0"}
    seen = {"numpy": "2.5.0", "PyYAML": "6.0.4", "torch": "2.13.0", "new_pkg": "0.1", "system-only": "1.0"}
    local = {"numpy": "2.5.0", "torch": "2.13.0", "new_pkg": "0.1"}  # PyYAML and system-only: the system's site
    moves = drift.version_moves(locked, seen, local)
    assert moves == {"changed": {"numpy": {"lock": "2.4.6", "latest": "2.5.0"}}, "added": {"new-pkg": "0.1"},
                     "removed": ["zeta"]}
    xml = ("<testsuites><testsuite>"
           "<testcase classname='tests.a' name='t1'/>"
           "<testcase classname='tests.a' name='t2'><failure message='x'/></testcase>"
           "<testcase classname='tests.a' name='t3'><skipped/></testcase>"
           "<testcase classname='tests.b' name='t4'><error message='e'/></testcase>"
           "</testsuite></testsuites>")
    latest = drift.junit_verdicts(xml)
    assert latest == {"tests.a::t1": "passed", "tests.a::t2": "failed", "tests.a::t3": "skipped",
                      "tests.b::t4": "error"}
    lock = dict(latest, **{"tests.a::t2": "passed", "tests.c::t5": "passed"})
    assert drift.verdict_changes(lock, latest) == [
        {"test": "tests.a::t2", "lock": "passed", "latest": "failed"},
        {"test": "tests.c::t5", "lock": "passed", "latest": "absent"}]
