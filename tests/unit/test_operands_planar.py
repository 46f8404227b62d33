"""The planar operand layout (references/codecs/operands.py, planar_pack_qweight): hand-written words, the int16
view the kernel reads, the zero-padded last block, the round trip, and every refusal naming its field."""
from __future__ import annotations

import pytest
import torch

from references.codecs import operands as ops
from references.errors import InvalidInput


def words(*u32) -> torch.Tensor:
    """uint32 literals -> the int32 tensor holding the same bits."""
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in u32], dtype=torch.int32)


def _q_literal() -> torch.Tensor:
    """K = 64 (one block of 64: 4 planes of R = 16 rows), N = 2.
    Column 0: even rows hold plane + 1 (1..4), odd rows plane + 5 (5..8). Column 1: only row 17 = 15."""
    k = torch.arange(64)
    col0 = torch.where(k % 2 == 0, k // 16 + 1, k // 16 + 5)
    col1 = torch.where(k == 17, 15, 0)
    return torch.stack([col0, col1], dim=1).int()


def test_planar_words_by_hand():
    # word (b, n, w): slot s < 4 is row s*16 + 2w (plane s, even element), slot s >= 4 row (s-4)*16 + 2w+1
    # column 0: every word reads slots 1,2,3,4 (even rows, planes 0..3) then 5,6,7,8 -> 0x87654321
    # column 1: row 17 = plane 1, element 1 -> word 0, slot 5 (bits 20..23) -> 0x00F00000, the rest 0
    w = ops.planar_pack_qweight(_q_literal(), block=64)
    assert w.shape == (1, 2, 8)
    assert torch.equal(w[0, 0], words(*[0x87654321] * 8))
    assert torch.equal(w[0, 1], words(0x00F00000, *[0] * 7))
    assert torch.equal(ops.planar_unpack_qweight(w, 64), _q_literal())


def test_planar_int16_view_is_what_the_kernel_reads():
    # the kernel views the words as int16 [Kb, N, R]: element i holds q[j*R + i] at bits 4j (little-endian halves)
    h = ops.planar_pack_qweight(_q_literal(), block=64).view(torch.int16)
    assert h.shape == (1, 2, 16)
    assert int(h[0, 0, 0]) == 0x4321 and int(h[0, 0, 1]) == 0x8765 - (1 << 16)  # rows 0,16,32,48 / 1,17,33,49
    assert int(h[0, 1, 1]) == 0x00F0 and int(h[0, 1].abs().sum()) == 0xF0  # row 17: plane 1 of element 1


def test_planar_last_block_zero_padded():
    # K = 40 in a block of 64: planes 0, 1 are whole, plane 2 holds rows 32..39 (elements 0..7), plane 3 is empty.
    # word w holds elements 2w, 2w+1: planes 0,1,2 full for w < 4 -> 0x0FFF0FFF, plane 2 empty after -> 0x00FF00FF
    w = ops.planar_pack_qweight(torch.full((40, 8), 15, dtype=torch.int32), block=64)
    assert torch.equal(w[0, 3], words(*[0x0FFF0FFF] * 4, *[0x00FF00FF] * 4))
    padded = w.clone()
    padded[0, 0, 7] |= 0x7000  # slot 3 of word 7: row 48 + 14, past K
    with pytest.raises(InvalidInput, match="qweight.*padding"):
        ops.planar_unpack_qweight(padded, 40)


@pytest.mark.parametrize("K,N,block", [(128, 8, 128), (4096, 24, 128), (300, 16, 128), (40, 8, 64), (512, 8, 256)])
def test_planar_round_trip(K, N, block):
    q = torch.randint(0, 16, (K, N), generator=torch.Generator().manual_seed(K + N), dtype=torch.int32)
    w = ops.planar_pack_qweight(q, block)
    assert w.shape == (-(-K // block), N, block // 8)
    assert torch.equal(ops.planar_unpack_qweight(w, K), q)


@pytest.mark.parametrize("call,field", [
    (lambda: ops.planar_pack_qweight(torch.zeros(64, 8, dtype=torch.int32), block=96), "block"),
    (lambda: ops.planar_pack_qweight(torch.zeros(64, 8), block=64), "q.dtype"),
    (lambda: ops.planar_pack_qweight(torch.full((64, 8), 16, dtype=torch.int32), block=64), "values"),
    (lambda: ops.planar_unpack_qweight(torch.zeros(8, 16, dtype=torch.int32), 64), "qweight.shape"),
    (lambda: ops.planar_unpack_qweight(torch.zeros(2, 8, 16, dtype=torch.int32), 64), "K"),
    (lambda: ops.planar_unpack_qweight(torch.zeros(1, 8, 4, dtype=torch.int32), 32), "block"),
])
def test_planar_refusals_name_the_field(call, field):
    with pytest.raises(InvalidInput, match=field):
        call()
