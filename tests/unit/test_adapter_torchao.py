"""The torchao adapter (conformance/adapters/torchao.py): its gates and declared conventions, the two scoped
interpreter patches (has_triton, the pinned autotune config), gate-only registration where torchao does not import,
and, where torchao 0.18.0 is importable (PYTHONPATH, docs/plugins.md), a handful of cases through the real Triton
kernels in the interpreter: the lhs kernel passes, the act-quant kernel's all-zero groups fail with NaN q."""
from __future__ import annotations

import importlib
import importlib.util
import types

import pytest
import torch

from conformance.api import Fp8QuantConfig, get_kernel, interpreting, load_all, parse_target, unregister_kernel
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case

load_all()
from conformance.adapters import torchao as adapter  # noqa: E402 - importing registers its kernels...

for _name in (adapter.ACT_NAME, adapter.LHS_NAME):
    unregister_kernel(_name)  # ... only while this module's tests run (the fixture below), not in other tests


@pytest.fixture(scope="module", autouse=True)
def _adapter_registered():
    adapter.register()
    yield
    for name in (adapter.ACT_NAME, adapter.LHS_NAME):
        unregister_kernel(name)


CPU = parse_target("cpu")
HAVE_TORCHAO = importlib.util.find_spec("torchao") is not None and not adapter.UNAVAILABLE
needs_torchao = pytest.mark.skipif(not HAVE_TORCHAO, reason="torchao 0.18.0 is not importable here "
                                   f"({adapter.UNAVAILABLE or 'not installed'})")
FP8 = "fp8_group_quant/{k}/T={T},H=256,g=128,dt={dt},f8=e4m3fn,ue8m0=0,colmajor={cm},regime={reg},tier={tier},seed=3"


def _standins():
    """The adapters built on stand-in modules (gates and numerics need no torchao)."""
    act = types.SimpleNamespace(fp8_blockwise_act_quant=lambda *a: None, _get_triton_impls=lambda: None)
    lhs = types.SimpleNamespace(triton_fp8_blockwise_act_quant_lhs=lambda *a: None,
                                triton_fp8_blockwise_act_quant_lhs_kernel=types.SimpleNamespace(configs=[]))
    return adapter.TorchaoFp8ActQuant(act), adapter.TorchaoFp8ActQuantLhs(lhs)


def _cfg(**kw):
    return Fp8QuantConfig(**{**dict(group_size=128, dtype="bfloat16", hidden=512), **kw})


@pytest.mark.parametrize("which,kw,target,rule", [
    (0, {"column_major_scales": True}, CPU, "writes row-major scales"),
    (0, {"fp8_dtype": "float8_e4m3fnuz"}, CPU, "fp8_blockwise_act_quant's dtype assert"),
    (0, {"ue8m0": True}, CPU, "plain fp32 scales"),
    (0, {}, parse_target("sm80"), "cuda sm89+"),
    (0, {}, parse_target("gfx942"), "cuda sm89+"),
    (1, {}, CPU, "always writes its scales column-major"),
    (1, {"column_major_scales": True, "fp8_dtype": "float8_e4m3fnuz"}, parse_target("sm90"), "AMD only"),
    (1, {"column_major_scales": True, "group_size": 96, "hidden": 384}, CPU, "a power of two"),
])
def test_gates_name_their_rules(which, kw, target, rule):
    why = _standins()[which].can_implement(_cfg(**kw), target)
    assert why is not None and rule in why, why


def test_gates_accept_what_the_kernels_take():
    act, lhs = _standins()
    assert act.can_implement(_cfg(dtype="float16"), CPU) is None
    assert act.can_implement(_cfg(), parse_target("sm90")) is None
    assert lhs.can_implement(_cfg(column_major_scales=True, fp8_dtype="float8_e4m3fnuz"), CPU) is None


def test_conventions_are_declared_and_have_no_exact_reference():
    """act_quant: divide, no eps (fp8_max 448); lhs: the inverse scale, eps 1e-12, the dtype's max (240 for
    e4m3fnuz, not vLLM's 224). Both policies are their own: the exact tier skips with the reason."""
    act, lhs = _standins()
    assert (act.numerics(None).fp8_scale, act.numerics(None).zero_group_policy) == ("divide", "torchao_no_eps")
    assert (lhs.numerics(None).fp8_scale, lhs.numerics(None).zero_group_policy) == ("inverse", "torchao_lhs")
    fnuz = lhs.load(_cfg(column_major_scales=True, fp8_dtype="float8_e4m3fnuz"))
    assert (fnuz.fp8_max, fnuz.eps) == (240.0, 1e-12)
    from conformance.checks.harness import exact_tier_unjudgeable

    for k, policy in ((act, "torchao_no_eps"), (lhs, "torchao_lhs")):
        why = exact_tier_unjudgeable(k)
        assert why is not None and policy in why, why


def test_has_triton_reads_true_only_inside_the_block_and_only_in_the_interpreter(monkeypatch):
    import torch.utils._triton as tt

    original = tt.has_triton
    monkeypatch.setattr(adapter, "interpreting", lambda: True)
    with adapter.triton_reported_present():
        assert tt.has_triton() is True
    assert tt.has_triton is original
    monkeypatch.setattr(adapter, "interpreting", lambda: False)
    with adapter.triton_reported_present():
        assert tt.has_triton is original


def _autotuner():
    cfg = [types.SimpleNamespace(kwargs={"NUM_GROUPS": g}, num_warps=w) for g in adapter.NUM_GROUPS for w in (2, 4)]
    return types.SimpleNamespace(configs=list(cfg)), cfg


def test_pinned_config_rotates_num_groups_and_restores(monkeypatch):
    monkeypatch.setattr(adapter, "interpreting", lambda: True)
    tuner, cfg = _autotuner()
    seen = []
    for tokens in range(6):
        with adapter.pinned_config(tuner, tokens):
            assert len(tuner.configs) == 1
            seen.append(tuner.configs[0].kwargs["NUM_GROUPS"])
        assert tuner.configs == cfg
    assert seen == [*adapter.NUM_GROUPS, adapter.NUM_GROUPS[0]]
    with adapter.pinned_config(tuner, 195):  # 2 or 16 rows per program would launch more than 8 programs
        assert tuner.configs[0].kwargs["NUM_GROUPS"] in (32, 64, 128)
    with adapter.pinned_config(tuner, 5000):
        assert tuner.configs[0].kwargs["NUM_GROUPS"] == 128
    monkeypatch.setattr(adapter, "interpreting", lambda: False)
    with adapter.pinned_config(tuner, 1):
        assert tuner.configs == cfg  # on a GPU the autotuner chooses


def test_pinned_config_refuses_an_unknown_autotune_list(monkeypatch):
    monkeypatch.setattr(adapter, "interpreting", lambda: True)
    tuner = types.SimpleNamespace(configs=[types.SimpleNamespace(kwargs={"NUM_GROUPS": 3})])
    with pytest.raises(RuntimeError, match="no config with NUM_GROUPS=2"):
        with adapter.pinned_config(tuner, 0):
            pass
    assert len(tuner.configs) == 1


def test_missing_torchao_registers_gate_only_with_the_reason(monkeypatch):
    monkeypatch.setattr(adapter, "ACT_MODULE", "torchao_no_such_module.kernel")
    try:
        assert adapter.register() == [adapter.ACT_NAME, adapter.LHS_NAME]
        k = get_kernel(adapter.ACT_NAME)
        why = k.can_implement(_cfg(), CPU)
        assert why == adapter.UNAVAILABLE[adapter.ACT_NAME] and why.startswith("torchao not importable (")
        assert "ModuleNotFoundError" in why and not k.has_model
    finally:
        monkeypatch.undo()
        adapter.register()


# ---- the real kernels (torchao importable) -------------------------------------------------------------------------

@needs_torchao
@pytest.mark.parametrize("dt,T", [("bf16", 5), ("fp16", 2), ("fp32", 17)])
def test_lhs_kernel_passes(dt, T):
    cid = FP8.format(k=adapter.LHS_NAME, T=T, dt=dt, cm=1, reg="normal", tier="statistical")
    v = run_case(parse_case_id(cid), target="cpu", record=False)
    assert v.outcome == "pass" and v.run_mode == ("interpreter" if interpreting() else "device"), v.line()


@needs_torchao
def test_act_quant_passes_nonzero_groups_and_fails_all_zero_ones():
    ok = run_case(parse_case_id(FP8.format(k=adapter.ACT_NAME, T=3, dt="bf16", cm=0, reg="saturation",
                                           tier="statistical")), target="cpu", record=False)
    assert ok.outcome == "pass", ok.line()
    bad = run_case(parse_case_id(FP8.format(k=adapter.ACT_NAME, T=3, dt="bf16", cm=0, reg="all_zero_groups",
                                            tier="statistical")), target="cpu", record=False)
    assert bad.outcome == "fail" and "NaN" in bad.detail, bad.line()
    skip = run_case(parse_case_id(FP8.format(k=adapter.ACT_NAME, T=3, dt="bf16", cm=0, reg="normal", tier="exact")),
                    target="cpu", record=False)
    assert skip.outcome == "skip" and "torchao_no_eps" in skip.detail, skip.line()


@needs_torchao
def test_real_kernels_build_only_under_the_scoped_patch():
    import torch.utils._triton as tt

    mod = importlib.import_module(adapter.ACT_MODULE)
    assert adapter.build_act_quant(mod).available
    if not torch.cuda.is_available():
        assert tt.has_triton() is False  # restored after the build: torch on a CPU host still says no
