"""A checkpoint as it lies on disk: a format name, its tensors, and the metadata to interpret them."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .scalar_types import ScalarType, scalar_type

# Format names are used in case ids, coverage JSON and CLI flags: keep them stable.
CHECKPOINT_FORMATS = ("gptq_v1", "gptq_v2", "awq", "compressed_tensors")


@dataclass
class Checkpoint:
    """`tensors` uses each format's own tensor names (qweight, qzeros, scales, g_idx, weight_packed, ...).

    `K`, `N`, `group_size` (-1 = channelwise), `wtype` and `act_dtype` are what a loader is told by the
    model config; codecs never guess them from tensor values.
    """

    format: str
    tensors: dict[str, torch.Tensor]
    wtype: ScalarType
    group_size: int
    K: int
    N: int
    act_dtype: torch.dtype
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.wtype = scalar_type(self.wtype)
        if self.format not in CHECKPOINT_FORMATS:
            raise ValueError(f"format={self.format!r} is invalid; allowed: {list(CHECKPOINT_FORMATS)}")
