"""The one guarded path into a kernel (conformance.checks.guard): the source holds no direct kernel call outside it,
and the guard's conversions (exits, sticky device errors, the crash breaker, nested time limits) hold."""
from __future__ import annotations

import ast
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from fault_kernels import ExitApply, RaiseApply, SysExitLoad

from conformance.cases.ids import parse_case_id
from conformance.checks import guard, timeout
from conformance.checks.harness import run_case
from conformance.core import exits, registry, results
from conformance.core.targets import CPU

ROOT = Path(__file__).resolve().parents[2]
# what the walk reads: the suite's machinery and the CLI's bench (not the kernels themselves: conformance/adapters/
# and kernels/ implement apply; benchmarks/probes and sweeps are one-off scripts, not commands)
SCANNED = [*sorted((ROOT / "conformance").rglob("*.py")), ROOT / "benchmarks" / "bench.py",
           ROOT / "benchmarks" / "bench_run.py"]
NOT_SCANNED = {"conformance/adapters", "conformance/core/kernel.py", "conformance/checks/guard.py"}
KERNEL_CALLS = {"kernel_call", "kernel_load"}  # the API v1/v2 dispatchers of conformance.core.kernel
KERNEL_METHODS = {"apply", "model", "load", "apply_weights"}
# receivers whose .load / .apply are not a kernel's
NOT_KERNELS = {"json", "torch", "merge", "error_profile", "interpreter_fixes", "interpreter_speed", "threads", "ep",
               "tl", "pickle"}
# (file, enclosing function) -> why a direct call there is guarded all the same
ALLOWED = {
    ("conformance/checks/execution.py", "Execution.load"): "inside guard.guarded (the harness's load)",
    ("conformance/checks/execution.py", "Execution.call"): "inside guard.guarded (the harness's apply / model)",
    ("conformance/checks/contracts.py", "capture_op_call"): "inside guard.guarded",
    ("conformance/checks/contracts.py", "apply_fn.f"): "traced by make_fx / torch.compile inside run_check's guard",
    ("conformance/checks/fusion.py", "RmsNormQuantFusionPass._pattern.search"): "traced by make_fx inside run_check",
    ("conformance/checks/quant_layer.py", "RmsNormQuantLayer.quant"): "the layer's forward, compiled and run "
                                                                      "inside run_check's guard",
    ("conformance/families/w4a16.py", "W4A16Family.contract_inputs"): "contracts.build_sample runs it guarded",
    ("conformance/families/fp8_group_quant.py", "Fp8GroupQuantFamily.contract_inputs"): "build_sample guards it",
    ("conformance/families/w4a16.py", "W4A16Family.run"): "ex.load: Execution.load, guarded",
    ("conformance/families/fp8_group_quant.py", "Fp8GroupQuantFamily.run"): "ex.load: Execution.load, guarded",
    ("conformance/suite/test_catalogue.py", "_run_kernel"): "ex.load / ex.call inside guard.guarded",
    ("benchmarks/bench_run.py", "_w4a16_shape"): "timed loop of a call made guarded once",
    ("benchmarks/bench_run.py", "_fp8"): "the timed loop; every load was guard.call",
}


def direct_calls(path: Path) -> list[tuple[str, int, str]]:
    """(enclosing qualname, line, call text) of every direct kernel call in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*scope, child.name]
            if isinstance(child, ast.Call):
                fn = child.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                receiver = ast.unparse(fn.value) if isinstance(fn, ast.Attribute) else ""
                if name in KERNEL_CALLS or (name in KERNEL_METHODS and isinstance(fn, ast.Attribute)
                                            and receiver.split(".")[0] not in NOT_KERNELS):
                    found.append((".".join(scope), child.lineno, ast.unparse(child)[:80]))
            visit(child, inner)

    visit(tree, [])
    return found


def test_no_direct_kernel_call_outside_the_guard():
    """Every call of a kernel's load / apply / model (or the kernel_call / kernel_load dispatchers) in the suite's
    machinery sits in the guard or at an ALLOWED site: a new direct call fails here, naming file, line and call."""
    seen, bad = set(), []
    for path in SCANNED:
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == n or rel.startswith(n + "/") for n in NOT_SCANNED):
            continue
        for scope, line, text in direct_calls(path):
            if (rel, scope) in ALLOWED:
                seen.add((rel, scope))
            else:
                bad.append(f"{rel}:{line} in {scope or '<module>'}: {text}")
    assert not bad, "direct kernel calls outside conformance.checks.guard:\n" + "\n".join(bad)
    assert seen == set(ALLOWED), f"stale ALLOWED entries: {sorted(set(ALLOWED) - seen)}"


def test_the_walk_finds_a_direct_call(tmp_path):
    """The walk is not blind: a module calling kernel.apply, kernel_call and k.load directly is found."""
    f = tmp_path / "m.py"
    f.write_text("def run(kernel, k, ops, x):\n    kernel.apply(ops, x)\n    kernel_call(kernel, ops, x)\n"
                 "    json.load(x)\n    return k.load(ops)\n")
    assert [(s, n) for s, n, _ in direct_calls(f)] == [("run", 2), ("run", 3), ("run", 5)]


CASE = "w4a16/{k}/M=3,N=64,K=128,g=32,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"


@pytest.fixture
def kernels(monkeypatch):
    got = []
    monkeypatch.setattr(results, "record", lambda kernel, check, outcome, **kw: got.append(
        dict(kernel=kernel, check=check, outcome=outcome, **kw)))
    for cls in (ExitApply, SysExitLoad, RaiseApply):
        registry.register_kernel(cls)
    yield got
    for cls in (ExitApply, SysExitLoad, RaiseApply):
        registry.unregister_kernel(cls.name)
    guard.forget()


def test_an_exiting_kernel_is_its_cases_error_and_the_process_lives(kernels):
    v = run_case(parse_case_id(CASE.format(k=ExitApply.name)), target=CPU, check_determinism=False)
    assert v.outcome == "error" and v.detail.startswith("ExitCalled: os._exit(3) called"), v.line()
    v = run_case(parse_case_id(CASE.format(k=SysExitLoad.name)), target=CPU, check_determinism=False)
    assert v.outcome == "error" and v.detail.startswith("ExitCalled: sys.exit(4) called"), v.line()
    assert os._exit is exits.REAL_EXIT  # given back after the call
    assert [r["case_id"] for r in kernels] == [CASE.format(k=ExitApply.name), CASE.format(k=SysExitLoad.name)]


def test_crash_breaker_stops_a_kernel_after_its_crashes(kernels, tmp_path, monkeypatch):
    """With CONFORMANCE_CRASH_LIMIT crashes of a kernel noted in the run directory, its next case fails at once as
    `earlier crash: FIRST_ID`, without loading or running; another kernel's case still runs."""
    monkeypatch.setenv(guard.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(guard.CRASH_LIMIT_ENV, "2")
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(saved[0], propagate=False)  # the verdict is returned, not raised (as in repro)
    try:
        _breaker(tmp_path)
    finally:
        timeout.configure(saved[0], propagate=saved[1])


def _breaker(tmp_path):
    first = {"case_id": CASE.format(k=RaiseApply.name), "replay": "python -m conformance repro X"}
    assert guard.note_crash(RaiseApply.name, first)["crashes"] == 1
    v = run_case(parse_case_id(CASE.format(k=RaiseApply.name)), target=CPU, check_determinism=False)
    assert "kernel bug in apply" in v.detail  # one crash: still runs
    guard.note_crash(RaiseApply.name, {"case_id": "another"})
    case = CASE.format(k=RaiseApply.name).replace("seed=1", "seed=2")
    v = run_case(parse_case_id(case), target=CPU, check_determinism=False)
    assert v.outcome == "error" and v.detail.startswith(f"{guard.EARLIER_CRASH}: {first['case_id']} ("), v.detail
    assert "2 times" in v.detail and v.case_id == case
    other = run_case(parse_case_id(CASE.format(k="torch_dequant_w4a16")), target=CPU, record=False)
    assert other.outcome == "pass", other.line()
    assert json.loads((tmp_path / f"crashes-{RaiseApply.name}.json").read_text())["crashes"] == 2


def test_a_crash_is_named_by_the_inflight_file(tmp_path, monkeypatch):
    """While a guarded call runs, RUN_DIR/inflight-WID.json names its kernel and case (what the controller reads when
    the worker dies there); it is gone after the call."""
    monkeypatch.setenv(guard.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    k = registry.get_kernel("torch_dequant_w4a16")
    with guard.guarded(k, "apply", case_id="w4a16/x/M=1", replay="python -m conformance repro w4a16/x/M=1"):
        seen = guard.inflight("gw7")
    assert (seen["kernel"], seen["case_id"], seen["call"]) == (k.name, "w4a16/x/M=1", "apply")
    assert guard.inflight("gw7") is None


def test_sticky_device_error_retires_the_process_and_later_device_calls_fail_at_once(monkeypatch):
    """A sticky device error is the case's error; `retire` runs the hooks (the plugin's worker exit); without a hook
    the process refuses further device calls naming the case, and model runs still go."""
    k = registry.get_kernel("torch_dequant_w4a16")
    retired = []
    # only this test's hook: the plugin's own (an xdist worker exits there) must not end the worker running this test
    monkeypatch.setattr(guard, "_retire_hooks", {})
    guard.on_retire(retired.append, key="test")
    try:
        with pytest.raises(guard.StickyDeviceError, match="illegal memory access.*sticky device error"):
            with guard.guarded(k, "apply", case_id="c1", mode="device"):
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
        with pytest.raises(RuntimeError, match="plain bug") as ei:  # not sticky: unchanged
            with guard.guarded(k, "apply", case_id="c2", mode="device"):
                raise RuntimeError("plain bug")
        assert type(ei.value) is RuntimeError
        guard.retire({"case_id": "c1", "detail": "CUDA error", "kernel": k.name})
        assert retired == [{"case_id": "c1", "detail": "CUDA error", "kernel": k.name}]
        with pytest.raises(guard.EarlierDeviceError, match="earlier device error: c1 left the device unusable"):
            with guard.guarded(k, "apply", mode="device"):
                pass
        with guard.guarded(k, "model", mode="model"):
            pass
    finally:
        guard.on_retire(None, key="test")
        guard.forget()


def test_nested_guard_times_the_kernel_inside_an_untimed_check():
    """An untimed outer call (the compile-boundary check) leaves its inner kernel calls timed."""
    k = registry.get_kernel("torch_dequant_w4a16")
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(0.3, propagate=False)
    try:
        with pytest.raises(timeout.CaseTimeout):
            with guard.guarded(k, "compile_boundary", timed=False), guard.guarded(k, "apply"):
                import time
                time.sleep(5)
    finally:
        timeout.configure(saved[0], propagate=saved[1])
        guard.forget(k.name)


def test_a_sticky_error_no_caller_retired_is_retired_before_the_test_reports(monkeypatch):
    """A caller that records a sticky device error as a plain error (or swallows it) does not leave the process
    judging on: the plugin's report hook records it if nothing did and retires the process, before the report."""
    from conformance.plugin.state import _retire_pending_sticky

    k = registry.get_kernel("torch_dequant_w4a16")
    retired = []
    # only this test's hook: the plugin's own (an xdist worker exits there) must not end the worker running this test
    monkeypatch.setattr(guard, "_retire_hooks", {})
    guard.on_retire(retired.append, key="test")
    try:
        with results.isolated():
            for recorded in (False, True):
                retired.clear()
                with pytest.raises(guard.StickyDeviceError):
                    with guard.guarded(k, "catalogue", case_id=f"c{recorded}", replay="r", check="catalogue",
                                       mode="device"):
                        raise RuntimeError("CUDA error: device-side assert triggered")
                if recorded:  # the caller's own record (the catalogue test's): no second one
                    results.record(k.name, "catalogue", "error", case_id="cTrue", detail="StickyDeviceError: x")
                assert guard.pending_sticky()["case_id"] == f"c{recorded}"
                _retire_pending_sticky()
                assert guard.pending_sticky() is None
                assert [r["case_id"] for r in retired] == [f"c{recorded}"]
                mine = [r for r in results.records() if r["case_id"] == f"c{recorded}"]
                assert len(mine) == 1 and mine[0]["outcome"] == "error", mine
                assert recorded or "device-side assert" in mine[0]["detail"] and mine[0]["replay"] == "r"
                _retire_pending_sticky()  # nothing pending: nothing happens
                assert len(retired) == 1
                guard.forget()  # the retired (poisoned) state, before the next round
    finally:
        guard.on_retire(None, key="test")
        guard.forget()


@pytest.mark.parametrize("text", ["abc", "0", "-1", "2.5", ""])
def test_a_bad_crash_limit_is_named_not_replaced(monkeypatch, text):
    """$CONFORMANCE_CRASH_LIMIT that is not an int >= 1 is an error naming it (the plugin's usage error), never the
    default in its place."""
    from references.errors import InvalidInput

    monkeypatch.setenv(guard.CRASH_LIMIT_ENV, text)
    with pytest.raises(InvalidInput, match=f"{guard.CRASH_LIMIT_ENV}=.* is invalid; allowed: an integer >= 1"):
        guard.crash_limit()
    monkeypatch.setenv(guard.CRASH_LIMIT_ENV, "3")
    assert guard.crash_limit() == 3
    monkeypatch.delenv(guard.CRASH_LIMIT_ENV)
    assert guard.crash_limit() == guard.DEFAULT_CRASH_LIMIT


def test_a_declared_launch_runs_under_the_gate_limit_and_exits_are_caught():
    """A plugin's `launch` (asked during collection by the plan's path probe) that hangs or exits raises RuntimeError
    naming the kernel within the time limit, instead of stalling or ending the process; the default launch is
    left unwrapped."""
    import time

    from conformance.core.kernel import Kernel

    class LaunchFault(Kernel):
        name, family = "launch_fault_w4a16", "w4a16"
        mode = "hang"

        def can_implement(self, config, target):
            return None

        def launch(self, config, M, target):
            if self.mode == "exit":
                os._exit(3)
            time.sleep(5)

    class Plain(Kernel):
        name, family = "launch_plain_w4a16", "w4a16"

        def can_implement(self, config, target):
            return None

    k, plain = LaunchFault(), Plain()
    registry._contain(k)
    registry._contain(plain)
    assert "launch" not in vars(plain)  # nothing to limit: the default answers None
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(0.3, propagate=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="kernel 'launch_fault_w4a16': launch raised CaseTimeout"):
            k.launch(None, 1, CPU)
        assert time.monotonic() - t0 < 3
        k.mode = "exit"
        with pytest.raises(RuntimeError, match="launch raised ExitCalled"):
            k.launch(None, 1, CPU)
    finally:
        timeout.configure(saved[0], propagate=saved[1])


def _small_config():
    """A W4A16 layer config the guard tests' stand-in kernels are asked about."""
    from conformance.families.w4a16 import W4A16Config

    return W4A16Config(weight_type="uint4b8", group_size=32, act_order=False, dtype="float16", format="gptq_v2",
                       N=64, K=128)


def test_a_path_probe_arms_the_limit_once_and_a_hang_in_it_names_the_kernel(monkeypatch):
    """The plan's path probe of one config (plan.path_entries: a walk of PATH_PROBE_M and a bisection, ~10 launches)
    runs under one time limit (registry.launch_probe), not one per launch: the limit is armed once for the probe.
    A launch that hangs inside it still raises the RuntimeError naming the kernel, within the limit."""
    import time

    from conformance.cases import plan as planlib
    from conformance.core.kernel import Kernel
    from conformance.core.launch import Launch

    class Paths(Kernel):
        name, family = "probe_paths_w4a16", "w4a16"
        hang_at = None

        def can_implement(self, config, target):
            return None

        def launch(self, config, M, target):
            if M == self.hang_at:
                time.sleep(5)
            return Launch(path="gemv" if M == 1 else "small" if M <= 6 else "tiles")

    armed = []  # the gate limits started: the outermost gate_deadline of each call or batch of calls
    real = timeout.gate_deadline.__enter__

    def counted(self):
        out = real(self)
        if self.inner is not None or self.standing:
            armed.append(1)
        return out

    monkeypatch.setattr(timeout.gate_deadline, "__enter__", counted)
    k = Paths()
    registry._contain(k)
    config = _small_config()
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(0.3, propagate=False)
    try:
        assert planlib.path_entries(k, CPU, config) == (("gemv", 1), ("small", 2), ("tiles", 7))
        assert len(armed) == 1, len(armed)  # one limit for the probe's launches (each alone: one per launch)
        k.hang_at, t0 = 33, time.monotonic()
        with pytest.raises(RuntimeError, match="kernel 'probe_paths_w4a16': launch raised CaseTimeout"):
            planlib.path_entries(k, CPU, replace(config, N=128))
        assert time.monotonic() - t0 < 3
    finally:
        timeout.configure(saved[0], propagate=saved[1])


def test_device_setup_runs_before_the_time_limit_once_per_process(monkeypatch):
    """A process's first device call sets up the device runtime (context, BLAS handle) outside the per-call limit:
    a setup slower than the limit (a GPU host busy with other processes) is no hang of the kernel. Once per process,
    and not for a model run. Simulated here: torch sees a device, none is set up, and the setup takes 0.6 s."""
    import time

    import torch

    made, ones = [], torch.ones

    def slow_ones(*shape, device=None, dtype=None):
        made.append(device)
        time.sleep(0.6)
        return ones(*shape, dtype=dtype)

    monkeypatch.setattr(guard, "_device_set_up", [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch, "ones", slow_ones)
    k = registry.get_kernel("torch_dequant_w4a16")
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(0.3, propagate=False)
    try:
        with guard.guarded(k, "model", mode="model"):
            pass
        assert made == []  # a model run is plain torch on the CPU: no device setup
        with guard.guarded(k, "apply", case_id="c1", mode="device"):
            pass  # no CaseTimeout: the 0.6 s setup was not timed
        with guard.guarded(k, "apply", case_id="c2", mode="device"):
            pass
        assert made == ["cuda"]
    finally:
        timeout.configure(saved[0], propagate=saved[1])
        guard.forget()


def test_a_gate_batch_remembers_answers_and_keeps_each_calls_limit():
    """registry.gate_batch (a plan being built): a gate asked again with the same arguments answers without running
    (each scope its own answers); its calls share one standing alarm, yet each keeps its own limit (two calls of
    0.2 s under a 0.3 s limit both pass, a hang is a refusal within the limit) and no alarm outlives the scope.
    Another alarm pending (pytest-timeout's, say) is given back, as outside a batch."""
    import signal
    import time

    from conformance.core.kernel import Kernel

    class Counted(Kernel):
        name, family = "batch_counted_w4a16", "w4a16"
        sleep_s, runs = 0.0, 0

        def can_implement(self, config, target):
            self.runs += 1
            time.sleep(self.sleep_s)
            return None if config.N < 1000 else "too wide"

    k = Counted()
    registry._contain(k)
    c = _small_config()
    saved = (timeout.limit(), timeout.propagates())
    timeout.configure(0.3, propagate=False)
    try:
        with registry.gate_batch():
            assert [k.can_implement(c, CPU) for _ in range(3)] == [None] * 3
            assert k.can_implement(replace(c, N=1024), CPU) == "too wide" and k.runs == 2  # asked once each
            k.sleep_s = 0.2  # younger than the alarm armed by the first: each still gets its 0.3 s
            assert k.can_implement(replace(c, N=128), CPU) is None and k.can_implement(replace(c, N=256), CPU) is None
            assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # the standing alarm
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # gone with the scope
        with registry.gate_batch():
            k.sleep_s, t0 = 5, time.monotonic()
            assert "gate raised CaseTimeout" in k.can_implement(replace(c, N=512), CPU)
            assert time.monotonic() - t0 < 2
        registry._GATE_HUNG.discard(k.name)
        k.sleep_s, runs = 0.0, k.runs
        k.can_implement(c, CPU)
        assert k.runs == runs + 1  # outside the scope: asked every time
        fired = []
        prev = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
        signal.setitimer(signal.ITIMER_REAL, 5)  # someone else's alarm: per call, and given back
        try:
            with registry.gate_batch():
                assert k.can_implement(replace(c, N=16), CPU) is None
            assert 4 < signal.getitimer(signal.ITIMER_REAL)[0] <= 5 and not fired
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, prev)
    finally:
        registry._GATE_HUNG.discard(k.name)
        registry._GATE_FAULTS.pop(k.name, None)
        timeout.configure(saved[0], propagate=saved[1])
