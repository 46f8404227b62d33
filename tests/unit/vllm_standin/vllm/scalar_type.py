"""Stand-in of vllm.scalar_type: the integer types the mixed-precision kernels take (name, size_bits, bias)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalarType:
    name: str
    size_bits: int
    bias: int = 0

    def has_bias(self) -> bool:
        return self.bias != 0

    def __str__(self) -> str:
        return self.name


class scalar_types:  # noqa: N801 - vLLM's spelling
    uint4 = ScalarType("uint4", 4)
    uint4b8 = ScalarType("uint4b8", 4, 8)
    uint8 = ScalarType("uint8", 8)
    uint8b128 = ScalarType("uint8b128", 8, 128)
