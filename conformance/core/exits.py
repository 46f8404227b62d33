"""A kernel (or a plugin module being imported) that calls `os._exit` or `sys.exit` ends only its own call.

    with exits.intercepted():          # the guarded call path (conformance.checks.guard), plugin imports (registry)
        kernel.apply(operands, x)      # os._exit(3) / sys.exit(3) in here raise ExitCalled instead

Contract: inside `intercepted()`, on the thread that entered it, `os._exit(code)` raises `ExitCalled` instead of
ending the process, and a `SystemExit` leaving the body becomes `ExitCalled` (an Exception: the caller's error path
records it like any other kernel exception, naming the call). Other threads calling `os._exit` (a watchdog, a pytest
plugin's I/O thread) still end the process: `REAL_EXIT` is the original. Nested uses are fine. A real crash (a
signal: SIGSEGV, SIGKILL, abort) cannot be intercepted: conformance.checks.guard's crash breaker handles those.
"""
from __future__ import annotations

import os
import threading

REAL_EXIT = os._exit
_active: dict[int, int] = {}  # thread id -> nesting depth of intercepted()


class ExitCalled(Exception):  # noqa: N818 - named for what happened
    """Code under test called os._exit(code) or sys.exit(code); `how` says which."""

    def __init__(self, how: str, code):
        self.how, self.code = how, code
        super().__init__(f"{how}({code!r}) called: it would have ended the whole process")


def _exit(code):
    if _active.get(threading.get_ident()):
        raise ExitCalled("os._exit", code)
    REAL_EXIT(code)


class intercepted:  # noqa: N801 - used as `with exits.intercepted():`, like the context manager it was
    """os._exit and sys.exit inside the body raise ExitCalled (see the module doc). A plain class, not a generator:
    every gate call enters it (~10^5 times in a collection)."""

    __slots__ = ("tid",)

    def __enter__(self):
        self.tid = tid = threading.get_ident()
        _active[tid] = _active.get(tid, 0) + 1
        os._exit = _exit
        return self

    def __exit__(self, typ, value, tb):
        tid = self.tid
        _active[tid] -= 1
        if not _active[tid]:
            del _active[tid]
        if not _active:
            os._exit = REAL_EXIT
        if typ is not None and issubclass(typ, SystemExit):
            raise ExitCalled("sys.exit", value.code if value is not None else None) from None
        return False
