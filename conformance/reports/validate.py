"""Validate a target: run the conformance suite through pytest, then build the self-contained report.

    doc, exit_code = validate(target, profile="ci", kernels=None, out_dir="report", workers=2)

The suite (conformance/suite, shipped in the package) runs in a pytest subprocess (fresh interpreter,
optional `-n` xdist workers) with --conformance-report (every check record, workers merged) and pytest's own --junitxml
(every test's outcome and skip reason). The report document (conformance.report renders it) holds:
environment, coverage sweep, selection ledger, per kernel x check counts and run modes, error-ratio
samples, failures with replay lines, contract checks, skipped tests with reasons, and optionally the
try-refused section (never counted as conformance results).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

from conformance import suite as suite_package
from conformance.checks.contracts import CONTRACT_CHECKS
from conformance.core import registry
from conformance.core.targets import Target, detect_target
from conformance.core.tree import IN_CHECKOUT
from conformance.core.tree import ROOT as TREE_ROOT
from references.errors import InvalidInput

ROOT = TREE_ROOT  # the checkout (git facts come from here); site-packages in a non-editable install
SUITE_DIR = Path(suite_package.__file__).resolve().parent  # the shipped suite: conformance/suite
TIER_CHECKS = ("exact", "statistical")
DEFAULT_PROFILE = "ci"  # measured: about 1.5 min on a 2-core CPU machine (docs/validation.md)
RUN_MODE_MEANING = {
    "device": "the real kernel ran on this machine's device (or natively in torch)",
    "interpreter": "the real Triton kernel source ran in Triton's CPU interpreter (TRITON_INTERPRET=1)",
    "model": "the real kernel did NOT run: its plain-torch model of the same operands ran instead",
}


# ---- environment -------------------------------------------------------------------------------------

def _git(*args) -> str | None:
    if not IN_CHECKOUT:  # installed: site-packages may sit inside someone else's repository
        return None
    try:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(target: Target, profile: str) -> dict:
    """Versions, device, target, how Triton runs, interpreter fixes, git commit, date."""
    import torch
    import triton

    from conformance.core import interpreter_fixes, interpreter_speed
    from conformance.core.runtime import interpreting

    here = detect_target()
    gpu = torch.cuda.is_available()
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": torch.cuda.get_device_name(0) if gpu else f"no GPU; CPU {_cpu_name()}",
        "detected_target": str(here),
        "target": str(target),
        "arch": target.arch or platform.machine(),
        "simulated": target != here,
        "triton_mode": "interpreter (TRITON_INTERPRET=1)" if interpreting() else "device",
        "interpreter_fixes": interpreter_fixes.status(),
        "interpreter_speed": interpreter_speed.status(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(dirty) if dirty is not None else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
    }


# ---- running the suite -------------------------------------------------------------------------------

def suite_command(target: Target, profile: str, kernels: str | None, report_json: Path, junit: Path,
                  workers: int | str | None, plugins=(), paths=None, timeout: float | None = None,
                  seed: int | None = None) -> list[str]:
    """The pytest command line validate runs (printed in the report so a person can rerun it)."""
    cmd = [sys.executable, "-m", "pytest", *[str(p) for p in (paths or [SUITE_DIR])], "-q", "-p",
           "conformance.pytest_plugin", "-p", "no:cacheprovider", "-o", "junit_family=xunit2", "--rootdir", str(ROOT),
           "--conformance-target", str(target),
           "--conformance-profile", profile, "--conformance-report", str(report_json), "--junitxml", str(junit)]
    if kernels:
        cmd += ["--conformance-kernels", kernels]
    for p in plugins:
        cmd += ["--conformance-plugin", p]
    if workers not in (None, 0, "0"):
        cmd += ["-n", str(workers)]
    if timeout is not None:
        cmd += ["--conformance-timeout", f"{timeout:g}"]
    if seed is not None:
        cmd += ["--conformance-seed", str(seed)]
    return cmd


class Interrupted(Exception):  # noqa: N818 - what happened, not an error of ours
    """validate was stopped by SIGINT or SIGTERM; the pytest child's process group is already stopped.
    `exit_code` is 128 + the signal number (130, 143)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


@contextlib.contextmanager
def _signals_interrupt():
    """Inside: SIGINT and SIGTERM raise Interrupted (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise Interrupted(signum)

    prev = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in prev.items():
            signal.signal(sig, h)


def stop_process_group(p: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the child's whole process group (pytest and its xdist workers), SIGKILL what is left after
    `grace_s`, and reap the child."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; workers it left behind in the group go too
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return


def run_suite(cmd: list[str], log_path: Path) -> tuple[int, float]:
    """Run pytest as a subprocess in its own process group with its output in `log_path`; returns (exit code,
    seconds). Any exception while it runs (Interrupted, KeyboardInterrupt) stops the whole group first."""
    if not SUITE_DIR.is_dir():
        raise InvalidInput("suite", str(SUITE_DIR), "the installed conformance.suite package (validate runs it)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait()
        except BaseException:
            stop_process_group(p)
            raise
    return rc, time.perf_counter() - t0


def parse_junit(path: Path) -> list[dict]:
    """Every testcase: {"test", "outcome" (passed/failed/error/skipped), "message", "time"}; [] when the file is
    missing or not well-formed XML (an interrupted pytest)."""
    if not path.exists():
        return []
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return []
    out = []
    for tc in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            el = tc.find(tag)
            if el is not None:
                outcome, message = name, (el.get("message") or (el.text or "")).strip()
                break
        cls = tc.get("classname", "")
        out.append({"test": f"{cls}::{tc.get('name', '')}" if cls else tc.get("name", ""), "outcome": outcome,
                    "message": message[:2000], "time": float(tc.get("time") or 0)})
    return out


def _test_kernel(test: str, names: set[str]) -> str | None:
    """The kernel a parametrized test id names, e.g. test_x[rdna3_w4a16-exact] -> rdna3_w4a16."""
    if "[" not in test:
        return None
    params = test[test.index("[") + 1:test.rindex("]")].split("-")
    return next((p for p in params if p in names), None)


# ---- summarising records -----------------------------------------------------------------------------

def dedup(records: list[dict]) -> list[dict]:
    """The last record per (kernel, check, case id): hypothesis replays of one case count once."""
    last = {}
    for i, r in enumerate(records):
        last[(r["kernel"], r["check"], r.get("case_id") or f"#{i}")] = r
    return list(last.values())


def summarize(records: list[dict], tests: list[dict], kernels: list[str]) -> dict:
    """Per kernel x check: counts, cases, run modes, ratio samples; failures; contract results; skips."""
    recs = dedup(records)
    cells: dict[tuple, dict] = {}
    for r in recs:
        c = cells.setdefault((r["kernel"], r["check"]), {
            "kernel": r["kernel"], "check": r["check"], "pass": 0, "fail": 0, "error": 0, "skip": 0,
            "cases": set(), "run_modes": set(), "max_ratio": None, "skip_reasons": Counter()})
        c[r["outcome"]] += 1
        if r.get("case_id"):
            c["cases"].add(r["case_id"])
        if r.get("run_mode") and r["outcome"] != "skip":  # a skipped check did not run in any mode
            c["run_modes"].add(r["run_mode"])
        if r["outcome"] == "skip" and r.get("detail"):
            c["skip_reasons"][r["detail"]] += 1
        mr = (r.get("metrics") or {}).get("max_ratio")
        if r["check"] == "statistical" and isinstance(mr, (int, float)):
            c["max_ratio"] = mr if c["max_ratio"] is None else max(c["max_ratio"], mr)
    names = set(kernels) | {r["kernel"] for r in recs}
    # suite tests skipped before any record (the gate accepts nothing here): a skip cell with its reason
    for t in tests:
        k = _test_kernel(t["test"], names)
        if k is None or t["outcome"] != "skipped":
            continue
        tier = next((p for p in TIER_CHECKS if f"-{p}]" in t["test"]), None)
        check = tier or t["test"].split("::")[-1].split("[")[0].removeprefix("test_")
        if (k, check) in cells and cells[(k, check)]["pass"] + cells[(k, check)]["fail"]:
            continue
        c = cells.setdefault((k, check), {"kernel": k, "check": check, "pass": 0, "fail": 0, "error": 0, "skip": 0,
                                          "cases": set(), "run_modes": set(), "max_ratio": None,
                                          "skip_reasons": Counter()})
        c["skip"] += 1
        c["skip_reasons"][t["message"].removeprefix("Skipped: ")] += 1
    rows = []
    for _, c in sorted(cells.items(), key=lambda kv: (kv[0][0], _check_order(kv[0][1]))):
        rows.append({**c, "cases": len(c["cases"]), "run_modes": sorted(c["run_modes"]),
                     "skip_reasons": dict(c["skip_reasons"].most_common())})
    ratios = defaultdict(list)
    for r in recs:
        mr = (r.get("metrics") or {}).get("max_ratio")
        if r["check"] == "statistical" and isinstance(mr, (int, float)):
            ratios[r["kernel"]].append({"ratio": mr, "run_mode": r.get("run_mode"), "family": r.get("family")})
    # one failure per (kernel, check): the last failing record, which for a hypothesis test is the shrunk
    # (minimal) example it replays last; the other failing cases it tried while shrinking are counted
    last_bad: dict[tuple, dict] = {}
    n_bad: Counter = Counter()
    for r in recs:
        if r["outcome"] in ("fail", "error"):
            last_bad[(r["kernel"], r["check"])] = r
            n_bad[(r["kernel"], r["check"])] += 1
    failures = [{"kernel": r["kernel"], "check": r["check"], "outcome": r["outcome"], "case_id": r.get("case_id"),
                 "run_mode": r.get("run_mode"), "replay": r.get("replay", ""), "detail": r.get("detail", "")[:1500],
                 "failing_cases": n_bad[key]}
                for key, r in sorted(last_bad.items())]
    recorded_fail_tests = {f["kernel"] for f in failures}
    test_failures = [t for t in tests if t["outcome"] in ("failed", "error")
                     and _test_kernel(t["test"], names) not in recorded_fail_tests]
    contracts = [{"kernel": r["kernel"], "check": r["check"], "outcome": r["outcome"], "run_mode": r.get("run_mode"),
                  "case_id": r.get("case_id"), "seconds": (r.get("metrics") or {}).get("seconds"),
                  "detail": r.get("detail", "")[:600]}
                 for r in recs if r["check"] in CONTRACT_CHECKS]
    contracts.sort(key=lambda r: (r["kernel"], CONTRACT_CHECKS.index(r["check"]), r["case_id"] or ""))
    test_counts = Counter(t["outcome"] for t in tests)
    n_fail = sum(1 for r in rows if r["fail"] + r["error"]) + len(test_failures)  # failing checks
    kernels_seen = sorted({r["kernel"] for r in rows} | set(kernels))
    return {"cells": rows, "ratios": dict(ratios), "failures": failures, "test_failures": test_failures,
            "contracts": contracts, "tests": dict(test_counts), "n_records": len(records),
            "n_results": len(recs), "n_kernels": len(kernels_seen), "kernels": kernels_seen,
            "n_checks": len(rows), "n_failures": n_fail,
            "skipped_tests": [t for t in tests if t["outcome"] == "skipped"]}


def _check_order(check: str) -> tuple:
    order = TIER_CHECKS + CONTRACT_CHECKS
    return (order.index(check) if check in order else len(order), check)


# ---- the whole run -----------------------------------------------------------------------------------

def validate(target: Target, *, profile: str = DEFAULT_PROFILE, kernels: str | None = None,
             out_dir: str | os.PathLike = "report", junitxml: str | None = None, workers=None,
             try_refused: bool = False, plugins=(), progress=None, paths=None,
             timeout: float | None = None, seed: int | None = None, baseline: Target | None = None,
             compile_lane: bool = False, compile_sets=None) -> tuple[dict, int]:
    """Run the suite for `target`, build the report document, write report.json and report.html.

    `baseline`: also run the suite for this target (its own report in DIR/baseline-<arch>/, same kernels, profile
    and seed) and put `baseline_changes` at the top of the document; `compile_lane`: compile the kernels' programs
    for the target (and the baseline) with the compile lane over `compile_sets` (default: all its case sets); a
    compile that fails on the target fails the run. Either adds `target_matrix` (conformance.reports.target_report).

    `paths` narrows the suite to some of its files (tests use it); `timeout`: the per-call limit in seconds
    (--conformance-timeout; None: the profile's default); `seed`: the run seed (--conformance-seed; None: the
    suite resolves it: $CONFORMANCE_SEED, else the commit for ci, conformance.cases.seeds). The document carries
    the seed the suite used, the CI plan's coverage per kernel and tier ("plan") and cases per second per family.
    Output paths are checked before anything runs. Returns (document, exit code): 0 when
    every check passed, 1 when any failed or errored (or pytest
    itself failed), 2 when the suite produced no report at all."""
    from conformance.cases.profiles import get_profile
    from conformance.reports import files

    get_profile(profile)  # bad names raise InvalidInput before anything runs
    out = files.writable_dir("--out", out_dir)  # every output path is checked before the run
    junit = files.writable_file("--junitxml", junitxml) if junitxml else out / "junit.xml"
    # the suite writes into a private directory; results move into place only when the run ends, so an
    # interrupted validate leaves the previous report (and junit.xml) as they were, and no stray files
    augment = None
    if baseline is not None or compile_lane:
        if seed is None and profile != DEFAULT_PROFILE:  # a random seed: drawn once, so both targets share it
            from conformance.cases.seeds import resolve_run_seed

            seed = resolve_run_seed(None, profile)[0]
        base_dir = files.writable_dir("--out", out / f"baseline-{baseline.arch}") if baseline is not None else None
        augment = _target_sections(target, baseline, base_dir, profile=profile, kernels=kernels, workers=workers,
                                   plugins=plugins, progress=progress, paths=paths, timeout=timeout, seed=seed,
                                   compile_lane=compile_lane, compile_sets=compile_sets)
    work = Path(tempfile.mkdtemp(prefix=".validate-", dir=out))
    try:
        with _signals_interrupt():
            return _validate(target, profile, kernels, out, junit, work, workers, try_refused, plugins, progress,
                             paths, timeout, seed, augment)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _target_sections(target, baseline, base_dir, *, profile, kernels, workers, plugins, progress, paths, timeout,
                     seed, compile_lane, compile_sets):
    """The step that adds the baseline's changes and the target matrix to a finished document: runs the baseline's
    suite (its own report in `base_dir`) and the compile lane; returns the target's compile failures."""
    def augment(doc: dict) -> int:
        from conformance.cases.seeds import resolve_run_seed
        from conformance.compile.lane import SETS
        from conformance.reports.target_report import add_target_sections

        say = progress or (lambda msg: None)
        base_doc = None
        if baseline is not None:
            say(f"running the suite for the baseline target {baseline}: report in {base_dir}")
            base_doc, _ = validate(baseline, profile=profile, kernels=kernels, out_dir=base_dir, workers=workers,
                                   plugins=plugins, progress=progress, paths=paths, timeout=timeout, seed=seed)
            base_doc["report_dir"] = str(base_dir)
        env_seed = doc["environment"].get("seed")
        run_seed = int(env_seed, 16) if env_seed else resolve_run_seed(seed, profile)[0]
        ks = registry.resolve_kernels(kernels) if kernels else registry.all_kernels()
        return add_target_sections(doc, target, ks, seed=run_seed, profile=profile, sets=compile_sets or SETS,
                                   compile_lane=compile_lane, baseline=baseline, baseline_doc=base_doc,
                                   progress=progress)
    return augment


def _validate(target, profile, kernels, out: Path, junit: Path, work: Path, workers, try_refused, plugins, progress,
              paths, timeout, seed, augment=None) -> tuple[dict, int]:
    from conformance.reports import coverage, files, report

    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    suite_json, junit_tmp, log_tmp = work / "suite-records.json", work / "junit.xml", work / "pytest.log"
    ks = registry.resolve_kernels(kernels) if kernels else registry.all_kernels()
    names = [k.name for k in ks]
    cmd = suite_command(target, profile, kernels, suite_json, junit_tmp, workers, plugins, paths, timeout, seed)
    say(f"running the conformance suite for {target} (profile {profile}, "
        f"{'-n ' + str(workers) if workers not in (None, 0, '0') else 'one process'}); log: {out / 'pytest.log'}")
    try:
        rc, suite_s = run_suite(cmd, log_tmp)
    finally:  # the log of an interrupted run is kept: it says how far it got
        if log_tmp.exists():
            files.atomic_move(log_tmp, out / "pytest.log")
    say(f"suite finished in {suite_s:.1f} s (pytest exit code {rc})")
    import json

    try:
        suite = json.loads(suite_json.read_text()) if suite_json.exists() else None
    except (OSError, ValueError):
        suite = None
    tests = parse_junit(junit_tmp)
    records = suite["records"] if suite else []
    summary = summarize(records, tests, names)
    doc = {
        "title": f"Conformance validation of {target}",
        "environment": environment(target, profile),
        "command": " ".join(cmd),
        "pytest_exit_code": rc,
        "suite_seconds": round(suite_s, 1),
        "coverage": coverage.sweep(target, ks),
        "selection": suite["selection"] if suite else [],
        "summary": summary,
        "run_mode_meaning": RUN_MODE_MEANING,
        "records": records,
        "records_produced": suite.get("produced") if suite else None,  # made by the suite's processes
        "plan": suite.get("plan", []) if suite else [],  # CI plan coverage per kernel and tier (cases.plan)
        "cases_per_second": suite.get("cases_per_second", {}) if suite else {},
        "junit": str(junit),
        # faults the suite saw (conformance.checks.guard): gates that raised fail the run; replaced workers and the
        # kernels the crash breaker stopped; `complete` only when every planned test reported
        "gate_faults": suite.get("gate_faults", []) if suite else [],
        "workers_replaced": suite.get("workers_replaced") if suite else None,
        "stopped_kernels": suite.get("stopped_kernels", {}) if suite else {},
        "complete": suite.get("complete") if suite else False,
    }
    if suite and suite.get("seed") is not None:  # the seed the suite ran with (its header printed it too)
        doc["environment"]["seed"] = f"{suite['seed']:#x}"
        doc["environment"]["seed_source"] = suite.get("seed_source")
    if try_refused:
        from conformance.reports.try_refused import try_refused as run_try_refused

        say("running --try-refused (gates bypassed; not conformance results)")
        doc["try_refused"] = run_try_refused(ks, target)
    doc["environment"]["wall_time_s"] = round(time.perf_counter() - t0, 1)
    if suite is None:
        code = 2
        doc["problem"] = (f"pytest (exit code {rc}) wrote no conformance report: see {out / 'pytest.log'}")
    elif rc not in (0, 1) or summary["n_failures"] or rc == 1 or doc["gate_faults"]:
        code = 1
    else:
        code = 0
    if augment is not None and suite is not None and augment(doc) and code == 0:
        code = 1  # a program the target's compiler refuses, or that does not fit the target
    if augment is not None:
        doc["environment"]["wall_time_s"] = round(time.perf_counter() - t0, 1)  # the baseline and the lane too
    doc["exit_code"] = code
    if junit_tmp.exists():  # results move into place together, at the end
        files.atomic_move(junit_tmp, junit, "--junitxml")
    report.write_report(out, doc)
    return doc, code
