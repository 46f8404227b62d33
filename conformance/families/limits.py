"""Layer dimension rules shared by every command: one validator, so `select`, `coverage`, case ids and the
pytest options refuse the same sizes with the same message (InvalidInput naming the field).

    require_dim("N", n, multiple_of=8)       # positive int, <= MAX_DIM, a multiple of 8
    require_group("group_size", g, K, "K", channelwise=True)   # -1 or a positive divisor of K

Config types enforce positive, bounded sizes on construction; `config.check_layer()` adds the layer rules
(W4A16: N a multiple of 8, group_size dividing K) that commands apply to what a user typed.
"""
from __future__ import annotations

import numbers

from references.errors import InvalidInput

MAX_DIM = 1 << 20  # N, K, hidden: beyond any real layer (lm heads are ~2^17-2^18); larger is a typo
MAX_ROWS = 1 << 20  # M / tokens of one case


def _is_int(v) -> bool:
    # `type(v) is int` first: the ABC isinstance check is slow, and collection validates ~10^5 configs per process
    return type(v) is int or (isinstance(v, numbers.Integral) and not isinstance(v, bool))


def require_dim(field: str, value, *, multiple_of: int = 1, limit: int = MAX_DIM) -> int:
    """`value` is an int in [1, limit] and a multiple of `multiple_of`, else InvalidInput(field, value, ...)."""
    if not _is_int(value) or not 0 < value <= limit or value % multiple_of:
        allowed = f"a positive integer <= {limit}" + (f", a multiple of {multiple_of}" if multiple_of > 1 else "")
        raise InvalidInput(field, value, allowed)
    return int(value)


def require_group_size(field: str, group, *, channelwise: bool, limit: int = MAX_DIM) -> int:
    """`group` is -1 (when `channelwise` is allowed) or an int in [1, limit] (divisibility: `require_group`)."""
    if not _is_int(group) or not ((channelwise and group == -1) or 0 < group <= limit):
        allowed = ("-1 (channelwise) or " if channelwise else "") + f"a positive integer <= {limit}"
        raise InvalidInput(field, group, allowed)
    return int(group)


def require_group(field: str, group, extent: int, extent_name: str, *, channelwise: bool) -> int:
    """`group` is -1 (when `channelwise` is allowed) or a positive divisor of `extent` (so <= extent)."""
    allowed = ("-1 (channelwise) or " if channelwise else "") + f"a positive divisor of {extent_name}={extent}"
    if not _is_int(group) or not ((channelwise and group == -1) or (0 < group <= extent and extent % group == 0)):
        raise InvalidInput(field, group, allowed)
    return int(group)
