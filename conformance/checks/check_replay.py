"""Replay one check id (conformance.cases.check_ids): the contract or fusion check it names, on the input it names.

    run_check_case(check_case) -> harness.Verdict   # outcome pass | fail | error | skip; `repro` maps it to 0/1/125

The input is rebuilt as the suite builds it: a contract check's sample from its spec (contracts.build_sample), the
fusion check's RMSNorm + quant layer routed through the kernel, on fusion.layer_inputs(config, rows, seed). A broken
contract (ContractFailure) is `fail`; any other exception out of the check, or the time limit
(conformance.checks.timeout, `repro --timeout`), is `error`; `skip` when this machine cannot judge the id: the
kernel cannot run here, declares no op (contract checks), or no target's gate accepts the input (the suite never
checks a refused input, except opcheck's extra specs). A check that cannot apply to the kernel's family (fusion of
a GEMM) raises InvalidInput: a bad id.
"""
from __future__ import annotations

from conformance.cases.check_ids import CheckCase
from conformance.checks import contracts, fusion, guard, timeout
from conformance.checks.harness import Verdict, _execution
from conformance.core import registry
from conformance.core.targets import detect_target
from conformance.families.config import Fp8QuantConfig
from references.errors import require


def fusion_layer(kernel, config, rows: int, seed: int):
    """(layer, x): the RMSNorm + quant layer routed through `kernel` (a route's own kernel or any other quant kernel
    in its place), on fusion.layer_inputs(config, rows, seed)."""
    from conformance.checks.quant_layer import RmsNormQuantLayer, fusion_routes

    route = {k: r for r, k in fusion_routes().items()}.get(kernel.name, kernel.name)  # the label messages show
    x, w = fusion.layer_inputs(config, rows, seed)
    return RmsNormQuantLayer(config, w, fusion.NORM_EPS, route, kernel_override=kernel.name), x


def _cannot_run(kernel, cc: CheckCase) -> str | None:
    """Why this machine cannot judge `cc` (None: it can)."""
    why = kernel.availability(detect_target())
    if why is not None:
        return f"kernel={kernel.name} cannot run here: {why}"
    if cc.check == "fusion":
        return None
    if kernel.op is None:
        return f"kernel={kernel.name} declares no op (kernel.op is None): the contract checks do not apply to it"
    if cc.check != "opcheck" and not contracts.accepts(kernel, cc.spec()):
        return f"gate refuses: no target of {list(contracts.GATE_TARGETS)} accepts {cc.config()}"
    return None


def _run(kernel, cc: CheckCase):
    """Run the check; what it returns is the pass detail."""
    if cc.check == "fusion":
        layer, x = fusion_layer(kernel, cc.config(), cc.rows, cc.seed)
        return fusion.check_fusion(layer, x)
    sample = contracts.build_sample(kernel, cc.spec())
    if cc.check == "compile_boundary":
        contracts.inductor_dirs()
    fn = {"fake_vs_real": contracts.check_fake_vs_real, "make_fx": contracts.check_make_fx,
          "opcheck": contracts.check_opcheck, "compile_boundary": contracts.check_compile_boundary}[cc.check]
    return fn(kernel, sample)


def run_check_case(cc: CheckCase, kernel=None) -> Verdict:
    """The verdict of check id `cc` on `kernel` (default: registry.get_kernel(cc.kernel)); nothing is recorded."""
    k = registry.get_kernel(cc.kernel) if kernel is None else kernel
    require(cc.check != "fusion" or isinstance(cc.config(), Fp8QuantConfig), "check", cc.check,
            f"one of {list(contracts.CHECKS)} for family {cc.family} (fusion checks an RMSNorm + FP8 group quant "
            "layer)")
    v = Verdict(cc.id, k.name, cc.check, "skip", None, replay=contracts.replay_line(cc.id, k))
    why = _cannot_run(k, cc)
    if why is not None:
        v.detail = why
        return v
    v.run_mode = (_execution(k, detect_target())[0] or "model") if cc.check == "fusion" else contracts.op_run_mode(k)
    timeout.set_current(case_id=v.case_id, kernel=v.kernel, check=v.check, replay=v.replay, family=cc.family)
    try:
        # one guarded call (repro's --timeout: a hung check is this id's error verdict)
        with guard.guarded(k, cc.check, case_id=v.case_id, replay=v.replay, check=v.check, mode=v.run_mode):
            detail = _run(k, cc)
        v.outcome, v.detail = "pass", f"{v.check} holds"
        v.metrics = detail if isinstance(detail, dict) else {"checked": detail}  # what the check saw, as repro prints
    except contracts.ContractFailure as e:
        v.outcome, v.detail = "fail", " ".join(str(e).split())[:1000]
    except timeout.CaseTimeout as e:
        v.outcome, v.detail = "error", str(e)
    except Exception as e:  # noqa: BLE001 - a check that raises is this id's error verdict (exit 1), not a crash
        v.outcome, v.detail = "error", f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
    return v
