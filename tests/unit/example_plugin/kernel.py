"""`example_dequant_w4a16`: dequantize once at load time, then an fp32-accumulating matmul.

Gate: symmetric uint4b8 only, group 32..K, fp16/bf16, no act-order, any target. Priority -10 so
that, when loaded, it never changes which built-in kernel is selected.
"""
from __future__ import annotations

import torch

from conformance.core.registry import Kernel, register_kernel


@register_kernel
class ExampleDequantW4A16(Kernel):
    name = "example_dequant_w4a16"
    family = "w4a16"
    priority = -10
    deterministic = True
    gate_summary = "example plugin: any target; fp16/bf16; uint4b8; group >= 32 or channelwise; no act-order"

    def can_implement(self, config, target):
        # Reasons name the field, its value and what is allowed: they are printed by `select`/`coverage`.
        if config.family != "w4a16":
            return f"family={config.family!r} not supported (allowed: 'w4a16')"
        if config.weight_type != "uint4b8":
            return f"weight_type={config.weight_type!r} not supported (allowed: uint4b8)"
        if config.act_order:
            return "act_order=True not supported (the dequantized weight keeps checkpoint row order)"
        if config.group_size != -1 and config.group_size < 32:
            return f"group_size={config.group_size} not supported (allowed: -1 or >= 32)"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16)"
        return None

    def availability(self, target):
        return None  # plain torch: runs wherever torch runs

    def run_mode(self, target):
        return "device"

    def dequant_dtype(self, config):
        return torch.float16 if config.dtype == "float16" else torch.bfloat16

    def accumulate_dtype(self, config):
        return torch.float32

    def load(self, checkpoint, config=None):
        # Every checkpoint format goes through the shared codecs: never a private nibble order.
        from references import codecs

        w = codecs.decode(checkpoint)
        if w.g_idx is not None and not torch.equal(w.g_idx.long(), torch.arange(w.K) // w.gs):
            raise ValueError("example_dequant_w4a16: act-order checkpoints are not supported")
        # (q - z) * s computed exactly, rounded once into the act dtype: the declared dequant dtype
        return w.dequantize(checkpoint.act_dtype)

    def apply(self, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        K, N = weight.shape
        y = x.reshape(-1, K).float() @ weight.to(x.device).float()
        return y.to(x.dtype).reshape(*x.shape[:-1], N)

    def model(self, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.apply(weight, x)
