"""Root conftest: loads the conformance pytest plugin (options, fixtures, summary, reports), and schedules the
few long subprocess tests first so that under `pytest -n auto` no worker starts one of them last while the other
workers sit idle (the order of the rest is unchanged; every worker collects the same order, as xdist requires)."""
pytest_plugins = ["conformance.pytest_plugin"]

# test files whose tests each run a whole pytest or validate subprocess (tens of seconds on 2 cores)
LONG_FIRST = ("tests/conformance/test_determinism.py", "tests/unit/test_wheel.py", "tests/unit/test_plugin_kernels.py",
              "tests/unit/test_timeout.py", "tests/unit/test_error_profile.py", "tests/unit/test_validate.py",
              "tests/unit/test_bisect.py", "tests/unit/test_bench_gpu_runs.py", "tests/unit/test_plugin.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FIRST)))  # stable: others keep order
