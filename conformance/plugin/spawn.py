"""Spawn first: an xdist controller starts its workers before it imports torch and loads the kernels.

The controller itself runs no test, yet its start (torch, Triton and the kernels imported, CUDA asked for a device:
1.6-3.1 s on the H100 hosts, 1.9 s on 2 CPU cores) came before xdist started the workers, which then paid their
own. When nothing it would load can refuse the run (`defers`: no plugin, entry point, kernel list or case id to
validate), the controller configures what the workers need without torch (thread share, seed, replays, run
directory, option checks), xdist starts them, and the rest (kernels, JIT hooks, torch threads, the restart limit,
the --dist choice) follows right after, while the workers start (conformance.plugin.lifecycle.finish_deferred,
after xdist's pytest_sessionstart). Also the plugin's --dist rule (`dist_for`): loadgroup where kernels compile,
worksteal elsewhere.

The --dist choice depends on whether kernels compile here (a GPU), which only torch can say: in that case the
controller leaves it pending (`pending`), xdist hands the workers its default, and each worker makes the same choice
for itself from its own torch (`worker_choice`, before it collects), as the controller does after the start, before
it builds its scheduler. Both ask the same machine the same question.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

PENDING_ATTR = "_conformance_dist_pending"  # config: the plugin's --dist choice waits for torch
WORKERINPUT_KEY = "conformance_dist_pending"


def defers(config) -> bool:
    """Whether this process may start its xdist workers before loading torch and the kernels: an xdist controller
    (-n N or auto) whose options ask it to load and validate nothing beyond the built-in kernels."""
    if hasattr(config, "workerinput") or config.getoption("collectonly", False):
        return False
    n = getattr(config.option, "numprocesses", None)
    if not n or getattr(config.option, "usepdb", False):
        return False
    if (config.getoption("--conformance-plugin") or config.getoption("--conformance-kernels") is not None
            or config.getoption("--conformance-case") is not None):
        return False
    from conformance.core import registry

    if os.environ.get(registry.PLUGIN_ENV, "").strip():
        return False
    no_entry_points = config.getoption("--conformance-no-entry-points") or \
        os.environ.get(registry.NO_ENTRY_POINTS_ENV, "") not in ("", "0")
    return no_entry_points or not registry.installed_entry_points()


def _has_worksteal() -> bool:
    try:
        from xdist.scheduler import WorkStealingScheduling  # noqa: F401 - pytest-xdist >= 3.2
    except ImportError:
        return False
    return True


def dist_for(option, compiles: bool, worksteal: bool | None = None) -> str | None:
    """The --dist the plugin picks when xdist runs workers (-n N, N > 0, or auto) and the user gave no --dist:
    "loadgroup" where kernels compile (a GPU: cases sharing a compile key on one worker); elsewhere (the
    interpreter, where grouping saves nothing) "worksteal" when this xdist has it: `load` hands each worker a first
    chunk of a quarter of its share, so the long subprocess tests scheduled first all land in one worker's chunk
    and the other worker runs out and idles at the end; worksteal lets an idle worker take queued tests. Else None
    (leave xdist's choice). `worksteal`: whether xdist has it (default: ask it)."""
    n = getattr(option, "numprocesses", None)
    if not n or getattr(option, "dist", "no") != "no" or getattr(option, "distload", False):
        return None
    if compiles:
        return "loadgroup"
    return "worksteal" if (_has_worksteal() if worksteal is None else worksteal) else None


def pending(config) -> bool:
    return bool(getattr(config, PENDING_ATTR, False))


def compiles_here() -> bool:
    """Whether Triton kernels JIT-compile in this process (a GPU, not the interpreter), as runtime.configure_triton
    decides; imports torch."""
    from conformance.core.interpreter_fixes import interpreting
    from conformance.core.runtime import gpu_present

    return not interpreting() and gpu_present()


def choose() -> str | None:
    """The plugin's --dist for this machine (dist_for's rule, for a run given no --dist), asked of torch here."""
    return dist_for(SimpleNamespace(numprocesses=2, dist="no", distload=False), compiles=compiles_here())


def worker_choice(config) -> None:
    """A worker of a controller whose choice was pending: xdist's loadgroup flag from the same choice, before
    collection (xdist's worker adds each item's group to its node id under it)."""
    if hasattr(config, "workerinput") and config.workerinput.get(WORKERINPUT_KEY):
        config.option.loadgroup = choose() == "loadgroup"
