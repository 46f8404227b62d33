"""Test-only broken kernels, loaded as a conformance plugin: each breaks one custom-op contract on purpose.

They inherit the gates of the kernels they break (so the checks draw the same inputs): load them only
inside a test (registry.load_plugin) and unregister them afterwards, or other suites would pick them up.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel

registry.load_all()
_tw = registry.get_kernel("triton_w4a16")
_tw_mod = __import__(type(_tw).__module__, fromlist=["launch_w4a16_gemm"])
TritonW4A16 = type(_tw)


@torch.library.custom_op("conformance_mutants::w4a16_wrong_n", mutates_args=())
def _wrong_n(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
             group_size: int, zp_bias: int) -> torch.Tensor:
    return _tw_mod.launch_w4a16_gemm(x.contiguous(), b_q, scales, qzeros, group_size, zp_bias)


@_wrong_n.register_fake
def _(x, b_q, scales, qzeros, group_size, zp_bias):
    return x.new_empty((x.shape[0], b_q.shape[1] * 4))  # BUG: 4 nibbles per word instead of 8


def _plain_python_gemm(x, b_q, scales, qzeros, group_size, zp_bias):
    """BUG: a plain Python wrapper around the Triton launch, not a torch.library op."""
    return _tw_mod.launch_w4a16_gemm(x.contiguous(), b_q, scales, qzeros, group_size, zp_bias)


@torch.library.custom_op("conformance_mutants::w4a16_with_tiles", mutates_args=())
def _with_tiles(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                group_size: int, zp_bias: int, block_m: int, block_n: int, block_k: int, split_k: int) -> torch.Tensor:
    tiles = _tw_mod.TileConfig(block_m, block_n, block_k, split_k)
    return _tw_mod.launch_w4a16_gemm(x.contiguous(), b_q, scales, qzeros, group_size, zp_bias, tiles=tiles)


@_with_tiles.register_fake
def _(x, b_q, scales, qzeros, group_size, zp_bias, block_m, block_n, block_k, split_k):
    return x.new_empty((x.shape[0], b_q.shape[1] * 8))


class _Mutant(TritonW4A16):
    def apply(self, o, x):
        return self.op(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias)


@register_kernel
class FakeWrongN(_Mutant):
    name = "mutant_fake_wrong_n"
    op = torch.ops.conformance_mutants.w4a16_wrong_n.default


@register_kernel
class PlainPythonOp(_Mutant):
    name = "mutant_plain_python_op"
    op = staticmethod(_plain_python_gemm)


@register_kernel
class FrozenTiles(_Mutant):
    name = "mutant_frozen_tiles"
    op = torch.ops.conformance_mutants.w4a16_with_tiles.default

    def apply(self, o, x):
        # BUG: the tile choice runs in Python on the traced shape; compile bakes the prefill tiles in
        t = _tw_mod.table_tiles(x.shape[0], "interpreter")
        return self.op(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias, t.block_m, t.block_n, t.block_k,
                       t.split_k)


@torch.library.custom_op("conformance_mutants::fp8_quant_wrapper", mutates_args=())
def _quant_wrapper(x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype, fp8_max: float, eps: float,
                   ue8m0: bool, column_major_scales: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """BUG for fusion: the same numbers as the Triton quant op, behind a thin wrapper op."""
    q, s = torch.ops.conformance.fp8_group_quant_triton(x, group_size, fp8_dtype, fp8_max, eps, ue8m0,
                                                        column_major_scales)
    return q.clone(), s.clone()


@_quant_wrapper.register_fake
def _(x, group_size, fp8_dtype, fp8_max, eps, ue8m0, column_major_scales):
    return torch.ops.conformance.fp8_group_quant_triton(x, group_size, fp8_dtype, fp8_max, eps, ue8m0,
                                                        column_major_scales)


_fq = registry.get_kernel("fp8_group_quant_triton")


@register_kernel
class WrappedQuant(type(_fq)):
    name = "mutant_wrapped_quant"
    op = torch.ops.conformance_mutants.fp8_quant_wrapper.default


MUTANT_NAMES = ("mutant_fake_wrong_n", "mutant_plain_python_op", "mutant_frozen_tiles", "mutant_wrapped_quant")
