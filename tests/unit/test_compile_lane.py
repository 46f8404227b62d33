"""The compile lane in CI (lean: the full ci-plan lane is `python -m conformance compile` and the nightly
`--conformance-compile-targets`): a program of triton_w4a16 compiled by each of the nine targets' own compilers with
its resources read, the declared launches equal to the ones `apply` makes, compile ids replayed, and the proof of
power: two broken kernels that pass the CPU numeric checks and that only a compile for the target catches.
Every compile here writes its cache under the test's own temporary directory."""
from __future__ import annotations

import pytest
import torch

from conformance.cases.ids import parse_case_id
from conformance.compile import lane
from conformance.core import registry
from conformance.core.launch_capture import capture_programs
from conformance.core.target_limits import LANE_TARGETS, TABLE, limits
from conformance.core.targets import CPU, parse_target

BASE = "w4a16/triton_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))


def _spec(kernel, case, arch, program_suffix):
    t = parse_target(arch)
    specs, errors = lane.specializations(kernel, t, seed=0, cases=[case])
    assert not errors
    return next(s for s in specs if s.program.name.endswith(program_suffix))


def test_every_lane_target_has_a_cited_limits_row():
    assert set(LANE_TARGETS) <= set(TABLE)
    for arch in LANE_TARGETS:
        lim = limits(arch)
        assert lim.sources and lim.lds_bytes > 0 and lim.compute_units > 0
        assert lim.wave_size == (64 if arch.startswith("gfx9") else 32)


def test_nine_targets_compile_a_program_with_their_own_compiler():
    """The split-K reduce program of a triton_w4a16 decode call (the cheapest to compile) on every lane target: a
    pass with the resources its binary reports (registers; LDS / shared memory)."""
    k = registry.get_kernel("triton_w4a16")
    case = parse_case_id(BASE)
    for arch in LANE_TARGETS:
        rec = lane.compile_spec(_spec(k, case, arch, "_splitk_reduce_kernel"))
        assert rec["verdict"] == "pass", rec
        res = rec["resources"]
        regs = res["vgprs"] if arch.startswith("gfx") else res["registers"]
        assert regs and regs > 0 and res["occupancy"] and res["occupancy"] > 0, rec
        assert rec["id"].startswith(f"compile/{arch}/_splitk_reduce_kernel/w4a16/triton_w4a16/")


@pytest.mark.parametrize("cid", [
    BASE, BASE.replace("M=3", "M=40").replace("g=32", "g=ch").replace("dt=fp16", "dt=bf16"),
    BASE.replace("M=3", "M=100").replace("fmt=gptq_v2", "fmt=awq")])
def test_declared_launch_is_the_one_apply_makes(cid):
    """triton_w4a16.launch(this machine's target) lists exactly the programs (signature, constexprs, options) its
    apply launches here: the interpreter's choice on a CPU host, the device's table and SM count on a GPU."""
    from conformance.checks import catalogue
    from conformance.core.runtime import kernel_device
    from conformance.core.targets import detect_target

    k = registry.get_kernel("triton_w4a16")
    case = parse_case_id(cid)
    ops = k.load(catalogue.checkpoint(case))
    x = torch.zeros(case.M, case.K, dtype=torch.float16 if case.dtype == "float16" else torch.bfloat16,
                    device=kernel_device())
    got = [p.key for p in capture_programs(lambda: k.apply(ops, x))]
    assert got == [p.key for p in k.launch(case.config(), case.M, detect_target()).programs]


def test_paths_follow_the_tile_tables():
    k = registry.get_kernel("triton_w4a16")
    c = parse_case_id(BASE).config()
    assert k.launch(c, 1, CPU).path == "planar+splitk"
    assert k.launch(c, 100, CPU).path == "dequant_mm"
    assert k.launch(c, 1, parse_target("gfx942")).path.startswith("gemv")
    assert registry.get_kernel("triton_w4a16_actorder").launch(c, 20, parse_target("gfx1100")).path.startswith("dot")


def test_compile_ids_replay_and_bad_ids_exit_2():
    assert lane.replay("compile/sm90")[0] == lane.EXIT_BAD_ID
    assert lane.replay("compile/cpu/x/" + BASE)[0] == lane.EXIT_BAD_ID
    code, line = lane.replay("compile/gfx1201/_splitk_reduce_kernel/" + BASE)
    assert code == lane.EXIT_PASS and line.startswith("PASS"), line
    code, line = lane.replay("compile/gfx1201/no_such_program/" + BASE)
    assert code == lane.EXIT_CANNOT, line


@pytest.mark.parametrize("name", ["broken_lds_row_gfx1201", "broken_dot_k8_cuda"])
def test_proof_of_power_only_a_compile_catches(name):
    """Each broken kernel passes a CPU numeric case (its apply is triton_w4a16's) and the lane kills it on its target
    (LDS above gfx1201's 64 KiB; tl.dot with K = 8 on sm90), while the same program compiles for another target."""
    from conformance.checks import catalogue
    from conformance.checks.harness import run_case
    from tests.unit.broken_compile import BROKEN

    cls, arch, want = BROKEN[name]
    k = cls()
    if name == "broken_lds_row_gfx1201":
        case = parse_case_id(BASE.replace("triton_w4a16", name).replace("M=3", "M=20").replace("g=32", "g=ch"))
        other = "gfx1100"
    else:
        case = catalogue.small_k_cases(name, 8)[1]  # channelwise K = 8, M = 17: a tl.dot row on sm90
        other = "gfx942"
    v = run_case(case, k, CPU, check_determinism=False)
    assert v.passed, v.line()
    rec = lane.compile_spec(_spec(k, case, arch, "_w4a16_gemm_kernel"), cache=False)
    assert rec["verdict"] == want, rec["message"]
    assert ("LDS" in rec["message"]) if want == "resource-fail" else ("K >= 16" in rec["message"]), rec
    good = lane.compile_spec(_spec(k, case, other, "_w4a16_gemm_kernel"), cache=False)
    assert good["verdict"] == "pass", good


def test_capture_checkpoint_encodes_v1_zero_points_of_zero():
    """A gptq_v1 config whose seeded weight draws z = 0 (not storable as z - 1) gets the borrow real v1 checkpoints
    carry, as the family's cases do: a capture of such a case is a launch, not a LAUNCH ERROR in the lane."""
    import torch

    from conformance.api import W4A16Config
    from conformance.core.launch_capture import checkpoint_for
    from references import codecs

    cfg = W4A16Config(weight_type="uint4", group_size=64, act_order=False, dtype="bfloat16", format="gptq_v1", N=32,
                      K=256)
    w = codecs.decode(checkpoint_for(cfg))
    assert w.zeros is not None and int((w.zeros == 0).sum()) > 0 and w.scales.dtype == torch.bfloat16


def test_a_functions_source_digest_is_computed_once_per_process(monkeypatch):
    """The lane's cache key hashes each program's source through Triton's cache_key: computed once per function
    (hundreds of specializations share a few functions), equal to a fresh computation, and another function gets
    its own."""
    from conformance.compile import triton_driver as td
    from conformance.families.config import W4A16Config

    c = W4A16Config(weight_type="uint4", group_size=128, act_order=False, dtype="float16", format="gptq_v2",
                    N=256, K=512)
    k = registry.get_kernel("triton_w4a16")
    progs = {p.name: p for M in (1, 20, 200) for p in k.launch(c, M, parse_target("sm90")).programs}
    assert len(progs) >= 2, sorted(progs)
    entered, real = [], td._compilable_language

    def counting():
        entered.append(1)
        return real()

    monkeypatch.setattr(td, "_DIGESTS", {})
    monkeypatch.setattr(td, "_compilable_language", counting)
    first, second = list(progs.values())[:2]
    d1 = td.source_digest(first)
    assert td.source_digest(first) == d1 and len(entered) == 1
    with real():
        assert d1 == td.jit_view(first.fn).cache_key
    assert td.source_digest(second) != d1 and len(entered) == 2
