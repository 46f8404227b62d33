"""Fault kernels for the fault matrix (tests/unit/test_fault_matrix.py, docs/faults.md): each breaks one method
(gate, load, apply, model, fake) in one way, beside correct code everywhere else.

Not registered on import; `fault_plugin` registers the ones named by FAULT_KERNELS (comma-separated; default all).
Every kernel is torch_dequant_w4a16 with one method broken (`_Tiny`).
"""
from __future__ import annotations

import os
import signal
import sys
import time

import torch

from conformance.core import registry
from conformance.core.kernel import Kernel

registry.load_all()
TorchDequant = type(registry.get_kernel("torch_dequant_w4a16"))


class _Tiny(TorchDequant):
    """torch_dequant_w4a16's gate and load, its apply as the model too (what a fault kernel breaks). The gate is not
    narrowed on purpose: a gate that refuses most classes makes every collection scan each refused class's whole K
    range (~0.15 CPU-s per kernel and process), while the matrix picks its few plan rows by node id anyway."""

    launch = Kernel.launch  # no paths declared: one path row per plan class less to plan in every process

    def model(self, w, x):
        return self.apply(w, x)


def _spin():
    while True:  # a Python-level loop, as a kernel spinning in Triton's interpreter would
        time.sleep(0.02)


class HangApply(_Tiny):
    name = "fault_hang_apply"

    def apply(self, w, x):
        _spin()


class HangLoad(_Tiny):
    name = "fault_hang_load"

    def load(self, ckpt, config=None):
        _spin()


class HangGate(_Tiny):
    """The gate hangs on channelwise configs only (so collection reaches it, and it is timed)."""

    name = "fault_hang_gate"

    def can_implement(self, config, target):
        if config.group_size == -1:
            _spin()
        return super().can_implement(config, target)


class ExitApply(_Tiny):
    """apply calls os._exit, as a kernel's native code calling exit() would."""

    name = "fault_exit_apply"

    def apply(self, w, x):
        os._exit(3)


class SysExitLoad(_Tiny):
    name = "fault_sysexit_load"

    def load(self, ckpt, config=None):
        sys.exit(4)


class RaiseApply(_Tiny):
    name = "fault_raise_apply"

    def apply(self, w, x):
        raise RuntimeError("kernel bug in apply")


class RaiseModel(_Tiny):
    """model raises; its apply is unavailable here, so the model is what runs."""

    name = "fault_raise_model"

    def availability(self, target):
        return "the fault matrix's model-only kernel"

    def model(self, w, x):
        raise RuntimeError("kernel bug in model")


class NaNApply(_Tiny):
    name = "fault_nan_apply"

    def apply(self, w, x):
        y = super().apply(w, x)
        y[0, 0] = float("nan")
        return y


class ShapeApply(_Tiny):
    name = "fault_shape_apply"

    def apply(self, w, x):
        return super().apply(w, x)[:, :-8]


class DtypeApply(_Tiny):
    name = "fault_dtype_apply"

    def apply(self, w, x):
        return super().apply(w, x).float()


class DeviceApply(_Tiny):
    """Returns its output on the meta device (a wrong device on any machine)."""

    name = "fault_device_apply"

    def apply(self, w, x):
        return super().apply(w, x).to("meta")


class NoneApply(_Tiny):
    name = "fault_none_apply"

    def apply(self, w, x):
        super().apply(w, x)
        return None


class NonContiguousApply(_Tiny):
    """Right values in a non-contiguous tensor (every other element of a wider buffer): a layer downstream reading
    it flat would be wrong."""

    name = "fault_noncontiguous_apply"

    def apply(self, w, x):
        y = super().apply(w, x)
        buf = y.new_zeros((y.shape[0], 2 * y.shape[1]))
        buf[:, ::2] = y
        return buf[:, ::2]


class SlowApply(_Tiny):
    """Correct, but each call takes SLOW_S seconds: well under the time limit, so every case must pass."""

    name = "fault_slow_apply"
    SLOW_S = 0.3

    def apply(self, w, x):
        time.sleep(self.SLOW_S)
        return super().apply(w, x)


class RaiseGate(_Tiny):
    """A gate-only kernel whose gate raises: no model (else every collection would scan each simulation target's
    whole class space, ~1 CPU-s of raising gates per process)."""

    name = "fault_raise_gate"
    has_model = False

    def can_implement(self, config, target):
        raise ValueError("plugin bug in the gate")


class SegfaultApply(_Tiny):
    """apply kills its own process with SIGSEGV, as a native kernel's bad pointer would: nothing in the process can
    survive it (xdist workers only: a single-process run ends)."""

    name = "fault_segv_apply"

    def apply(self, w, x):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)


class StickyApply(_Tiny):
    """The CPU simulation of a sticky device error: its apply raises the error CUDA raises after an illegal memory
    access (the guard reads the message, as there is no device to probe on a CPU machine)."""

    name = "fault_sticky_apply"

    def apply(self, w, x):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered") \
            if hasattr(torch, "AcceleratorError") else RuntimeError(
                "CUDA error: an illegal memory access was encountered")


_fired: set = set()  # the device fault kernels that already faulted in this process


def _first_real_cuda_call(name: str, x) -> bool:
    """True once per process for kernel `name`, on a plain CUDA tensor: not a fake or traced one (make_fx and
    torch.compile call apply with those; a Triton launch cannot run on them)."""
    if name in _fired or type(x) is not torch.Tensor or not x.is_cuda:
        return False
    _fired.add(name)
    return True


class IllegalAddressApply(_Tiny):
    """GPU only: the first call in each process launches a Triton store 1 TiB past a 4-byte buffer (CUDA: "an
    illegal memory access was encountered", an error the process keeps for good), then computes the right answer
    as if nothing happened. Its worker must be retired and no other kernel's verdict may change
    (benchmarks/faults_gpu.py)."""

    name = "fault_gpu_illegal_address"

    def apply(self, w, x):
        if _first_real_cuda_call(self.name, x):
            from fault_triton import stray_store

            stray_store(x.device)
        return super().apply(w, x)


class DeviceAssertApply(_Tiny):
    """GPU only: the first call in each process launches a Triton kernel whose `tl.device_assert` fails (compiled
    with debug=True; CUDA: "device-side assert triggered", sticky like an illegal address)."""

    name = "fault_gpu_device_assert"

    def apply(self, w, x):
        if _first_real_cuda_call(self.name, x):
            from fault_triton import failing_assert

            failing_assert(x.device)
        return super().apply(w, x)


IN_PROCESS = (HangApply, HangLoad, HangGate, ExitApply, SysExitLoad, RaiseApply, RaiseModel, NaNApply, ShapeApply,
              DtypeApply, DeviceApply, NoneApply, NonContiguousApply, SlowApply, RaiseGate)
WORKER_KILLING = (SegfaultApply, StickyApply)  # end or retire their worker: -n >= 1 only
HANGING = (HangApply, HangLoad, HangGate)  # each costs one time limit per process it hangs in (a run's wall cap)
ALL = IN_PROCESS + WORKER_KILLING
DEVICE = (IllegalAddressApply, DeviceAssertApply)  # a CUDA device only (benchmarks/faults_gpu.py); not in ALL
BY_NAME = {c.name: c for c in ALL + DEVICE}


# ---- the suite items of a fault matrix run (tests/unit/test_fault_matrix.py; benchmarks/faults_gpu.py on a GPU) ----
PLAN = "conformance/suite/test_plan.py::test_plan"
CATALOGUE = "conformance/suite/test_catalogue.py::test_symmetric_garbage_qzeros_ignored"
# a crash, then `earlier crash` (limit 1); hangs: more cases than worker processes, so `earlier hang` shows; default 1
ROWS = {"fault_segv_apply": 2, "fault_sticky_apply": 2, "fault_hang_apply": 6}
GATE_ONLY = {"fault_raise_gate", "fault_hang_gate"}  # judged by the gate line; their suite item skips


def matrix_items(kernels) -> list[str]:
    """The pytest node ids a fault matrix runs for the fault kernels `kernels`: the first exact-tier plan rows of each
    (ROWS), the suite test of a gate-only one, and the catalogue's own run of the hanging kernel (issue 33's stalled
    run was there)."""
    items = []
    for k in kernels:
        if k in GATE_ONLY:
            items.append(f"conformance/suite/test_w4a16_suite.py::test_w4a16_conformance[{k}-exact]")
        else:
            items += [f"{PLAN}[{k}-exact-{i}]" for i in range(ROWS.get(k, 1))]
    if "fault_hang_apply" in kernels:
        items.append(f"{CATALOGUE}[fault_hang_apply-gptq_v2]")
    return items
