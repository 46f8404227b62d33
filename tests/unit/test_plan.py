"""The CI plan (conformance/cases/plan.py): coverage of every accepted class, boundary values, order, seeds, the
large-K rows, the cost model's fallback, and the replay-first file. Plans are built, not run (cheap); the suite's
test_plan.py runs them."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from conformance.cases import plan, strategies
from conformance.cases.profiles import get_profile
from conformance.core import registry
from conformance.core.targets import parse_target
from conformance.families import get_family
from conformance.families.w4a16 import exact_limit_reason
from references.checkpoint import CHECKPOINT_FORMATS
from tests.unit.devices import ON_GPU, interpreter_only

SEED = 0x5EED
TIERS = ("exact", "statistical")


def _targets(k) -> list:
    """cpu and, for each tier, the simulated target the suite draws the kernel's cases for."""
    cpu = parse_target("cpu")
    return sorted({cpu} | {strategies.suite_target(k, cpu, tier) for tier in TIERS}, key=str)


def _plans():
    registry.load_all()
    for k in registry.all_kernels():
        for t in _targets(k):
            for tier in TIERS:
                yield k, t, tier, plan.build_plan(k, t, tier, seed=SEED)


def test_every_accepted_class_runs_or_every_pair_is_covered():
    """On cpu and each suite target: mode "all" runs every accepted class; "pairwise" rows cover every value pair
    of the accepted classes (checked here from the classes themselves, not from plan_coverage); every (path, cross
    values) cell the kernel's gate serves has a case, and the rows before the path rows are plan.class_rows; every
    row is a case the gate accepts, in the tier's limits;
    and every class the suite's hypothesis strategy can draw is an accepted plan class (the two read one config
    space)."""
    checked = set()
    for k, t, tier, p in _plans():
        fam = get_family(k.family)
        cov = plan.plan_coverage(k, t, tier, seed=SEED)
        assert len(cov) == len(p.classes)
        ran = {r.plan_class for r in p.rows}
        if p.mode == "all":
            assert ran >= set(p.classes) and all(c["covered"] == "run" for c in cov), (k.name, t, tier)
        elif p.mode == "pairwise":
            want = {pair for pc in p.classes for pair in plan._pairs(pc)}
            got = {pair for pc in ran for pair in plan._pairs(pc)}
            assert want <= got, (k.name, str(t), tier, sorted(want - got)[:5])
            assert {c["covered"] for c in cov} <= {"run", "pair-covered"}
        else:
            assert not p.rows and p.refusal, (k.name, t, tier)
            continue
        # every (path, format, weight type) cell the gate serves has a case (tests/unit/test_plan_paths.py: more)
        have = {(r.path, *(r.plan_class[fam.plan_axes.index(a)] for a in fam.plan_path_cross))
                for r in p.rows if r.path is not None}
        assert set(p.path_cells) <= have, (k.name, str(t), tier, sorted(set(p.path_cells) - have)[:5])
        head = plan.class_rows(k, t, tier, seed=SEED)  # what a hunt runs first: the plan's own first rows
        assert p.rows[:len(head)] == head and all(r.role != "path" for r in head), (k.name, str(t), tier)
        for r in p.rows:
            assert k.can_implement(r.case.config(), t) is None, r.case.id
            assert r.case.tier == tier and r.case.kernel == k.name
            if tier == "exact" and k.family == "w4a16":
                assert exact_limit_reason(k.numerics(r.case.config(), r.case.M), r.case.weight_type, r.case.K,
                                          r.case.M, r.case.regime) is None, r.case.id
        if strategies.has_cases(k, t, tier):
            drawn = {fam.plan_class(c, p.tiles) for c in strategies.classes(k, t, tier)}
            assert drawn <= set(p.classes), (k.name, str(t), tier, sorted(drawn - set(p.classes))[:3])
        checked.add((k.name, p.mode))
    modes = {m for _, m in checked}
    # both regimes of the plan are exercised by the built-ins: on a CPU host, where the cpu target's Triton cases are
    # interpreter runs (costly: pairwise); on a GPU host the cpu target runs them as models (cheap: all classes)
    assert {"all", "pairwise"} <= modes or (ON_GPU and modes == {"all"}), checked


def _ms(p):
    return {r.case.M for r in p.rows}


@interpreter_only("the cpu target's plan reads the interpreter's tile table only where Triton runs in the interpreter")
@pytest.mark.parametrize("tier", TIERS)
def test_triton_w4a16_rows_sit_on_its_tile_boundaries(tier):
    """triton_w4a16 on cpu reads its interpreter tile table: M=1, BLOCK_M +- 1 of each dot tile and the path
    switches; an N tail (N % BLOCK_N and N % 32 nonzero); K not a multiple of BLOCK_K, K / group odd, the smallest
    channelwise K (8 and 16); a group smaller than BLOCK_K; a large-K row; each format with zeros and groups."""
    registry.load_all()
    from conformance_kernels import triton_w4a16 as tw

    p = plan.build_plan("triton_w4a16", "cpu", tier, seed=SEED)
    assert "TILE_TABLE['interpreter']" in p.tiles.source
    rows = tw.TILE_TABLE["interpreter"] + getattr(tw, "PLANAR_TABLE", {}).get("interpreter", [])
    dot_bms = {cfg.block_m for _, cfg in rows if cfg.block_m > 1 and not cfg.dequant_mm}
    switches = {m for m, _ in rows if m}
    want_m = {1} | {b - 1 for b in dot_bms} | {b + 1 for b in dot_bms} | switches | {m + 1 for m in switches}
    assert want_m <= _ms(p), sorted(want_m - _ms(p))
    bn, bk = max(c.block_n for _, c in rows), max(c.block_k for _, c in rows)
    cls_rows = [r.case for r in p.rows if r.role == "class"]
    assert any(c.N % bn and c.N % 32 for c in cls_rows) and any(c.N > bn for c in cls_rows)
    assert any(c.K % bk for c in cls_rows)
    assert any(c.group_size > 0 and (c.K // c.group_size) % 2 == 1 and c.K > c.group_size for c in cls_rows)
    assert {8, 16} <= {c.K for c in cls_rows if c.group_size == -1}
    assert any(0 < c.group_size < bk and c.K > c.group_size for c in cls_rows)
    assert sum(r.role == "large_k" and r.case.K >= 1024 for r in p.rows) >= 2
    # every checkpoint format meets stored zero points with several groups and N/8 > 1 (a zeros-layout bug shows)
    zeros_rows = {c.format for c in cls_rows if c.weight_type == "uint4" and c.group_size > 0
                  and c.K // c.group_size > 1 and c.N >= 16}
    assert zeros_rows == set(CHECKPOINT_FORMATS), zeros_rows


def test_generic_menus_without_a_tile_table():
    """A kernel without a tile table (torch_dequant_w4a16) gets the generic menus, every value of them."""
    registry.load_all()
    p = plan.build_plan("torch_dequant_w4a16", "cpu", "statistical", seed=SEED)
    assert p.tiles.source.startswith("generic") and p.tiles.m_menu == plan.GENERIC_M
    assert set(plan.GENERIC_M) <= _ms(p)
    assert set(get_family("w4a16").PLAN_N_GENERIC) <= {r.case.N for r in p.rows}
    large = [r.case for r in p.rows if r.role == "large_k"]
    assert len(large) == 3 and all(4096 <= c.K <= 8192 for c in large)


def test_large_k_rows_respect_the_exact_tier():
    """Exact-tier large-K rows stay within exact_tier_max_k of their weight type; a kernel whose declared
    accumulation is exact only to K=256 (rdna3_w4a16: fp16 partials) gets none."""
    from references.generators import exact_tier_max_k

    registry.load_all()
    for name in ("torch_dequant_w4a16", "triton_w4a16"):
        p = plan.build_plan(name, "cpu", "exact", seed=SEED)
        large = [r.case for r in p.rows if r.role == "large_k"]
        assert len(large) >= 2 and all(1024 <= c.K <= exact_tier_max_k(c.weight_type, regime=c.regime)
                                       for c in large)
    p = plan.build_plan("rdna3_w4a16", "gfx1100", "exact", seed=SEED)
    assert p.rows and not [r for r in p.rows if r.role == "large_k"] and max(r.case.K for r in p.rows) <= 256


def test_first_rows_are_the_most_diverse():
    """The first three rows differ on every plan axis where the accepted classes have three values, and are not all
    equal on any axis with two."""
    registry.load_all()
    for k, t, tier, p in _plans():
        first = [r.plan_class for r in p.rows if r.role == "class"][:3]
        if len(first) < 3:
            continue
        for i, _axis in enumerate(p.axes):
            values = {pc[i] for pc in p.classes}
            seen = [pc[i] for pc in first]
            if len(values) >= 3:
                assert len(set(seen)) == 3, (k.name, str(t), tier, _axis, seen)
            elif len(values) == 2:
                assert len(set(seen)) == 2, (k.name, str(t), tier, _axis, seen)


def test_seed_moves_placements_and_data_and_replays():
    """Same seed, same plan; another seed, other case ids (placements and data seeds) over the same classes. A row's
    data seed is the stable hash of (run seed, kernel, tier, row index) (pinned: it must not change with Python)."""
    registry.load_all()
    a = plan.ci_plan("triton_w4a16_actorder", "cpu", "exact", seed=1)
    plan._build.cache_clear()
    assert plan.ci_plan("triton_w4a16_actorder", "cpu", "exact", seed=1) == a
    b = plan.build_plan("triton_w4a16_actorder", "cpu", "exact", seed=2)
    assert {c.id for c in a}.isdisjoint({r.case.id for r in b.rows})
    assert [r.case.seed for r in b.rows] == [plan.row_seed(2, "triton_w4a16_actorder", "exact", i)
                                             for i in range(len(b.rows))]
    assert len({r.case.seed for r in b.rows}) == len(b.rows)  # one data seed per row
    assert [plan.row_seed(1, "triton_w4a16", "exact", i) for i in (0, 1)] == [909036749, 104312883]
    assert {r.case.M for r in b.rows} != {c.M for c in a} or [c.M for c in a] != [r.case.M for r in b.rows]


def test_regimes_cycle_and_bf16_meets_extreme_scales():
    """Rows cycle through the family's tier_regimes (read, not hard-coded); the first bf16 statistical w4a16 row
    gets extreme_scales."""
    registry.load_all()
    for name in ("torch_dequant_w4a16", "fp8_group_quant_native"):
        fam = get_family(registry.get_kernel(name).family)
        for tier in TIERS:
            p = plan.build_plan(name, "cpu", tier, seed=SEED)
            assert {r.case.regime for r in p.rows} == set(fam.tier_regimes(tier)), (name, tier)
    for seed in (0, 1, 2, 3):
        p = plan.build_plan("triton_w4a16", "cpu", "statistical", seed=seed)
        first_bf16 = next(r.case for r in p.rows if r.case.dtype == "bfloat16")
        assert first_bf16.regime == "extreme_scales", first_bf16.id


def test_budget_decides_all_classes_or_pairwise():
    """The profile's plan budget against the family's seconds per case: a tiny budget turns torch_dequant_w4a16 into
    a covering array, a large one runs every class of triton_w4a16."""
    registry.load_all()
    tiny = replace(get_profile("ci"), plan_budget_s=0.5)
    big = replace(get_profile("ci"), plan_budget_s=1e6)
    assert plan.build_plan("torch_dequant_w4a16", "cpu", "exact", seed=SEED).mode == "all"
    small = plan.build_plan("torch_dequant_w4a16", "cpu", "exact", seed=SEED, profile=tiny)
    assert small.mode == "pairwise" and len(small.rows) < len(small.classes) / 4
    if not ON_GPU:  # interpreter runs: too costly for every class at the ci budget (a GPU host runs models for cpu)
        assert plan.build_plan("triton_w4a16", "cpu", "exact", seed=SEED).mode == "pairwise"
    full = plan.build_plan("triton_w4a16", "cpu", "exact", seed=SEED, profile=big)
    assert full.mode == "all" and {r.plan_class for r in full.rows} == set(full.classes)


def test_estimated_cost_of_every_plan_stays_in_budget():
    """The cost model's estimate for all registered kernels on cpu, both tiers (the suite's default run) stays
    under 100 CPU s (measured: docs/ci-plan.md)."""
    registry.load_all()
    cpu = parse_target("cpu")
    total = sum(plan.build_plan(k, strategies.suite_target(k, cpu, tier), tier, seed=SEED).estimate_s
                for k in registry.all_kernels() for tier in TIERS)
    assert 0 < total <= 100, total


def test_failed_cases_are_replayed_first(tmp_path, monkeypatch):
    """remember_failures keeps failed ids (dropping those that passed, keeping other kernels'); the plugin's plan
    items put them first for their kernel and tier, marked replayed, and do not run the same row twice."""
    from conformance import pytest_plugin

    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path))
    registry.load_all()
    rows = plan.build_plan("fp8_group_quant_native", "cpu", "exact", seed=SEED).rows
    entry = {"kernel": "fp8_group_quant_native", "tier": "exact", "target": "cpu", "seed": SEED}
    plan.remember_failures(set(), [dict(entry, case_id=rows[5].case.id),
                                   dict(entry, case_id=rows[9].case.id, kernel="other_kernel")])
    plan.remember_failures({rows[9].case.id}, [dict(entry, case_id=rows[7].case.id)])
    assert plan.replay_case_ids("fp8_group_quant_native", "exact", "cpu") == [rows[5].case.id, rows[7].case.id]
    assert plan.replay_case_ids("fp8_group_quant_native", "statistical", "cpu") == []

    class Config:
        def __init__(self):
            self._conformance = pytest_plugin._State()
            self._conformance.seed = SEED
            self.opts = {"--conformance-profile": "ci", "--conformance-kernels": "fp8_group_quant_native",
                         "--conformance-tiers": "exact", "--conformance-case": None, "--conformance-target": "cpu"}

        def getoption(self, name):
            return self.opts[name]

    items = pytest_plugin.plan_rows(Config())
    assert [i.id for i in items[:2]] == ["fp8_group_quant_native-exact-replay0", "fp8_group_quant_native-exact-replay1"]
    assert [i.case.id for i in items[:2]] == [rows[5].case.id, rows[7].case.id]
    assert {i.role for i in items[:2]} == {"replayed"}
    ids = [i.case.id for i in items]
    assert len(ids) == len(set(ids)) == len(rows)  # the remembered rows moved first, not doubled
    assert [i.id for i in items[2:4]] == ["fp8_group_quant_native-exact-0", "fp8_group_quant_native-exact-1"]

    # the run's snapshot (the controller reads the file once, workers get it in workerinput), not the file now:
    # another run rewriting the file between two workers' collections must not make them collect differently
    cfg = Config()
    cfg._conformance.replays = plan.read_replays()
    plan.remember_failures({rows[5].case.id, rows[7].case.id}, [])
    assert plan.replay_case_ids("fp8_group_quant_native", "exact", "cpu") == []
    assert [i.case.id for i in pytest_plugin.plan_rows(cfg)[:2]] == [rows[5].case.id, rows[7].case.id]


def test_greedy_order_is_an_all_pairs_covering_array():
    """Stopping when covered: every value pair appears, in fewer rows than classes; the first row pair differs on
    every axis; without stopping, every class follows."""
    classes = tuple(itertools.product("abcd", (1, 2, 3), (True, False)))
    rank = {pc: i for i, pc in enumerate(classes)}
    order = plan._greedy_order(classes, rank, stop_when_covered=True)
    want = {pair for pc in classes for pair in plan._pairs(pc)}
    assert {pair for pc in order for pair in plan._pairs(pc)} == want
    assert 12 <= len(order) < len(classes)  # 4 x 3 values of the two largest axes is the least possible
    assert plan._differs(order[0], order[1]) == 3
    assert sorted(plan._greedy_order(classes, rank, stop_when_covered=False)) == sorted(classes)


def _greedy_order_by_definition(classes, rank, *, stop_when_covered, weight=None):
    """The docstring's rule read literally (the oracle of the counting version): at every step, the five keys of every
    class left, the first maximal class in rank order."""
    pairs = {pc: plan._pairs(pc) for pc in classes}
    w = {pc: weight(pc) if weight else 0 for pc in classes}
    uncovered, seen, order = set().union(*pairs.values()), set(), []
    left = sorted(classes, key=rank.__getitem__)
    while left and (uncovered or not stop_when_covered):
        prev = order[-1] if order else None
        best = max(left, key=lambda pc: (len(pairs[pc] & uncovered), sum((i, v) not in seen for i, v in enumerate(pc)),
                                         w[pc], plan._differs(pc, prev) if prev else 0, -rank[pc]))
        order.append(best)
        left.remove(best)
        uncovered -= pairs[best]
        seen.update(enumerate(best))
    return order


@pytest.mark.parametrize("seed", range(6))
def test_greedy_order_equals_its_definition(seed):
    """The greedy order keeps counts up to date instead of recomputing every key of every class at every step: on
    random class sets (sub-grids, weights with ties, equal ranks) it gives the definition's order exactly."""
    import random

    rnd = random.Random(seed)
    axes = [tuple(range(rnd.randint(1, 4))) for _ in range(rnd.randint(2, 5))]
    grid = list(itertools.product(*axes))
    classes = tuple(rnd.sample(grid, max(1, len(grid) * rnd.randint(3, 10) // 10)))
    rank = {pc: rnd.randint(0, 5 if seed % 2 else 10**9) for pc in classes}
    weight = (lambda pc: pc[0] % 2) if seed % 3 else None
    for stop in (True, False):
        assert plan._greedy_order(classes, rank, stop_when_covered=stop, weight=weight) == \
            _greedy_order_by_definition(classes, rank, stop_when_covered=stop, weight=weight)


def test_all_pairs_covers_every_pair_of_the_grid_it_is_given():
    """The tests' pairwise subset (test_kernels_fp8's interpreter grid): every value pair of any two positions, from
    the given combos only, deterministic, fewer than the grid."""
    grid = list(itertools.product((64, 128), ("bf16", "fp16", "fp32"), ("fn", "fnuz"), (False, True), (False, True)))
    sub = plan.all_pairs(grid)
    assert {p for c in sub for p in plan._pairs(c)} == {p for c in grid for p in plan._pairs(c)}
    assert set(sub) <= set(grid) and 6 <= len(sub) < len(grid) and sub == plan.all_pairs(grid)
