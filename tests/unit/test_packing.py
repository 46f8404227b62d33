"""references/packing.py: slot placement pinned by hand-written words, checked against the numpy unpacker."""
from __future__ import annotations

import numpy as np
import numpy_unpacker as nu
import pytest
import torch
from codec_weights import random_words
from hypothesis import given, settings
from hypothesis import strategies as st

from references.errors import InvalidInput
from references.packing import INTERLEAVED, SEQUENTIAL, pack, to_int32_word, unpack


def test_orders_are_the_documented_permutations():
    assert SEQUENTIAL == tuple(range(8))
    # slot j holds logical INTERLEAVED[j]: even values in the low half-word, odd ones in the high half-word
    assert [INTERLEAVED[nu.bit_offset(i, 4, True) // 4] for i in range(8)] == list(range(8))


@pytest.mark.parametrize("order, word", [
    ("sequential", 0x76543210),    # value i at nibble i
    ("interleaved", 0x75316420),   # nibbles hold values 0,2,4,6,1,3,5,7
    (INTERLEAVED, 0x75316420),
])
def test_pack_0_to_7(order, word):
    v = torch.arange(8, dtype=torch.int32)[None, :]
    assert pack(v, dim=1, order=order).tolist() == [[word]]
    assert torch.equal(unpack(torch.tensor([[word]], dtype=torch.int32), dim=1, order=order), v)


def test_top_nibble_makes_a_negative_int32():
    v = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 15]], dtype=torch.int32)
    assert pack(v, dim=1).tolist() == [[0xF0000000 - (1 << 32)]]
    assert to_int32_word(torch.tensor([0xFFFFFFFF, 1 << 32])).tolist() == [-1, 0]


def test_8bit_bytes_and_dim0():
    v = torch.tensor([[0x01], [0x23], [0x45], [0xEF]], dtype=torch.int32)  # packed along dim 0
    assert pack(v, dim=0, bits=8).tolist() == [[0xEF452301 - (1 << 32)]]
    with pytest.raises(InvalidInput) as e:
        pack(v, dim=0, bits=8, order="interleaved")
    assert e.value.field == "order"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), r=st.integers(1, 3), c=st.integers(1, 3), dim=st.sampled_from([0, 1]),
       bits=st.sampled_from([4, 8]), interleaved=st.booleans())
def test_unpack_agrees_with_numpy_and_pack_inverts(seed, r, c, dim, bits, interleaved):
    interleaved = interleaved and bits == 4
    order = "interleaved" if interleaved else "sequential"
    w = random_words(seed, (r, c))
    values = unpack(w, dim=dim, bits=bits, order=order)
    assert np.array_equal(nu.unpack(w, dim, bits, interleaved), values.numpy())
    assert torch.equal(pack(values, dim=dim, bits=bits, order=order), w)


@pytest.mark.parametrize("call, field", [
    (lambda: pack(torch.zeros(1, 6, dtype=torch.int32), dim=1), "size along dim 1"),
    (lambda: pack(torch.full((1, 8), 16), dim=1), "values"),
    (lambda: pack(torch.zeros(1, 8), dim=1, bits=2), "bits"),
    (lambda: pack(torch.zeros(1, 8), dim=1, order="reversed"), "order"),
    (lambda: pack(torch.zeros(1, 8), dim=1, order=(0, 0, 1, 2, 3, 4, 5, 6)), "order"),
    (lambda: unpack(torch.zeros(1, 1), dim=1), "words.dtype"),
])
def test_bad_input(call, field):
    with pytest.raises(InvalidInput) as e:
        call()
    assert e.value.field == field
