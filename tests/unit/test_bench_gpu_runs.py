"""The device runs, on a CPU: which code a figure came from (provenance), the suite recorder (the GPU of every
verdict and the summary JSON) under real xdist workers pinned to two simulated GPUs, the two-GPU verdict
comparison, the wiring of `run_gpu.sh final` / `two-gpu` / `ci` / `gemlite5` with a stand-in python (steps, order,
time limits, the files that come back, every scratch path inside the test's tmp dir), and the `ci` and `gemlite5`
runners (benchmarks/gpu_ci.py, gemlite_runs.py, exit_watch.py) on stand-in commands."""
from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import provenance, two_gpu  # noqa: E402
from sample_runs import EMIT_FILE, SAMPLE_FILE, of_file, xdist_sample_run  # noqa: E402

from references.errors import InvalidInput  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------------------------
# provenance

def test_code_identity_from_env_then_git_then_unknown(tmp_path):
    env = {provenance.COMMIT_ENV: "abc123", provenance.CLEAN_ENV: "1"}
    assert provenance.code_identity(environ=env) == {"commit": "abc123", "clean": True, "from": "env"}
    assert provenance.code_identity(environ={provenance.COMMIT_ENV: "abc"})["clean"] is None
    git = provenance.code_identity(environ={})
    assert git["from"] == "git" and len(git["commit"]) == 40 and git["clean"] in (True, False)
    unknown = provenance.code_identity(tmp_path, environ={})  # a copy of the tree without .git, as on the device
    assert unknown == {"commit": "unknown", "clean": None, "from": "unknown"}
    assert provenance.describe(unknown) == "commit unknown (no .git and no CONFORMANCE_COMMIT)"
    assert provenance.describe({"commit": "0123456789abcdef", "clean": False}) == \
        "commit 0123456789ab (uncommitted changes)"
    with pytest.raises(InvalidInput, match="CONFORMANCE_TREE_CLEAN='maybe'"):
        provenance.code_identity(environ={provenance.COMMIT_ENV: "abc", provenance.CLEAN_ENV: "maybe"})
    # the prefix a device command takes: this checkout's identity, whatever the environment says
    assert provenance.env_assignments() == \
        f"CONFORMANCE_COMMIT={git['commit']} CONFORMANCE_TREE_CLEAN={int(git['clean'])}"
    with pytest.raises(InvalidInput, match="checkout="):
        provenance.env_assignments(tmp_path)


def test_kernel_digest_follows_the_kernel_sources_and_tile_tables(tmp_path):
    (tmp_path / "kernels" / "tiles").mkdir(parents=True)
    (tmp_path / "kernels" / "a.py").write_text("x = 1\n")
    (tmp_path / "kernels" / "tiles" / "t.json").write_text("{}")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text("y = 1\n")
    d0 = provenance.kernel_digest(tmp_path)
    (tmp_path / "benchmarks" / "bench.py").write_text("y = 2\n")  # a bench edit does not make figures stale
    assert provenance.kernel_digest(tmp_path) == d0
    (tmp_path / "kernels" / "tiles" / "t.json").write_text('{"table": []}')
    d1 = provenance.kernel_digest(tmp_path)
    (tmp_path / "kernels" / "a.py").write_text("x = 2\n")
    assert len({d0, d1, provenance.kernel_digest(tmp_path)}) == 3


# ------------------------------------------------------------------------------------------------
# the suite recorder under two xdist workers on two simulated GPUs

@pytest.fixture(scope="module")
def pinned_run(tmp_path_factory):
    """pytest -n 2 on sample files, workers pinned to two simulated GPUs, with the recorder loaded (the run
    tests/unit/sample_runs.py shares with test_plugin.py); the summary and the records of both sample files."""
    r = xdist_sample_run(tmp_path_factory)
    # one failure and one error of test_sample.py; test_emit.py's tests all pass or skip
    assert r["returncode"] == 1 and r["summary"] and r["report"], r["stdout"][-3000:] + r["stderr"][-3000:]
    return dict(r["summary"], expected_digest=r["expected_digest"]), r["report"]


def test_summary_counts_per_file_failing_case_ids_and_gpu_per_worker(pinned_run):
    summary, _ = pinned_run
    assert summary["complete"] is True and summary["exitstatus"] == 1
    assert summary["files"][SAMPLE_FILE] == {"passed": 3, "failed": 1, "skipped": 1, "error": 1,
                                             "xfailed": 0, "xpassed": 0}
    per_file = {f: sum(counts.values()) for f, counts in summary["files"].items()}
    assert summary["collected"] == sum(per_file.values()) == 6 + per_file[EMIT_FILE], summary["files"]
    failing = {f["test"]: f for f in summary["failures"]}
    assert {t.split("::")[0] for t in failing} == {SAMPLE_FILE}, failing
    rec = failing["test_sample.py::test_records[2]"]
    assert rec["status"] == "failed" and rec["case_ids"] == ["w4a16/triton_w4a16/M=2"]
    assert rec["replays"] == ["python -m conformance repro 2"] and "boom" in rec["message"]
    assert failing["test_sample.py::test_setup_error"]["status"] == "error"
    assert "setup broke" in failing["test_sample.py::test_setup_error"]["message"]
    gpus = {w: info["gpu"] for w, info in summary["workers"].items()}
    assert gpus == {"gw0": {"CUDA_VISIBLE_DEVICES": "0"}, "gw1": {"CUDA_VISIBLE_DEVICES": "1"}}
    assert sum(info["tests"] for info in summary["workers"].values()) == summary["collected"]
    assert summary["commit"] == provenance.code_identity()["commit"] and "clean" in summary
    assert summary["kernel_digest"] == summary["expected_digest"]


def test_every_record_names_its_worker_gpu_and_test(pinned_run):
    _, report = pinned_run
    recs = report["records"]
    assert len(of_file(recs, SAMPLE_FILE)) == 4 and len(of_file(recs, EMIT_FILE)) == 36 == len(recs) - 4
    for r in recs:
        assert r["gpu"] == {"CUDA_VISIBLE_DEVICES": r["worker"][-1]}, r  # gw0 -> GPU 0, gw1 -> GPU 1
        assert r["test"].split("[")[0] in ("test_sample.py::test_records", "test_emit.py::test_records"), r


def test_two_gpu_comparison_on_the_pinned_run(pinned_run, tmp_path):
    _, multi = pinned_run
    one = copy.deepcopy(multi)
    for r in one["records"]:
        r.update(worker="gw0", gpu={"CUDA_VISIBLE_DEVICES": "0"})
    doc = two_gpu.compare(one, multi)
    assert doc["ok"] and doc["verdicts"]["same"] and doc["verdicts"]["compared"] == len(multi["records"]) == 40
    assert doc["pinning"]["gpus_used"] == ["0", "1"] and doc["pinning"]["workers"] == {"gw0": ["0"], "gw1": ["1"]}
    flipped = copy.deepcopy(one)
    passing = next(r for r in flipped["records"] if r["outcome"] == "pass")
    passing["outcome"] = "fail"
    bad = two_gpu.compare(flipped, multi)
    assert not bad["ok"] and bad["verdicts"]["n_differ"] == 1
    assert bad["verdicts"]["differ"][0]["one_gpu"] == "fail" and bad["verdicts"]["differ"][0]["multi_gpu"] == "pass"
    assert not two_gpu.compare(multi, one)["pinning"]["ok"]  # every worker on one GPU: the pinning did nothing
    missing = copy.deepcopy(one)
    missing["records"].pop()
    assert two_gpu.compare(missing, multi)["verdicts"]["n_only_multi_gpu"] == 1


def test_a_worker_on_two_gpus_fails_the_pinning():
    recs = [{"worker": "gw0", "gpu": {"uuid": u}, "test": "t", "kernel": "k", "check": "c", "case_id": u,
             "outcome": "pass"} for u in ("GPU-a", "GPU-b")]
    doc = two_gpu.compare({"records": recs}, {"records": recs})
    assert doc["verdicts"]["same"] and not doc["pinning"]["ok"]
    assert doc["pinning"]["workers_on_several_gpus"] == {"gw0": ["GPU-a", "GPU-b"]}


def test_two_gpu_command_line(tmp_path, capsys):
    good = tmp_path / "r.json"
    good.write_text(json.dumps({"records": [{"worker": "gw0", "gpu": {"CUDA_VISIBLE_DEVICES": "0"}, "test": "t",
                                             "kernel": "k", "check": "c", "case_id": "x", "outcome": "pass"}]}))
    assert two_gpu.main([str(good), str(good), str(tmp_path / "o.json")]) == 1  # one GPU used, two expected
    assert json.loads((tmp_path / "o.json").read_text())["verdicts"]["same"] is True
    assert two_gpu.main([str(tmp_path / "nope.json"), str(good), str(tmp_path / "o.json")]) == 2
    assert "ONE_GPU_REPORT=" in capsys.readouterr().err
    assert two_gpu.main([str(good)]) == 2


# ------------------------------------------------------------------------------------------------
# run_gpu.sh final / two-gpu, with a stand-in python and timeout

def _run_gpu(tmp_path, steps, wheel=True, **env_extra):
    """Run a copy of run_gpu.sh (its ROOT is the copy: nothing of the checkout is touched) with every scratch path
    under tmp_path/scratch (SCRATCH; the cache variables unset so they default there too); returns the calls of
    python ([env..., args]) and of timeout (limits in s), and the files under $OUT."""
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "run_gpu.sh", tree / "benchmarks" / "run_gpu.sh")
    if wheel:
        (tree / ".whl").mkdir()
        (tree / ".whl" / "gemlite-0.6.0-py3-none-any.whl").write_text("")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "python"
    shutil.copy(HERE / "fake_gpu_python.sh", fake)
    (bin_ / "timeout").write_text(  # FAKE_STEP_S: seconds each timed step takes; options (-k N, -s SIG) skipped
        '#!/usr/bin/env bash\nwhile [ "${1#-}" != "$1" ]; do case "$1" in -k|-s) shift 2;; *) shift;; esac; done\n'
        'echo "TIMEOUT $1" >> "$FAKE_LOG"\nsleep "${FAKE_STEP_S:-0}"\nshift\nexec "$@"\n')
    for f in (fake, bin_ / "timeout"):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    out, log = tmp_path / "out", tmp_path / "calls.log"
    env = {"PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "PYTHON": str(fake), "OUT": str(out),
           "FAKE_LOG": str(log), "HOME": str(tmp_path), "SCRATCH": str(tmp_path / "scratch"), **env_extra}
    proc = subprocess.run(["bash", str(tree / "benchmarks" / "run_gpu.sh"), *steps], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = log.read_text().splitlines()
    calls = [ln.split()[1:] for ln in lines if ln.startswith("CALL ")]
    limits = [int(ln.split()[1]) for ln in lines if ln.startswith("TIMEOUT ")]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return calls, limits, files


def _pytest_calls(calls):
    return [c for c in calls if c[3:5] == ["-m", "pytest"]]


def test_final_runs_smoke_then_the_suite_then_the_bench(tmp_path):
    calls, limits, files = _run_gpu(tmp_path, ["final"], CONFORMANCE_COMMIT="6b2ccc455dac653859fa9cd0400ddd50b987aac6")
    args = [" ".join(c[3:]) for c in calls]
    assert args[0] == "-"  # the smoke reads its script from stdin
    suite, = _pytest_calls(calls)
    s = " ".join(suite[3:])
    for part in ("conformance/suite -n 8", "-p benchmarks.suite_record", "--conformance-plugin "
                 "conformance.adapters.gemlite", "--suite-summary ", "--conformance-report "):
        assert part in s, s
    assert suite[1:3] == ["seed=0x6b2ccc45", "autotune=default"]  # the commit's seed, as CI draws for it
    bench = next(a for a in args if a.startswith("-m conformance bench"))
    assert args.index(bench) > args.index(s)  # the suite's verdicts come back first
    for part in ("--shapes 14336x4096,4096x14336,llama3-8b,llama3-70b",
                 "--m 1,2,4,8,16,32,64,128,256,512,1024,4096", "--baselines dense,compile,gemlite",
                 "--family fp8_group_quant,w4a16"):
        assert part in bench, bench
    assert limits == [90, 210, 300]  # smoke, suite, bench: nothing has used any time yet
    assert len(files) <= 8 and all(f.count("/") <= 1 for f in files), files
    assert set(files) >= {"smoke.log", "suite.log", "suite_summary.json", "suite_records.json", "bench.log",
                          "bench/bench.json", "bench/bench.md"}


def test_final_steps_get_what_the_budget_has_left(tmp_path):
    """Each step's limit is its own or what is left of FINAL_BUDGET_S after the time the earlier steps took, less
    what the later steps keep: the call ends within the budget. Scaled down: 20 s, every step takes 1 s."""
    calls, limits, _ = _run_gpu(tmp_path, ["final"], wheel=False, FAKE_STEP_S="1", FINAL_BUDGET_S="20",
                                SMOKE_TIMEOUT_S="3", FINAL_SUITE_S="100", FINAL_BENCH_MIN_S="8", FINAL_BENCH_S="100")
    smoke, suite, bench = limits
    assert smoke == 3 and 10 <= suite <= 11 and 7 <= bench <= 8 and bench < suite, limits  # 20-1-8 and 20-2-10
    suite_call, = _pytest_calls(calls)
    assert "--conformance-plugin" not in suite_call and suite_call[1] == "seed="  # no wheels, no commit given


def test_two_gpu_runs_one_gpu_then_pinned_and_compares(tmp_path):
    calls, limits, files = _run_gpu(tmp_path, ["two-gpu"], CONFORMANCE_SEED="7")
    one, two = _pytest_calls(calls)
    assert one[0] == "cvd=0" and two[0] == "cvd=" and one[1] == two[1] == "seed=7"
    assert "-n 4" in " ".join(one) and "-n 4" in " ".join(two)
    cmp = next(c for c in calls if "benchmarks.two_gpu" in c)
    assert cmp[-3:] == [str(tmp_path / "out" / "one_gpu_records.json"), str(tmp_path / "out" / "two_gpu_records.json"),
                        str(tmp_path / "out" / "two_gpu.json")]
    assert limits == [90, 240, 240] and len(files) <= 8 and "two_gpu.json" in files, (limits, files)
    calls, _, _ = _run_gpu(tmp_path / "again", ["two-gpu"], ONE_GPU_REPORT="/prev/suite_records.json")
    (two,) = _pytest_calls(calls)
    assert next(c for c in calls if "benchmarks.two_gpu" in c)[-3] == "/prev/suite_records.json"
    calls, _, _ = _run_gpu(tmp_path / "one", ["two-gpu"], FAKE_GPUS="1")
    assert not _pytest_calls(calls)  # one GPU: nothing to compare


def test_the_final_bench_flags_parse(monkeypatch):
    """run_gpu.sh's FINAL_BENCH is a valid `bench` command line (kernels, shapes, M values, compile-boundary
    shapes among the benched ones): a typo there would cost a GPU call."""
    import argparse
    import re

    from conformance.cli import bench as bench_cli
    from conformance.core import registry

    registry.load_all()
    text = (ROOT / "benchmarks" / "run_gpu.sh").read_text()
    flags = re.search(r'^FINAL_BENCH="(.*?)"', text, re.M | re.S).group(1).split()
    ap = argparse.ArgumentParser()
    bench_cli.add_arguments(ap)
    opts = bench_cli._options(ap.parse_args(flags))
    names = [s.name for s in opts.shapes]
    assert names[:2] == ["14336x4096", "4096x14336"] and len(names) == len(set(names)) == 9
    assert opts.ms == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
    assert opts.families == ("fp8_group_quant", "w4a16") and set(opts.compile_boundary_shapes) <= set(names)
    assert opts.baselines == ("dense", "compile", "gemlite")


# ------------------------------------------------------------------------------------------------
# scratch paths, and the `ci` / `gemlite5` steps

def test_every_scratch_path_comes_from_a_variable_under_scratch(tmp_path):
    """The script names /tmp once, as SCRATCH's default; a `final` run with GemLite's wheels installs GemLite (the
    step that emptied /tmp/site when this test ran on a GPU host) under the test's own SCRATCH."""
    text = (ROOT / "benchmarks" / "run_gpu.sh").read_text()
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    assert [ln for ln in code if "/tmp" in ln] == ['SCRATCH="${SCRATCH:-/tmp}"'], [ln for ln in code if "/tmp" in ln]
    calls, _, _ = _run_gpu(tmp_path, ["final"])
    pip, = [c for c in calls if c[3:5] == ["-m", "pip"]]
    target = Path(pip[pip.index("--target") + 1])
    assert target == tmp_path / "scratch" / "conformance_gemlite_site"
    assert not target.exists() or target.is_relative_to(tmp_path)


def test_ci_runs_the_ci_runner_alone_within_one_call(tmp_path):
    calls, limits, files = _run_gpu(tmp_path, ["ci"], CONFORMANCE_COMMIT="6b2ccc455dac653859fa9cd0400ddd50b987aac6",
                                    CONFORMANCE_TREE_CLEAN="1")
    assert [c[3:] for c in calls] == [["-m", "benchmarks.gpu_ci", str(tmp_path / "out" / "gpu_ci.json"), "--scratch",
                                       str(tmp_path / "scratch" / "conformance_ci"), "--compile-bytecode"]]  # no smoke
    assert calls[0][1] == "seed=0x6b2ccc45" and limits == [560] and "gpu_ci.json" in files and len(files) <= 8
    calls, _, _ = _run_gpu(tmp_path / "split", ["ci"], CI_RUNS="suite_cold,suite_warm", CI_BYTECODE="0")
    assert calls[0][-2:] == ["--runs", "suite_cold,suite_warm"]  # a call of their own, no bytecode step


def test_gemlite5_installs_gemlite_then_runs_the_five_runs(tmp_path):
    calls, limits, files = _run_gpu(tmp_path, ["gemlite5"], GEMLITE5_RUNS="3")
    runner = [c[3:] for c in calls if "benchmarks.gemlite_runs" in c]
    assert runner == [["-m", "benchmarks.gemlite_runs", str(tmp_path / "out" / "gemlite5.json"), "--scratch",
                       str(tmp_path / "scratch" / "conformance_gemlite5"), "--runs", "3", "--run-s", "100",
                       "--budget-s", "540"]]
    assert [c[3:5] for c in calls][:1] == [["-m", "pip"]] and limits == [570] and "gemlite5.json" in files


# a stand-in for `python -m pytest ...` in the runners: argv[1] the mode, then --junitxml=J --conformance-report=R
FAKE_PYTEST = r'''
import json, os, pathlib, signal, sys, time
mode, opts = sys.argv[1], dict(a[2:].split("=", 1) for a in sys.argv[2:])
cache = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) if "TRITON_CACHE_DIR" in os.environ else None
print("threads env:", os.environ.get("OMP_NUM_THREADS"), "cache:", cache, flush=True)
if mode.startswith("hang"):
    if mode == "hang_ignoring_sigint":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("...... [100%]", flush=True)
    time.sleep(30)
if mode in ("cold", "report"):
    for i in range(3):
        (cache / f"k{mode}{i}").mkdir()
if mode == "report":
    pathlib.Path(opts["conformance-report"]).write_text(json.dumps({"jit": {"jit_compiles": 7, "jit_seconds": 1.234},
        "workers": {"count": 2, "first_test_s": {"min": 1.0}, "per_worker": {"gw0": {}, "gw1": {}}}}))
if mode != "summary_only":
    pathlib.Path(opts["junitxml"]).write_text(
        '<testsuites><testsuite tests="6" failures="1" errors="1" skipped="2">'
        '<testcase classname="t.a" name="fast" time="0.5"/><testcase classname="t.b" name="slow" time="7.25"/>'
        '</testsuite></testsuites>')
print("=== 1 failed, 4 passed, 3 skipped in 0.1s ===")
'''


def test_gpu_ci_times_counts_and_records_each_run(tmp_path, monkeypatch):
    from conformance_bench import gpu_ci

    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the runner drops it: the plugin sets the threads
    monkeypatch.setenv("CONFORMANCE_COMMIT", "abc123")
    monkeypatch.setenv("CONFORMANCE_TREE_CLEAN", "0")
    monkeypatch.setattr(gpu_ci, "RUNS", (("readme_tests", ("-c", FAKE_PYTEST, "report"), 30, "fresh"),
                                         ("suite_cold", ("-c", FAKE_PYTEST, "cold"), 30, "fresh"),
                                         ("suite_warm", ("-c", FAKE_PYTEST, "summary_only"), 30, "suite_cold")))
    out = tmp_path / "out" / "gpu_ci.json"
    assert gpu_ci.main([str(out), "--scratch", str(tmp_path / "scratch")]) == 1  # the stand-in reports a failure
    doc = json.loads(out.read_text())
    assert (doc["commit"], doc["clean"], doc["complete"]) == ("abc123", False, True)
    assert doc["device"] and doc["torch"] and doc["triton"]
    bc = doc["python_bytecode"]  # recorded, and nothing compiled without --compile-bytecode
    assert bc["compiled"] is False and " of " in bc["modules_without_pyc"] and bc["site_packages"]
    keys = {"command", "wall_s", "passed", "failed", "skipped", "errors", "jit_compiles", "jit_seconds"}
    for name in ("readme_tests", "suite_cold", "suite_warm"):
        assert keys <= set(doc[name]) and doc[name]["exit_code"] == 0 and not doc[name]["timed_out"], doc[name]
    rt, cold, warm = doc["readme_tests"], doc["suite_cold"], doc["suite_warm"]
    assert (rt["passed"], rt["failed"], rt["errors"], rt["skipped"], rt["counts_from"]) == (2, 1, 1, 2, "junit")
    assert (warm["passed"], warm["failed"], warm["skipped"], warm["counts_from"]) == (4, 1, 3, "summary line")
    assert (rt["jit_compiles"], rt["jit_seconds"]) == (7, 1.23) and "report" in rt["jit_source"]
    assert (cold["jit_compiles"], cold["jit_seconds"]) == (3, None) and "TRITON_CACHE_DIR" in cold["jit_source"]
    assert warm["jit_compiles"] == 0 and warm["triton_cache"] == "warm (from suite_cold)"  # the cold run's cache
    # where the time went: the report's worker timeline (without its per-worker table), the slowest tests first
    assert rt["workers"] == {"count": 2, "first_test_s": {"min": 1.0}} and warm["workers"] is None
    assert rt["slowest"] == [["t.b::slow", 7.25], ["t.a::fast", 0.5]] and warm["slowest"] is None
    log = (tmp_path / "out" / "ci_suite_warm.log").read_text()
    assert "threads env: None" in log and str(tmp_path / "scratch") in log
    assert {p.name for p in out.parent.iterdir()} == {"gpu_ci.json", *(f"ci_{n}.log" for n in gpu_ci.LIMIT_ENV)}


def test_a_run_past_its_limit_is_interrupted_then_killed(tmp_path, monkeypatch):
    from conformance_bench import gpu_ci

    monkeypatch.setattr(gpu_ci, "GRACE_S", 0.5)
    env = dict(os.environ)
    rc, wall, cut = gpu_ci.timed([sys.executable, "-c", FAKE_PYTEST, "hang"], env, 1.0, tmp_path / "a.log")
    assert cut and rc != 0 and wall < 10
    rc, wall, cut = gpu_ci.timed([sys.executable, "-c", FAKE_PYTEST, "hang_ignoring_sigint"], env, 1.0,
                                 tmp_path / "b.log")
    assert cut and rc == -9 and wall < 10  # SIGINT ignored: killed after the grace
    assert "[100%]" in (tmp_path / "b.log").read_text()


def test_gemlite_runs_tell_a_run_that_hangs_after_its_summary(tmp_path, monkeypatch):
    """Run 1 ends; run 2 prints [100%] and its summary, then does not exit: cut at the limit, and told apart."""
    from conformance_bench import gemlite_runs, gpu_ci

    monkeypatch.setattr(gpu_ci, "GRACE_S", 1.0)  # SIGKILL 1 s after SIGINT: the 20 s grace cost this test 23 s once
    script = FAKE_PYTEST.replace('mode, opts = sys.argv[1], ', 'n = pathlib.Path(sys.argv[1]); n.write_text(str('
                                 'int(n.read_text() or 0) + 1) if n.exists() else "1"); mode = "hang" if '
                                 'n.read_text() == "2" else "cold"; opts = ')
    script = script.replace('    time.sleep(30)', '    print("=== 4 passed in 0.1s ===", flush=True)\n'
                                                     '    time.sleep(30)')
    counter = tmp_path / "n"
    monkeypatch.setattr(gemlite_runs, "ARGS", ("-c", script, str(counter)))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    out = tmp_path / "out" / "gemlite5.json"
    assert gemlite_runs.main([str(out), "--scratch", str(tmp_path / "s"), "--runs", "2", "--run-s", "2"]) == 1
    doc = json.loads(out.read_text())
    one, two = doc["runs"]
    assert (one["ended_on_own"], one["exit_code"], one["timed_out"]) == (True, 0, False)
    assert (two["ended_on_own"], two["timed_out"], two["reached_100"], two["summary_printed"]) == \
        (False, True, True, True)
    assert doc["runs_done"] == 2 and doc["all_ended_on_own"] is False and doc["commit"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["gemlite5.json", "gemlite5_run1.log", "gemlite5_run2.log"]


def test_exit_watch_names_a_thread_that_holds_the_exit_and_dumps_its_stack(tmp_path):
    """A non-daemon thread keeps the process after its tests: exit_watch names it, and its stack is dumped; the
    thread ends only once the dump was read here (no race with the clock)."""
    stop = tmp_path / "stop"
    (tmp_path / "test_t.py").write_text(
        "import os, threading, time\n\ndef hold():\n"
        f"    while not os.path.exists({str(stop)!r}):\n        time.sleep(0.05)\n\n"
        "def test_t():\n    threading.Thread(target=hold, name='holder').start()\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), EXIT_WATCH_S="0.5")
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-p", "benchmarks.exit_watch", "test_t.py"], cwd=tmp_path, env=env, text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import threading

    backstop = threading.Timer(60, stop.write_text, args=("",))  # no dump at all: the thread still ends
    backstop.start()
    try:
        err = []
        for ln in p.stderr:  # until the dump shows the holder's frame
            err.append(ln)
            if ln.strip().startswith('File "') and "in hold" in ln:
                break
        stop.write_text("")
        err.append(p.stderr.read())
        assert p.wait(timeout=60) == 0, "".join(err)
    finally:
        backstop.cancel()
        stop.write_text("")
        p.kill()
    text = "".join(err)
    line = next(ln for ln in text.splitlines() if ln.startswith("exit_watch[controller"))
    assert "holder (NON-DAEMON)" in line and "Timeout (0:00:00.500000)!" in text and "Thread 0x" in text, text
