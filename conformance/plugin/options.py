"""Options: the --conformance-* command-line options, their validation at configuration (one-line usage errors,
exit 4), and the values they resolve to (target, tiers, replayed case, time limit, run seed, shard)."""
from __future__ import annotations

import os

import pytest

PROFILES = ("ci", "nightly", "exhaustive")
PREWARM_MODES = ("auto", "off")


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
    g.addoption("--conformance-compile-targets", default=None, metavar="T,T",
                help="run the compile lane as tests: every selected kernel's specializations compiled for these GPU "
                     "targets by their own compilers, e.g. gfx1100,gfx1151,gfx1201,gfx942,gfx950,sm80,sm90,sm100,"
                     "sm120 (default: off; python -m conformance compile is the same lane as a command)")
    g.addoption("--conformance-prewarm", default="auto", metavar="MODE",
                help="auto (default): with xdist workers on a GPU, the workers first compile the Triton programs "
                     "the run's cases launch, each program once, split between them (the cases then find them in "
                     "Triton's cache); off: each case compiles what it launches")
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
    g.addoption("--conformance-shard", default=None, metavar="I/N",
                help="run only shard I of N (1-based, 1 <= I <= N): test items (the CI plan's cases among them) are "
                     "split by a hash of their node id, the same for any worker count; merge the shards' "
                     "--conformance-report files with `python -m conformance merge-reports`")

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
    from conformance.checks import guard

    try:
        guard.crash_limit()  # read during the run: a bad value is a usage error now, not a fallback later
    except InvalidInput as e:
        raise _usage(e.field, e.value, e.allowed) from None
    if opt("--conformance-prewarm") not in PREWARM_MODES:
        raise _usage("--conformance-prewarm", opt("--conformance-prewarm"), f"one of {list(PREWARM_MODES)}")
    if opt("--conformance-profile") not in PROFILES:
        raise _usage("--conformance-profile", opt("--conformance-profile"), f"one of {list(PROFILES)}")
    _timeout_limit(config)
    try:
        if str(opt("--conformance-target")).strip().lower() != "auto":  # auto: this machine's, detected when asked
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
    _shard(config)
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



SHARD_FORM = "I/N with whole numbers 1 <= I <= N (1-based: 1/3, 2/3 and 3/3 split a run into 3 jobs)"


def _shard(config) -> tuple[int, int] | None:
    """--conformance-shard as (I, N), 1-based; None when not given. A bad value is a usage error naming the option,
    the value and the allowed form."""
    import re

    text = config.getoption("--conformance-shard")
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise _usage("--conformance-shard", text, SHARD_FORM)
    return int(m.group(1)), int(m.group(2))


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

