"""One bisect step: replay a case id with a scratch site first on the path, and read what `repro` said.

`run_subprocess` starts a fresh interpreter (`python -m conformance.bisect.replay`, below) with the site first on
PYTHONPATH, then the caller's PYTHONPATH (where the package's own dependencies live, e.g. .vllm/site), then this
project; it runs `python -m conformance [--plugin M] repro ID [repro options]` there and writes the exit code and
the kernel's source files in the site to a small JSON file. A release's modules (and torch ops it registers) then
never meet another release's. `run_in_process` does the same in this interpreter for pure-Python packages: the
site's top-level modules and the plugin modules are dropped from sys.modules before and after, and the plugin's
kernels unregistered (tests of the bisect use it; a package that registers torch ops or loads compiled code needs
the fresh process).

The step's answer (`answer`): repro's 0 is a pass and 1 (or a death by signal) a failure; 125 and every other
code (2: the plugin did not import with this release; 70: our adapter broke on it) say the release cannot judge
the case, a skip, as `git bisect run` reads 125.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from conformance.bisect import REPRO_FAIL, REPRO_PASS

ROOT = Path(__file__).resolve().parents[2]  # the project: importable in the child after the site and PYTHONPATH
VERDICT_WORDS = ("PASS", "FAIL", "ERROR", "SKIP")
STEP_TIMEOUT_S = 3600


@dataclass
class StepVerdict:
    """What one replay said: repro's exit code, its verdict line and metrics line (or the last line it printed),
    the kernel's source files found in the site (site-relative), and the wall time."""

    exit_code: int
    line: str
    metrics: str = ""
    files: list = field(default_factory=list)
    wall_s: float = 0.0
    output: str = ""
    replays: int = 1  # how many replays this verdict combines (--repeat)
    failed: int = 0  # how many of them failed (set by combine())

    @property
    def passed(self) -> bool | None:
        """True (pass), False (fail), None (cannot judge: skip)."""
        if self.exit_code == REPRO_PASS:
            return True
        if self.exit_code == REPRO_FAIL or self.exit_code < 0:
            return False
        return None


def combine(verdicts: list[StepVerdict]) -> StepVerdict:
    """One step's verdict from several replays of it: a failure if any replay failed (its first failing replay's
    exit code, lines and output), a pass if every replay passed, else a skip (the first replay that could not
    judge). `replays` and `failed` count them; the files are every replay's, the wall time their sum."""
    fails = [v for v in verdicts if v.passed is False]
    if fails:
        pick = fails[0]
    elif all(v.passed for v in verdicts):
        pick = verdicts[0]
    else:
        pick = next(v for v in verdicts if v.passed is None)
    files = sorted({f for v in verdicts for f in v.files})
    return StepVerdict(pick.exit_code, pick.line, pick.metrics, files, round(sum(v.wall_s for v in verdicts), 2),
                       pick.output, replays=len(verdicts), failed=len(fails))


def parse_output(text: str) -> tuple[str, str]:
    """(verdict line, metrics line) of repro's output; the verdict line is the last line printed when repro
    printed none (an import error, an internal error)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    verdict = next((ln for ln in lines if ln.split(" ", 1)[0] in VERDICT_WORDS), None)
    metrics = next((ln[len("metrics: "):] for ln in lines if ln.startswith("metrics: ")), "")
    if verdict is None:
        verdict = next((ln for ln in reversed(lines) if not ln.startswith("repro: running")), "(no output)")
    return verdict[:400], metrics[:400]


def repro_argv(case_id: str, plugins, repro_args) -> list[str]:
    return [a for p in plugins for a in ("--plugin", p)] + ["repro", case_id, *repro_args]


def run_subprocess(case_id: str, site: Path, plugins=(), repro_args=(), timeout: float = STEP_TIMEOUT_S,
                   python: str = sys.executable) -> StepVerdict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", ""), str(ROOT)) if p)
    with tempfile.TemporaryDirectory(prefix="bisect-step-") as tmp:
        report = Path(tmp) / "step.json"
        cmd = [python, "-m", "conformance.bisect.replay", "--site", str(site), "--report", str(report), "--",
               *repro_argv(case_id, plugins, repro_args)]
        start = time.perf_counter()
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            code, text = out.returncode, out.stdout + out.stderr
        except subprocess.TimeoutExpired as e:
            code = 124
            text = f"{(e.stdout or b'').decode(errors='replace') if isinstance(e.stdout, bytes) else e.stdout or ''}" \
                   f"\nstep timed out after {timeout:.0f} s"
        wall = time.perf_counter() - start
        files = json.loads(report.read_text()).get("files", []) if report.is_file() else []
    line, metrics = parse_output(text)
    return StepVerdict(code, line, metrics, files, round(wall, 2), text[-4000:])


def _drop_modules(names) -> None:
    for mod in list(sys.modules):
        if any(mod == n or mod.startswith(n + ".") for n in names):
            del sys.modules[mod]


def run_in_process(case_id: str, site: Path, plugins=(), repro_args=()) -> StepVerdict:
    """The same step in this interpreter (pure-Python packages only: see the module docstring)."""
    from conformance import cli
    from conformance.bisect.sites import top_level
    from conformance.core import registry, results

    owned = top_level(site) + list(plugins)
    start = time.perf_counter()
    _drop_modules(owned)
    for p in plugins:
        registry.forget_plugin(p)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), results.isolated():
            code = cli.main(repro_argv(case_id, plugins, repro_args))
        files = kernel_files(case_id, site)
    finally:
        sys.path.remove(str(site))
        for p in plugins:
            registry.forget_plugin(p)
        _drop_modules(owned)
        importlib.invalidate_caches()
    text = buf.getvalue()
    line, metrics = parse_output(text)
    return StepVerdict(code, line, metrics, files, round(time.perf_counter() - start, 2), text[-4000:])


def kernel_files(case_id: str, site: Path) -> list[str]:
    """The site-relative source files of the modules the case's registered kernel reaches: its class and base
    classes, and the classes, functions and modules held in its attributes (the vLLM adapter's `vllm_cls`, a
    plugin's wrapped function), each with the modules its own module imports from the same package. Empty when the
    kernel is not registered."""
    from conformance.cases.check_ids import parse_id
    from conformance.core import registry

    try:
        kernel = registry.get_kernel(parse_id(case_id).kernel)
    except Exception:  # noqa: BLE001 - nothing registered: no files to name
        return []
    site = site.resolve()
    objs = [*type(kernel).__mro__, *vars(kernel).values()]
    mods = set()
    for o in objs:
        if isinstance(o, types.ModuleType):
            mods.add(o)
        elif isinstance(o, (type, types.FunctionType)) or callable(o):
            m = inspect.getmodule(o)
            if m is not None:
                mods.add(m)
    files = set()
    for m in list(mods):
        f = _in_site(m, site)
        if f is None:
            continue
        files.add(f)
        top = m.__name__.split(".")[0]
        for v in vars(m).values():  # what the kernel's module imports from its own package: the kernels it calls
            dep = v if isinstance(v, types.ModuleType) else inspect.getmodule(v) if callable(v) else None
            if dep is not None and dep.__name__.split(".")[0] == top:
                g = _in_site(dep, site)
                if g is not None and not g.endswith("__init__.py"):
                    files.add(g)
    return sorted(files)


def _in_site(module, site: Path) -> str | None:
    f = getattr(module, "__file__", None)
    if not f:
        return None
    try:
        return Path(f).resolve().relative_to(site).as_posix()
    except ValueError:
        return None


def main(argv=None) -> int:
    """Child side: `python -m conformance.bisect.replay --site S --report R -- [--plugin M] repro ID [...]`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m conformance.bisect.replay")
    p.add_argument("--site", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    site = Path(args.site)
    if sys.path[:1] != [str(site)]:
        sys.path.insert(0, str(site))
    from conformance import cli

    code = cli.main(rest)
    case_id = rest[rest.index("repro") + 1] if "repro" in rest else ""
    Path(args.report).write_text(json.dumps({"exit": code, "files": kernel_files(case_id, site) if case_id else []}))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
