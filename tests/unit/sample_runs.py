"""One `pytest -n 2` run on sample test files, shared by the tests that judge it (tests/unit/test_plugin.py: the
conformance plugin's merge, summary, threads, skips, JIT and timeline; tests/unit/test_bench_gpu_runs.py: the
suite recorder with workers pinned to two simulated GPUs), so that the test run pays one subprocess tree of a
controller and two workers (each importing torch: about 15 s of CPU on 2 cores) instead of one per file.

`xdist_sample_run(tmp_path_factory)` runs it once per test session, whichever xdist worker asks first (a file
lock in the session's shared temporary root; the others wait and read the same result), and returns the paths
and outputs. Each sample file's records are told apart by their `test` field (the recorder adds it), each file's
assertions stay in its own test module.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# the plugin's side (test_plugin.py): records on both workers, a JIT note, a skip with a very long reason
EMIT_FILE = "test_emit.py"
EMIT_TESTS = '''
import os
import pytest
import torch
from conformance.core import results

@pytest.mark.parametrize("i", range(12))
def test_records(i):
    for j in range(3):
        results.record("k%d" % (i % 3), "exact", "pass" if j else "fail", run_mode="model",
                       case_id="case-%d-%d" % (i, j), worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
                       threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"))


@pytest.mark.parametrize("kernel_name", ["kjit"])
def test_compiles(kernel_name):  # as Triton's hooks would note a compile of this test's kernel
    from conformance.plugin import jit
    jit._note(False, 0.25)


def test_skips_with_a_long_reason():  # a gate's refusal repeated for every target: one short line in the summary
    pytest.skip("; ".join(f"k refused on target {t}: not supported there (allowed: cuda)" for t in range(40)))
'''

# the recorder's side (test_bench_gpu_runs.py): a pass, a failure with a case id, a skip, a setup error
SAMPLE_FILE = "test_sample.py"
SAMPLE_TESTS = '''
import pytest
from conformance.core import results

@pytest.mark.parametrize("i", range(4))
def test_records(i):
    results.record("triton_w4a16", "exact", "fail" if i == 2 else "pass", run_mode="interpreter",
                   case_id=f"w4a16/triton_w4a16/M={i}", replay=f"python -m conformance repro {i}")
    assert i != 2, "boom"

def test_skipped():
    pytest.skip("nothing here")

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass
'''
FILES = {EMIT_FILE: EMIT_TESTS, SAMPLE_FILE: SAMPLE_TESTS}


def _run(d: Path) -> dict:
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import provenance

    for name, text in FILES.items():
        (d / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    for var in (*THREAD_VARS, "CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER"):  # the plugin's own thread share and
        env.pop(var, None)  # worker pinning, not what an outer run set
    cmd = [sys.executable, "-m", "pytest", *FILES, "-n", "2", "-v", "-rs", "-p", "no:cacheprovider",
           "-p", "conformance.pytest_plugin", "-p", "benchmarks.suite_record", "-p", "fake_two_gpus",
           "--suite-summary", str(d / "summary.json"), "--conformance-report", str(d / "report.json")]
    digest = provenance.kernel_digest()  # before the run: what the summary must record
    p = warm_python.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=600)
    return {"returncode": p.returncode, "stdout": p.stdout, "stderr": p.stderr, "expected_digest": digest}


def xdist_sample_run(tmp_path_factory) -> dict:
    """The shared run: {"returncode", "stdout", "stderr", "expected_digest", "summary" (the recorder's JSON),
    "report" (the plugin's JSON report)}. Run once per session across xdist workers."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # popen-gwN's parent: the session's
    d = root / "xdist-sample-run"
    with open(root / "xdist-sample-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = d / "result.json"
        if not done.exists():
            d.mkdir(exist_ok=True)
            done.write_text(json.dumps(_run(d)))
    out = json.loads(done.read_text())
    for name in ("summary", "report"):
        path = d / f"{name}.json"
        out[name] = json.loads(path.read_text()) if path.exists() else None
    return out


def of_file(records: list[dict], name: str) -> list[dict]:
    """The records made by the tests of sample file `name`."""
    return [r for r in records if r.get("test", "").split("::")[0] == name]
