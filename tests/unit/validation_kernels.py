"""Test-only kernels for validate, try-refused and error profiles (plain torch, fast). Not registered on
import: tests register them in fixtures and unregister afterwards (validation_plugin.py registers them for
subprocess runs), so no other test ever sees them."""
from __future__ import annotations

import torch

from conformance.core import registry

registry.load_all()
TorchDequant = type(registry.get_kernel("torch_dequant_w4a16"))
_dequant = __import__(TorchDequant.__module__, fromlist=["dequantize_act"]).dequantize_act


def _gemm(w, x, scale: float = 1.0):
    wd = _dequant(w, x.dtype, x.device).float()
    return (x.reshape(-1, w.K).float() @ wd * scale).to(x.dtype)


class NoisyDequantW4A16(TorchDequant):
    """torch_dequant_w4a16 plus `noise` x tol of extra error on configs with group_size == `noise_group`
    (tol: the suite's own per-element bound): the error ratio grows by up to `noise` there, nowhere else."""

    name = "noisy_dequant_w4a16"
    noise = 0.0
    noise_group = -1

    def apply(self, w, x):
        y = _gemm(w, x)
        if not self.noise or w.group_size != self.noise_group:
            return y
        from conformance.checks.tolerance import ErrorModel, l2_bound

        wd = _dequant(w, x.dtype, x.device).double()  # x's device: the GPU's on a GPU host
        xd = x.reshape(-1, w.K).double()
        tol = ErrorModel(x.dtype, x.dtype, torch.float32).tolerance(y.double(), xd.abs() @ wd.abs(), w.K,
                                                                      l2_bound(xd, wd))
        return (y.double() + self.noise * tol).to(x.dtype)

    def model(self, w, x):
        return self.apply(w, x)


class GatedDequantW4A16(TorchDequant):
    """Refuses group 32 (and computes it wrong: scales off by 1%) and bf16 (which it computes right)."""

    name = "gated_dequant_w4a16"

    def can_implement(self, config, target):
        if config.group_size == 32:
            return "group_size=32 not supported (test kernel mis-scales small groups)"
        if config.dtype == "bfloat16":
            return "dtype=bfloat16 not supported (test kernel: needlessly strict)"
        return super().can_implement(config, target)

    def apply(self, w, x):
        return _gemm(w, x, scale=1.01 if w.group_size == 32 else 1.0)

    def model(self, w, x):
        return self.apply(w, x)


class BrokenDequantW4A16(TorchDequant):
    """Serves only uint4b8 g128 fp16 and gets every result 3% wrong: every case fails."""

    name = "broken_dequant_w4a16"

    def can_implement(self, config, target):
        if (config.weight_type, config.group_size, config.dtype) != ("uint4b8", 128, "float16"):
            return "only uint4b8 g128 float16 (test kernel)"
        return None

    def apply(self, w, x):
        return _gemm(w, x, scale=1.03)

    def model(self, w, x):
        return self.apply(w, x)


ALL = (NoisyDequantW4A16, GatedDequantW4A16, BrokenDequantW4A16)
