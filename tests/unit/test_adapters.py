"""The shipped adapters (conformance/adapters/): the vLLM adapter against a stand-in `vllm` package
(tests/unit/vllm_standin/), and GemLite's registration where gemlite does not import."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from conformance.api import W4A16Config, get_kernel, parse_target, unregister_kernel
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case

STANDIN = str(Path(__file__).parent / "vllm_standin")
CASE = "w4a16/{k}/M=3,N=64,K=256,g=32,wt={wt},ao={ao},dt=fp16,fmt={fmt},regime={reg},tier={tier},seed=11"


def _drop_vllm_modules():
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def adapter():
    """conformance.adapters.vllm registered against the stand-in; everything it registered is removed after."""
    _drop_vllm_modules()
    sys.path.insert(0, STANDIN)
    try:
        mod = importlib.import_module("conformance.adapters.vllm")
        mod.register()
        yield mod
    finally:
        for name in list(mod.REGISTERED):
            unregister_kernel(name)
        sys.path.remove(STANDIN)
        _drop_vllm_modules()


def test_registers_the_standin_kernels_in_vllm_order(adapter):
    assert adapter.UNAVAILABLE is None
    assert adapter.REGISTERED == ["vllm_torch_ref", "vllm_zp_always_transposed", "vllm_fp8_group_quant"]
    assert get_kernel("vllm_torch_ref").priority > get_kernel("vllm_zp_always_transposed").priority


def test_gates_come_from_the_kernels_own_can_implement(adapter):
    buggy = get_kernel("vllm_zp_always_transposed")
    cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="bfloat16", N=64, K=256)
    assert buggy.can_implement(cfg, parse_target("cpu")) == (
        "ZpAlwaysTransposedLinearKernel.can_implement: ZpAlwaysTransposed only supports float16 activations")
    assert get_kernel("vllm_torch_ref").can_implement(cfg, parse_target("cpu")) is None
    fp16 = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", N=64, K=256)
    # get_min_capability() = 75 against the target's capability, as vLLM's kernel selection does
    assert "get_min_capability()=75" in buggy.can_implement(fp16, parse_target("sm70"))
    assert buggy.can_implement(fp16, parse_target("sm90")) is None
    g16 = W4A16Config(weight_type="uint4", group_size=16, act_order=False, dtype="float16", N=64, K=256)
    assert "group size 16" in get_kernel("vllm_torch_ref").can_implement(g16, parse_target("cpu"))
    awq = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", format="awq", N=64, K=256)
    assert "awq" in get_kernel("vllm_torch_ref").can_implement(awq, parse_target("cpu"))


@pytest.mark.parametrize("fmt", ["gptq_v1", "gptq_v2", "compressed_tensors"])
@pytest.mark.parametrize("wt,ao", [("uint4", 1), ("uint4b8", 0)])
def test_correct_kernel_passes(adapter, fmt, wt, ao):
    for tier, reg in (("exact", "exact"), ("statistical", "normal")):
        v = run_case(parse_case_id(CASE.format(k="vllm_torch_ref", wt=wt, ao=ao, fmt=fmt, reg=reg, tier=tier)),
                     target="cpu", record=False)
        assert v.outcome == "pass" and v.run_mode == "device", v.line()


@pytest.mark.parametrize("fmt", ["gptq_v1", "gptq_v2"])
def test_zero_point_transpose_bug_fails(adapter, fmt):
    # N/8 == G (64/8 == 256/32): the transposed zeros have the right shape and give a wrong answer (vllm#47159)
    v = run_case(parse_case_id(CASE.format(k="vllm_zp_always_transposed", wt="uint4", ao=0, fmt=fmt, reg="exact",
                                           tier="exact")), target="cpu", record=False)
    assert v.outcome == "fail", v.line()
    # compressed-tensors zeros really are [N/8, G]: there the bug is invisible
    ct = CASE.format(k="vllm_zp_always_transposed", wt="uint4", ao=0, fmt="compressed_tensors", reg="exact",
                     tier="exact")
    assert run_case(parse_case_id(ct), target="cpu", record=False).outcome == "pass"


def test_fp8_group_quant_reciprocal_convention(adapter):
    k = get_kernel("vllm_fp8_group_quant")
    assert k.numerics(None).fp8_scale == "reciprocal"
    for ue8m0, colmajor in ((0, 0), (1, 1)):
        cid = (f"fp8_group_quant/vllm_fp8_group_quant/T=5,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0={ue8m0},"
               f"colmajor={colmajor},regime=normal,tier=exact,seed=3")
        v = run_case(parse_case_id(cid), target="cpu", record=False)
        assert v.outcome == "pass", v.line()


def test_vllm_not_importable_says_why(adapter, monkeypatch):
    monkeypatch.setattr(adapter, "MP_PACKAGE", "vllm.no_such_package")
    try:
        assert adapter.register() == ["vllm_unavailable"]
        k = get_kernel("vllm_unavailable")
        cfg = W4A16Config(weight_type="uint4b8", group_size=128, act_order=False, dtype="float16", N=64, K=256)
        assert k.can_implement(cfg, parse_target("cpu")).startswith("vllm not importable: ModuleNotFoundError")
    finally:
        monkeypatch.undo()
        adapter.register()


def test_gemlite_registers_with_a_reason_where_it_does_not_import():
    mod = importlib.import_module("conformance.adapters.gemlite")
    try:
        k = get_kernel("gemlite_a16w4")
        cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", N=64, K=256)
        if mod.UNAVAILABLE is None:
            assert k.has_model and k.can_implement(cfg, parse_target("sm90")) is None
            assert k.numerics(cfg, 5).atomics and k.numerics(cfg, 5).dequant_roundings == 2
        else:
            assert mod.UNAVAILABLE.startswith("gemlite not importable: ")
            assert k.can_implement(cfg, parse_target("sm90")) == mod.UNAVAILABLE and not k.has_model
    finally:
        unregister_kernel("gemlite_a16w4")


def test_gemlite_autotune_mode_is_validated_before_gemlite_is_touched():
    from conformance.adapters import gemlite

    with pytest.raises(ValueError, match="CONFORMANCE_GEMLITE_AUTOTUNE='sometimes' is invalid"):
        gemlite.configure_autotune("sometimes")
    gemlite.configure_autotune(None)  # GemLite's own setting: nothing to do, nothing imported
