"""Run one Case against one kernel: build data from the seed, encode, load, apply (or model), compare.

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

import contextlib
import math
from dataclasses import asdict, dataclass, field

import torch

from conformance.cases.ids import Case
from conformance.checks.tolerance import Comparison, compare_exact, compare_statistical, error_model_for, l2_bound
from conformance.core import registry, results
from conformance.core.targets import Target, detect_target, parse_target

_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


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


@contextlib.contextmanager
def nan_filled_allocations():
    """torch.empty & co. return NaN-filled memory (ints: max value) inside; previous settings restored."""
    import torch.utils.deterministic as tud

    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = tud.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    tud.fill_uninitialized_memory = True
    try:
        yield
    finally:
        tud.fill_uninitialized_memory = prev_fill
        torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)


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


def _device_for(mode: str) -> str:
    from conformance.core.runtime import kernel_device

    return "cpu" if mode == "model" else kernel_device()


def _bits_equal(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_bits_equal(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_u8(a), _u8(b))


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)  # reshape: size-1 dims keep odd strides


def _call(kernel, mode: str, operands, x):
    fn = kernel.model if mode == "model" else kernel.apply
    with nan_filled_allocations():
        return fn(operands, x)


def _to_cpu(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_to_cpu(o) for o in out)
    return out.detach().cpu()


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
            cmp, deterministic_note = (_run_w4a16 if case.family == "w4a16" else _run_fp8)(
                case, k, config, mode, check_determinism)
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
    from references.fp8 import ZERO_GROUP_POLICIES

    num = kernel.numerics(config)
    if mode == "device" and target is not None and target.is_gpu and num.device_inexact_reason:
        return f"exact tier not applicable on a device: {num.device_inexact_reason}; judged in the statistical tier"
    policy = num.zero_group_policy
    if kernel.family == "fp8_group_quant" and policy is not None and policy not in ZERO_GROUP_POLICIES:
        return (f"exact tier not applicable: zero_group_policy={policy!r} has no bit-exact reference "
                f"(reference conventions: {list(ZERO_GROUP_POLICIES)}); judged in the statistical tier")
    return None


def _determinism(k, mode, operands, x, first, check: bool, config=None, M=None) -> tuple[bool, str]:
    if not (check and k.numerics(config, M).deterministic):
        return True, ""
    second = _to_cpu(_call(k, mode, operands, x))
    if _bits_equal(first, second):
        return True, ""
    return False, "; NOT DETERMINISTIC: two runs on the same operands differ in bits (kernel declares deterministic)"


def _run_w4a16(case: Case, k, config, mode: str, check_det: bool) -> tuple[Comparison, str]:
    from references import codecs
    from references.gemm import abs_bound, reference_gemm
    from references.generators import random_activations, random_canonical

    act = _DT[case.dtype]
    w = random_canonical(case.K, case.N, case.group_size, case.weight_type, act, case.regime, case.seed,
                         act_order=case.act_order)
    x = random_activations(case.M, case.K, act, case.regime, case.seed)
    # GPTQ v1 cannot store z = 0 (it stores z - 1): encode with the int32 borrow real v1 checkpoints
    # carry, so every kernel reading v1 is tested on it (CONTRACTS.md section 3)
    policy = {"v1_zero_policy": "borrow"} if case.format == "gptq_v1" else {}
    ckpt = codecs.encode(w, case.format, **policy)
    operands = k.load(ckpt)
    dev = _device_for(mode)
    xd = x.to(dev)
    y = _to_cpu(_call(k, mode, operands, xd))
    want = (case.M, case.N)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want or y.dtype != act:
        got = (tuple(y.shape), y.dtype) if isinstance(y, torch.Tensor) else type(y)
        return Comparison(False, {}, f"output {got} is not {want} {act}"), ""
    same, note = _determinism(k, mode, operands, xd, y, check_det, config, case.M)
    y_ref = reference_gemm(x, w)
    if case.tier == "exact":
        cmp = compare_exact(y, y_ref.to(act))
    else:
        W64 = w.dequantize(torch.float64)
        # act-order kernels permute K, so natural-order block partials are not theirs: the model falls back
        cmp = compare_statistical(y, y_ref, abs_bound(x, w), error_model_for(k, config, act, case.M), case.K,
                                  R=l2_bound(x, W64), xw=None if case.act_order else (x, W64))
    cmp.metrics["deterministic"] = same
    return Comparison(cmp.ok and same, cmp.metrics, cmp.detail), note


def _fp8_spacing(v: torch.Tensor, fp8_dtype: str) -> torch.Tensor:
    """The gap between adjacent fp8 values around |v| (fp64): 2^(max(floor(log2|v|), emin) - 3)."""
    emin = -6 if fp8_dtype == "float8_e4m3fn" else -7
    e = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** (emin - 10)))).clamp(min=emin)
    return torch.pow(2.0, e - 3)


def _run_fp8(case: Case, k, config, mode: str, check_det: bool) -> tuple[Comparison, str]:
    from conformance.families.fp8_inputs import fp8_activations
    from references.fp8 import FP8_DTYPES, FP8_MAX, fp8_group_quant_reference, ue8m0_ambiguous

    x = fp8_activations(case.tokens, case.hidden, case.dtype, case.regime, case.seed, case.group_size,
                        case.fp8_dtype)
    policy = k.numerics(config, case.tokens).zero_group_policy or "triton"
    params = k.load(config)
    dev = _device_for(mode)
    xd = x.to(dev)
    out = _call(k, mode, params, xd)
    col_strides = out[1].stride() if isinstance(out, (tuple, list)) and len(out) == 2 else None
    out = _to_cpu(out)
    # a kernel with its own convention (no reference policy) is compared with the reference's scale formula at
    # its declared fp8_max, statistical tier only (exact_tier_unjudgeable)
    own = exact_tier_unjudgeable(k, config=config) is not None
    fp8_max = float(params.fp8_max) if own else FP8_MAX[case.fp8_dtype]
    if own:
        amax = x.float().reshape(case.tokens, -1, case.group_size).abs().amax(-1)
        s_ref = torch.clamp(amax, min=float(params.eps)) / fp8_max
        q_ref = torch.zeros(x.shape, dtype=FP8_DTYPES[case.fp8_dtype])
        policy = "triton"  # only for the UE8M0 ambiguity probe below; such kernels refuse UE8M0 today
    else:
        q_ref, s_ref = fp8_group_quant_reference(x, case.group_size, case.fp8_dtype, case.ue8m0,
                                                 case.column_major_scales, zero_group_policy=policy)
    G = case.hidden // case.group_size
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        return Comparison(False, {}, f"output is {type(out).__name__}, not (q, scales)"), ""
    q, s = out
    f8 = FP8_DTYPES[case.fp8_dtype]
    problems = []
    if q.dtype != f8 or tuple(q.shape) != tuple(x.shape):
        problems.append(f"q is {q.dtype}{tuple(q.shape)}, expected {f8}{tuple(x.shape)}")
    if s.dtype != torch.float32 or tuple(s.shape) != (case.tokens, G):
        problems.append(f"scales are {s.dtype}{tuple(s.shape)}, expected float32{(case.tokens, G)}")
    if problems:
        return Comparison(False, {}, "; ".join(problems)), ""
    if case.column_major_scales and case.tokens > 1 and G > 1 and tuple(col_strides) != (1, case.tokens):
        why = f"scales strides {tuple(col_strides)}, expected column-major (1, {case.tokens})"
        return Comparison(False, {}, why), ""
    same, note = _determinism(k, mode, params, xd, out, check_det, config, case.tokens)
    if not bool(torch.isfinite(s).all()):
        return Comparison(False, {"deterministic": same}, "scales contain NaN/inf"), note
    qf = q.to(torch.float64)
    if not bool(torch.isfinite(qf).all()):
        why = "q contains NaN/inf (unclamped cast or unwritten output)"
        return Comparison(False, {"deterministic": same}, why), note
    # groups where UE8M0 rounding may legitimately go down (fp32 log2 at a power of two): allow ref or ref/2
    ambiguous = torch.zeros_like(s_ref, dtype=torch.bool)
    if case.ue8m0:
        from references.fp8 import group_scales_raw

        amax = x.float().reshape(case.tokens, G, case.group_size).abs().amax(-1)
        ambiguous = ue8m0_ambiguous(group_scales_raw(amax, fp8_max, 1e-10, policy))
    s64, sr64 = s.double(), s_ref.double()
    scale_ok = (s64 == sr64) | (ambiguous & (s64 == sr64 / 2))
    scale_bits_equal = _bits_equal(s.contiguous(), s_ref.contiguous())
    # dequantized error in units of one fp8 step at the quantized value: correct rounding gives <= 1/2
    s_el = s64.repeat_interleave(case.group_size, dim=-1)
    xs = x.double() / s_el
    err_units = (qf - xs.clamp(-fp8_max, fp8_max)).abs() / _fp8_spacing(xs, case.fp8_dtype)
    flat = int(err_units.flatten().argmax())
    worst = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(q.shape))]
    q_equal = torch.equal(_u8(q), _u8(q_ref))
    n_q_diff = int((_u8(q) != _u8(q_ref)).sum())
    metrics = {"max_ratio": float(err_units.max()) * 2, "q_mismatches": n_q_diff,
               "scale_mismatches": int((~(s64 == sr64)).sum()), "worst_index": worst, "deterministic": same,
               "zero_group_policy": policy}
    if case.tier == "exact":
        ok = q_equal and scale_bits_equal
        if not ok and bool(scale_ok.all()) and bool(ambiguous.any()):
            ok = metrics["max_ratio"] <= 1.0  # only ambiguous UE8M0 groups differ: judge q by rounding
        detail = ("q and scales bit-exact" if ok else
                  f"{n_q_diff} q bytes and {metrics['scale_mismatches']} scales differ from the reference "
                  f"(policy {policy}); worst q at {worst}: got {float(qf.flatten()[flat])}, "
                  f"ref {float(q_ref.to(torch.float64).flatten()[flat])}, x/scale {float(xs.flatten()[flat]):.6g}")
    else:
        # scales within 4 fp32 ulp (GPU fp32 division is not correctly rounded), q within one fp8 step
        rel = ((s64 - sr64).abs() / sr64.clamp(min=1e-45)).where(~ambiguous, torch.zeros_like(s64))
        s_close = bool((rel <= 4 * 2.0 ** -24).all()) and bool(scale_ok[ambiguous].all() if ambiguous.any() else True)
        ok = s_close and metrics["max_ratio"] <= 2.0
        metrics["max_ratio"] /= 2  # ratio to the statistical bound of one fp8 step
        detail = (f"max |q - x/s| = {metrics['max_ratio']:.3g} fp8 steps at {worst}; "
                  f"scales {'within 4 ulp' if s_close else 'differ by more than 4 ulp'} (policy {policy})")
    if math.isnan(metrics["max_ratio"]):
        ok = False
    return Comparison(ok and same, metrics, detail), note
