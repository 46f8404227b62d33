"""Per-case time limit for kernel calls: a hung kernel fails its own case, the run goes on.

    timeout.configure(limit_s=60, propagate=True)    # the pytest plugin (per profile) and `repro --timeout`
    with timeout.deadline():                          # Execution.call wraps every apply/model call in this
        out = kernel.apply(operands, x)

Contract:
- `deadline()` arms SIGALRM (signal.setitimer) for the configured limit when called in the main thread; on
  expiry the handler raises `CaseTimeout`, a BaseException: hypothesis does not treat it as a failing example
  (no shrinking, no replay of the hanging case) and the harness's `except Exception` does not swallow it.
  This interrupts Python-level loops, including Triton's interpreter, `time.sleep` and lock waits.
- `harness.run_case` catches CaseTimeout, records the case's verdict (outcome `error`, detail
  `timeout after N s`, with case id and replay line) and re-raises it (attached as `.verdict`) when
  `propagates()` (inside pytest, so that test fails at once), else returns the verdict (repro, profiles).
- A hang Python cannot interrupt (native code that never returns to the interpreter, or a kernel that
  swallows the exception) is caught by a watchdog thread: after the limit plus `grace_s` it calls the
  hooks registered with `on_hang` (the pytest plugin writes what it can), prints one line to stderr and
  ends the process with `os._exit(EXIT_HUNG)`; under xdist the controller then reports the crashed worker.
- Nested deadlines: the outermost one governs. No limit configured (None or 0): `deadline()` does nothing.
- Off the main thread (no signals there) only the watchdog guards the call.
- One time limit per kernel per process: `deadline(key=KERNEL)` remembers the first timeout of KERNEL in this
  process (what `set_current` named: case id, replay line). From then on `deadline(key=KERNEL)` and
  `refuse_if_hung(KERNEL)` raise `EarlierHang` (a CaseTimeout, so it is recorded and propagates the same way) at
  once, without running anything: a hung kernel costs one limit per xdist worker, not one per case, and each of
  its later cases still gets its own `error` record naming the first hang. Other kernels are untouched.
  `forget_hangs()` clears the memory (tests that hang a kernel on purpose).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

# default per-case limits by run profile (seconds): generous, a hang is minutes, a slow interpreter case seconds
PROFILE_LIMITS = {"ci": 60.0, "nightly": 300.0, "exhaustive": 900.0}
REPRO_DEFAULT_S = 300.0
DEFAULT_GRACE_S = 10.0
GRACE_ENV = "CONFORMANCE_TIMEOUT_GRACE"  # seconds the watchdog waits past the limit (tests shorten it)
EXIT_HUNG = 1  # os._exit status after an uninterruptible hang: a failure (git bisect: bad)


class CaseTimeout(BaseException):  # noqa: N818 - named for what it is; BaseException on purpose (see module doc)
    """A kernel call ran past the per-case limit. `verdict` is set by the harness once the case is recorded."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.verdict = None
        super().__init__(detail(seconds))


def detail(seconds: float) -> str:
    """The verdict detail of a timed-out case: `timeout after N s`."""
    return f"timeout after {seconds:g} s"


EARLIER_HANG = "earlier hang"  # how every EarlierHang detail starts (reports and tests count them)


class EarlierHang(CaseTimeout):  # noqa: N818 - a CaseTimeout: recorded and propagated like one
    """`kernel` already ran past the limit in this process; `first` is what was running then (case_id, replay,
    seconds). Raised before anything runs: the case fails at once with its own error record."""

    def __init__(self, kernel: str, first: dict):
        self.kernel, self.first = kernel, dict(first)
        super().__init__(first.get("seconds") or 0.0)
        self.args = (earlier_hang_detail(kernel, first),)

    def __str__(self) -> str:
        return self.args[0]


def earlier_hang_detail(kernel: str, first: dict) -> str:
    """`earlier hang: KERNEL ran past the N s limit in this process at CASE_ID; not run (replay: LINE)`."""
    where = first.get("case_id") or "a call"
    replay = f" (replay the hang: {first['replay']})" if first.get("replay") else ""
    return (f"{EARLIER_HANG}: {kernel} ran past the {first.get('seconds', 0):g} s limit in this process at {where}; "
            f"not run{replay}")


_state = {"limit": None, "propagate": False, "grace": None, "active": False, "generation": 0, "current": {}}
_hang_hooks: dict = {}
_hung: dict = {}  # key (a kernel name) -> current() of its first timeout in this process, plus "seconds"


def configure(limit_s: float | None = None, *, propagate: bool | None = None, grace_s: float | None = None) -> None:
    """Set the per-call limit (None or 0: none), whether run_case re-raises timeouts, the watchdog grace."""
    _state["limit"] = float(limit_s) if limit_s else None
    if propagate is not None:
        _state["propagate"] = bool(propagate)
    if grace_s is not None:
        _state["grace"] = float(grace_s)


def limit() -> float | None:
    """The configured per-call limit in seconds (None: no limit)."""
    return _state["limit"]


def propagates() -> bool:
    """True when run_case must re-raise CaseTimeout after recording the verdict (inside a pytest run)."""
    return _state["propagate"]


def grace() -> float:
    if _state["grace"] is not None:
        return _state["grace"]
    try:
        return float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))
    except ValueError:
        return DEFAULT_GRACE_S


def set_current(**info) -> None:
    """What is running now (case_id, kernel, check, replay, ...): the watchdog names it when it ends the process."""
    _state["current"] = dict(info)


def current() -> dict:
    return dict(_state["current"])


def hung(key: str) -> dict | None:
    """What was running when `key` first timed out in this process (case_id, replay, seconds, ...), or None."""
    first = _hung.get(key)
    return dict(first) if first is not None else None


def refuse_if_hung(key: str | None) -> None:
    """Raise EarlierHang if `key` (a kernel name) already timed out in this process."""
    if key is not None and key in _hung:
        raise EarlierHang(key, _hung[key])


def forget_hangs(key: str | None = None) -> None:
    """Forget the remembered timeout of `key` (None: of every kernel)."""
    if key is None:
        _hung.clear()
    else:
        _hung.pop(key, None)


def on_hang(hook, key: str = "default") -> None:
    """Register hook(info: dict, seconds: float) under `key` (replacing the previous one; None removes it), called
    by the watchdog before it ends the process."""
    if hook is None:
        _hang_hooks.pop(key, None)
    else:
        _hang_hooks[key] = hook


def _watchdog(generation: int, seconds: float) -> None:
    if not _state["active"] or _state["generation"] != generation:
        return
    info = current()
    for hook in list(_hang_hooks.values()):
        try:
            hook(info, seconds)
        except Exception:  # noqa: BLE001 - the process ends next; a failing hook must not keep it alive
            pass
    what = info.get("case_id") or info.get("kernel") or "a kernel call"
    replay = f" replay: {info['replay']}" if info.get("replay") else ""
    try:
        sys.stderr.write(f"ERROR {what} -- {detail(seconds)} (still running {grace():g} s later, not interruptible:"
                         f" process ended){replay}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_HUNG)


@contextlib.contextmanager
def deadline(seconds: float | None = None, *, key: str | None = None, watchdog: bool = True):
    """Run the body under the per-call limit (`seconds`, default the configured one); with `key` (the kernel's
    name), refuse at once a key that timed out before in this process and remember its first timeout (see the
    module doc). `watchdog=False`: SIGALRM only, no watchdog thread (cheap enough for every gate call)."""
    refuse_if_hung(key)
    s = limit() if seconds is None else seconds
    if not s or _state["active"]:
        yield
        return
    try:
        with _armed(s, watchdog):
            yield
    except CaseTimeout as e:
        if key is not None and not isinstance(e, EarlierHang):  # an inner kernel's earlier hang is not this one's
            _hung.setdefault(key, {**current(), "seconds": s})
        raise


class _Armed:
    """SIGALRM (main thread) and the watchdog (unless `watchdog` is False) for `s` seconds around the body. A plain
    class, not a generator: every gate call arms one (~10^5 times in a collection)."""

    __slots__ = ("s", "watchdog", "on", "use_signal", "prev_handler", "prev_timer", "t0", "dog")

    def __init__(self, s: float, watchdog: bool = True):
        self.s, self.watchdog = s, watchdog

    def _fire(self, signum, frame):
        if self.on:
            self.on = False
            raise CaseTimeout(self.s)

    def __enter__(self):
        _state["generation"] += 1
        self.on = True
        self.use_signal = use_signal = _HAS_ITIMER and threading.get_ident() == threading.main_thread().ident
        self.t0 = time.monotonic()
        if use_signal:
            self.prev_handler = _set_handler(signal.SIGALRM, self._fire)
            self.prev_timer = signal.setitimer(signal.ITIMER_REAL, self.s)
        self.dog = dog = threading.Timer(self.s + grace(), _watchdog, args=(_state["generation"], self.s)) \
            if self.watchdog or not use_signal else None
        _state["active"] = True
        if dog is not None:
            dog.daemon = True
            dog.start()
        return self

    def _disarm(self):
        self.on = False
        if self.dog is not None:
            self.dog.cancel()
        _state["active"] = False
        if self.use_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _set_handler(signal.SIGALRM, self.prev_handler)
            prev = self.prev_timer
            if prev and prev[0] > 0:  # someone else's alarm (pytest-timeout): give back what is left
                left = max(prev[0] - (time.monotonic() - self.t0), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, prev[1])

    def __exit__(self, typ, value, tb):
        try:
            self._disarm()
        except CaseTimeout:  # fired between the body's end and the disarm: disarm, then report it
            self._disarm()
            raise
        return False


_armed = _Armed
_HAS_ITIMER = hasattr(signal, "setitimer")
try:  # the C functions under signal.signal / getsignal: the wrappers' enum conversions cost ~3-8 us a call, most of
    # a gate call
    from _signal import getsignal as _get_handler
    from _signal import signal as _set_handler
except ImportError:  # another interpreter: the public ones
    _get_handler, _set_handler = signal.getsignal, signal.signal
_SIGALRM = int(getattr(signal, "SIGALRM", 14))


# The gates' standing alarm, inside a gate_batch() scope (a plan being built: ~10^5 gate calls of microseconds each).
# Arming SIGALRM for each call (a handler and a timer set, then both put back: four system calls) was a fifth of
# building a plan. So in a batch, on the main thread, a gate call notes its start and leaves a standing alarm armed:
# when it fires during a gate call that has run for the limit, the handler raises CaseTimeout in it; during a younger
# call it re-arms for what that call has left; between calls it does nothing. A call checks the alarm is still there
# (our handler, a pending timer due no later than its limit) and arms it otherwise; the batch's end disarms it and
# puts the previous handler back, so no alarm outlives the batch. Where another alarm is pending (not ours:
# pytest-timeout's, say) a call arms and gives back per call (_Armed), as outside a batch.
_gate = {"t0": None, "s": 0.0, "prev": None, "batch": 0}


def _gate_fire(signum, frame):
    t0 = _gate["t0"]
    if t0 is None:  # no gate call running
        return
    left = t0 + _gate["s"] - time.monotonic()
    if left > 0:  # a call younger than the alarm: the rest of its limit
        signal.setitimer(signal.ITIMER_REAL, left)
        return
    _gate["t0"] = None
    raise CaseTimeout(_gate["s"])


def _standing(s: float) -> bool:
    """Arm the gates' standing alarm for a call limited to `s` (main thread); False where another alarm is pending."""
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    if _get_handler(_SIGALRM) is not _gate_fire:
        if left > 0:
            return False
        _gate["prev"] = _set_handler(_SIGALRM, _gate_fire)
    if left <= 0 or left > s:  # none pending, or due later than this call's limit (the limit was lowered)
        signal.setitimer(signal.ITIMER_REAL, s)
    return True


class gate_batch:  # noqa: N801 - a context manager: `with timeout.gate_batch():` (registry.gate_batch enters it)
    """A scope of many gate calls: their limits share the standing alarm (above), disarmed when the outermost scope
    ends."""

    __slots__ = ()

    def __enter__(self):
        _gate["batch"] += 1
        return self

    def __exit__(self, typ, value, tb):
        _gate["batch"] -= 1
        if not _gate["batch"] and _HAS_ITIMER and _get_handler(_SIGALRM) is _gate_fire:
            signal.setitimer(signal.ITIMER_REAL, 0)
            prev = _gate["prev"]
            _set_handler(_SIGALRM, signal.SIG_DFL if prev is None else prev)
        return False


class gate_deadline:  # noqa: N801 - a context manager, used like deadline()
    """`deadline(watchdog=False)` for gates and availability (pure Python, called ~10^5 times in a collection):
    SIGALRM for the configured limit on the main thread (in a gate_batch, the standing alarm above); elsewhere
    deadline()'s watchdog; nothing when no limit is set or a deadline is already running (the outermost one
    governs)."""

    __slots__ = ("inner", "standing")

    def __enter__(self):
        s = _state["limit"]
        self.standing = False
        if not s or _state["active"]:
            self.inner = None
            return self
        if (_gate["batch"] and _HAS_ITIMER and threading.get_ident() == threading.main_thread().ident
                and _standing(s)):
            self.inner, self.standing = None, True
            _gate["s"], _gate["t0"] = s, time.monotonic()
            _state["active"] = True
            return self
        self.inner = inner = _Armed(s, watchdog=False)
        inner.__enter__()
        return self

    def __exit__(self, typ, value, tb):
        if self.standing:
            _gate["t0"] = None
            _state["active"] = False
            return False
        return self.inner.__exit__(typ, value, tb) if self.inner is not None else False
