"""triton_w4a16's planar decode path: bit-exact on exact-tier cases in the interpreter (fp16/bf16, biased and
explicit zeros, groups 32/64/128/K, N tails, a zero-padded last K block, split-K), its PTX nibble conversion
emulated against the Triton-op twin the interpreter runs, the planar tile table and its routing, the operand
checks, and the registered kernel's load / apply / model on planar operands. On a GPU machine the same cases run
on the device (tests/unit/devices.py): there the path's inline-PTX conversion (NVIDIA) is judged bit-exact."""
from __future__ import annotations

import importlib
import json
from dataclasses import replace

import pytest
import torch

from conformance.core import registry
from references import codecs
from references.codecs import operands as ops
from references.errors import InvalidInput
from tests.unit.devices import DEV, gpu_only, on_dev, tile_kind
from tests.unit.test_kernels_w4a16 import TRITON_DTYPES, _assert_exact, _weight

registry.load_all()
tw = importlib.import_module("conformance_kernels.triton_w4a16")
TileConfig = tw.TileConfig


def _planar_args(w):
    """(b_q, scales, qzeros, zp_bias, b_planar, zeros_act) for canonical weight w, on DEV."""
    qz = None if w.zeros is None else ops.pack_zeros_gn(w.zeros)
    za = None if w.zeros is None else w.zeros.to(w.scales.dtype)
    b_q, s, qz, bp, za = on_dev(ops.triton_pack_qweight(w.q), w.scales, qz, ops.planar_pack_qweight(w.q), za)
    return b_q, s, qz, w.wtype.bias, bp, za


# id, M, N, K, group_size, wtype, tiles: several programs, tails and splits on purpose (the interpreter's cost
# is per program x K block)
CASES = [
    ("b8_g128_split2", 3, 64, 512, 128, "uint4b8", TileConfig(16, 64, 128, split_k=2, planar=True)),
    ("zeros_g32_Ntail_split3", 5, 72, 384, 32, "uint4", TileConfig(16, 64, 128, split_k=3, planar=True)),
    ("zeros_g64_Kpad", 17, 48, 192, 64, "uint4", TileConfig(32, 64, 128, split_k=2, planar=True)),
    ("b8_channelwise_K80", 2, 64, 80, -1, "uint4b8", TileConfig(16, 64, 128, planar=True)),
    ("b8_g256_bm64", 40, 64, 512, 256, "uint4b8", TileConfig(64, 32, 128, split_k=4, planar=True)),
]


@pytest.mark.parametrize("dtype", TRITON_DTYPES)
@pytest.mark.parametrize("name,M,N,K,gs,wtype,tiles", CASES, ids=[c[0] for c in CASES])
def test_planar_path_exact(name, M, N, K, gs, wtype, tiles, dtype):
    w, x, ref = _weight(M, N, K, gs, wtype, dtype, seed=M + N + K)
    b_q, s, qz, zb, bp, za = _planar_args(w)
    y = tw.launch_w4a16_gemm(x, b_q, s, qz, w.gs, zb, tiles, b_planar=bp, zeros_act=za)
    cfg = tw.last_launch_config()
    assert cfg["planar"] and cfg["split_k"] == min(tiles.split_k or 1, -(-K // 128))
    _assert_exact(y, ref)


@gpu_only("the inline-PTX conversion runs only on an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("zeros", [False, True], ids=["b8", "zeros"])
def test_planar_decode_on_the_device_is_exact_at_every_table_m(zeros, dtype):
    """The device's own planar rows (kernels/tiles, every M <= 64 a decode call takes), through the registered
    kernel: the planar path really ran, with the PTX conversion where the GPU is NVIDIA, bit-exact at each row's
    largest M and one past the row below (M tails), on a weight with several groups, an N tail and split K."""
    k = registry.get_kernel("triton_w4a16")
    rows = tw.PLANAR_TABLE.get(tile_kind(), ())
    assert rows, f"no planar rows for {tile_kind()}: the decode path never runs on this GPU"
    wtype = "uint4" if zeros else "uint4b8"
    ms = sorted({m for lo, (hi, _) in zip([0] + [r[0] for r in rows], rows) for m in (lo + 1, hi)})
    for M in ms:
        w, x, ref = _weight(M, 200, 512, 64, wtype, dtype, seed=M)
        y = k.apply(k.load(codecs.encode(w, "gptq_v2")), x)
        launched = k.launch_config()
        assert launched["planar"] and launched["M"] == M, launched
        _assert_exact(y, ref)
    assert tw.planar_uses_asm(DEV) == (torch.version.hip is None)


# --- the PTX conversion, emulated instruction by instruction on every int16 value -------------------------

def _emulate(asm: str, words: torch.Tensor, act: torch.dtype) -> torch.Tensor:
    """Run the asm block of one _plane_asm_* string on uint32 `words` (int64 tensor); returns the output words.
    Knows exactly the instructions those strings use: mov, shr, lop3, fma on f16x2 / bf16x2."""
    regs = {"$1": words}
    body = asm.strip().strip("{}")
    for stmt in filter(None, (s.strip() for s in body.split(";"))):
        op, _, rest = stmt.partition(" ")
        if op == ".reg":
            continue
        a = [t.strip() for t in rest.split(",")]

        def val(t):
            return regs[t] if t in regs else torch.full_like(words, int(t, 16))

        if op == "mov.b32":
            regs[a[0]] = val(a[1])
        elif op == "shr.b32":
            regs[a[0]] = val(a[1]) >> int(a[2])
        elif op == "lop3.b32":
            # the LUT's bit (a<<2 | b<<1 | c) is the output for input bits a, b, c: OR of its minterms
            x, y, z, lut = val(a[1]), val(a[2]), val(a[3]), int(a[4], 16)
            out = torch.zeros_like(words)
            for idx in range(8):
                if lut >> idx & 1:
                    out |= (x if idx & 4 else ~x) & (y if idx & 2 else ~y) & (z if idx & 1 else ~z)
            regs[a[0]] = out & 0xFFFFFFFF
        elif op in ("fma.rn.f16x2", "fma.rn.bf16x2"):
            halves = []
            for sh in (0, 16):
                def f(r, sh=sh):
                    h16 = ((val(r) >> sh) & 0xFFFF).to(torch.int32)
                    return torch.where(h16 >= 1 << 15, h16 - (1 << 16), h16).to(torch.int16).view(act).double()
                prod = (f(a[1]) * f(a[2]) + f(a[3])).to(act)  # exact here, so one rounding = the fused one
                halves.append(prod.view(torch.int16).to(torch.int64) & 0xFFFF)
            regs[a[0]] = halves[0] | halves[1] << 16
        else:
            raise AssertionError(f"unexpected PTX {op!r} in {asm!r}")
    return regs["$0"]


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("zb", [0, 8])
@pytest.mark.parametrize("j", range(4))
def test_ptx_conversion_equals_triton_ops(j, zb, bf16):
    """Every int16 value in the low half, another in the high half: both halves give q - zb, bit for bit what
    the Triton-op twin (_planar_plane with USE_ASM=False, the interpreter's path) computes."""
    act = torch.bfloat16 if bf16 else torch.float16
    asm = (tw._plane_asm_bf16 if bf16 else tw._plane_asm_f16)(j, zb)
    lo = torch.arange(1 << 16, dtype=torch.int64)
    hi = (lo * 40503 + 12345) & 0xFFFF  # a different value per lane in the high half
    out = _emulate(asm, lo | hi << 16, act)
    for half, src in ((out & 0xFFFF, lo), (out >> 16, hi)):
        want = (((src >> (4 * j)) & 0xF) - zb).to(act)  # the twin's value, exact
        got = torch.where(half >= 1 << 15, half - (1 << 16), half).to(torch.int16).view(act)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (j, zb, bf16)


def test_ptx_globals_are_the_generated_strings():
    """The kernel names one tl.constexpr global per (dtype, bias, plane); each must hold its generator's text."""
    for zb in (0, 8):
        for j in range(4):
            assert getattr(tw, f"_ASM_F16_{zb}_{j}").value == tw._plane_asm_f16(j, zb)
            assert getattr(tw, f"_ASM_BF16_{zb}_{j}").value == tw._plane_asm_bf16(j, zb)


# --- tables, tiles, operand checks ---------------------------------------------------------------------------

def test_interpreter_routes_decode_m_through_the_planar_path():
    """CI runs the interpreter table only: every M the CI profile draws takes a planar row when the call passes
    b_planar (one with split-K), none without it, and every block_m of the sm90 planar rows is reached."""
    from conformance.cases.profiles import get_profile

    m_max = get_profile("ci").m_max
    planar = {m: tw.table_tiles(m, "interpreter", planar=True) for m in range(1, m_max + 1)}
    assert all(c.planar for c in planar.values())
    assert any(c.split_k > 1 for c in planar.values())
    assert not any(tw.table_tiles(m, "interpreter").planar for m in range(1, m_max + 1))
    sm90 = tw.planar_rows_from_json(json.loads((tw.TILES_DIR / "tiles_sm90.json").read_text()), "tiles_sm90")
    assert sm90 and max(m for m, _ in sm90) == 64
    reached = {tw.fit_tiles(c, m, 64, 256, 128).block_m for m, c in planar.items()}
    assert {c.block_m for _, c in sm90} <= reached


def _doc(table=None, planar=None):
    doc = {"arch": "sm90", "table": table or [{"max_m": None, "block_m": 64, "block_n": 128, "block_k": 64}]}
    if planar is not None:
        doc["planar"] = planar
    return doc


_PROW = {"max_m": 16, "block_m": 16, "block_n": 128, "block_k": 128, "planar": True, "waves": 4}


def test_planar_rows_json_and_routing(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_doc(planar=[{**_PROW, "max_m": 64, "block_m": 64, "waves": 1}, _PROW])))
    monkeypatch.setattr(tw, "TILE_TABLE", dict(tw.TILE_TABLE))
    monkeypatch.setattr(tw, "PLANAR_TABLE", dict(tw.PLANAR_TABLE))
    assert tw.load_tile_table("sm90", p)
    assert [m for m, _ in tw.PLANAR_TABLE["sm90"]] == [16, 64]  # sorted
    assert tw.table_tiles(16, "sm90", planar=True).block_m == 16
    assert tw.table_tiles(17, "sm90", planar=True).waves == 1
    assert not tw.table_tiles(65, "sm90", planar=True).planar  # above the planar rows: the main table
    assert not tw.table_tiles(1, "sm90").planar  # b_q only: the main table
    assert tw.table_tiles(1, "gpu", planar=True) == tw.table_tiles(1, "gpu")  # no planar rows for "gpu"


@pytest.mark.parametrize("doc,field", [
    (_doc(table=[{**_PROW, "max_m": None}]), "planar"),  # a planar row in the main table
    (_doc(planar=[{**_PROW, "planar": False}]), "planar"),  # a b_q row in the planar list
    (_doc(planar=[{**_PROW, "max_m": None}]), "max_m"),  # planar rows have no catch-all
    (_doc(planar=[{**_PROW, "block_k": 64}]), "block_k"),
    (_doc(planar=[{**_PROW, "block_m": 8}]), "block_m"),
    (_doc(planar=[{**_PROW, "waves": 0}]), "waves"),
    (_doc(planar={"max_m": 16}), "planar"),
])
def test_planar_rows_refused_name_the_field(doc, field):
    with pytest.raises(InvalidInput, match=field):
        tw.tile_rows_from_json(doc)
        tw.planar_rows_from_json(doc)


def test_fit_planar_splits_evenly_by_waves():
    # 14336x4096 at M=1: 112 n-tiles of 128, 32 K blocks; waves 4 on 132 SMs wants 5 splits: 7,7,7,7,4 blocks
    cfg = TileConfig(16, 128, 128, split_k=0, planar=True, waves=4)
    assert tw.fit_tiles(cfg, 1, 14336, 4096, 128, 132).split_k == 5
    # 4096x14336: 32 n-tiles, 112 K blocks; 17 wanted -> 7 blocks a split -> 16 splits, none empty
    assert tw.fit_tiles(cfg, 1, 4096, 14336, 128, 132).split_k == 16
    assert tw.fit_tiles(replace(cfg, split_k=3), 1, 64, 96, 32, 0).split_k == 1  # one K block
    # no SM count (CPU): one SM's worth, 4 programs for waves 4 -> both K blocks split; block_n shrinks to N
    assert tw.fit_tiles(cfg, 1, 64, 256, 128, 0) == replace(cfg, block_n=64, split_k=2)


def test_planes_per_group():
    assert [tw.planes_per_group(1024, g) for g in (32, 64, 128, 256, 1024)] == [1, 2, 4, 4, 4]
    assert tw.planes_per_group(80, 80) == 4  # one group (channelwise)
    with pytest.raises(InvalidInput, match="group_size"):
        tw.planes_per_group(96, 48)


def test_planar_tile_needs_its_operands():
    w, x, _ = _weight(2, 64, 256, 64, "uint4", torch.float16)
    b_q, s, qz, zb, bp, za = _planar_args(w)
    tiles = TileConfig(16, 64, 128, planar=True)
    with pytest.raises(InvalidInput, match="b_planar"):
        tw.launch_w4a16_gemm(x, b_q, s, qz, 64, zb, tiles)
    with pytest.raises(InvalidInput, match="b_planar"):
        tw.launch_w4a16_gemm(x, b_q, s, qz, 64, zb, tiles, b_planar=bp[:, :32], zeros_act=za)
    with pytest.raises(InvalidInput, match="zeros_act"):
        tw.launch_w4a16_gemm(x, b_q, s, qz, 64, zb, tiles, b_planar=bp)


# --- the registered kernel: load, apply, model ---------------------------------------------------------------

def test_kernel_loads_planar_operands_and_decode_m_runs_them():
    k = registry.get_kernel("triton_w4a16")
    w, x, ref = _weight(3, 64, 256, 128, "uint4", torch.float16, seed=7)
    o = k.load(codecs.encode(w, "gptq_v2"))
    assert torch.equal(ops.planar_unpack_qweight(o.b_planar, 256), w.q)
    assert torch.equal(o.zeros_act, w.zeros.to(torch.float16))
    y = k.apply(o, x)
    assert k.launch_config()["planar"] == bool(tw.PLANAR_TABLE.get(tile_kind()))  # a table with planar rows
    _assert_exact(y, ref)
    _assert_exact(k.model(o, x), ref)


def test_model_refuses_planar_operands_that_disagree_with_b_q():
    k = registry.get_kernel("triton_w4a16")
    w, x, _ = _weight(2, 64, 256, 128, "uint4", torch.float16, seed=3)
    o = k.load(codecs.encode(w, "gptq_v2"))
    o.b_planar = o.b_planar.clone()
    o.b_planar[0, 5, 2] ^= 0x10  # one nibble of one column
    with pytest.raises(InvalidInput, match="b_planar"):
        k.model(o, x)
    o = k.load(codecs.encode(w, "gptq_v2"))
    o.zeros_act = o.zeros_act + 1
    with pytest.raises(InvalidInput, match="zeros_act"):
        k.model(o, x)
