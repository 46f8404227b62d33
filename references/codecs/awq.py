"""AWQ (GEMM) checkpoints ("awq"): qweight int32 [K, N/8] and qzeros int32 [G, N/8], both packed along N
with the INTERLEAVED nibble order (slot j holds column [0,2,4,6,1,3,5,7][j] of the run), scales [G, N],
stored z (no offset). 4-bit only (AWQ defines no other width); no act-order (AWQ has no g_idx).
"""
from __future__ import annotations

import torch

from ..checkpoint import Checkpoint
from ..errors import require
from ..packing import INTERLEAVED
from ..weight import CanonicalWeight
from ._checks import float_tensor, groups, int_tensor, multiple, tensors_present
from ._packed import pack_matrix, unpack_matrix


def pack_qweight(q: torch.Tensor) -> torch.Tensor:
    """q int32 [K, N] -> qweight int32 [K, N/8], 8 columns per word in INTERLEAVED order."""
    return pack_matrix(q, "q", ("K", "N"), 1, INTERLEAVED)


def unpack_qweight(qweight: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_qweight: int32 [K, N/8] -> q int32 [K, N]."""
    return unpack_matrix(qweight, "qweight", "[K, N/8]", 1, INTERLEAVED)


def pack_qzeros(z: torch.Tensor) -> torch.Tensor:
    """z int32 [G, N] -> qzeros int32 [G, N/8], INTERLEAVED, stored as is."""
    return pack_matrix(z, "zeros", ("G", "N"), 1, INTERLEAVED)


def unpack_qzeros(qzeros: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_qzeros: int32 [G, N/8] -> z int32 [G, N]."""
    return unpack_matrix(qzeros, "qzeros", "[G, N/8]", 1, INTERLEAVED)


def _require_4bit(wtype) -> None:
    require(wtype.size_bits == 4, "wtype", wtype.name,
            "a 4-bit type (uint4, uint4b8): AWQ packs 8 nibbles per word and defines no other width")


def encode(weight: CanonicalWeight, symmetric_qzeros: bool = True) -> Checkpoint:
    """CanonicalWeight -> AWQ checkpoint; refuses act-order. Biased types get qzeros filled with the bias
    (AWQ writers always emit qzeros) unless symmetric_qzeros=False."""
    require(isinstance(weight, CanonicalWeight), "weight", type(weight).__name__, "a CanonicalWeight")
    _require_4bit(weight.wtype)
    require(weight.g_idx is None, "g_idx", "set (act-order)",
            "None: AWQ checkpoints have no g_idx; use gptq_v1/gptq_v2/compressed_tensors for act-order")
    tensors = {"qweight": pack_qweight(weight.q), "scales": weight.scales.clone()}
    if weight.zeros is not None:
        tensors["qzeros"] = pack_qzeros(weight.zeros)
    elif symmetric_qzeros:
        tensors["qzeros"] = pack_qzeros(torch.full((weight.G, weight.N), weight.wtype.bias, dtype=torch.int32))
    meta = {"w_bit": 4, "q_group_size": weight.group_size, "zero_point": not weight.wtype.has_bias(),
            "version": "gemm"}
    return Checkpoint(format="awq", tensors=tensors, wtype=weight.wtype, group_size=weight.group_size,
                      K=weight.K, N=weight.N, act_dtype=weight.act_dtype, meta=meta)


def decode(ckpt: Checkpoint) -> CanonicalWeight:
    """AWQ checkpoint -> CanonicalWeight (shapes from the checkpoint's config; qzeros ignored for biased types)."""
    require(ckpt.format == "awq", "ckpt.format", ckpt.format, "'awq'")
    _require_4bit(ckpt.wtype)
    K, N, t = ckpt.K, ckpt.N, ckpt.tensors
    multiple(N, "N", 8)
    G = groups(K, ckpt.group_size)
    require("g_idx" not in t, "tensors['g_idx']", "present", "absent: AWQ has no act-order")
    tensors_present(t, ["qweight", "scales"] + ([] if ckpt.wtype.has_bias() else ["qzeros"]), "awq")
    q = unpack_qweight(int_tensor(t["qweight"], "qweight", (K, N // 8)))
    scales = float_tensor(t["scales"], "scales", (G, N)).to(ckpt.act_dtype)
    zeros = None
    if not ckpt.wtype.has_bias():
        zeros = unpack_qzeros(int_tensor(t["qzeros"], "qzeros", (G, N // 8)))
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=None, group_size=ckpt.group_size, wtype=ckpt.wtype)
