"""Test-only plugin kernels that misbehave: hang, crash their process, or raise from gate/availability.

Not registered on import: tests register them (and unregister afterwards); `misbehaving_plugin` registers the
ones named by MISBEHAVING_KERNELS (comma-separated; default all) for subprocess runs."""
from __future__ import annotations

import os
import signal
import time

from conformance.core import registry

registry.load_all()
TorchDequant = type(registry.get_kernel("torch_dequant_w4a16"))


class _Tiny(TorchDequant):
    """Serves one small class only (uint4b8 g128 fp16), so the suite draws few, cheap cases."""

    def can_implement(self, config, target):
        if (config.weight_type, config.group_size, config.dtype) != ("uint4b8", 128, "float16"):
            return "only uint4b8 g128 float16 (test kernel)"
        return None

    def model(self, w, x):
        return self.apply(w, x)


class HangingDequantW4A16(_Tiny):
    """apply never returns (a Python-level loop, as a kernel spinning in Triton's interpreter would)."""

    name = "hanging_dequant_w4a16"

    def apply(self, w, x):
        while True:
            time.sleep(0.02)


class StubbornDequantW4A16(_Tiny):
    """apply never returns and swallows every interruption: only the watchdog can end it."""

    name = "stubborn_dequant_w4a16"

    def apply(self, w, x):
        while True:
            try:
                time.sleep(0.02)
            except BaseException:  # noqa: BLE001 - the misbehaviour under test
                pass


class CrashingDequantW4A16(_Tiny):
    """apply kills its whole process with SIGKILL (as a segfaulting native kernel would: os._exit is caught by the guard
    now, conformance/core/exits.py). With CRASH_ONCE_MARKER set to a path,
    only the first call of the run crashes (it creates the file); later calls compute correctly: one crash, one
    worker restart, keeps the subprocess tests fast."""

    name = "crashing_dequant_w4a16"

    def apply(self, w, x):
        marker = os.environ.get("CRASH_ONCE_MARKER")
        if marker:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return super().apply(w, x)
        os.kill(os.getpid(), signal.SIGKILL)


class RaisingGateW4A16(_Tiny):
    """can_implement raises on channelwise configs (a plugin bug); otherwise like its parent."""

    name = "raising_gate_w4a16"

    def can_implement(self, config, target):
        if config.group_size == -1:
            raise ValueError("plugin bug in the gate")
        return super().can_implement(config, target)


class RaisingAvailabilityW4A16(_Tiny):
    """availability raises (a plugin probing a missing library badly)."""

    name = "raising_availability_w4a16"

    def availability(self, target):
        raise RuntimeError("libfoo.so probe failed")


ALL = (HangingDequantW4A16, StubbornDequantW4A16, CrashingDequantW4A16, RaisingGateW4A16, RaisingAvailabilityW4A16)
BY_NAME = {c.name: c for c in ALL}
