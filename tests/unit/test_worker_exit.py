"""A finished pytest-xdist worker and a finished pytest command-line process leave with os._exit, skipping the
interpreter's finalization (conformance/plugin/exit.py), with the code pytest would return; an unfinished session
and pytest run in-process from other code exit as before. The probe: an object alive at exit whose finalizer
writes a file, in a process that calls the plugin's hooks as pytest does (no torch: the module imports nothing
heavy)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, types
sys.path.insert(0, {root!r})
sys.argv[:] = {argv!r}
from conformance.plugin import exit as fast_exit

class Finalized:
    def __del__(self, _open=open):  # builtins may be gone at finalization
        _open({marker!r}, "w").write("finalized")

keep = Finalized()
params = types.SimpleNamespace(args=("-q", "tests"))
config = types.SimpleNamespace(invocation_params=params, **({{"workerinput": {{}}}} if {worker} else {{}}))
fast_exit.pytest_configure(config)
session = types.SimpleNamespace(config=config, exitstatus=1)
fast_exit.pytest_sessionstart(session)
if {finished}:
    fast_exit.pytest_unconfigure(config)
print("flushed", end="")
sys.exit(3)
"""
CLI = ["/venv/bin/pytest", "-q", "tests"]
CASES = {  # worker, argv, finished -> the exit code, and whether finalization was skipped
    "finished-worker": (True, ["-c"], True, 0, True),
    "unfinished-worker": (True, ["-c"], False, 3, False),
    "finished-command-line": (False, CLI, True, 1, True),
    "unfinished-command-line": (False, CLI, False, 3, False),
    "pytest.main-from-code": (False, ["/venv/bin/other", "-q", "tests"], True, 3, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_only_a_finished_process_of_its_own_skips_finalization(tmp_path, name):
    worker, argv, finished, code, fast = CASES[name]
    marker = tmp_path / "finalized"
    src = PROBE.format(root=str(ROOT), argv=argv, marker=str(marker), worker=worker, finished=finished)
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=60)
    assert r.stdout == "flushed"  # buffered output reaches the pipe on both paths
    assert marker.exists() is not fast, r.stderr
    assert r.returncode == code, r.stderr
