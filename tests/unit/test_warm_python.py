"""tests/warm_python.py: a command forked from a warm interpreter sees what a fresh `python` started with the same
arguments sees (argv, cwd, environment, sys.path, __main__, none of our modules, stdin, exit status, atexit), a
time limit raises subprocess's TimeoutExpired, and each start-up environment gets its own warm interpreter.
The fresh side runs code that imports nothing heavy, so each comparison costs a few hundredths of a second."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
FACTS = r"""
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran"))
unclosed = open("unclosed.txt", "w")  # flushed at exit, never closed
unclosed.write("buffered")
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
    assert (tmp_path / "unclosed.txt").read_text() == "buffered"  # the warm run's, the later one


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
                                     "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": "c", "PYTHONHASHSEED": "0"}) == (
        ("OMP_NUM_THREADS", "1"), ("PYTHONHASHSEED", "0"), ("TRITON_INTERPRET", "1"))
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


def test_a_command_with_the_other_triton_interpret_gets_triton_as_a_fresh_interpreter_does():
    """triton.language decorates its library functions when it is imported, in the mode TRITON_INTERPRET says then:
    a command run with the other value than this process's gets what a fresh interpreter gets (a GPU compile with
    interpreted library functions fails in Triton 3.9; benchmarks/probes/ptx_regs.py met it with a cold cache)."""
    code = "import triton.language as tl; print(type(tl.standard.sigmoid).__name__)"
    for value in ("0", "1"):
        cold, warm = _both([sys.executable, "-c", code], env=dict(os.environ, TRITON_INTERPRET=value))
        assert warm.stdout == cold.stdout == ("JITFunction\n" if value == "0" else "InterpretedFunction\n"), value


XDIST_PROBE = """
import os, signal, pytest

@pytest.mark.parametrize("i", range(4))
def test_where(i):
    with open(os.path.join(os.environ["WARM_OUT"], f"{os.getpid()}.ppid"), "w") as f:
        f.write(str(os.getppid()))

def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_xdist_workers_of_a_forked_pytest_start_warm_and_their_crash_is_theirs(tmp_path):
    """`pytest -n 2` forked from a warm interpreter: its workers are forked from the same warm interpreter (their
    parent), they run the tests, and a worker that dies by a signal is reported as xdist reports a crash (the
    launcher ends as its command ended, and lets go of the worker's streams)."""
    (tmp_path / "test_probe.py").write_text(XDIST_PROBE)
    env = dict(os.environ, WARM_OUT=str(tmp_path))
    cmd = [sys.executable, "-m", "pytest", "test_probe.py", "-n", "2", "-q", "-p", "no:cacheprovider",
           "-p", "no:conformance.pytest_plugin", "-p", "no:randomly"]
    r = warm_python.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    server = warm_python._pool[warm_python._startup_key(env)]
    parents = {p.read_text() for p in tmp_path.glob("*.ppid")}
    assert parents == {str(server.proc.pid)}, (parents, server.proc.pid, r.stdout[-2000:])
    assert r.returncode == 1 and "4 passed" in r.stdout, r.stdout[-2000:]
    assert "crashed while running 'test_probe.py::test_crash'" in r.stdout, r.stdout[-2000:]


def test_the_launcher_ends_as_its_command_and_falls_back_to_a_real_interpreter():
    """tests/warm_launch.py: with this process's token, the command runs in the warm interpreter of its start-up
    environment and the launcher's status is the command's (here its signal); with a token no process has, the
    launcher becomes a real interpreter (site imported, its own pid)."""
    code = "import os, sys; print(os.getppid(), os.getpid(), sys.flags.no_site, flush=True); os.kill(os.getpid(), 9)"
    warm_python.run([sys.executable, "-c", "pass"], capture_output=True)  # this environment's warm interpreter
    server = warm_python._pool[warm_python._startup_key(os.environ)]
    for token in (warm_python.TOKEN, "no-such-process"):
        p = subprocess.Popen([sys.executable, "-S", str(warm_python.LAUNCHER), token, "-c", code],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        ppid, pid, no_site = out.split()
        assert p.returncode == -9 and no_site == "0", (token, p.returncode, out, err)
        if token == warm_python.TOKEN:
            assert ppid == str(server.proc.pid) and pid != str(p.pid)
        else:
            assert pid == str(p.pid)
    # a killed launcher: the warm interpreter kills its command
    p = subprocess.Popen([sys.executable, "-S", str(warm_python.LAUNCHER), warm_python.TOKEN, "-c",
                          "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    p.kill()
    p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    """Whether `pid` runs (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
