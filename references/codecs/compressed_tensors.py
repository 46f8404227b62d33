"""compressed-tensors "pack-quantized" checkpoints ("compressed_tensors"), as compressed-tensors writes them:

  weight_packed      int32 [N, K/pf]  row n = output channel n, packed along K, sequential (pf = 32 // bits)
  weight_scale       [N, G]           (G = 1 for channelwise)
  weight_zero_point  int32 [N/pf, G]  packed along N (dim 0), sequential; asymmetric types only
  weight_g_idx       int32 [K]        optional (act-order "group"; compressed-tensors >= 0.20 no longer writes it)
  weight_shape       int64 [2]        = [N, K]

compressed-tensors holds signed values v in [-2**(bits-1), 2**(bits-1)) and packs v + 2**(bits-1); for our
stored q (and z) that offset is exactly the identity: the stored field equals q (and z), q - z unchanged.
"""
from __future__ import annotations

import torch

from ..checkpoint import Checkpoint
from ..errors import require
from ..packing import SEQUENTIAL
from ..weight import CanonicalWeight
from ._checks import bits_of, float_tensor, groups, int_tensor, multiple, ndim, tensors_present
from ._packed import pack_matrix, unpack_matrix


def pack_weight(q: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """q int32 [K, N] -> weight_packed int32 [N, K/pf] (row n packs column n of q along K)."""
    bits_of(bits)
    return pack_matrix(q, "q", ("K", "N"), 0, SEQUENTIAL, bits, transpose=True)


def unpack_weight(weight_packed: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """Inverse of pack_weight: int32 [N, K/pf] -> q int32 [K, N]."""
    bits_of(bits)
    return unpack_matrix(weight_packed, "weight_packed", "[N, K/pf]", 1, SEQUENTIAL, bits, transpose=True)


def pack_zero_point(z: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """z int32 [G, N] -> weight_zero_point int32 [N/pf, G] (packed along N, N-major)."""
    bits_of(bits)
    return pack_matrix(z, "zeros", ("G", "N"), 1, SEQUENTIAL, bits, transpose=True)


def unpack_zero_point(weight_zero_point: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """Inverse of pack_zero_point: int32 [N/pf, G] -> z int32 [G, N]."""
    bits_of(bits)
    return unpack_matrix(weight_zero_point, "weight_zero_point", "[N/pf, G]", 0, SEQUENTIAL, bits, transpose=True)


def encode(weight: CanonicalWeight) -> Checkpoint:
    """CanonicalWeight -> pack-quantized tensors (zero point only for asymmetric types, g_idx only for act-order)."""
    require(isinstance(weight, CanonicalWeight), "weight", type(weight).__name__, "a CanonicalWeight")
    bits = weight.wtype.size_bits
    tensors = {
        "weight_packed": pack_weight(weight.q, bits),
        "weight_scale": weight.scales.t().contiguous(),
        "weight_shape": torch.tensor([weight.N, weight.K], dtype=torch.int64),
    }
    if weight.zeros is not None:
        tensors["weight_zero_point"] = pack_zero_point(weight.zeros, bits)
    if weight.g_idx is not None:
        tensors["weight_g_idx"] = weight.g_idx.clone()
    meta = {"format": "pack-quantized", "num_bits": bits, "type": "int", "symmetric": weight.wtype.has_bias(),
            "strategy": "channel" if weight.group_size == -1 else "group",
            "group_size": None if weight.group_size == -1 else weight.group_size,
            "actorder": "group" if weight.act_order else None}
    return Checkpoint(format="compressed_tensors", tensors=tensors, wtype=weight.wtype, group_size=weight.group_size,
                      K=weight.K, N=weight.N, act_dtype=weight.act_dtype, meta=meta)


def decode(ckpt: Checkpoint) -> CanonicalWeight:
    """pack-quantized tensors -> CanonicalWeight; weight_zero_point is ignored for biased (symmetric) types."""
    require(ckpt.format == "compressed_tensors", "ckpt.format", ckpt.format, "'compressed_tensors'")
    wt, K, N, t = ckpt.wtype, ckpt.K, ckpt.N, ckpt.tensors
    bits, pf = wt.size_bits, wt.pack_factor
    multiple(K, "K", pf)
    multiple(N, "N", 8)
    G = groups(K, ckpt.group_size)
    tensors_present(t, ["weight_packed", "weight_scale"] + ([] if wt.has_bias() else ["weight_zero_point"]),
                    "compressed_tensors")
    if "weight_shape" in t:
        shape = t["weight_shape"]
        ok = isinstance(shape, torch.Tensor) and not shape.is_floating_point() and shape.tolist() == [N, K]
        require(ok, "weight_shape", shape.tolist() if isinstance(shape, torch.Tensor) else shape, f"[N, K] = {[N, K]}")
    q = unpack_weight(int_tensor(t["weight_packed"], "weight_packed", (N, K // pf)), bits)
    scales = float_tensor(t["weight_scale"], "weight_scale", (N, G)).t().contiguous().to(ckpt.act_dtype)
    zeros = None
    if not wt.has_bias():
        zeros = unpack_zero_point(int_tensor(t["weight_zero_point"], "weight_zero_point", (N // pf, G)), bits)
    g_idx = t.get("weight_g_idx")
    if g_idx is not None:
        ndim(g_idx, "weight_g_idx", 1, f"[K] = [{K}]")
        require(g_idx.dtype in (torch.int32, torch.int64), "weight_g_idx.dtype", g_idx.dtype,
                "torch.int32 or torch.int64")
        g_idx = g_idx.to(torch.int32)
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=g_idx, group_size=ckpt.group_size, wtype=wt)
