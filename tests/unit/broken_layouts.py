"""Test-only broken W4A16 kernels with ONE checkpoint-layout, offset or dtype bug in the load step (a plugin).

Each is triton_w4a16 whose `load` reads one thing of the checkpoint wrong (docs/formats.md says what is right);
the Triton kernel under it is the shipped one, and the planar operands are re-derived from the wrong ones
(broken_mutant_gemm.resync_planar). Bugs that would fail a shape check reinterpret instead (as a `.view` does), so
each is caught only by a wrong answer. Load and unload as tests/unit/broken_kernels.py says;
tests/unit/broken_registry.py lists every broken kernel.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel
from references.codecs import gptq as gptq_codec
from references.codecs import operands as ops
from references.packing import SEQUENTIAL, unpack
from tests.unit.broken_mutant_gemm import resync_planar

registry.load_all()
TritonW4A16 = type(registry.get_kernel("triton_w4a16"))

PLUGIN = "tests.unit.broken_layouts"


@register_kernel
class V1ReadAsV2(TritonW4A16):
    """BUG: GPTQ v1 qzeros (stored z - 1) used as stored, without the +1: every asymmetric v1 weight is one scale
    step off (the opposite of vllm#26343's v2-read-as-v1)."""

    name = "broken_v1_read_as_v2"
    bug = "GPTQ v1 qzeros used as stored (z - 1), without the +1"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "gptq_v1" and o.qzeros is not None:
            o.qzeros = ops.pack_zeros_gn(gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2"))
        return resync_planar(o)


@register_kernel
class AwqQweightSequential(TritonW4A16):
    """BUG: AWQ's qweight unpacked in sequential nibble order: the interleave [0,2,4,6,1,3,5,7] is never undone, so
    columns are permuted inside every group of 8."""

    name = "broken_awq_qweight_sequential"
    bug = "AWQ qweight unpacked sequentially (the nibble interleave never undone)"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "awq":
            q = unpack(checkpoint.tensors["qweight"], dim=1, order=SEQUENTIAL)
            o.b_q = ops.triton_pack_qweight(q)
        return resync_planar(o)


@register_kernel
class AwqQzerosSequential(TritonW4A16):
    """BUG: AWQ's qweight is de-interleaved but its qzeros are unpacked sequentially (the interleave undone for one
    tensor only): zero points permuted inside every group of 8 columns."""

    name = "broken_awq_qzeros_sequential"
    bug = "AWQ qzeros unpacked sequentially (qweight right)"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "awq" and o.qzeros is not None:
            o.qzeros = ops.pack_zeros_gn(unpack(checkpoint.tensors["qzeros"], dim=1, order=SEQUENTIAL))
        return resync_planar(o)


@register_kernel
class CtWeightNotTransposed(TritonW4A16):
    """BUG: compressed-tensors' weight_packed [N, K/8] (packed along K, output channel major) read as a GPTQ
    qweight [K/8, N]: reshaped instead of transposed, so K and N are mixed up in every word."""

    name = "broken_ct_weight_not_transposed"
    bug = "compressed-tensors weight_packed [N, K/8] reshaped to GPTQ's [K/8, N] instead of transposed"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "compressed_tensors":
            K, N = checkpoint.K, checkpoint.N
            q = gptq_codec.unpack_qweight(checkpoint.tensors["weight_packed"].reshape(K // 8, N))
            o.b_q = ops.triton_pack_qweight(q)
        return resync_planar(o)


@register_kernel
class SymmetricNoBias(TritonW4A16):
    """BUG: a symmetric (uint4b8) layer dequantized as q * s: the type's bias 8 is never subtracted (unsigned read
    as if it were signed-centred)."""

    name = "broken_symmetric_no_bias"
    bug = "symmetric uint4b8 dequantized without its bias 8 (q * s)"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if o.zp_bias:
            o.qzeros, o.zp_bias = None, 0
        return resync_planar(o)


@register_kernel
class Bf16ScalesViaFp16(TritonW4A16):
    """BUG: the load step stores bf16 scales through an fp16 tensor (scales.half() for the kernel, cast back):
    scales above 65504 become inf, below 2^-14 lose bits or flush to 0. Exact for fp16 layers and for bf16 scales
    inside fp16's normal range, so only large or tiny bf16 scales show it."""

    name = "broken_bf16_scales_via_fp16"
    bug = "bf16 scales rounded through fp16 in the load step"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if o.scales.dtype == torch.bfloat16:
            o.scales = o.scales.to(torch.float16).to(torch.bfloat16)
        return resync_planar(o)
