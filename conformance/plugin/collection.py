"""Collection: parametrization of the suite fixtures, the CI plan's test items (plan rows), hypothesis seeding
from the run seed, deselection of tests parametrized by kernels outside --conformance-kernels/--conformance-case, and
shards (--conformance-shard: the items of the other shards are deselected), and the JIT compile groups of the plan's
cases (pytest-xdist groups from the kernel's compile key; --dist loadgroup by default where kernels compile). Sharding
and grouping live here together: both decide, per test item, where it runs."""
from __future__ import annotations

import pytest

from conformance.plugin import jit
from conformance.plugin.options import _replay_case, _shard, _target, _tiers
from conformance.plugin.spawn import dist_for  # noqa: F401 - re-exported (pytest_plugin, tests)
from conformance.plugin.state import _State


def _seeded(config) -> bool:
    """Whether the suite's hypothesis draws take the run seed: always in the ci profile, elsewhere only when a
    seed was given (nightly and exhaustive stay random by default)."""
    st: _State = config._conformance
    return config.getoption("--conformance-profile") == "ci" or st.seed_source in ("--conformance-seed",
                                                                                   "CONFORMANCE_SEED")


def kernel_names(config, family: str) -> list[str]:
    """Sorted names of the kernels of `family` selected by --conformance-kernels (and --conformance-case)."""
    from conformance.core import registry

    ks = registry.all_kernels(family)
    opt = config.getoption("--conformance-kernels")
    if opt:
        wanted = {k.name for k in registry.resolve_kernels(opt)}
        ks = [k for k in ks if k.name in wanted]
    case = _replay_case(config)
    if case is not None:
        ks = [k for k in ks if k.name == case.kernel]
    return sorted(k.name for k in ks)


def pytest_generate_tests(metafunc):
    config = metafunc.config
    if "conformance_kernel_name" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("conformance_family")
        if marker is None:
            from conformance.core.registry import FAMILIES

            raise pytest.UsageError(f"{metafunc.definition.nodeid}: conformance_kernel_name needs "
                                    f"@pytest.mark.conformance_family(NAME), NAME one of {list(FAMILIES)}")
        names = kernel_names(config, marker.args[0])
        metafunc.parametrize("conformance_kernel_name", names, ids=names)
    if "conformance_tier" in metafunc.fixturenames:
        tiers = _tiers(config)
        case = _replay_case(config)
        if case is not None:
            tiers = [t for t in tiers if t == case.tier]
        metafunc.parametrize("conformance_tier", tiers, ids=tiers)
    if "conformance_plan_row" in metafunc.fixturenames:
        rows = plan_rows(config)
        groups = compile_groups(rows) if config.pluginmanager.hasplugin("xdist") else {}
        metafunc.parametrize("conformance_plan_row", [
            pytest.param(r, id=r.id, marks=[pytest.mark.xdist_group(groups[r.id])] if r.id in groups else [])
            for r in rows])


class PlanItem:
    """One plan test: a row of a kernel's CI plan, a failed case replayed from an earlier run, the
    --conformance-case case, or (case None) a (kernel, tier) whose plan has no rows, skipped with `skip`."""

    def __init__(self, test_id: str, kernel: str, tier: str, target, case=None, role: str = "class",
                 index: int | None = None, skip: str | None = None):
        self.id, self.kernel, self.tier, self.target = test_id, kernel, tier, target
        self.case, self.role, self.index, self.skip = case, role, index, skip

    def properties(self) -> dict:
        """What the controller needs from the test's report: the plan's key, the row, the case id."""
        return {"kernel": self.kernel, "tier": self.tier, "target": str(self.target), "role": self.role,
                "index": self.index, "case_id": self.case.id if self.case is not None else None}


def plan_rows(config) -> list[PlanItem]:
    """The plan tests of this run, in order: per selected kernel (every family, sorted) and tier, the failed
    cases an earlier run remembered (role "replayed"), then the plan's rows (ids `<kernel>-<tier>-<index>`), or
    one skipped item `<kernel>-<tier>` naming why the plan is empty. The target of each is the one the suite
    draws for (strategies.suite_target: a simulated target where a kernel runs its model). With
    --conformance-case: that case only. A pure function of the options, the registry, the run seed and the replay
    file, so every xdist worker collects the same items."""
    from conformance.core import registry

    with registry.gate_batch():  # every selected kernel's gates, ~10^5 calls: see registry.gate_batch
        return _plan_rows(config)


def _plan_rows(config) -> list[PlanItem]:
    from conformance.cases import plan, strategies
    from conformance.cases.ids import parse_case_id
    from conformance.cases.profiles import get_profile
    from conformance.core import registry
    from conformance.core.registry import FAMILIES

    st: _State = config._conformance
    profile = get_profile(config.getoption("--conformance-profile"))
    replay = _replay_case(config)
    target = _target(config)
    out = []
    for fam in FAMILIES:
        for name in kernel_names(config, fam):
            k = registry.get_kernel(name)
            for tier in _tiers(config):
                if replay is not None:
                    if (replay.kernel, replay.tier) == (name, tier):
                        out.append(PlanItem(f"{name}-{tier}-case", name, tier, target, replay, "case"))
                    continue
                t = strategies.suite_target(k, target, tier, profile)
                p = plan.build_plan(k, t, tier, seed=st.seed, profile=profile)
                replayed = plan.replay_case_ids(name, tier, t, st.replays)
                for j, cid in enumerate(replayed):
                    out.append(PlanItem(f"{name}-{tier}-replay{j}", name, tier, t, parse_case_id(cid), "replayed"))
                if not p.rows:
                    out.append(PlanItem(f"{name}-{tier}", name, tier, t, role="none", skip=p.refusal))
                for r in p.rows:
                    if r.case.id not in replayed:  # a remembered row of this very plan runs once, first
                        out.append(PlanItem(f"{name}-{tier}-{r.index}", name, tier, t, r.case, r.role, r.index))
    return out


KERNEL_PARAMS = ("kernel", "kernel_name")  # parameter names that carry one registered kernel (object or name)


def pytest_collection_modifyitems(config, items):
    _seed_hypothesis(config, items)
    _deselect_other_kernels(config, items)
    _deselect_other_shards(config, items)


def shard_of(nodeid: str, count: int) -> int:
    """The 1-based shard (of `count`) a test item belongs to: sha256 of its node id, so every item is in exactly one
    shard whatever the order of collection, the worker count or the other items (every shard must run the same
    command from the same directory: node ids are relative to the rootdir). The `@group` suffix xdist's loadgroup
    appends to a grouped item's id is not part of it: the split is the same under every --dist."""
    import hashlib

    if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist's own rule for the suffix (its loadgroup scheduler)
        nodeid = nodeid[:nodeid.rfind("@")]
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:8], "big") % count + 1


# ---- JIT compile groups: cases sharing a compiled specialization run on one xdist worker --------------------------

MAX_GROUP_ITEMS = 16  # a larger group is split: one specialization's cases must not hold one worker for long


def compile_groups(rows: list[PlanItem]) -> dict[str, str]:
    """Plan test id -> xdist group: the plan cases whose kernel's `compile_key(case)` is equal share a group
    (`<kernel>-<digest of the key>`, the same in every process: a digest of the key's repr), so under `--dist
    loadgroup` one worker compiles each specialization once and the others never wait on the same compile. A
    kernel without a key (None, the default) leaves its cases ungrouped; a group of more than MAX_GROUP_ITEMS
    cases is split in order into groups of at most that many."""
    import hashlib

    from conformance.core import registry

    members: dict[str, list[str]] = {}
    for r in rows:
        if r.case is None:
            continue
        try:
            key = registry.get_kernel(r.kernel).compile_key(r.case)
        except Exception as e:  # a plugin's hook: name it (the plan's tests then fail to collect, loudly)
            raise RuntimeError(f"kernel {r.kernel!r}: compile_key({r.case.id}) raised {type(e).__name__}: {e}") from e
        if key is None:
            continue
        digest = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        members.setdefault(f"{r.kernel}-{digest}", []).append(r.id)
    out = {}
    for name, ids in members.items():
        for j in range(0, len(ids), MAX_GROUP_ITEMS):
            for rid in ids[j:j + MAX_GROUP_ITEMS]:
                out[rid] = name if j == 0 else f"{name}-{j // MAX_GROUP_ITEMS + 1}"
    return out


def item_kernel(item) -> str | None:
    """The kernel a test item runs: its plan row's, or its `conformance_kernel_name` / `kernel` / `kernel_name`
    parameter; None for a test not parametrized by one kernel."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    row = params.get("conformance_plan_row")
    if isinstance(row, PlanItem):
        return row.kernel
    for key in ("conformance_kernel_name", *KERNEL_PARAMS):
        v = params.get(key)
        name = getattr(v, "name", v)
        if isinstance(name, str):
            return name
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures run: its JIT compiles are its kernel's (conformance.plugin.jit)."""
    jit.set_kernel(item_kernel(item), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_cmdline_main(config):
    """Before xdist resolves -n (a hookwrapper runs first): --dist loadgroup by default where kernels compile,
    worksteal elsewhere (dist_for), so a plain `pytest -n auto` gets them; an explicit --dist wins. A controller that
    starts its workers before it loads torch (spawn.defers) leaves the choice pending until after the start."""
    opt = config.option
    if getattr(opt, "numprocesses", None) and getattr(opt, "dist", None) == "no":
        from conformance.plugin import spawn

        if spawn.defers(config) and dist_for(opt, compiles=True):  # the plugin chooses, but after the workers
            setattr(config, spawn.PENDING_ATTR, True)               # started, without torch now (plugin.spawn)
        else:
            dist = dist_for(opt, compiles=spawn.compiles_here())
            if dist:
                opt.dist = dist
                config._conformance_dist = dist  # the header says the plugin chose it
    yield


def _deselect_other_shards(config, items) -> None:
    """--conformance-shard I/N: deselect the items of the other shards (a CI plan row is one item, so the plan's
    cases split with them)."""
    shard = _shard(config)
    if shard is None:
        return
    index, count = shard
    keep, drop = [], []
    for item in items:
        (keep if shard_of(item.nodeid, count) == index else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _seed_hypothesis(config, items) -> None:
    """The suite's hypothesis tests (those parametrized over conformance_kernel_name) draw from the run seed
    (hypothesis.seed), the same on every xdist worker: the same seed draws the same cases, another commit others.
    In the ci profile they also get the ci example database (profiles.seeded_settings: failures found by an
    earlier run replay first). Tests with their own seed are left alone; nightly/exhaustive only with a given seed."""
    if not _seeded(config):
        return
    from conformance.cases.profiles import get_profile, seed_test

    st: _State = config._conformance
    profile = get_profile(config.getoption("--conformance-profile"))
    for item in items:
        fn = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if "conformance_kernel_name" not in getattr(item, "fixturenames", ()) or \
                not getattr(fn, "is_hypothesis_test", False):
            continue
        if getattr(fn, "_conformance_seeded", None) == st.seed:  # one function, many parametrized items
            continue
        if fn._hypothesis_internal_use_seed is not None and getattr(fn, "_conformance_seeded", None) is None:
            continue  # the test pins its own seed
        seed_test(fn, profile, st.seed)
        fn._conformance_seeded = st.seed


def _deselect_other_kernels(config, items) -> None:
    """--conformance-kernels (and --conformance-case) also narrow tests parametrized over kernels outside
    the suite fixtures (contract checks: `kernel`; regressions: `kernel_name`): other kernels are deselected."""
    from conformance.core.registry import Kernel

    if not (config.getoption("--conformance-kernels") or _replay_case(config) is not None):
        return
    from conformance.core.registry import FAMILIES

    wanted = {name for fam in FAMILIES for name in kernel_names(config, fam)}
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        names = [v.name if isinstance(v, Kernel) else v for k, v in params.items() if k in KERNEL_PARAMS]
        (drop if any(isinstance(n, str) and n not in wanted for n in names) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


