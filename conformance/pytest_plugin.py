"""The conformance pytest plugin: options, kernel loading, parametrization, fixtures, summary and reports.

Options: --conformance-kernels, --conformance-target, --conformance-tiers, --conformance-profile, --conformance-case,
--conformance-report, --conformance-plugin, --conformance-no-entry-points, --conformance-timeout, --conformance-seed;
--conformance-kernels and --conformance-case also deselect tests parametrized by another kernel (`kernel` /
`kernel_name` parameters). Every option is validated at configuration, before any work: a bad value (an unknown kernel,
an empty list, a bad target, profile, tier or case id, an unwritable report path, a plugin that fails to import) is
pytest's usage error (exit 4) with one line naming the option, the value and what is allowed. Tests ask for the
fixtures `conformance_kernel_name` (parametrized, sorted, over the kernels of the family named by the
`conformance_family("...")` marker), `conformance_tier` (parametrized over --conformance-tiers), `conformance_target`,
`conformance_profile` and `conformance_case` (the --conformance-case Case or None).

Run seed (conformance.cases.seeds): resolved once by the controller (--conformance-seed, $CONFORMANCE_SEED, the commit
for ci, random for nightly/exhaustive), handed to xdist workers, printed in the header and the summary and stored in
the JSON report. The suite's hypothesis tests draw from it (ci: with the ci example database); `conformance_plan_row`
is parametrized over the CI plan's rows (conformance.cases.plan, test ids `<kernel>-<tier>-<row>`), failed cases
of an earlier run first; the controller writes this run's failed plan cases for the next one at session end.

Time limit: every kernel call runs under conformance.checks.timeout (default per profile, PROFILE_LIMITS;
--conformance-timeout S overrides, 0 = none). A hung call fails its own case: an `error` record with detail
`timeout after N s`, its case id and replay line, and the test fails at once (hypothesis neither shrinks nor
replays it); the run goes on. A hang Python cannot interrupt ends its process after a grace period (an xdist
worker: the controller records the crash, with the case when the worker could name it).

Records (conformance.results) reach the controller with each test report: the plugin attaches the
records a test produced to its TestReport (pytest-xdist serializes report attributes), so a crashed
worker loses at most its running test's records, and the controller merges them in arrival order. Each report
also carries its worker's running count of records made; a worker that finishes reports its final count. The
JSON report's "produced" is the sum over processes plus the crash records the controller made, so a record lost
between a worker and the merged report shows as len(records) < produced. A crashed worker (os._exit, a segfault,
an uninterruptible hang) becomes an `error` record of the test's kernel with detail `worker crashed` (or
`timeout after N s` and the case id when the worker's watchdog named it), and the report lists the worker under
"crashed_workers".

--conformance-report is written atomically (temp file + rename) after each test (at most every
REPORT_INTERVAL_S seconds) with "complete": false, and at the end with "complete": true: a killed run keeps what
it judged.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter, defaultdict

import pytest

_RECORDS_ATTR = "conformance_records"
_PRODUCED_KEY = "conformance_produced"
_HANG_DIR_ENV = "CONFORMANCE_HANG_DIR"  # where a worker's watchdog leaves the case it was running (controller reads)
REPORT_INTERVAL_S = 2.0
PROFILES = ("ci", "nightly", "exhaustive")


def pytest_addoption(parser):
    g = parser.getgroup("conformance")
    g.addoption("--conformance-plugin", action="append", default=[], metavar="MODULE",
                help="import MODULE to register external kernels (repeatable)")
    g.addoption("--conformance-no-entry-points", action="store_true", default=False,
                help="do not load plugins from installed distributions' entry points "
                     "(also CONFORMANCE_NO_ENTRY_POINTS=1)")
    g.addoption("--conformance-kernels", default=None, metavar="NAMES",
                help="comma-separated kernel names to test (default: every registered kernel)")
    g.addoption("--conformance-target", default="auto", metavar="TARGET",
                help="target to test for: auto (this machine), cpu, sm90, gfx1100, ... (default auto)")
    g.addoption("--conformance-tiers", default="exact,statistical", metavar="TIERS",
                help="comma-separated numerical tiers: exact, statistical (default both)")
    g.addoption("--conformance-profile", default="ci", metavar="PROFILE",
                help="hypothesis profile and shape ranges: ci, nightly or exhaustive (default ci: derandomized, "
                     "small shapes)")
    g.addoption("--conformance-case", default=None, metavar="CASE_ID",
                help="replay exactly this case id (other kernels/tiers are deselected)")
    g.addoption("--conformance-report", default=None, metavar="PATH",
                help="write every check record (all xdist workers merged) to PATH as JSON")
    g.addoption("--conformance-seed", default=None, metavar="N",
                help="run seed (decimal or 0x-hex): the CI plan's boundary placements and data seeds, and the "
                     "suite's hypothesis draws (default: $CONFORMANCE_SEED, else ci: the commit under test; "
                     "nightly/exhaustive: random)")
    g.addoption("--conformance-timeout", default=None, metavar="S",
                help="per-call time limit in seconds; a hung kernel fails that case (error: timeout after S s) "
                     "and the run goes on; 0 = none (default by profile: ci 60, nightly 300, exhaustive 900)")


class _State:
    def __init__(self):
        self.records: list[dict] = []  # merged (controller / single process)
        self.attached = 0  # how many of this process's results.records() went into reports
        self.produced_by: dict[str, int] = {}  # xdist worker id -> records it made (running, then final count)
        self.crash_records = 0  # records the controller made for crashed workers
        self.crashed: list[dict] = []  # {"worker", "test"} per crashed worker
        self.last_write = 0.0
        self.ledger: list[dict] | None = None
        self.hang_dir: str | None = None
        self.seed: int = 0  # the run seed (conformance.cases.seeds); the same on every xdist worker
        self.seed_source: str = ""
        self.plan_ran: dict = {}  # (kernel, tier, target) -> row indices whose tests reported (controller)
        self.plan_failed: list[dict] = []  # failed plan / replayed cases: the replay file's new entries
        self.plan_passed: set = set()  # case ids that passed: dropped from the replay file
        self.family_cases: Counter = Counter()  # family -> cases judged (pass/fail/error), from records
        self.family_seconds: Counter = Counter()  # family -> seconds of the tests that judged them

    def produced(self) -> int:
        """Records made by every process: this one, each worker (its final or last reported count), crash records."""
        return self.attached + sum(self.produced_by.values()) + self.crash_records


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _usage(option: str, value, allowed: str) -> pytest.UsageError:
    """pytest's usage error (exit 4), one line: the option, the value and what is allowed."""
    from references.errors import InvalidInput

    return pytest.UsageError(" ".join(str(InvalidInput(option, value, allowed)).splitlines()))


def _check_options(config) -> None:
    """Validate every conformance option now, before any work; raise pytest.UsageError naming the first bad one."""
    from conformance.cases.ids import TIERS
    from conformance.core import registry
    from references.errors import InvalidInput

    opt = config.getoption
    if opt("--conformance-profile") not in PROFILES:
        raise _usage("--conformance-profile", opt("--conformance-profile"), f"one of {list(PROFILES)}")
    _timeout_limit(config)
    try:
        _target(config)
    except InvalidInput as e:
        raise _usage("--conformance-target", opt("--conformance-target"), e.allowed) from None
    text = opt("--conformance-kernels")
    if text is not None:
        names = [n.strip() for n in text.split(",") if n.strip()]
        known = sorted(k.name for k in registry.all_kernels())
        if not names or any(n not in known for n in names):
            raise _usage("--conformance-kernels", text, f"comma-separated names from {known}")
    _seed_option(config)
    tiers = [t.strip() for t in opt("--conformance-tiers").split(",") if t.strip()]
    if not tiers or any(t not in TIERS for t in tiers):
        raise _usage("--conformance-tiers", opt("--conformance-tiers"), f"a comma-separated subset of {list(TIERS)}")
    try:
        _replay_case(config)
    except InvalidInput as e:
        raise _usage("--conformance-case", opt("--conformance-case"), f"a valid case id ({e})") from None
    path = opt("--conformance-report")
    if path is not None and not _is_worker(config):
        from conformance.reports.files import writable_file

        try:
            writable_file("--conformance-report", path)
        except InvalidInput as e:
            raise _usage("--conformance-report", path, e.allowed) from None


def _seed_option(config):
    """--conformance-seed (else $CONFORMANCE_SEED) as an int, None when neither is set; a bad value is a usage
    error naming the option (or variable), the value and what is allowed."""
    from conformance.cases import seeds
    from references.errors import InvalidInput

    text = config.getoption("--conformance-seed")
    where = "--conformance-seed"
    if text is None:
        text, where = os.environ.get(seeds.ENV), seeds.ENV
        if text is None or not text.strip():
            return None
    try:
        return seeds.parse_seed(where, text)
    except InvalidInput as e:
        raise _usage(where, text, e.allowed) from None


def _resolve_seed(config) -> tuple[int, str]:
    """The run seed and its source: from the controller on an xdist worker (so every worker plans and draws
    alike, a random nightly seed included), else resolved here (conformance.cases.seeds)."""
    from conformance.cases import seeds

    if _is_worker(config) and "conformance_seed" in config.workerinput:
        return int(config.workerinput["conformance_seed"]), config.workerinput["conformance_seed_source"]
    explicit = config.getoption("--conformance-seed")
    seed, source = seeds.resolve_run_seed(explicit, config.getoption("--conformance-profile"), str(config.rootpath))
    return seed, source


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: hand the run seed to each worker (a random nightly seed must be the same everywhere)."""
    st = getattr(node.config, "_conformance", None)
    if st is not None:
        node.workerinput["conformance_seed"] = st.seed
        node.workerinput["conformance_seed_source"] = st.seed_source


def _seeded(config) -> bool:
    """Whether the suite's hypothesis draws take the run seed: always in the ci profile, elsewhere only when a
    seed was given (nightly and exhaustive stay random by default)."""
    st: _State = config._conformance
    return config.getoption("--conformance-profile") == "ci" or st.seed_source in ("--conformance-seed",
                                                                                   "CONFORMANCE_SEED")


def pytest_report_header(config):
    st = getattr(config, "_conformance", None)
    if st is None:
        return None
    from conformance.cases.seeds import describe

    return f"conformance: profile {config.getoption('--conformance-profile')}, {describe(st.seed, st.seed_source)}"


def _timeout_limit(config) -> float:
    """--conformance-timeout in seconds (0: none), else the profile's default (timeout.PROFILE_LIMITS)."""
    import math

    from conformance.checks import timeout

    text = config.getoption("--conformance-timeout")
    if text is None:
        return timeout.PROFILE_LIMITS.get(config.getoption("--conformance-profile"), 60.0)
    try:
        limit = float(text)
    except ValueError:
        limit = float("nan")
    if not (math.isfinite(limit) and limit >= 0):
        raise _usage("--conformance-timeout", text, "seconds, a finite number >= 0 (0: no limit)")
    return limit


def pytest_configure(config):
    from conformance.cases import profiles
    from conformance.checks import timeout
    from conformance.core import registry, workers

    # before anything touches CUDA (loading kernels probes it): one GPU per xdist worker on multi-GPU hosts
    config._conformance_gpu_pin = workers.pin_worker()
    try:
        registry.load_all(config.getoption("--conformance-plugin"),
                          entry_points=False if config.getoption("--conformance-no-entry-points") else None)
    except registry.RegistryError as e:
        raise pytest.UsageError("--conformance-plugin: " + " ".join(str(e).splitlines())) from None
    # the suite's markers, registered here so the shipped suite runs from an installed wheel (no pyproject.toml)
    for line in ("conformance_family(name): the kernel family a suite test parametrizes over",
                 "gpu: needs a CUDA/ROCm device (skipped with a reason elsewhere)",
                 "interop: checks against a third-party library that writes a format",
                 "slow: excluded from the ci profile"):
        config.addinivalue_line("markers", line)
    _check_options(config)
    profiles.load_profile(config.getoption("--conformance-profile"))
    config._conformance = st = _State()
    st.seed, st.seed_source = _resolve_seed(config)
    timeout.configure(_timeout_limit(config), propagate=True)
    if _is_worker(config):
        timeout.on_hang(lambda info, seconds: _worker_hang(config, info, seconds), key="pytest")
    else:
        st.hang_dir = tempfile.mkdtemp(prefix="conformance-hang-")
        os.environ[_HANG_DIR_ENV] = st.hang_dir  # xdist workers start after this and inherit it
        timeout.on_hang(lambda info, seconds: _local_hang(config, info, seconds), key="pytest")


def pytest_unconfigure(config):
    from conformance.checks import timeout

    timeout.configure(None, propagate=False)  # in-process callers after this run get no limit
    timeout.on_hang(None, key="pytest")
    st = getattr(config, "_conformance", None)
    if st is not None and st.hang_dir and not _is_worker(config):
        import shutil

        shutil.rmtree(st.hang_dir, ignore_errors=True)
        if os.environ.get(_HANG_DIR_ENV) == st.hang_dir:
            del os.environ[_HANG_DIR_ENV]


def _hang_record(info: dict, seconds: float) -> dict:
    """The record of a case the watchdog ended (same schema as conformance.core.results.record)."""
    from conformance.checks import timeout

    return {"kernel": info.get("kernel") or "?", "check": info.get("check") or "?", "outcome": "error",
            "run_mode": info.get("run_mode"), "case_id": info.get("case_id"), "metrics": {},
            "detail": f"{timeout.detail(seconds)} (not interruptible: the process was ended)",
            "replay": info.get("replay", ""), "family": info.get("family"), "target": info.get("target")}


def _worker_hang(config, info: dict, seconds: float) -> None:
    """Watchdog hook in an xdist worker: leave the hung case for the controller, which records the crash."""
    d = os.environ.get(_HANG_DIR_ENV)
    if d:
        wid = config.workerinput.get("workerid", "gw?")
        from conformance.reports.files import atomic_write_text

        atomic_write_text(os.path.join(d, f"{wid}.json"), json.dumps(_hang_record(info, seconds), default=str))


def _local_hang(config, info: dict, seconds: float) -> None:
    """Watchdog hook in a single-process run: record the hung case and write the report before the process ends."""
    st: _State = config._conformance
    st.records.append(_hang_record(info, seconds))
    st.crash_records += 1
    _write_if_asked(config, complete=False, force=True)


def _target(config):
    from conformance.core.targets import parse_target

    return parse_target(config.getoption("--conformance-target"))


def _tiers(config) -> list[str]:
    from conformance.cases.ids import TIERS
    from references.errors import require

    tiers = [t.strip() for t in config.getoption("--conformance-tiers").split(",") if t.strip()]
    for t in tiers:
        require(t in TIERS, "--conformance-tiers", t, f"a comma-separated subset of {list(TIERS)}")
    return sorted(set(tiers), key=TIERS.index)


def _replay_case(config):
    from conformance.cases.ids import parse_case_id

    text = config.getoption("--conformance-case")
    return None if text is None else parse_case_id(text)


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
        metafunc.parametrize("conformance_plan_row", rows, ids=[r.id for r in rows])


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
                replayed = plan.replay_case_ids(name, tier, t)
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


@pytest.fixture(scope="session")
def conformance_target(request):
    """The Target under test (--conformance-target, default auto: this machine)."""
    return _target(request.config)


@pytest.fixture(scope="session")
def conformance_profile(request):
    """The active profiles.Profile (hypothesis settings already loaded)."""
    from conformance.cases.profiles import get_profile

    return get_profile(request.config.getoption("--conformance-profile"))


@pytest.fixture(scope="session")
def conformance_case(request):
    """The Case given by --conformance-case, or None."""
    return _replay_case(request.config)


@pytest.fixture
def conformance_kernel(conformance_kernel_name, conformance_target):
    """The registry Kernel for this parametrization."""
    from conformance.core import registry

    return registry.get_kernel(conformance_kernel_name)


# ---- records: attach to reports (workers and single process), merge on the controller ----------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    from conformance.checks import timeout
    from conformance.core import results

    st: _State = item.config._conformance
    recs = results.records()
    new = recs[st.attached:]
    st.attached = len(recs)
    if new:
        setattr(rep, _RECORDS_ATTR, new)
    setattr(rep, _PRODUCED_KEY, st.attached)  # this process's running count: the controller's loss check
    if call.excinfo is not None and call.excinfo.errisinstance(timeout.CaseTimeout):
        e = call.excinfo.value  # one line, not a traceback: the verdict (case id, replay) is in the records
        rep.longrepr = e.verdict.line() if e.verdict is not None else f"ERROR -- {e}"


def pytest_runtest_logreport(report):
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    recs = getattr(report, _RECORDS_ATTR, None)
    if recs:
        st.records.extend(recs)
    if _CONFIG_HOLDER and not _is_worker(_CONFIG_HOLDER[0]):
        _note_plan(st, report)
        _note_throughput(st, report, recs or [])
    node = getattr(report, "node", None)  # xdist controller: the worker this report came from
    count = getattr(report, _PRODUCED_KEY, None)
    if node is not None and isinstance(count, int):
        wid = _worker_id(node)
        st.produced_by[wid] = max(st.produced_by.get(wid, 0), count)
    if _CONFIG_HOLDER:
        _write_if_asked(_CONFIG_HOLDER[0], complete=False)


_STATE_HOLDER: list[_State] = []
_CONFIG_HOLDER: list = []
_PLAN_PROPERTY = "conformance_plan"  # user property of a plan test (xdist carries it to the controller)


def _note_plan(st: _State, report) -> None:
    """Controller: a plan test's outcome (its call, or a setup that did not pass): which rows of which plan ran,
    and the case ids that passed or failed (the replay file's update at session end)."""
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    for name, value in getattr(report, "user_properties", ()):
        if name != _PLAN_PROPERTY or not isinstance(value, dict):
            continue
        if value.get("role") != "case":  # a --conformance-case replay says nothing about the plan's coverage
            st.plan_ran.setdefault((value["kernel"], value["tier"], value["target"]), set()).add(value.get("index"))
        cid = value.get("case_id")
        if cid and report.failed:
            st.plan_failed.append({k: value[k] for k in ("case_id", "kernel", "tier", "target")} | {"seed": st.seed})
        elif cid and report.passed:
            st.plan_passed.add(cid)


def _note_throughput(st: _State, report, recs: list[dict]) -> None:
    """Controller: cases judged (pass/fail/error records of a tier check) and the seconds of the test that judged
    them, per family; a test's seconds are shared among its records' families."""
    from conformance.cases.ids import TIERS

    if report.when != "call":
        return
    judged = Counter(r.get("family") for r in recs
                     if r.get("check") in TIERS and r.get("outcome") in ("pass", "fail", "error") and r.get("family"))
    total = sum(judged.values())
    for fam, n in judged.items():
        st.family_cases[fam] += n
        st.family_seconds[fam] += report.duration * n / total


def _worker_id(node) -> str:
    gw = getattr(node, "gateway", None)
    return getattr(gw, "id", None) or getattr(node, "workerinput", {}).get("workerid", "gw?")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _STATE_HOLDER[:] = [session.config._conformance]
    _CONFIG_HOLDER[:] = [session.config]


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    st: _State = config._conformance
    from conformance.core import results

    leftovers = results.records()[st.attached:]  # recorded outside any test (e.g. session fixtures)
    st.attached += len(leftovers)
    if _is_worker(config):
        config.workeroutput[_RECORDS_ATTR] = json.dumps(leftovers)
        config.workeroutput[_PRODUCED_KEY] = st.attached  # the controller checks its merge against this count
        return
    st.records.extend(leftovers)
    if st.plan_failed or st.plan_passed:  # the controller only: failed plan cases run first next time
        from conformance.cases.plan import remember_failures

        remember_failures(st.plan_passed, st.plan_failed)
    _write_if_asked(config, complete=True, force=True)


def pytest_testnodedown(node, error):
    """xdist controller: a worker's records made outside tests and its final count arrive with its workeroutput
    (a crashed worker has none: its last reported running count stands)."""
    out = getattr(node, "workeroutput", None) or {}
    extra = out.get(_RECORDS_ATTR)
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    if extra:
        st.records.extend(json.loads(extra))
    if _PRODUCED_KEY in out:
        st.produced_by[_worker_id(node)] = out[_PRODUCED_KEY]


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """xdist controller: a worker died while running `crashitem`. Its kernel gets an `error` record (detail
    `worker crashed`, or the timeout and case id its watchdog left), attached to the failed report so it is merged
    and counted like any record."""
    if not _STATE_HOLDER:
        return
    st = _STATE_HOLDER[0]
    wid = _worker_id(getattr(report, "node", None))
    rec = None
    if st.hang_dir:
        path = os.path.join(st.hang_dir, f"{wid}.json")
        try:
            with open(path) as f:
                rec = json.load(f)
            os.unlink(path)
        except (OSError, ValueError):
            rec = None
    if rec is None:
        kernel, check = _item_kernel_check(crashitem)
        rec = {"kernel": kernel, "check": check, "outcome": "error", "run_mode": None, "case_id": None,
               "metrics": {}, "detail": f"worker crashed (xdist worker {wid} died while running {crashitem})",
               "replay": ""}
    rec["test"] = crashitem
    st.crash_records += 1
    st.crashed.append({"worker": wid, "test": crashitem, "detail": rec["detail"]})
    setattr(report, _RECORDS_ATTR, [rec])


def _item_kernel_check(nodeid: str) -> tuple[str, str]:
    """(kernel, check) a test id names: a registered kernel among its parameters (else '?'), the tier among them,
    else the test function's name without `test_`."""
    from conformance.cases.ids import TIERS
    from conformance.core import registry

    names = {k.name for k in registry.all_kernels()}
    params = nodeid[nodeid.index("[") + 1:nodeid.rindex("]")].split("-") if "[" in nodeid else []
    kernel = next((p for p in params if p in names), "?")
    tier = next((p for p in params if p in TIERS), None)
    return kernel, tier or nodeid.split("::")[-1].split("[")[0].removeprefix("test_")


def _write_if_asked(config, *, complete: bool, force: bool = False) -> None:
    """Write --conformance-report (if given) atomically; incremental writes at most every REPORT_INTERVAL_S."""
    path = config.getoption("--conformance-report")
    st: _State = getattr(config, "_conformance", None)
    if not path or st is None or _is_worker(config):
        return
    now = time.monotonic()
    if not force and now - st.last_write < REPORT_INTERVAL_S:
        return
    st.last_write = now
    write_report(path, st.records, config, produced=st.produced(), complete=complete, crashed=st.crashed)


def write_report(path: str, records: list[dict], config, produced: int | None = None, *, complete: bool = True,
                 crashed=()) -> None:
    """Atomically write {"target", "profile", "selection", "records", "produced", "complete", "crashed_workers"}
    JSON (temp file, then rename). `produced`: how many records the processes made (each worker counts its own,
    crash records included); a sound merge has len(records) == produced. `complete` is False for the incremental
    writes during the run."""
    from conformance.reports.files import atomic_write_text

    st = getattr(config, "_conformance", None)
    doc = {"target": str(_target(config)), "profile": config.getoption("--conformance-profile"),
           "seed": st.seed if st else None, "seed_source": st.seed_source if st else None,
           "selection": ledger(config), "records": records, "produced": produced, "complete": complete,
           "crashed_workers": list(crashed), "plan": plan_summary(config) if complete else [],
           "cases_per_second": throughput(config)}
    atomic_write_text(path, json.dumps(doc, indent=1, default=str), "--conformance-report")


# ---- terminal summary -----------------------------------------------------------------------------------

def plan_summary(config) -> list[dict]:
    """Per (kernel, tier, target) whose plan tests ran: conformance.cases.plan.coverage_summary (accepted classes,
    run, pair-covered, rows, per-class details) plus how many of its rows reported ("rows_ran")."""
    from conformance.cases.plan import coverage_summary
    from conformance.cases.profiles import get_profile
    from conformance.core import registry

    st = getattr(config, "_conformance", None)
    if st is None:
        return []
    profile = get_profile(config.getoption("--conformance-profile"))
    out = []
    for (kernel, tier, target), indices in sorted(st.plan_ran.items()):
        try:
            k = registry.get_kernel(kernel)
        except Exception:  # noqa: BLE001 - a kernel gone since collection: nothing to summarize
            continue
        s = coverage_summary(k, target, tier, seed=st.seed, profile=profile)
        out.append(dict(s, rows_ran=len([i for i in indices if i is not None])))
    return out


def throughput(config) -> dict:
    """Per family: cases judged, the seconds of the tests that judged them, and cases per second."""
    st = getattr(config, "_conformance", None)
    if st is None:
        return {}
    return {fam: {"cases": n, "seconds": round(st.family_seconds[fam], 2),
                  "cases_per_second": round(n / st.family_seconds[fam], 2) if st.family_seconds[fam] else None}
            for fam, n in sorted(st.family_cases.items())}



def ledger(config) -> list[dict]:
    """Per representative config class (each family's `ledger_configs`): the kernel selected on the target and
    every refusal reason."""
    from conformance.core import registry
    from conformance.families import all_families

    st = getattr(config, "_conformance", None)
    if st is not None and st.ledger is not None:  # the same for the whole run: computed once
        return st.ledger
    t = _target(config)
    out = []
    for fam in all_families():
        for cfg in fam.ledger_configs():
            sel = registry.select(cfg, t)  # gates that raise are refusals (registry containment), never a crash
            out.append({"family": fam.name, "config": cfg.to_dict(), **sel.to_dict()})
    if st is not None:
        st.ledger = out
    return out


def _class_label(entry: dict) -> str:
    from conformance.families import get_family

    fam = get_family(entry["family"])
    return fam.ledger_label(fam.config_type(**entry["config"]))


REAL_MODES = ("device", "interpreter")  # run modes that executed the kernel's real code


def run_counts(last: dict) -> dict:
    """Per kernel, from the last verdict of each (kernel, check, case): cases that ran the real code (device or
    interpreter), ran the kernel's model, or ran nothing (skip): {kernel: Counter(real=, model=, skipped=)}."""
    out = defaultdict(Counter)
    for (kern, _check, _case), r in last.items():
        if r["outcome"] == "skip" or not r.get("run_mode"):
            out[kern]["skipped"] += 1
        elif r["run_mode"] in REAL_MODES:
            out[kern]["real"] += 1
            out[kern][r["run_mode"]] += 1
        else:
            out[kern]["model"] += 1
    return out


def _skip_reasons(tr, kernel: str, last: dict) -> list[str]:
    """Distinct skip reasons for `kernel`: its skip records and its skipped tests (parametrized by its name)."""
    reasons = [r.get("detail", "") for (k, _c, _i), r in last.items() if k == kernel and r["outcome"] == "skip"]
    for rep in tr.stats.get("skipped", []):
        if f"[{kernel}" in rep.nodeid or f"-{kernel}-" in rep.nodeid or f"-{kernel}]" in rep.nodeid:
            lr = rep.longrepr
            reasons.append(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr))
    return sorted({" ".join(r.split())[:300] for r in reasons if r})


def _write_run_modes(tr, config, last: dict) -> None:
    """How each kernel ran: cases that ran real code (device/interpreter), its model, or nothing. A kernel named by
    --conformance-kernels whose every case ran nothing gets a loud WARNING line with the skip reasons (the session's
    exit status is left as pytest set it: a gate that refuses a target is a legitimate answer, but a run that
    tested nothing of a kernel someone asked for must not read as a pass)."""
    counts = run_counts(last)
    tr.write_sep("-", "run modes per kernel (cases: real code = device/interpreter, model, nothing = skipped)")
    for kern in sorted(counts):
        c = counts[kern]
        real = ", ".join(f"{m} {c[m]}" for m in REAL_MODES if c[m])
        tr.write_line(f"{kern}: real code {c['real']}" + (f" ({real})" if real else "")
                      + f", model {c['model']}, nothing (skipped) {c['skipped']}")
    opt = config.getoption("--conformance-kernels")
    requested = [n.strip() for n in opt.split(",") if n.strip()] if opt else []
    for kern in requested:
        c = counts.get(kern, Counter())
        if c["real"] or c["model"]:
            continue
        reasons = _skip_reasons(tr, kern, last)
        tr.write_line(f"WARNING: kernel {kern} was requested (--conformance-kernels) but NOTHING of it ran: every "
                      f"case was skipped; reasons: {reasons or ['no case was drawn or recorded']}", red=True, bold=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_worker(config):
        return
    st: _State = config._conformance
    tr = terminalreporter
    recs = st.records
    if not recs:
        if config.getoption("--conformance-kernels"):  # requested kernels that recorded nothing still say so
            _write_run_modes(tr, config, {})
        return
    from conformance.cases.seeds import describe

    tr.write_sep("=", f"conformance summary (target {_target(config)}, profile "
                      f"{config.getoption('--conformance-profile')}, {describe(st.seed, st.seed_source)})")
    # last verdict per (kernel, check, case): hypothesis's shrink replays do not inflate counts
    last = {}
    for r in recs:
        last[(r["kernel"], r["check"], r.get("case_id") or id(r))] = r
    table = defaultdict(Counter)
    modes = defaultdict(set)
    for (kern, check, _), r in sorted(last.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
        table[(kern, check)][r["outcome"]] += 1
        if r.get("run_mode"):
            modes[(kern, check)].add(r["run_mode"])
    w = max(len(k) for k, _ in table) + 2
    tr.write_line(f"{'kernel':<{w}}{'check':<14}{'run_mode':<22}{'pass':>6}{'fail':>6}{'error':>6}{'skip':>6}")
    for (kern, check), c in sorted(table.items()):
        tr.write_line(f"{kern:<{w}}{check:<14}{','.join(sorted(modes[(kern, check)])) or '-':<22}"
                      f"{c['pass']:>6}{c['fail']:>6}{c['error']:>6}{c['skip']:>6}")
    _write_run_modes(tr, config, last)
    from conformance.cases.plan import summary_line
    from conformance.reports.report import throughput_lines

    plans = plan_summary(config)
    if plans:
        tr.write_sep("-", "CI plan coverage per kernel and tier (classes accepted / run / pair-covered; "
                          "details in --conformance-report)")
        for s in plans:
            tr.write_line(summary_line(s))
    tp = throughput(config)
    if tp:
        tr.write_sep("-", "cases judged per second, per family")
        for line in throughput_lines(tp):
            tr.write_line(line)
    tr.write_sep("-", "selection ledger")
    for e in ledger(config):
        tr.write_line(f"{_class_label(e)}: selected {e['selected'] or 'NOTHING'}")
        for r in e["refused"]:
            tr.write_line(f"    {r['kernel']} refused: {r['reason']}")
    bad = [r for r in last.values() if r["outcome"] in ("fail", "error")]
    if bad:
        tr.write_sep("-", f"{len(bad)} failing case(s): replay lines")
        for r in bad:
            if r.get("case_id"):
                tr.write_line(f"{r['outcome'].upper()} {r['case_id']} [{r.get('run_mode')}]  {r.get('replay', '')}")
            else:  # a worker crash outside any case: no id to replay, so say what died
                tr.write_line(f"{r['outcome'].upper()} {r['kernel']}: {r.get('detail', '')}")
