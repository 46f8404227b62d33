"""Test-only broken W4A16 kernels, loaded as a conformance plugin: each is a real kernel with ONE known bug.

The first eleven broken kernels of the proof of power (docs/proof-of-power.md); the others live beside them by
kind (broken_layouts.py, broken_actorder.py, broken_tiling.py, broken_fp8.py, broken_contracts.py) and all of
them are listed in tests/unit/broken_registry.py. Every bug here shipped somewhere (docs/shipped-bugs.md) or is
a classic tiling slip.

Load only inside a test: `registry.load_plugin(PLUGIN)` then `register_all()`, and `unregister_all()` in the
teardown, or the suites collected afterwards would parametrize over these kernels. Each subclass keeps its
parent's gate and declared numerics, so the CI plan and the strategies give it exactly the parent's cases.

A broken kernel is caught only by a wrong answer, never by raising: a load-step bug that would fail a shape check
reinterprets (as a `.view` does) instead, and the launch bugs run on tests/unit/broken_mutant_gemm.py, a copy of
triton_w4a16's GEMM with every path it takes (GEMV, swap_ab, dot, dequant_mm) and one switch per bug.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel
from references.codecs import gptq as gptq_codec
from references.codecs import operands as ops

registry.load_all()
from conformance_kernels import _w4a16_common as common  # noqa: E402 - the built-in package exists after load_all

from tests.unit.broken_mutant_gemm import TritonLaunchMutant, resync_planar  # noqa: E402

PLUGIN = "tests.unit.broken_kernels"
TritonW4A16 = type(registry.get_kernel("triton_w4a16"))
TritonW4A16ActOrder = type(registry.get_kernel("triton_w4a16_actorder"))
TorchDequantW4A16 = type(registry.get_kernel("torch_dequant_w4a16"))


# ---- load-step bugs (the Triton kernel itself is the shipped one) ------------------------------------------

@register_kernel
class CtZerosNotTransposed(TritonW4A16):
    """BUG: the compressed-tensors zero points [N/8, G] are reinterpreted as [G, N/8] (a reshape, not a
    transpose). Shapes always agree, so nothing complains; the numbers are wrong when G > 1 and N/8 > 1."""

    name = "broken_ct_zeros_not_transposed"
    bug = "compressed-tensors zeros [N/8, G] reinterpreted (reshape) as [G, N/8]"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "compressed_tensors" and o.qzeros is not None:
            G, n8 = o.qzeros.shape
            o.qzeros = checkpoint.tensors["weight_zero_point"].reshape(G, n8).contiguous()
        return resync_planar(o)


@register_kernel
class ZerosAlwaysTransposed(TritonW4A16):
    """BUG (vllm#47159): the load step transposes the packed zero points as if every checkpoint stored them
    compressed-tensors style [N/8, G]; GPTQ/AWQ zeros already come as [G, N/8]. The transposed words are then
    viewed as [G, N/8] (upstream failed a shape assertion there when G != N/8; here the view goes through, so the
    bug is a wrong answer on every shape with G > 1 and N/8 > 1, silent garbage as upstream when G == N/8)."""

    name = "broken_zeros_always_transposed"
    bug = "every format's packed zeros transposed as if compressed-tensors (then viewed as [G, N/8])"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if o.qzeros is not None:
            z = ops.unpack_zeros_gn(o.qzeros)
            as_stored = ops.pack_zeros_ng(z) if checkpoint.format == "compressed_tensors" else ops.pack_zeros_gn(z)
            o.qzeros = as_stored.t().contiguous().reshape(o.qzeros.shape)  # right for compressed-tensors only
        return resync_planar(o)


@register_kernel
class PlusOneFromHasZeros(TritonW4A16):
    """BUG: decides GPTQ's +1 (v1 convention) from "does the checkpoint carry zero points" instead of from the
    weight type and the checkpoint's convention: stored qzeros are used as-is (no +1, and not ignored for
    uint4b8), the +1/bias only applies when no qzeros tensor exists. Breaks every v1 checkpoint with qzeros."""

    name = "broken_plus_one_from_has_zeros"
    bug = "GPTQ +1 decided from 'has a qzeros tensor': stored zeros used raw, also for uint4b8"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format in ("gptq_v1", "gptq_v2") and "qzeros" in checkpoint.tensors:
            stored = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2")  # raw nibbles, no +1
            o.qzeros, o.zp_bias = ops.pack_zeros_gn(stored), 0
        return resync_planar(o)


@register_kernel
class V2ReadAsV1(TritonW4A16):
    """BUG (vllm#26343, vllm#38966): every GPTQ checkpoint is read with the v1 convention (stored qzeros + 1,
    as gptq_gemm with use_v2_format=False does, symmetric layers included). Right for v1; for v2 every weight
    is one scale off (a symmetric v2 layer stores 8 and gets 9)."""

    name = "broken_v2_read_as_v1"
    bug = "every GPTQ checkpoint read with v1's stored + 1 (symmetric layers too)"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format in ("gptq_v1", "gptq_v2") and "qzeros" in checkpoint.tensors:
            z = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v1")  # word + 0x11111111: v1's +1
            o.qzeros, o.zp_bias = ops.pack_zeros_gn(z & 0xF), 0
        return resync_planar(o)


@register_kernel
class V1NibbleWisePlusOne(TritonW4A16):
    """BUG: adds GPTQ v1's +1 nibble by nibble ((stored + 1) & 0xF) instead of to the int32 word, so the borrow a
    zero point of 0 left in its neighbour nibble is never undone (AutoGPTQ#640's "unsafe math")."""

    name = "broken_v1_nibble_wise_plus_one"
    bug = "v1's +1 added per nibble, so a z = 0 borrow is never undone"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "gptq_v1" and o.qzeros is not None:
            stored = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2")
            o.qzeros = ops.pack_zeros_gn((stored + 1) & 0xF)
        return resync_planar(o)


@register_kernel
class IgnoresGIdx(TritonW4A16ActOrder):
    """BUG: accepts act-order but never sorts K by g_idx: row k is taken to be in group k // group_size."""

    name = "broken_ignores_g_idx"
    bug = "accepts act-order, never sorts K by g_idx"

    def load(self, checkpoint, config=None):
        from references import codecs

        w = codecs.decode(checkpoint)
        if w.wtype.has_bias():
            qzeros, zp_bias = None, w.wtype.bias
        else:
            qzeros, zp_bias = ops.pack_zeros_gn(w.zeros.contiguous()), 0
        return common.TritonW4A16Operands(ops.triton_pack_qweight(w.q.contiguous()),
                                          w.scales.to(checkpoint.act_dtype).contiguous(), qzeros, zp_bias, w.gs)


# ---- launch / kernel bugs (real Triton changes, tests/unit/broken_mutant_gemm.py) ---------------------------

@register_kernel
class NoBlockKClamp(TritonLaunchMutant):
    """BUG (vllm#39705): the wrapper does not clamp BLOCK_K to the group size; a K tile straddling groups
    uses its first group's scale and zero point for all its rows."""

    name = "broken_no_block_k_clamp"
    bug = "the table's BLOCK_K (128) launched even when it straddles groups"
    bugs = ("no_block_k_clamp",)


@register_kernel
class Bf16DequantViaFp16(TritonLaunchMutant):
    """BUG: dequantizes bf16 cases through fp16 (scales below fp16's range flush to zero, large ones overflow)."""

    name = "broken_bf16_dequant_via_fp16"
    bug = "the Triton dequant runs in fp16 whatever the act dtype"
    bugs = ("deq_via_fp16",)


@register_kernel
class LastNTileOffByOne(TritonLaunchMutant):
    """BUG: in a partial last N tile the column bound is N - 1: the last output column gets scale 0 (output 0)."""

    name = "broken_last_n_tile_off_by_one"
    bug = "a partial last N tile bounds its columns by N - 1"
    bugs = ("last_n_tile_off_by_one",)


@register_kernel
class MTailUnwritten(TritonLaunchMutant):
    """BUG: rows of M past the last full BLOCK_M tile are never written (uninitialized output), on every path: the
    fused kernels' store mask, and on the dequant_mm path the library GEMM called on whole M tiles only."""

    name = "broken_m_tail_unwritten"
    bug = "rows past the last full BLOCK_M tile are never stored"
    bugs = ("skip_m_tail",)


# ---- numerics bug (plain torch kernel) ---------------------------------------------------------------------

@register_kernel
class Fp16Accumulator(TorchDequantW4A16):
    """BUG: accumulates the dot products in an fp16 running sum (one fp16 rounding per k) while declaring fp32.
    Products are exact (fp32 FMA, rounded once into the fp16 sum), as an HFMA-style accumulation does."""

    name = "broken_fp16_accumulator"
    bug = "fp16 running sum (one rounding per k) while declaring fp32"

    def apply(self, w, x):
        from conformance_kernels.torch_dequant_w4a16 import dequantize_act

        wd = dequantize_act(w, x.dtype, x.device).float()
        x2 = x.reshape(-1, w.K).float()
        acc = torch.zeros((x2.shape[0], w.N), dtype=torch.float16, device=x.device)
        for k in range(w.K):
            acc = torch.addcmul(acc.float(), x2[:, k:k + 1], wd[k:k + 1]).to(torch.float16)
        return acc.to(x.dtype).reshape(*x.shape[:-1], w.N)


BROKEN = {c.name: c for c in (CtZerosNotTransposed, ZerosAlwaysTransposed, PlusOneFromHasZeros, V2ReadAsV1,
                              V1NibbleWisePlusOne, IgnoresGIdx, NoBlockKClamp, Bf16DequantViaFp16, LastNTileOffByOne,
                              MTailUnwritten, Fp16Accumulator)}


def register_all() -> None:
    """(Re-)register every broken kernel of this module (after an earlier unregister_all in this process)."""
    for cls in BROKEN.values():
        register_kernel(cls)


def unregister_all() -> None:
    for name in BROKEN:
        registry.unregister_kernel(name)
