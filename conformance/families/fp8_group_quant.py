"""The FP8 per-token-group activation quant family: x [tokens, hidden] -> (q fp8, scales fp32 per group)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from conformance.core.dtypes import FP8_DTYPES, INPUT_DTYPES
from conformance.families.base import Family
from references.errors import require


@dataclass(frozen=True)
class Fp8QuantConfig:
    """Per-token-group FP8 activation quant of a [tokens, hidden] tensor."""

    group_size: int
    dtype: str
    fp8_dtype: str = "float8_e4m3fn"
    ue8m0: bool = False
    column_major_scales: bool = False
    hidden: int = 7168
    family = "fp8_group_quant"

    def __post_init__(self):
        require(self.group_size > 0, "group_size", self.group_size, "a positive integer")
        require(self.dtype in INPUT_DTYPES, "dtype", self.dtype, f"one of {sorted(INPUT_DTYPES)}")
        require(self.fp8_dtype in FP8_DTYPES, "fp8_dtype", self.fp8_dtype, f"one of {sorted(FP8_DTYPES)}")
        require(self.hidden % self.group_size == 0, "hidden", self.hidden,
                f"a multiple of group_size={self.group_size}")

    def to_dict(self) -> dict:
        return asdict(self)


class Fp8GroupQuantFamily(Family):
    """Everything the suite knows about the fp8_group_quant op family."""

    name = "fp8_group_quant"
    config_type = Fp8QuantConfig


FAMILY = Fp8GroupQuantFamily()
