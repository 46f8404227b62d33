"""Layer configurations that kernels' gates judge: what a model layer asks a kernel to do."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import require
from references.scalar_types import SCALAR_TYPES

ACT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
FP8_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e4m3fnuz": torch.float8_e4m3fnuz}


def act_dtype(name: str) -> torch.dtype:
    require(name in ACT_DTYPES, "dtype", name, f"one of {sorted(ACT_DTYPES)}")
    return ACT_DTYPES[name]


@dataclass(frozen=True)
class W4A16Config:
    """A weight-only quantized linear layer: K inputs, N outputs, group_size -1 = channelwise."""

    weight_type: str
    group_size: int
    act_order: bool
    dtype: str
    format: str = "gptq_v2"
    N: int = 4096
    K: int = 4096
    family = "w4a16"

    def __post_init__(self):
        require(self.weight_type in SCALAR_TYPES, "weight_type", self.weight_type, f"one of {sorted(SCALAR_TYPES)}")
        require(self.group_size == -1 or self.group_size > 0, "group_size", self.group_size,
                "-1 (channelwise) or a positive integer")
        require(self.dtype in ACT_DTYPES, "dtype", self.dtype, f"one of {sorted(ACT_DTYPES)}")
        require(self.format in CHECKPOINT_FORMATS, "format", self.format, f"one of {list(CHECKPOINT_FORMATS)}")
        require(self.N > 0 and self.K > 0, "N, K", (self.N, self.K), "positive integers")

    @property
    def effective_group_size(self) -> int:
        return self.K if self.group_size == -1 else self.group_size

    def to_dict(self) -> dict:
        return asdict(self)


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
        require(self.dtype in ACT_DTYPES or self.dtype == "float32", "dtype", self.dtype,
                f"one of {sorted(ACT_DTYPES) + ['float32']}")
        require(self.fp8_dtype in FP8_DTYPES, "fp8_dtype", self.fp8_dtype, f"one of {sorted(FP8_DTYPES)}")
        require(self.hidden % self.group_size == 0, "hidden", self.hidden,
                f"a multiple of group_size={self.group_size}")

    def to_dict(self) -> dict:
        return asdict(self)
