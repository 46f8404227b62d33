"""rtn_quantize against hand-computed examples, an error-bound property, and bad input."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from references.errors import InvalidInput
from references.quantize import rtn_quantize


def _w(cols: dict[int, list[float]], K: int) -> torch.Tensor:
    w = torch.zeros(K, 8, dtype=torch.float64)
    for n, v in cols.items():
        w[:, n] = torch.tensor(v, dtype=torch.float64)
    return w


def test_symmetric_uint4b8_hand_computed():
    # group_size 2, two groups; worked out by hand with scale = max(max/7, -min/8)
    w = _w({
        0: [1.75, -2.0, 0.5, 0.25],     # g0: s = max(.25, .25) = .25 -> q 7+8, -8+8
                                        # g1: s = .5/7 -> fp16 1170/16384; .25/s = 3.5009 -> 4 (from stored scale)
        1: [-2.0, 0.375, -2.0, 0.625],  # s = .25; .375/.25 = 1.5 -> 2 and .625/.25 = 2.5 -> 2 (half to even)
        2: [1.75, -2.0, 0.5, 0.17855],  # g1: .17855/(.5/7) = 2.4997 but .17855/(1170/16384) = 2.5003 -> 3
    }, K=4)
    r = rtn_quantize(w, 2, "uint4b8", torch.float16)
    assert r.zeros is None and r.scales.dtype == torch.float16
    assert r.q[:, 0].tolist() == [15, 0, 15, 12]
    assert r.scales[:, 0].double().tolist() == [0.25, 1170 / 16384]
    assert r.q[:, 1].tolist() == [0, 10, 0, 10]
    assert r.scales[:, 1].double().tolist() == [0.25, 0.25]
    assert r.q[:, 2].tolist() == [15, 0, 15, 11]  # q comes from the stored scale
    # all-zero groups (columns 3..7): scale 1, q = bias, dequantized exactly 0
    assert r.q[:, 3:].eq(8).all() and r.scales[:, 3:].eq(1).all()
    assert r.dequantize()[:, 3:].eq(0).all()


def test_asymmetric_uint4_hand_computed():
    w = _w({
        0: [3.0, -0.75, 0.5, 1.0],  # g0: s = 3.75/15 = .25, z = round(.75/.25) = 3, q = 12+3, -3+3
                                    # g1 (all positive, min widened to 0): s = 1/15 -> fp16 1092/16384, z = 0,
                                    #     .5/s = 7.5018 -> 8, 1/s = 15.0037 -> 15
    }, K=4)
    r = rtn_quantize(w, 2, "uint4", torch.float16)
    assert r.q[:, 0].tolist() == [15, 0, 8, 15]
    assert r.zeros[:, 0].tolist() == [3, 0]
    assert r.scales[:, 0].double().tolist() == [0.25, 1092 / 16384]
    # all-zero groups: scale 1, zero point 8 (GPTQ's choice; a v1 checkpoint cannot store z = 0), q = 8
    assert r.zeros[:, 1:].eq(8).all() and r.q[:, 1:].eq(8).all() and r.scales[:, 1:].eq(1).all()
    assert r.dequantize()[:, 1:].eq(0).all()
    assert r.dequantize()[:, 0].tolist()[:2] == [3.0, -0.75]


def test_channelwise_and_bf16_scales():
    w = _w({0: [1.0, -8.0, 2.0, 7.0]}, K=4)
    r = rtn_quantize(w, -1, "uint4b8", torch.bfloat16)
    assert r.G == 1 and r.scales.dtype == torch.bfloat16
    assert r.scales[0, 0].item() == 1.0  # max(7/7, 8/8)
    assert r.q[:, 0].tolist() == [9, 0, 10, 15]


def test_uint8b128_hand_computed():
    w = _w({0: [127.0, -128.0, 0.5, 1.5]}, K=4)
    r = rtn_quantize(w, -1, "uint8b128", torch.float16)
    assert r.scales[0, 0].item() == 1.0
    assert r.q[:, 0].tolist() == [255, 0, 128, 130]  # 0.5 -> 0 and 1.5 -> 2 (half to even)


def test_underflowing_scale_gives_zero_not_nan():
    w = _w({0: [1e-9, -1e-9, 0.0, 0.0]}, K=4)  # scale 1e-10 underflows fp16 to 0
    r = rtn_quantize(w, -1, "uint4", torch.float16)
    W = r.dequantize()
    assert torch.isfinite(W).all() and W.eq(0).all()


def test_act_order_groups_follow_g_idx():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 16, generator=g, dtype=torch.float64)
    perm = torch.randperm(64, generator=g)
    g_idx = (torch.arange(64) // 16)[perm].to(torch.int32)
    plain = rtn_quantize(w, 16, "uint4", torch.float16)
    ao = rtn_quantize(w[perm], 16, "uint4", torch.float16, g_idx=g_idx)
    assert torch.equal(ao.q, plain.q[perm])
    assert torch.equal(ao.scales, plain.scales) and torch.equal(ao.zeros, plain.zeros)
    assert torch.equal(ao.g_idx, g_idx) and torch.equal(ao.dequantize(), plain.dequantize()[perm])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), wtype=st.sampled_from(["uint4", "uint4b8", "uint8", "uint8b128"]),
       gs=st.sampled_from([-1, 8, 16]), dtype=st.sampled_from([torch.float16, torch.bfloat16]),
       mag=st.sampled_from([1e-3, 1.0, 50.0]))
def test_rtn_error_within_half_step(seed, wtype, gs, dtype, mag):
    # independent of the implementation: every weight lies within half a (stored) scale step of its
    # dequantized value, plus the small clipping slack the act-dtype rounding of the scale can cause
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(32, 8, generator=g, dtype=torch.float64) * mag
    r = rtn_quantize(w, gs, wtype, dtype)
    s = r.scales.double()[r.group_of_row()]
    err = (r.dequantize() - w).abs()
    # the stored scale is off by at most half an act-dtype ulp (absolute, subnormal scales included), and a
    # clipped weight can be off by the type's full range times that
    fi = torch.finfo(dtype)
    half_ulp = torch.maximum(s * fi.eps / 2, torch.tensor(fi.smallest_normal * fi.eps / 2, dtype=torch.float64))
    assert (err <= s * 0.5 + 2 ** r.wtype.size_bits * half_ulp).all()
    assert (err <= s * 0.5 + 1e-12 * mag).float().mean() > 0.9  # clipping is the rare exception


@pytest.mark.parametrize("kwargs,field,value", [
    (dict(w=torch.zeros(8)), "w.shape", (8,)),
    (dict(w=torch.zeros(8, 8, dtype=torch.int32)), "w.dtype", torch.int32),
    (dict(w=torch.zeros(12, 8), group_size=8), "K", 12),
    (dict(w=torch.full((8, 8), float("nan"))), "w", "non-finite values"),
    (dict(act_dtype=torch.int8), "act_dtype", torch.int8),
    (dict(group_size=0), "group_size", 0),
    (dict(g_idx=torch.zeros(8, dtype=torch.int32)), "g_idx", "inconsistent"),
    (dict(g_idx=torch.zeros(8, dtype=torch.int64)), "g_idx.dtype", torch.int64),
    (dict(g_idx=torch.zeros(4, dtype=torch.int32)), "g_idx.shape", (4,)),
])
def test_bad_input_names_field_and_value(kwargs, field, value):
    args = dict(w=torch.zeros(8, 8), group_size=4, wtype="uint4", act_dtype=torch.float16)
    args.update(kwargs)
    with pytest.raises(InvalidInput) as e:
        rtn_quantize(**args)
    assert e.value.field == field and repr(value) in str(e.value)
