"""The conformance adapter of `toykern`, a toy kernel library whose fake releases the bisect tests build
(tests/unit/toykern_releases.py): importing this module registers `toy_dequant_w4a16`, which decodes the checkpoint
with the reference codecs and dequantizes with the installed toykern's `dequant(q, z, s, group_size)`.

A toykern without `dequant` registers nothing (repro: not registered, a skip; at a break search's good end, a
release without the kernel counts good); a toykern that does not import makes this import fail (a skip).
"""
from __future__ import annotations

import torch

from conformance.api import Kernel, W4A16Config, register_kernel


class ToyDequantW4A16(Kernel):
    name = "toy_dequant_w4a16"
    family = "w4a16"
    priority = -50  # below every built-in kernel: never changes a selection
    deterministic = True
    gate_summary = "toykern: any target; fp16/bf16; uint4, uint4b8; no act-order"

    def __init__(self, dequant):
        self.dequant = dequant  # the release's function: its file is the kernel's file in the bisect's diff

    def can_implement(self, config, target):
        if not isinstance(config, W4A16Config):
            return f"config={type(config).__name__} not supported (allowed: a W4A16Config)"
        if config.weight_type not in ("uint4", "uint4b8"):
            return f"weight_type={config.weight_type!r} not supported (allowed: uint4, uint4b8)"
        if config.act_order:
            return "act_order=True not supported (toykern has no g_idx)"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16)"
        return None

    def run_mode(self, target):  # plain torch: it runs wherever x is (the GPU on a GPU host, else the CPU)
        return "device"

    def dequant_dtype(self, config):
        return torch.float16 if config.dtype == "float16" else torch.bfloat16

    def accumulate_dtype(self, config):
        return torch.float32

    def load(self, checkpoint, config=None):
        from references import codecs

        w = codecs.decode(checkpoint)
        return self.dequant(w.q, w.zero_points(), w.scales, w.gs).to(checkpoint.act_dtype)

    def apply(self, weight, x):
        K, N = weight.shape
        w = weight.to(x.device)
        return (x.reshape(-1, K).float() @ w.float()).to(x.dtype).reshape(*x.shape[:-1], N)


def _register():
    import toykern  # the installed release's

    dequant = getattr(toykern, "dequant", None)
    if dequant is None:
        return  # a release before the kernel existed
    register_kernel(ToyDequantW4A16(dequant))


_register()
