"""`torch_dequant_w4a16`: plain torch dequantize + matmul; runs anywhere and serves every W4A16 config.

Numerics (declared): W = (q - z) * s rounded once into the act dtype; y = x @ W with both operands
upcast to fp32 (exact) so the dot products accumulate in fp32 on every device, then one cast to the
act dtype. (torch's own CPU fp16/bf16 matmul was measured to accumulate in at least fp32, but CUDA
may reduce in fp16, so the upcast is explicit.)
"""
from __future__ import annotations

import torch

from conformance.core.launch import Launch
from conformance.core.registry import Kernel, register_kernel
from conformance.core.targets import Target
from conformance.families.config import W4A16Config
from references.weight import CanonicalWeight

from ._w4a16_common import first_refusal, gate_act_dtype, gate_k_multiple_of_group, gate_n_multiple_of_8


def dequantize_act(w: CanonicalWeight, dtype: torch.dtype, device=None) -> torch.Tensor:
    """W [K, N] in `dtype`: (q - z[g(k)]) exactly as an integer, then times s[g(k)], rounded once."""
    g = w.group_of_row()
    z = w.zero_points().long()[g]
    s = w.scales[g].to(dtype)
    out = (w.q.long() - z).to(dtype) * s
    return out if device is None else out.to(device)


@register_kernel
class TorchDequantW4A16(Kernel):
    name = "torch_dequant_w4a16"
    family = "w4a16"
    priority = 0
    deterministic = True
    gate_summary = "any target; fp16/bf16; uint4, uint4b8, uint8, uint8b128; any group; act-order"

    def can_implement(self, config, target: Target) -> str | None:
        if not isinstance(config, W4A16Config):  # a config of another family
            return f"family={config.family!r} not supported (allowed: 'w4a16')"
        # any type, group and act-order, but only shapes a canonical weight can hold (G = K / group_size)
        return first_refusal(gate_act_dtype(config), gate_n_multiple_of_8(config), gate_k_multiple_of_group(config))

    def availability(self, target: Target) -> str | None:
        if target.is_gpu:
            from conformance.core.targets import detect_target

            here = detect_target()
            if here != target:
                return f"target={target} is not this machine's device ({here})"
        return None

    def run_mode(self, target: Target) -> str:
        # plain torch runs natively on the cpu target: never through the Triton interpreter
        return "model" if self.availability(target) is not None else "device"

    def launch(self, config, M: int, target: Target) -> Launch | None:
        """One path, "torch_dequant" (dequantize, then torch.matmul): no JIT program."""
        return None if self.can_implement(config, target) is not None else Launch("torch_dequant")

    def dequant_dtype(self, config) -> torch.dtype:
        return torch.float16 if config.dtype == "float16" else torch.bfloat16

    def accumulate_dtype(self, config) -> torch.dtype:
        return torch.float32

    def load(self, checkpoint, config=None) -> CanonicalWeight:
        from references import codecs

        return codecs.decode(checkpoint)

    def apply(self, w: CanonicalWeight, x: torch.Tensor) -> torch.Tensor:
        wd = dequantize_act(w, x.dtype, x.device)
        y = x.reshape(-1, w.K).float() @ wd.float()
        return y.to(x.dtype).reshape(*x.shape[:-1], w.N)

    def model(self, w: CanonicalWeight, x: torch.Tensor) -> torch.Tensor:
        # the kernel is already plain torch: its model is the same reading of the same operands
        return self.apply(w, x)
