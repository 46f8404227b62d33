"""The W4A16 family: weight-only int4 (and int8) quantized linear layers, y = x @ W with fp16/bf16 activations."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from conformance.core.dtypes import ACT_DTYPES
from conformance.families.base import Family
from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import require
from references.scalar_types import SCALAR_TYPES


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


class W4A16Family(Family):
    """Everything the suite knows about the w4a16 op family."""

    name = "w4a16"
    config_type = W4A16Config


FAMILY = W4A16Family()
