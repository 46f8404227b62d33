"""triton_w4a16's performance paths on exact-tier data, bit for bit against reference_gemm: packed weight
loads, the dot-free GEMV path (BLOCK_M 1..8), split_k=0 (auto), and the measured tile table loader.

Shapes are small; tiles are chosen so several N programs, N/M tails and several K splits really run. Inputs go on
the kernel's device (tests/unit/devices.py): on a GPU machine every path is judged compiled.
"""
from __future__ import annotations

import importlib
import json

import pytest
import torch

from conformance.core import registry
from references.codecs import operands as codec_ops
from references.errors import InvalidInput
from references.gemm import reference_gemm
from references.generators import random_activations, random_canonical
from tests.unit.devices import ON_GPU, on_dev

registry.load_all()
tw = importlib.import_module("conformance_kernels.triton_w4a16")
TileConfig = tw.TileConfig


def _case(M, N, K, gs, wtype, dtype=torch.float16, seed=3):
    """((x, b_q, scales, qzeros, group_size, zp_bias) on DEV, the reference on the CPU)."""
    w = random_canonical(K, N, gs, wtype, dtype, "exact", seed)
    x = random_activations(M, K, dtype, "exact", seed + 1)
    qz = None if w.zeros is None else codec_ops.pack_zeros_gn(w.zeros)
    tensors = on_dev(x, codec_ops.triton_pack_qweight(w.q), w.scales, qz)
    return (*tensors, w.gs, w.wtype.bias), reference_gemm(x, w).to(dtype)


# id, M, N, K, group, wtype, tiles, expected (block_m, split_k) after fitting
FAST_CASES = [
    ("packed_dot_even_unmasked", 4, 128, 256, 128, "uint4", TileConfig(16, 64, 64, split_k=2, packed_load=True),
     (16, 2)),
    ("packed_dot_splitk2_Ntail", 3, 200, 256, 64, "uint4", TileConfig(16, 64, 64, split_k=2, packed_load=True),
     (16, 2)),
    ("packed_dot_b8_Mtail", 21, 64, 128, 128, "uint4b8", TileConfig(16, 32, 64, packed_load=True), (16, 1)),
    ("swap_ab_packed_splitk2_Ntail", 5, 200, 256, 64, "uint4",
     TileConfig(16, 64, 64, split_k=2, packed_load=True, swap_ab=True), (16, 2)),
    ("swap_ab_gather_Mtail", 19, 64, 128, 128, "uint4b8", TileConfig(16, 32, 64, swap_ab=True), (16, 1)),
    ("gemv_m1_packed_splitk4", 1, 136, 256, 32, "uint4", TileConfig(8, 64, 32, split_k=4, packed_load=True,
                                                                     use_dot=False), (1, 4)),
    ("gemv_m3_gather", 3, 72, 128, 64, "uint4b8", TileConfig(4, 64, 64, split_k=2, use_dot=False), (4, 2)),
    ("gemv_m5_bm8_channelwise", 5, 48, 96, -1, "uint4", TileConfig(8, 32, 128, use_dot=False, packed_load=True),
     (8, 1)),
    ("magic_gemv_m1_zeros_splitk2", 1, 136, 256, 64, "uint4",
     TileConfig(1, 64, 64, split_k=2, packed_load=True, use_dot=False, magic=True), (1, 2)),
    ("magic_gemv_m3_b8_gather", 3, 72, 128, 64, "uint4b8", TileConfig(4, 64, 64, use_dot=False, magic=True),
     (4, 1)),
    ("magic_swap_ab_zeros_Ntail", 5, 200, 256, 64, "uint4",
     TileConfig(16, 64, 64, split_k=2, packed_load=True, swap_ab=True, magic=True), (16, 2)),
    ("magic_dot_b8_Mtail", 21, 64, 128, 128, "uint4b8", TileConfig(16, 32, 64, packed_load=True, magic=True),
     (16, 1)),
    ("dequant_mm_zeros_Ntail", 7, 200, 256, 64, "uint4", TileConfig(64, 64, 64, packed_load=True, magic=True,
                                                                     dequant_mm=True), (1, 1)),
    ("dequant_mm_b8_plain", 33, 64, 192, 64, "uint4b8", TileConfig(64, 32, 64, dequant_mm=True), (1, 1)),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FAST_CASES, ids=[c[0] for c in FAST_CASES])
def test_fast_paths_exact(case, dtype):
    _, M, N, K, gs, wtype, tiles, (bm, sk) = case
    args, ref = _case(M, N, K, gs, wtype, dtype)
    y = tw.launch_w4a16_gemm(*args, tiles)
    torch.testing.assert_close(y.cpu(), ref, rtol=0, atol=0)
    last = tw.last_launch_config()
    assert (last["block_m"], last["split_k"], last["packed_load"], last["use_dot"], last["swap_ab"], last["magic"],
            last["dequant_mm"]) == (bm, sk, tiles.packed_load, tiles.use_dot, tiles.swap_ab, tiles.magic,
                                    tiles.dequant_mm)
    # masks dropped only where every tile is in bounds (an out-of-bounds read never shows in y)
    assert (last["even_n"], last["even_k"]) == (N % last["block_n"] == 0, K % last["block_k"] == 0)


def test_tails_keep_their_masks():
    for N, K, tiles, even in ((200, 256, TileConfig(16, 64, 64, packed_load=True), (False, True)),
                              (64, 96, TileConfig(16, 64, 128), (True, False)),
                              (128, 256, TileConfig(16, 64, 64, packed_load=True), (True, True))):
        args, ref = _case(2, N, K, -1 if K == 96 else 64, "uint4b8")
        torch.testing.assert_close(tw.launch_w4a16_gemm(*args, tiles).cpu(), ref, rtol=0, atol=0)
        last = tw.last_launch_config()
        assert (last["even_n"], last["even_k"]) == even, (N, K)


def test_auto_split_fills_the_machine():
    # 2 N programs; K=1024 with BLOCK_K 64 is 16 K tiles: 132 SMs x 2 waves wants >= 264 programs -> 16 splits
    assert tw.fit_tiles(TileConfig(16, 64, 64, split_k=0), 1, 128, 1024, 128, 132).split_k == 16
    # 56 N programs x 4 = 224 < 264, x 8 = 448: the smallest divisor of 64 K tiles that reaches the target
    assert tw.fit_tiles(TileConfig(16, 256, 64, split_k=0), 1, 14336, 4096, 128, 132).split_k == 8
    assert tw.fit_tiles(TileConfig(64, 128, 64, split_k=0), 4096, 4096, 4096, 128, 132).split_k == 1
    # without a device (sm_count 0) auto still splits a single-program problem, so CPU runs the path
    assert tw.fit_tiles(TileConfig(16, 64, 64, split_k=0), 1, 64, 256, 64).split_k == 2


def test_auto_split_runs_exact():
    args, ref = _case(2, 64, 256, 64, "uint4")
    y = tw.launch_w4a16_gemm(*args, TileConfig(16, 64, 64, split_k=0, packed_load=True))
    torch.testing.assert_close(y.cpu(), ref, rtol=0, atol=0)
    # 4 K tiles, one M x N program: the CPU (no SM count) splits 2; a GPU (>= 2 SMs x 2 waves) takes all 4
    assert tw.last_launch_config()["split_k"] == (4 if ON_GPU else 2)


def test_gemv_path_keeps_small_block_m_dot_path_does_not():
    assert tw.fit_tiles(TileConfig(16, 64, 64, use_dot=False), 2, 64, 64, 64).block_m == 2
    assert tw.fit_tiles(TileConfig(16, 64, 64), 2, 64, 64, 64).block_m == 16


def _table_doc(arch="sm90", rows=None):
    rows = rows if rows is not None else [
        {"max_m": 4, "block_m": 4, "block_n": 128, "block_k": 64, "split_k": 0, "use_dot": False,
         "packed_load": True, "num_warps": 4, "num_stages": 3},
        {"max_m": None, "block_m": 64, "block_n": 128, "block_k": 64},
    ]
    return {"arch": arch, "table": rows}


def test_tile_table_json_round_trip(tmp_path, monkeypatch):
    p = tmp_path / "tiles_sm90.json"
    p.write_text(json.dumps(_table_doc()))
    monkeypatch.delitem(tw.TILE_TABLE, "sm90", raising=False)
    monkeypatch.setattr(tw, "PLANAR_TABLE", dict(tw.PLANAR_TABLE))  # load_tile_table replaces sm90's planar rows too
    assert tw.load_tile_table("sm90", p)
    rows = tw.TILE_TABLE.pop("sm90")
    assert rows[0] == (4, TileConfig(4, 128, 64, split_k=0, use_dot=False, packed_load=True, num_warps=4,
                                     num_stages=3))
    assert rows[-1] == (None, TileConfig(64, 128, 64))
    monkeypatch.setenv(tw.TILES_ENV, str(p))
    assert tw.load_tile_table("sm90") and tw.TILE_TABLE.pop("sm90") == rows
    monkeypatch.setenv(tw.TILES_ENV, str(tmp_path / "missing.json"))
    assert not tw.load_tile_table("sm90")


@pytest.mark.parametrize("rows,field", [
    ([{"max_m": None, "block_m": 48, "block_n": 64, "block_k": 64}], "block_m"),
    ([{"max_m": None, "block_m": 8, "block_n": 64, "block_k": 64}], "block_m"),  # dot needs 16 rows
    ([{"max_m": 4, "block_m": 16, "block_n": 64, "block_k": 64}], "catch-all"),
    ([{"max_m": None, "block_m": 16, "block_n": 64, "block_k": 64, "blok_n": 1}], "keys"),
    ([{"max_m": None, "block_m": 16, "block_n": 64, "block_k": 64, "split_k": -1}], "split_k"),
])
def test_tile_table_json_bad_rows_named(rows, field):
    with pytest.raises(InvalidInput, match=field):
        tw.tile_rows_from_json(_table_doc(rows=rows))


def test_tile_table_of_another_arch_refused(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_table_doc(arch="sm80")))
    with pytest.raises(InvalidInput, match="arch"):
        tw.load_tile_table("sm90", p)


def _fake_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(tw, "_tried_arch", set())
    monkeypatch.setattr(tw, "_arch_by_index", {})
    monkeypatch.setattr(tw, "TILE_TABLE", {k: v for k, v in tw.TILE_TABLE.items() if k != "sm90"})
    monkeypatch.setattr(tw, "PLANAR_TABLE", {k: v for k, v in tw.PLANAR_TABLE.items() if k != "sm90"})


def test_gpu_kind_uses_a_measured_table_and_warns_on_a_bad_one(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_table_doc()))
    bad.write_text(json.dumps(_table_doc(rows=[{"max_m": 4, "block_m": 16, "block_n": 64, "block_k": 64}])))
    _fake_sm90(monkeypatch)
    monkeypatch.setenv(tw.TILES_ENV, str(good))
    assert tw.gpu_tile_kind(torch.device("cuda")) == "sm90"
    assert tw.table_tiles(2, "sm90").use_dot is False
    _fake_sm90(monkeypatch)
    monkeypatch.setenv(tw.TILES_ENV, str(bad))
    with pytest.warns(UserWarning, match="catch-all"):
        assert tw.gpu_tile_kind(torch.device("cuda")) == "gpu"
    _fake_sm90(monkeypatch)
    monkeypatch.setenv(tw.TILES_ENV, str(tmp_path / "none.json"))
    assert tw.gpu_tile_kind(torch.device("cuda")) == "gpu"


def test_ci_profile_reaches_every_gpu_path_in_the_interpreter_table():
    """CI runs only the interpreter table: every path the GPU table uses (GEMV, magic swap_ab dot,
    dequant_mm) must be picked for some M the CI profile draws, or CI stops testing it."""
    from conformance.cases.profiles import get_profile

    m_max = get_profile("ci").m_max

    def path(cfg):
        return "dequant_mm" if cfg.dequant_mm else "gemv" if not cfg.use_dot else "dot"

    measured = tw.tile_rows_from_json(json.loads((tw.TILES_DIR / "tiles_sm90.json").read_text()), "tiles_sm90")
    gpu_paths = {(path(c), c.magic, c.swap_ab) for _, c in tw.TILE_TABLE["gpu"] + measured}
    ci_paths = {(path(c), c.magic, c.swap_ab) for c in (tw.table_tiles(m, "interpreter") for m in range(1, m_max + 1))}
    assert gpu_paths <= ci_paths, sorted(gpu_paths - ci_paths)


def test_the_table_tests_leave_the_tables_as_they_were(tmp_path):
    """Loading a table file replaces an arch's main and planar rows; the tests above must undo both, or every later
    sm90 launch description in the same process (the plan's, the compile lane's) reads their stand-in rows."""
    before = ({k: list(v) for k, v in tw.TILE_TABLE.items()}, {k: list(v) for k, v in tw.PLANAR_TABLE.items()})
    tests = (test_tile_table_json_round_trip, test_gpu_kind_uses_a_measured_table_and_warns_on_a_bad_one)
    for i, t in enumerate(tests):
        d = tmp_path / str(i)
        d.mkdir()
        with pytest.MonkeyPatch.context() as mp:
            t(d, mp)
    assert ({k: list(v) for k, v in tw.TILE_TABLE.items()}, {k: list(v) for k, v in tw.PLANAR_TABLE.items()}) == before
