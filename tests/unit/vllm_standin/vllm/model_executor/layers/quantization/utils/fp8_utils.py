"""Stand-in of vLLM's per-token-group FP8 quant, with vLLM main's scale convention (vllm#37833):
s = max(amax, eps) * fp32(1 / fp8_max), q = fp8(clamp(x / s)); UE8M0 rounds s up to a power of two."""
from __future__ import annotations

import torch


def per_token_group_quant_fp8(x: torch.Tensor, group_size: int, eps: float = 1e-10, dtype=None,
                              column_major_scales: bool = False, out_q=None, use_ue8m0: bool | None = None):
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    fp8_max = 224.0 if dtype == torch.float8_e4m3fnuz else torch.finfo(dtype).max
    assert x.shape[-1] % group_size == 0 and x.stride(-1) == 1  # groups contiguous, rows may be padded (as vLLM)
    xg = x.float().reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    amax = xg.abs().amax(-1).clamp(min=eps)
    s = amax * torch.tensor(1.0 / fp8_max, dtype=torch.float32)
    if use_ue8m0:
        bits = s.view(torch.int32)
        s = ((((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).int()) << 23).view(torch.float32)
    q = (xg / s.unsqueeze(-1)).clamp(-fp8_max, fp8_max).reshape(x.shape).to(dtype)
    if column_major_scales:
        s = s.t().contiguous().t()
    return q, s
