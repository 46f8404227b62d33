"""GPTQ checkpoints ("gptq_v1", "gptq_v2"): qweight int32 [K/pf, N] packed along K, qzeros int32 [G, N/pf]
packed along N (both sequential), scales [G, N], optional g_idx int32 [K]. pf = 32 // bits (8 or 4).

v1 stores z - 1 (the kernel adds 1 back); v2 stores z. Biased (symmetric) types still get a qzeros
tensor filled with the bias (v2) or bias - 1 (v1), as GPTQ writers do; decode ignores it for them.
"""
from __future__ import annotations

import torch

from ..checkpoint import Checkpoint
from ..errors import InvalidInput, require
from ..packing import SEQUENTIAL, to_int32_word, unpack
from ..weight import CanonicalWeight
from ._checks import bits_of, float_tensor, groups, int_tensor, multiple, ndim, tensors_present
from ._packed import pack_matrix, unpack_matrix

VERSIONS = ("v1", "v2")
V1_ZERO_POLICIES = ("refuse", "borrow")


def _ones(bits: int) -> int:
    """The word with 1 in every slot (0x11111111 for 4-bit, 0x01010101 for 8-bit)."""
    return sum(1 << (bits * j) for j in range(32 // bits))


def pack_qweight(q: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """q int32 [K, N] -> qweight int32 [K/pf, N]: row k0+j of a run at bits [bits*j, bits*(j+1))."""
    bits_of(bits)
    return pack_matrix(q, "q", ("K", "N"), 0, SEQUENTIAL, bits)


def unpack_qweight(qweight: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """Inverse of pack_qweight: int32 [K/pf, N] -> q int32 [K, N]."""
    bits_of(bits)
    return unpack_matrix(qweight, "qweight", "[K/pf, N]", 0, SEQUENTIAL, bits)


def pack_qzeros(z: torch.Tensor, version: str = "v2", v1_zero_policy: str = "refuse", bits: int = 4) -> torch.Tensor:
    """z int32 [G, N] (true zero points) -> qzeros int32 [G, N/pf] as `version` stores them.

    v2 packs z. v1 packs z - 1, which cannot hold z == 0 in a nibble: policy "refuse" raises
    InvalidInput naming `zeros`; policy "borrow" does what int32 word arithmetic does, i.e. the word
    is pack(z) - 0x11111111 (mod 2**32), so a -1 borrows from the next slot up. unpack_qzeros(.., "v1")
    adds 0x11111111 back to the word before unpacking, which undoes the borrow exactly (and is the
    plain +1 per slot whenever no z is 0).
    """
    bits_of(bits)
    require(version in VERSIONS, "version", version, f"one of {VERSIONS}")
    require(v1_zero_policy in V1_ZERO_POLICIES, "v1_zero_policy", v1_zero_policy, f"one of {V1_ZERO_POLICIES}")
    words = pack_matrix(z, "zeros", ("G", "N"), 1, SEQUENTIAL, bits)  # validates z and its value range
    if version == "v2":
        return words
    zero_at = (z == 0).nonzero()
    if len(zero_at) and v1_zero_policy == "refuse":
        g, n = (int(v) for v in zero_at[0])
        raise InvalidInput(
            "zeros", f"0 at [group {g}, column {n}] ({len(zero_at)} such entries)",
            "zero points >= 1 for gptq_v1 (it stores z - 1); use gptq_v2 or v1_zero_policy='borrow'")
    return to_int32_word(words.to(torch.int64) - _ones(bits))


def unpack_qzeros(qzeros: torch.Tensor, version: str = "v2", bits: int = 4) -> torch.Tensor:
    """Inverse of pack_qzeros: int32 [G, N/pf] -> z int32 [G, N] (v1: word + 0x11111111, then unpack)."""
    bits_of(bits)
    require(version in VERSIONS, "version", version, f"one of {VERSIONS}")
    int_tensor(ndim(qzeros, "qzeros", 2, "[G, N/pf]"), "qzeros")
    if version == "v1":
        qzeros = to_int32_word(qzeros.to(torch.int64) + _ones(bits))
    return unpack(qzeros, dim=1, bits=bits, order=SEQUENTIAL)


def encode(weight: CanonicalWeight, version: str = "v2", v1_zero_policy: str = "refuse",
           symmetric_qzeros: bool = True) -> Checkpoint:
    """CanonicalWeight -> a GPTQ checkpoint (format "gptq_v1"/"gptq_v2"); g_idx written only if act-order."""
    require(isinstance(weight, CanonicalWeight), "weight", type(weight).__name__, "a CanonicalWeight")
    require(version in VERSIONS, "version", version, f"one of {VERSIONS}")
    bits = weight.wtype.size_bits
    tensors = {"qweight": pack_qweight(weight.q, bits), "scales": weight.scales.clone()}
    if weight.wtype.has_bias():
        if symmetric_qzeros:
            # what GPTQ writers store for a symmetric layer; v1's -1 is applied like any other zero
            fill = torch.full((weight.G, weight.N), weight.wtype.bias, dtype=torch.int32)
            tensors["qzeros"] = pack_qzeros(fill, version, "refuse", bits)
    else:
        tensors["qzeros"] = pack_qzeros(weight.zeros, version, v1_zero_policy, bits)
    if weight.g_idx is not None:
        tensors["g_idx"] = weight.g_idx.clone()
    meta = {"bits": bits, "group_size": weight.group_size, "desc_act": weight.act_order,
            "sym": weight.wtype.has_bias(), "checkpoint_format": "gptq" if version == "v1" else "gptq_v2"}
    return Checkpoint(format=f"gptq_{version}", tensors=tensors, wtype=weight.wtype,
                      group_size=weight.group_size, K=weight.K, N=weight.N, act_dtype=weight.act_dtype, meta=meta)


def decode(ckpt: Checkpoint) -> CanonicalWeight:
    """A GPTQ checkpoint -> CanonicalWeight; the version comes from ckpt.format (the label is trusted),
    K, N, group size and type from the checkpoint's config fields. qzeros is ignored for biased types."""
    require(ckpt.format in ("gptq_v1", "gptq_v2"), "ckpt.format", ckpt.format, "'gptq_v1' or 'gptq_v2'")
    version = ckpt.format[len("gptq_"):]
    wt, K, N = ckpt.wtype, ckpt.K, ckpt.N
    bits, pf = wt.size_bits, wt.pack_factor
    t = ckpt.tensors
    multiple(K, "K", pf)
    multiple(N, "N", 8)
    G = groups(K, ckpt.group_size)
    tensors_present(t, ["qweight", "scales"] + ([] if wt.has_bias() else ["qzeros"]), ckpt.format)
    q = unpack_qweight(int_tensor(t["qweight"], "qweight", (K // pf, N)), bits)
    scales = float_tensor(t["scales"], "scales", (G, N)).to(ckpt.act_dtype)
    zeros = None
    if not wt.has_bias():
        zeros = unpack_qzeros(int_tensor(t["qzeros"], "qzeros", (G, N // pf)), version, bits)
    g_idx = t.get("g_idx")
    if g_idx is not None:
        ndim(g_idx, "g_idx", 1, f"[K] = [{K}]")
        require(g_idx.dtype in (torch.int32, torch.int64), "g_idx.dtype", g_idx.dtype, "torch.int32 or torch.int64")
        g_idx = g_idx.to(torch.int32)
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=g_idx, group_size=ckpt.group_size, wtype=wt)
