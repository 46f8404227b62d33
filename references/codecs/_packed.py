"""Validated pack/unpack of one 2-D int32 matrix along one axis: the step every codec layout shares.

Callers pass the nibble order from references.packing; this module only checks the matrix (failures name
the field) and says which axis is packed and whether the words are stored transposed.
"""
from __future__ import annotations

import torch

from ..packing import pack, unpack
from ._checks import int_tensor, multiple, ndim


def pack_matrix(values, field: str, dims: tuple[str, str], axis: int, order, bits: int = 4,
                transpose: bool = False) -> torch.Tensor:
    """values int32 [dims[0], dims[1]] -> int32 words packing `32 // bits` entries of `axis` per word;
    transpose=True stores the words of values.t() (the packed axis then lies at 1 - axis)."""
    v = int_tensor(ndim(values, field, 2, f"[{dims[0]}, {dims[1]}]"), field)
    multiple(v.shape[axis], dims[axis], 32 // bits)
    if transpose:
        return pack(v.t(), dim=1 - axis, bits=bits, order=order)
    return pack(v, dim=axis, bits=bits, order=order)


def unpack_matrix(words, field: str, what: str, axis: int, order, bits: int = 4,
                  transpose: bool = False) -> torch.Tensor:
    """Inverse of pack_matrix: int32 words `what` (e.g. '[K, N/8]'), packed along their `axis` -> int32
    values, transposed back (contiguous) when the words are stored transposed."""
    int_tensor(ndim(words, field, 2, what), field)
    values = unpack(words, dim=axis, bits=bits, order=order)
    return values.t().contiguous() if transpose else values
