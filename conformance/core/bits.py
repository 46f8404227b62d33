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


def nonfinite_problem(y: torch.Tensor, expected: torch.Tensor) -> str | None:
    """The detail line when `y` holds NaN/Inf where `expected` (same shape) does not hold the identical value
    ("3 NaN/Inf outputs, first at [2, 17]: nan"), or is finite where `expected` is not; None otherwise.

    Identical: equal (an inf of the same sign) or both NaN. Every tier of every family judges NaN/Inf with this
    one rule, so no tolerance can let a NaN or an Inf through."""
    y64, e64 = y.detach().cpu().double(), expected.detach().cpu().double()
    same = (y64 == e64) | (torch.isnan(y64) & torch.isnan(e64))
    for bad, what in ((~torch.isfinite(y64) & ~same, "NaN/Inf outputs"),
                      (~torch.isfinite(e64) & ~same, "finite outputs where the reference is NaN/Inf")):
        if bool(bad.any()):
            flat = int(bad.flatten().nonzero()[0])
            idx = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(y.shape))]
            got = float(y64.flatten()[flat])
            ref = "" if what == "NaN/Inf outputs" else f" (reference {float(e64.flatten()[flat])})"
            return f"{int(bad.sum())} {what}, first at {idx}: {got}{ref}"
    return None
