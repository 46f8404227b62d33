"""Path audit: the (path, checkpoint format, weight type) cells a kernel's gate serves on a target, against the cells
the CI plan's rows (both tiers) cover, per run seed. The plan answers for its own cells (`Plan.path_cells`); this
asks again from the gate, the family's config space and the kernel's own launch(), so a plan that forgot a class,
a shape or a tier shows up here.

    audit(kernel, target, seed) -> {"served": [...], "covered": [...], "without_case": [...], ...}
    uncovered(served, rows) -> sorted cells of `served` that no row covers (the pure comparison)

Served cells: for every plan class the gate accepts (either tier's plan), every config class of it, at every one
of the family's smallest path shapes (`plan_path_shapes`, both tiers) and at every plan row's own shape, the paths
`plan.path_entries` finds for rows 1 ... M_CAP; a cell is (path, *the family's plan_path_cross values). A kernel
that declares no launch serves no cells (nothing to cross). Recorded by benchmarks/plan_paths.py.
"""
from __future__ import annotations

from types import SimpleNamespace

from conformance.cases import plan as planlib
from conformance.cases.ids import TIERS
from conformance.core import registry
from conformance.core.targets import parse_target
from conformance.families import get_family


def cell_of(fam, path: str, values: dict) -> tuple:
    """(path, *the family's plan_path_cross values) of a config or case's fields."""
    return (path, *(values[a] for a in fam.plan_path_cross))


def uncovered(served, rows) -> list:
    """The cells of `served` that no row covers, sorted. rows: (path, cross values...) tuples; None paths (a row
    whose path was not declared) cover nothing."""
    have = {tuple(r) for r in rows if r[0] is not None}
    return sorted(tuple(c) for c in set(map(tuple, served)) - have)


def served_cells(k, t, plans) -> set:
    """The cells k's gate serves on t: see the module docstring. plans: both tiers' plans at one seed."""
    fam = get_family(k.family)
    out: set = set()
    classes = {pc for p in plans for pc in p.classes}
    tiles = plans[0].tiles
    members: dict = {}
    for cls in fam.config_classes():
        pc = fam.plan_class(cls, tiles)
        if pc in classes:
            members.setdefault(pc, []).append(cls)
    configs = []
    for tier in TIERS:
        for ms in members.values():
            for fields in fam.plan_path_shapes(k, t, tier, ms, tiles):
                configs.append(fam.config_from_case(SimpleNamespace(**fields)))
    configs += [r.case.config() for p in plans for r in p.rows]
    for config in dict.fromkeys(configs):
        values = {a: getattr(config, a) for a in fam.plan_path_cross}
        for path, _m in planlib.path_entries(k, t, config):
            out.add(cell_of(fam, path, values))
    return out


def audit(kernel, target, seed: int, profile=None) -> dict:
    """One kernel on one target at one run seed: both tiers' plan modes and rows, the cells served, the cells the
    rows cover, and the served cells without a case (the audit passes when that list is empty)."""
    k = registry.get_kernel(kernel) if isinstance(kernel, str) else kernel
    t = parse_target(target) if isinstance(target, str) else target
    fam = get_family(k.family)
    plans = [planlib.build_plan(k, t, tier, seed=seed, profile=profile) for tier in TIERS]
    rows = [cell_of(fam, r.path, {a: getattr(r.case.config(), a) for a in fam.plan_path_cross})
            for p in plans for r in p.rows if r.path is not None]
    served = served_cells(k, t, plans) if any(p.rows for p in plans) else set()
    return {"kernel": k.name, "target": str(t), "seed": seed, "modes": {p.tier: p.mode for p in plans},
            "refusal": next((p.refusal for p in plans if p.refusal), None),
            "rows": sum(len(p.rows) for p in plans), "path_rows": sum(r.role == "path" for p in plans for r in p.rows),
            "declares_paths": bool(served),  # False: no launch declared (or the gate refuses every config here)
            "paths": sorted({c[0] for c in served}), "served": len(served), "covered": len(set(rows) & served),
            "without_case": [list(c) for c in uncovered(served, rows)]}
