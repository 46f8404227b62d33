"""Sub-byte packing into int32 words: the only place that knows nibble orders.

A word packs `32 // bits` consecutive values along one dimension; slot j (bits [bits*j, bits*(j+1)))
holds logical index order[j] of that run. Words are torch.int32 (two's complement of the uint32 word).
"""
from __future__ import annotations

import torch

from .errors import require

# slot j holds logical index ORDER[j] of the 8 values packed in one word
SEQUENTIAL = (0, 1, 2, 3, 4, 5, 6, 7)
# AWQ's order and the exllama shuffle are the same permutation: even nibbles in the low 16 bits,
# odd ones in the high 16 bits, so the mask 0x000F000F picks a (2i, 2i+1) pair.
INTERLEAVED = (0, 2, 4, 6, 1, 3, 5, 7)
NIBBLE_ORDERS = {"sequential": SEQUENTIAL, "interleaved": INTERLEAVED}
# bytes holding (even, odd) index pairs with the even one in the HIGH nibble (torch's tinygemm uint8 [N, K/2]
# input, torchao's `(q[:, ::2] << 4) | q[:, 1::2]`): the int32 word of 8 such values, viewed as 4 little-endian bytes
HIGH_NIBBLE_FIRST = (1, 0, 3, 2, 5, 4, 7, 6)


def _order(order, bits: int) -> tuple[int, ...]:
    per = 32 // bits
    if isinstance(order, str):
        require(order in NIBBLE_ORDERS, "order", order, f"one of {sorted(NIBBLE_ORDERS)}")
        order = NIBBLE_ORDERS[order]
    order = tuple(order)
    if bits != 4:
        require(order == SEQUENTIAL[:per] or order == SEQUENTIAL, "order", order,
                f"sequential only for {bits}-bit values")
        order = tuple(range(per))
    require(sorted(order) == list(range(per)), "order", order, f"a permutation of range({per})")
    return order


def to_int32_word(x: torch.Tensor) -> torch.Tensor:
    """Reinterpret int64 values holding uint32 words as int32 (two's complement)."""
    x = x & 0xFFFFFFFF
    return torch.where(x >= 1 << 31, x - (1 << 32), x).to(torch.int32)


def pack(values: torch.Tensor, dim: int, bits: int = 4, order="sequential") -> torch.Tensor:
    """Pack integer `values` in [0, 2**bits) along `dim` into int32 words (size along dim / (32//bits))."""
    require(bits in (4, 8), "bits", bits, "4 or 8")
    per = 32 // bits
    order = _order(order, bits)
    dim = dim % values.dim()
    size = values.shape[dim]
    require(size % per == 0, f"size along dim {dim}", size, f"a multiple of {per}")
    v = values.to(torch.int64)
    if v.numel():
        vmin, vmax = int(v.min()), int(v.max())
        require(vmin >= 0 and vmax < (1 << bits), "values", (vmin, vmax), f"[0, {(1 << bits) - 1}]")
    v = v.movedim(dim, -1)
    v = v.reshape(*v.shape[:-1], size // per, per)
    word = torch.zeros(v.shape[:-1], dtype=torch.int64)
    for slot, logical in enumerate(order):
        word |= v[..., logical] << (bits * slot)
    return to_int32_word(word).movedim(-1, dim).contiguous()


def unpack(words: torch.Tensor, dim: int, bits: int = 4, order="sequential") -> torch.Tensor:
    """Inverse of `pack`: int32 words -> int32 values in [0, 2**bits), size along dim * (32//bits)."""
    require(bits in (4, 8), "bits", bits, "4 or 8")
    require(words.dtype == torch.int32, "words.dtype", words.dtype, "torch.int32")
    per = 32 // bits
    order = _order(order, bits)
    dim = dim % words.dim()
    w = words.to(torch.int64).movedim(dim, -1) & 0xFFFFFFFF
    out = torch.empty(*w.shape, per, dtype=torch.int64)
    mask = (1 << bits) - 1
    for slot, logical in enumerate(order):
        out[..., logical] = (w >> (bits * slot)) & mask
    out = out.reshape(*w.shape[:-1], w.shape[-1] * per)
    return out.to(torch.int32).movedim(-1, dim).contiguous()
