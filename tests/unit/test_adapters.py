"""The shipped adapters (conformance/adapters/): the vLLM adapter against a stand-in `vllm` package
(tests/unit/vllm_standin/, in both of vLLM's kernel-package layouts), and GemLite's registration where gemlite does
not import. The adapter on the real vLLM 0.33.0: tests/unit/test_adapter_vllm_real.py."""
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


def _standin(layout: int):
    """conformance.adapters.vllm registered against the stand-in, finding only LAYOUTS[layout] (0: today's
    kernels.linear.mixed_precision, 1: the older layers.quantization.kernels.mixed_precision); everything it
    registered is removed after."""
    _drop_vllm_modules()
    sys.path.insert(0, STANDIN)
    mod = None
    try:
        mod = importlib.import_module("conformance.adapters.vllm")
        layouts = mod.LAYOUTS
        mod.LAYOUTS = (layouts[layout],)
        try:
            mod.register()
            yield mod
        finally:
            mod.LAYOUTS = layouts
    finally:
        for name in list(mod.REGISTERED if mod else []):
            unregister_kernel(name)
        sys.path.remove(STANDIN)
        _drop_vllm_modules()


@pytest.fixture
def adapter():
    """The adapter on the stand-in's older layout (its interface has has_g_idx and checkpoint_format)."""
    yield from _standin(1)


@pytest.fixture
def adapter_today():
    """The adapter on the stand-in's today's layout (no has_g_idx, no checkpoint_format, per-platform lists)."""
    yield from _standin(0)


def test_registers_the_standin_kernels_in_vllm_order(adapter):
    assert adapter.UNAVAILABLE is None
    assert adapter.REGISTERED == ["vllm_torch_ref", "vllm_zp_always_transposed", "vllm_fp8_group_quant",
                                  "vllm_fp8_group_quant_triton"]
    assert get_kernel("vllm_torch_ref").priority > get_kernel("vllm_zp_always_transposed").priority
    assert "layers.quantization.kernels.mixed_precision" in adapter.describe()


def test_gates_come_from_the_kernels_own_can_implement(adapter):
    buggy = get_kernel("vllm_zp_always_transposed")
    cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="bfloat16", N=64, K=256)
    assert buggy.can_implement(cfg, parse_target("cpu")) == (
        "ZpAlwaysTransposedLinearKernel.can_implement on CpuPlatform(cpu): ZpAlwaysTransposed only supports "
        "float16 activations")
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
    k = get_kernel("vllm_fp8_group_quant_triton")
    assert k.numerics(None).fp8_scale == "reciprocal"
    # the layer-style call (contiguous x) on a CPU platform takes the same Triton route: listed, not run twice
    assert "judged as vllm_fp8_group_quant_triton" in get_kernel("vllm_fp8_group_quant").availability(
        parse_target("cpu"))
    for ue8m0, colmajor in ((0, 0), (1, 1)):
        cid = (f"fp8_group_quant/vllm_fp8_group_quant_triton/T=5,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0={ue8m0},"
               f"colmajor={colmajor},regime=normal,tier=exact,seed=3")
        v = run_case(parse_case_id(cid), target="cpu", record=False)
        assert v.outcome == "pass", v.line()


def test_vllm_not_importable_says_why(adapter, monkeypatch):
    monkeypatch.setattr(adapter, "LAYOUTS", (("vllm.no_such_package", None, "none"),))
    try:
        assert adapter.register() == ["vllm_unavailable"]
        k = get_kernel("vllm_unavailable")
        cfg = W4A16Config(weight_type="uint4b8", group_size=128, act_order=False, dtype="float16", N=64, K=256)
        assert k.can_implement(cfg, parse_target("cpu")) == (
            "vllm not importable: no known kernel package layout: vllm.no_such_package: ModuleNotFoundError: "
            "No module named 'vllm.no_such_package'")
    finally:
        monkeypatch.undo()
        adapter.register()


def test_today_layout_is_found_and_described(adapter_today):
    a = adapter_today
    assert a.UNAVAILABLE is None and a.FOUND.mp.__name__ == "vllm.model_executor.kernels.linear.mixed_precision"
    # ROCm's preference list first (Gfx1xOnly, TorchRef), then CUDA's (ZpAlwaysTransposed)
    assert a.REGISTERED == ["vllm_gfx1x_only", "vllm_torch_ref", "vllm_zp_always_transposed", "vllm_fp8_group_quant",
                            "vllm_fp8_group_quant_triton"]
    assert "vllm 0.0.0+standin, kernel package vllm.model_executor.kernels.linear.mixed_precision" in a.describe()
    # cuda.py imports vLLM's compiled library, absent here: a placeholder stands in and the absence is said
    get_kernel("vllm_torch_ref").can_implement(W4A16Config(weight_type="uint4b8", group_size=32, act_order=False,
                                                           dtype="float16", N=64, K=256), parse_target("sm90"))
    assert "vllm._C_stable_libtorch did not load" in a.describe()


def test_gates_are_asked_under_vllms_platform_for_the_target(adapter_today):
    from vllm import platforms

    cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", format="gptq_v2",
                      N=64, K=256)
    rdna, ref, buggy = (get_kernel(f"vllm_{n}") for n in ("gfx1x_only", "torch_ref", "zp_always_transposed"))
    machine = platforms.current_platform
    # current_platform.is_rocm() and on_gfx1x() answer for the asked target: vLLM's rocm.py read its arch
    assert rdna.can_implement(cfg, parse_target("gfx1100")) is None
    assert rdna.can_implement(cfg, parse_target("gfx1151")) is None
    assert rdna.can_implement(cfg, parse_target("gfx942")).endswith("only targets gfx11/gfx12")
    assert rdna.can_implement(cfg, parse_target("sm90")) == (
        "Gfx1xOnlyLinearKernel is not in vLLM's _POSSIBLE_KERNELS[CUDA] (cuda:sm90)")
    assert buggy.can_implement(cfg, parse_target("gfx1100")) == (
        "ZpAlwaysTransposedLinearKernel is not in vLLM's _POSSIBLE_KERNELS[ROCM] (rocm:gfx1100)")
    assert "capability 70) below ZpAlwaysTransposedLinearKernel.get_min_capability()=75" in buggy.can_implement(
        cfg, parse_target("sm70"))
    assert ref.can_implement(cfg, parse_target("sm90")) is None and ref.can_implement(cfg, parse_target("cpu")) is None
    # the stand-in platform was in place for the question only
    mod = sys.modules["vllm.model_executor.kernels.linear.mixed_precision.torch_kernels"]
    assert platforms.current_platform is machine and mod.current_platform is machine
    assert "vllm.platforms.rocm" not in sys.modules


def test_today_interface_refuses_what_it_cannot_carry(adapter_today):
    ref = get_kernel("vllm_torch_ref")
    base = dict(weight_type="uint4", group_size=32, dtype="float16", N=64, K=256)
    ao = ref.can_implement(W4A16Config(act_order=True, format="gptq_v2", **base), parse_target("sm90"))
    assert ao.startswith("act_order=True not supported: vLLM 0.0.0+standin's MPLinearLayerConfig has no has_g_idx")
    v1 = ref.can_implement(W4A16Config(act_order=False, format="gptq_v1", **base), parse_target("sm90"))
    assert "has no checkpoint_format" in v1
    # symmetric v1: its zeros are ignored, so nothing needs the convention
    assert ref.can_implement(W4A16Config(act_order=False, format="gptq_v1", **dict(base, weight_type="uint4b8")),
                             parse_target("sm90")) is None


@pytest.mark.parametrize("fmt,wt", [("gptq_v2", "uint4"), ("compressed_tensors", "uint4"), ("gptq_v1", "uint4b8")])
def test_today_layout_correct_kernel_passes_and_bug_fails(adapter_today, fmt, wt):
    v = run_case(parse_case_id(CASE.format(k="vllm_torch_ref", wt=wt, ao=0, fmt=fmt, reg="exact", tier="exact")),
                 target="cpu", record=False)
    assert v.outcome == "pass" and v.run_mode == "device", v.line()
    if fmt == "gptq_v2":  # N/8 == G: the transposed zeros have the right shape and the wrong values
        bug = run_case(parse_case_id(CASE.format(k="vllm_zp_always_transposed", wt=wt, ao=0, fmt=fmt, reg="exact",
                                                 tier="exact")), target="cpu", record=False)
        assert bug.outcome == "fail", bug.line()


def test_gemlite_registers_with_a_reason_where_it_does_not_import():
    mod = importlib.import_module("conformance.adapters.gemlite")
    # registered at the module's first import; an earlier test of this worker may have imported it and another
    # unregistered what it registered, so register again (idempotent: the adapter's own register())
    mod.register()
    try:
        k = get_kernel("gemlite_a16w4")
        cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", N=64, K=256)
        if mod.UNAVAILABLE is None:
            assert k.has_model and k.can_implement(cfg, parse_target("sm90")) is None
            assert k.numerics(cfg, 5).atomics and k.numerics(cfg, 5).dequant_roundings == 2
        elif mod.installed():  # installed, needs a device at import: compile-only (its gate, nothing run here)
            assert mod.UNAVAILABLE.startswith("gemlite not importable: ") and not k.has_model
            assert k.can_implement(cfg, parse_target("sm90")) is None and k.can_implement(cfg, parse_target("gfx1201"))
            assert k.availability(parse_target("sm90")).startswith(mod.UNAVAILABLE)
        else:
            assert mod.UNAVAILABLE.startswith("gemlite not importable: ")
            assert k.can_implement(cfg, parse_target("sm90")) == mod.UNAVAILABLE and not k.has_model
    finally:
        unregister_kernel("gemlite_a16w4")


def test_gemlite_autotune_mode_is_validated_before_gemlite_is_touched():
    from conformance.adapters import gemlite

    unregister_kernel("gemlite_a16w4")  # the import registered it: later tests of this worker must not see it
    with pytest.raises(ValueError, match="CONFORMANCE_GEMLITE_AUTOTUNE='sometimes' is invalid"):
        gemlite.configure_autotune("sometimes")
    gemlite.configure_autotune(None)  # GemLite's own setting: nothing to do, nothing imported
