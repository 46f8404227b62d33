"""The garbage collector's view of a test process: what exists once pytest has started and collected (torch,
Triton, hypothesis, the kernels, the test items: some 200,000 objects that live until the process ends) is moved to
the permanent generation (`gc.freeze()`), so later collections scan only what the tests create.

Why: each full collection of that heap costs a fifth of a second on the CI CPU; collection and the tests trigger
them as they allocate, and pytest ends every session with five (its unraisable-exception sweep), in every process
a test run starts: the xdist workers and the dozens of pytest subprocesses the tests run. Frozen objects are still
alive and still reachable; what the tests create is collected as before, and pytest's sweep still finds their
unraisable exceptions. The process unfreezes at exit (atexit, before the interpreter's own final collection), so
shutdown frees everything as without it.
"""
from __future__ import annotations

import atexit
import gc

_registered = []


def freeze() -> None:
    """Move every object tracked now to the permanent generation; unfreeze at process exit (registered once)."""
    gc.freeze()
    if not _registered:
        atexit.register(gc.unfreeze)
        _registered.append(True)


def pytest_sessionstart(session):
    freeze()  # every process: the controller collects nothing, its heap is its imports


def pytest_collection_finish(session):
    freeze()  # the workers and a single process: the test modules and items too
