"""Stand-in of vllm.model_executor.parameter: torch Parameters that carry their layout.

input_dim / output_dim: which tensor dim runs along K / along N; packed_dim: the dim whose int32 words pack
`packed_factor` values. `permute_param_layout_` moves a parameter's dims to the asked positions in place.
"""
from __future__ import annotations

import torch
from torch.nn import Parameter


class BasevLLMParameter(Parameter):
    def __new__(cls, data: torch.Tensor, **kwargs):
        return super().__new__(cls, data=data, requires_grad=False)

    def __init__(self, data: torch.Tensor, weight_loader):
        self._weight_loader = weight_loader

    @property
    def weight_loader(self):
        return self._weight_loader


class _ColumnvLLMParameter(BasevLLMParameter):
    def __init__(self, output_dim: int, **kwargs):
        self._output_dim = output_dim
        super().__init__(**kwargs)

    @property
    def output_dim(self):
        return self._output_dim


class RowvLLMParameter(BasevLLMParameter):
    def __init__(self, input_dim: int, **kwargs):
        self._input_dim = input_dim
        super().__init__(**kwargs)

    @property
    def input_dim(self):
        return self._input_dim


class ModelWeightParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class GroupQuantScaleParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class ChannelQuantScaleParameter(_ColumnvLLMParameter):
    pass


class _Packed:
    @property
    def packed_dim(self):
        return self._packed_dim

    @property
    def packed_factor(self):
        return self._packed_factor


class PackedColumnParameter(_Packed, _ColumnvLLMParameter):
    def __init__(self, packed_factor: int, packed_dim: int, **kwargs):
        self._packed_factor, self._packed_dim = packed_factor, packed_dim
        super().__init__(**kwargs)


class PackedvLLMParameter(_Packed, ModelWeightParameter):
    def __init__(self, packed_factor: int, packed_dim: int, **kwargs):
        self._packed_factor, self._packed_dim = packed_factor, packed_dim
        super().__init__(**kwargs)


def permute_param_layout_(param: BasevLLMParameter, input_dim: int, output_dim: int, **kwargs):
    """Permute param.data so that its K dim lands at `input_dim`, its N dim at `output_dim` (2-D parameters);
    a parameter without an input_dim (channelwise) counts its other dim as K. Updates the layout attributes."""
    cur_in = getattr(param, "input_dim", None)
    cur_out = getattr(param, "output_dim", None)
    if cur_in is None:
        cur_in = 1 - cur_out
    if (cur_in, cur_out) != (input_dim, output_dim):
        param.data = param.data.permute(cur_in, cur_out) if input_dim == 0 else param.data.permute(cur_out, cur_in)
        packed = getattr(param, "_packed_dim", None)
        if packed is not None:
            param._packed_dim = input_dim if packed == cur_in else output_dim
    if hasattr(param, "_input_dim"):
        param._input_dim = input_dim
    if hasattr(param, "_output_dim"):
        param._output_dim = output_dim
    return param
