"""Test-only broken W4A16 kernel: fp16 block partial sums while declaring fp32 accumulation.

`broken_fp16_partials` is torch_dequant_w4a16 (same gate, load and declared numerics: fp32 accumulation) with
one bug: the K dot product is cut into 32-wide blocks (BLOCK, in the kernel's K order, which is the checkpoint's
row order under act-order too), each block is summed exactly in fp32 and then ROUNDED TO FP16, and the rounded
partials are added in fp32 (only the partial rounding is wrong; the running sum is not narrowed), then one cast
to the act dtype. It is the narrow form of GemLite's small-M path (fp16 partials of 32-wide K blocks) that the
statistical tier cannot separate from fp32 at CI sizes (docs/tolerance.md 2.4); the exact tier's exact_wide
regime must catch it.

Load only inside a test: `registry.load_plugin(PLUGIN)` (importing registers it, so replay lines work) or
`register()`, and `unregister()` in the teardown, as tests/unit/broken_kernels.py.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel

registry.load_all()
TorchDequantW4A16 = type(registry.get_kernel("torch_dequant_w4a16"))

PLUGIN = "tests.unit.broken_accumulation"
BLOCK = 32  # K-terms per partial sum


@register_kernel
class Fp16Partials(TorchDequantW4A16):
    """BUG: each 32-wide K block partial is rounded to fp16 (partials added in fp32) while declaring fp32."""

    name = "broken_fp16_partials"

    def apply(self, w, x):
        from conformance_kernels.torch_dequant_w4a16 import dequantize_act

        wd = dequantize_act(w, x.dtype, x.device).float()
        x2 = x.reshape(-1, w.K).float()
        acc = torch.zeros((x2.shape[0], w.N), dtype=torch.float32, device=x.device)
        for k0 in range(0, w.K, BLOCK):
            acc += (x2[:, k0:k0 + BLOCK] @ wd[k0:k0 + BLOCK]).to(torch.float16).float()
        return acc.to(x.dtype).reshape(*x.shape[:-1], w.N)


BROKEN = {Fp16Partials.name: Fp16Partials}
BASE = {Fp16Partials.name: "torch_dequant_w4a16"}  # the correct kernel it is a variant of (same gate, strategies)


def register() -> None:
    """(Re-)register the broken kernel (after an earlier unregister in this process)."""
    for cls in BROKEN.values():
        register_kernel(cls)


def unregister() -> None:
    for name in BROKEN:
        registry.unregister_kernel(name)
