"""The pytest plugin: records from every xdist worker reach the controller's JSON report, none lost."""
import os
import sys
from pathlib import Path

import pytest
from sample_runs import EMIT_FILE, of_file, xdist_sample_run

from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The shared `pytest -n 2` sample run (tests/unit/sample_runs.py); its test_emit.py part is judged here."""
    r = xdist_sample_run(tmp_path_factory)
    assert r["report"] is not None, r["stdout"][-3000:] + r["stderr"][-3000:]
    return r


def test_report_merges_every_worker_record(run):
    doc, out = run["report"], run["stdout"]  # -v undoes -q: the header is printed; -rs: skip reasons
    recs = of_file(doc["records"], EMIT_FILE)
    assert sorted(r["case_id"] for r in recs) == sorted(f"case-{i}-{j}" for i in range(12) for j in range(3))
    assert {r["worker"] for r in recs} == {"gw0", "gw1"}
    # the shared run loads fake_two_gpus, which hides any GPU (torch.cuda.is_available() is False): its processes
    # detect the CPU target on every machine
    assert doc["target"] == "cpu" and doc["profile"] == "ci" and doc["selection"]
    # terminal summary: kernel x check table with run_mode, ledger, replay lines of the failures
    assert "conformance summary" in out and "selection ledger" in out
    assert "FAIL case-0-0 [model]" in out
    # each worker ran with its share of the cores: torch threads and the exported OpenMP/MKL variables
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert {(r["threads"], r["omp"]) for r in recs} == {(share, str(share))}
    assert doc["threads"]["workers"] == 2 and doc["threads"]["share"] == share, doc["threads"]
    assert f"conformance: 2 workers x {share} thread" in out, out
    # the skip reason: one line of at most 200 characters in the summary, the full text in the JSON report
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED") and "not supported there" in ln]
    reason = skipped[0].split(": ", 1)[1] if len(skipped) == 1 else ""
    shown = reason.split(" (+")[0].count("; ") + 1
    assert len(reason) <= 200 and reason.endswith(f"(+{40 - shown} more; full text in the JSON report)"), skipped
    long = [s for s in doc["skipped"] if s["test"].startswith(EMIT_FILE)]
    assert [s["reason"].count("not supported there") for s in long] == [40], doc["skipped"]
    # JIT compiles: attributed to the running test's kernel in its worker, summed on the controller
    assert doc["jit"]["per_kernel"] == {"kjit": {"jit_compiles": 1, "jit_seconds": 0.25, "jit_cache_hits": 0}}
    assert doc["jit"]["jit_compiles"] == 1 and "kjit: no cases; JIT 1 compiles, 0.25 s" in out, out[-3000:]
    # where the wall went: each worker's first test, busy seconds and last test, from the reports' timestamps
    w = doc["workers"]
    assert w["count"] == 2 and set(w["per_worker"]) == {"gw0", "gw1"}, w
    assert all(p["tests"] >= 1 and 0 <= p["first_test_s"] <= p["last_test_end_s"] <= w["last_test_end_s"]
               and p["busy_s"] >= 0 for p in w["per_worker"].values()), w
    assert "workers: 2, first test at" in out, out[-3000:]
    # where each worker's startup went: its phases, in the order it passed them, before its first test
    for p in w["per_worker"].values():
        marks = [p["startup"][k] for k in ("process", "configure", "configured", "collected")]
        assert marks == sorted(marks) and marks[-1] <= p["first_test_s"], w
    assert "worker startup (median s after session start): process" in out, out[-3000:]
    # nothing to load that could refuse the run: the controller started its workers, then loaded the kernels
    # (conformance.plugin.spawn), and chose --dist after that as before the start
    assert w["controller_kernels_loaded_s"] > 0, w
    assert "conformance: --dist worksteal (chosen by the plugin" in out, out[:3000]


KERNEL_PARAM_FILE = '''
import pytest
from conformance import registry

registry.load_all()

@pytest.mark.parametrize("kernel", registry.all_kernels(), ids=lambda k: k.name)
def test_by_object(kernel):
    pass

@pytest.mark.parametrize("kernel_name", ["triton_w4a16", "rdna3_w4a16"])
def test_by_name(kernel_name):
    pass

def test_unparametrized():
    pass
'''


def test_kernel_selection_narrows_kernel_parametrized_tests(tmp_path):
    """--conformance-kernels deselects contract-style tests (a `kernel` or `kernel_name` parameter) of other
    kernels; tests without such a parameter stay. Run with `-p no:xdist`: the plugin registers its xdist hooks only
    when xdist is active (a module-level xdist hook was an INTERNALERROR `unknown hook` without it)."""
    (tmp_path / "test_kp.py").write_text(KERNEL_PARAM_FILE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = warm_python.run([sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-q", "--collect-only",
                        "-p", "no:cacheprovider", "-p", "no:xdist", "--conformance-kernels", "triton_w4a16",
                        "test_kp.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    ids = sorted(line.split("::")[1] for line in p.stdout.splitlines() if "::" in line)
    assert ids == ["test_by_name[triton_w4a16]", "test_by_object[triton_w4a16]", "test_unparametrized"], p.stdout
