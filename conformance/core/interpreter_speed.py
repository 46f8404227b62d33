"""Work the Triton interpreter does and throws away, skipped: its integer-overflow sanitizer.

Triton's frontend guards every int32 (and narrower) add, sub and mul with an overflow check when
`options.sanitize_overflow` is set (triton/language/semantic.py, `binary_op_sanitize_overflow_impl`):
it recomputes the operation in int64, compares the result against the type's bounds and passes the
condition to `device_assert`, which returns without doing anything unless `options.debug` is set. A GPU
compile drops that dead code; the interpreter (TRITON_INTERPRET=1) executes it eagerly in numpy, on whole
tiles, for every index computation of every program: about a third of the CPU time of triton_w4a16's first
CI-plan rows on the CI CPU (benchmarks/probes/interpreter_sanitizer.py measures it; its record is
benchmarks/results/interpreter_sanitizer.json). The interpreter's
builder is built with `InterpreterOptions()`, whose `debug` is False, so no such assert can ever fire
there: the checks cost time and change nothing.

`apply()` sets the interpreter builder's `sanitize_overflow` to False when, and only when, its `debug` is
False, so the skipped work is exactly the work whose result was discarded; kernel results are the same
bits (tests/unit/test_interpreter_speed.py). It is not pinned to a Triton version, because it depends on
two option fields rather than on builder internals: when either field is missing it patches nothing and
`status()` says why. CONFORMANCE_INTERPRETER_SANITIZE=on keeps the sanitizer (its work, still without an
assert, as upstream does it).
"""
from __future__ import annotations

import dataclasses
import os
import threading

from conformance.core.interpreter_fixes import interpreting
from references.errors import require

ENV = "CONFORMANCE_INTERPRETER_SANITIZE"

_lock = threading.Lock()
_saved: list = []  # the builder's options before apply(), for remove()
_status: dict = {"applied": False, "reason": "apply() not called"}


def status() -> dict:
    """Whether the sanitizer's discarded work is skipped here, and why not if not: a plain dict for reports."""
    with _lock:
        return dict(_status)


def _set(applied: bool, reason: str) -> dict:
    _status.update(applied=applied, reason=reason)
    return dict(_status)


def apply() -> dict:
    """Skip the interpreter's overflow sanitizer when its asserts are off (idempotent; a no-op off the
    interpreter). Returns status()."""
    with _lock:
        if _saved:
            return dict(_status)
        mode = os.environ.get(ENV, "").strip().lower()
        if mode in ("on", "1", "yes", "true"):
            return _set(False, f"kept by {ENV}={mode}")
        require(mode in ("", "off", "0", "no", "false"), ENV, mode, "on or off (unset: off)")
        if not interpreting():
            return _set(False, "not applied: Triton is not running in the interpreter (TRITON_INTERPRET unset)")
        from triton.runtime import interpreter as interp

        builder = getattr(interp, "interpreter_builder", None)
        opts = getattr(builder, "options", None)
        fields = {f.name for f in dataclasses.fields(opts)} if dataclasses.is_dataclass(opts) else set()
        if not {"sanitize_overflow", "debug"} <= fields:
            return _set(False, "not applied: this Triton's interpreter options have no sanitize_overflow/debug fields")
        if opts.debug:
            return _set(False, "not applied: the interpreter runs with debug on, so its overflow asserts fire")
        _saved.append(opts)
        builder.options = dataclasses.replace(opts, sanitize_overflow=False)
        return _set(True, "applied: interpreter sanitize_overflow off (its asserts are off: debug=False)")


def remove() -> None:
    """Give the interpreter builder its options back (status says so)."""
    with _lock:
        if not _saved:
            return
        from triton.runtime import interpreter as interp

        interp.interpreter_builder.options = _saved.pop()
        _set(False, "removed by remove()")
