"""CanonicalWeight: bad input names field and value; dequantize matches hand-computed values."""
from __future__ import annotations

import pytest
import torch

from references.errors import InvalidInput
from references.weight import CanonicalWeight


def _valid(wtype="uint4", K=8, N=8, group_size=4, act_order=False):
    G = K // (K if group_size == -1 else group_size)
    q = (torch.arange(K * N, dtype=torch.int32).reshape(K, N) % 16)
    zeros = torch.full((G, N), 8, dtype=torch.int32) if wtype == "uint4" else None
    g_idx = (torch.arange(K) // (K // G)).flip(0).to(torch.int32) if act_order else None
    return dict(q=q, scales=torch.ones(G, N, dtype=torch.float16), zeros=zeros, g_idx=g_idx,
                group_size=group_size, wtype=wtype)


def _raises(field, value, **changes):
    kw = _valid(**{k: changes.pop(k) for k in ("wtype", "K", "N", "group_size", "act_order") if k in changes})
    kw.update(changes)
    with pytest.raises(InvalidInput) as e:
        CanonicalWeight(**kw)
    assert e.value.field == field
    msg = str(e.value)
    assert msg.startswith(f"{field}="), msg
    assert repr(value) in msg, msg
    return msg


def test_valid_weights_construct():
    for wtype in ("uint4", "uint4b8"):
        for gs in (4, -1):
            for ao in (False, True):
                w = CanonicalWeight(**_valid(wtype=wtype, group_size=gs, act_order=ao))
                assert (w.K, w.N, w.G, w.act_order) == (8, 8, 8 // w.gs, ao)


def test_q_must_be_2d():
    _raises("q.shape", (64,), q=torch.zeros(64, dtype=torch.int32))


def test_q_dtype():
    _raises("q.dtype", torch.int64, q=torch.zeros(8, 8, dtype=torch.int64))


def test_n_multiple_of_8():
    q = torch.zeros(8, 12, dtype=torch.int32)
    _raises("N", 12, q=q, scales=torch.ones(2, 12, dtype=torch.float16), zeros=torch.zeros(2, 12, dtype=torch.int32))


def test_k_multiple_of_group():
    q = torch.zeros(6, 8, dtype=torch.int32)
    msg = _raises("K", 6, q=q)
    assert "group_size=4" in msg


@pytest.mark.parametrize("gs", [0, -2])
def test_group_size_invalid(gs):
    kw = _valid()
    with pytest.raises(InvalidInput) as e:
        CanonicalWeight(**{**kw, "group_size": gs})
    assert e.value.field == "group_size" and str(e.value).startswith(f"group_size={gs}")


@pytest.mark.parametrize("bad,rng", [(16, (0, 16)), (-1, (-1, 15))])
def test_q_out_of_stored_range(bad, rng):
    kw = _valid()
    kw["q"][0, 0] = bad
    kw["q"][1, 1] = 15 if bad < 0 else 0
    msg = _raises("q values", rng, q=kw["q"])
    assert "uint4 stored range [0, 15]" in msg


def test_q_range_of_8bit_type():
    q = torch.full((8, 8), 255, dtype=torch.int32)
    CanonicalWeight(**{**_valid(wtype="uint4b8"), "q": q, "wtype": "uint8b128"})
    q[0, 0] = 256
    _raises("q values", (255, 256), wtype="uint4b8", q=q)  # uint4b8 range is [0, 15]


def test_scales_dtype():
    _raises("scales.dtype", torch.int32, scales=torch.ones(2, 8, dtype=torch.int32))


def test_scales_shape():
    msg = _raises("scales.shape", (8, 2), scales=torch.ones(8, 2, dtype=torch.float16))
    assert "(2, 8)" in msg


def test_zeros_given_for_biased_type():
    msg = _raises("zeros", "a tensor", wtype="uint4b8", zeros=torch.zeros(2, 8, dtype=torch.int32))
    assert "uint4b8" in msg and "8" in msg


def test_zeros_missing_for_uint4():
    msg = _raises("zeros", None, zeros=None)
    assert "uint4" in msg


def test_zeros_dtype_shape_range():
    _raises("zeros.dtype", torch.int64, zeros=torch.zeros(2, 8, dtype=torch.int64))
    _raises("zeros.shape", (8, 2), zeros=torch.zeros(8, 2, dtype=torch.int32))
    z = torch.zeros(2, 8, dtype=torch.int32)
    z[1, 3] = 16
    _raises("zeros values", (0, 16), zeros=z)


def test_g_idx_dtype_and_shape():
    _raises("g_idx.dtype", torch.int64, act_order=True, g_idx=torch.zeros(8, dtype=torch.int64))
    _raises("g_idx.shape", (7,), act_order=True, g_idx=torch.zeros(7, dtype=torch.int32))


@pytest.mark.parametrize("g", [
    [0, 0, 0, 0, 0, 1, 1, 1],   # group 0 used 5 times
    [0, 0, 0, 0, 2, 2, 2, 2],   # group 2 does not exist (G = 2)
    [0, 0, 0, 0, -1, 1, 1, 1],  # negative
])
def test_g_idx_inconsistent(g):
    msg = _raises("g_idx", "inconsistent", act_order=True, g_idx=torch.tensor(g, dtype=torch.int32))
    assert "[0, 2)" in msg and "group_size=4" in msg


def test_unknown_wtype_lists_allowed():
    with pytest.raises(ValueError, match=r"weight_type='int4'.*uint4b8"):
        CanonicalWeight(**{**_valid(), "wtype": "int4"})


def test_dequantize_hand_computed():
    # K=4, N=8, two groups; column 0 and 1 worked out by hand, other columns zero
    q = torch.zeros(4, 8, dtype=torch.int32)
    q[:, 0] = torch.tensor([15, 0, 9, 8])
    q[:, 1] = torch.tensor([1, 2, 3, 4])
    zeros = torch.zeros(2, 8, dtype=torch.int32)
    zeros[:, 0] = torch.tensor([8, 7])
    zeros[:, 1] = torch.tensor([0, 4])
    scales = torch.ones(2, 8, dtype=torch.float16)
    scales[:, 0] = torch.tensor([0.5, 0.25])
    scales[:, 1] = torch.tensor([2.0, -1.0])
    w = CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=None, group_size=2, wtype="uint4")
    W = w.dequantize()
    assert W.dtype == torch.float64
    # (15-8)*0.5, (0-8)*0.5, (9-7)*0.25, (8-7)*0.25
    assert W[:, 0].tolist() == [3.5, -4.0, 0.5, 0.25]
    # (1-0)*2, (2-0)*2, (3-4)*-1, (4-4)*-1
    assert W[:, 1].tolist() == [2.0, 4.0, 1.0, 0.0]
    assert W[:, 2:].eq(0).all()


def test_dequantize_biased_and_act_order_hand_computed():
    q = torch.full((4, 8), 8, dtype=torch.int32)
    q[:, 0] = torch.tensor([15, 0, 9, 8])
    scales = torch.ones(2, 8, dtype=torch.bfloat16)
    scales[:, 0] = torch.tensor([0.5, 4.0])
    g_idx = torch.tensor([1, 0, 0, 1], dtype=torch.int32)  # rows 0 and 3 in group 1
    w = CanonicalWeight(q=q, scales=scales, zeros=None, g_idx=g_idx, group_size=2, wtype="uint4b8")
    # (15-8)*4, (0-8)*0.5, (9-8)*0.5, (8-8)*4
    assert w.dequantize()[:, 0].tolist() == [28.0, -4.0, 0.5, 0.0]
    assert w.dequantize()[:, 1:].eq(0).all()
    assert w.zero_points().eq(8).all() and w.zero_points().shape == (2, 8)


def test_equal_compares_scales_by_bits():
    """-0.0 and 0.0 are different bits; a codec that flips a sign bit must not pass a round trip."""
    q = torch.zeros((8, 8), dtype=torch.int32)
    pos = CanonicalWeight(q, torch.zeros((1, 8), dtype=torch.float16), None, None, -1, "uint4b8")
    neg = CanonicalWeight(q, -torch.zeros((1, 8), dtype=torch.float16), None, None, -1, "uint4b8")
    assert pos.equal(pos) and not pos.equal(neg)
