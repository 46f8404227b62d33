"""Two plain-torch mixed-precision kernels: one correct, one with the zero-point bug of vllm#47159.

Both dequantize once at load ((q - z) * s in fp32, rounded once to the act dtype) and run an fp32 matmul.
`_DequantOnce` holds the code; the kernels of both layouts (this one and kernels/linear/mixed_precision) mix it
into their layout's MPLinearKernel. It reads `checkpoint_format` and `has_g_idx` where the config has them (the
old interface), and raw zero points with no act-order where it has not (today's).
"""
from __future__ import annotations

import torch

from vllm.model_executor.parameter import permute_param_layout_
from vllm.scalar_type import scalar_types

from .MPLinearKernel import MPLinearKernel, MPLinearLayerConfig


def _unpack(words: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """int32 words -> values, `32 // bits` per word along `dim`, low bits first."""
    per = 32 // bits
    w = words.to(torch.int64).movedim(dim, -1) & 0xFFFFFFFF
    vals = torch.stack([(w >> (bits * j)) & ((1 << bits) - 1) for j in range(per)], dim=-1)
    return vals.reshape(*w.shape[:-1], w.shape[-1] * per).movedim(-1, dim).to(torch.int32)


class _DequantOnce:
    SUPPORTED = (scalar_types.uint4b8, scalar_types.uint4)
    ACT_TYPES = (torch.float16, torch.bfloat16)

    @classmethod
    def get_min_capability(cls) -> int:
        return 60

    @classmethod
    def can_implement(cls, c: MPLinearLayerConfig) -> tuple[bool, str | None]:
        if c.weight_type not in cls.SUPPORTED:
            return False, f"{cls.__name__} supports {[t.name for t in cls.SUPPORTED]}, not {c.weight_type}"
        if c.act_type not in cls.ACT_TYPES:
            return False, f"{cls.__name__} only supports {cls.ACT_TYPES} activations"
        if getattr(c, "has_g_idx", False) and c.partition_weight_shape[0] != c.full_weight_shape[0]:
            return False, "act reordering not supported with partitioned input features"
        if c.group_size != -1 and (c.group_size < 32 or c.full_weight_shape[0] % c.group_size):
            return False, f"group size {c.group_size} must be -1 or >= 32 and divide the input features"
        return True, None

    def _zeros_gn(self, layer) -> torch.Tensor:
        """The packed zero points as [G, N/pf] words."""
        zp = getattr(layer, self.w_zp_name)
        permute_param_layout_(zp, input_dim=0, output_dim=1)
        return zp.data

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        c = self.config
        K, N = c.partition_weight_shape
        bits = c.weight_type.size_bits
        wq = getattr(layer, self.w_q_name)
        permute_param_layout_(wq, input_dim=0, output_dim=1)
        q = _unpack(wq.data, wq.packed_dim, bits)  # [K, N]
        ws = getattr(layer, self.w_s_name)
        permute_param_layout_(ws, input_dim=0, output_dim=1)
        s = ws.data.to(torch.float32)  # [G, N]
        if c.zero_points:
            words = self._zeros_gn(layer)
            # v1 stores z - 1, with the int32 borrow: add 1 to every slot
            if getattr(c, "checkpoint_format", "") == "gptq":
                words = (words.to(torch.int64) + sum(1 << (bits * j) for j in range(32 // bits))) & 0xFFFFFFFF
            z = _unpack(words, 1, bits)
            assert tuple(z.shape) == tuple(s.shape), f"qzeros shape mismatch: {tuple(z.shape)} vs {tuple(s.shape)}"
        else:
            z = torch.full(s.shape, c.weight_type.bias, dtype=torch.int32, device=s.device)  # on the weights' device
        gs = K if c.group_size == -1 else c.group_size
        act_order = getattr(c, "has_g_idx", False)
        g = getattr(layer, self.w_gidx_name).long() if act_order else torch.arange(K, device=s.device) // gs
        w = ((q - z[g]).to(torch.float32) * s[g]).to(c.act_type)
        layer.register_parameter("w_dequant", torch.nn.Parameter(w, requires_grad=False))

    def apply_weights(self, layer, x, bias=None):
        K, N = self.config.partition_weight_shape
        y = (x.reshape(-1, K).float() @ layer.w_dequant.float()).to(x.dtype)
        if bias is not None:
            y = y + bias
        return y.reshape(*x.shape[:-1], N)


class TorchRefLinearKernel(_DequantOnce, MPLinearKernel):
    """Correct: every tensor is read through its declared layout."""


class _ZpAlwaysTransposed:
    """vllm#47159: the zero points are transposed as if every checkpoint were compressed-tensors ([N/pf, G])."""

    ACT_TYPES = (torch.float16,)

    @classmethod
    def get_min_capability(cls) -> int:
        return 75

    @classmethod
    def can_implement(cls, c):
        if c.act_type != torch.float16:
            return False, "ZpAlwaysTransposed only supports float16 activations"
        return super().can_implement(c)

    def _zeros_gn(self, layer) -> torch.Tensor:
        return getattr(layer, self.w_zp_name).data.t()


class ZpAlwaysTransposedLinearKernel(_ZpAlwaysTransposed, _DequantOnce, MPLinearKernel):
    """vllm#47159 (see _ZpAlwaysTransposed)."""
