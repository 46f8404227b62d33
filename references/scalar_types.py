"""Integer weight scalar types: stored range [0, 2**bits - 1], value = stored - zero (bias for biased types)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalarType:
    """An unsigned stored integer type; `bias != 0` means symmetric with an implicit zero point."""

    name: str
    size_bits: int
    bias: int = 0

    @property
    def min(self) -> int:
        return 0

    @property
    def max(self) -> int:
        return (1 << self.size_bits) - 1

    def has_bias(self) -> bool:
        return self.bias != 0

    @property
    def pack_factor(self) -> int:
        """Values per int32 word."""
        return 32 // self.size_bits

    def __str__(self) -> str:
        return self.name


uint4 = ScalarType("uint4", 4, 0)
uint4b8 = ScalarType("uint4b8", 4, 8)
uint8 = ScalarType("uint8", 8, 0)
uint8b128 = ScalarType("uint8b128", 8, 128)

SCALAR_TYPES: dict[str, ScalarType] = {t.name: t for t in (uint4, uint4b8, uint8, uint8b128)}


def scalar_type(name: str | ScalarType) -> ScalarType:
    """Look up a scalar type by name; unknown names raise ValueError listing the allowed ones."""
    if isinstance(name, ScalarType):
        return name
    try:
        return SCALAR_TYPES[name]
    except KeyError:
        raise ValueError(
            f"weight_type={name!r} is not a known scalar type; allowed: {sorted(SCALAR_TYPES)}"
        ) from None
