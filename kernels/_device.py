"""Where the in-tree Triton kernels run, and the one-line refusal of an x that lives elsewhere.

A Triton launch takes its pointers on the device it compiles for: the current CUDA/ROCm device on a GPU machine,
the CPU under the interpreter (conformance.core.runtime.kernel_device). An x on any other device used to reach the
launch and fail there with Triton's "Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)" (the
kernels' apply moves the operands to x's device, so nothing stopped it earlier). Each launch checks x first.
The check sits in the launch functions, which run inside the custom ops on real tensors only: a traced call
(fake or meta tensors) goes to the op's fake impl and is not a launch.
"""
from __future__ import annotations

import torch

from conformance.core.runtime import kernel_device
from references.errors import InvalidInput


class DeviceMismatch(InvalidInput):
    """x is on a device the kernel does not run on; the message is one line naming both devices."""

    def __init__(self, kernel: str, got: torch.device, want: torch.device):
        super().__init__("x.device", str(got), f"{want} (the device {kernel} runs on here)")
        ValueError.__init__(self, f"{kernel}: x is on {got}, this kernel runs on {want} (move x there: x.to('{want}'))")


def run_device() -> torch.device:
    """The torch device Triton kernels run on in this process; on a GPU with its index (the current device)."""
    dev = torch.device(kernel_device())
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def check_x_device(kernel: str, x: torch.Tensor) -> None:
    """Raise DeviceMismatch unless x is on the device `kernel` (a Triton kernel) launches on here."""
    got, want = x.device, kernel_device()
    if got.type == want and (want != "cuda" or got.index is None or got.index == run_device().index):
        return
    raise DeviceMismatch(kernel, got, run_device())
