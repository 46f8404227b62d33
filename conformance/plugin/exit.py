"""How a pytest process ends: once its session has finished (results sent to the controller, reports and the
terminal summary written), a pytest-xdist worker, and a pytest command-line process (`python -m pytest`, `pytest`),
leave with os._exit as their last exit handler, skipping the interpreter's finalization of their heap (torch,
Triton, hypothesis, every collected item). A worker exits 0 (its results are with the controller); a command-line
process exits with its session's final exit status, the code pytest would return.

Why: finalization cost seconds in every test process. In a `pytest -n 2` run on the CI CPU the controller's own
session finish came about 5 s after its workers had reached their exit handlers (0.05 s with this), and a `pytest
-n 0` process spent about 1.9 s after its last exit handler (most of it the full collection of the startup heap
that conformance/plugin/heap.py unfreezes at exit). The README's test run starts dozens of pytest processes.

Not armed (the ordinary exit): a session that did not finish (a crash, an internal error, a usage error), pytest
run in-process from other code (`pytest.main()`: the caller's process must go on), and any pytest session after
the first in a process. Output streams and logging are flushed first; exit handlers registered after this one
(everything a test or a library registers later) still run before it.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys

_state = {"armed": False, "config": None, "session": None, "finished": False}


def _leave() -> None:
    if not _state["finished"]:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to flush
            pass
    logging.shutdown()
    worker = hasattr(_state["config"], "workerinput")
    os._exit(0 if worker else int(_state["session"].exitstatus))


def _is_command_line(config) -> bool:
    """True when this config is the process's own pytest command (not pytest.main() called from other code)."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    cli = spec_name in ("pytest", "pytest.__main__") or os.path.basename(sys.argv[0] or "") in ("pytest", "py.test")
    args = getattr(getattr(config, "invocation_params", None), "args", None)
    return cli and args is not None and tuple(args) == tuple(sys.argv[1:])


def pytest_configure(config):
    if _state["armed"] or _state["config"] is not None:
        return  # a later session in the same process (pytester, a nested pytest.main): exits as before
    _state["config"] = config
    if hasattr(config, "workerinput") or _is_command_line(config):
        atexit.register(_leave)  # early: handlers registered later run before it
        _state["armed"] = True


def pytest_sessionstart(session):
    if session.config is _state["config"]:
        _state["session"] = session


def pytest_unconfigure(config):
    # after every pytest_sessionfinish hook: session.exitstatus is now what pytest returns
    if config is _state["config"] and _state["session"] is not None:
        _state["finished"] = True
