"""An independent reader of every packed layout, for tests: numpy uint32 bit arithmetic, no torch, no
references.packing. Slot positions are derived from a formula, not from the shared order tuples, so a
wrong nibble order in references/packing.py cannot be copied here by accident.
"""
from __future__ import annotations

import numpy as np


def bit_offset(i: int, bits: int, interleaved: bool) -> int:
    """Bit position of logical value i (0..32/bits-1) inside its word.

    sequential: value i at bits*i. interleaved (4-bit only; AWQ and the exllama shuffle): the even values
    fill the low half-word and the odd ones the high half-word, value i at nibble i//2 + 4*(i%2).
    """
    if not interleaved:
        return bits * i
    assert bits == 4
    return 4 * (i // 2 + 4 * (i % 2))


def as_u32(words) -> np.ndarray:
    """int32 words (torch tensor or array) -> uint32 array of the same bits."""
    a = words.numpy() if hasattr(words, "numpy") else np.asarray(words)
    assert a.dtype == np.int32, a.dtype
    return np.ascontiguousarray(a).view(np.uint32)


def unpack(words, axis: int, bits: int = 4, interleaved: bool = False) -> np.ndarray:
    """Unpack int32 `words` along `axis` (each word -> 32/bits consecutive values there); returns int64."""
    w = np.moveaxis(as_u32(words), axis, -1)
    per = 32 // bits
    shifts = np.array([bit_offset(i, bits, interleaved) for i in range(per)], dtype=np.uint32)
    vals = (w[..., None] >> shifts) & np.uint32((1 << bits) - 1)  # [..., words, per], last = logical index
    vals = vals.reshape(*w.shape[:-1], w.shape[-1] * per)
    return np.moveaxis(vals, -1, axis).astype(np.int64)


def add_ones_u32(words, bits: int = 4):
    """GPTQ v1 zeros: add 1 to every slot as one uint32 addition (wrapping), i.e. word + 0x11111111."""
    ones = np.uint32(int("".join(["0" * (bits // 4 - 1) + "1"] * (32 // bits)), 16))
    return (as_u32(words) + ones).view(np.int32)


# --- one reader per layout; each returns the logical array it encodes -------------------------------------

def gptq_qweight(qweight, bits=4):          # [K/pf, N] -> q [K, N]
    return unpack(qweight, 0, bits)


def gptq_qzeros(qzeros, version, bits=4):   # [G, N/pf] -> z [G, N]
    return unpack(add_ones_u32(qzeros, bits) if version == "v1" else qzeros, 1, bits)


def awq_packed(words):                      # qweight [K, N/8] -> [K, N]; qzeros [G, N/8] -> [G, N]
    return unpack(words, 1, 4, interleaved=True)


def ct_weight_packed(words, bits=4):        # [N, K/pf] -> q [K, N]
    return unpack(words, 1, bits).T


def ct_zero_point(words, bits=4):           # [N/pf, G] -> z [G, N]
    return unpack(words, 0, bits).T


def triton_qweight(words):                  # [K, N/8] -> q [K, N]
    return unpack(words, 1, 4)


def zeros_gn(words):                        # [G, N/8] -> z [G, N]
    return unpack(words, 1, 4)


def zeros_ng(words):                        # [N/8, G] -> z [G, N]
    return unpack(words, 0, 4).T


def exllama(qweight, g_idx=None):           # [K/8, N] (+ g_idx) -> q [K, N] in logical row order
    rows = unpack(qweight, 0, 4, interleaved=True)
    if g_idx is None:
        return rows
    perm = np.argsort(np.asarray(g_idx), kind="stable")  # packed row i is logical row perm[i]
    q = np.empty_like(rows)
    q[perm] = rows
    return q


def hybrid(words):                          # [N, K/8] (any strides) -> q [K, N]
    a = words.numpy() if hasattr(words, "numpy") else np.asarray(words)
    return unpack(np.ascontiguousarray(a), 1, 4, interleaved=True).T
