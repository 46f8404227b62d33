"""The CI plan: for one kernel, target and tier, a short fixed list of cases that runs every config class the
kernel's gate accepts (or, where that costs too much, covers every pair of plan-axis values: an all-pairs
covering array), each placed on a boundary of the kernel's tiles, ordered so the first rows are the most diverse.

    ci_plan(kernel, target, tier, *, seed, profile=None) -> [Case]
    plan_coverage(kernel, target, tier, *, seed, profile=None) -> [dict]   # one row per accepted plan class
    build_plan(kernel, target, tier, *, seed, profile=None) -> Plan        # rows with class, role, picks; mode

Classes. The family's one config space (`Family.config_classes()`) folded by the family's `plan_class` (W4A16:
weight type x checkpoint format x act-order x group REGIME (channelwise, one group spanning K, several groups, a
group smaller than the kernel's K tile) x activation dtype; FP8: every config axis). A plan class is accepted
when the kernel's own pure gate accepts one of the family's plan shapes of it on `target` (`plan_case`).

Rows. When the accepted classes cost at most the profile's `plan_budget_s` (the family's measured seconds per
case by run mode), every class gets a row ("all"); else rows are a greedy all-pairs covering array over the plan
axes ("pairwise"). Either way rows are ordered greedily: each next row covers the most not-yet-covered value
pairs; ties go to the class with the most values no earlier row has, then to the one the family weighs higher
(`plan_weight`), then to the one differing most from the previous row, then to a seeded rank; so the first three
rows differ on every axis they can. A few large-K rows (K 4096-8192 where the kernel runs as torch or as its
model, 1024-1408 in the interpreter) follow the first three rows.

Paths. The kernel says which path each case takes on the target (`Kernel.launch(config, M, target).path`). The
plan crosses path x the family's `plan_path_cross` axes (W4A16: checkpoint format x weight type) in full, and each
path meets every value of its `plan_path_pairs` axes (act dtype, group regime, act-order): after the class rows,
one "path" row per cell (or pair) they leave uncovered, at the fewest rows and the smallest shape that enter the
path (`path_entries` walks the kernel's selection rows; `family.plan_path_shapes`). A kernel that declares no
launch (plugins written before it) gets no path rows.

Shapes. Each row takes the next value of each boundary menu (rows: 1, small odd, BLOCK_M +- 1 and the path
thresholds of the kernel's tile table; columns: N tails; K variants: tails, K / group odd, the smallest K), each
menu starting at an offset drawn from the run seed: every commit places boundaries on other classes, and every
menu value is hit once a plan has as many rows as the menu has values. Tile tables are read where the kernel's
module (or a base class's) declares TILE_TABLE in triton_w4a16's layout; other kernels get generic menus.

Data. Rows cycle through the family's `tier_regimes(tier)` (a family may force a regime on its first row of
some kind: W4A16 gives its first bf16 statistical row extreme_scales). A row's data seed is a stable hash of
(run seed, kernel, tier, row index), so its case id alone replays it: `python -m conformance repro ID`.

Failed plan cases are remembered (`remember_failures`, written by the pytest controller at session end) and
replayed first in the next run (`replay_case_ids`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

from conformance.cases.ids import TIERS, Case, parse_case_id
from conformance.cases.profiles import DEFAULT_PROFILE, Profile, get_profile
from conformance.cases.replays import read_replays, remember_failures  # noqa: F401 - plan.* kept importable
from conformance.core import registry
from conformance.core.targets import Target, detect_target, parse_target
from conformance.families import get_family
from references.errors import InvalidInput, require

GENERIC_M = (1, 3, 17, 33, 65)  # rows when the kernel declares no tile table: decode, odd, past common BLOCK_M
M_CAP = 129  # menu rows stay interpreter-cheap
LARGE_K_ROWS = {"device": 3, "model": 3, "interpreter": 2}  # large-K rows per kernel and tier, by run mode
PATH_ROW_SHARE = 0.25  # a path row's cost in the cost model, as a share of a class row (tiny shapes: docs/ci-plan.md)
LARGE_K_AT, LARGE_K_EVERY = 3, 4  # the first large-K row follows the three most diverse rows, then every 4th


@dataclass(frozen=True)
class Tiles:
    """The tile boundaries a plan places shapes on: where they come from, the row menu (M / tokens), and the
    largest BLOCK_N / BLOCK_K of the table (None: no table)."""

    source: str
    m_menu: tuple
    block_n: int | None = None
    block_k: int | None = None


@dataclass(frozen=True)
class PlanRow:
    """One plan case: its index (pytest id `<kernel>-<tier>-<index>`), the Case, its plan class (values along
    the family's plan_axes) and label, its role ("class", "large_k" or "path": a row that enters a kernel path
    for a (path, format, weight type) cell no earlier row covers), the menu values it was given, and the path
    the case takes on the plan's target."""

    index: int
    case: Case
    plan_class: tuple
    label: str
    role: str
    picks: dict = field(default_factory=dict, compare=False)
    path: str | None = None  # the path the case takes on the plan's target (Kernel.launch); None: not declared


@dataclass(frozen=True)
class Plan:
    """A kernel's plan on one target and tier. mode: "all" (every accepted class has a row), "pairwise" (rows
    cover every value pair of the accepted classes) or "none" (no rows: `refusal` says why)."""

    kernel: str
    target: Target
    tier: str
    seed: int
    profile: str
    mode: str
    rows: tuple
    classes: tuple  # accepted plan classes, in the family's config-space order
    axes: tuple
    tiles: Tiles
    run_mode: str | None
    estimate_s: float
    refusal: str | None = None
    path_axes: tuple = ()  # ("path", *the family's plan_path_cross)
    path_cells: tuple = ()  # the cells the gate serves on the target (probed): (path, *cross values), sorted


def _stable_int(*parts, bits: int = 31) -> int:
    """A non-negative int from sha256 of the parts' text: the same on every machine, process and Python."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << bits) - 1)


def row_seed(run_seed: int, kernel: str, tier: str, index: int) -> int:
    """The data seed of plan row `index`: a stable hash of (run seed, kernel, tier, row index)."""
    return _stable_int("plan-row", run_seed, kernel, tier, index)


# ---- tiles -----------------------------------------------------------------------------------------------------

def _is_tile_table(value) -> bool:
    """A dict {kind: [(max_m or None, tile with block_m, block_n, block_k), ...]} (triton_w4a16's layout)."""
    return isinstance(value, dict) and bool(value) and all(
        isinstance(rows, list) and all(isinstance(r, tuple) and len(r) == 2 and (r[0] is None or isinstance(r[0], int))
                                       and all(hasattr(r[1], a) for a in ("block_m", "block_n", "block_k"))
                                       for r in rows) for rows in value.values())


def _tile_tables(kernel) -> list:
    """[(name, table)]: the tile tables (module-level dicts in triton_w4a16's layout, e.g. TILE_TABLE and
    PLANAR_TABLE) of the first class in the kernel's MRO whose module declares any; [] when none does."""
    for cls in type(kernel).__mro__:
        mod = sys.modules.get(cls.__module__)
        found = [(f"{mod.__name__}.{name}", value) for name, value in sorted(vars(mod).items())
                 if name.isupper() and _is_tile_table(value)] if mod is not None else []
        if found:
            return found
    return []


def _load_measured_tables(kernel, key: str, tables: list) -> None:
    """A kernel module that installs measured tables lazily (`load_tile_table(arch) -> bool`, on its first launch
    for that arch) gets asked to install `key`'s now: a plan built at collection, before any launch, must read the
    rows the kernel will use, not its generic "gpu" fallback (on an H200 the plan read the fallback until a launch
    had happened in that process, and the sm90 table after)."""
    if key == "interpreter" or not tables or any(key in table for _, table in tables):
        return
    for cls in type(kernel).__mro__:
        load = getattr(sys.modules.get(cls.__module__), "load_tile_table", None)
        if callable(load):
            try:
                load(key)
            except (ValueError, TypeError):
                pass  # an unusable file: the kernel warns at its first launch and runs its defaults, as planned here
            return


def kernel_tiles(kernel, target: Target) -> Tiles:
    """The kernel's tile boundaries for how it runs for `target` on this machine: the rows of its tile tables for
    the interpreter on a CPU host, else for the target's arch (a measured table) or "gpu"; generic menus when the
    kernel declares no table. M menu: 1, 3, BLOCK_M +- 1 of each tiled row and each row's path threshold (max_m,
    max_m + 1: GEMV / split-K / swap_ab / planar switches), the most tail-like first."""
    key = "interpreter" if detect_target().is_cpu else target.arch
    rows, where = [], []
    tables = _tile_tables(kernel)
    _load_measured_tables(kernel, key, tables)
    for name, table in tables:
        kind = key if key in table else ("gpu" if key != "interpreter" and "gpu" in table else None)
        if table.get(kind):
            rows += table[kind]
            where.append(f"{name}[{kind!r}]")
    if not rows:
        return Tiles("generic menus (no tile table declared)", GENERIC_M)
    cfgs = [(max_m, cfg.block_m, cfg.block_n, cfg.block_k, bool(getattr(cfg, "dequant_mm", False)))
            for max_m, cfg in rows]
    tails_up = [bm + 1 for _, bm, _, _, mm in cfgs if bm > 1 and not mm]
    tails_down = [bm - 1 for _, bm, _, _, mm in cfgs if bm > 1 and not mm]
    switches = [m + 1 for m, *_ in cfgs if m] + [m for m, *_ in cfgs if m]
    menu = tuple(m for m in dict.fromkeys([1, *tails_up, 3, *tails_down, *switches]) if 1 <= m <= M_CAP)
    return Tiles(" + ".join(where), menu, max(c[2] for c in cfgs), max(c[3] for c in cfgs))


# ---- building a plan ---------------------------------------------------------------------------------------------

def build_plan(kernel, target, tier: str, *, seed: int, profile=None) -> Plan:
    """The plan of `kernel` (a Kernel or registered name) on `target` (a Target or name) for `tier`, under run seed
    `seed` (a non-negative int) and `profile` (its plan budget; default ci). Pure in its arguments (and the
    registry), cached per process: the same on every xdist worker."""
    with registry.gate_batch():  # pure gates, asked about each config several times while a plan is made
        return _build(*_plan_args(kernel, target, tier, seed, profile))


def _plan_args(kernel, target, tier: str, seed: int, profile) -> tuple:
    """(kernel, target, tier, seed, profile) resolved and checked: what the cached plan builders take."""
    k = registry.get_kernel(kernel) if isinstance(kernel, str) else kernel
    t = parse_target(target) if isinstance(target, str) else target
    require(tier in TIERS, "tier", tier, f"one of {list(TIERS)}")
    require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed", seed, "a non-negative int")
    p = profile if isinstance(profile, Profile) else get_profile(profile or DEFAULT_PROFILE)
    return k, t, tier, seed, p


def class_rows(kernel, target, tier: str, *, seed: int, profile=None) -> tuple:
    """The plan's rows before its path rows: a prefix of `build_plan(...).rows` (the class and large-K rows; the path
    rows are appended after them), made without the path analysis that is most of a plan's cost. For a caller that
    usually stops within the first rows (a hunt for a broken kernel's first failing row)."""
    with registry.gate_batch():
        return _class_plan(*_plan_args(kernel, target, tier, seed, profile))[0].rows


def ci_plan(kernel, target, tier: str, *, seed: int, profile=None) -> list[Case]:
    """The plan's cases, in row order (replay each with `python -m conformance repro CASE_ID`)."""
    return [r.case for r in build_plan(kernel, target, tier, seed=seed, profile=profile).rows]


@functools.lru_cache(maxsize=512)
def _build(k, t: Target, tier: str, seed: int, p: Profile) -> Plan:
    """The class and large-K rows (_class_plan), then the path rows: the first tier (exact: bit for bit) enters
    every path cell and value that no class or large-K row of any tier covers; a later tier only what the first
    tier's plan leaves (a cell its K limits refuse, say). A run of both tiers has every cell; a run of one tier its
    share."""
    plan, ctx = _class_plan(k, t, tier, seed, p)
    if plan.mode == "none":
        return plan
    if tier == TIERS[0]:
        other = tuple(r for tr in TIERS[1:] for r in _class_plan(k, t, tr, seed, p)[0].rows)
    else:
        other = _build(k, t, TIERS[0], seed, p).rows
    fam = get_family(k.family)
    rows = list(plan.rows)
    cells = _add_path_rows(fam, k, t, tier, seed, plan.classes, ctx["members"], plan.tiles, ctx["regimes"], rows,
                           ctx["rank"], ctx["regime_offset"], set(ctx["forced_done"]), other)
    per_case = ctx["per_case"]
    estimate = sum(per_case * {"large_k": 3, "path": PATH_ROW_SHARE}.get(r.role, 1) for r in rows)
    return replace(plan, rows=tuple(rows), estimate_s=round(estimate, 2), path_axes=("path", *fam.plan_path_cross),
                   path_cells=cells)


@functools.lru_cache(maxsize=512)
def _class_plan(k, t: Target, tier: str, seed: int, p: Profile) -> tuple:
    """(the plan's class and large-K rows as a Plan, what the path rows need of its making)."""
    from conformance.cases.strategies import refusal_reason
    from conformance.checks.harness import _execution, exact_tier_unjudgeable

    fam = get_family(k.family)
    tiles = kernel_tiles(k, t)
    mode, _why = _execution(k, t)
    base = dict(kernel=k.name, target=t, tier=tier, seed=seed, profile=p.name, axes=tuple(fam.plan_axes),
                tiles=tiles, run_mode=mode)
    if tier == "exact" and exact_tier_unjudgeable(k):
        return Plan(mode="none", rows=(), classes=(), estimate_s=0.0, refusal=f"{k.name}: {exact_tier_unjudgeable(k)}",
                    **base), {}
    members: dict = {}
    for cls in fam.config_classes():
        members.setdefault(fam.plan_class(cls, tiles), []).append(cls)
    menus = fam.plan_menus(tiles)
    first = {name: vals[0] for name, vals in menus.items()}  # the picks of an acceptance probe
    regimes = tuple(fam.tier_regimes(tier))
    # the gate first (M-free: the statistical tier has no K limit), then the tier's limits at some menu M and regime
    gated = [pc for pc, ms in members.items()
             if fam.plan_case(k, t, "statistical", ms, first, tiles) is not None]
    accepted = tuple(pc for pc in gated if tier == "statistical" or any(
        _fields(fam, k, t, tier, members[pc], menus, dict(first, regime=r), tiles) is not None for r in regimes))
    if not accepted:
        return Plan(mode="none", rows=(), classes=(), estimate_s=0.0, refusal=refusal_reason(k, t), **base), {}
    per_case = fam.plan_seconds.get(mode, max(fam.plan_seconds.values()))
    every = len(accepted) * per_case <= p.plan_budget_s
    rank = {pc: _stable_int("rank", seed, k.name, tier, pc) for pc in accepted}
    order = _greedy_order(accepted, rank, stop_when_covered=not every, weight=fam.plan_weight)
    large_kind = "interpreter" if mode == "interpreter" else "device"
    n_large = LARGE_K_ROWS.get(mode, 0)
    plan_rows = [("class", pc) for pc in order]
    for j, pc in enumerate(_large_k_classes(fam, k, t, tier, accepted, members, menus, tiles, rank, large_kind,
                                            n_large)):
        plan_rows.insert(min(LARGE_K_AT + j * LARGE_K_EVERY, len(plan_rows)), ("large_k", pc))
    offsets = {name: _stable_int("menu", seed, k.name, tier, name) for name in (*menus, "regime")}
    forced_done: set = set()
    rows, k_turn, role_turn = [], {}, {}
    for i, (role, pc) in enumerate(plan_rows):
        row_menus = dict(menus, **fam.plan_large_menus(large_kind)) if role == "large_k" else menus
        # M and N rotate by the row's turn among rows of its role (class rows meet every menu value once there are
        # as many of them as values; large-K rows have their own menus); the K variant by the row's turn within
        # its K key (W4A16: its group regime), so each regime meets every K variant
        role_turn[role] = role_turn.get(role, -1) + 1
        turn = {n: role_turn[role] for n in row_menus}
        key = fam.plan_k_key(pc)
        turn["K"] = k_turn[key] = k_turn.get(key, -1) + 1
        picks = {name: vals[(turn[name] + offsets[name]) % len(vals)] for name, vals in row_menus.items()}
        large = large_kind if role == "large_k" else None
        # the row's regime in turn; another of the tier's when the exact K limits refuse every shape under it
        turn_regime = regimes[(i + offsets["regime"]) % len(regimes)]
        fields = None
        for regime in (turn_regime, *[r for r in regimes if r != turn_regime]):
            picks["regime"] = regime
            fields = _fields(fam, k, t, tier, members[pc], row_menus, picks, tiles, large)
            if fields is None and large is None:  # accepted at another shape only
                fields = _fields(fam, k, t, tier, members[pc], menus, dict(first, regime=regime), tiles)
            if fields is not None:
                break
        if fields is None:  # a large-K shape refused under every regime at this row's picks: no such row
            continue
        forced = fam.plan_first_regime(fields, tier)
        if forced is not None and forced not in forced_done:
            regime = forced
            forced_done.add(forced)
        index = len(rows)
        case = Case(family=k.family, kernel=k.name, tier=tier, regime=regime,
                    seed=row_seed(seed, k.name, tier, index), **fields)
        rows.append(PlanRow(index, case, pc, fam.plan_label(pc), role, picks, case_path(k, t, case)))
    estimate = sum(per_case * (3 if r.role == "large_k" else 1) for r in rows)
    ctx = dict(members=members, regimes=regimes, rank=rank, regime_offset=offsets["regime"],
               forced_done=frozenset(forced_done), per_case=per_case)
    return Plan(mode="all" if every else "pairwise", rows=tuple(rows), classes=accepted, estimate_s=round(estimate, 2),
                path_axes=("path", *fam.plan_path_cross), **base), ctx


def _fields(fam, k, t, tier, members, menus, picks, tiles, large=None):
    """The family's plan_case at the row's picks, else at the other row-menu values (the exact tier's K limits
    may depend on M); None when no shape of the class is accepted."""
    fields = fam.plan_case(k, t, tier, members, picks, tiles, large)
    if fields is not None:
        return fields
    for m in menus["M"]:
        if m != picks["M"]:
            fields = fam.plan_case(k, t, tier, members, dict(picks, M=m), tiles, large)
            if fields is not None:
                return fields
    return None


def _pairs(pc: tuple) -> frozenset:
    return frozenset((i, pc[i], j, pc[j]) for i in range(len(pc)) for j in range(i + 1, len(pc)))


def _differs(a: tuple, b: tuple) -> int:
    return sum(x != y for x, y in zip(a, b))


def _greedy_order(classes: tuple, rank: dict, *, stop_when_covered: bool, weight=None) -> list:
    """Classes ordered greedily: each next one covers the most value pairs not yet covered; ties go to the class with
    the most axis values no earlier row has, then to the one the family weighs higher (`weight(pc)`: how much of the
    code it exercises), then to the one that differs most from the previous row, then to the seeded rank.
    stop_when_covered: end once every pair of the classes is covered (an all-pairs covering array); else every
    class follows.
    Each class's count of uncovered pairs and of unseen axis values is kept up to date as rows are taken (through
    which classes hold each pair and each value), so a step compares stored counts and computes the difference from
    the previous row only for the classes tied on the first three keys: the same order as comparing all five keys
    of every class at every step, at a fraction of the cost (every collecting process builds every kernel's plan)."""
    pairs = {pc: _pairs(pc) for pc in classes}
    w = {pc: weight(pc) if weight else 0 for pc in classes}
    holders: dict = {}  # pair -> the classes holding it
    for pc, ps in pairs.items():
        for pair in ps:
            holders.setdefault(pair, []).append(pc)
    with_value: dict = {}  # (axis, value) -> the classes with it
    for pc in classes:
        for iv in enumerate(pc):
            with_value.setdefault(iv, []).append(pc)
    uncovered = set(holders)
    gain = {pc: len(ps) for pc, ps in pairs.items()}  # pairs not yet covered
    unseen = {pc: len(set(enumerate(pc))) for pc in classes}  # axis values no row so far has
    seen: set = set()
    order, left = [], sorted(classes, key=rank.__getitem__)
    while left and (uncovered or not stop_when_covered):
        top = max((gain[pc], unseen[pc], w[pc]) for pc in left)
        tied = [pc for pc in left if (gain[pc], unseen[pc], w[pc]) == top]
        prev = order[-1] if order else None
        best = tied[0] if len(tied) == 1 else max(
            tied, key=lambda pc, prev=prev: (_differs(pc, prev) if prev else 0, -rank[pc]))
        order.append(best)
        left.remove(best)
        for pair in pairs[best] & uncovered:
            uncovered.discard(pair)
            for pc in holders[pair]:
                gain[pc] -= 1
        for iv in set(enumerate(best)) - seen:
            seen.add(iv)
            for pc in with_value[iv]:
                unseen[pc] -= 1
    return order


def all_pairs(combos) -> list:
    """A subset of `combos` (equal-length tuples) that covers every pair of values of any two positions that some
    combo has (greedy, deterministic: ties go to the earlier combo). Tests use it where the full grid costs
    interpreter minutes and pairwise interactions are what the grid is for."""
    combos = [tuple(c) for c in combos]
    return _greedy_order(tuple(combos), {c: i for i, c in enumerate(combos)}, stop_when_covered=True)


def _large_k_classes(fam, k, t, tier, accepted, members, menus, tiles, rank, kind, n) -> list:
    """Up to n plan classes for the large-K rows: the seeded order, each next the one most different from those
    already taken, among classes with a gate-accepted large-K shape."""
    picks = {name: vals[0] for name, vals in dict(menus, **fam.plan_large_menus(kind)).items()}
    ok = [pc for pc in sorted(accepted, key=rank.__getitem__)
          if fam.plan_case(k, t, tier, members[pc], picks, tiles, kind) is not None]
    out = []
    while ok and len(out) < n:
        best = max(ok, key=lambda pc: (min((_differs(pc, o) for o in out), default=0), -rank[pc]))
        out.append(best)
        ok.remove(best)
    return out


# ---- kernel paths ------------------------------------------------------------------------------------------------
# A kernel says which path a call takes on a target (`Kernel.launch(config, M, target).path`: triton_w4a16's planar
# decode path, GEMV row, tl.dot tiles, dequantize-then-matmul rows, "+splitk" where K is split). Each path reads the
# operands its own way, so a bug in one path's reading of one checkpoint format is that path's alone: the plan
# crosses path x the family's plan_path_cross axes (W4A16: format x weight type) in full, and meets every value of
# its plan_path_pairs axes (act dtype, group regime, act-order) on every path. Rows the class rows leave uncovered
# get a "path" row each, entered at the fewest rows x the smallest shape (family.plan_path_shapes) that take it.

PATH_PROBE_M = (1, 2, 3, 5, 9, 17, 33, 65, 129)  # no Launch.row: these, then a bisection wherever the path changes


@functools.lru_cache(maxsize=1 << 16)
def _launch(k, t: Target, config, M: int) -> tuple:
    """(path, row) of Kernel.launch(config, M, t); (None, None) when the kernel declares no launch (the default)
    or its gate refuses. A launch that raises is an error naming the kernel (a plugin's hook, loudly)."""
    try:
        launch = k.launch(config, M, t)
    except Exception as e:  # noqa: BLE001 - any plugin error, re-raised with its kernel and call named
        raise RuntimeError(f"kernel {k.name!r}: launch({config}, M={M}, target={t}) raised "
                           f"{type(e).__name__}: {e}") from e
    return (None, None) if launch is None else (launch.path, launch.row)


def case_path(kernel, target: Target, case: Case) -> str | None:
    """The path `case` takes on `target` (`kernel.launch(case.config(), rows, target).path`); None: not declared."""
    from conformance.core.kernel import case_rows

    return _launch(kernel, target, case.config(), case_rows(case))[0]


@functools.lru_cache(maxsize=1 << 14)
def path_entries(k, t: Target, config) -> tuple:
    """((path, least rows), ...) of every path a call on `config` takes on `t` for rows 1 ... M_CAP, least rows first.
    The rows walk the kernel's selection rows (Launch.row: 1, then each row's max_m + 1: a row's path holds for every
    M it serves); a kernel that names no row is probed at PATH_PROBE_M, and between two probes that take different
    paths the first M of the second is found by bisection. () when it declares no launch. The probe runs under one
    time limit (registry.launch_probe): its launches take microseconds each, less than arming the limit for each."""
    with registry.launch_probe(k.name):
        return _path_entries(k, t, config)


def _path_entries(k, t: Target, config) -> tuple:
    first: dict = {}
    M = 1
    while M <= M_CAP:
        path, row = _launch(k, t, config, M)
        if path is None:
            break
        first.setdefault(path, M)
        if row is None:  # no selection rows to walk
            lo = 1
            for hi in PATH_PROBE_M[1:]:
                p = _launch(k, t, config, hi)[0]
                if p is None:
                    break
                if p != _launch(k, t, config, lo)[0]:
                    a, b = lo, hi  # path(a) != path(b): the least m in (a, b] taking path(b)
                    while b - a > 1:
                        mid = (a + b) // 2
                        a, b = (a, mid) if _launch(k, t, config, mid)[0] == p else (mid, b)
                    first[p] = min(first.get(p, b), b)
                lo = hi
            break
        if row.max_m is None:
            break
        M = max(row.max_m, M) + 1
    return tuple(sorted(first.items(), key=lambda kv: (kv[1], kv[0])))


def _path_items(fam, path: str, pc: tuple, fits: bool = True) -> frozenset:
    """What a row on `path` of plan class `pc` covers: its cell ("cell", path, *cross values; "cell?" when the
    row's shape cannot show the cell's format: family.plan_path_fit) and its (path, axis value) pairs."""
    cross = tuple(pc[fam.plan_axes.index(a)] for a in fam.plan_path_cross)
    return frozenset({("cell" if fits else "cell?", path, *cross)} | {("pair", path, a, pc[fam.plan_axes.index(a)])
                                                                      for a in fam.plan_path_pairs})


def _row_fields(case: Case) -> dict:
    return {n: v for n, v in case.to_dict().items() if n not in ("family", "kernel", "regime", "tier", "seed")}


def _fitted(items: frozenset, fit_cells: set) -> frozenset:
    """A non-fitting row's cell counts as the cell where no fitting shape enters it ("cell?" -> "cell")."""
    return frozenset(("cell", *i[1:]) if i[0] == "cell?" and i[1:] not in fit_cells else i for i in items)


@functools.lru_cache(maxsize=256)
def _path_candidates(k, t: Target, tier: str, tiles: Tiles, classes: tuple, regimes: tuple) -> dict:
    """{(path, plan class): ((does not fit, rows x size), fields)}: for each accepted plan class (`classes`: (plan
    class, its config classes) pairs) and each path a call on one of the family's smallest shapes of it takes, the
    best shape that enters that path (_offer) and its case fields, where some data regime of the tier can run it.
    Independent of the run seed: built once per kernel, target and tier in a process."""
    fam = get_family(k.family)
    entries: dict = {}
    for pc, members in classes:
        for fields in fam.plan_path_shapes(k, t, tier, list(members), tiles):
            config = fam.config_from_case(SimpleNamespace(**fields))  # a Case's validation: for the rows chosen
            for path, m in path_entries(k, t, config):
                _offer(fam, k, tier, regimes, entries, path, pc, dict(fields, **{fam.plan_rows_field: m}))
    return entries


def _offer(fam, k, tier, regimes, entries: dict, path: str, pc: tuple, f: dict) -> None:
    """Keep `f` as the (path, pc) entry when it is better: a shape that fits (family.plan_path_fit) before one that
    does not, then the least rows x size; where some data regime of the tier runs it."""
    rank = (not fam.plan_path_fit(f), f[fam.plan_rows_field] * fam.plan_size(f))
    if (path, pc) in entries and entries[(path, pc)][0] <= rank:
        return
    if all(fam.plan_row_limit(k, tier, f, r) is not None for r in regimes):
        return  # no data regime of the tier runs this shape at these rows
    entries[(path, pc)] = (rank, f)


def _add_path_rows(fam, k, t, tier, seed, accepted, members, tiles, regimes, rows, rank, regime_offset,
                   forced_done, other_rows=()) -> tuple:
    """Append to `rows` a "path" row for each (path, cross values) cell and each (path, pair-axis value) that the
    rows so far and `other_rows` (the first tier's plan, for a later tier) leave uncovered and the gate serves
    (greedy: each next row covers the most; ties go to a fitting shape, then the least rows x size, then the seeded
    rank). A cell that some fitting shape enters (family.plan_path_fit) is covered only by a fitting row. Returns
    the cells this plan answers for, (path, *cross values), sorted: those its rows cover, and those it serves that
    `other_rows` do not cover (so every returned cell has a case here, and the tiers' cells together are every
    served cell)."""
    entries = dict(_path_candidates(k, t, tier, tiles, tuple((pc, tuple(members[pc])) for pc in accepted), regimes))
    for r in rows:  # the rows' own shapes enter paths too (one that only a wider N or K takes, say)
        if r.path is not None:
            for path, m in path_entries(k, t, r.case.config()):
                _offer(fam, k, tier, regimes, entries, path, r.plan_class,
                       dict(_row_fields(r.case), **{fam.plan_rows_field: m}))
    raw = {e: _path_items(fam, *e, fits=not v[0][0]) for e, v in entries.items()}
    row_items = _row_items(fam, rows)
    other_items = _row_items(fam, other_rows)
    fit_cells = {i[1:] for its in (*raw.values(), *row_items, *other_items) for i in its if i[0] == "cell"}
    items = {e: _fitted(its, fit_cells) for e, its in raw.items()}
    covered_other = set().union(*(_fitted(its, fit_cells) for its in other_items))
    covered = set().union(*(_fitted(its, fit_cells) for its in row_items)) | covered_other
    served = set().union(*items.values()) | covered
    want = {i for i in set().union(*items.values()) - covered if i[0] != "cell?"}
    left = sorted(items, key=lambda e: (entries[e][0], rank[e[1]], e[0]))  # best first: max keeps the first
    chosen = []
    while want:
        gains = [(len(items[e] & want), e) for e in left]
        left = [e for g, e in gains if g]  # a gain never grows: entries with none are done for
        if not left:
            break
        best = max(gains, key=lambda ge: ge[0])[1]  # the first of the largest gain: the cheapest, then by rank
        chosen.append(best)
        want -= items[best]
    for path, pc in chosen:
        fields = entries[(path, pc)][1]
        turn = regimes[(len(rows) + regime_offset) % len(regimes)]
        regime = next(r for r in (turn, *regimes) if fam.plan_row_limit(k, tier, fields, r) is None)
        forced = fam.plan_first_regime(fields, tier)
        if forced is not None and forced not in forced_done and fam.plan_row_limit(k, tier, fields, forced) is None:
            regime = forced
            forced_done.add(forced)
        index = len(rows)
        case = Case(family=k.family, kernel=k.name, tier=tier, regime=regime,
                    seed=row_seed(seed, k.name, tier, index), **fields)
        rows.append(PlanRow(index, case, pc, fam.plan_label(pc), "path", {"path": path}, path))
    own = set().union(*(_fitted(its, fit_cells) for its in _row_items(fam, rows)))
    mine = {i[1:] for i in served - covered_other if i[0] == "cell"} | {i[1:] for i in own if i[0] == "cell"}
    return tuple(sorted(mine))


def _row_items(fam, rows) -> list:
    return [_path_items(fam, r.path, r.plan_class, fam.plan_path_fit(_row_fields(r.case)))
            for r in rows if r.path is not None]


# ---- coverage ----------------------------------------------------------------------------------------------------

def plan_coverage(kernel, target, tier: str, *, seed: int, profile=None) -> list[dict]:
    """One row per accepted plan class: {"class": label, "covered": "run" | "pair-covered", "case_id": the
    first row that ran it (run), "rows": the rows covering its value pairs (pair-covered)}."""
    plan = build_plan(kernel, target, tier, seed=seed, profile=profile)
    fam = get_family(registry.get_kernel(plan.kernel).family if isinstance(kernel, str) else kernel.family)
    ran: dict = {}
    for r in plan.rows:
        ran.setdefault(r.plan_class, r)
    first_row = {}
    for r in plan.rows:
        for pair in _pairs(r.plan_class):
            first_row.setdefault(pair, r.index)
    out = []
    for pc in plan.classes:
        if pc in ran:
            out.append({"class": fam.plan_label(pc), "covered": "run", "case_id": ran[pc].case.id,
                        "row": ran[pc].index})
        else:
            rows = sorted({first_row[p] for p in _pairs(pc) if p in first_row})
            missing = [p for p in _pairs(pc) if p not in first_row]
            out.append({"class": fam.plan_label(pc), "covered": "pair-covered" if not missing else "not covered",
                        "rows": rows})
    return out


def coverage_summary(kernel, target, tier: str, *, seed: int, profile=None) -> dict:
    """One line's worth for reports: kernel, tier, target, mode, accepted / run / pair-covered class counts,
    rows (large-K and path rows among them), the path cells the gate serves and those without a case, the
    estimated CPU seconds, the tile source, and the refusal when no rows."""
    plan = build_plan(kernel, target, tier, seed=seed, profile=profile)
    cov = plan_coverage(kernel, target, tier, seed=seed, profile=profile)
    n = {c: sum(1 for r in cov if r["covered"] == c) for c in ("run", "pair-covered", "not covered")}
    fam = get_family(registry.get_kernel(plan.kernel).family if isinstance(kernel, str) else kernel.family)
    have = {(r.path, *(r.plan_class[fam.plan_axes.index(a)] for a in fam.plan_path_cross))
            for r in plan.rows if r.path is not None}
    return {"kernel": plan.kernel, "tier": tier, "target": str(plan.target), "mode": plan.mode,
            "accepted": len(plan.classes), "run": n["run"], "pair_covered": n["pair-covered"],
            "not_covered": n["not covered"], "rows": len(plan.rows),
            "large_k_rows": sum(1 for r in plan.rows if r.role == "large_k"),
            "path_rows": sum(1 for r in plan.rows if r.role == "path"), "path_cells": len(plan.path_cells),
            "path_cells_without_case": [list(c) for c in plan.path_cells if c not in have],
            "estimate_s": plan.estimate_s, "tiles": plan.tiles.source, "refusal": plan.refusal, "classes": cov}


def summary_line(s: dict) -> str:
    """One compact line of a coverage_summary (pytest's terminal summary, validate's report): mode, classes
    accepted / run / pair-covered, rows; "N ran" when fewer rows reported than the plan has (-k, -x, a crash)."""
    head = f"{s['kernel']} {s['tier']} ({s['target']}): "
    if s["mode"] == "none":
        return head + f"no rows: {s['refusal']}"
    cov = f"{s['accepted']} classes accepted, {s['run']} run"
    if s["pair_covered"] or s["mode"] == "pairwise":
        cov += f", {s['pair_covered']} pair-covered"
    if s["not_covered"]:
        cov += f", {s['not_covered']} NOT covered"
    ran = f", {s['rows_ran']} ran" if "rows_ran" in s and s["rows_ran"] != s["rows"] else ""
    paths = f", {s['path_rows']} path" if s.get("path_rows") else ""
    if s.get("path_cells"):
        missing = len(s.get("path_cells_without_case", ()))
        paths += f"; {s['path_cells']} path cells" + (f", {missing} WITHOUT a case" if missing else "")
    return head + f"{s['mode']}: {cov}; {s['rows']} rows ({s['large_k_rows']} large-K{paths}){ran}"


# ---- failed plan cases, replayed first next run (the file itself: conformance.cases.replays) ----------------------

def replay_case_ids(kernel: str, tier: str, target, entries: list[dict] | None = None) -> list[str]:
    """Case ids of `kernel`'s `tier` plan cases that failed on `target` in an earlier run (oldest first), to run
    first in this one; ids that no longer parse (a renamed field) are left out. `entries`: the replay file as read
    once for the whole run (the pytest controller reads it and hands it to every xdist worker, so a rewrite by
    another run between two workers' collections cannot make them collect different tests); None: read it now."""
    out = []
    for e in (read_replays() if entries is None else entries):
        if (e.get("kernel"), e.get("tier"), e.get("target")) != (kernel, tier, str(target)):
            continue
        try:
            parse_case_id(e["case_id"])
        except InvalidInput:
            continue
        out.append(e["case_id"])
    return list(dict.fromkeys(out))


# ---- measuring a plan's cost (python -m conformance.cases.plan --measure OUT.json) ---------------------------------

def measure(kernels=None, target="cpu", *, seed: int = 0, profile=None) -> dict:
    """Run every plan row of `kernels` (default: all registered) on `target` (each kernel on its suite target, as
    the suite does), both tiers, in this process; CPU seconds per row (time.process_time: every thread of this
    process), summed per kernel and tier and per (family, run mode). The first row of a kernel also pays its
    one-time warm-up (imports, Triton's first interpretation), as it does in a suite run."""
    from conformance.cases.strategies import suite_target
    from conformance.checks.harness import run_case

    base = parse_target(target) if isinstance(target, str) else target
    ks = [registry.get_kernel(n) for n in kernels] if kernels else registry.all_kernels()
    per_plan, per_mode = [], {}
    for k in ks:
        for tier in TIERS:
            t = suite_target(k, base, tier, profile)
            p = build_plan(k, t, tier, seed=seed, profile=profile)
            cpu = outcomes = 0
            outcomes = {}
            for r in p.rows:
                c0 = time.process_time()
                v = run_case(r.case, k, t, record=False)
                dt = time.process_time() - c0
                cpu += dt
                outcomes[v.outcome] = outcomes.get(v.outcome, 0) + 1
                m = per_mode.setdefault(f"{k.family} {v.run_mode} {r.role}", {"cases": 0, "cpu_s": 0.0})
                m["cases"] += 1
                m["cpu_s"] += dt
            per_plan.append({"kernel": k.name, "tier": tier, "target": str(t), "mode": p.mode, "rows": len(p.rows),
                             "cpu_s": round(cpu, 2), "estimate_s": p.estimate_s, "outcomes": outcomes})
    for m in per_mode.values():
        m["cpu_s_per_case"] = round(m["cpu_s"] / m["cases"], 4)
        m["cpu_s"] = round(m["cpu_s"], 2)
    return {"seed": seed, "target": str(base), "plans": per_plan, "per_family_mode_role": per_mode,
            "total_cpu_s": round(sum(p["cpu_s"] for p in per_plan), 1)}


def _main(argv=None) -> int:
    import argparse
    import subprocess

    ap = argparse.ArgumentParser(prog="python -m conformance.cases.plan",
                                 description="print a kernel's CI plan, or run and time every plan (--measure)")
    ap.add_argument("--kernel", default=None, help="kernels, comma-separated (default: every registered kernel)")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--tier", default="statistical", choices=TIERS)
    ap.add_argument("--seed", default="0", help="run seed (decimal or 0x-hex)")
    ap.add_argument("--measure", default=None, metavar="OUT.json", help="run every plan row and write CPU seconds")
    args = ap.parse_args(argv)
    from conformance.cases.seeds import parse_seed

    registry.load_all()
    seed = parse_seed("--seed", args.seed)
    if args.measure:
        doc = measure(args.kernel.split(",") if args.kernel else None, args.target, seed=seed)

        def git(*a):
            p = subprocess.run(["git", *a], capture_output=True, text=True)
            return p.stdout.strip() if p.returncode == 0 else None
        doc.update(commit=git("rev-parse", "HEAD"), tree_clean=git("status", "--porcelain") == "",
                   cpu_count=os.cpu_count(), time_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        with open(args.measure, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"total {doc['total_cpu_s']} CPU s; wrote {args.measure}")
        return 0
    from conformance.cases.strategies import suite_target

    for k in ([registry.get_kernel(n) for n in args.kernel.split(",")] if args.kernel else registry.all_kernels()):
        t = suite_target(k, parse_target(args.target), args.tier)
        p = build_plan(k, t, args.tier, seed=seed)
        print(f"{k.name} {args.tier} on {t}: {p.mode}, {len(p.classes)} classes, {len(p.rows)} rows, "
              f"~{p.estimate_s} CPU s; tiles: {p.tiles.source}" + (f"; {p.refusal}" if p.refusal else ""))
        for r in p.rows:
            print(f"  {r.index:3d} {r.role:7s} {r.label:48s} {str(r.path):16s} {r.case.id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
