"""Checkpoint codecs: encode a CanonicalWeight into each on-disk format and decode it back, bit for bit.

One module per format (gptq, awq, compressed_tensors); kernel operand layouts live in `operands`.
Nibble orders come only from references.packing.
"""
from __future__ import annotations

import inspect

from ..checkpoint import CHECKPOINT_FORMATS, Checkpoint
from ..errors import require
from ..weight import CanonicalWeight
from . import awq, compressed_tensors, gptq, operands

__all__ = ["encode", "decode", "gptq", "awq", "compressed_tensors", "operands", "CHECKPOINT_FORMATS"]

# format -> (module, fixed keyword arguments implied by the format name)
_CODECS = {
    "gptq_v1": (gptq, {"version": "v1"}),
    "gptq_v2": (gptq, {"version": "v2"}),
    "awq": (awq, {}),
    "compressed_tensors": (compressed_tensors, {}),
}
assert set(_CODECS) == set(CHECKPOINT_FORMATS)


def _check_policy(fn, fixed: dict, policy: dict, fmt: str) -> None:
    allowed = sorted(p for p in inspect.signature(fn).parameters if p not in ("weight", "ckpt") and p not in fixed)
    for key in policy:
        require(key in allowed, "policy", key, f"for {fmt} {fn.__name__}: one of {allowed}")


def encode(weight: CanonicalWeight, format: str, **policy) -> Checkpoint:
    """Encode `weight` as a `format` checkpoint (one of CHECKPOINT_FORMATS); policy goes to the format's codec."""
    require(format in _CODECS, "format", format, f"one of {list(CHECKPOINT_FORMATS)}")
    module, fixed = _CODECS[format]
    _check_policy(module.encode, fixed, policy, format)
    return module.encode(weight, **fixed, **policy)


def decode(ckpt: Checkpoint, **policy) -> CanonicalWeight:
    """Decode a checkpoint (dispatching on ckpt.format) back to its CanonicalWeight."""
    require(isinstance(ckpt, Checkpoint), "ckpt", type(ckpt).__name__, "a references.checkpoint.Checkpoint")
    require(ckpt.format in _CODECS, "ckpt.format", ckpt.format, f"one of {list(CHECKPOINT_FORMATS)}")
    module, _ = _CODECS[ckpt.format]
    _check_policy(module.decode, {}, policy, ckpt.format)
    return module.decode(ckpt, **policy)
