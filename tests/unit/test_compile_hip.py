"""The compile lane's HIP backend (conformance/compile/hip_driver.py): resources read from real clang AMDGPU assembly
(a checked-in fixture: tests/unit/hip_fixture/tiny_gfx1151.s, clang-19's output for tiny.hip), the empty-kernel
verdict, the programs and compile ids rdna3_w4a16 declares (gated-out RDNA targets compiled with gfx1100's
launches), and the skip with its reason where clang or vLLM's source is missing. The tests that need clang (and
vLLM 0.33.0's source) skip without them; every cache write goes under the test's own temporary directory."""
from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cases.ids import parse_case_id
from conformance.compile import hip_driver, lane
from conformance.core import registry
from conformance.core.targets import parse_target

FIXTURE = Path(__file__).parent / "hip_fixture"
RCASE = "w4a16/rdna3_w4a16/M=6,N=48,K=512,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=awq,regime=exact,tier=exact,seed=1"
NO_CLANG = "no-such-clang-for-tests"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(hip_driver.ENV_SRC, raising=False)
    hip_driver.configure(vllm_src=None)


def _fixture_kernels() -> dict:
    return hip_driver.kernels_of((FIXTURE / "tiny_gfx1151.s").read_text(encoding="utf-8"))


def _by_prefix(kernels: dict, prefix: str) -> dict:
    (name,) = [n for n in kernels if n.startswith(prefix)]
    return kernels[name]


def test_resources_read_from_clang_assembly():
    """Each kernel's metadata entry and code: the staged kernel's LDS (256 halves), VGPRs equal to LLVM's own
    `; NumVgprs:` comment, one global store; the guarded kernel compiled for gfx1151 is s_endpgm alone."""
    asm = (FIXTURE / "tiny_gfx1151.s").read_text(encoding="utf-8")
    ks = _fixture_kernels()
    assert len(ks) == 2
    staged = _by_prefix(ks, "_ZN4tiny6stagedI6__halfEE")
    comments = [int(x.split(":")[1]) for x in asm.splitlines() if x.startswith("; NumVgprs:")]
    assert staged["vgprs"] == comments[1] > 0 and staged["sgprs"] > 0
    assert staged["lds_bytes"] == 512 and staged["scratch_bytes"] == 0 and staged["wave_size"] == 32
    assert staged["global_writes"] == 1 and staged["instructions"] > 5 and staged["compiler_occupancy"] == 16
    guarded = _by_prefix(ks, "_ZN4tiny7guardedI6__halfLi4EEE")
    assert guarded["global_writes"] == 0 and guarded["instructions"] == 1 and guarded["code_bytes"] == 4


def _spec(program, arch="gfx1151"):
    k = registry.get_kernel("rdna3_w4a16")
    case = parse_case_id(RCASE)
    return lane.Spec(k.name, parse_target(arch), program, k.launch(case.config(), case.M, parse_target("gfx1100")),
                     case)


@pytest.mark.parametrize("which, verdict", [("guarded", "empty-kernel"), ("staged", "pass")])
def test_a_kernel_that_writes_nothing_is_an_empty_kernel_verdict(monkeypatch, which, verdict):
    """The lane's record of a HIP program: judged by the shared resources code, and `empty-kernel` (with the
    instruction count) when the compiled kernel has no global write."""
    res = _by_prefix(_fixture_kernels(), f"_ZN4tiny{len(which)}{which}")
    prog = hip_driver.hip_program("tiny.hip", f"tiny::{which}", (("T", "__half"),), 256)

    def fake(program, lim, cache=True):
        return {"ok": True, "message": "", "seconds": 0.1, "compiler": "clang (fixture)", "cached": False,
                "resources": dict(res, threads=256, num_warps=256 // lim.wave_size)}

    monkeypatch.setattr(hip_driver, "compile_program", fake)
    rec = lane.compile_spec(_spec(prog))
    assert rec["verdict"] == verdict, rec
    assert rec["compiler"] == "clang (fixture)" and rec["resources"]["occupancy"] > 0
    if verdict == "empty-kernel":
        assert "writes no global memory (1 instructions" in rec["message"]
    assert hip_driver.empty_reason({"vgprs": 3}, "gfx1100") is None  # Triton records carry no write count


def test_rdna3_declares_its_hip_programs_and_gated_out_targets_compile_gfx1100s():
    """The launcher's choice: M_COUNT per 64-row tile (M = 65: 8 then 1, two programs with their own names), the
    bf16 reduce when K is split, nothing at M >= 12 (the WMMA unit); gfx1151 / gfx1201 take gfx1100's launches,
    gfx942 none; ids are compile/<arch>/<instantiation>/<case id>."""
    k = registry.get_kernel("rdna3_w4a16")
    case = parse_case_id(RCASE)
    gfx1100, gfx1151 = parse_target("gfx1100"), parse_target("gfx1151")
    names = [lane.short_name(p) for p in k.launch(case.config(), 6, gfx1100).programs]
    assert names == ["gemm_q4_kernel_rdna3_bfloat16_4", "reduce_partials_rdna3_bfloat16"]
    n40 = parse_case_id(RCASE.replace("N=48", "N=40")).config()  # N % 16 != 0: M = 65 stays on the scalar path
    assert [lane.short_name(p) for p in k.launch(n40, 65, gfx1100).programs] == [
        "gemm_q4_kernel_rdna3_bfloat16_1", "gemm_q4_kernel_rdna3_bfloat16_8", "reduce_partials_rdna3_bfloat16"]
    assert k.launch(case.config(), 12, gfx1100).programs == ()
    assert k.launch(case.config(), 6, gfx1151) is None  # the gate still refuses: only the lane goes past it
    assert hip_driver.home_target(k, gfx1151) == gfx1100 and hip_driver.home_target(k, gfx1100) is None
    assert hip_driver.home_target(k, parse_target("gfx942")) is None
    assert hip_driver.home_target(registry.get_kernel("triton_w4a16"), gfx1151) is None
    prog = k.launch(case.config(), 6, gfx1100).programs[0]
    assert hip_driver.mangled_prefix(prog) == "_ZN4vllm10gptq_rdna320gemm_q4_kernel_rdna3I14__hip_bfloat16Li4EEE"
    assert lane.compile_id(gfx1151, prog, case) == f"compile/gfx1151/gemm_q4_kernel_rdna3_bfloat16_4/{RCASE}"


def test_hip_program_refuses_what_it_cannot_name():
    with pytest.raises(ValueError, match="template argument T='half float'"):
        hip_driver.hip_program("x.cu", "ns::k", (("T", "half float"),), 256)
    with pytest.raises(ValueError, match="threads=0"):
        hip_driver.hip_program("x.cu", "ns::k", (), 0)
    with pytest.raises(ValueError, match="function='ns::k<int>'"):
        hip_driver.hip_program("x.cu", "ns::k<int>", (), 64)


def test_without_clang_the_lane_skips_and_repro_exits_125_with_the_reason(monkeypatch):
    monkeypatch.setenv(hip_driver.ENV_CLANG, NO_CLANG)
    k = registry.get_kernel("rdna3_w4a16")
    out = lane.run_lane([k], ["gfx1100", "gfx1151"], seed=0, sets=("catalogue",))
    assert out["records"] == [] and out["kernels"]["rdna3_w4a16"] == {"gfx1100": "skipped (HIP)",
                                                                      "gfx1151": "skipped (HIP)"}
    assert len(out["skipped"]) == 2 and all(NO_CLANG in s and "apt-get install clang-19" in s
                                            for s in out["skipped"])
    code, line = lane.replay(f"compile/gfx1151/gemm_q4_kernel_rdna3_bfloat16_4/{RCASE}")
    assert code == lane.EXIT_CANNOT and line.startswith("SKIP") and NO_CLANG in line, line
    code, line = lane.replay(f"compile/gfx942/gemm_q4_kernel_rdna3_bfloat16_4/{RCASE}")
    assert code == lane.EXIT_CANNOT and "gate refuses" in line, line
    assert lane.replay("compile/gfx1151/gemm_q4_kernel_rdna3_bfloat16_4")[0] == lane.EXIT_BAD_ID


def test_a_source_dir_without_csrc_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(hip_driver.ENV_SRC, str(tmp_path))
    root, why = hip_driver.vllm_source()
    assert root is None and why == f"${hip_driver.ENV_SRC}={tmp_path} holds no csrc/rocm/ (a vLLM 0.33.0 source tree " \
                                   "is expected)"
    hip_driver.configure(vllm_src=str(tmp_path / "x"))
    assert hip_driver.vllm_source()[1].startswith(f"--vllm-src={tmp_path / 'x'} holds no csrc/rocm/")


needs_clang = pytest.mark.skipif(hip_driver.find_clang()[0] is None, reason=hip_driver.find_clang()[1])


@needs_clang
def test_clang_with_the_shim_compiles_the_fixture_and_the_guard_empties_it_off_gfx1100():
    """The header shim end to end: the guarded template has a body (a global store) on gfx1100 and none on
    gfx1151, the unguarded one writes on both (two clang runs, about 1 s)."""
    for arch, want in (("gfx1100", 1), ("gfx1151", 0)):
        unit = hip_driver.compile_unit(FIXTURE / "tiny.hip", arch)
        assert unit["ok"], unit["message"]
        assert _by_prefix(unit["kernels"], "_ZN4tiny7guardedI6__halfLi4EEE")["global_writes"] == want, arch
        assert _by_prefix(unit["kernels"], "_ZN4tiny6stagedI6__halfEE")["global_writes"] == 1, arch


_VLLM_SRC, _NO_SRC = hip_driver.vllm_source()  # found before the test's own cache dir replaces the user's


@needs_clang
@pytest.mark.skipif(_VLLM_SRC is None, reason=_NO_SRC)
def test_vllm_rdna3_kernel_is_empty_on_gfx1151(monkeypatch):
    """vLLM 0.33.0's q_gemm_rdna3.cu for gfx1151 (its bodies are preprocessed out: under 1 s of clang):
    gemm_q4_kernel_rdna3<__half, 1> is s_endpgm alone. (Its gfx1100 compile, about 3 s, is the recorded lane run.)"""
    monkeypatch.setenv(hip_driver.ENV_SRC, str(_VLLM_SRC))
    k = registry.get_kernel("rdna3_w4a16")
    case = parse_case_id(RCASE.replace("dt=bf16", "dt=fp16"))
    launch = k.launch(case.config(), 1, parse_target("gfx1100"))
    rec = lane.compile_spec(lane.Spec(k.name, parse_target("gfx1151"), launch.programs[0], launch, case))
    assert rec["verdict"] == "empty-kernel" and rec["resources"]["instructions"] == 1, rec
