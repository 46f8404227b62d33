"""Kernel operand layouts (not checkpoint formats): each `*_pack`/`encode` has its exact inverse here.

All nibble orders come from references.packing; this module only says which dimension is packed,
in which order, and which transposes or row permutations surround it.
"""
from __future__ import annotations

import torch

from ..errors import require
from ..packing import INTERLEAVED, SEQUENTIAL, pack, unpack
from ._checks import int_tensor, multiple, ndim
from ._packed import pack_matrix, unpack_matrix

PLANAR_BLOCK = 128  # K rows per block of the planar layout (the Triton W4A16 decode path's K tile)


def _q(q, field: str = "q") -> torch.Tensor:
    return int_tensor(ndim(q, field, 2, "[K, N]"), field)


# --- Triton W4A16: qweight [K, N/8] and zeros [G, N/8], packed along N, sequential -------------------

def triton_pack_qweight(q: torch.Tensor) -> torch.Tensor:
    """q int32 [K, N] -> int32 [K, N/8], 8 consecutive columns per word, column n0+j at bits 4j."""
    return pack_matrix(q, "q", ("K", "N"), 1, SEQUENTIAL)


def triton_unpack_qweight(qweight: torch.Tensor) -> torch.Tensor:
    """Inverse of triton_pack_qweight: int32 [K, N/8] -> q int32 [K, N]."""
    return unpack_matrix(qweight, "qweight", "[K, N/8]", 1, SEQUENTIAL)


def pack_zeros_gn(z: torch.Tensor) -> torch.Tensor:
    """z int32 [G, N] -> int32 [G, N/8] packed along N, sequential (GPTQ/Triton zero layout)."""
    return pack_matrix(z, "zeros", ("G", "N"), 1, SEQUENTIAL)


def unpack_zeros_gn(qzeros: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_zeros_gn: int32 [G, N/8] -> z int32 [G, N]."""
    return unpack_matrix(qzeros, "qzeros", "[G, N/8]", 1, SEQUENTIAL)


def pack_zeros_ng(z: torch.Tensor) -> torch.Tensor:
    """z int32 [G, N] -> int32 [N/8, G]: packed along N, sequential, N-major (compressed-tensors layout)."""
    return pack_matrix(z, "zeros", ("G", "N"), 1, SEQUENTIAL, transpose=True)


def unpack_zeros_ng(qzeros: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_zeros_ng: int32 [N/8, G] -> z int32 [G, N]."""
    return unpack_matrix(qzeros, "qzeros", "[N/8, G]", 0, SEQUENTIAL, transpose=True)


# --- exllama / RDNA3: GPTQ [K/8, N] words, rows made sequential by g_idx, then nibbles interleaved ------

def _check_perm(q_perm, K: int) -> torch.Tensor:
    require(isinstance(q_perm, torch.Tensor) and q_perm.dim() == 1 and q_perm.shape[0] == K, "q_perm",
            tuple(q_perm.shape) if isinstance(q_perm, torch.Tensor) else q_perm, f"an int tensor of shape ({K},)")
    require(not q_perm.is_floating_point(), "q_perm.dtype", q_perm.dtype, "an integer dtype")
    ok = torch.equal(torch.sort(q_perm.long()).values, torch.arange(K))
    require(ok, "q_perm", "not a permutation", f"a permutation of range({K})")
    return q_perm.long()


def exllama_shuffle(q: torch.Tensor, g_idx: torch.Tensor | None = None):
    """q int32 [K, N] (logical rows) -> (qweight int32 [K/8, N], q_perm int64 [K] or None).

    With act-order, row i of the packed matrix is logical row q_perm[i], q_perm = stable argsort(g_idx),
    so groups become contiguous; then 8 rows per word, slot j holding row INTERLEAVED[j] of the run.
    """
    q = _q(q)
    multiple(q.shape[0], "K", 8)
    q_perm = None
    if g_idx is not None:
        ndim(g_idx, "g_idx", 1, f"[K] = [{q.shape[0]}]")
        require(g_idx.shape[0] == q.shape[0], "g_idx.shape", tuple(g_idx.shape), f"({q.shape[0]},)")
        require(g_idx.dtype in (torch.int32, torch.int64), "g_idx.dtype", g_idx.dtype, "torch.int32 or torch.int64")
        q_perm = torch.argsort(g_idx.long(), stable=True)
        q = q[q_perm]
    return pack(q, dim=0, bits=4, order=INTERLEAVED), q_perm


def exllama_unshuffle(qweight: torch.Tensor, q_perm: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of exllama_shuffle: int32 [K/8, N] (+ q_perm) -> q int32 [K, N] in logical row order."""
    int_tensor(ndim(qweight, "qweight", 2, "[K/8, N]"), "qweight")
    rows = unpack(qweight, dim=0, bits=4, order=INTERLEAVED)
    if q_perm is None:
        return rows
    perm = _check_perm(q_perm, rows.shape[0])
    q = torch.empty_like(rows)
    q[perm] = rows
    return q


# --- RDNA hybrid: [N, K/8] words packed along K, interleaved ----------------------------------------

def hybrid_pack_qweight(q: torch.Tensor) -> torch.Tensor:
    """q int32 [K, N] -> int32 [N, K/8]: row n holds column n of q, 8 K-values per word, INTERLEAVED."""
    return pack_matrix(q, "q", ("K", "N"), 0, INTERLEAVED, transpose=True)


def hybrid_unpack_qweight(qweight: torch.Tensor) -> torch.Tensor:
    """Inverse of hybrid_pack_qweight: int32 [N, K/8] (any strides, e.g. a [:, :K/8] slice of a padded
    buffer; an int8 [N, K/2] view of it is accepted too) -> q int32 [K, N]."""
    ndim(qweight, "qweight", 2, "[N, K/8]")
    if qweight.dtype == torch.int8:
        # the int8 view of the same bytes: reinterpret (host byte order, as the kernel does) back to words
        require(qweight.shape[1] % 4 == 0, "qweight.shape", tuple(qweight.shape),
                "an int8 [N, K/2] view with K/2 a multiple of 4")
        qweight = qweight.contiguous().view(torch.int32)
    return unpack_matrix(qweight, "qweight", "[N, K/8]", 1, INTERLEAVED, transpose=True)


# --- Triton W4A16 planar (decode path): [Kb, N, block/8] words, 4 K-planes per 16-bit half ------------
#
# K is cut into blocks of `block` rows (the last one zero-padded) and each block into 4 planes of R = block/4
# consecutive rows. Seen as int16 [Kb, N, R] (host byte order, little-endian, as the kernel reads it), element
# (b, n, i) holds q[b*block + j*R + i, n] at bits 4j, j = 0..3: one shift and mask of a loaded tensor yields
# plane j as a [BN, R] tile in the loaded tile's own register layout (no reshape), so the kernel dequantizes it
# in the tensor-core operand layout. As int32 words (pairs of int16), word (b, n, w) holds elements 2w (low
# half) and 2w+1 (high half): slot s < 4 is row b*block + s*R + 2w, slot s >= 4 is row b*block + (s-4)*R + 2w+1.

def _planar_block(block) -> int:
    require(isinstance(block, int) and block >= 64 and block % 64 == 0, "block", block,
            "a positive multiple of 64 (each of the 4 planes spans a multiple of 16 rows)")
    return block


def _planar_rows(Kp: int, block: int) -> torch.Tensor:
    """Logical row held by each packing position p = (b, w, s) flattened: slot s of word w of block b."""
    R = block // 4
    p = torch.arange(Kp)
    b, r = p // block, p % block
    w, s = r // 8, r % 8
    return b * block + (s % 4) * R + 2 * w + s // 4


def planar_pack_qweight(q: torch.Tensor, block: int = PLANAR_BLOCK) -> torch.Tensor:
    """q int32 [K, N] -> int32 [ceil(K/block), N, block/8], the planar layout above (rows >= K zero)."""
    q = _q(q)
    block = _planar_block(block)
    K, N = q.shape
    require(K > 0 and N > 0, "q.shape", tuple(q.shape), "non-empty [K, N]")
    Kb = -(-K // block)
    qp = torch.zeros((Kb * block, N), dtype=torch.int32)
    qp[:K] = q
    words = pack(qp[_planar_rows(Kb * block, block)], dim=0, bits=4, order=SEQUENTIAL)  # [Kb*block/8, N]
    return words.reshape(Kb, block // 8, N).transpose(1, 2).contiguous()


def planar_unpack_qweight(qweight: torch.Tensor, K: int) -> torch.Tensor:
    """Inverse of planar_pack_qweight: int32 [Kb, N, block/8] -> q int32 [K, N]; padding rows must be 0."""
    int_tensor(ndim(qweight, "qweight", 3, "[Kb, N, block/8]"), "qweight")
    Kb, N, W = qweight.shape
    block = _planar_block(8 * W)
    require(isinstance(K, int) and K > 0 and Kb == -(-K // block), "K", K,
            f"an int with ceil(K / {block}) == {Kb} (the blocks of qweight)")
    rows = unpack(qweight.transpose(1, 2).reshape(Kb * W, N), dim=0, bits=4, order=SEQUENTIAL)
    q = torch.empty_like(rows)
    q[_planar_rows(Kb * block, block)] = rows
    require(not bool(q[K:].any()), "qweight", "nonzero padding rows", f"zeros in rows >= K={K}")
    return q[:K].contiguous()
