"""encode -> decode is the identity (bit for bit) for every format, type, grouping, act-order and act dtype
a format supports; operand layouts invert exactly; formats that cannot hold a weight refuse it."""
from __future__ import annotations

import pytest
import torch
from codec_weights import random_weight
from hypothesis import given, settings
from hypothesis import strategies as st

from references import codecs
from references.checkpoint import CHECKPOINT_FORMATS
from references.codecs import operands as ops
from references.errors import InvalidInput

SETTINGS = settings(max_examples=40, deadline=None)

# AWQ is 4-bit only (8 nibbles per word, no 8-bit variant upstream) and has no act-order.
SUPPORTS = {
    "gptq_v1": dict(wtypes=("uint4", "uint4b8", "uint8", "uint8b128"), act_order=True),
    "gptq_v2": dict(wtypes=("uint4", "uint4b8", "uint8", "uint8b128"), act_order=True),
    "awq": dict(wtypes=("uint4", "uint4b8"), act_order=False),
    "compressed_tensors": dict(wtypes=("uint4", "uint4b8", "uint8", "uint8b128"), act_order=True),
}
assert set(SUPPORTS) == set(CHECKPOINT_FORMATS)


@st.composite
def cases(draw):
    fmt = draw(st.sampled_from(sorted(SUPPORTS)))
    sup = SUPPORTS[fmt]
    G, gs = draw(st.integers(1, 3)), draw(st.sampled_from([8, 16, 32]))
    channelwise = draw(st.booleans())
    w = random_weight(draw(st.integers(0, 2**31 - 1)), G * gs, 8 * draw(st.integers(1, 4)),
                      -1 if channelwise else gs, draw(st.sampled_from(sup["wtypes"])),
                      act_dtype=draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32])),
                      act_order=draw(st.booleans()) and sup["act_order"],
                      zeros_fill=draw(st.sampled_from([None, None, 0])))
    return fmt, w


@SETTINGS
@given(case=cases())
def test_encode_decode_is_identity(case):
    fmt, w = case
    policy = {"v1_zero_policy": "borrow"} if fmt == "gptq_v1" else {}
    ck = codecs.encode(w, fmt, **policy)
    assert ck.format == fmt and (ck.K, ck.N, ck.group_size, ck.wtype, ck.act_dtype) == (
        w.K, w.N, w.group_size, w.wtype, w.act_dtype)
    assert all(t.dtype == torch.int32 for k, t in ck.tensors.items() if k in ("qweight", "qzeros", "weight_packed",
                                                                               "weight_zero_point", "g_idx",
                                                                               "weight_g_idx"))
    back = codecs.decode(ck)
    assert back.equal(w)
    assert torch.equal(back.dequantize(), w.dequantize())


@pytest.mark.parametrize("fmt", CHECKPOINT_FORMATS)
def test_g_idx_written_only_for_act_order(fmt):
    w = random_weight(1, 32, 16, 16, "uint4", zeros_fill=3)
    assert not any("g_idx" in k for k in codecs.encode(w, fmt).tensors)
    if SUPPORTS[fmt]["act_order"]:
        wa = random_weight(1, 32, 16, 16, "uint4", act_order=True, zeros_fill=3)
        ck = codecs.encode(wa, fmt)
        key = "weight_g_idx" if fmt == "compressed_tensors" else "g_idx"
        assert torch.equal(ck.tensors[key], wa.g_idx)


def test_gptq_v1_and_v2_differ_only_in_qzeros():
    w = random_weight(7, 64, 16, 32, "uint4", act_order=True, zeros_fill=None)
    w.zeros.clamp_(min=1)
    v1, v2 = codecs.encode(w, "gptq_v1").tensors, codecs.encode(w, "gptq_v2").tensors
    assert v1.keys() == v2.keys()
    assert all(torch.equal(v1[k], v2[k]) for k in v1 if k != "qzeros")
    assert not torch.equal(v1["qzeros"], v2["qzeros"])


@pytest.mark.parametrize("wtype", ["uint8", "uint8b128"])
def test_awq_refuses_8bit(wtype):
    with pytest.raises(InvalidInput) as e:
        codecs.encode(random_weight(0, 16, 8, 8, wtype), "awq")
    assert e.value.field == "wtype" and wtype in str(e.value) and "4-bit" in str(e.value)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), K8=st.integers(1, 4), N8=st.integers(1, 3), act_order=st.booleans())
def test_operand_layouts_invert(seed, K8, N8, act_order):
    w = random_weight(seed, 8 * K8, 8 * N8, 8, "uint4", act_order=act_order)
    assert torch.equal(ops.triton_unpack_qweight(ops.triton_pack_qweight(w.q)), w.q)
    assert torch.equal(ops.unpack_zeros_gn(ops.pack_zeros_gn(w.zeros)), w.zeros)
    assert torch.equal(ops.unpack_zeros_ng(ops.pack_zeros_ng(w.zeros)), w.zeros)
    qweight, perm = ops.exllama_shuffle(w.q, w.g_idx)
    assert (perm is None) == (not act_order)
    assert torch.equal(ops.exllama_unshuffle(qweight, perm), w.q)
    if act_order:  # the packed rows are the logical rows sorted by group (groups contiguous)
        assert torch.equal(ops.exllama_unshuffle(qweight), w.q[perm])
        assert bool((w.g_idx[perm][1:] >= w.g_idx[perm][:-1]).all())
    h = ops.hybrid_pack_qweight(w.q)
    assert h.shape == (w.N, w.K // 8)
    padded = torch.zeros(w.N, w.K // 8 + 5, dtype=torch.int32)
    padded[:, : w.K // 8] = h
    assert torch.equal(ops.hybrid_unpack_qweight(padded[:, : w.K // 8]), w.q)
