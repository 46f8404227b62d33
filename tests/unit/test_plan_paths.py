"""Kernel paths in the CI plan (conformance/cases/plan.py, "paths"): every (path, format, weight type) cell a
kernel's gate serves on a target has a case in the plan, at every run seed 0-7; every path meets every act dtype,
group regime and act-order value; path rows enter their path at the fewest rows; plugin kernels get the same.
Plans are built, not run (the suite's test_plan.py runs them)."""
from __future__ import annotations

from collections import Counter

import pytest

from conformance.cases import plan
from conformance.core import registry
from conformance.core.launch import Launch, Row
from conformance.core.targets import parse_target
from conformance.families import get_family

TIERS = ("exact", "statistical")
SEEDS = range(8)
MULTI_PATH = ("triton_w4a16", "triton_w4a16_actorder")  # the built-in W4A16 kernels with several paths on cpu


def _cross(fam, pc) -> tuple:
    return tuple(pc[fam.plan_axes.index(a)] for a in fam.plan_path_cross)


def _cases_per_cell(p) -> Counter:
    """(path, *cross values) -> the plan's cases in that cell."""
    fam = get_family(registry.get_kernel(p.kernel).family)
    return Counter((r.path, *_cross(fam, r.plan_class)) for r in p.rows if r.path is not None)


def _both(name, seed, target="cpu"):
    """(the two tiers' plans, the union of their path cells, their cases per cell): a run judges both tiers; the
    first (exact) enters the paths and a later tier what the first cannot."""
    ps = [plan.build_plan(name, target, tier, seed=seed) for tier in TIERS]
    cells = set().union(*(p.path_cells for p in ps))
    return ps, cells, sum((_cases_per_cell(p) for p in ps), Counter())


@pytest.mark.parametrize("name", MULTI_PATH)
def test_multi_path_kernels_cover_every_cell_at_every_seed(name):
    """triton_w4a16 (planar, planar+splitk, dequant_mm on cpu) and triton_w4a16_actorder (gemv, dot, their split-K
    forms, dequant_mm): at run seeds 0-7 each tier's plan has a case in every cell it answers for; the two tiers'
    cells are the full cross of the paths with the formats and weight types the gate accepts; and every path meets
    both act dtypes, every group regime and every act-order value of the accepted classes."""
    registry.load_all()
    fam = get_family("w4a16")
    idx = {a: fam.plan_axes.index(a) for a in fam.plan_axes}
    for seed in SEEDS:
        ps, cells, have = _both(name, seed)
        for p in ps:
            own = _cases_per_cell(p)
            assert all(own[c] for c in p.path_cells), (p.tier, seed, [c for c in p.path_cells if not own[c]])
        paths = {c[0] for c in cells}
        classes = set().union(*(p.classes for p in ps))
        formats = {pc[idx["format"]] for pc in classes}
        wts = {pc[idx["weight_type"]] for pc in classes}
        assert cells == {(pa, f, w) for pa in paths for f in formats for w in wts}, seed
        assert all(have[c] for c in cells)
        for axis in fam.plan_path_pairs:
            want = {(pa, pc[idx[axis]]) for pa in paths for pc in classes}
            got = {(r.path, r.plan_class[idx[axis]]) for p in ps for r in p.rows}
            assert want <= got, (seed, axis, sorted(want - got))
        assert len(paths) >= 3, paths


@pytest.mark.parametrize("name", MULTI_PATH)
def test_no_row_count_enters_a_path_the_plan_missed(name):
    """An independent probe: every M from 1 to plan.M_CAP on the config of every plan row of both tiers (not only
    the selection rows' first M, as the plan walks them) takes only paths whose (path, format, weight type) cell
    has a case; and a path row enters its path at the least M that takes it on its shape."""
    registry.load_all()
    k, t = registry.get_kernel(name), parse_target("cpu")
    fam = get_family("w4a16")
    ps, _cells, have = _both(name, 0)
    for r in (r for p in ps for r in p.rows):
        cfg = r.case.config()
        paths = [k.launch(cfg, m, t).path for m in range(1, plan.M_CAP + 1)]
        for pa in set(paths):
            assert have[(pa, *_cross(fam, r.plan_class))], (r.case.id, pa)
        if r.role == "path":
            assert paths.index(r.path) + 1 == r.case.M, (r.case.id, r.path)


def test_path_rows_are_tiny():
    """Path rows enter at the smallest shapes (the interpreter's cost): N <= 16 and K <= 768 (three groups of 256)
    for the two Triton kernels, and no more rows than their cells and pairs need."""
    for name in MULTI_PATH:
        ps, cells, _have = _both(name, 0)
        rows = [r.case for p in ps for r in p.rows if r.role == "path"]
        assert rows and all(c.N <= 16 and c.K <= 768 for c in rows), [c.id for c in rows]
        paths = {c[0] for c in cells}
        assert len(rows) <= len(cells) + 8 * len(paths), (name, len(rows))


# ---- a plugin kernel's paths ------------------------------------------------------------------------------------

def _plugin_classes():
    class TorchDequant(type(registry.get_kernel("torch_dequant_w4a16"))):
        """torch_dequant_w4a16 narrowed to fp16 4-bit layers without act-order (32 plan classes: a cheap plan)."""

        def can_implement(self, config, target):
            return super().can_implement(config, target) or (
                None if (config.dtype, config.act_order, config.weight_type in ("uint4", "uint4b8")) == (
                    "float16", False, True) else "test plugin: fp16 4-bit layers without act-order only")

    class FormatPaths(TorchDequant):
        """A plugin kernel whose v1 checkpoints take their own prefill path from M = 7 (no selection rows: the
        plan probes M densely), others "small" up to M = 6 and "big" above."""
        name = "test_plan_format_paths"

        def launch(self, config, M, target):
            if self.can_implement(config, target) is not None:
                return None
            if M <= 6:
                return Launch("small")
            return Launch("v1_prefill" if config.format == "gptq_v1" else "big")

    class RowPaths(TorchDequant):
        """A plugin kernel with selection rows (Launch.row): "gemv" at M = 1, "tiles" to 40, "stream" above."""
        name = "test_plan_row_paths"

        def launch(self, config, M, target):
            if self.can_implement(config, target) is not None:
                return None
            if M == 1:
                return Launch("gemv", row=Row(1, 1, 64, 64))
            if M <= 40:
                return Launch("tiles", row=Row(40, 16, 64, 64))
            return Launch("stream", row=Row(None, 64, 64, 64, m_tiled=False))

    class NoLaunch(TorchDequant):
        """A plugin kernel written before Kernel.launch: it declares none."""
        name = "test_plan_no_launch"

        def launch(self, config, M, target):
            return None

    return FormatPaths, RowPaths, NoLaunch


@pytest.fixture
def plugin_kernels():
    registry.load_all()
    classes = _plugin_classes()
    for cls in classes:
        registry.register_kernel(cls)
    yield {cls.name: registry.get_kernel(cls.name) for cls in classes}
    for cls in classes:
        registry.unregister_kernel(cls.name)


def test_plugin_kernels_get_their_paths_crossed(plugin_kernels):
    """A plugin's own paths are crossed with formats and weight types like a built-in's: a format-only path (v1's
    prefill, entered at M = 7 by the bisection) meets every v1 weight type, a row-walked path ("stream" past
    M = 40) every format; every cell has a case; a kernel that declares no launch gets no path rows."""
    ps, cells, have = _both("test_plan_format_paths", 3)
    wts = {c[2] for c in cells}
    assert {c for c in cells if c[0] == "v1_prefill"} == {("v1_prefill", "gptq_v1", w) for w in wts}
    assert {c[0] for c in cells} == {"small", "big", "v1_prefill"}
    assert all(have[c] for c in cells), [c for c in cells if not have[c]]
    assert all(r.case.M == 7 for p in ps for r in p.rows if r.role == "path" and r.path in ("v1_prefill", "big"))
    ps, cells, have = _both("test_plan_row_paths", 3)
    assert {c[0] for c in cells} == {"gemv", "tiles", "stream"}
    assert all(have[c] for c in cells), [c for c in cells if not have[c]]
    assert all(r.case.M == {"gemv": 1, "tiles": 2, "stream": 41}[r.path] for p in ps for r in p.rows
               if r.role == "path")
    for tier in TIERS:
        p = plan.build_plan("test_plan_no_launch", "cpu", tier, seed=3)
        assert p.rows and not p.path_cells and all(r.path is None and r.role != "path" for r in p.rows)


def test_summary_line_counts_path_rows_and_cells():
    """The run summary's line per kernel and tier counts the path rows and the served path cells, and names the
    served cells without a case when there are any."""
    s = plan.coverage_summary("triton_w4a16", "cpu", "exact", seed=0)
    p = plan.build_plan("triton_w4a16", "cpu", "exact", seed=0)
    n = len(p.path_cells)
    assert s["path_rows"] == sum(r.role == "path" for r in p.rows) > 0
    assert s["path_cells"] == n > 0 and s["path_cells_without_case"] == []
    line = plan.summary_line(s)
    assert f"{s['path_rows']} path; {n} path cells)" in line and "WITHOUT" not in line
    gap = dict(s, path_cells_without_case=[["dequant_mm", "awq", "uint4"]])
    assert f"{n} path cells, 1 WITHOUT a case" in plan.summary_line(gap)
