"""One error type for bad input: the message names the field, the value, and what is allowed."""
from __future__ import annotations


class InvalidInput(ValueError):
    """Raised for a field whose value is not allowed; `field`, `value` and `allowed` are kept for tests."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is invalid; allowed: {allowed}")


def require(cond: bool, field: str, value, allowed: str) -> None:
    """Raise InvalidInput(field, value, allowed) unless cond holds."""
    if not cond:
        raise InvalidInput(field, value, allowed)
