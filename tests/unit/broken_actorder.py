"""Test-only broken act-order W4A16 kernels, ONE bug each in how g_idx is applied (a conformance plugin).

With act-order, row k of the weight belongs to group g_idx[k]; triton_w4a16_actorder sorts the weight's rows by
perm = argsort(g_idx) at load and permutes x's columns alike (x[:, perm]) at apply. Each kernel here gets one
of those steps wrong, through the shipped op; the third reads the canonical weight directly (torch_dequant_w4a16)
and indexes its zero points by natural row order while its scales follow g_idx. A trivial g_idx (k // group_size)
hides all three. Load and unload as tests/unit/broken_kernels.py says; tests/unit/broken_registry.py lists all.
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.registry import register_kernel

registry.load_all()
from conformance_kernels import _w4a16_common as common  # noqa: E402 - the built-in package exists after load_all

TritonW4A16ActOrder = type(registry.get_kernel("triton_w4a16_actorder"))
TorchDequantW4A16 = type(registry.get_kernel("torch_dequant_w4a16"))

PLUGIN = "tests.unit.broken_actorder"


@register_kernel
class ActOrderXNotPermuted(TritonW4A16ActOrder):
    """BUG: the weight's rows are sorted by argsort(g_idx) at load, but apply calls the GEMM without permuting x's
    columns alike (perm dropped between load and apply)."""

    name = "broken_actorder_x_not_permuted"
    bug = "act-order: weight rows sorted by argsort(g_idx), x's columns never permuted"

    def apply(self, o, x):
        o = common.to_device(o, x.device)
        return self.op(x, o.b_q, o.scales, o.qzeros, None, o.group_size, o.zp_bias)


@register_kernel
class ActOrderInversePerm(TritonW4A16ActOrder):
    """BUG: x's columns are permuted by the inverse permutation (argsort(perm), i.e. x[:, perm^-1]) instead of
    perm: right only where perm is its own inverse."""

    name = "broken_actorder_inverse_perm"
    bug = "act-order: x permuted by the inverse of argsort(g_idx) instead of the permutation"

    def apply(self, o, x):
        o = common.to_device(o, x.device)
        inv = None if o.perm is None else torch.argsort(o.perm)
        return self.op(x, o.b_q, o.scales, o.qzeros, inv, o.group_size, o.zp_bias)


@register_kernel
class ActOrderZerosNaturalOrder(TorchDequantW4A16):
    """BUG: dequantizes row k with the scales of group g_idx[k] but the zero points of group k // group_size
    (natural row order): asymmetric act-order layers only."""

    name = "broken_actorder_zeros_natural_order"
    bug = "act-order: zero points indexed by natural row order (k // group_size), scales by g_idx"

    def apply(self, w, x):
        g = w.group_of_row()
        natural = torch.arange(w.K) // w.gs
        wd = ((w.q.long() - w.zero_points().long()[natural]).to(x.dtype) * w.scales[g].to(x.dtype)).to(x.device)
        y = x.reshape(-1, w.K).float() @ wd.float()
        return y.to(x.dtype).reshape(*x.shape[:-1], w.N)
