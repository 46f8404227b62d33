"""Kernel CI on a GPU machine, measured: the README's test command, then the shipped suite from an empty Triton
cache and again with that cache, each timed and counted, into one JSON (`bash benchmarks/run_gpu.sh ci` writes
$OUT/gpu_ci.json; recorded as benchmarks/results/h200/gpu_ci.json).

    python -m benchmarks.gpu_ci OUT_JSON --scratch DIR [--logs DIR] [--runs A,B] [--compile-bytecode]

Runs (name, command, time limit; ci profile, the plugin's defaults):
  readme_tests  python -m pytest -n auto                      240 s, its own empty caches
  suite_cold    python -m pytest conformance/suite -n auto    120 s, empty Triton (and inductor) caches
  suite_warm    the same again                                 60 s, suite_cold's caches
Each run also gets --junitxml and --conformance-report files under DIR (the only place anything is written, with
the JSON and the logs), a fresh CONFORMANCE_CACHE_DIR (no example database replays another run's failures), and
no OMP_NUM_THREADS / MKL_NUM_THREADS from the caller (the plugin sets each worker's share; a user sets none).
Counts come from the JUnit XML, else from pytest's last summary line; jit_compiles / jit_seconds from the
conformance report's keys of those names (top level or under "jit"; summed when per kernel), else jit_compiles is
the number of new entries in the run's Triton cache dir, jit_seconds null, and `jit_source` says which. Every
process of a run logs its compiles to $CONFORMANCE_JIT_LOG (conformance.plugin.jit): `jit_log` says how many were
distinct and how many repeated a specialization already compiled in the run; `prewarm` is the report's
jit.prewarm (conformance.plugin.prewarm). $CI_PYTEST_ARGS adds pytest arguments to every run. A run past
its limit gets SIGINT (pytest then writes its JUnit XML and summary), then SIGKILL after GRACE_S; the JSON is
rewritten after every run, so a cut call still returns the runs it finished (`complete` false until the last).
The JSON's `python_bytecode` records whether the machine caches bytecode; --compile-bytecode (run_gpu.sh ci passes
it unless CI_BYTECODE=0) compiles what is missing first, outside the timed runs (python_bytecode says why).
Code identity: CONFORMANCE_COMMIT / CONFORMANCE_TREE_CLEAN (benchmarks/provenance.py; the device copy has no .git).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.plugin import jit

ROOT = Path(__file__).resolve().parent.parent
SUITE = ("-m", "pytest", "conformance/suite", "-n", "auto")
# (name, pytest arguments after the interpreter, limit in s, caches: "fresh" or the run whose caches it reuses)
RUNS = (("readme_tests", ("-m", "pytest", "-n", "auto"), 240, "fresh"),
        ("suite_cold", SUITE, 120, "fresh"),
        ("suite_warm", SUITE, 60, "suite_cold"))
LIMIT_ENV = {"readme_tests": "CI_README_S", "suite_cold": "CI_SUITE_COLD_S", "suite_warm": "CI_SUITE_WARM_S"}
EXTRA_ENV = "CI_PYTEST_ARGS"  # more pytest arguments for every run, e.g. "--conformance-prewarm off" (an A/B)
GRACE_S = 20  # after SIGINT: pytest stops its workers and writes its reports
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
COUNTS = ("passed", "failed", "skipped", "errors")
_SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def junit_counts(path: Path) -> dict | None:
    """passed / failed / skipped / errors from a JUnit XML file (None if it is missing or unreadable)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"],
            "skipped": n["skipped"], "errors": n["errors"]}


def summary_counts(output: str) -> dict | None:
    """The counts of pytest's last summary line ('=== 2 failed, 30 passed, 1 skipped in 9.1s ==='), or None."""
    lines = [ln for ln in output.splitlines() if re.search(r" in [\d.]+s", ln) and _SUMMARY.search(ln)]
    if not lines:
        return None
    got = {word: int(num) for num, word in _SUMMARY.findall(lines[-1])}
    out = {k: got.get(k, 0) for k in ("passed", "failed", "skipped")}
    out["errors"] = got.get("errors", 0) + got.get("error", 0)
    return out


def run_counts(junit: Path, output: str) -> tuple[dict, str]:
    """(counts, where they came from): the JUnit XML, else the summary line, else all None."""
    counts = junit_counts(junit)
    if counts is not None:
        return counts, "junit"
    counts = summary_counts(output)
    if counts is not None:
        return counts, "summary line"
    return dict.fromkeys(COUNTS), "none (no JUnit XML, no summary line)"


def _total(v) -> float | None:
    """A report's jit figure: a number, or per-kernel numbers (a dict, maybe holding a 'total')."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, dict):
        if "total" in v:
            return _total(v["total"])
        parts = [_total(x) for x in v.values()]
        parts = [p for p in parts if p is not None]
        return sum(parts) if parts else None
    return None


def cache_entries(d: Path) -> int:
    """Entries at the top of a Triton cache dir (one per compiled kernel, plus its few driver helpers)."""
    return sum(1 for _ in d.iterdir()) if d.is_dir() else 0


def jit_figures(report: Path, cache: Path, before: int) -> dict:
    """jit_compiles, jit_seconds and jit_source for one run."""
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        doc = {}
    for where, d in (("", doc), ("jit.", doc.get("jit") if isinstance(doc.get("jit"), dict) else {})):
        compiles, seconds = _total(d.get("jit_compiles")), _total(d.get("jit_seconds"))
        if compiles is not None:
            return {"jit_compiles": compiles, "jit_seconds": None if seconds is None else round(seconds, 2),
                    "jit_source": f"conformance report ({where}jit_compiles, {where}jit_seconds)"}
    return {"jit_compiles": cache_entries(cache) - before, "jit_seconds": None,
            "jit_source": "new entries in the run's TRITON_CACHE_DIR (the report has no jit_compiles; no seconds)"}


def _prewarm(report: Path) -> dict | None:
    """The report's jit.prewarm entry (conformance.plugin.prewarm), None where it has none."""
    try:
        return (json.loads(report.read_text()).get("jit") or {}).get("prewarm")
    except (OSError, ValueError, AttributeError):
        return None


SLOWEST = 10  # the slowest tests of a run, recorded beside its wall (where a GPU run's time goes)


def where_time_went(junit: Path, report: Path) -> dict:
    """{"workers": the conformance report's per-worker timeline (conformance.plugin.timeline) without its
    per_worker table, "slowest": [[test id, seconds], ...] (the SLOWEST longest JUnit testcases)}; None each where
    the file is missing."""
    try:
        w = json.loads(report.read_text()).get("workers")
    except (OSError, ValueError, AttributeError):
        w = None
    try:
        cases = [(f"{c.get('classname')}::{c.get('name')}", float(c.get("time") or 0))
                 for c in ET.parse(junit).getroot().iter("testcase")]
        slowest = [[n, round(t, 2)] for n, t in sorted(cases, key=lambda c: -c[1])[:SLOWEST]]
    except (OSError, ET.ParseError, ValueError):
        slowest = None
    return {"workers": {k: v for k, v in w.items() if k != "per_worker"} if isinstance(w, dict) else None,
            "slowest": slowest}


def timed(cmd: list, env: dict, limit_s: float, log: Path, grace_s: float | None = None) -> tuple[int, float, bool]:
    """Run `cmd` from the tree root, output to `log`; past `limit_s` its process group gets SIGINT (as Ctrl-C in a
    terminal: pytest stops its workers and writes its reports), and SIGKILL `grace_s` (default GRACE_S) later.
    Whatever the group still holds at the end (a worker that outlived its controller) is killed.
    (exit code, wall s, timed out)."""
    grace_s = GRACE_S if grace_s is None else grace_s
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, process_group=0)
        timed_out = False
        try:
            rc = p.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(p.pid, signal.SIGINT)
            try:
                rc = p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                rc = p.wait()
        _signal_group(p.pid, signal.SIGKILL)
    return rc, round(time.monotonic() - t0, 1), timed_out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_one(name: str, args: tuple, limit_s: float, caches: dict, scratch: Path, logs: Path, python: str) -> dict:
    """One run under its limit; its record (command, wall_s, counts, jit figures, exit code)."""
    junit, report = scratch / f"{name}.xml", scratch / f"{name}.json"
    extra = os.environ.get(EXTRA_ENV, "").split()
    cmd = [python, *args, *extra, f"--junitxml={junit}", f"--conformance-report={report}"]
    jit_log = scratch / f"{name}.jit.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(TRITON_CACHE_DIR=str(caches["triton"]), TORCHINDUCTOR_CACHE_DIR=str(caches["inductor"]),
               CONFORMANCE_CACHE_DIR=tempfile.mkdtemp(prefix=f"{name}-conformance-", dir=scratch),
               PYTHONUNBUFFERED="1", **{jit.LOG_ENV: str(jit_log)})
    before = cache_entries(caches["triton"])
    log = logs / f"ci_{name}.log"
    rc, wall, timed_out = timed(cmd, env, limit_s, log)
    counts, source = run_counts(junit, log.read_text(errors="replace"))
    shown = ["python", *args, *extra]
    return {"command": " ".join(shown), "wall_s": wall, **counts, **jit_figures(report, caches["triton"], before),
            "jit_log": jit.read_log(str(jit_log)) if jit_log.exists() else None, "prewarm": _prewarm(report),
            "exit_code": rc, "timed_out": timed_out, "limit_s": limit_s, "counts_from": source,
            "argv": " ".join(["python", *cmd[1:]]), "triton_cache": caches["label"], **where_time_went(junit, report)}


BYTECODE_PACKAGES = ("torch", "triton", "sympy", "numpy", "hypothesis", "_pytest")  # what every worker imports
TREE_DIRS = ("conformance", "kernels", "references", "benchmarks", "tests")


def _missing_bytecode(site: Path) -> tuple[int, int]:
    """(modules without a cached .pyc, modules) of BYTECODE_PACKAGES in `site`."""
    import importlib.util

    files = [p for pkg in BYTECODE_PACKAGES for p in (site / pkg).rglob("*.py")]
    return sum(not Path(importlib.util.cache_from_source(str(p))).is_file() for p in files), len(files)


def python_bytecode(compile_missing: bool) -> dict:
    """The machine's bytecode state, recorded because it costs every process: an image that ships site-packages
    without .pyc files, under PYTHONDONTWRITEBYTECODE=1 (which keeps Python from writing them), recompiles torch's
    Python sources in every process (on the H200 the largest item of a worker's start-up; 16 xdist workers and
    every subprocess a test starts pay it). compile_missing: `python -m compileall` the site-packages and this
    tree first (once per machine, as an image build would), outside every timed run; the record says so."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    before = _missing_bytecode(site)
    doc = {"PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"), "site_packages": str(site),
           "modules_without_pyc": f"{before[0]} of {before[1]} ({', '.join(BYTECODE_PACKAGES)})", "compiled": False}
    if compile_missing and before[0]:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site),
                            *(str(ROOT / d) for d in TREE_DIRS)], capture_output=True, text=True)
        after = _missing_bytecode(site)
        doc.update(compiled=True, compile_s=round(time.monotonic() - t0, 1), compileall_exit=p.returncode,
                   modules_without_pyc_after=f"{after[0]} of {after[1]}")
    return doc


def environment() -> dict:
    """device, torch, triton of this machine."""
    import torch

    from conformance.core import registry

    registry.load_all()  # configure_triton before triton is imported (interpreter on a CPU host)
    import triton

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"device": device, "torch": torch.__version__, "triton": triton.__version__}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON to write (gpu_ci.json)")
    ap.add_argument("--scratch", required=True, help="a directory for caches, reports and logs (created)")
    ap.add_argument("--logs", default=None, help="where the per-run logs go (default: beside the JSON)")
    ap.add_argument("--runs", default=",".join(r[0] for r in RUNS), help="which runs, in order (default all)")
    ap.add_argument("--compile-bytecode", action="store_true",
                    help="compile the site-packages' and this tree's missing .pyc files before the runs (recorded)")
    a = ap.parse_args(argv)
    from . import provenance

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(a.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    logs = Path(a.logs) if a.logs else out.parent
    logs.mkdir(parents=True, exist_ok=True)
    wanted = [r for r in RUNS if r[0] in a.runs.split(",")]
    ident = provenance.code_identity()
    doc = {"commit": ident["commit"], "clean": ident["clean"], "commit_from": ident["from"],
           "kernel_digest": provenance.kernel_digest(), **dict.fromkeys(("device", "torch", "triton")),
           "thread_env": f"{' and '.join(THREAD_VARS)} unset for every run (the plugin sets each worker's share)",
           "complete": False}
    doc["python_bytecode"] = python_bytecode(a.compile_bytecode)
    print(f"gpu_ci: python bytecode: {doc['python_bytecode']}", flush=True)
    caches: dict = {}
    for name, args, limit, cache_from in wanted:
        if cache_from == "fresh" or cache_from not in caches:
            root = Path(tempfile.mkdtemp(prefix=f"{name}-caches-", dir=scratch))
            caches[name] = {"triton": root / "triton", "inductor": root / "inductor", "label": f"empty ({name})"}
        else:
            caches[name] = dict(caches[cache_from], label=f"warm (from {cache_from})")
        caches[name]["triton"].mkdir(parents=True, exist_ok=True)
        limit = float(os.environ.get(LIMIT_ENV.get(name, ""), limit))
        doc[name] = run_one(name, args, limit, caches[name], scratch, logs, sys.executable)
        out.write_text(json.dumps(doc, indent=2) + "\n")
        r = doc[name]
        print(f"gpu_ci: {name}: {r['wall_s']} s, {r['passed']} passed, {r['failed']} failed, {r['errors']} errors, "
              f"{r['skipped']} skipped, jit {r['jit_compiles']} ({r['jit_source'].split(' (')[0]})", flush=True)
    doc.update(environment(), complete=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(doc[n]["failed"] == 0 and doc[n]["errors"] == 0 and not doc[n]["timed_out"]
                    for n, *_ in wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
