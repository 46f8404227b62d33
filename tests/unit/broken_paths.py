"""Test-only broken W4A16 kernels that each break ONE path of a kernel for ONE checkpoint format or dtype (a plugin).

A W4A16 kernel is several programs behind one op, and each path reads the operands its own way (triton_w4a16: the
planar decode path reads b_planar and act-dtype zeros, the GEMV row, tl.dot tiles and the dequantize-then-matmul
prefill rows read packed b_q and qzeros), so a bug in one path's reading of one format is that path's alone. The
CI plan enters every (path, format, weight type) cell of a kernel (conformance/cases/plan.py, "paths"); these are
the proof that it must:

- the prefill rows (triton_w4a16's dequant_mm path) read GPTQ v1 zero points without the +1;
- the prefill rows read AWQ's zero points with the nibble interleave never undone;
- the GEMV row (triton_w4a16_actorder's dot-free program at M = 1) reads bf16 scales as fp16.

Every other path of the same call runs the shipped code on the right operands (test_proof_of_power checks it), so
only a row on the broken path can kill the kernel. `path` names the path each breaks (a path name of the base
kernel's `launch`; "gemv" covers "gemv+splitk": the same program, then a reduction), `formats` / `dtypes` the
checkpoint formats / act dtypes it breaks there; `sample` is a tiny layer on which the bug shows (the test that
each breaks its path, format and dtype and nothing else runs it at the least M of every path). Load
and unload as tests/unit/broken_kernels.py says; tests/unit/broken_registry.py lists every broken kernel.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel
from references.codecs import gptq as gptq_codec
from references.codecs import operands as ops
from references.packing import SEQUENTIAL, unpack

registry.load_all()
from conformance_kernels import triton_w4a16 as tw  # noqa: E402 - the built-in package exists after load_all
from conformance_kernels._w4a16_common import to_device  # noqa: E402

from tests.unit.broken_mutant_gemm import launch_mutant  # noqa: E402

PLUGIN = "tests.unit.broken_paths"
TritonW4A16 = type(registry.get_kernel("triton_w4a16"))
TritonW4A16ActOrder = type(registry.get_kernel("triton_w4a16_actorder"))


def takes_prefill(x: torch.Tensor, o) -> bool:
    """Whether triton_w4a16's launch sends this x (2-D or more) to its dequantize-then-matmul prefill rows: the
    table entry launch_w4a16_gemm picks for its M on x's device (the planar rows first where the operands carry
    b_planar)."""
    M = x.reshape(-1, x.shape[-1]).shape[0]
    kind = "interpreter" if (x.device.type == "cpu" or tw.interpreting()) else tw.gpu_tile_kind(x.device)
    return M > 0 and tw.table_tiles(M, kind, o.b_planar is not None).dequant_mm


class _PrefillZerosMutant(TritonW4A16):
    """triton_w4a16 whose prefill rows read `prefill_qzeros(checkpoint, operands)` instead of the right packed
    zeros; every other path gets the shipped operands. Not registered itself."""

    path = "dequant_mm"

    def prefill_qzeros(self, checkpoint, o):
        raise NotImplementedError

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        o.prefill_qzeros = self.prefill_qzeros(checkpoint, o) if o.qzeros is not None else None
        return o

    def apply(self, o, x):
        wrong = getattr(o, "prefill_qzeros", None)
        if wrong is not None and takes_prefill(x, o):
            o = to_device(o, x.device)
            o.qzeros = wrong.to(x.device)  # BUG: the prefill rows' own zeros
        return super().apply(o, x)


@register_kernel
class PrefillV1ZerosNoPlusOne(_PrefillZerosMutant):
    """BUG: the prefill rows read GPTQ v1 qzeros as stored (z - 1), without the +1; the planar decode path reads the
    right act-dtype zeros."""

    name = "broken_prefill_v1_zeros_no_plus_one"
    bug = "prefill rows read GPTQ v1 qzeros as stored (z - 1), without the +1"
    formats = ("gptq_v1",)
    sample = dict(N=8, K=8, group_size=-1, weight_type="uint4", act_order=False, dtype="float16", format="gptq_v1")

    def prefill_qzeros(self, checkpoint, o):
        if checkpoint.format != "gptq_v1":
            return None
        return ops.pack_zeros_gn(gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2"))


@register_kernel
class PrefillAwqZerosSequential(_PrefillZerosMutant):
    """BUG: the prefill rows read AWQ's qzeros in sequential nibble order (the interleave [0,2,4,6,1,3,5,7] never
    undone): zero points permuted inside every group of 8 columns, on asymmetric (uint4) AWQ layers only."""

    name = "broken_prefill_awq_zeros_nibbles"
    bug = "prefill rows read AWQ qzeros with the nibble interleave never undone"
    formats = ("awq",)
    sample = dict(N=16, K=64, group_size=32, weight_type="uint4", act_order=False, dtype="float16", format="awq")

    def prefill_qzeros(self, checkpoint, o):
        if checkpoint.format != "awq":
            return None
        return ops.pack_zeros_gn(unpack(checkpoint.tensors["qzeros"], dim=1, order=SEQUENTIAL))


@register_kernel
class GemvBf16ScalesAsFp16(TritonW4A16ActOrder):
    """BUG: the GEMV row (the dot-free program, M = 1) reads bf16 scales as fp16, the same 16 bits as another number;
    the tl.dot and prefill programs read them right. Runs tests/unit/broken_mutant_gemm.py's copy of the launch."""

    name = "broken_gemv_bf16_scales_as_fp16"
    bug = "the GEMV row reads bf16 scales as fp16 (the same bits)"
    path = "gemv"
    dtypes = ("bfloat16",)
    sample = dict(N=16, K=64, group_size=32, weight_type="uint4", act_order=True, dtype="bfloat16", format="gptq_v2")

    def apply(self, o, x):
        o = to_device(o, x.device)

        def run(x2):
            if o.perm is not None:
                x2 = x2.index_select(1, o.perm)
            return launch_mutant(x2.contiguous(), o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias,
                                 gemv_scales_as_fp16=True)
        return tw.gemm_any_rank(x, run)
