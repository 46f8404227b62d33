"""How Triton kernels run in this process: on the GPU, or in the interpreter on a machine without one.

`configure_triton()` must run before any `@triton.jit` kernel is defined (triton reads
TRITON_INTERPRET when the decorator runs); `kernels/__init__.py` calls it first.
"""
from __future__ import annotations

import os


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


def interpreting() -> bool:
    """True when Triton kernels run in the interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def configure_triton() -> None:
    """Use the interpreter when no GPU is present; under it, apply the interpreter numeric fixes."""
    if "TRITON_INTERPRET" not in os.environ and not gpu_present():
        os.environ["TRITON_INTERPRET"] = "1"
    if interpreting():
        from . import interpreter_fixes

        interpreter_fixes.apply()


def kernel_device() -> str:
    """The torch device Triton kernels take their tensors on here."""
    return "cpu" if interpreting() or not gpu_present() else "cuda"
