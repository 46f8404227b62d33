"""The one guarded path into a kernel: every call of a kernel's load, apply, model, contract / fusion / catalogue
check and CLI replay goes through `guarded()` (gates and availability through the registry's containment, which
this module arms with the time limit). tests/unit/test_guard.py walks the source so that a direct call cannot slip in.

    with guard.guarded(kernel, "apply", case_id=..., replay=..., mode="device"):
        out = kernel_call(kernel, operands, x, ctx)
    guard.call(kernel, "load", source, ctx)            # the same for one call: kernel_load / kernel_call

What the guard does, around the outermost guarded call of a kernel (nested ones only re-check the kernel):
- refuses at once a kernel that is stopped in this run: it hung before in this process (timeout.EarlierHang), or it
  ended its worker CRASH_LIMIT times in this run (`EarlierCrash`, detail `earlier crash: CASE_ID ...`), or the device
  is unusable in this process after a sticky device error (`EarlierDeviceError`, a single-process run only);
- names the call for the watchdog and, in a pytest run, for the controller: the in-flight file
  RUN_DIR/inflight-WID.json holds kernel, case id and replay line while the call runs, so a worker that dies in it
  (a segfault) becomes that case's `error` record with its id, and a crash counts against the kernel (the crash
  breaker, conformance.plugin.crash);
- applies the per-call time limit (conformance.checks.timeout, one limit per kernel per process), after setting up
  the process's device runtime untimed where a call may use the device and nothing has yet (`device_ready`: the
  CUDA/HIP context and a BLAS handle take seconds on a GPU host busy with other processes; that is the process's
  cost, not the kernel's, and inside a short limit a correct kernel's first case can read as a hang);
- turns os._exit / sys.exit inside the call into `ExitCalled`, that call's exception (conformance.core.exits);
- waits for the device before it returns, unless it was a model run (an asynchronous fault belongs to this call, not
  the next kernel's);
- turns an exception that leaves the device unusable (CUDA's illegal memory access, device-side assert, ...: the error
  stays with the process) into `StickyDeviceError`; whoever records the case then calls `retire(...)` (the pytest
  plugin retires any still pending at the end of the test phase: `pending_sticky`), which hands the process to the
  `on_retire` hooks (the pytest plugin: an xdist worker leaves its unreported records for the
  controller and exits, so xdist replaces it and reruns its unfinished cases on a healthy worker).

Exceptions: everything a kernel raises comes out unchanged (the caller's error path records it), except the three
conversions above. EarlierCrash / EarlierDeviceError are timeout.CaseTimeout subclasses: recorded and propagated like
an EarlierHang (the test fails at once, hypothesis does not shrink it).
"""
from __future__ import annotations

import contextlib
import json
import os
import time

from conformance.checks import timeout
from conformance.core import exits, registry

RUN_DIR_ENV = "CONFORMANCE_HANG_DIR"  # a run's shared directory (the pytest controller makes it; workers inherit it)
CRASH_LIMIT_ENV = "CONFORMANCE_CRASH_LIMIT"
DEFAULT_CRASH_LIMIT = 2  # crashes of one kernel's calls before its remaining cases fail at once
EARLIER_CRASH = "earlier crash"
EARLIER_DEVICE_ERROR = "earlier device error"
EXIT_RETIRED = 75  # a worker that retires after a sticky device error (EX_TEMPFAIL: it is the process, not a test)
# CUDA / HIP errors that leave the context unusable for the rest of the process (the "sticky" errors)
STICKY_PATTERNS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                   "misaligned address", "illegal instruction", "hipErrorIllegalAddress", "hipErrorLaunchFailure",
                   "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION", "HSA_STATUS_ERROR_EXCEPTION")
ExitCalled = exits.ExitCalled

_depth: dict[str, int] = {}  # kernel name -> nesting depth of guarded() in this process
_poisoned: dict = {}  # the case whose sticky device error made this process's device unusable (single process)
_pending: dict = {}  # the call whose StickyDeviceError this guard raised and no one has retired yet (`pending_sticky`)
_retire_hooks: dict = {}


class EarlierCrash(timeout.CaseTimeout):  # noqa: N818 - a CaseTimeout: recorded and propagated like EarlierHang
    """`kernel` ended its worker `first['crashes']` times in this run; `first` is its first crash (case_id, replay)."""

    def __init__(self, kernel: str, first: dict):
        self.kernel, self.first = kernel, dict(first)
        super().__init__(0.0)
        self.args = (earlier_crash_detail(kernel, first),)

    def __str__(self) -> str:
        return self.args[0]


class EarlierDeviceError(timeout.CaseTimeout):  # noqa: N818
    """The device is unusable in this process since a sticky device error (`first`: that case)."""

    def __init__(self, first: dict):
        self.first = dict(first)
        super().__init__(0.0)
        self.args = (f"{EARLIER_DEVICE_ERROR}: {first.get('case_id') or 'a call'} left the device unusable in this "
                     f"process ({first.get('detail', '')[:200]}); not run: rerun under pytest -n 1 or more, where "
                     "the worker is replaced",)

    def __str__(self) -> str:
        return self.args[0]


class StickyDeviceError(RuntimeError):
    """A device error that stays with the process (CUDA's illegal address, a device-side assert): the case's error,
    and the process must not judge another device case."""

    def __init__(self, e: BaseException):
        self.original = e
        super().__init__(f"{type(e).__name__}: {' '.join(str(e).split())[:400]} (sticky device error: the device is "
                         "unusable in this process)")


def earlier_crash_detail(kernel: str, first: dict) -> str:
    replay = f"; replay the crash: {first['replay']}" if first.get("replay") else ""
    return (f"{EARLIER_CRASH}: {first.get('case_id') or first.get('test') or 'a call'} ({kernel} ended its worker "
            f"{first.get('crashes', 1)} times in this run: its remaining cases are not run{replay})")


def crash_limit() -> int:
    """$CONFORMANCE_CRASH_LIMIT (default DEFAULT_CRASH_LIMIT); InvalidInput naming it when it is not an int >= 1."""
    from references.errors import require

    text = os.environ.get(CRASH_LIMIT_ENV, str(DEFAULT_CRASH_LIMIT))
    value = int(text) if text.strip().isdigit() else 0
    require(value >= 1, CRASH_LIMIT_ENV, text, "an integer >= 1 (crashes of one kernel before it is stopped)")
    return value


def run_dir() -> str | None:
    return os.environ.get(RUN_DIR_ENV) or None


def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _crash_file(d: str, kernel: str) -> str:
    return os.path.join(d, f"crashes-{kernel}.json")


def crashes(kernel: str) -> dict | None:
    """The crash breaker's entry of `kernel` in this run ({"crashes": n, "case_id", "replay", ...}), or None."""
    d = run_dir()
    if d is None:
        return None
    try:
        with open(_crash_file(d, kernel)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def note_crash(kernel: str, info: dict) -> dict:
    """Count one crash of `kernel` in this run (the pytest controller, for a worker that died in its call); returns
    the entry. From crash_limit() crashes on, every guarded call of the kernel raises EarlierCrash."""
    from conformance.core.files import atomic_write_text

    d = run_dir()
    entry = crashes(kernel) or {k: info.get(k) for k in ("case_id", "replay", "test", "detail")}
    entry["crashes"] = int(entry.get("crashes", 0)) + 1
    if d is not None:
        atomic_write_text(_crash_file(d, kernel), json.dumps(entry, default=str))
    return entry


def inflight(wid: str | None = None) -> dict | None:
    """What worker `wid` (default: this process) is running inside a guarded call, or None."""
    d = run_dir()
    if d is None:
        return None
    try:
        with open(os.path.join(d, f"inflight-{wid or worker_id()}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def clear_inflight(wid: str) -> None:
    d = run_dir()
    if d is not None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(d, f"inflight-{wid}.json"))


def refuse_if_stopped(kernel: str, mode: str | None = None) -> None:
    """Raise EarlierHang / EarlierCrash / EarlierDeviceError when `kernel` may not run here any more."""
    timeout.refuse_if_hung(kernel)
    entry = crashes(kernel)
    if entry is not None and entry.get("crashes", 0) >= crash_limit():
        raise EarlierCrash(kernel, entry)
    if _poisoned and mode != "model":
        raise EarlierDeviceError(_poisoned)


def is_sticky(e: BaseException) -> bool:
    """True when `e` is a device error that stays with the process: its text names one (STICKY_PATTERNS), or, on a
    CUDA machine, the device no longer answers a trivial call."""
    if isinstance(e, (StickyDeviceError, timeout.CaseTimeout, ExitCalled)):
        return False
    text = f"{type(e).__name__}: {e}"
    if any(p.lower() in text.lower() for p in STICKY_PATTERNS):
        return True
    return type(e).__name__ == "AcceleratorError" and not _device_answers()


def _device_answers() -> bool:
    import torch

    if not torch.cuda.is_available():
        return True
    try:
        (torch.ones(1, device="cuda") + 1).cpu()
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def _sync(mode: str | None) -> None:
    """Wait for the device after a call that may have launched work on it: every mode but a model run (plain torch
    on the CPU), including calls that name none (a contract sample's load), so that an asynchronous fault (an
    illegal address, a device-side assert) surfaces inside the call that caused it, never in a later kernel's."""
    if mode == "model":
        return
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


_device_set_up: list = []  # [True] once device_ready() set up this process's device runtime


def device_ready(mode: str | None) -> None:
    """Before the first timed call of a process that may use the device (every mode but a model run): create the
    CUDA/HIP context and a BLAS handle (a tiny fp16 matmul), untimed. Once per process; nothing where torch sees no
    device or the context exists already. A device too broken to set up raises here, inside `guarded`'s error path
    (a sticky error is then that call's StickyDeviceError)."""
    import sys

    torch = sys.modules.get("torch")
    if mode == "model" or _device_set_up or torch is None:
        return
    _device_set_up.append(True)  # decided once: later calls return at once
    if not torch.cuda.is_available() or torch.cuda.is_initialized():
        return
    a = torch.ones(8, 8, device="cuda", dtype=torch.float16)
    (a @ a).cpu()


def _write_inflight(info: dict) -> str | None:
    d = run_dir()
    if d is None:
        return None
    path = os.path.join(d, f"inflight-{worker_id()}.json")
    with contextlib.suppress(OSError):
        with open(path, "w") as f:
            f.write(json.dumps(info, default=str))
        return path
    return None


@contextlib.contextmanager
def guarded(kernel, what: str, *, case_id: str | None = None, replay: str | None = None, check: str | None = None,
            mode: str | None = None, family: str | None = None, target: str | None = None, timed: bool = True):
    """Run the body as one guarded call of `kernel`'s `what` (see the module doc)."""
    name = kernel.name
    refuse_if_stopped(name, mode)
    if name in _depth:  # nested: the outer call already named and watches it; it times it unless it is untimed
        inner = timeout.deadline(key=name) if timed and not _depth[name] else contextlib.nullcontext()
        with exits.intercepted(), inner:
            yield
        return
    prev = timeout.current()
    info = {"kernel": name, "call": what, "case_id": case_id or prev.get("case_id"),
            "replay": replay or prev.get("replay", ""), "check": check or prev.get("check"),
            "family": family or prev.get("family") or kernel.family, "target": target or prev.get("target"),
            "run_mode": mode or prev.get("run_mode"), "since": time.time()}
    timeout.set_current(**info)
    path = _write_inflight(info)
    _depth[name] = timed
    try:
        if timed:
            device_ready(mode)
        with exits.intercepted(), timeout.deadline(key=name) if timed else contextlib.nullcontext():
            yield
            _sync(mode)
    except (timeout.CaseTimeout, ExitCalled):
        raise
    except Exception as e:
        if mode != "model" and is_sticky(e):
            err = StickyDeviceError(e)
            _pending.clear()
            _pending.update(info, detail=str(err))
            raise err from e
        raise
    finally:
        _depth.pop(name, None)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        timeout.set_current(**prev)


def call(kernel, method: str, *args, **info):
    """One guarded call: `load` (kernel_load(kernel, *args)), `apply` / `model` (kernel_call(kernel, *args,
    model=...)), or any other method of the kernel by name."""
    from conformance.core.kernel import kernel_call, kernel_load

    with guarded(kernel, method, **info):
        if method == "load":
            return kernel_load(kernel, *args)
        if method in ("apply", "model"):
            return kernel_call(kernel, *args, model=method == "model")
        return getattr(kernel, method)(*args)


def on_retire(hook, key: str = "default") -> None:
    """Register hook(record: dict) (None removes it), called by `retire` after a sticky device error; a hook may end
    the process (the pytest plugin's xdist worker does)."""
    if hook is None:
        _retire_hooks.pop(key, None)
    else:
        _retire_hooks[key] = hook


def pending_sticky() -> dict | None:
    """The call (kernel, case_id, check, replay, ..., detail) whose StickyDeviceError was raised in this process and
    not yet handed to `retire`, or None. The pytest plugin retires it at the end of the test phase it happened in, so a
    caller that records the error without retiring (or swallows it) cannot leave a poisoned worker judging on."""
    return dict(_pending) or None


def retire(record: dict) -> None:
    """After a sticky device error was recorded (`record`: that case's record): the process must not judge another
    device case. The hooks run (an xdist worker exits there); without one, every later non-model guarded call in
    this process fails at once as EarlierDeviceError naming this case."""
    _pending.clear()
    _poisoned.clear()
    _poisoned.update({"case_id": record.get("case_id"), "detail": record.get("detail", ""),
                      "kernel": record.get("kernel")})
    for hook in list(_retire_hooks.values()):
        hook(record)


def forget(kernel: str | None = None) -> None:
    """Forget this process's hang memory and device poisoning (tests that fault on purpose)."""
    timeout.forget_hangs(kernel)
    _poisoned.clear()
    _pending.clear()


# gates and availability: the time limit (SIGALRM only: they are pure Python, called thousands of times); a hung
# gate is that kernel's refusal `gate raised CaseTimeout: timeout after N s` and a gate fault of the run
registry.set_gate_guard(timeout.gate_deadline, catch=(timeout.CaseTimeout,), batch=timeout.gate_batch)
