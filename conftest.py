"""Root conftest: loads the conformance pytest plugin (options, fixtures, summary, reports), and schedules the
few long tests (subprocess tests; the suite's GPU-long files) first so that under `pytest -n auto` no worker starts
one of them last while the other workers sit idle (the order of the rest is unchanged; every worker collects the
same order, as xdist requires)."""
import os
import sys
import tempfile

import pytest

pytest_plugins = ["conformance.pytest_plugin"]

# Bytecode for this test run. Under PYTHONDONTWRITEBYTECODE=1 (set on some CI images) every Python process the
# run starts (the xdist workers, and the pytest, validate, repro and bisect subprocesses the tests start: dozens)
# recompiles our modules and pytest re-rewrites every test module (seconds of CPU each, on 2 cores a sizeable share
# of the README's test command). So the run writes bytecode as Python does by default (into __pycache__, which
# git ignores), and the processes it starts inherit that. CONFORMANCE_TESTS_NO_BYTECODE=1 keeps the caller's choice.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("CONFORMANCE_TESTS_NO_BYTECODE"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.dont_write_bytecode = False

# test files whose tests each run a whole pytest or validate subprocess (tens of seconds on 2 cores)
LONG_FIRST = ("tests/conformance/test_determinism.py", "tests/unit/test_wheel.py", "tests/unit/test_plugin_kernels.py",
              "tests/unit/test_timeout.py", "tests/unit/test_error_profile.py", "tests/unit/test_validate.py",
              "tests/unit/test_bisect.py", "tests/unit/test_bench_gpu_runs.py", "tests/unit/test_plugin.py",
              "tests/unit/test_fault_matrix.py",
              # the suite's longest tests on a GPU (tile rows, compile checks)
              "conformance/suite/test_tile_rows.py", "conformance/suite/test_contracts.py")
# where kernels compile (a GPU host), the files longest there lead, then the rest in the order above: the slowest tests
# of the README's run on two H100s (benchmarks/results/h100/gpu_ci.json, 08c8070 and 70e845c): the fault matrix, whose
# hang faults each wait out a 5 s limit there, 26-38 s; the determinism runs 15-24 s; prewarm's GPU check 14-19 s;
# the installed wheel 12-20 s. On a CPU host (workers steal work there) the order above stays.
GPU_LEAD = ("tests/unit/test_fault_matrix.py", "tests/conformance/test_determinism.py", "tests/unit/test_prewarm.py",
            "tests/unit/test_wheel.py")
LONG_FIRST_GPU = GPU_LEAD + tuple(p for p in LONG_FIRST if p not in GPU_LEAD)


def pytest_collection_modifyitems(session, config, items):
    from conformance.core.runtime import gpu_present

    order = LONG_FIRST_GPU if gpu_present() else LONG_FIRST
    rank = {path: i for i, path in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(order)))  # stable: others keep order


# Temporary files of the pytest runs a test starts. A pytest process left to itself makes a numbered directory under
# the machine's /tmp/pytest-of-<user> and deletes the oldest ones there: a test's subprocess run would write outside
# its test's temporary tree and delete directories it did not make (a user's earlier run's). So each pytest process of
# a test run names its temporary root in TMP_ROOT_ENV, and a pytest process that finds it set (a run a test started,
# directly or through validate, with the parent's environment) takes a fresh directory under it as its --basetemp
# (pytest then makes and deletes nothing else). A run started with --basetemp keeps it.
TMP_ROOT_ENV = "CONFORMANCE_TESTS_TMP_ROOT"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    parent = os.environ.get(TMP_ROOT_ENV)
    if parent and config.option.basetemp is None and os.path.isdir(parent) and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="subrun-", dir=parent)


def pytest_sessionstart(session):
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        os.environ[TMP_ROOT_ENV] = str(factory.getbasetemp())
