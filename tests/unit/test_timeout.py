"""Per-case time limit (conformance.checks.timeout): a hung kernel fails its own case with a record, and the run goes
on to judge every other case and write its report. Hangs, crashes and raising gates in a `-n 2` run beside a correct
kernel (one time limit per worker process, the rest `earlier hang`) are the fault matrix's (test_fault_matrix.py)."""
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from misbehaving_kernels import HangingDequantW4A16

from conformance.cases.ids import parse_case_id
from conformance.checks import timeout
from conformance.checks.harness import run_case
from conformance.core import registry, results
from conformance.core.targets import CPU

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASE = "w4a16/{k}/M=3,N=64,K=256,g=128,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"


@pytest.fixture
def hanging(monkeypatch):
    """The hanging kernel, registered; verdicts go to a list of this test's own (`hanging.recorded`), not to the
    session's records, so the deliberate timeouts never show as failing cases of the run."""
    saved = (timeout.limit(), timeout.propagates())  # this session's own limit (the plugin set it) comes back
    timeout.forget_hangs(HangingDequantW4A16.name)  # each test sees the kernel's first hang in this process
    got = []
    monkeypatch.setattr(results, "record", lambda kernel, check, outcome, **kw: got.append(
        dict(kernel=kernel, check=check, outcome=outcome, **kw)))
    HangingDequantW4A16.recorded = got
    registry.register_kernel(HangingDequantW4A16)
    yield registry.get_kernel(HangingDequantW4A16.name)
    registry.unregister_kernel(HangingDequantW4A16.name)
    timeout.forget_hangs(HangingDequantW4A16.name)
    timeout.configure(saved[0], propagate=saved[1])


def test_hung_call_is_this_cases_error_verdict_with_replay_line(hanging):
    timeout.configure(1, propagate=False)
    case = parse_case_id(CASE.format(k=hanging.name))
    v = run_case(case, hanging, CPU)  # the kernel never returns: only the limit ends this call
    assert (v.outcome, v.detail) == ("error", "timeout after 1 s") and v.case_id == case.id
    assert "repro " + case.id in v.replay and v.line().startswith("ERROR " + case.id)
    rec = hanging.recorded
    assert [(r["kernel"], r["outcome"], r["detail"], r["case_id"]) for r in rec] == [
        (hanging.name, "error", "timeout after 1 s", case.id)]
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # the limit is gone after the call: no stray alarm


def test_after_its_first_timeout_a_kernel_fails_at_once_and_other_kernels_run(hanging):
    """One time limit per kernel per process: the hung kernel's next case is an error record naming the first
    hang's case id and replay line, without running (a run would be a second `timeout after`); another kernel's
    case still runs and passes."""
    timeout.configure(0.5, propagate=False)
    first = run_case(parse_case_id(CASE.format(k=hanging.name)), hanging, CPU)
    assert first.detail == "timeout after 0.5 s"
    second = parse_case_id(CASE.format(k=hanging.name).replace("seed=1", "seed=2"))
    v = run_case(second, hanging, CPU)
    assert v.outcome == "error" and v.case_id == second.id and "repro " + second.id in v.replay
    assert v.detail.startswith(timeout.EARLIER_HANG + ": " + hanging.name) and "timeout after" not in v.detail
    assert first.case_id in v.detail and first.replay in v.detail
    assert [r["detail"] for r in hanging.recorded] == [first.detail, v.detail]  # every case keeps its record
    timeout.configure(60, propagate=False)  # a generous limit: the other kernel must run, however busy the machine
    other = run_case(parse_case_id(CASE.format(k="torch_dequant_w4a16")), target=CPU, record=False)
    assert other.outcome == "pass", other.line()
    timeout.configure(0.5, propagate=True)  # inside pytest it propagates like a timeout: the test fails at once
    with pytest.raises(timeout.EarlierHang) as ei:
        run_case(second, hanging, CPU)
    assert isinstance(ei.value, timeout.CaseTimeout) and ei.value.verdict.detail == v.detail


def test_inside_pytest_the_timeout_propagates_and_hypothesis_does_not_shrink_it(hanging):
    timeout.configure(0.5, propagate=True)
    calls = []

    @settings(max_examples=10, database=None, deadline=None)
    @given(seed=st.integers(0, 1000))
    def prop(seed):
        calls.append(seed)
        run_case(parse_case_id(CASE.format(k=hanging.name).replace("seed=1", f"seed={seed}")), hanging, CPU)

    with pytest.raises(timeout.CaseTimeout) as ei:
        prop()
    assert len(calls) == 1  # no shrinking, no replay of the hanging case
    assert ei.value.verdict is not None and ei.value.verdict.outcome == "error"


def test_deadline_gives_back_an_outer_alarm(monkeypatch):
    # the deadline's own clock reads 100 s at arming and 103 s at disarming: the outer alarm gets 30 - 3 s back,
    # whatever the real elapsed time (no dependence on the machine's load)
    clock = iter([100.0, 103.0])
    monkeypatch.setattr(timeout, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    fired = []
    prev = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with timeout.deadline(5):
            pass
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0 < left <= 27 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev)


def test_watchdog_ends_a_process_whose_hang_python_cannot_interrupt(tmp_path):
    # a call that swallows the interruption: after limit + grace the watchdog runs the hooks and os._exit()s
    code = (
        "import time\n"
        "from conformance.checks import timeout\n"
        f"timeout.on_hang(lambda info, s: open({str(tmp_path / 'hook')!r}, 'w').write(info['case_id']))\n"
        "timeout.set_current(case_id='w4a16/k/M=1', replay='python -m conformance repro w4a16/k/M=1')\n"
        "with timeout.deadline(0.3):\n"
        "    while True:\n"
        "        try:\n"
        "            time.sleep(0.01)\n"
        "        except BaseException:\n"
        "            pass\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT,
                       env={**_env(), timeout.GRACE_ENV: "0.3"})
    assert p.returncode == timeout.EXIT_HUNG, p.stderr
    assert "ERROR w4a16/k/M=1 -- timeout after 0.3 s" in p.stderr and "Traceback" not in p.stderr
    assert (tmp_path / "hook").read_text() == "w4a16/k/M=1"


def test_repro_of_a_hanging_case_exits_1_naming_the_timeout(hanging, capsys, monkeypatch):
    from conformance import cli

    code = cli.main(["repro", CASE.format(k=hanging.name), "--timeout", "0.5", "--no-determinism"])
    out, err = capsys.readouterr()
    assert code == 1 and out.startswith("ERROR w4a16/hanging_dequant_w4a16/") and "timeout after 0.5 s" in out
    assert "Traceback" not in out + err


def _env():
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                  else []))
    return env


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_a_stopped_validate_stops_its_pytest_and_keeps_the_previous_report(tmp_path, sig):
    """SIGTERM (SIGINT is handled alike) while the suite runs a hanging kernel with no limit: validate exits
    128 + signal with one line, the pytest child's process group is gone, the previous report files are untouched
    and no temporary file is left."""
    import os

    out = tmp_path / "report"
    out.mkdir()
    for name in ("report.json", "report.html", "junit.xml"):
        (out / name).write_text(f"previous {name}\n")
    env = {**_env(), "MISBEHAVING_KERNELS": HangingDequantW4A16.name}
    p = subprocess.Popen([sys.executable, "-m", "conformance", "--plugin", "misbehaving_plugin", "validate",
                          "--target", "cpu", "--kernels", HangingDequantW4A16.name, "--timeout", "0", "-n", "0",
                          "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 90
    while not any(out.glob(".validate-*/pytest.log")) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # the pytest child is running (it hangs in the kernel from here on)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, stderr
    assert "validate: interrupted by SIGTERM" in stderr and "Traceback" not in stderr + stdout
    for name in ("report.json", "report.html", "junit.xml"):
        assert (out / name).read_text() == f"previous {name}\n"
    assert {q.name for q in out.iterdir()} <= {"report.json", "report.html", "junit.xml", "pytest.log"}
    time.sleep(0.5)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(out) in cmd and "pytest" in cmd:
            left.append(cmd)
    assert not left, left
