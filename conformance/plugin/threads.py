"""Worker thread share: each test process (every xdist worker, or the single process) gets its share of the usable
cores for torch's intra-op threads, OpenMP and MKL, so N workers do not each start one thread per core (on a 16-core
GPU machine 16 workers x 16 threads made the suite 9x slower).

share = max(1, usable cores // test processes); usable cores from os.sched_getaffinity (the cores this process may
run on, not the machine's count). The controller decides once, in pytest_configure, before xdist spawns workers:
it exports OMP_NUM_THREADS and MKL_NUM_THREADS = share for the workers to inherit (only when it distributes to
workers; a single process needs no export) and calls torch.set_num_threads(share); each worker takes the
controller's decision (handed over in its workerinput) and calls torch.set_num_threads in its own pytest_configure.
A user who set OMP_NUM_THREADS or MKL_NUM_THREADS wins: the plugin then sets no thread count at all, and the header
says which variable came from the environment. Recorded in the JSON report under "threads".
"""
from __future__ import annotations

import os

ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
WORKERINPUT_KEY = "conformance_threads"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), else the machine's count, at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def distributes(config) -> bool:
    """Whether xdist runs this session's tests in workers (after it resolved `-n`; not under --collect-only)."""
    opt = config.option
    return getattr(opt, "dist", "no") != "no" and bool(getattr(opt, "tx", None)) and \
        not getattr(opt, "collectonly", False)


def process_count(config) -> int:
    """How many processes run tests at once: xdist's workers when it distributes (the `-n`/`--tx` specs, after
    xdist resolved `-n auto`), else 1."""
    return len(config.option.tx) if distributes(config) else 1


def decide(config, environ=None, cores: int | None = None) -> dict:
    """The controller's decision (JSON-able): {"workers", "usable_cores", "share", "torch_threads" (None: left to
    torch, because the user set a variable), "env": {VAR: {"value", "source": "plugin"|"environment"}},
    "export": whether the plugin exports the variables (only when it distributes to workers)}."""
    environ = os.environ if environ is None else environ
    cores = usable_cores() if cores is None else cores
    workers = process_count(config)
    share = max(1, cores // workers)
    env = {}
    for var in ENV_VARS:
        user = environ.get(var, "").strip()
        env[var] = {"value": user, "source": "environment"} if user else {"value": str(share), "source": "plugin"}
    user_set = any(v["source"] == "environment" for v in env.values())
    return {"workers": workers, "usable_cores": cores, "share": share,
            "torch_threads": None if user_set else share, "env": env, "export": workers > 1}


def apply(info: dict, *, controller: bool, environ=None, torch_now: bool = True) -> dict:
    """Put the decision in force in this process; returns what to undo (unconfigure: an in-process pytest run must
    leave its caller's environment and torch threads as they were). torch_now False: the exports only, torch's
    thread count later (apply_torch; a controller that starts its workers before it imports torch)."""
    environ = os.environ if environ is None else environ
    undo = {"env": [], "torch_threads": None}
    if controller and info["export"]:
        for var, v in info["env"].items():
            if v["source"] == "plugin" and var not in environ:
                environ[var] = v["value"]  # before xdist spawns the workers: they inherit it
                undo["env"].append((var, v["value"]))
    if torch_now:
        apply_torch(info, undo)
    return undo


def apply_torch(info: dict, undo: dict) -> None:
    """torch's intra-op thread count from the decision (none when the user set a variable), noted in `undo`."""
    if info["torch_threads"] is not None:
        import torch

        undo["torch_threads"] = torch.get_num_threads()
        torch.set_num_threads(info["torch_threads"])


def restore(undo: dict | None, environ=None) -> None:
    """Undo apply(): drop the variables it exported (unless changed since) and restore torch's thread count."""
    if not undo:
        return
    environ = os.environ if environ is None else environ
    for var, value in undo["env"]:
        if environ.get(var) == value:
            del environ[var]
    if undo["torch_threads"] is not None:
        import torch

        torch.set_num_threads(undo["torch_threads"])


def header(info: dict) -> str:
    """`conformance: 2 workers x 1 thread (2 cores)`; a variable from the environment is named, and wins."""
    n, t = info["workers"], info["torch_threads"]
    who = f"{n} worker{'s' if n != 1 else ''}" if info["export"] else "1 process"
    user = [f"{var}={v['value']}" for var, v in info["env"].items() if v["source"] == "environment"]
    if t is None:
        omp = info["env"]["OMP_NUM_THREADS"]
        threads = f"{omp['value']} thread(s)" if omp["source"] == "environment" else "torch's default threads"
    else:
        threads = f"{t} thread{'s' if t != 1 else ''}"
    tail = f"; {', '.join(user)} from the environment wins: the plugin sets no thread count" if user else ""
    return f"conformance: {who} x {threads} ({info['usable_cores']} cores{tail})"
