"""Configuration and teardown: kernel loading, markers, option validation, the run's state and seed, the time limit
and hang hooks (the xdist-only hooks registered when xdist is active); the report header."""
from __future__ import annotations

import os
import tempfile

import pytest

from conformance.plugin import jit, spawn, threads, timeline, xdist_hooks
from conformance.plugin.crash import _HANG_DIR_ENV, _local_hang, _local_retire, _worker_hang, _worker_retire
from conformance.plugin.options import _check_options, _is_worker, _resolve_seed, _timeout_limit
from conformance.plugin.state import _State


def pytest_report_header(config):
    st = getattr(config, "_conformance", None)
    if st is None:
        return None
    from conformance.cases.seeds import describe

    lines = [f"conformance: profile {config.getoption('--conformance-profile')}, {describe(st.seed, st.seed_source)}"]
    if st.threads:
        lines.append(threads.header(st.threads))
    dist = _dist_line(config)
    if dist:  # the plugin chose it (conformance.plugin.spawn.dist_for): say so, it changes how xdist schedules
        lines.append(dist)
    return lines


def _dist_line(config) -> str | None:
    dist = getattr(config, "_conformance_dist", None)
    if not dist:
        return None
    why = ("kernels JIT-compile here, so the CI plan's cases sharing a compile key run on one worker"
           if dist == "loadgroup" else "nothing compiles here, so an idle worker takes queued tests from a busy one")
    return f"conformance: --dist {dist} (chosen by the plugin: {why}; pass --dist load to opt out)"



def pytest_configure(config):
    timeline.mark("configure")
    from conformance.cases import profiles
    from conformance.checks import timeout
    from conformance.core import workers

    # an xdist controller that loads nothing that could refuse the run starts its workers first: what needs torch
    # and the kernels follows after xdist's session start (conformance.plugin.spawn, finish_deferred)
    deferred = spawn.defers(config) and threads.distributes(config)
    # first, before any test work and before xdist spawns workers (they inherit the exported variables): this
    # process's share of the cores (a worker takes the controller's decision)
    thread_info = config.workerinput.get(threads.WORKERINPUT_KEY) if _is_worker(config) else threads.decide(config)
    thread_undo = threads.apply(thread_info, controller=not _is_worker(config), torch_now=not deferred) \
        if thread_info else None
    # before anything touches CUDA (loading kernels probes it): one GPU per xdist worker on multi-GPU hosts
    config._conformance_gpu_pin = workers.pin_worker()
    if not deferred:
        _load_kernels(config)
        if spawn.pending(config):  # -n resolved to no workers after all (--pdb): nothing to wait for
            _choose_dist(config)
        spawn.worker_choice(config)
    # the suite's markers, registered here so the shipped suite runs from an installed wheel (no pyproject.toml)
    for line in ("conformance_family(name): the kernel family a suite test parametrizes over",
                 "conformance_cases(*cases): the Cases a test runs, fixed at collection (prewarm compiles their "
                 "programs first)",
                 "gpu: needs a CUDA/ROCm device (skipped with a reason elsewhere)",
                 "interop: checks against a third-party library that writes a format",
                 "slow: excluded from the ci profile"):
        config.addinivalue_line("markers", line)
    _check_options(config)
    jit_mode = None if deferred else jit.install()  # after the kernels loaded (TRITON_INTERPRET is decided then)
    profiles.load_profile(config.getoption("--conformance-profile"))
    config._conformance = st = _State()
    from conformance.plugin import exit as fast_exit
    from conformance.plugin import heap

    if not config.pluginmanager.is_registered(heap):
        config.pluginmanager.register(heap, "conformance-heap")  # gc.freeze() once started and collected
    from conformance.plugin import prewarm

    if not config.pluginmanager.is_registered(prewarm):
        config.pluginmanager.register(prewarm, "conformance-prewarm")  # a worker's share of the compiles first
    if not config.pluginmanager.is_registered(fast_exit):
        config.pluginmanager.register(fast_exit, "conformance-exit")  # an xdist worker skips finalization at exit
    st.threads, st.threads_undo = thread_info, thread_undo
    st.jit_mode = jit_mode
    xdist_hooks.register(config)
    st.seed, st.seed_source = _resolve_seed(config)
    if _is_worker(config):
        st.replays = config.workerinput.get("conformance_replays")
    else:
        from conformance.cases.replays import read_replays

        st.replays = read_replays()  # once per run: every worker collects the same replayed cases
        from conformance.cases.seeds import commit_sha

        st.commit = commit_sha(str(config.rootpath))
    timeout.configure(_timeout_limit(config), propagate=True)
    from conformance.checks import guard

    if _is_worker(config):
        timeout.on_hang(lambda info, seconds: _worker_hang(config, info, seconds), key="pytest")
        guard.on_retire(lambda record: _worker_retire(config, record), key="pytest")
    else:
        guard.on_retire(lambda record: _local_retire(config, record), key="pytest")
        if not deferred:
            _worker_restarts(config)
        st.hang_dir = tempfile.mkdtemp(prefix="conformance-hang-")
        os.environ[_HANG_DIR_ENV] = st.hang_dir  # xdist workers start after this and inherit it
        timeout.on_hang(lambda info, seconds: _local_hang(config, info, seconds), key="pytest")
    if deferred and config.pluginmanager.get_plugin(_FinishAfterStart.NAME) is None:
        config.pluginmanager.register(_FinishAfterStart(), _FinishAfterStart.NAME)
    timeline.mark("configured")


class _FinishAfterStart:
    """Registered on a deferring controller: finish_deferred once xdist's session start has started the workers."""

    NAME = "conformance-finish-after-start"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_sessionstart(self, session):
        yield
        finish_deferred(session.config)


def _load_kernels(config) -> None:
    import time

    from conformance.core import registry

    try:
        registry.load_all(config.getoption("--conformance-plugin"),
                          entry_points=False if config.getoption("--conformance-no-entry-points") else None)
    except registry.RegistryError as e:
        raise pytest.UsageError("--conformance-plugin: " + " ".join(str(e).splitlines())) from None
    config._conformance_kernels_loaded = time.time()  # the report's workers.controller_kernels_loaded_s


def _choose_dist(config) -> None:
    """The plugin's pending --dist choice, made here (spawn.dist_for); the controller's scheduler follows it."""
    dist = spawn.choose()
    setattr(config, spawn.PENDING_ATTR, False)
    if dist:
        config.option.dist = dist
        config._conformance_dist = dist  # the header says the plugin chose it


def finish_deferred(config) -> None:
    """A deferring controller, after xdist started the workers: the kernels, the JIT hooks, torch's thread count,
    the restart limit and the pending --dist choice (told on the terminal: the header was printed before it)."""
    st = getattr(config, "_conformance", None)
    if st is None:
        return
    _load_kernels(config)
    if st.timeline is not None:
        st.timeline.kernels_loaded = config._conformance_kernels_loaded
    st.jit_mode = jit.install()
    if st.threads:
        threads.apply_torch(st.threads, st.threads_undo)
    _worker_restarts(config)
    if spawn.pending(config):
        _choose_dist(config)
        tr = config.pluginmanager.getplugin("terminalreporter")
        line = _dist_line(config)
        if tr is not None and line and tr.showheader and not tr.no_header:  # where the header would have said it
            tr.write_line(line)


def _worker_restarts(config) -> None:
    """xdist stops a run after 4 x workers worker restarts unless --max-worker-restart is given. The crash breaker
    (conformance.checks.guard) bounds the crashes of each kernel (its limit, plus one per other worker that was in
    the kernel's call at the same time), so leave room for every kernel under test to use them: xdist's own limit is
    then never what ends a run. An explicit --max-worker-restart wins."""
    n = getattr(config.option, "numprocesses", None)
    if not isinstance(n, int) or n <= 0 or getattr(config.option, "maxworkerrestart", "") is not None:
        return
    from conformance.checks import guard
    from conformance.core import registry

    opt = config.getoption("--conformance-kernels")
    kernels = len([s for s in opt.split(",") if s.strip()]) if opt else len(registry.all_kernels())
    config.option.maxworkerrestart = str(4 * n + (guard.crash_limit() + n) * kernels)
    dsession = config.pluginmanager.getplugin("dsession")  # created already (a deferring controller): it read the
    if dsession is None:                                   # option then
        return
    if hasattr(dsession, "_max_worker_restart"):
        dsession._max_worker_restart = int(config.option.maxworkerrestart)
    else:
        import sys

        sys.stderr.write(f"conformance: this pytest-xdist keeps its worker-restart limit where the plugin cannot set "
                         f"it after the workers started: xdist's own limit applies; pass --max-worker-restart "
                         f"{config.option.maxworkerrestart} for the plugin's\n")


def pytest_unconfigure(config):
    from conformance.checks import timeout

    timeout.configure(None, propagate=False)  # in-process callers after this run get no limit
    timeout.on_hang(None, key="pytest")
    from conformance.checks import guard

    guard.on_retire(None, key="pytest")
    st = getattr(config, "_conformance", None)
    if st is not None:
        threads.restore(st.threads_undo)
    if st is not None and st.hang_dir and not _is_worker(config):
        import shutil

        shutil.rmtree(st.hang_dir, ignore_errors=True)
        if os.environ.get(_HANG_DIR_ENV) == st.hang_dir:
            del os.environ[_HANG_DIR_ENV]


