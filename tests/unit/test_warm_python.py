"""tests/warm_python.py: a command forked from a warm interpreter sees what a fresh `python` started with the same
arguments sees (argv, cwd, environment, sys.path, __main__, none of our modules, stdin, exit status, atexit), a
time limit raises subprocess's TimeoutExpired, and each start-up environment gets its own warm interpreter.
The fresh side runs code that imports nothing heavy, so each comparison costs a few hundredths of a second."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
FACTS = r"""
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran"))
OURS = ("conformance", "conformance_kernels", "references", "tests")
ours = sorted(m for m in sys.modules if m.split(".")[0] in OURS)
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "name": __name__, "ours": ours,
                  "env": os.environ.get("WARM_PROBE"), "c_env": os.popen("echo $WARM_PROBE").read().strip(),
                  "stdin": sys.stdin.read(), "main": sorted(k for k in globals() if not k.startswith("__"))}))
sys.exit(3)
"""


@pytest.fixture(autouse=True)
def _warm_on(monkeypatch):
    """These tests judge the warm path itself: on even where the run sends every command to a real subprocess."""
    monkeypatch.delenv(warm_python.COLD_ENV, raising=False)


def _both(cmd, **kw):
    cold = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    warm = warm_python.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    return cold, warm


@pytest.mark.parametrize("mode", ["-c", "script", "-m"])
def test_a_forked_command_sees_what_a_fresh_interpreter_sees(tmp_path, mode):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "probe.py").write_text(FACTS)
    (tmp_path / "probe_script.py").write_text(FACTS)
    cmd = {"-c": [sys.executable, "-c", FACTS, "a b", "--x"],
           "script": [sys.executable, str(tmp_path / "probe_script.py"), "a b", "--x"],
           "-m": [sys.executable, "-m", "probe", "a b", "--x"]}[mode]
    env = dict(os.environ, WARM_PROBE="42", PYTHONPATH=os.pathsep.join([str(tmp_path / "pkg"), str(ROOT)]))
    before = warm_python.stats["warm"]
    cold, warm = _both(cmd, cwd=tmp_path, env=env, input="from stdin")
    assert warm_python.stats["warm"] == before + 1  # forked, not the fallback
    assert (warm.returncode, warm.stderr) == (cold.returncode, cold.stderr) == (3, "")
    facts = [json.loads(p.stdout.splitlines()[0]) for p in (cold, warm)]
    assert facts[1] == facts[0] and facts[1]["ours"] == [] and facts[1]["stdin"] == "from stdin"
    assert warm.stdout.splitlines()[1:] == cold.stdout.splitlines()[1:] == ["atexit ran"]


def test_exit_by_exception_and_by_signal_and_a_time_limit_and_the_cpu_it_took():
    code = "import sys; print('out'); sys.stdout.flush(); raise ValueError('boom')"
    cold, warm = _both([sys.executable, "-c", code])
    assert warm.returncode == cold.returncode == 1 and warm.stdout == cold.stdout == "out\n"
    assert warm.stderr.startswith("Traceback") and warm.stderr.endswith("ValueError: boom\n")
    cold, warm = _both([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert warm.returncode == cold.returncode == -9
    with pytest.raises(subprocess.TimeoutExpired) as e:
        warm_python.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                        capture_output=True, text=True, timeout=1)
    assert e.value.output == "started\n" and e.value.timeout == 1
    # the forked command's CPU reaches this process's count (getrusage never sees it: not our child)
    before = warm_python.stats["warm_cpu_s"]
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    assert warm_python.run([sys.executable, "-c", busy], capture_output=True).returncode == 0
    assert 0.3 <= warm_python.stats["warm_cpu_s"] - before < 5


def test_one_warm_interpreter_per_start_up_environment():
    """A variable read at start-up (here the OpenMP thread count, fixed when torch loads its runtime) picks the warm
    interpreter started with it; anything else (this test's own variable, PYTHONPATH) does not; an interpreter
    option is never forked."""
    assert warm_python._startup_key({"OMP_NUM_THREADS": "1", "CONFORMANCE_X": "a", "PYTHONPATH": "p",
                                     "TRITON_INTERPRET": "1", "PYTHONHASHSEED": "0"}) == (
        ("OMP_NUM_THREADS", "1"), ("PYTHONHASHSEED", "0"))
    a = dict(os.environ)
    b = dict(a, OMP_NUM_THREADS="1") if "OMP_NUM_THREADS" not in a else {k: v for k, v in a.items()
                                                                           if k != "OMP_NUM_THREADS"}
    ppid = [sys.executable, "-c", "import os; print(os.getppid(), os.environ.get('OMP_NUM_THREADS'))"]
    runs = [warm_python.run(ppid, env=e, capture_output=True, text=True, timeout=60).stdout.split()
            for e in (a, dict(a, WARM_PROBE="x"), b)]
    assert runs[0][0] == runs[1][0] != runs[2][0], runs  # b's start-up variable: another warm interpreter
    assert runs[2][1:] == ([b["OMP_NUM_THREADS"]] if "OMP_NUM_THREADS" in b else ["None"])
    before = warm_python.stats["cold"]
    r = warm_python.run([sys.executable, "-I", "-c", "import sys; print(sys.flags.isolated)"], capture_output=True,
                        text=True, timeout=60)
    assert r.stdout == "1\n" and warm_python.stats["cold"] == before + 1
