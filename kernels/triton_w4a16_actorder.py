"""`triton_w4a16_actorder`: act-order (and plain) W4A16 on the triton_w4a16 kernel, K sorted by g_idx.

load sorts the rows of q by perm = argsort(g_idx) (stable), so row k of the packed weight lies in
group k // gs; apply permutes x's columns alike (x[:, perm]) and runs the same Triton GEMM. Since
y = sum_k x[k] W[k] is a sum over k, permuting k on both sides leaves y unchanged.
"""
from __future__ import annotations

import torch

from conformance.core.registry import register_kernel

from ._device import check_x_device
from ._w4a16_common import TritonW4A16Operands, to_device
from .triton_w4a16 import TritonW4A16Base, gemm_any_rank, launch_w4a16_gemm


@torch.library.custom_op("conformance::triton_w4a16_actorder_gemm", mutates_args=())
def triton_w4a16_actorder_gemm(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor,
                               qzeros: torch.Tensor | None, perm: torch.Tensor | None,
                               group_size: int, zp_bias: int) -> torch.Tensor:
    """y = x[..., perm] @ dequant(b_q sorted by perm); perm None means K is already in group order."""
    check_x_device("triton_w4a16_actorder", x)  # before x meets perm on the kernel's device
    def run(x2):
        if perm is not None:
            x2 = x2.index_select(1, perm)
        return launch_w4a16_gemm(x2.contiguous(), b_q, scales, qzeros, group_size, zp_bias)
    return gemm_any_rank(x, run)


@triton_w4a16_actorder_gemm.register_fake
def _(x, b_q, scales, qzeros, perm, group_size, zp_bias):
    return x.new_empty((*x.shape[:-1], b_q.shape[1] * 8))


@register_kernel
class TritonW4A16ActOrder(TritonW4A16Base):
    name = "triton_w4a16_actorder"
    priority = 9
    allow_act_order = True
    gate_summary = ("as triton_w4a16 but act-order accepted (K sorted by argsort(g_idx), x columns permuted); "
                    "cuda/rocm/cpu; fp16/bf16; uint4b8, uint4; group -1/32/64/128/256 or K")
    op = torch.ops.conformance.triton_w4a16_actorder_gemm.default

    def apply(self, o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
        o = to_device(o, x.device)
        return self.op(x, o.b_q, o.scales, o.qzeros, o.perm, o.group_size, o.zp_bias)
