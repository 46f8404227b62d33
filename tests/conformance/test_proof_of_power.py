"""Proof of power: the CI plan itself kills every numeric broken kernel of tests/unit/broken_registry.py with a
wrong answer and a replayable case id, while the correct kernel passes that very case; each contract mutant
fails the contract check built for it; and every shipped-bug catalogue entry (conformance/checks/catalogue.py)
FAILS (a wrong answer, never the kernel's own error) on the broken kernel that reintroduces its bug.

The plan runs at the fixed run seed SEED, both tiers side by side in plan order, stopping at the first `fail`
(tests/unit/mutant_hunt.py); an `error` before it fails the test (a crash is not the suite catching the bug).
benchmarks/proof_of_power.py measures the same over several run seeds; docs/proof-of-power.md has the figures.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import torch

from conformance import cli
from conformance.cases.ids import parse_case_id
from conformance.core import registry
from conformance.core.targets import detect_target
from tests import warm_python
from tests.unit import broken_registry
from tests.unit.mutant_hunt import hunt

ROOT = Path(__file__).resolve().parents[2]
SEED = 0  # the run seed of this test's plans: benchmarks/proof_of_power.py's first seed (docs/proof-of-power.md)
MAX_MEDIAN_POSITION = 3  # the median first failing plan row over the numeric broken kernels (issue 12)

_REGISTRY = broken_registry.load()  # names for parametrization; unloaded again below, loaded per module fixture
broken_registry.unload()
NUMERIC = sorted(n for n, b in _REGISTRY.items() if b.numeric)
CONTRACT = sorted(n for n, b in _REGISTRY.items() if not b.numeric)
_HUNTS: dict = {}  # kernel -> Hunt at SEED, shared by the tests of this module in one process


@pytest.fixture(scope="module")
def broken():
    """The broken kernels, registered for this module only (other suites must never parametrize over them)."""
    reg = broken_registry.load()
    yield reg
    broken_registry.unload()


def _only(name: str):
    """The row filter of a broken kernel whose bug one path (format, dtype) runs (the rows it cannot reach cannot
    fail: see test_path_mutants_break_only_their_path), else None."""
    b = _REGISTRY[name]
    return b.reaches if b.confined else None


def _hunt(name: str):
    if name not in _HUNTS:
        _HUNTS[name] = hunt(name, SEED, only=_only(name))
    return _HUNTS[name]


@pytest.fixture
def repro(monkeypatch, capsys):
    """Run a printed replay line (`python -m conformance ...`) in-process; its exit code. Its verdicts stay out of
    this session's report and summary (the failures here are deliberate)."""
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: {})

    def run(line: str) -> int:
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "conformance"], line
        code = cli.main(argv[3:])
        capsys.readouterr()
        return code
    return run


def test_registry_is_complete(broken):
    """At least 25 numeric single-bug kernels plus the contract mutants; each names its base, bug and killer."""
    from conformance.checks.contracts import CONTRACT_CHECKS

    assert len(NUMERIC) >= 25, NUMERIC
    for b in broken.values():
        assert registry.get_kernel(b.name).family == registry.get_kernel(b.base).family, b
        assert b.bug and "\n" not in b.bug, b
        assert b.kill == broken_registry.CI_PLAN or b.kill in CONTRACT_CHECKS, b
        assert registry.kernel_plugin(b.name) == b.module, (b.name, registry.kernel_plugin(b.name))


def _unreachable_here(b) -> str | None:
    """Why broken kernel `b`'s one bug cannot show on this machine's target (None: it can): the configs it breaks are
    refused there, or the tile table the kernel reads here has no row of the kind the bug needs."""
    from conformance.families.config import Fp8QuantConfig

    here = detect_target()
    if b.name == "broken_fp8_fnuz_max_240":
        refusal = registry.get_kernel(b.base).can_implement(
            Fp8QuantConfig(group_size=128, dtype="bfloat16", fp8_dtype="float8_e4m3fnuz", hidden=256), here)
        return f"e4m3fnuz is not served on {here}: {refusal}" if refusal else None
    if b.name == "broken_split_remainder_dropped" and here.is_gpu:
        from conformance_kernels import triton_w4a16 as tw

        from tests.unit.devices import DEV, tile_kind

        kind = tile_kind()
        rows = [c for table in (tw.TILE_TABLE, tw.PLANAR_TABLE) for _, c in table.get(kind, ())]
        if not any(c.split_k > 1 and not c.dequant_mm for c in rows):
            return (f"the bug needs a fixed split count that may not divide the K tiles; every row of {kind}'s tile "
                    f"table on {DEV} splits by split_k=0 (auto), which always divides")
    return None


@pytest.mark.parametrize("name", NUMERIC)
def test_ci_plan_kills(broken, name, repro):
    """The plan fails the broken kernel (a `fail`, no `error` before it); the kill replays as printed (exit 1)
    and the same case replays on the base kernel with exit 0 (so the failure is the one bug)."""
    b = broken[name]
    why = _unreachable_here(b)
    if why:
        pytest.skip(why)
    h = _hunt(name)
    assert h.error is None, f"{name}: the kernel raised before the plan caught it: {h.error.line()}"
    assert h.kill is not None, f"{name}: survived the whole plan at seed {SEED} ({h.plan_rows()} rows per tier)"
    v = h.kill
    assert v.outcome == "fail" and v.replay.startswith(f"python -m conformance --plugin {b.module} repro "), v.line()
    assert parse_case_id(v.case_id).kernel == name
    assert b.breaks(h.kill_path), (name, h.kill_path)  # a path mutant dies on its own path
    # the printed line (the determinism re-run off: the hunt judged the kill without it)
    assert repro(v.replay + " --no-determinism") == 1, v.line()
    base_id = parse_case_id(v.case_id).with_kernel(b.base).id
    base_line = v.replay.replace(v.case_id, base_id).replace(f"--plugin {b.module} ", "")
    assert repro(base_line + " --no-determinism") == 0, base_id


def test_median_first_failing_row(broken):
    """Over the numeric broken kernels, the median 1-based plan row of the first `fail` is at most 3: more than half
    of them fail within the first MAX_MEDIAN_POSITION rows (for an odd count exactly the median's condition, for an
    even one slightly stronger). Hunts this process already ran count as they are; the others run only their first
    MAX_MEDIAN_POSITION rows, and only until enough kernels are known to fail there (the test's cost under xdist)."""
    need = len(NUMERIC) // 2 + 1
    early = {}
    for n in sorted(NUMERIC, key=lambda n: n not in _HUNTS):  # the hunts already run first: they cost nothing
        early[n] = (_HUNTS.get(n) or hunt(n, SEED, max_rows=MAX_MEDIAN_POSITION, only=_only(n))).position
        within = sorted(k for k, p in early.items() if p is not None and p <= MAX_MEDIAN_POSITION)
        if len(within) >= need:
            return
    raise AssertionError(f"only {len(within)} of {len(NUMERIC)} numeric broken kernels fail within the first "
                         f"{MAX_MEDIAN_POSITION} plan rows at seed {SEED} (the median needs {need}): {early}")


PATH_MUTANTS = sorted(n for n, b in _REGISTRY.items() if b.confined)


@pytest.mark.parametrize("name", PATH_MUTANTS)
def test_path_mutants_break_only_their_path(broken, name):
    """A broken kernel of tests/unit/broken_paths.py breaks its one path for its format (dtype) and nothing else:
    on its `sample` layer the case at the least M of each path its base kernel takes here fails on the broken path
    and passes on every other, and on the broken path the sample in every other format (act dtype) passes. So a
    plan row it does not reach cannot kill it, and the hunt that leaves those rows out finds the full hunt's row."""
    from conformance.cases.ids import Case
    from conformance.cases.plan import PlanRow, path_entries
    from conformance.checks.harness import run_case
    from references.checkpoint import CHECKPOINT_FORMATS

    b = broken[name]
    k, t = registry.get_kernel(name), detect_target()

    def verdict(fields, path):
        case = Case(family="w4a16", kernel=name, tier="exact", regime="exact", seed=5, **fields)
        v = run_case(case, k, t, check_determinism=False, record=False)
        assert v.outcome == ("fail" if b.reaches(PlanRow(0, case, (), "", "path", {}, path)) else "pass"), v.line()

    config = Case(family="w4a16", kernel=name, tier="exact", regime="exact", seed=5, **b.cls.sample, M=1).config()
    entries = path_entries(registry.get_kernel(b.base), t, config)
    assert any(b.breaks(p) for p, _ in entries) and not all(b.breaks(p) for p, _ in entries), entries
    for path, m in entries:
        verdict(dict(b.cls.sample, M=m), path)
    path, m = next((p, m) for p, m in entries if b.breaks(p))
    others = [dict(format=f) for f in CHECKPOINT_FORMATS if b.formats and f not in b.formats]
    others += [dict(dtype=d) for d in ("float16", "bfloat16") if b.dtypes and d not in b.dtypes]
    assert others, name
    for change in others:
        verdict(dict(b.cls.sample, M=m, **change), path)


def test_repro_in_a_fresh_process_with_the_plugin_env(broken):
    """A replay works in a new process with the plugin named by CONFORMANCE_PLUGINS instead of `--plugin`."""
    b = broken["broken_no_block_k_clamp"]
    case_id = ("w4a16/broken_no_block_k_clamp/"
               "M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=91")
    env = dict(os.environ, CONFORMANCE_PLUGINS=b.module, PYTHONPATH=str(ROOT))
    r = warm_python.run([sys.executable, "-m", "conformance", "repro", "--no-determinism", case_id], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith(f"FAIL {case_id}")


# ---- contract mutants ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONTRACT)
def test_contract_check_fails_its_mutant(broken, name, monkeypatch):
    """The check that must kill the contract mutant records a `fail` (ContractFailure), never an error; the same
    check on the base kernel is tests/unit/test_contract_mutants.py's (and the shipped suite's)."""
    from conformance.checks import contracts
    from conformance.core import results

    b = broken[name]
    recorded = []
    monkeypatch.setattr(results, "record", lambda *a, **kw: recorded.append((a, kw)) or {})
    k = registry.get_kernel(name)
    with pytest.raises(contracts.ContractFailure):
        contracts.run_check(b.kill, k, broken_registry.contract_check(b.kill, k))
    assert [a[2] for a, _ in recorded] == ["fail"], recorded


# ---- the shipped-bug catalogue ---------------------------------------------------------------------------------

# broken kernel -> the catalogue entries whose bug it reintroduces (each entry must FAIL on it)
CATALOGUE_BUG = {
    "broken_ct_zeros_not_transposed": ("ct_zero_points_transposed",),
    "broken_zeros_always_transposed": ("gptq_zero_points_not_transposed",),
    "broken_plus_one_from_has_zeros": ("v1_offset_follows_convention", "symmetric_qzeros_ignored"),
    "broken_v2_read_as_v1": ("v2_not_read_as_v1",),
    "broken_v1_nibble_wise_plus_one": ("v1_zero_point_zero_borrow",),
    "broken_ignores_g_idx": ("act_order_applied",),
    "broken_no_block_k_clamp": ("block_k_within_group",),
    "broken_bf16_dequant_via_fp16": ("bf16_dequantized_in_bf16",),
    "broken_fp8_no_eps": ("fp8_zero_group_no_eps",),
}
_PAIRS = [(name, key) for name, keys in CATALOGUE_BUG.items() for key in keys]
# the broken kernels whose bug is in the Triton launch: a catch must run the kernel, not its model
LAUNCH_BUGS = ("broken_no_block_k_clamp", "broken_bf16_dequant_via_fp16")


def test_every_catalogue_entry_has_a_broken_kernel():
    """Each w4a16 entry is proved by a broken kernel, except uint4_fallback_exact (a selection bug: the case
    guards the kernel a config falls back to, and no load-step mutant is specific to it) and
    split_k_bf16_column_tail (a third-party bug: GemLite itself failed it on an H200, recorded in
    benchmarks/results/h200/suite_and_gemlite.json) and block_k_tile_rules (a third-party bug whose symptom is a
    Triton compile error, not a wrong answer: vLLM 0.33.0 failed it on an H200, recorded in
    benchmarks/results/vllm_0.33.0.json)."""
    from conformance.checks import catalogue

    proved = {key for keys in CATALOGUE_BUG.values() for key in keys}
    assert {e.key for e in catalogue.ENTRIES} - proved == {"uint4_fallback_exact", "split_k_bf16_column_tail",
                                                                  "block_k_tile_rules"}
    assert set(CATALOGUE_BUG) <= set(NUMERIC)


@pytest.mark.parametrize("name,key", _PAIRS, ids=[f"{n}-{k}" for n, k in _PAIRS])
def test_catalogue_entry_fails_on_its_bug(broken, name, key):
    """The entry, run on the broken kernel exactly as test_catalogue runs it on any registered kernel (this
    machine's target, simulated ones where the gate needs them), reports a wrong answer: at least one `fail`
    verdict and no `error` (a crash of the kernel is not the suite catching the bug)."""
    from conformance.checks import catalogue

    res = catalogue.run_entry(catalogue.entry(key), name, detect_target(), record=False)
    fails = [v for v in res.verdicts if v.outcome == "fail"]
    errors = [v for v in res.verdicts if v.outcome == "error"]
    assert fails and not errors, f"{name} on {key}: " + "; ".join(v.line() for v in res.verdicts) + str(res.refused)
    if name in LAUNCH_BUGS:
        assert all(v.run_mode != "model" for v in fails), f"{name}: caught only in model runs"
    for v in fails:
        assert v.replay.split()[4] == broken[name].module, v.replay  # `python -m conformance --plugin MOD repro ID`


# ---- the copies the launch mutants run on are faithful ----------------------------------------------------------

def _tiles():
    from conformance_kernels import triton_w4a16 as tw

    T = tw.TileConfig
    return {"planar": T(16, 256, tw.PLANAR_BLOCK, split_k=2, planar=True),
            "gemv": T(1, 256, 128, split_k=2, packed_load=True, use_dot=False),
            "swap_ab": T(16, 256, 128, split_k=2, packed_load=True, swap_ab=True, magic=True),
            "dot": T(16, 64, 64, split_k=2),
            "dequant_mm": T(64, 256, 128, packed_load=True, magic=True, dequant_mm=True)}


# shapes with a partial N tile, an odd K tile count under split-K, several groups, one group spanning K (the planar
# path: 3 blocks split 2, one block with a plane per group, a zero-padded last block)
FAITHFUL_SHAPES = [(3, 40, 384, 128, torch.float16), (17, 24, 96, 32, torch.bfloat16), (2, 136, 136, -1, torch.float16)]


@pytest.mark.parametrize("path", ["planar", "gemv", "swap_ab", "dot", "dequant_mm"])
def test_mutant_kernel_copy_is_faithful(broken, path):
    """With every bug switch off, tests/unit/broken_mutant_gemm.py's copy is the shipped triton_w4a16 launch bit for
    bit on each path it takes (both given the same tile entry and triton_w4a16's own operands, both fitted by the
    shipped fit_tiles), so a failure of a launch mutant is its one bug; and the interpreter tables' rows take no path
    the copy lacks."""
    from conformance_kernels import triton_w4a16 as tw
    from conformance_kernels._w4a16_common import to_device

    from conformance.core.runtime import kernel_device
    from references import codecs
    from references.generators import random_activations, random_canonical
    from tests.unit import broken_mutant_gemm as mg

    rows = [cfg for table in (tw.TILE_TABLE, tw.PLANAR_TABLE) for _, cfg in table.get("interpreter", ())]
    assert {mg.path_of(cfg) for cfg in rows} <= set(_tiles())
    k, dev, tiles = registry.get_kernel("triton_w4a16"), kernel_device(), _tiles()[path]
    for i, (M, N, K, group, dtype) in enumerate(FAITHFUL_SHAPES):
        M = 1 if path == "gemv" else M
        for wt in (("uint4", "uint4b8")[i % 2],):  # both zero-point paths, over the shapes
            w = random_canonical(K, N, group, wt, dtype, "normal", M + N)
            x = random_activations(M, K, dtype, "normal", M + N).to(dev)
            o = to_device(k.load(codecs.encode(w, "gptq_v2")), dev)
            planar = {"b_planar": o.b_planar, "zeros_act": o.zeros_act}
            want = tw.launch_w4a16_gemm(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias, tiles=tiles, **planar)
            got = mg.launch_mutant(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias, tiles=tiles, planar=planar)
            launched = tw.last_launch_config()
            assert launched.get("mutant") and mg.path_of(tw._LAST_LAUNCH["cfg"]) == path, launched
            assert torch.equal(got.cpu().view(torch.int16), want.cpu().view(torch.int16)), (path, wt, M, N, K, group)


FP8_FAITHFUL = [(5, 256, 128, "bfloat16", "float8_e4m3fn", True, True, "normal"),
                (3, 256, 64, "float16", "float8_e4m3fnuz", False, False, "all_zero_groups"),
                (7, 512, 128, "float32", "float8_e4m3fn", False, True, "saturation")]


@pytest.mark.parametrize("tokens,hidden,group,dtype,f8,ue8m0,colmajor,regime", FP8_FAITHFUL)
def test_fp8_mutant_copy_is_faithful(broken, tokens, hidden, group, dtype, f8, ue8m0, colmajor, regime):
    """With every bug switch off, tests/unit/broken_fp8.py's copy is fp8_group_quant_triton bit for bit (q and
    scales, and the scales' strides); with only `no_clamp` on it is too (an equivalent mutant: see broken_fp8), and
    with only `reciprocal_q` on it is on UE8M0 scales (a power of two has an exact reciprocal) but not on fp32 scales
    (the reciprocal trap group of every case with three groups tells x * fp32(1 / s) from x / s)."""
    from conformance.families.config import Fp8QuantConfig
    from conformance.families.fp8_inputs import fp8_activations
    from tests.unit import broken_fp8

    cfg = Fp8QuantConfig(group_size=group, dtype=dtype, fp8_dtype=f8, ue8m0=ue8m0, column_major_scales=colmajor,
                         hidden=hidden)
    from tests.unit.devices import DEV

    k = registry.get_kernel("fp8_group_quant_triton")
    if k.can_implement(cfg, detect_target()) is not None:
        pytest.skip(f"not served on this machine's target: {k.can_implement(cfg, detect_target())}")
    p = k.load(cfg)
    x = fp8_activations(tokens, hidden, dtype, regime, 7, group, f8).to(DEV)  # the kernels' device
    q_want, s_want = k.apply(p, x)
    for bugs in ({}, {"no_clamp": True}):
        q, s = broken_fp8.launch_mutant(x, p, **bugs)
        assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8)), bugs
        assert torch.equal(s, s_want) and s.stride() == s_want.stride(), bugs
    q, s = broken_fp8.launch_mutant(x, p, reciprocal_q=True)
    assert torch.equal(s, s_want) and torch.equal(q.view(torch.uint8), q_want.view(torch.uint8)) == ue8m0


# ---- the recorded figures -------------------------------------------------------------------------------------

def test_docs_table_is_generated_from_the_json():
    """docs/proof-of-power.md's table is exactly what benchmarks/proof_of_power.py writes from the recorded JSON
    (never edited by hand), and the JSON's first run seed is this test's."""
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import proof_of_power as pop

    doc = json.loads(pop.RESULT.read_text())
    assert pop.current_block(pop.DOCS.read_text()) == pop.render(doc), "regenerate: " + pop.__doc__.splitlines()[9]
    assert doc["seeds"][0] == SEED and pop.SEEDS[0] == SEED
