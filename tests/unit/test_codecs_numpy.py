"""Every codec and operand layout against an independent numpy uint32 unpacker (tests/unit/numpy_unpacker.py),
on hypothesis-drawn tensors: our packer's words must read back right there, and our unpacker must agree with it
on arbitrary words."""
from __future__ import annotations

import numpy as np
import numpy_unpacker as nu
import torch
from codec_weights import random_weight, random_words
from hypothesis import given, settings
from hypothesis import strategies as st

from references import codecs
from references.codecs import awq, gptq
from references.codecs import compressed_tensors as ct
from references.codecs import operands as ops

SETTINGS = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**31 - 1)
small = st.integers(1, 4)  # multiples of the pack factor, kept small


def same(a: np.ndarray, b: torch.Tensor) -> bool:
    return a.shape == tuple(b.shape) and bool(np.array_equal(a, b.numpy().astype(np.int64)))


@st.composite
def weights(draw, wtypes=("uint4", "uint4b8", "uint8", "uint8b128"), act_order=(False, True)):
    wtype = draw(st.sampled_from(wtypes))
    G = draw(st.integers(1, 3))
    gs = draw(st.sampled_from([8, 16, 32]))
    channelwise = draw(st.booleans())
    K = G * gs
    N = 8 * draw(small)
    return random_weight(draw(seeds), K, N, -1 if channelwise else gs, wtype,
                         act_dtype=draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32])),
                         act_order=draw(st.sampled_from(act_order)))


@SETTINGS
@given(w=weights(), version=st.sampled_from(["v1", "v2"]))
def test_gptq_checkpoint_reads_back_in_numpy(w, version):
    ck = codecs.encode(w, f"gptq_{version}", v1_zero_policy="borrow")
    bits = w.wtype.size_bits
    assert same(nu.gptq_qweight(ck.tensors["qweight"], bits), w.q)
    assert same(nu.gptq_qzeros(ck.tensors["qzeros"], version, bits), w.zero_points())


@SETTINGS
@given(w=weights(wtypes=("uint4", "uint4b8"), act_order=(False,)))
def test_awq_checkpoint_reads_back_in_numpy(w):
    ck = codecs.encode(w, "awq")
    assert same(nu.awq_packed(ck.tensors["qweight"]), w.q)
    assert same(nu.awq_packed(ck.tensors["qzeros"]), w.zero_points())


@SETTINGS
@given(w=weights())
def test_ct_checkpoint_reads_back_in_numpy(w):
    t = codecs.encode(w, "compressed_tensors").tensors
    bits = w.wtype.size_bits
    assert same(nu.ct_weight_packed(t["weight_packed"], bits), w.q)
    if w.zeros is not None:
        assert same(nu.ct_zero_point(t["weight_zero_point"], bits), w.zeros)
    assert torch.equal(t["weight_scale"], w.scales.t())


@SETTINGS
@given(w=weights(wtypes=("uint4", "uint4b8")))
def test_operands_read_back_in_numpy(w):
    assert same(nu.triton_qweight(ops.triton_pack_qweight(w.q)), w.q)
    z = w.zero_points()
    assert same(nu.zeros_gn(ops.pack_zeros_gn(z)), z)
    assert same(nu.zeros_ng(ops.pack_zeros_ng(z)), z)
    qweight, perm = ops.exllama_shuffle(w.q, w.g_idx)
    assert same(nu.exllama(qweight, None if w.g_idx is None else w.g_idx.numpy()), w.q)
    h = ops.hybrid_pack_qweight(w.q)
    assert same(nu.hybrid(h), w.q)


@SETTINGS
@given(seed=seeds, r=small, c=small, bits=st.sampled_from([4, 8]), version=st.sampled_from(["v1", "v2"]))
def test_gptq_unpackers_agree_with_numpy_on_any_words(seed, r, c, bits, version):
    wq, wz = random_words(seed, (r, 8 * c)), random_words(seed + 1, (r, c))
    assert same(nu.gptq_qweight(wq, bits), gptq.unpack_qweight(wq, bits))
    assert same(nu.gptq_qzeros(wz, version, bits), gptq.unpack_qzeros(wz, version, bits))
    assert same(nu.ct_weight_packed(wq, bits), ct.unpack_weight(wq, bits))
    assert same(nu.ct_zero_point(wq, bits), ct.unpack_zero_point(wq, bits))


@SETTINGS
@given(seed=seeds, r=small, c=small)
def test_4bit_unpackers_agree_with_numpy_on_any_words(seed, r, c):
    w = random_words(seed, (r, c))
    assert same(nu.awq_packed(w), awq.unpack_qweight(w))
    assert same(nu.awq_packed(w), awq.unpack_qzeros(w))
    assert same(nu.triton_qweight(w), ops.triton_unpack_qweight(w))
    assert same(nu.zeros_gn(w), ops.unpack_zeros_gn(w))
    assert same(nu.zeros_ng(w), ops.unpack_zeros_ng(w))
    assert same(nu.exllama(w), ops.exllama_unshuffle(w))
    assert same(nu.hybrid(w), ops.hybrid_unpack_qweight(w))
    # a padded row stride: the view of the first c words of each row decodes like the compact copy
    buf = random_words(seed + 2, (r, c + 3))
    assert same(nu.hybrid(buf[:, :c]), ops.hybrid_unpack_qweight(buf[:, :c]))


@SETTINGS
@given(seed=seeds, K8=small, N=small)
def test_exllama_unshuffle_with_perm_agrees_with_numpy(seed, K8, N):
    K = 8 * K8
    g = torch.Generator().manual_seed(seed)
    g_idx = torch.randint(0, 4, (K,), generator=g, dtype=torch.int32)
    perm = torch.argsort(g_idx.long(), stable=True)
    w = random_words(seed, (K8, N))
    assert same(nu.exllama(w, g_idx.numpy()), ops.exllama_unshuffle(w, perm))
