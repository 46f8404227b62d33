"""The conformance pytest plugin: options, kernel loading, parametrization, fixtures, summary and reports.

Options: --conformance-kernels, --conformance-target, --conformance-tiers, --conformance-profile,
--conformance-case, --conformance-report, --conformance-plugin; --conformance-kernels and --conformance-case
also deselect tests parametrized by another kernel (`kernel` / `kernel_name` parameters). Tests ask for the fixtures
`conformance_kernel_name` (parametrized, sorted, over the kernels of the family named by the
`conformance_family("...")` marker), `conformance_tier` (parametrized over --conformance-tiers),
`conformance_target`, `conformance_profile` and `conformance_case` (the --conformance-case Case or None).

Records (conformance.results) reach the controller with each test report: the plugin attaches the
records a test produced to its TestReport (pytest-xdist serializes report attributes), so a crashed
worker loses at most its running test's records, and the controller merges them in arrival order.
Each worker also reports how many records it made; the JSON report's "produced" is their sum, so a record
lost between a worker and the merged report shows as len(records) < produced.
"""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import pytest

_RECORDS_ATTR = "conformance_records"
_PRODUCED_KEY = "conformance_produced"


def pytest_addoption(parser):
    g = parser.getgroup("conformance")
    g.addoption("--conformance-plugin", action="append", default=[], metavar="MODULE",
                help="import MODULE to register external kernels (repeatable)")
    g.addoption("--conformance-kernels", default=None, metavar="NAMES",
                help="comma-separated kernel names to test (default: every registered kernel)")
    g.addoption("--conformance-target", default="auto", metavar="TARGET",
                help="target to test for: auto (this machine), cpu, sm90, gfx1100, ... (default auto)")
    g.addoption("--conformance-tiers", default="exact,statistical", metavar="TIERS",
                help="comma-separated numerical tiers: exact, statistical (default both)")
    g.addoption("--conformance-profile", default="ci", choices=("ci", "nightly", "exhaustive"),
                help="hypothesis profile and shape ranges (default ci: derandomized, small shapes)")
    g.addoption("--conformance-case", default=None, metavar="CASE_ID",
                help="replay exactly this case id (other kernels/tiers are deselected)")
    g.addoption("--conformance-report", default=None, metavar="PATH",
                help="write every check record (all xdist workers merged) to PATH as JSON")


class _State:
    def __init__(self):
        self.records: list[dict] = []  # merged (controller / single process)
        self.attached = 0  # how many of this process's results.records() went into reports
        self.produced = 0  # records made by every process (controller + each finished worker): merge must keep all


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    from conformance.cases import profiles
    from conformance.core import registry, workers

    # before anything touches CUDA (loading kernels probes it): one GPU per xdist worker on multi-GPU hosts
    config._conformance_gpu_pin = workers.pin_worker()
    registry.load_all(config.getoption("--conformance-plugin"))
    # the suite's markers, registered here so the shipped suite runs from an installed wheel (no pyproject.toml)
    for line in ("conformance_family(name): the kernel family a suite test parametrizes over",
                 "gpu: needs a CUDA/ROCm device (skipped with a reason elsewhere)",
                 "interop: checks against a third-party library that writes a format",
                 "slow: excluded from the ci profile"):
        config.addinivalue_line("markers", line)
    profiles.load_profile(config.getoption("--conformance-profile"))
    config._conformance = _State()


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


KERNEL_PARAMS = ("kernel", "kernel_name")  # parameter names that carry one registered kernel (object or name)


def pytest_collection_modifyitems(config, items):
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
    from conformance.core import results

    st: _State = item.config._conformance
    recs = results.records()
    new = recs[st.attached:]
    st.attached = len(recs)
    if new:
        setattr(rep, _RECORDS_ATTR, new)


def pytest_runtest_logreport(report):
    recs = getattr(report, _RECORDS_ATTR, None)
    if recs and _STATE_HOLDER:
        _STATE_HOLDER[0].records.extend(recs)


_STATE_HOLDER: list[_State] = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _STATE_HOLDER[:] = [session.config._conformance]


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
    st.produced += st.attached
    path = config.getoption("--conformance-report")
    if path:
        write_report(path, st.records, config, produced=st.produced)


def pytest_testnodedown(node, error):
    """xdist controller: a worker's records made outside tests arrive with its workeroutput."""
    out = getattr(node, "workeroutput", {})
    extra = out.get(_RECORDS_ATTR)
    if extra and _STATE_HOLDER:
        _STATE_HOLDER[0].records.extend(json.loads(extra))
    if _STATE_HOLDER:
        _STATE_HOLDER[0].produced += out.get(_PRODUCED_KEY, 0)


def write_report(path: str, records: list[dict], config, produced: int | None = None) -> None:
    """Atomically write {"target", "profile", "selection", "records", "produced"} JSON (temp file, then rename).
    `produced`: how many records the processes made (each worker counts its own); a sound merge has
    len(records) == produced (fewer only when a worker crashed before reporting its count)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    doc = {"target": str(_target(config)), "profile": config.getoption("--conformance-profile"),
           "selection": ledger(config), "records": records, "produced": produced}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, path)


# ---- terminal summary -----------------------------------------------------------------------------------

def ledger(config) -> list[dict]:
    """Per representative config class (each family's `ledger_configs`): the kernel selected on the target and
    every refusal reason."""
    from conformance.core import registry
    from conformance.families import all_families

    t = _target(config)
    out = []
    for fam in all_families():
        for cfg in fam.ledger_configs():
            sel = registry.select(cfg, t)
            out.append({"family": fam.name, "config": cfg.to_dict(), **sel.to_dict()})
    return out


def _class_label(entry: dict) -> str:
    from conformance.families import get_family

    fam = get_family(entry["family"])
    return fam.ledger_label(fam.config_type(**entry["config"]))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_worker(config):
        return
    st: _State = config._conformance
    tr = terminalreporter
    recs = st.records
    if not recs:
        return
    tr.write_sep("=", f"conformance summary (target {_target(config)}, profile "
                      f"{config.getoption('--conformance-profile')})")
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
    tr.write_sep("-", "selection ledger")
    for e in ledger(config):
        tr.write_line(f"{_class_label(e)}: selected {e['selected'] or 'NOTHING'}")
        for r in e["refused"]:
            tr.write_line(f"    {r['kernel']} refused: {r['reason']}")
    bad = [r for r in last.values() if r["outcome"] in ("fail", "error")]
    if bad:
        tr.write_sep("-", f"{len(bad)} failing case(s): replay lines")
        for r in bad:
            tr.write_line(f"{r['outcome'].upper()} {r['case_id']} [{r.get('run_mode')}]  {r.get('replay', '')}")
