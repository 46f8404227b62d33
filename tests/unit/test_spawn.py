"""conformance.plugin.spawn: when an xdist controller may start its workers before it loads torch and the kernels
(nothing it would load can refuse the run), and the --dist choice a worker makes for itself. The run itself (the
controller's kernels loaded after the session start, the choice printed) is judged on the shared -n 2 sample run
(tests/unit/test_plugin.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conformance.core import registry
from conformance.plugin import spawn

DEFAULTS = {"--conformance-plugin": [], "--conformance-kernels": None, "--conformance-case": None,
            "--conformance-no-entry-points": False, "collectonly": False}


def _config(worker=False, numprocesses=2, usepdb=False, **opts):
    values = dict(DEFAULTS, **opts)
    cfg = SimpleNamespace(option=SimpleNamespace(numprocesses=numprocesses, usepdb=usepdb),
                          getoption=lambda name, default=None: values.get(name, default))
    if worker:
        cfg.workerinput = {"workerid": "gw0"}
    return cfg


@pytest.fixture
def no_entry_points(monkeypatch):
    monkeypatch.setattr(registry, "installed_entry_points", lambda: [])
    monkeypatch.delenv(registry.PLUGIN_ENV, raising=False)
    monkeypatch.delenv(registry.NO_ENTRY_POINTS_ENV, raising=False)


@pytest.mark.parametrize("config,defers", [
    (_config(), True),
    (_config(numprocesses="auto"), True),
    (_config(worker=True), False),  # a worker runs tests: it loads first
    (_config(numprocesses=0), False),
    (_config(numprocesses=None), False),
    (_config(usepdb=True), False),  # xdist runs no workers under --pdb
    (_config(collectonly=True), False),
    (_config(**{"--conformance-plugin": ["my_kernels"]}), False),  # a plugin that fails to import: a usage error
    (_config(**{"--conformance-kernels": "triton_w4a16"}), False),  # names checked against the registry
    (_config(**{"--conformance-case": "w4a16/triton_w4a16/x"}), False),  # a case id checked against its family
], ids=["n2", "auto", "worker", "n0", "no-xdist", "pdb", "collect-only", "plugin", "kernels", "case"])
def test_defers_only_when_nothing_it_loads_can_refuse_the_run(config, defers, no_entry_points):
    assert spawn.defers(config) is defers


def test_plugins_from_the_environment_or_entry_points_load_first(no_entry_points, monkeypatch):
    monkeypatch.setenv(registry.PLUGIN_ENV, "my_kernels")
    assert spawn.defers(_config()) is False
    monkeypatch.delenv(registry.PLUGIN_ENV)
    monkeypatch.setattr(registry, "installed_entry_points", lambda: [SimpleNamespace(name="vendor", value="v:x")])
    assert spawn.defers(_config()) is False
    assert spawn.defers(_config(**{"--conformance-no-entry-points": True})) is True  # not loaded at all
    monkeypatch.setenv(registry.NO_ENTRY_POINTS_ENV, "1")
    assert spawn.defers(_config()) is True


def test_a_worker_of_a_pending_controller_makes_the_same_choice():
    cfg = SimpleNamespace(option=SimpleNamespace(loadgroup=None), workerinput={spawn.WORKERINPUT_KEY: True})
    spawn.worker_choice(cfg)
    assert cfg.option.loadgroup is (spawn.choose() == "loadgroup")
    untouched = SimpleNamespace(option=SimpleNamespace(loadgroup="as xdist set it"), workerinput={})
    spawn.worker_choice(untouched)  # the controller chose before the start (or the user did): xdist's flag stays
    assert untouched.option.loadgroup == "as xdist set it"


def test_this_xdist_keeps_the_restart_limit_where_the_plugin_sets_it_after_the_start():
    from xdist.dsession import DSession

    assert "_max_worker_restart" in DSession.__init__.__code__.co_names  # lifecycle._worker_restarts sets it
