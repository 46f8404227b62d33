"""The plugin's pytest-xdist hooks, on their own plugin object registered (by pytest_configure) only when xdist is
active: pytest refuses a hook it has no spec for, so with `-p no:xdist` (or xdist not installed) a module-level
`pytest_testnodedown` would stop every run with INTERNALERROR `unknown hook`."""
from __future__ import annotations

import pytest

from conformance.plugin import prewarm, scheduler, spawn, threads
from conformance.plugin.crash import crashed_item, node_down

NAME = "conformance-xdist"  # the plugin object's name in config.pluginmanager


def configure_node(node) -> None:
    """xdist controller (pytest_configure_node): hand the run seed (a random nightly seed must be the same everywhere),
    the thread share and the prewarm directory to each worker."""
    st = getattr(node.config, "_conformance", None)
    if st is not None:
        node.workerinput["conformance_seed"] = st.seed
        node.workerinput["conformance_seed_source"] = st.seed_source
        node.workerinput[threads.WORKERINPUT_KEY] = st.threads  # each worker applies the controller's share
        node.workerinput["conformance_replays"] = st.replays  # the replay file as the controller read it
        node.workerinput[prewarm.WORKERINPUT_KEY] = prewarm.worker_input(node.config)  # None: off
        node.workerinput[spawn.WORKERINPUT_KEY] = spawn.pending(node.config)  # each worker chooses --dist alike


class XdistHooks:
    """Controller-side xdist hooks; each delegates to the function that owns the concern."""

    def pytest_configure_node(self, node):
        configure_node(node)

    def pytest_testnodedown(self, node, error):
        node_down(node, error)

    def pytest_xdist_node_collection_finished(self, node, ids):
        st = getattr(node.config, "_conformance", None)  # the planned items: every worker collects the same ids
        if st is not None:
            ids = () if node.config.option.collectonly else ids  # --collect-only plans no test run
            st.planned = set(ids) if st.planned is None else st.planned | set(ids)

    def pytest_xdist_make_scheduler(self, config, log):
        return scheduler.make_scheduler(config, log)  # loadgroup / loadscope: crash-and-replace safe; else xdist's

    @pytest.hookimpl(optionalhook=True)  # a newer xdist hook: older xdist versions lack its spec
    def pytest_handlecrashitem(self, crashitem, report, sched):
        crashed_item(crashitem, report, sched)


def register(config) -> None:
    """Register XdistHooks when xdist is active (its plugin is loaded), once per config."""
    pm = config.pluginmanager
    if pm.hasplugin("xdist") and pm.get_plugin(NAME) is None:
        pm.register(XdistHooks(), NAME)
