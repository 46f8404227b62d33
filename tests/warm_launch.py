"""`python -S tests/warm_launch.py TOKEN ARGS...`: the process that stands for `python ARGS...` (an xdist worker's
start line) while a warm interpreter (tests/warm_python.py) forks the command itself.

A command forked from a warm interpreter starts its pytest-xdist workers through this launcher (the warm interpreter
puts it in front of execnet's popen command line), so a test's `pytest -n 2` pays the torch and Triton imports once, not
once per worker. The launcher hands its stdin, stdout and stderr and the request (ARGS, cwd, environment) to the warm
interpreter of the test process TOKEN whose start-up environment is its own (warm_python.server_name), lets go of the
three streams (so that the command's end is the end its caller sees), passes on the signals a caller sends (TERM, INT,
HUP, QUIT, USR1, USR2) and ends as the command ended: its exit status, or the same signal. Where the warm interpreter
refuses (its start-up environment is another, see warm_python) or cannot be reached, the launcher becomes the real
interpreter (exec) with ARGS: a fresh start, as without it. If the launcher is killed, the warm interpreter kills the
command. It imports the standard library and warm_python (which imports no more): it runs with -S, in about a
hundredth of a second."""
import json
import os
import signal
import socket
import sys

import warm_python  # this file's directory is first on sys.path


def main() -> None:
    token, argv = sys.argv[1], sys.argv[2:]
    key = warm_python._startup_key(os.environ)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect("\0" + warm_python.server_name(token, key))
        req = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "key": key}
        socket.send_fds(s, [json.dumps(req).encode()], [0, 1, 2])
        reply = json.loads(s.recv(1 << 16) or b'{"refused": "no reply"}')
    except OSError as e:
        reply = {"refused": str(e)}
    if "refused" in reply:
        s.close()
        os.execv(sys.executable, [sys.executable, *argv])
    pid = reply["pid"]
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
    for sig in handled:
        signal.signal(sig, lambda n, _frame: os.kill(pid, n))
    msg = s.recv(1 << 16)
    status = json.loads(msg)["status"] if msg else 1  # no reply: the warm interpreter has gone
    if status < 0:
        if -status in handled:
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
