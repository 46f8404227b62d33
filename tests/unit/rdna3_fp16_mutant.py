"""Test-only `rdna3_fp16_accumulator`: rdna3_w4a16 with every product added in the act dtype (no fp32 split sum).

It keeps rdna3's gate, operands and declared numerics (fp32 splits of 256 added in the act dtype), so the
statistical tier judges it with rdna3's error model: it must fail there. Pass an instance to harness.run_case,
or load this module as a plugin (CONFORMANCE_PLUGINS) for benchmarks/calibrate.py-style runs.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel

registry.load_all()
RDNA3W4A16 = type(registry.get_kernel("rdna3_w4a16"))


@register_kernel
class RDNA3Fp16Accumulator(RDNA3W4A16):
    name = "rdna3_fp16_accumulator"
    priority = -100  # never selected over a real kernel

    def model(self, operands, x):
        # rdna3's own dequant, read back exactly: an fp32 identity through its model gives W [K, N] in natural
        # K order (one split is nonzero per row, so every fp32 split sum and cast is exact)
        eye = torch.eye(operands.K, dtype=torch.float32, device=x.device)
        w = super().model(operands, eye)
        acc = torch.zeros((x.shape[0], operands.N), dtype=x.dtype, device=x.device)
        for k in range(operands.K):  # BUG: the running sum is rounded to the act dtype after every product
            acc = (acc.float() + x[:, k:k + 1].float() * w[k]).to(x.dtype)
        return acc
