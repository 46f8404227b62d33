"""Run one Case against one kernel: the gate and run mode are judged here; the case's family builds the data
from the seed, loads, calls the kernel through an `Execution` (apply or model) and compares (`Family.run`).

    run_case(case, kernel=None, target="cpu", *, check_determinism=True, record=True) -> Verdict

`kernel` defaults to case.kernel (a name or registry.Kernel); `target` is a Target or a name ("auto"
detects). The verdict's outcome is "pass", "fail", "skip" (the gate refuses, or the kernel cannot run
here and has no model) or "error" (the kernel raised). Every verdict goes to conformance.results.record.

Hygiene: the kernel runs under torch.use_deterministic_algorithms(True, warn_only=True) with
torch.utils.deterministic.fill_uninitialized_memory = True, so every torch.empty/new_empty the kernel
allocates is NaN-filled (ints: max value) and an output element the kernel never writes shows up as NaN;
outputs are checked for NaN/inf the reference does not have; kernels declared deterministic run twice
and must give identical bits.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from conformance.cases.ids import Case
from conformance.checks.execution import Execution, nan_filled_allocations  # noqa: F401 - re-exported
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


def replay_command(case_id: str, target: Target | None = None) -> str:
    """`python -m conformance repro ID`, plus --target when the target is not this machine's."""
    cmd = f"python -m conformance repro {case_id}"
    if target is not None and target != detect_target():
        cmd += f" --target {target}"
    return cmd


def _execution(kernel: registry.Kernel, target: Target) -> tuple[str | None, str]:
    """(run_mode, why): how the kernel runs here; run_mode None when it cannot run at all."""
    why = kernel.availability(target)
    if why is None:
        mode = kernel.run_mode(target)
        # a simulated GPU target on a machine without a GPU can never be a device run
        if mode == "device" and target.is_gpu and target != detect_target():
            mode = "model"
        return mode, ""
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
    v = Verdict(case.id, k.name, case.tier, "skip", None, replay=replay_command(case.id, t))
    config = case.config()
    refusal = k.can_implement(config, t)
    mode, why = _execution(k, t)
    if mode not in (None, "model") and case.M is not None:
        # kernels that dispatch on the runtime shape (the hybrid's HIP GEMV vs Triton skinny) say per call
        mode = k.run_mode_for(case.M, case.K, t)
        if mode == "device" and t.is_gpu and t != detect_target():
            mode = "model"
    no_exact = exact_tier_unjudgeable(k, mode, t, config) if case.tier == "exact" else None
    if refusal is not None:
        v.detail = f"gate refuses on {t}: {refusal}"
    elif no_exact:
        v.detail = no_exact
    elif mode is None:
        v.detail = why
    else:
        v.run_mode = mode
        try:
            cmp, deterministic_note = get_family(case.family).run(case, k, config,
                                                                  Execution(k, mode, check_determinism))
            v.outcome = "pass" if cmp.ok else "fail"
            v.metrics, v.detail = cmp.metrics, cmp.detail + deterministic_note
            if mode == "model":
                v.detail += f" (model run: {why})" if why else " (model run)"
        except Exception as e:  # noqa: BLE001 - a raising kernel is a verdict, reported with its case id
            v.outcome = "error"
            v.detail = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
    if record:
        results.record(v.kernel, v.check, v.outcome, run_mode=v.run_mode, case_id=v.case_id, metrics=v.metrics,
                       detail=v.detail, replay=v.replay, family=case.family, target=str(t))
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
