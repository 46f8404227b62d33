"""Proof of power: the suite's own strategies + harness catch every broken kernel of tests/unit/broken_kernels.py
with a replayable case id, while the correct kernels pass the very same cases; and every shipped-bug catalogue entry
(conformance/checks/catalogue.py) FAILS (a wrong answer, never the kernel's own error) on the broken kernel that
reintroduces its bug.

CI runs a bounded hunt per broken kernel (BUDGET examples, the ci profile's derandomized draws, stopping at the
first failure). benchmarks/proof_of_power.py measures the counts with a larger cap, and also runs the ci-profile
suite itself on the broken kernels; docs/proof-of-power.md has the figures.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance import cli
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.targets import detect_target

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.unit.broken_kernels"
BUDGET = 25  # examples per broken kernel in CI; the measured counts at this cap are 1-9 (ci profile)
# the tier whose draws catch each bug first (measured; the other tier is in benchmarks/results/proof_of_power.json)
TIER = {
    "broken_ct_zeros_not_transposed": "exact",
    "broken_zeros_always_transposed": "exact",
    "broken_plus_one_from_has_zeros": "exact",
    "broken_v2_read_as_v1": "exact",
    "broken_v1_nibble_wise_plus_one": "exact",
    "broken_ignores_g_idx": "exact",
    "broken_no_block_k_clamp": "exact",
    "broken_bf16_dequant_via_fp16": "statistical",  # exact-tier data is exact in fp16 too: only range shows it
    "broken_last_n_tile_off_by_one": "exact",
    "broken_m_tail_unwritten": "exact",
    "broken_fp16_accumulator": "statistical",
}


@pytest.fixture(scope="module")
def broken():
    """The broken kernels, registered for this module only (other suites must never parametrize over them)."""
    registry.load_all()
    registry.load_plugin(PLUGIN)
    import tests.unit.broken_kernels as bk

    bk.register_all()
    yield bk
    bk.unregister_all()


# the broken kernels whose bug is in the Triton launch (the mutant kernel or its wrapper), not in the load step
LAUNCH_BUGS = ("broken_no_block_k_clamp", "broken_bf16_dequant_via_fp16", "broken_last_n_tile_off_by_one",
               "broken_m_tail_unwritten")


def test_every_broken_kernel_has_a_tier(broken):
    assert set(TIER) == set(broken.BROKEN)


@pytest.fixture
def repro(monkeypatch):
    """`python -m conformance repro ID` in-process; its verdicts stay out of this session's report and summary
    (the failures here are deliberate)."""
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: {})
    return lambda case_id: cli.main(["--plugin", PLUGIN, "repro", case_id])


@pytest.mark.parametrize("name", sorted(TIER))
def test_suite_catches_broken_kernel(broken, name, repro, capsys):
    from tests.unit.mutant_hunt import hunt

    h = hunt(name, TIER[name], BUDGET)
    assert h.caught is not None, f"{name}: no failure in {h.examples} {TIER[name]}-tier examples"
    v = h.caught
    # a plugin kernel's replay line names its plugin, so it replays as printed in a fresh process
    assert v.outcome in ("fail", "error") and v.replay.startswith(f"python -m conformance --plugin {PLUGIN} repro ")
    assert v.run_mode != "model" or name not in LAUNCH_BUGS, f"{name}: caught only in a model run: {v.line()}"
    case = parse_case_id(v.case_id)
    assert case.kernel == name and v.replay.split()[6] == v.case_id
    assert repro(v.case_id) == 1, capsys.readouterr().out
    # the correct kernel passes every case the broken one was given, the failing one included
    base = broken.BASE[name]
    for seen in h.verdicts:  # on the hunt's target (this machine's): the interpreter on CPU, the device on a GPU
        ok = run_case(parse_case_id(seen.case_id).with_kernel(base), target=detect_target(), record=False)
        assert ok.passed, ok.line()
    assert repro(case.with_kernel(base).id) == 0, capsys.readouterr().out


def test_repro_in_a_fresh_process_with_the_plugin_env(broken):
    """The replay line works as printed, in a new process, with the plugin named by CONFORMANCE_PLUGINS."""
    case_id = ("w4a16/broken_no_block_k_clamp/"
               "M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=91")
    env = dict(os.environ, CONFORMANCE_PLUGINS=PLUGIN, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "conformance", "repro", case_id], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith(f"FAIL {case_id}")


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
}
_PAIRS = [(name, key) for name, keys in CATALOGUE_BUG.items() for key in keys]


def test_every_catalogue_entry_has_a_broken_kernel():
    """Each w4a16 entry is proved by a broken kernel, except uint4_fallback_exact (a selection bug: the case
    guards the kernel a config falls back to, and no load-step mutant is specific to it) and
    split_k_bf16_column_tail (a third-party bug: GemLite itself failed it on an H200, recorded in
    benchmarks/results/h200/suite_and_gemlite.json)."""
    from conformance.checks import catalogue

    proved = {key for keys in CATALOGUE_BUG.values() for key in keys}
    assert {e.key for e in catalogue.ENTRIES} - proved == {"uint4_fallback_exact", "split_k_bf16_column_tail"}


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
        assert v.replay.split()[4] == PLUGIN, v.replay  # `python -m conformance --plugin PLUGIN repro ID`


# the mutant Triton kernel with every bug switch off is the shipped kernel on the same tiles, bit for bit: a
# failure of a broken kernel is its one bug, not a difference of the copy. The shipped launch is given the
# mutant's tile entry (on CPU the interpreter table's, which it would pick anyway; on a GPU MUTANT_GPU_TILES,
# since the shipped GPU tables take paths the copy lacks); both go through the shipped fit_tiles.
@pytest.mark.parametrize("M,N,K,group,dtype", [
    (3, 40, 256, 32, torch.float16),     # split-K rows (M <= 16), partial N tile, 8 groups
    (33, 64, 384, 128, torch.bfloat16),  # M tail past one 64-row tile, 3 groups
    (20, 24, 128, 128, torch.float16),   # one group, K == group
])
def test_mutant_kernel_copy_is_faithful(broken, M, N, K, group, dtype):
    from conformance_kernels import triton_w4a16 as tw
    from conformance_kernels._w4a16_common import to_device

    from conformance.core.runtime import kernel_device
    from references import codecs
    from references.generators import random_activations, random_canonical

    k, dev = registry.get_kernel("triton_w4a16"), kernel_device()
    for wt in ("uint4", "uint4b8"):
        w = random_canonical(K, N, group, wt, dtype, "normal", M + N)
        x = random_activations(M, K, dtype, "normal", M + N).to(dev)
        o = to_device(k.load(codecs.encode(w, "gptq_v2")), dev)
        tiles = broken.mutant_tiles(M, broken.mutant_kind(x))
        want = tw.launch_w4a16_gemm(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias, tiles=tiles)
        got = broken.launch_mutant(x, o)
        assert tw.last_launch_config().get("mutant"), "launch_mutant did not record its launch"
        assert torch.equal(got.cpu().view(torch.int16), want.cpu().view(torch.int16)), (wt, M, N, K, group, dtype)
