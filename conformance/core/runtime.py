"""How Triton kernels run in this process: on the GPU, or in the interpreter on a machine without one.

`configure_triton()` must run before any `@triton.jit` kernel is defined (triton reads
TRITON_INTERPRET when the decorator runs); `conformance.core.tree` calls it before it makes `kernels/` the package
`conformance_kernels`.
"""
from __future__ import annotations

import contextlib
import os

from conformance.core import interpreter_fixes, interpreter_speed
from conformance.core.interpreter_fixes import interpreting  # the one definition; runtime.interpreting is public


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


def configure_triton() -> None:
    """Use the interpreter when no GPU is present; under it, apply the interpreter numeric fixes and skip the
    interpreter's discarded overflow checks (conformance.core.interpreter_speed)."""
    if "TRITON_INTERPRET" not in os.environ and not gpu_present():
        os.environ["TRITON_INTERPRET"] = "1"
    if interpreting():
        interpreter_fixes.apply()
        interpreter_speed.apply()
        snapshot_language()


# Triton's language objects as imported, before any interpreted run: the interpreter patches their builtins while a
# kernel runs and does not always restore them (a device-function call patches without a restore), which breaks a
# later compile in the same process (conformance/compile). pristine_language() puts these values back for a while.
_PRISTINE: list = []


def _language_objects() -> list:
    import triton.language as tl

    objs = [tl, tl.core, tl.math, tl.standard, tl.tensor, tl.dtype, getattr(tl, "condition", None),
            getattr(tl.core, "tensor_descriptor_base", None)]
    return [o for o in objs if o is not None]


def snapshot_language() -> None:
    """Record Triton's language objects as they are now (once; configure_triton calls it before any kernel runs)."""
    if not _PRISTINE:
        _PRISTINE.extend((o, dict(vars(o))) for o in _language_objects())


@contextlib.contextmanager
def pristine_language():
    """Inside, Triton's language objects hold their recorded values (the interpreter's leftover patches undone);
    restored after. A no-op where no snapshot was taken (a GPU host: nothing is interpreted)."""
    changed = []
    try:
        for obj, values in _PRISTINE:
            for name, v in values.items():
                cur = vars(obj).get(name, _MISSING)
                if cur is not v and not name.startswith("__"):
                    changed.append((obj, name, cur))
                    setattr(obj, name, v)
        yield
    finally:
        for obj, name, cur in reversed(changed):
            if cur is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, cur)


_MISSING = object()


def kernel_device() -> str:
    """The torch device Triton kernels take their tensors on here."""
    return "cpu" if interpreting() or not gpu_present() else "cuda"


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, for launch grids. triton.cdiv is a ConstexprFunction in Triton 3.9: each host
    call costs microseconds of wrapper code, and a launch computed ~10 of them (measured ~40 us per
    triton_w4a16 call on the CI CPU)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1); plain Python, as triton.next_power_of_2 is not free."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
