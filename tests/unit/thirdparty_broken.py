"""Broken twins of tests/unit/thirdparty_kernels.py, a separate plugin module (load it only where a failure is the
point): `thirdparty_v2_as_v1` reads GPTQ v2 checkpoints as v1 (vllm#26343), and `thirdparty_wrapped_quant` is an
FP8 quant route whose numbers are the upstream op's but which goes through a thin wrapper op the RMSNorm + quant
fusion pass cannot match. Imports only `conformance.api`, `references` and the plugin it breaks.
"""
from __future__ import annotations

import torch

from conformance.api import register_kernel
from tests.unit.thirdparty_kernels import ThirdPartyDequantW4A16, ThirdPartyFp8Quant

PLUGIN = "tests.unit.thirdparty_broken"


@register_kernel
class ThirdPartyV2AsV1(ThirdPartyDequantW4A16):
    """BUG (vllm#26343): the v1 "+1" applied to a gptq_v2 checkpoint: every asymmetric weight one scale step off."""

    name = "thirdparty_v2_as_v1"

    def dequantize(self, w, checkpoint):
        if checkpoint.format != "gptq_v2" or w.zeros is None:
            return super().dequantize(w, checkpoint)
        g = w.group_of_row()
        W = (w.q.double() - w.zeros.double()[g] - 1) * w.scales.double()[g]
        return W.to(checkpoint.act_dtype)


@torch.library.custom_op("thirdparty::wrapped_quant", mutates_args=())
def wrapped_quant(x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype, fp8_max: float, eps: float,
                  ue8m0: bool, column_major_scales: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The upstream Triton quant's numbers behind a wrapper op (the fusion pass knows only the upstream op)."""
    q, s = torch.ops.conformance.fp8_group_quant_triton(x, group_size, fp8_dtype, fp8_max, eps, ue8m0,
                                                        column_major_scales)
    return q.clone(), s.clone()


@wrapped_quant.register_fake
def _(x, group_size, fp8_dtype, fp8_max, eps, ue8m0, column_major_scales):
    return torch.ops.conformance.fp8_group_quant_triton(x, group_size, fp8_dtype, fp8_max, eps, ue8m0,
                                                        column_major_scales)


@register_kernel
class ThirdPartyWrappedQuant(ThirdPartyFp8Quant):
    """BUG for fusion: same numbers as thirdparty_fp8_quant, through `thirdparty::wrapped_quant`."""

    name = "thirdparty_wrapped_quant"
    op = torch.ops.thirdparty.wrapped_quant.default

    def apply(self, p, x):
        return self.op(x, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0, p.column_major_scales)


@register_kernel
class ThirdPartyHipOnly(ThirdPartyDequantW4A16):
    """Not broken: a device-only op (think a HIP kernel) for gfx1100, with no model. On any other machine it cannot
    run for that target: its cases are skips (repro exit 125), never failures."""

    name = "thirdparty_hip_only"
    has_model = False

    def can_implement(self, config, target):
        if target.kind != "rocm" or target.gfx_family != "gfx11":
            return f"target={target} not supported (allowed: rocm gfx11)"
        return super().can_implement(config, target)

    def availability(self, target):
        return "no ROCm device visible (the HIP op is not built here)"

    def run_mode(self, target):
        return "model" if self.availability(target) is not None else "device"

    def model(self, weights, x):
        raise NotImplementedError("thirdparty_hip_only declares no model")
