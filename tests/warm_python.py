"""`python -m MOD ...`, `python -c CODE ...` and `python SCRIPT ...` for the tests, started from a warm interpreter.

A Python process that imports torch and Triton spends about 2 CPU-s on that before it does anything, and the README's
test command starts dozens of them (the CLI's exit codes, plugin imports, whole pytest runs of the suite): on the
2-core CI machine a sizeable share of its time. `run` takes the arguments of `subprocess.run` and returns its
`CompletedProcess` (or raises its `TimeoutExpired`), but the process is forked from a warm interpreter of this test
process (started on first use, with torch and Triton imported and nothing of ours), so the imports are paid once.

What the forked process sees is what a fresh `python` started with the same arguments sees: its own pid and exit status,
the given cwd, environment (os.environ and the C environment), argv, sys.path (the script's directory or the cwd first,
then PYTHONPATH, then the interpreter's own entries), stdin/stdout/stderr as pipes (stdin empty unless `input` is
given), a fresh `__main__`, the interpreter's own exit (an uncaught exception prints its traceback, with one frame of
the warm interpreter's above it, and exits 1; non-daemon threads are joined, atexit handlers run, open files and stdio
are flushed), and none of our modules imported. The exit leaves out one thing a fresh interpreter does: tearing down its
modules (objects alive at exit are not finalized, as at os._exit), which in a forked child writes to every page it
shares with the warm interpreter (0.49 CPU-s for a command that does nothing, 0.06 without it; more than the rest of a
short one). The pytest-xdist workers of a forked `pytest -n N` start from the warm interpreter too: execnet's start line
for them goes through tests/warm_launch.py, which hands the worker's command to the warm interpreter of this test
process whose start-up environment is the worker's (none: the launcher becomes a real interpreter). Where a fresh
interpreter would read its environment at start-up or at `import torch` (PYTHON*, OMP_*/MKL_* thread counts, TORCH_*,
CUDA_*, locale, ...), the warm interpreter was started with the same values: there is one per such environment (two in
practice). Two things are shared by the processes of one warm interpreter: the str hash seed (each fresh process draws
its own; these share one random draw, unless PYTHONHASHSEED fixes it) and the memory state torch's import leaves. Only
plain `python` command lines are forked (no interpreter option such as -I, -S or -X), with their output captured;
anything else, and anything passed that `run` does not know (shell=, stdout=, ...), runs as a real `subprocess.run`.
CONFORMANCE_TESTS_COLD_PYTHON=1 sends every command there (to tell a difference apart). Tests whose subject is a fresh
interpreter's start-up (what `import kernels` finds, what an interpreter does at exit) call `subprocess.run` themselves.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

COLD_ENV = "CONFORMANCE_TESTS_COLD_PYTHON"
# environment read by the interpreter or by what the warm interpreter has imported, at start-up or import time
# (TRITON_INTERPRET: `@triton.jit` reads it when it decorates, and triton.language decorates its own functions on
# import, so a command run with another value than the warm interpreter's gets interpreted library functions in a
# compile: Triton 3.9 then fails an assertion; other TRITON_* knobs are read when used; not TORCHINDUCTOR_*:
# `import torch` leaves Inductor unloaded)
_STARTUP_PREFIXES = ("PYTHON", "TORCH_", "PYTORCH", "CUDA", "NVIDIA", "HIP", "ROCM", "HSA", "OMP_", "KMP_", "MKL",
                     "GOMP", "OPENBLAS", "LD_", "MALLOC", "LC_", "LANG", "TRITON_INTERPRET")
_NOT_KEY = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")  # applied by each command itself
_PRELOAD = ("torch", "triton", "triton.language", "numpy")
LAUNCHER = Path(__file__).resolve().with_name("warm_launch.py")

# The warm interpreter: imports what every test's Python process imports, then forks one child per request. The
# child leaves the loop and runs the command as the main program of this interpreter, so that its exit (SystemExit,
# an uncaught exception, atexit, thread joins) is the interpreter's own.
_SERVER = r"""
import os, socket, sys, json, types, runpy, select, signal
for _m in sys.argv[2].split(","):
    __import__(_m)
_base = list(sys.path[1:])
# what the imports made, out of the collector's reach: a child's collections then leave those pages shared (with
# the modules' teardown, a forked child's exit took ~0.9 CPU-s of copy-on-write faults with them, ~0.4 without)
import gc
gc.freeze()
_sock = socket.socket(fileno=int(sys.argv[1]))
_NAME, _LAUNCHER, _TOKEN, _KEY = sys.argv[3], sys.argv[4], sys.argv[5], json.loads(sys.argv[6])


def _send(conn, obj):
    try:
        conn.send(json.dumps(obj).encode() + b"\n")
    except OSError:  # the launcher has gone
        pass


def _serve():
    # requests come from the test process (_sock, one at a time) and from launchers (tests/warm_launch.py: the
    # xdist workers of a command forked here), each a child reaped here, its exit and CPU sent to whoever asked
    try:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind("\0" + _NAME)
        listener.listen(64)
    except OSError:  # no abstract sockets here: launchers find none and start real interpreters
        listener = None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    top, nested_cpu = None, 0.0
    conns = {}  # launcher connection -> its command's pid (None until its request came)
    while True:
        ready = select.select([_sock, wake_r, *conns] + ([listener] if listener else []), [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        while True:  # reap: every exit goes to its asker, with the CPU of its own waited-for children
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            cpu = ru.ru_utime + ru.ru_stime
            done = {"status": os.waitstatus_to_exitcode(status)}
            if pid == top:  # the launches made while it ran are its CPU too (its process never waits for them)
                _sock.sendall(json.dumps(dict(done, cpu_s=cpu + nested_cpu)).encode() + b"\n")
                top, nested_cpu = None, 0.0
                continue
            nested_cpu += cpu
            for c, p in list(conns.items()):
                if p == pid:
                    _send(c, dict(done, cpu_s=cpu))
                    c.close()
                    del conns[c]
        for c in [c for c in ready if c in conns]:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(c, 1 << 20, 3)
            except OSError:  # a launcher gone mid-request: as its end
                msg, fds = b"", []
            if conns[c] is not None:  # a launcher that ended before its command: the command ends too
                if not msg:
                    os.kill(conns[c], signal.SIGKILL)  # reaped above later; its CPU counts, no one to tell
                    c.close()
                    del conns[c]
                continue
            if not msg or json.loads(msg)["key"] != _KEY:
                if msg:
                    _send(c, {"refused": "another start-up environment"})
                for fd in fds:
                    os.close(fd)
                c.close()
                del conns[c]
                continue
            pid = os.fork()
            if pid == 0:
                return _child(listener, (wake_r, wake_w), conns, fds, msg)
            for fd in fds:
                os.close(fd)
            conns[c] = pid
            _send(c, {"pid": pid})
        if listener is not None and listener in ready:
            conns[listener.accept()[0]] = None
        if _sock in ready:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(_sock, 1 << 20, 3)
            except OSError:
                msg = b""
            if not msg:
                os._exit(0)  # the test process has gone
            top = os.fork()
            if top == 0:
                return _child(listener, (wake_r, wake_w), conns, fds, msg)
            for fd in fds:
                os.close(fd)
            _sock.sendall(json.dumps({"pid": top}).encode() + b"\n")


def _child(listener, wake, conns, fds, msg):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for s in (_sock, listener, *conns):
        if s is not None:
            s.close()
    for fd in wake:
        os.close(fd)
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    return json.loads(msg)


def _launch_workers_here():
    # a popen gateway (an xdist worker) of this command starts from this warm interpreter, through the launcher
    try:
        import execnet.gateway_io as gio
    except ImportError:
        return
    plain = gio.popen_args

    def popen_args(spec, _plain=plain):
        args = _plain(spec)
        return args if spec.python else [args[0], "-S", _LAUNCHER, _TOKEN, *args[1:]]

    gio.popen_args = popen_args


_req = _serve()
_launch_workers_here()
sys.modules["__main__"] = types.ModuleType("__main__")  # the command's own, as in a fresh interpreter
os.chdir(_req["cwd"])
os.environ.clear()
os.environ.update(_req["env"])
_argv = _req["argv"]
while _argv[0] in ("-u", "-B"):  # the options an xdist worker's start line has (execnet's popen_args)
    if _argv[0] == "-u":
        import io
        for _fd, _name in ((1, "stdout"), (2, "stderr")):
            _old = getattr(sys, _name)
            _new = io.TextIOWrapper(io.FileIO(_fd, "w", closefd=False), encoding=_old.encoding, errors=_old.errors,
                                    write_through=True)
            setattr(sys, _name, _new)
            setattr(sys, "__" + _name + "__", _new)
    else:
        sys.dont_write_bytecode = True
    _argv = _argv[1:]
_extra = [p for p in _req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
sys.orig_argv = [sys.executable, *_req["argv"]]
sys.dont_write_bytecode = sys.dont_write_bytecode or bool(_req["env"].get("PYTHONDONTWRITEBYTECODE"))
del _sock, _serve, _child, _launch_workers_here


def _exit_status(e):
    # the status Python gives a SystemExit reaching the top (its message, when not an int, to stderr)
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _end(status, sig=None):
    # the interpreter's exit as a program sees it (its threads joined, atexit, open files and stdio flushed, a
    # failed flush exits 120, an uncaught KeyboardInterrupt ends by SIGINT), without the teardown of its modules:
    # in a forked child that writes to every page it shares with the warm interpreter (0.49 CPU-s of
    # copy-on-write faults for a command that does nothing, 0.06 without)
    import atexit, io, threading
    threading._shutdown()
    atexit._run_exitfuncs()
    files = [f for f in gc.get_objects() if isinstance(f, io.IOBase) and f not in (sys.stdout, sys.stderr)]
    for f in sorted(files, key=lambda f: not isinstance(f, io.TextIOBase)):  # text layers first, then buffers
        try:
            if not f.closed and f.writable():
                f.flush()
        except Exception:
            pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            status = status or 120
    if sig is not None:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(status)


try:
    if _argv[0] == "-m":
        sys.path[:] = [os.getcwd(), *_extra, *_base]
        sys.argv = ["-m", *_argv[2:]]
        del _req, _extra
        runpy._run_module_as_main(_argv[1])
    elif _argv[0] == "-c":
        sys.path[:] = ["", *_extra, *_base]
        sys.argv = ["-c", *_argv[2:]]
        _main = sys.modules["__main__"].__dict__
        _main["__builtins__"] = __builtins__
        _code = compile(_argv[1], "<string>", "exec")
        del _req, _extra
        exec(_code, _main)
    else:
        sys.path[:] = [os.path.dirname(os.path.realpath(_argv[0])), *_extra, *_base]
        sys.argv = list(_argv)
        del _req, _extra
        runpy.run_path(_argv[0], run_name="__main__")
except SystemExit as _e:
    _end(_exit_status(_e))
except KeyboardInterrupt:
    sys.excepthook(*sys.exc_info())
    _end(1, signal.SIGINT)
except BaseException:
    sys.excepthook(*sys.exc_info())
    _end(1)
_end(0)
"""


class _Warm:
    """One warm interpreter, started with the environment of the first command it serves (less PYTHONPATH, which
    each command applies itself), and the socket to it."""

    def __init__(self, env: dict):
        mine, theirs = socket.socketpair()
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        key = _startup_key(env)
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(theirs.fileno()), ",".join(_PRELOAD),
                                      server_name(TOKEN, key), str(LAUNCHER), TOKEN, json.dumps(key)],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.sock = mine
        self.buf = b""

    def message(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"the warm interpreter ended (exit {self.proc.poll()})")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()  # it exits when its socket closes
        self.proc.wait()


# one warm interpreter per start-up environment (two or three in practice: the test process's own thread variables,
# none where a test clears them as a user's shell would, no PYTHON* where one clears those), the least recently used
# closed beyond MAX_WARM
MAX_WARM = 3
_pool: dict[tuple, _Warm] = {}
_lock = threading.Lock()
# commands run each way in this process (tests/unit/test_warm_python.py), and the forked commands' CPU seconds, which
# getrusage(RUSAGE_CHILDREN) of this process never sees (benchmarks/probes/cpu_per_file.py adds them)
stats = {"warm": 0, "cold": 0, "warm_cpu_s": 0.0}


@atexit.register
def _close_all() -> None:
    while _pool:
        _pool.popitem()[1].close()


def _startup_key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) and k not in _NOT_KEY))


# this process's warm interpreters, for the launchers of the commands they fork (tests/warm_launch.py)
TOKEN = secrets.token_hex(6)


def server_name(token: str, key) -> str:
    """The abstract socket (a name in the kernel's namespace: no file, gone with the process) where the warm
    interpreter of start-up environment `key` of the test process with `token` takes launches."""
    return f"conformance-warm-{token}-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}"


def _plain_python(cmd) -> bool:
    """`python -m MOD ...`, `python -c CODE ...` or `python SCRIPT ...`: no interpreter option."""
    if not isinstance(cmd, (list, tuple)) or len(cmd) < 2 or str(cmd[0]) != sys.executable:
        return False
    first = str(cmd[1])
    return len(cmd) >= 3 if first in ("-m", "-c") else not first.startswith("-")


def run(cmd, *, cwd=None, env=None, capture_output=False, text=False, timeout=None, input=None,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, cwd=, env=, capture_output=, text=, timeout=, input=): forked from a warm interpreter
    where that is the same as a fresh one (module doc), else a real subprocess.run."""
    env = dict(os.environ if env is None else env)
    if (os.environ.get(COLD_ENV) or kw or not capture_output or not _plain_python(cmd)
            or not _lock.acquire(blocking=False)):
        stats["cold"] += 1
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=capture_output, text=text, timeout=timeout,
                              input=input, **kw)
    try:
        key = _startup_key(env)
        warm = _pool.pop(key, None)
        if warm is None or warm.proc.poll() is not None:
            warm = _Warm(env)
        _pool[key] = warm  # most recently used last
        while len(_pool) > MAX_WARM:
            _pool.pop(next(iter(_pool))).close()
        stats["warm"] += 1
        return _forked(warm, [str(c) for c in cmd], cwd, env, text, timeout, input)
    finally:
        _lock.release()


def _forked(warm: _Warm, cmd: list[str], cwd, env: dict, text: bool, timeout, input) -> subprocess.CompletedProcess:
    deadline = None if timeout is None else time.monotonic() + timeout
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    req = {"argv": cmd[1:], "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()), "env": env}
    try:
        socket.send_fds(warm.sock, [json.dumps(req).encode()], [in_r, out_w, err_w])
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    data = input.encode() if isinstance(input, str) else (input or b"")
    chunks = {out_r: [], err_r: []}
    open_fds, writing = [out_r, err_r], [in_w]
    timed_out = False
    try:
        pid = warm.message()["pid"]
        if not data:
            writing.remove(in_w)
            os.close(in_w)
        while open_fds or writing:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                timed_out = True
                break
            r, w, _ = select.select(open_fds, writing, [], wait)
            for fd in r:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    chunks[fd].append(chunk)
                else:
                    open_fds.remove(fd)
                    os.close(fd)
            for fd in w:
                try:
                    data = data[os.write(fd, data[:1 << 16]):]
                except BrokenPipeError:  # the command stopped reading: as subprocess.run, not an error
                    data = b""
                if not data:
                    writing.remove(fd)
                    os.close(fd)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        done = warm.message()
        status = done["status"]
        stats["warm_cpu_s"] += done["cpu_s"]
    finally:
        for fd in (*open_fds, *writing):
            os.close(fd)
    out, err = b"".join(chunks[out_r]), b"".join(chunks[err_r])
    if text:
        out, err = (b.decode(errors="replace").replace("\r\n", "\n") for b in (out, err))
    if timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, status, out, err)
