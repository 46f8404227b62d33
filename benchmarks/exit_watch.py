"""pytest plugin for runs that must end on their own (`-p benchmarks.exit_watch`, used by run_gpu.sh gemlite5):
at pytest_unconfigure, in the controller and in every xdist worker, it prints one line naming the threads still
alive (a non-daemon one keeps the interpreter from exiting) and arms faulthandler to dump every thread's stack to
stderr if the process is still there EXIT_WATCH_S seconds later (a hang in Python's exit: thread joins, atexit
hooks); a process that exits before then prints nothing more. It changes nothing else."""
from __future__ import annotations

import faulthandler
import os
import sys
import threading

EXIT_WATCH_S = float(os.environ.get("EXIT_WATCH_S", "20"))


def alive_threads() -> list[str]:
    """'name (daemon|NON-DAEMON)' for every live thread but the main one."""
    return [f"{t.name} ({'daemon' if t.daemon else 'NON-DAEMON'})" for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive()]


def pytest_unconfigure(config):
    # this process's own role: a pytest run started inside an xdist worker inherits PYTEST_XDIST_WORKER from it
    who = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
    print(f"exit_watch[{who} pid {os.getpid()}]: threads alive at unconfigure: {', '.join(alive_threads()) or 'none'}",
          file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(EXIT_WATCH_S, exit=False, file=sys.stderr)
