"""Where kernel unit tests put their tensors, and which tests run on which kind of machine.

DEV is the device the in-tree Triton kernels run on here (conformance.core.runtime.kernel_device): the CPU under
the interpreter, so CPU CI is unchanged, and the GPU on a GPU machine, so the tests run the device paths there
(compiled kernels, the planar path's inline PTX) instead of handing CPU tensors to kernels compiled for CUDA.
References stay on the CPU (float64); a kernel's output is compared there (`cpu`).
`tile_kind()` is the key of triton_w4a16's tile tables that a launch on DEV reads, for tests that pin a table row.
"""
from __future__ import annotations

import pytest
import torch

from conformance.core.runtime import kernel_device

DEV = torch.device(kernel_device())
ON_GPU = DEV.type != "cpu"


def on_dev(*tensors):
    """The tensors on DEV (None stays None); one tensor in, one out."""
    out = tuple(None if t is None else t.to(DEV) for t in tensors)
    return out[0] if len(out) == 1 else out


def cpu(t):
    """A kernel's output (a tensor, or a tuple of them) on the CPU, where the references are."""
    if isinstance(t, (tuple, list)):
        return type(t)(cpu(v) for v in t)
    return t.cpu()


def tile_kind() -> str:
    """The TILE_TABLE / PLANAR_TABLE key a triton_w4a16 launch on DEV reads: 'interpreter', or the GPU's arch
    ('sm90' where a measured table exists, else 'gpu')."""
    if not ON_GPU:
        return "interpreter"
    from conformance_kernels import triton_w4a16 as tw

    return tw.gpu_tile_kind(DEV)


def interpreter_only(why: str):
    """Skip on a GPU machine: the test is about the interpreter (its run mode, its patches, its tile table)."""
    return pytest.mark.skipif(ON_GPU, reason=f"Triton runs on the GPU here, not in the interpreter: {why}")


def gpu_only(why: str):
    """Skip on a machine without a GPU: the test checks a device-only path."""
    return pytest.mark.skipif(not ON_GPU, reason=f"no GPU here (the kernels run in the interpreter): {why}")
