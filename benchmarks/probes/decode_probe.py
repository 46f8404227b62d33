"""Decode-path probe (M <= 64) for triton_w4a16 on a GPU: the planar path beside dense fp16, GemLite and the
table's other paths, each output checked bit for bit before anything is timed.

One command does one iteration. First exactness: planar vs the fp64 reference on exact data (both benchmark
shapes and odd ones: N tails, a zero-padded last K block, groups 32/64/K, explicit zeros, bf16, split-K), the
PTX nibble conversion vs the Triton-op one bit for bit, and 50 repeated calls of the table's path. Then
CUDA-graph timings with L2-cycled operands (benchmarks/bench.py: CudaTimer, rotation_sets), either
  sweep (default)  planar block_n / num_warps / num_stages variants at the split counts that give about 1-8
                   programs per SM, the Triton-op conversion on one tile, and the tree's table; or
  --confirm        the tree's tables as a caller gets them (tiles=None, with and without b_planar) and the planar
                   row at other waves / num_stages beside it,
with dense F.linear, GemLite (its bundled H100 configs by default: the H200 has the same SM, GemLite does not
load them there itself) and the main table on b_q alone as baselines. Results go to OUT.json incrementally (a
run cut short keeps what it measured). The curated record is benchmarks/results/h200/decode_probe.json.

Usage (GPU, repo root; GemLite's wheel unpacked into /tmp/site):
    CONFORMANCE_COMMIT=$(git rev-parse HEAD) CONFORMANCE_TREE_CLEAN=0 \\
    PYTHONPATH=/tmp/site:. python benchmarks/probes/decode_probe.py OUT.json [--confirm] [--ms 1,16,64] [--budget-s 420]
    python benchmarks/probes/decode_probe.py --smoke    # CPU: the exactness part on tiny shapes in the interpreter
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from dataclasses import replace

import torch

from conformance.core.tree import import_tree_package

SHAPES = ((14336, 4096), (4096, 14336))  # (N, K)
DECODE_MS = (1, 2, 4, 8, 16, 32, 64)
EXTRA_MS = ()
GROUP, BIAS = 128, 8
VARIANTS = ((128, 4, 4), (128, 4, 5), (128, 4, 6), (128, 4, 3), (64, 4, 6), (256, 8, 5))  # block_n, warps, stages
EXTRA_VARIANTS = ((128, 4, 4), (128, 8, 3))  # at M > 64 (block_m 64 and 128)
PROGRAMS_PER_SM = (1, 2, 3, 4, 5, 6, 8)
CONFIRM_WAVES = (1, 2, 3, 4, 6)  # --confirm: the table's planar row at these waves too
CONFIRM_STAGES = (2, 4)  # and at these num_stages
TIMER_REPLAYS = 30


def _modules():
    import_tree_package("conformance_bench")
    from conformance.core import registry

    registry.load_all()
    tw = importlib.import_module("conformance_kernels.triton_w4a16")
    from references.codecs import operands as ops

    return tw, ops


def exact_problem(M: int, N: int, K: int, gs: int, dtype, zeros: bool, seed: int):
    """Exact-tier data: q, z uniform, s = 2^e (e in [-7, -4]), x integers in [-4, 4]; y the fp64 product cast once."""
    g = torch.Generator().manual_seed(seed)
    G = K // gs
    q = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
    z = torch.randint(0, 16, (G, N), generator=g, dtype=torch.int32) if zeros else None
    s = torch.pow(2.0, torch.randint(-7, -3, (G, N), generator=g).double()).to(dtype)
    x = torch.randint(-4, 5, (M, K), generator=g).to(dtype)
    zz = (z if zeros else torch.full((G, N), BIAS, dtype=torch.int32)).double().repeat_interleave(gs, 0)
    w64 = (q.double() - zz) * s.double().repeat_interleave(gs, 0)
    return q, z, s, x, (x.double() @ w64).to(dtype)


def operands(ops, q, z, s, dev):
    """(b_q, qzeros, b_planar, zeros_act, zp_bias) on dev."""
    b_q = ops.triton_pack_qweight(q).to(dev)
    bp = ops.planar_pack_qweight(q).to(dev)
    if z is None:
        return b_q, None, bp, None, BIAS
    return b_q, ops.pack_zeros_gn(z).to(dev), bp, z.to(s.dtype).to(dev), 0


def exactness(tw, dev, shapes, quick: bool) -> list[dict]:
    """Planar outputs vs the fp64 reference (bits), and the PTX conversion vs the Triton-op one (bits)."""
    rows = []
    cases = [(N, K, GROUP, torch.float16, False, M) for N, K in shapes for M in (1, 64)]
    cases += [(200, 384, 64, torch.float16, True, 5), (72, 96, 32, torch.bfloat16, True, 3),
              (136, 256, 128, torch.bfloat16, False, 33), (64, 80, 80, torch.float16, True, 17),
              (4096, 4096, 128, torch.bfloat16, False, 8), (4096, 4096, 128, torch.float16, True, 64)]
    if quick:
        cases = cases[:2] + cases[-6:-2]
    _, ops = _modules()
    for i, (N, K, gs, dt, zeros, M) in enumerate(cases):
        q, z, s, x, y_ref = exact_problem(M, N, K, gs, dt, zeros, seed=1000 + i)
        b_q, qz, bp, za, zb = operands(ops, q, z, s.to(dev), dev)
        x, s, y_ref = x.to(dev), s.to(dev), y_ref.to(dev)
        bm = 16 if M <= 16 else 32 if M <= 32 else 64
        for split in (1, 3):
            cfg = tw.TileConfig(bm, 128, 128, split_k=split, planar=True)
            r = {"check": "planar_vs_fp64", "N": N, "K": K, "M": M, "group": gs, "dtype": str(dt).split(".")[-1],
                 "zeros": zeros, "split_k": split}
            try:
                y = tw.launch_w4a16_gemm(x, b_q, s, qz, gs, zb, tiles=cfg, b_planar=bp, zeros_act=za)
                r["ok"] = bool(torch.equal(y, y_ref))
                if not r["ok"]:
                    r["differ"] = int((y != y_ref).sum())
                if dev != "cpu":
                    tw.PLANAR_ASM = False
                    try:
                        y2 = tw.launch_w4a16_gemm(x, b_q, s, qz, gs, zb, tiles=cfg, b_planar=bp, zeros_act=za)
                    finally:
                        tw.PLANAR_ASM = True
                    r["asm_equals_triton_ops"] = bool(torch.equal(y, y2))
            except Exception as ex:  # noqa: BLE001 - a failure is a result here
                r["ok"] = False
                r["error"] = f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"
            rows.append(r)
            print(json.dumps(r), flush=True)
    if dev != "cpu":
        rows += repeats(tw, ops, dev)
    return rows


def repeats(tw, ops, dev, calls: int = 50) -> list[dict]:
    """The table's planar path called `calls` times on one random input: every output must equal the first."""
    rows = []
    for (N, K), M in (((14336, 4096), 1), ((4096, 14336), 16), ((4096, 14336), 64)):
        g = torch.Generator().manual_seed(N * 7 + M)
        q = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
        s = (torch.rand((K // GROUP, N), generator=g) * 0.01 + 0.001).half().to(dev)
        x = torch.randn((M, K), generator=g).half().to(dev)
        b_q, bp = ops.triton_pack_qweight(q).to(dev), ops.planar_pack_qweight(q).to(dev)
        first = tw.launch_w4a16_gemm(x, b_q, s, None, GROUP, BIAS, b_planar=bp)
        cfg = tw.last_launch_config()
        same = sum(bool(torch.equal(tw.launch_w4a16_gemm(x, b_q, s, None, GROUP, BIAS, b_planar=bp), first))
                   for _ in range(calls))
        r = {"check": "table_path_repeats", "N": N, "K": K, "M": M, "planar": cfg.get("planar"),
             "split_k": cfg.get("split_k"), "calls": calls, "identical": same, "ok": same == calls and cfg["planar"]}
        rows.append(r)
        print(json.dumps(r), flush=True)
    return rows


def _splits(M: int, N: int, K: int, bm: int, bn: int, sm: int) -> list[int]:
    """Split counts giving about PROGRAMS_PER_SM programs per SM, evened out as the launcher does (no empty split)."""
    programs = -(-M // bm) * -(-N // bn)
    k_blocks = -(-K // 128)
    out = set()
    for w in PROGRAMS_PER_SM:
        want = max(1, min(k_blocks, round(w * sm / programs)))
        out.add(-(-k_blocks // -(-k_blocks // want)))
    return sorted(out)


def _gemlite_modules(q, s, n_sets, dev, mode):
    """GemLite's A16Wn modules (one per rotation set), autotune `mode` (gemlite's own default is 'fast')."""
    import gemlite
    from gemlite.helper import A16Wn
    from gemlite.triton_kernels.config import set_autotune

    if mode == "h100":  # GemLite's own tuned configs for the H100 (same SM as the H200; not auto-loaded there)
        from gemlite.core import GemLiteLinearTriton

        path = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
        if not GemLiteLinearTriton.load_config(path):
            raise RuntimeError(f"gemlite could not load {path}")
        mode = "fast"  # shapes the file lacks are autotuned as gemlite does by default
    set_autotune(mode)
    K, N = q.shape
    wq = q.t().contiguous().to(torch.uint8).to(dev)
    sc = s.t().contiguous().to(dev)
    zz = torch.full_like(sc, BIAS)
    mods = [A16Wn(device=dev, dtype=torch.float16).from_weights(W_q=wq, scales=sc, zeros=zz, W_nbits=4,
                                                                 group_size=GROUP) for _ in range(n_sets)]
    return mods, getattr(gemlite, "__version__", "?")


def _timed(timer, rows, base: dict, name: str, calls, **extra) -> dict:
    try:
        t = timer.graph(calls)
        r = {**base, "variant": name, **extra, "us": round(t.median_us, 3), "min_us": round(t.min_us, 3),
             "max_us": round(t.max_us, 3)}
    except Exception as ex:  # noqa: BLE001 - a candidate that fails is a result
        r = {**base, "variant": name, **extra, "error": f"{type(ex).__name__}: {str(ex)[:300]}"}
    rows.append(r)
    return r


def _planar_calls(tw, x, sets, cfg):
    return [lambda o=o: tw.launch_w4a16_gemm(x, o[0], o[2], None, GROUP, BIAS, tiles=cfg, b_planar=o[1])
            for o in sets]


def _time_m(tw, timer, rows, N, K, M, sets, dsets, gl, sm, dev):
    """Every baseline and planar candidate at one (shape, M)."""
    x = torch.randint(-4, 5, (M, K), device=dev).to(torch.float16)
    base = {"shape": f"{N}x{K}", "M": M}
    _timed(timer, rows, base, "dense_fp16", [lambda w=w: torch.nn.functional.linear(x, w) for w in dsets])
    if gl is not None:
        _timed(timer, rows, base, "gemlite", [lambda m=m: m(x) for m in gl])
    cur = tw.fit_tiles(tw.table_tiles(M, tw.gpu_tile_kind(x.device)), M, N, K, GROUP, sm)
    _timed(timer, rows, base, "current_table",
           [lambda o=o: tw.launch_w4a16_gemm(x, o[0], o[2], None, GROUP, BIAS) for o in sets], config=repr(cur))
    b_q, bp, s = sets[0]
    bms = (16,) if M <= 16 else (32,) if M <= 32 else (64,) if M <= 64 else (64, 128)
    for bm in bms:
        ref = tw.launch_w4a16_gemm(x, b_q, s, None, GROUP, BIAS, b_planar=bp,
                                   tiles=tw.TileConfig(bm, 128, 128, split_k=1, planar=True))
        for bn, warps, stages in (VARIANTS if M <= 64 else EXTRA_VARIANTS):
            for split in _splits(M, N, K, bm, bn, sm):
                cfg = tw.TileConfig(bm, bn, 128, split_k=split, num_warps=warps, num_stages=stages, planar=True)
                assert tw.fit_tiles(cfg, M, N, K, GROUP, sm).split_k == split
                y = tw.launch_w4a16_gemm(x, b_q, s, None, GROUP, BIAS, tiles=cfg, b_planar=bp)
                _timed(timer, rows, base, "planar", _planar_calls(tw, x, sets, cfg), block_m=bm, block_n=bn,
                       num_warps=warps, num_stages=stages, split_k=split, matches_split1=bool(torch.equal(y, ref)))
    # the Triton-op nibble conversion (the interpreter's) on one tile: what the PTX saves
    cfg = tw.TileConfig(bms[0], 128, 128, split_k=0, num_warps=4, num_stages=3, planar=True, waves=4)
    tw.PLANAR_ASM = False
    try:
        _timed(timer, rows, base, "planar_triton_ops", _planar_calls(tw, x, sets, cfg), block_m=bms[0], block_n=128,
               num_warps=4, num_stages=3, split_k=tw.fit_tiles(cfg, M, N, K, GROUP, sm).split_k)
    finally:
        tw.PLANAR_ASM = True
    # the table as it stands in the tree (tiles=None): what the kernel does by default
    _timed(timer, rows, base, "table_planar_operands",
           [lambda o=o: tw.launch_w4a16_gemm(x, o[0], o[2], None, GROUP, BIAS, b_planar=o[1]) for o in sets],
           config=repr(tw.fit_tiles(tw.table_tiles(M, tw.gpu_tile_kind(x.device)), M, N, K, GROUP, sm)))


def _confirm_m(tw, timer, rows, N, K, M, sets, dsets, gl, sm, dev):
    """The tree's tables at one (shape, M): dense, GemLite, the main table on b_q alone, the planar table
    (tiles=None, b_planar given), and the planar row with other waves / stages beside it."""
    x = torch.randint(-4, 5, (M, K), device=dev).to(torch.float16)
    base = {"shape": f"{N}x{K}", "M": M}
    _timed(timer, rows, base, "dense_fp16", [lambda w=w: torch.nn.functional.linear(x, w) for w in dsets])
    if gl is not None:
        _timed(timer, rows, base, "gemlite", [lambda m=m: m(x) for m in gl])
    kind = tw.gpu_tile_kind(x.device)
    cur = tw.fit_tiles(tw.table_tiles(M, kind), M, N, K, GROUP, sm)
    _timed(timer, rows, base, "current_table",
           [lambda o=o: tw.launch_w4a16_gemm(x, o[0], o[2], None, GROUP, BIAS) for o in sets], config=repr(cur))
    row = tw.table_tiles(M, kind, planar=True)
    _timed(timer, rows, base, "table",
           [lambda o=o: tw.launch_w4a16_gemm(x, o[0], o[2], None, GROUP, BIAS, b_planar=o[1]) for o in sets],
           config=repr(tw.fit_tiles(row, M, N, K, GROUP, sm)))
    if not row.planar:
        return
    alts = [replace(row, waves=w) for w in CONFIRM_WAVES if w != row.waves]
    alts += [replace(row, num_stages=ns) for ns in CONFIRM_STAGES if ns != row.num_stages]
    fit = tw.fit_tiles(row, M, N, K, GROUP, sm)
    seen = {(fit.split_k, fit.num_stages)}
    for alt in alts:
        fit = tw.fit_tiles(alt, M, N, K, GROUP, sm)
        if (fit.split_k, fit.num_stages) in seen:
            continue
        seen.add((fit.split_k, fit.num_stages))
        _timed(timer, rows, base, "table_alt", _planar_calls(tw, x, sets, alt), waves=alt.waves,
               num_stages=alt.num_stages, split_k=fit.split_k, config=repr(fit))


def timings(tw, ops, bench, dev, out_path, doc, budget_s, gemlite_mode, ms, confirm=False):
    t0 = time.perf_counter()
    props = torch.cuda.get_device_properties(0)
    sm = props.multi_processor_count
    l2 = int(getattr(props, "L2_cache_size", 60 << 20))
    timer = bench.CudaTimer(replays=TIMER_REPLAYS)
    rows = doc["timings"]
    for N, K in SHAPES:
        q, _, s, _, _ = exact_problem(1, N, K, GROUP, torch.float16, False, seed=N + K)
        b_q, _, bp, _, _ = operands(ops, q, None, s, dev)
        s = s.to(dev)
        n_sets = bench.rotation_sets(bp.numel() * 4 + s.numel() * 2, l2)
        sets = [(b_q, bp, s)] + [(b_q.clone(), bp.clone(), s.clone()) for _ in range(n_sets - 1)]
        wd = torch.randn(N, K, device=dev, dtype=torch.float16)
        dsets = [wd] + [wd.clone() for _ in range(bench.rotation_sets(wd.numel() * 2, l2) - 1)]
        gl = None
        if gemlite_mode != "off":
            try:
                gl, ver = _gemlite_modules(q, s.cpu(), n_sets, dev, gemlite_mode)
                doc["gemlite"] = {"version": ver, "autotune": gemlite_mode}
            except Exception as ex:  # noqa: BLE001
                doc["gemlite"] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
        for M in ms:
            if time.perf_counter() - t0 > budget_s:
                rows.append({"shape": f"{N}x{K}", "M": M, "skipped": "time budget"})
                continue
            (_confirm_m if confirm else _time_m)(tw, timer, rows, N, K, M, sets, dsets, gl, sm, dev)
            doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
            _write(out_path, doc)
            _summary(rows, N, K, M)
        del sets, dsets, gl
        torch.cuda.empty_cache()


def _summary(rows, N, K, M):
    mine = [r for r in rows if r.get("shape") == f"{N}x{K}" and r.get("M") == M and "us" in r]
    by = {r["variant"]: r for r in mine if r["variant"] != "planar"}
    planar = sorted((r for r in mine if r["variant"] == "planar"), key=lambda r: r["us"])
    best = planar[0] if planar else None
    line = f"{N}x{K} M={M:4d} dense {by.get('dense_fp16', {}).get('us', '-'):>8} gemlite " \
           f"{by.get('gemlite', {}).get('us', '-'):>8} current {by.get('current_table', {}).get('us', '-'):>8}"
    if best:
        line += (f" planar {best['us']:8.2f} (bm{best['block_m']} bn{best['block_n']} w{best['num_warps']} "
                 f"s{best['num_stages']} sk{best['split_k']})")
    if "table" in by:
        alts = sorted((r for r in mine if r["variant"] == "table_alt"), key=lambda r: r["us"])
        line += f" table {by['table']['us']:8.2f}"
        if alts:
            line += f" best alt {alts[0]['us']:8.2f} (waves {alts[0]['waves']} stages {alts[0]['num_stages']})"
    print(line, flush=True)


def _write(path, doc):
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter: the exactness part on tiny shapes")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new M rows after this long")
    ap.add_argument("--gemlite", default="h100", choices=("h100", "fast", "default", "max", "off"),
                    help="GemLite's autotune mode (its own default is fast); h100: its bundled H100 configs, fast for "
                         "the rest")
    ap.add_argument("--ms", default=",".join(map(str, DECODE_MS + EXTRA_MS)), help="comma-separated M values")
    ap.add_argument("--confirm", action="store_true",
                    help="time the tree's tables (and the planar row at other waves / stages) instead of the sweep")
    args = ap.parse_args()
    if args.smoke:
        from conformance.core import runtime

        runtime.configure_triton()
        tw, _ = _modules()
        rows = exactness(tw, "cpu", [(64, 256)], quick=True)
        return 0 if all(r["ok"] for r in rows) else 1
    import_tree_package("conformance_bench")
    from conformance_bench import bench

    if not torch.cuda.is_available():
        print("decode_probe: no GPU here", file=sys.stderr)
        return bench.EXIT_NO_GPU
    import triton

    tw, ops = _modules()
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "commit": os.environ.get("CONFORMANCE_COMMIT"), "tree_clean": os.environ.get("CONFORMANCE_TREE_CLEAN"),
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "doc": __doc__,
           "method": {"timer": f"CUDA graph replay, median of {TIMER_REPLAYS} replays",
                      "l2": "operand sets cycled (benchmarks/bench.py rotation_sets)", "data": "exact-tier integers"},
           "exactness": [], "timings": []}
    doc["copy"] = bench.copy_bandwidth_gbps(nbytes=1 << 30, reps=10)
    doc["exactness"] = exactness(tw, "cuda", SHAPES, quick=False)
    _write(args.out, doc)
    doc["mode"] = "confirm" if args.confirm else "sweep"
    doc["planar_table"] = [[m, repr(c)] for m, c in tw.PLANAR_TABLE.get(tw.gpu_tile_kind(torch.device("cuda")), [])]
    timings(tw, ops, bench, "cuda", args.out, doc, args.budget_s, args.gemlite,
            tuple(int(m) for m in args.ms.split(",")), confirm=args.confirm)
    doc["complete"] = True
    _write(args.out, doc)
    bad = [r for r in doc["exactness"] if not r["ok"] or r.get("asm_equals_triton_ops") is False]
    print(f"exactness: {len(doc['exactness']) - len(bad)} ok, {len(bad)} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
