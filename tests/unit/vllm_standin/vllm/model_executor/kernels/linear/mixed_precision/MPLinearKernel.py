"""Stand-in of today's MPLinearKernel interface: no has_g_idx, no checkpoint_format, no g_idx parameter."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from vllm.scalar_type import ScalarType


@dataclass
class MPLinearLayerConfig:
    full_weight_shape: tuple[int, int]  # (K, N)
    partition_weight_shape: tuple[int, int]
    weight_type: ScalarType
    act_type: torch.dtype
    group_size: int
    zero_points: bool
    out_type: torch.dtype | None = None


class MPLinearKernel(ABC):
    @classmethod
    @abstractmethod
    def get_min_capability(cls) -> int: ...

    @classmethod
    @abstractmethod
    def can_implement(cls, c: MPLinearLayerConfig) -> tuple[bool, str | None]: ...

    def __init__(self, c: MPLinearLayerConfig, w_q_param_name: str, w_s_param_name: str,
                 w_zp_param_name: str | None = None) -> None:
        assert self.can_implement(c)[0]
        self.config = c
        self.w_q_name, self.w_s_name = w_q_param_name, w_s_param_name
        if c.zero_points:
            assert w_zp_param_name is not None
        self.w_zp_name = w_zp_param_name

    @abstractmethod
    def process_weights_after_loading(self, layer: torch.nn.Module) -> None: ...

    @abstractmethod
    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None): ...
