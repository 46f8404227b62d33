"""An xdist worker whose session finished leaves with os._exit, skipping the interpreter's finalization
(conformance/plugin/exit.py); one whose session did not finish, the controller and a single process exit as before.
The probe: an object alive at exit whose finalizer writes a file, in a process that calls the plugin's hooks as
pytest does (no torch: the module imports nothing heavy)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, types
sys.path.insert(0, {root!r})
from conformance.plugin import exit as fast_exit

class Finalized:
    def __del__(self, _open=open):  # builtins may be gone at finalization
        _open({marker!r}, "w").write("finalized")

keep = Finalized()
config = types.SimpleNamespace(**({{"workerinput": {{}}}} if {worker} else {{}}))
fast_exit.pytest_configure(config)
if {finished}:
    fast_exit.pytest_sessionfinish(types.SimpleNamespace(config=config))
print("flushed", end="")
sys.exit({code})
"""


@pytest.mark.parametrize("worker,finished,fast", [(True, True, True), (True, False, False), (False, True, False)],
                         ids=["finished-worker", "unfinished-worker", "controller"])
def test_only_a_finished_worker_skips_finalization(tmp_path, worker, finished, fast):
    marker = tmp_path / "finalized"
    code = PROBE.format(root=str(ROOT), marker=str(marker), worker=worker, finished=finished, code=3)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout == "flushed"  # buffered output reaches the pipe on both paths
    assert marker.exists() is not fast, r.stderr
    # the fast path ends with 0 (the worker's results are with the controller), the ordinary one with sys.exit's
    assert r.returncode == (0 if fast else 3), r.stderr
