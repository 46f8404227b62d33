"""Multi-GPU pinning: each pytest-xdist worker (gw0, gw1, ...) uses GPU (worker index % GPU count).

`pin_worker()` must run before anything initializes CUDA/HIP in the worker (the pytest plugin calls
it first thing in `pytest_configure`, before kernels are imported): then it narrows
CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES on ROCm) to one GPU, so `cuda:0` in that worker is its own
GPU and code that hard-codes `cuda:0` cannot wander onto a neighbour's. If CUDA is already
initialized the variable is ignored by the driver, so it falls back to `torch.cuda.set_device`.
"""
from __future__ import annotations

import os
import re

from references.errors import InvalidInput

DISABLE_ENV = "CONFORMANCE_PIN_GPU"  # set to 0 to leave device visibility alone


def worker_index(worker_id: str | None) -> int | None:
    """3 for 'gw3'; None outside pytest-xdist (no id, or 'master'); other ids are errors."""
    if worker_id in (None, "", "master"):
        return None
    m = re.fullmatch(r"gw(\d+)", worker_id)
    if m is None:
        raise InvalidInput("PYTEST_XDIST_WORKER", worker_id, "'gw' followed by a number, e.g. 'gw0'")
    return int(m.group(1))


def _visibility_var(environ) -> str:
    import torch

    if getattr(torch.version, "hip", None):
        # HIP honours both; narrow the one the user already set so their selection is respected
        return "CUDA_VISIBLE_DEVICES" if "CUDA_VISIBLE_DEVICES" in environ and \
            "HIP_VISIBLE_DEVICES" not in environ else "HIP_VISIBLE_DEVICES"
    return "CUDA_VISIBLE_DEVICES"


def pin_worker(environ=None) -> dict | None:
    """Pin this xdist worker to one GPU; returns what was done, or None when there is nothing to pin
    (not an xdist worker, fewer than two GPUs, or CONFORMANCE_PIN_GPU=0)."""
    env = os.environ if environ is None else environ
    if env.get(DISABLE_ENV, "1").strip() == "0":
        return None
    worker = env.get("PYTEST_XDIST_WORKER")
    idx = worker_index(worker)
    if idx is None:
        return None
    import torch

    # device_count() asks NVML/amdsmi before CUDA is initialized, so it does not freeze visibility
    count = torch.cuda.device_count()
    if count <= 1:
        return None
    device = idx % count  # more workers than GPUs: workers share GPUs round-robin
    info = {"worker": worker, "device_index": device, "device_count": count}
    var = _visibility_var(env)
    current = env.get(var)
    visible = [v.strip() for v in current.split(",") if v.strip()] if current else [str(i) for i in range(count)]
    if not torch.cuda.is_initialized() and len(visible) == count:
        env[var] = visible[device]
        info.update(method="env", variable=var, visible=visible[device])
    else:
        torch.cuda.set_device(device)
        info.update(method="set_device")
    return info


def describe(info: dict | None) -> str:
    """One line for the terminal summary / report."""
    if info is None:
        return "gpu pinning: not pinned (not an xdist worker, <2 GPUs, or disabled)"
    how = f"{info['variable']}={info['visible']}" if info["method"] == "env" else "torch.cuda.set_device"
    return f"gpu pinning: {info['worker']} -> GPU {info['device_index']} of {info['device_count']} ({how})"
