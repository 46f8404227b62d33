"""The root conftest schedules the long subprocess files first, in the order of the host: on a GPU host the one
measured longest there (the fault matrix) leads; a CPU host keeps its own order. The rest keep collection order."""
from types import SimpleNamespace

import pytest

import conftest


def _items(*paths):
    return [SimpleNamespace(nodeid=f"{p}::test_{i}") for i, p in enumerate(paths)]


@pytest.mark.parametrize("gpu", [False, True])
def test_long_files_lead_in_the_hosts_order(monkeypatch, gpu):
    from conformance.core import runtime

    monkeypatch.setattr(runtime, "gpu_present", lambda: gpu)
    items = _items("tests/unit/test_a.py", "tests/unit/test_fault_matrix.py", "tests/unit/test_b.py",
                   "tests/conformance/test_determinism.py", "tests/unit/test_prewarm.py")
    conftest.pytest_collection_modifyitems(None, None, items)
    files = [i.nodeid.split("::")[0].rsplit("/", 1)[1] for i in items]
    if gpu:
        assert files == ["test_fault_matrix.py", "test_determinism.py", "test_prewarm.py", "test_a.py", "test_b.py"]
    else:
        assert files == ["test_determinism.py", "test_fault_matrix.py", "test_a.py", "test_b.py", "test_prewarm.py"]
