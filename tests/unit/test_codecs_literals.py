"""Hand-written int32 words for every codec and operand layout, decoded by hand in the comments.

These pin nibble placement to the upstream definitions, independently of our own packer: a packer and an
unpacker sharing the same wrong idea would still fail here.
"""
from __future__ import annotations

import pytest
import torch

from references import codecs
from references.codecs import awq, gptq
from references.codecs import compressed_tensors as ct
from references.codecs import operands as ops
from references.errors import InvalidInput
from references.weight import CanonicalWeight


def words(*u32) -> torch.Tensor:
    """uint32 literals -> the int32 tensor holding the same bits."""
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in u32], dtype=torch.int32)


def col(*v) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32)[:, None]


def row(*v) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32)[None, :]


# --- GPTQ qweight: [K/8, N], 8 consecutive rows per word, row 8i+j at bits 4j (sequential) ---------------

def test_gptq_qweight_sequential_along_k():
    # column 0 rows 0..7 = 1..8  -> nibbles (low to high) 1,2,...,8 -> 0x87654321
    # column 1 rows 0..7 = F,0,0,0,0,0,0,A -> 0xA000000F (top nibble A: the word is negative as int32)
    q = torch.cat([col(1, 2, 3, 4, 5, 6, 7, 8), col(15, 0, 0, 0, 0, 0, 0, 10)], dim=1)
    expect = words(0x87654321, 0xA000000F)[None, :]
    assert torch.equal(gptq.pack_qweight(q), expect)
    assert torch.equal(gptq.unpack_qweight(expect), q)


def test_gptq_qweight_8bit_four_rows_per_word():
    # 8-bit: rows 0..3 = 0x01,0x23,0x45,0x67 -> bytes low to high -> 0x67452301
    q = col(0x01, 0x23, 0x45, 0x67)
    assert torch.equal(gptq.pack_qweight(q, bits=8), words(0x67452301)[None, :])
    assert torch.equal(gptq.unpack_qweight(words(0x67452301)[None, :], bits=8), q)


# --- GPTQ qzeros: [G, N/8] packed along N; v1 stores z - 1, v2 stores z ----------------------------------

def test_gptq_qzeros_v1_stores_z_minus_one_v2_stores_z():
    z = row(1, 2, 3, 4, 5, 6, 7, 8)
    # v2: nibbles 1..8 -> 0x87654321 ; v1: nibbles z-1 = 0..7 -> 0x76543210
    assert torch.equal(gptq.pack_qzeros(z, "v2"), words(0x87654321)[None, :])
    assert torch.equal(gptq.pack_qzeros(z, "v1"), words(0x76543210)[None, :])
    assert torch.equal(gptq.unpack_qzeros(words(0x76543210)[None, :], "v1"), z)
    assert torch.equal(gptq.unpack_qzeros(words(0x87654321)[None, :], "v2"), z)
    # reading the v1 word as v2 shifts every zero by one (the vllm#26343 "!!!!" bug)
    assert torch.equal(gptq.unpack_qzeros(words(0x76543210)[None, :], "v2"), z - 1)


def test_gptq_qzeros_8bit_v1():
    # 8-bit: z = 1,2,3,4 -> v1 bytes 0,1,2,3 -> 0x03020100 ; v2 -> 0x04030201
    z = row(1, 2, 3, 4)
    assert torch.equal(gptq.pack_qzeros(z, "v1", bits=8), words(0x03020100)[None, :])
    assert torch.equal(gptq.pack_qzeros(z, "v2", bits=8), words(0x04030201)[None, :])
    assert torch.equal(gptq.unpack_qzeros(words(0x03020100)[None, :], "v1", bits=8), z)


@pytest.mark.parametrize("z, word", [
    # z-1 = -1,0,0,0,0,0,0,0: the sum is -1 -> every nibble F (the borrow runs to the top and falls off)
    ((0, 1, 1, 1, 1, 1, 1, 1), 0xFFFFFFFF),
    # z-1 = 2,-1,1,0,...: 2 - 16 + 256 = 242 = 0xF2: slot 1 reads F, slot 2 lost the 1 it lent (reads 0)
    ((3, 0, 2, 1, 1, 1, 1, 1), 0x000000F2),
    # z-1 = 0,...,0,-1 in the top slot: -0x10000000 mod 2**32 = 0xF0000000 (the borrow leaves the word)
    ((1, 1, 1, 1, 1, 1, 1, 0), 0xF0000000),
])
def test_gptq_v1_borrow_with_zero_point_zero(z, word):
    z = row(*z)
    assert torch.equal(gptq.pack_qzeros(z, "v1", v1_zero_policy="borrow"), words(word)[None, :])
    # word + 0x11111111 (wrapping) restores pack(z) exactly: 0xF2 + 0x11111111 = 0x11111203 -> 3,0,2,1,...
    assert torch.equal(gptq.unpack_qzeros(words(word)[None, :], "v1"), z)


def test_gptq_v1_borrow_8bit():
    # 8-bit: z-1 = -1,0,0,0 -> 0xFFFFFFFF; + 0x01010101 -> 0x01010100 -> 0,1,1,1
    z = row(0, 1, 1, 1)
    assert torch.equal(gptq.pack_qzeros(z, "v1", v1_zero_policy="borrow", bits=8), words(0xFFFFFFFF)[None, :])
    assert torch.equal(gptq.unpack_qzeros(words(0xFFFFFFFF)[None, :], "v1", bits=8), z)


def test_gptq_v1_refuses_zero_point_zero():
    with pytest.raises(InvalidInput) as e:
        gptq.pack_qzeros(row(3, 0, 2, 1, 1, 1, 1, 1), "v1")
    assert e.value.field == "zeros" and "column 1" in str(e.value) and "borrow" in str(e.value)


@pytest.mark.parametrize("wtype, version, word", [
    ("uint4b8", "v1", 0x77777777), ("uint4b8", "v2", 0x88888888),   # bias 8, v1 stores 7
    ("uint8b128", "v1", 0x7F7F7F7F), ("uint8b128", "v2", 0x80808080),  # bias 128, v1 stores 127
])
def test_gptq_symmetric_checkpoint_writes_bias_qzeros(wtype, version, word):
    K, N = 8, 8
    w = CanonicalWeight(torch.zeros(K, N, dtype=torch.int32), torch.ones(1, N, dtype=torch.float16), None, None,
                        -1, wtype)
    ck = codecs.encode(w, f"gptq_{version}")
    assert torch.equal(ck.tensors["qzeros"], words(word).repeat(1, N * (4 if wtype == "uint4b8" else 8) // 32))
    assert "qzeros" not in codecs.encode(w, f"gptq_{version}", symmetric_qzeros=False).tensors
    # decode ignores the symmetric qzeros tensor: garbage there must change nothing
    ck.tensors["qzeros"] = torch.full_like(ck.tensors["qzeros"], 0x12345678)
    assert codecs.decode(ck).equal(w)


# --- AWQ: [K, N/8] packed along N, slot j holds column [0,2,4,6,1,3,5,7][j] ------------------------------

def test_awq_interleaved_slot_order():
    # columns 0..7 = 0..7 -> slots hold columns 0,2,4,6,1,3,5,7 -> nibbles 0,2,4,6,1,3,5,7 -> 0x75316420
    # columns 0..7 = 1..8 -> nibbles 1,3,5,7,2,4,6,8 -> 0x86427531
    q = torch.cat([row(0, 1, 2, 3, 4, 5, 6, 7), row(1, 2, 3, 4, 5, 6, 7, 8)], dim=0)
    expect = words(0x75316420, 0x86427531)[:, None]
    assert torch.equal(awq.pack_qweight(q), expect)
    assert torch.equal(awq.unpack_qweight(expect), q)
    assert torch.equal(awq.pack_qzeros(q), expect)
    assert torch.equal(awq.unpack_qzeros(expect), q)


# --- compressed-tensors: weight_packed [N, K/8] along K; weight_zero_point [N/8, G] along N ---------------

def test_ct_weight_packed_rows_are_output_channels():
    # q[:, 0] = 1..8 (K=8) -> row 0 of weight_packed = 0x87654321 ; q[:, 1] = F,E,...,8 -> 0x89ABCDEF
    q = torch.cat([col(1, 2, 3, 4, 5, 6, 7, 8), col(15, 14, 13, 12, 11, 10, 9, 8)], dim=1)
    expect = words(0x87654321, 0x89ABCDEF)[:, None]  # shape [N=2, K/8=1]
    assert torch.equal(ct.pack_weight(q), expect)
    assert torch.equal(ct.unpack_weight(expect), q)


def test_ct_zero_point_is_n_major():
    # z [G=2, N=16]: z[0] = 0..15, z[1] = 15..0
    #   z[0, 0:8] = 0..7 -> 0x76543210   z[0, 8:16] = 8..15 -> 0xFEDCBA98
    #   z[1, 0:8] = F..8 -> 0x89ABCDEF   z[1, 8:16] = 7..0  -> 0x01234567
    # compressed-tensors [N/8, G]: row i = N-block i, column g = group g
    z = torch.stack([torch.arange(16, dtype=torch.int32), torch.arange(15, -1, -1, dtype=torch.int32)])
    expect = torch.stack([words(0x76543210, 0x89ABCDEF), words(0xFEDCBA98, 0x01234567)])
    assert torch.equal(ct.pack_zero_point(z), expect)
    assert torch.equal(ct.unpack_zero_point(expect), z)
    assert torch.equal(ops.pack_zeros_ng(z), expect)
    assert torch.equal(ops.unpack_zeros_ng(expect), z)
    # the GPTQ/Triton zero layout is the transpose, [G, N/8] (same shape here: only the values tell them apart)
    assert torch.equal(ops.pack_zeros_gn(z), expect.t())
    assert torch.equal(gptq.pack_qzeros(z, "v2"), expect.t())


def test_ct_checkpoint_names_and_shapes():
    K, N, gs = 16, 8, 8
    q = torch.arange(K * N, dtype=torch.int32).reshape(K, N) % 16
    z = torch.arange(2 * N, dtype=torch.int32).reshape(2, N) % 16
    w = CanonicalWeight(q, torch.ones(2, N, dtype=torch.bfloat16), z, None, gs, "uint4")
    t = codecs.encode(w, "compressed_tensors").tensors
    assert {k: tuple(v.shape) for k, v in t.items()} == {
        "weight_packed": (N, K // 8), "weight_scale": (N, 2), "weight_zero_point": (N // 8, 2), "weight_shape": (2,)}
    assert t["weight_shape"].tolist() == [N, K] and t["weight_packed"].dtype == torch.int32
    # q[k, 0] = (8k) % 16 -> column 0 is 0,8,0,8,... -> row 0 words 0x80808080, 0x80808080
    assert torch.equal(t["weight_packed"][0], words(0x80808080, 0x80808080))


# --- Triton operands: [K, N/8] along N, sequential ----------------------------------------------------------

def test_triton_qweight_sequential_along_n():
    # row 0 columns 0..7 = 1..8 -> 0x87654321
    q = row(1, 2, 3, 4, 5, 6, 7, 8)
    assert torch.equal(ops.triton_pack_qweight(q), words(0x87654321)[None, :])
    assert torch.equal(ops.triton_unpack_qweight(words(0x87654321)[None, :]), q)
    assert torch.equal(ops.unpack_zeros_gn(words(0x87654321)[None, :]), q)
    assert torch.equal(ops.unpack_zeros_ng(words(0x87654321)[:, None]), q)


# --- exllama shuffle: [K/8, N] along K, rows made sequential by g_idx, then nibbles interleaved ------------

def test_exllama_shuffle_no_act_order():
    # rows 0..7 = 0..7 -> even rows to slots 0-3, odd rows to slots 4-7 -> 0x75316420
    q = col(0, 1, 2, 3, 4, 5, 6, 7)
    qweight, perm = ops.exllama_shuffle(q)
    assert perm is None and torch.equal(qweight, words(0x75316420)[:, None])
    assert torch.equal(ops.exllama_unshuffle(words(0x75316420)[:, None]), q)
    # the pair mask: word & 0x000F000F = rows (0, 1) in the two half-words
    assert (0x75316420 & 0x000F000F) == (1 << 16) | 0


def test_exllama_shuffle_act_order():
    # K=16, g_idx[k] = k % 2 -> q_perm = 0,2,...,14, 1,3,...,15 ; q[k, 0] = k
    # word 0 holds sorted rows 0,2,4,...,14 -> slots take logical 0,2,4,6,1,3,5,7 of that run
    #   -> values 0,4,8,12,2,6,10,14 -> 0xEA62C840
    # word 1 holds rows 1,3,...,15 -> values 1,5,9,13,3,7,11,15 -> 0xFB73D951
    K = 16
    q = torch.arange(K, dtype=torch.int32)[:, None]
    g_idx = torch.arange(K, dtype=torch.int32) % 2
    qweight, perm = ops.exllama_shuffle(q, g_idx)
    assert perm.dtype == torch.int64
    assert perm.tolist() == list(range(0, 16, 2)) + list(range(1, 16, 2))
    assert torch.equal(qweight, words(0xEA62C840, 0xFB73D951)[:, None])
    assert torch.equal(ops.exllama_unshuffle(words(0xEA62C840, 0xFB73D951)[:, None], perm), q)


# --- RDNA hybrid: [N, K/8] along K, interleaved -------------------------------------------------------------

def test_hybrid_interleaved_along_k():
    # column 0 = K-values 0..7 -> row 0 word 0x75316420 ; column 1 = 8..15 -> 8,10,12,14,9,11,13,15 -> 0xFDB9ECA8
    q = torch.cat([col(0, 1, 2, 3, 4, 5, 6, 7), col(8, 9, 10, 11, 12, 13, 14, 15)], dim=1)
    expect = words(0x75316420, 0xFDB9ECA8)[:, None]  # [N=2, K/8=1]
    assert torch.equal(ops.hybrid_pack_qweight(q), expect)
    assert torch.equal(ops.hybrid_unpack_qweight(expect), q)


def test_hybrid_padded_row_stride_and_int8_view():
    q = torch.cat([col(0, 1, 2, 3, 4, 5, 6, 7), col(8, 9, 10, 11, 12, 13, 14, 15)], dim=1)
    buf = torch.full((2, 3), -1, dtype=torch.int32)  # row stride 3 words, K/8 = 1 used
    buf[:, :1] = words(0x75316420, 0xFDB9ECA8)[:, None]
    assert buf[:, :1].stride() == (3, 1)
    assert torch.equal(ops.hybrid_unpack_qweight(buf[:, :1]), q)
    # the int8 [N, K/2] view: bytes of 0x75316420 little-endian are 0x20, 0x64, 0x31, 0x75
    b = ops.hybrid_pack_qweight(q).view(torch.int8)
    assert b[0].tolist() == [0x20, 0x64, 0x31, 0x75]
    assert torch.equal(ops.hybrid_unpack_qweight(b), q)
