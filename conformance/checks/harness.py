"""Run one Case against one kernel: the gate and run mode are judged here; the case's family builds the data
from the seed, loads, calls the kernel through an `Execution` (apply or model) and compares (`Family.run`).

    run_case(case, kernel=None, target="cpu", *, check_determinism=True, record=True) -> Verdict

`kernel` defaults to case.kernel (a name or registry.Kernel); `target` is a Target or a name ("auto"
detects). The verdict's outcome is "pass", "fail", "skip" (the gate refuses, or the kernel cannot run
here and has no model) or "error" (the kernel raised). Every verdict goes to conformance.results.record.

Hygiene: the kernel runs under torch.use_deterministic_algorithms(True, warn_only=True) with
torch.utils.deterministic.fill_uninitialized_memory = True, so every torch.empty/new_empty the kernel
allocates is NaN-filled (ints: max value) and an output element the kernel never writes shows up as NaN;
those allocations also carry poisoned guard bands, and a write into one fails the case (execution.py);
outputs are checked for NaN/inf the reference does not have; kernels declared deterministic run twice
and must give identical bits.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from conformance.cases.ids import Case
from conformance.checks import guard, timeout
from conformance.checks.execution import Execution, OutOfBoundsWrite, nan_filled_allocations  # noqa: F401 - re-exported
from conformance.core import registry, results
from conformance.core.targets import Target, detect_target, parse_target
from conformance.families import get_family


@dataclass
class Verdict:
    """One case's result. run_mode says how the kernel really ran: 'device', 'interpreter' or 'model'."""

    case_id: str
    kernel: str
    check: str  # the tier: "exact" | "statistical"
    outcome: str  # "pass" | "fail" | "skip" | "error"
    run_mode: str | None
    metrics: dict = field(default_factory=dict)
    detail: str = ""
    replay: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def line(self) -> str:
        """The one line a failure prints: outcome, case id, replay command, and the detail."""
        return f"{self.outcome.upper()} {self.case_id} [{self.run_mode}] replay: {self.replay} -- {self.detail}"

    def to_dict(self) -> dict:
        return asdict(self)


def replay_command(case_id: str, target: Target | None = None, kernel: str | None = None) -> str:
    """`python -m conformance repro ID`, plus --target when the target is not this machine's, and
    `--plugin MODULE` before `repro` when `kernel` (default: the id's kernel) was registered by a plugin module,
    so the line replays as printed in a fresh process."""
    if kernel is None:
        parts = case_id.split("/")
        kernel = parts[1] if len(parts) > 2 else None
    plugin = registry.kernel_plugin(kernel) if kernel else None
    cmd = "python -m conformance " + (f"--plugin {plugin} " if plugin else "") + f"repro {case_id}"
    if target is not None and target != detect_target():
        cmd += f" --target {target}"
    return cmd


def _runs_in_interpreter_here(kernel: registry.Kernel, here: Target) -> bool:
    """A Triton kernel that runs here through Triton's interpreter (a CPU host with TRITON_INTERPRET=1)."""
    return here.is_cpu and kernel.availability(here) is None and kernel.run_mode(here) == "interpreter"


def _runs_on_device_here(kernel: registry.Kernel, here: Target) -> bool:
    """A kernel that declares `simulated_on_device` (Triton code, any backend) and runs on this GPU host's device."""
    return (here.is_gpu and getattr(kernel, "simulated_on_device", False) is True
            and kernel.availability(here) is None and kernel.run_mode(here) == "device")


def _execution(kernel: registry.Kernel, target: Target, M: int | None = None,
               K: int | None = None) -> tuple[str | None, str]:
    """(run_mode, why): how the kernel runs here for `target` (a call of M rows and reduction K when given);
    run_mode None when it cannot run at all.

    The gate decides what is served on `target`; this decides how it runs. On a simulated target (not this
    machine's), a Triton kernel that runs in the interpreter here runs its REAL code in the interpreter
    ('interpreter'); so does, on this GPU host's device ('device'), a kernel that declares `simulated_on_device`
    (its Triton code runs on any backend; the call's context carries the simulated target, whose gate and tile
    choice it follows); any other device run (a HIP/CUDA op, or Triton on a GPU host of another target) can never
    be a device run of that target, so it runs the kernel's model, or nothing when it has none."""
    here = detect_target()
    simulated = target != here
    why = kernel.availability(target)
    run_target = target
    on_device = simulated and _runs_on_device_here(kernel, here)
    if why is not None and simulated and (_runs_in_interpreter_here(kernel, here) or on_device):
        why, run_target = None, here
    if why is None:
        mode = kernel.run_mode(run_target) if M is None else kernel.run_mode_for(M, K, run_target)
        if mode == "device" and target.is_gpu and simulated and not on_device:
            why = f"target={target} is simulated: this machine is {here}"
            mode = "model"
        if mode == "model" and not kernel.has_model:
            return None, f"cannot run here and has no model: {why or 'the kernel runs as its model here'}"
        return mode, why if mode == "model" else ""
    if not kernel.has_model:
        return None, f"cannot run here and has no model: {why}"
    return "model", why


def run_case(case: Case, kernel=None, target="cpu", *, check_determinism: bool = True,
             record: bool = True) -> Verdict:
    """Run `case` on `kernel` (default: case.kernel) for `target`; returns and records a Verdict."""
    k = registry.get_kernel(case.kernel) if kernel is None else (
        registry.get_kernel(kernel) if isinstance(kernel, str) else kernel)
    if k.name != case.kernel:
        case = case.with_kernel(k.name)
    t = parse_target(target) if isinstance(target, str) else target
    v = Verdict(case.id, k.name, case.tier, "skip", None, replay=replay_command(case.id, t, k.name))
    timed_out = sticky = None
    config = case.config()
    refusal = k.can_implement(config, t)
    # kernels that dispatch on the runtime shape (the hybrid's HIP GEMV vs Triton skinny) say per call
    mode, why = _execution(k, t, case.M, case.K) if case.M is not None else _execution(k, t)
    no_exact = exact_tier_unjudgeable(k, mode, t, config) if case.tier == "exact" else None
    if refusal is not None:
        v.detail = f"gate refuses on {t}: {refusal}"
    elif no_exact:
        v.detail = no_exact
    elif mode is None:
        v.detail = why
    else:
        v.run_mode = mode
        timeout.set_current(case_id=v.case_id, kernel=v.kernel, check=v.check, replay=v.replay,
                            family=case.family, target=str(t), run_mode=mode)
        try:
            cmp, deterministic_note = get_family(case.family).run(case, k, config,
                                                                  Execution(k, mode, check_determinism, t))
            v.outcome = "pass" if cmp.ok else "fail"
            v.metrics, v.detail = cmp.metrics, cmp.detail + deterministic_note
            if mode == "model":
                v.detail += f" (model run: {why})" if why else " (model run)"
        except OutOfBoundsWrite as e:  # a write into a guard band is a wrong answer, not a crash
            v.outcome, v.metrics, v.detail = "fail", {"out_of_bounds_write": True}, str(e)
        except timeout.CaseTimeout as e:  # a hung (or stopped) kernel: this case's error verdict, recorded below
            v.outcome, v.detail, e.verdict, timed_out = "error", str(e), v, e
        except guard.StickyDeviceError as e:  # this case's error; the process is retired once it is recorded
            v.outcome, v.detail, sticky = "error", str(e), e
        except Exception as e:  # noqa: BLE001 - a raising kernel is a verdict, reported with its case id
            v.outcome = "error"
            v.detail = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
    if record:
        results.record(v.kernel, v.check, v.outcome, run_mode=v.run_mode, case_id=v.case_id, metrics=v.metrics,
                       detail=v.detail, replay=v.replay, family=case.family, target=str(t))
    if sticky is not None:
        guard.retire(dict(v.to_dict(), family=case.family, target=str(t)))
    if timed_out is not None and timeout.propagates():
        raise timed_out  # BaseException: the test fails now, hypothesis neither shrinks nor replays it
    return v


def exact_tier_unjudgeable(kernel, mode: str | None = None, target: Target | None = None,
                           config=None) -> str | None:
    """Why the exact tier cannot judge `kernel` (None if it can): an fp8 kernel whose declared convention
    (e.g. AITER's reciprocal multiplies and fp8 max 240) has no bit-exact reference, or a kernel that declares
    `device_inexact_reason` for runs on a GPU (mode 'device', GPU target). Such runs are judged in the
    statistical tier."""
    num = kernel.numerics(config)
    if mode == "device" and target is not None and target.is_gpu and num.device_inexact_reason:
        return f"exact tier not applicable on a device: {num.device_inexact_reason}; judged in the statistical tier"
    return get_family(kernel.family).exact_unjudgeable(num)
