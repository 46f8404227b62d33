"""Bit-level equality of tensors (and tuples of them): the one definition every check and the bench use."""
from __future__ import annotations

import torch


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, flat, on the CPU (reshape first: size-1 dims may keep odd strides)."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def bits_equal(a, b) -> bool:
    """True when `a` and `b` (tensors, or tuples/lists of them) have the same shapes, dtypes and bytes."""
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(bits_equal(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(as_bytes(a), as_bytes(b))
