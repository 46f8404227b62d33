"""GPU pinning of pytest-xdist workers, with simulated device counts (no GPU needed)."""
import pytest
import torch

from conformance.core import workers
from references.errors import InvalidInput


@pytest.fixture
def gpus(monkeypatch):
    """Simulate `n` GPUs; returns the list of set_device calls made."""
    calls = []

    def setup(n, initialized=False, hip=None):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
        monkeypatch.setattr(torch.cuda, "set_device", calls.append)
        monkeypatch.setattr(torch.version, "hip", hip)
        return calls

    return setup


@pytest.mark.parametrize("wid,expect", [("gw0", 0), ("gw7", 7), ("gw12", 12), (None, None), ("master", None)])
def test_worker_index(wid, expect):
    assert workers.worker_index(wid) == expect


def test_bad_worker_id_is_a_clear_error():
    with pytest.raises(InvalidInput, match="PYTEST_XDIST_WORKER='worker1'"):
        workers.worker_index("worker1")


@pytest.mark.parametrize("wid,n,device", [("gw0", 4, "0"), ("gw3", 4, "3"), ("gw5", 4, "1"), ("gw2", 2, "0")])
def test_worker_narrows_visible_devices_round_robin(gpus, wid, n, device):
    calls = gpus(n)
    env = {"PYTEST_XDIST_WORKER": wid}
    info = workers.pin_worker(env)
    assert env["CUDA_VISIBLE_DEVICES"] == device
    assert info["method"] == "env" and info["device_index"] == int(device) and calls == []


def test_existing_visibility_list_is_respected(gpus):
    gpus(4)
    env = {"PYTEST_XDIST_WORKER": "gw2", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    workers.pin_worker(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "6"


def test_rocm_uses_hip_visible_devices(gpus):
    gpus(8, hip="6.2")
    env = {"PYTEST_XDIST_WORKER": "gw9"}
    info = workers.pin_worker(env)
    assert env == {"PYTEST_XDIST_WORKER": "gw9", "HIP_VISIBLE_DEVICES": "1"}
    assert "HIP_VISIBLE_DEVICES=1" in workers.describe(info)


def test_after_cuda_init_falls_back_to_set_device(gpus):
    calls = gpus(4, initialized=True)
    env = {"PYTEST_XDIST_WORKER": "gw6"}
    info = workers.pin_worker(env)
    assert calls == [2] and "CUDA_VISIBLE_DEVICES" not in env and info["method"] == "set_device"


@pytest.mark.parametrize("env,n", [
    ({}, 4),                                                      # not an xdist worker
    ({"PYTEST_XDIST_WORKER": "gw1"}, 1),                          # one GPU: nothing to choose
    ({"PYTEST_XDIST_WORKER": "gw1"}, 0),                          # cpu machine
    ({"PYTEST_XDIST_WORKER": "gw1", "CONFORMANCE_PIN_GPU": "0"}, 4),  # switched off
])
def test_nothing_to_pin(gpus, env, n):
    calls = gpus(n)
    before = dict(env)
    assert workers.pin_worker(env) is None
    assert env == before and calls == []
    assert "not pinned" in workers.describe(None)
