"""The vLLM adapter on a real vLLM release, 0.33.0 or 0.34.0 (installed by scripts/install-vllm.sh; skipped where it is
not). The release is read from the site's vllm-*.dist-info.

Where: $CONFORMANCE_VLLM_SITE (the install's default is `.vllm/site`); unset, the file skips: importing vLLM takes
20-100 s on the CI machine, so this is the nightly lane (docs/plugins.md), not CI. One subprocess answers every
question below as JSON (module-scoped)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = os.environ.get("CONFORMANCE_VLLM_SITE")
SUPPORTED = ("0.33.0", "0.34.0")


def _site_version() -> str | None:
    """The vLLM release installed in SITE, from its dist-info folder name."""
    infos = sorted(Path(SITE).glob("vllm-*.dist-info")) if SITE else []
    return infos[0].name[len("vllm-"):-len(".dist-info")] if infos else None


VERSION = _site_version()

PROBE = r'''
import json, sys
from conformance.core import registry
registry.load_all(["conformance.adapters.vllm"])
import conformance.adapters.vllm as A
from conformance.api import W4A16Config, parse_target
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.core.registry import get_kernel
out = {"describe": A.describe(), "registered": A.REGISTERED}
cfg = lambda **kw: W4A16Config(**{**dict(weight_type="uint4", group_size=128, act_order=False, dtype="float16",
                                         format="gptq_v2", N=256, K=256), **kw})
gates = {}
for k in ("vllm_triton_w4a16", "vllm_rdna_hybrid_w4a16", "vllm_rdna3_w4a16"):
    for t in ("cpu", "gfx1100", "gfx1151", "gfx942", "sm80", "sm90"):
        gates[f"{k}@{t}"] = get_kernel(k).can_implement(cfg(), parse_target(t))
gates["act_order"] = get_kernel("vllm_triton_w4a16").can_implement(cfg(act_order=True), parse_target("gfx1100"))
out["gates"] = gates
import vllm.platforms
out["platform_after"] = type(vllm.platforms.current_platform).__name__
B = "M={M},N=64,K=256,g=32,wt={wt},ao=0,dt=fp16,fmt={fmt},regime=exact,tier=exact,seed=11"
cases = {
    # first: the process's first load is a simulated sm90's, where vLLM 0.34.0's lazy import of its model loader (in
    # replace_parameter) must not take the CUDA branch of its attention modules on this CPU host
    "triton@sm90": ("w4a16/vllm_triton_w4a16/" + B.format(M=17, wt="uint4", fmt="compressed_tensors"), "sm90"),
    "triton@gfx1100": ("w4a16/vllm_triton_w4a16/" + B.format(M=3, wt="uint4", fmt="gptq_v2"), "gfx1100"),
    "hybrid_triton@gfx1151": ("w4a16/vllm_rdna_hybrid_w4a16/" + B.format(M=17, wt="uint4", fmt="gptq_v2"), "gfx1151"),
    "hybrid_gemv@gfx1100": ("w4a16/vllm_rdna_hybrid_w4a16/" + B.format(M=3, wt="uint4", fmt="compressed_tensors"),
                            "gfx1100"),
    # N/8 == G: the raw v1 zeros (7) pass the shape checks and shift every weight by one scale step
    "hybrid_sym_gptq@gfx1151": ("w4a16/vllm_rdna_hybrid_w4a16/M=6,N=32,K=256,g=64,wt=uint4b8,ao=0,dt=fp16,"
                                "fmt=gptq_v1,regime=exact,tier=exact,seed=11", "gfx1151"),
    "fp8_triton@sm90": ("fp8_group_quant/vllm_fp8_group_quant_triton/T=1,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,"
                        "colmajor=0,regime=normal,tier=exact,seed=3", "sm90"),
    "fp8_dispatch@sm90": ("fp8_group_quant/vllm_fp8_group_quant/T=5,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,"
                          "colmajor=0,regime=normal,tier=exact,seed=3", "sm90"),
    "marlin@sm90": ("w4a16/vllm_marlin/" + B.format(M=3, wt="uint4b8", fmt="gptq_v2"), "sm90"),
}
out["cases"] = {}
for name, (cid, t) in cases.items():
    v = run_case(parse_case_id(cid), target=t, record=False)
    out["cases"][name] = {"outcome": v.outcome, "run_mode": v.run_mode, "detail": v.detail[:400]}
from conformance.cases import plan
out["hybrid_paths"] = {t: sorted({r.path for tier in ("exact", "statistical")
                                  for r in plan.build_plan("vllm_rdna_hybrid_w4a16", t, tier, seed=0).rows})
                       for t in ("gfx1100", "gfx1151")}
tk = get_kernel("vllm_triton_w4a16")
out["op"] = str(tk.op)
out["launch"] = tk.launch_config()
print("JSON" + json.dumps(out))
'''


# A CUDA machine (an H200) whose vLLM has no compiled build for its torch: vLLM's machine platform is its CudaPlatform
# (here one answering capability 9.0), and vLLM's own import path on it calls compiled ops at import time
CUDA_PROBE = r'''
import json
import torch
import conformance.adapters.vllm_platform as P
P.ensure_compiled_placeholder()
import vllm.platforms as VP
from conformance.api import W4A16Config, parse_target
VP._current_platform = P.platform_for(parse_target("sm90"))
P._PLATFORMS.clear()
from conformance.core import registry
registry.load_all(["conformance.adapters.vllm"])
import conformance.adapters.vllm as A
from conformance.core.registry import get_kernel
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
import sys
cfg = W4A16Config(weight_type="uint4", group_size=128, act_order=False, dtype="float16", format="gptq_v2", N=256, K=256)
mod = sys.modules["vllm.model_executor.kernels.linear.mixed_precision.triton_w4a16"]
print("JSON" + json.dumps({
    "describe": A.describe(), "registered": A.REGISTERED,
    "bound": type(mod.current_platform).__name__, "machine": type(VP.current_platform).__name__,
    "dispatch": {k: torch._C._dispatch_has_kernel_for_dispatch_key("vllm::triton_w4a16_gemm", k)
                 for k in ("CPU", "CUDA", "CompositeExplicitAutograd")},
    "gates": {t: get_kernel("vllm_triton_w4a16").can_implement(cfg, parse_target(t))
              for t in ("sm90", "gfx1100", "cpu")},
    # the first load, on the machine's (CUDA) platform: vLLM 0.34.0 imports its model loader lazily there, whose
    # attention modules import the flash-attention extension on CUDA; it must import as the kernel package did
    "triton@sm90": run_case(parse_case_id("w4a16/vllm_triton_w4a16/M=17,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,"
                                          "fmt=compressed_tensors,regime=exact,tier=exact,seed=11"), target="sm90",
                            record=False).line()[:600],
    # a simulated ROCm target's Triton path on this host runs vLLM's own op with CPU tensors
    "hybrid@gfx1151": run_case(parse_case_id("w4a16/vllm_rdna_hybrid_w4a16/M=17,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,"
                                             "fmt=gptq_v2,regime=exact,tier=exact,seed=11"), target="gfx1151",
                               record=False).line()[:600],
}))
'''


def _run_probe(script: str) -> dict:
    if not SITE:
        pytest.skip("CONFORMANCE_VLLM_SITE is not set: the real-vLLM lane is nightly (bash scripts/install-vllm.sh, "
                    "then CONFORMANCE_VLLM_SITE=.vllm/site)")
    site = (ROOT / SITE).resolve()
    if not (site / "vllm" / "__init__.py").is_file():
        pytest.skip(f"CONFORMANCE_VLLM_SITE={SITE!r} holds no vllm package (bash scripts/install-vllm.sh)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("JSON")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][4:])


@pytest.fixture(scope="module")
def probe():
    return _run_probe(PROBE)


def test_a_cuda_machine_without_vllms_compiled_build_imports_and_gates():
    """On a CUDA machine vLLM 0.33.0's import path calls compiled ops (w8a8_utils: CUTLASS_BLOCK_FP8_SUPPORTED) and
    imports its flash-attention extension; without its compiled build (built for torch 2.14) the adapter imports the
    kernel package under vLLM's CpuPlatform with the CompositeExplicitAutograd dispatch key (vLLM's ops then run on
    CUDA and on CPU tensors: a simulated ROCm target's run on that host), then rebinds the machine's CudaPlatform."""
    p = _run_probe(CUDA_PROBE)
    assert "vllm_triton_w4a16" in p["registered"] and "vllm_unavailable" not in p["registered"], p["describe"]
    assert "imported under vLLM's CpuPlatform with dispatch key CompositeExplicitAutograd" in p["describe"]
    assert p["bound"] == p["machine"] and p["bound"].startswith("Simulated"), p
    assert p["dispatch"] == {"CPU": False, "CUDA": False, "CompositeExplicitAutograd": True}, p  # every backend
    assert p["triton@sm90"].startswith("PASS "), p["triton@sm90"]
    assert p["hybrid@gfx1151"].startswith("PASS "), p["hybrid@gfx1151"]  # vLLM's op on CPU tensors
    assert p["gates"]["sm90"] is None and p["gates"]["gfx1100"] is None, p["gates"]
    assert "_POSSIBLE_KERNELS[CPU]" in p["gates"]["cpu"], p["gates"]


def test_finds_todays_layout_and_version(probe):
    assert VERSION in SUPPORTED, VERSION
    assert f"vllm {VERSION}, kernel package vllm.model_executor.kernels.linear.mixed_precision" in probe["describe"]
    assert "vllm._C_stable_libtorch did not load" in probe["describe"]
    for name in ("vllm_triton_w4a16", "vllm_rdna_hybrid_w4a16", "vllm_fp8_group_quant_triton", "vllm_marlin"):
        assert name in probe["registered"]


def test_gates_are_vllms_own_for_each_target(probe):
    g = probe["gates"]
    for t in ("gfx1100", "gfx1151", "gfx942", "sm80", "sm90"):
        assert g[f"vllm_triton_w4a16@{t}"] is None, g
    assert "is not in vLLM's _POSSIBLE_KERNELS[CPU]" in g["vllm_triton_w4a16@cpu"]
    assert g["vllm_rdna_hybrid_w4a16@gfx1100"] is None and g["vllm_rdna_hybrid_w4a16@gfx1151"] is None
    assert "only targets gfx11/gfx12" in g["vllm_rdna_hybrid_w4a16@gfx942"]
    assert "_POSSIBLE_KERNELS[CUDA]" in g["vllm_rdna_hybrid_w4a16@sm90"]
    assert "requires gfx1100" in g["vllm_rdna3_w4a16@gfx1151"]
    assert "gptq_gemm_rdna3 missing" in g["vllm_rdna3_w4a16@gfx1100"]  # its gate asks for its compiled op
    assert g["act_order"].startswith(f"act_order=True not supported: vLLM {VERSION}'s MPLinearLayerConfig")
    assert probe["platform_after"] == "UnspecifiedPlatform"


def test_vllms_code_runs_and_is_judged(probe):
    c = probe["cases"]
    assert c["triton@gfx1100"]["outcome"] == "pass" and c["triton@gfx1100"]["run_mode"] == "interpreter", c
    assert c["triton@sm90"]["outcome"] == "pass", c
    assert c["hybrid_triton@gfx1151"] == {**c["hybrid_triton@gfx1151"], "outcome": "pass", "run_mode": "interpreter"}
    assert c["hybrid_gemv@gfx1100"]["outcome"] == "pass" and c["hybrid_gemv@gfx1100"]["run_mode"] == "model", c
    assert c["fp8_triton@sm90"]["outcome"] == "pass" and c["fp8_triton@sm90"]["run_mode"] == "interpreter", c
    assert c["fp8_dispatch@sm90"]["outcome"] == "skip" and "per_token_group_fp8_quant" in c["fp8_dispatch@sm90"][
        "detail"], c
    assert c["marlin@sm90"]["outcome"] == "skip" and "compiled ops are absent" in c["marlin@sm90"]["detail"], c


def test_symmetric_gptq_qzeros_reach_the_hybrid_kernel(probe):
    # vLLM 0.33.0's and 0.34.0's RDNAHybridW4A16 apply_weights hand a symmetric layer's qzeros to its op
    # (docs/shipped-bugs.md)
    assert probe["cases"]["hybrid_sym_gptq@gfx1151"]["outcome"] == "fail", probe["cases"]


def test_vllms_custom_op_is_exposed_with_its_launch(probe):
    assert probe["op"] == "vllm.triton_w4a16_gemm.default"
    assert probe["launch"]["path"] == "triton" and probe["launch"]["BLOCK_K"] <= 32


def test_the_hybrids_plan_builds_and_names_every_path(probe):
    # the plan's path probe asks launch() of symmetric GPTQ layers, on which vLLM's hybrid asserts (N/8 != G): the
    # plan still builds; gfx1151's fp16 symmetric layers take the PACKED_DEQUANT code path, named as a path
    p = probe["hybrid_paths"]
    assert p["gfx1100"] == ["gemv_hip", "triton_w4a16_skinny_fmt"], p
    assert p["gfx1151"] == ["gemv_hip", "triton_w4a16_skinny_fmt", "triton_w4a16_skinny_fmt+packed_dequant"], p
