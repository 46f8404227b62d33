"""How a pytest-xdist worker process ends: once its session has finished (its results and its final record count
are with the controller), it leaves with os._exit(0) as its last exit handler, skipping the interpreter's
finalization of its heap (torch, Triton, hypothesis, every collected item).

Why: the controller's teardown waits for every worker process to end, and a worker's finalization took seconds
(in a `pytest -n 2` run on the CI CPU the controller's own session finish came about 5 s after the workers had
reached their exit handlers, and 0.04 s after with this), in every xdist run: the README's, validate's, and each
one the tests start. A worker whose session did not finish (a crash, an internal error) exits the ordinary way.
Output streams and logging are flushed first; exit handlers registered after this one (everything a test or a
library registers later) still run before it.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys

_state = {"registered": False, "finished": False}


def _leave() -> None:
    if not _state["finished"]:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to flush
            pass
    logging.shutdown()
    os._exit(0)


def register() -> None:
    """Arm the fast exit in this process (once): call it early, so that its handler runs after all later ones."""
    if not _state["registered"]:
        atexit.register(_leave)
        _state["registered"] = True


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker; the controller and a single process exit as before
        register()


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        _state["finished"] = True
