"""The plugin adapters' launch() declarations (Kernel.launch: the path a call takes, which the CI plan crosses with
checkpoint formats): vLLM's hybrid W4A16 names its PACKED_DEQUANT code path and survives vLLM's own assertion on a
symmetric layer's qzeros (N/8 != G), GemLite names the path its own dispatch picks for M. No vLLM or GemLite
install needed: the vLLM adapter's path logic is fed recorded programs and a wrapper that raises as vLLM's does,
GemLite's dispatch is a stand-in module with 0.6's rule. Each test costs milliseconds."""
from __future__ import annotations

import importlib
import sys
import types

import pytest

from conformance.api import W4A16Config, parse_target
from conformance.core import registry
from conformance.core.launch import Program

CFG = W4A16Config(weight_type="uint4b8", group_size=64, act_order=False, dtype="float16", format="gptq_v2", N=64,
                  K=256)
SKINNY = "vllm.model_executor.kernels.linear.mixed_precision.rdna_hybrid_w4a16._triton_w4a16_skinny_fmt_kernel"


@pytest.fixture
def vllm_adapter():
    """conformance.adapters.vllm as imported here (vLLM absent or not: only its module functions are used); what its
    import registered is removed after."""
    before = {k.name for k in registry.all_kernels()}
    mod = importlib.import_module("conformance.adapters.vllm")
    yield mod
    for name in {k.name for k in registry.all_kernels()} - before:
        registry.unregister_kernel(name)


def _program(packed: bool) -> Program:
    return Program(SKINNY, (("a_ptr", "*fp16"),), (("HAS_ZP", False), ("PACKED_DEQUANT", packed), ("BLOCK_M", 32)))


def test_vllm_launch_path_names_the_packed_dequant_code_path(vllm_adapter):
    """vLLM's hybrid sets PACKED_DEQUANT (gfx1151, fp16, symmetric) and its kernel then dequantizes two nibbles per
    instruction: another path for the plan to cross with formats, named after the kernel."""
    assert vllm_adapter.launch_path([_program(False)]) == "triton_w4a16_skinny_fmt"
    assert vllm_adapter.launch_path([_program(True)]) == "triton_w4a16_skinny_fmt+packed_dequant"
    assert vllm_adapter.launch_path([]) == "no_launch"


def test_vllm_hybrid_launch_survives_vllms_own_assertion(vllm_adapter, monkeypatch):
    """A symmetric GPTQ layer with N/8 != G: vLLM's hybrid wrapper asserts on the qzeros it was handed before it
    launches (docs/shipped-bugs.md). launch() still names the route's Triton path (no tiles, no programs), so the
    plan builds and gives the cell a case, instead of the plan's path probe raising."""
    A = vllm_adapter
    k = object.__new__(A.VllmMPLinearAdapter)
    t = parse_target("gfx1100")
    k.name, k.route, k._launches, k._capture_layers = "vllm_test_hybrid", "hybrid", {}, {}
    k._gates = {(CFG, str(t)): None}
    k.vllm_cls = type("RDNAHybridW4A16LinearKernel", (), {})
    monkeypatch.setattr(A.VllmMPLinearAdapter, "_gemv_route", lambda self, M, K, target: M <= 5)
    monkeypatch.setattr(A.VllmMPLinearAdapter, "load", lambda self, ckpt, ctx=None: None)

    def apply(self, ops, x, ctx=None):
        raise AssertionError("zp row stride 8 must match scales 4")
    monkeypatch.setattr(A.VllmMPLinearAdapter, "apply", apply)
    launch = k.launch(CFG, 17, t)
    assert launch.path == "triton_w4a16_skinny_fmt" and launch.programs == () and launch.tiles == ()
    assert "zp row stride" in launch.key[-1]
    assert k.launch(CFG, 3, t).path == "gemv_hip"

    def other(self, ops, x, ctx=None):
        raise ValueError("not vLLM's assertion")
    monkeypatch.setattr(A.VllmMPLinearAdapter, "apply", other)
    with pytest.raises(ValueError):  # any other error is the adapter's, raised (the plan names the kernel)
        k.launch(CFG, 33, t)


@pytest.fixture
def gemlite_standin(monkeypatch):
    """A `gemlite.core` with 0.6's get_matmul_type (core.py), and the adapter's kernel class."""
    def get_matmul_type(batch_size, W_nbits, mx_dtype=False):
        if batch_size >= 64:
            return "GEMM"
        return "GEMM_SPLITK" if batch_size > (4 if W_nbits < 8 else 2) else "GEMV_REVSPLITK"
    pkg, core = types.ModuleType("gemlite"), types.ModuleType("gemlite.core")
    core.get_matmul_type, pkg.core = get_matmul_type, core
    monkeypatch.setitem(sys.modules, "gemlite", pkg)
    monkeypatch.setitem(sys.modules, "gemlite.core", core)
    before = {k.name for k in registry.all_kernels()}
    mod = importlib.import_module("conformance.adapters.gemlite")
    monkeypatch.setattr(mod, "a16wn_takes_dtype", lambda: True)
    # the path is the dispatch's; the programs (a call captured under gemlite imported for the target) are the
    # compile lane's business (tests/unit/test_validate_baseline.py, test_adapters.py), not this stand-in's
    import contextlib

    from conformance.adapters import gemlite_target
    monkeypatch.setattr(gemlite_target, "for_target", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(mod.GemLiteA16W4, "_programs", lambda self, *a: [])
    yield mod.GemLiteA16W4()
    for name in {k.name for k in registry.all_kernels()} - before:
        registry.unregister_kernel(name)


def test_gemlite_declares_the_path_its_dispatch_takes(gemlite_standin):
    """GemLite's A16W4 forward picks one of three Triton programs by M; launch() says which, so the plan crosses
    each with the formats (it declared none: no path rows)."""
    k, t = gemlite_standin, parse_target("sm90")
    cfg = W4A16Config(weight_type="uint4", group_size=32, act_order=False, dtype="float16", format="gptq_v2", N=64,
                      K=256)
    paths = {M: k.launch(cfg, M, t).path for M in (1, 4, 5, 63, 64, 129)}
    assert paths == {1: "gemv_revsplitk", 4: "gemv_revsplitk", 5: "gemm_splitk", 63: "gemm_splitk", 64: "gemm",
                     129: "gemm"}
    assert k.launch(cfg, 1, parse_target("cpu")) is None  # the gate refuses: no path
