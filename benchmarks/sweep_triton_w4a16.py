"""Tile sweep for triton_w4a16 on this machine's GPU: every candidate config is checked bit for bit on
exact-tier data (any mismatch is a bug, not rounding), the valid ones timed under CUDA-graph replay,
and the per-M-bucket winners written as the kernel's measured tile table.

Usage (GPU, repo root): PYTHONPATH=. python benchmarks/sweep_triton_w4a16.py --out DIR [--budget-s 420]
Writes DIR/tiles_<arch>.json (the table the kernel loads: copy it to kernels/tiles/) and
DIR/sweep_<arch>.json (every config's result, rewritten after each M so a crash keeps what was done).
`--dry-run` checks the candidate lists and exact-data construction on a CPU without launching.

Pruning (to fit ~6-8 minutes, most of it Triton compiles, one per distinct constexpr set):
- candidates (incl. `magic` dequant, and `dequant_mm` for M >= 32) are hand-listed per M bucket (decode
  M<=16, mid 32..128, prefill >=256), ~6-12 each, not a
  full product: BLOCK_M is set by the bucket (16 for tl.dot at decode, 32-128 above), BLOCK_K in {64, 128}
  (the group is 128: larger cannot be used), split-K only at decode/mid (0 = auto: enough programs for
  2 waves of SMs; 1 = none), num_stages 2-4 and num_warps 4/8 only where the tile size calls for them;
- the dot-free GEMV path only for M <= 4, and only tiles whose [BLOCK_M, BLOCK_K, BLOCK_N] product stays
  <= 64 fp32 registers per thread (more spills);
- one weight type (uint4b8, group 128: the common GPTQ case) and fp16; uint4 adds one zero load per K tile;
- the current default table entry is always a candidate, so the sweep can only keep or improve it;
- decode buckets run first: if the time budget runs out, the prefill rows keep the defaults.
Choice per M: the config valid on every shape with the lowest mean of (time / best time on that shape).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.core.tree import import_tree_package  # noqa: E402

import_tree_package("conformance_bench")
from conformance_bench import bench  # noqa: E402

from conformance.checks.harness import nan_filled_allocations  # noqa: E402
from conformance.core import registry  # noqa: E402
from references.codecs import operands as codec_ops  # noqa: E402

registry.load_all()
tw = importlib.import_module("conformance_kernels.triton_w4a16")
T = tw.TileConfig

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]  # (N, K)
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)
GROUP, ZP_BIAS = 128, 8

P, S, MG, DM = True, True, True, True  # packed_load, swap_ab, magic, dequant_mm (TileConfig fields 7, 9, 10, 11)
DECODE = [  # dot paths: the last measured winner without magic, then magic-dequant swap_ab variants
    T(16, 128, 128, 0, 4, 3, P, True, S),
    T(16, 128, 128, 0, 4, 3, P, True, S, MG), T(16, 64, 128, 0, 4, 3, P, True, S, MG),
    T(16, 128, 64, 0, 4, 4, P, True, S, MG), T(16, 256, 64, 0, 8, 3, P, True, S, MG),
    T(16, 64, 64, 0, 4, 4, P, True, S, MG), T(16, 128, 128, 0, 8, 3, P, True, S, MG),
]
GEMV = [  # use_dot=False, M <= 4 only; BLOCK_M is fitted to next_pow2(M); one non-magic reference
    T(4, 256, 64, 0, 8, 3, P, False), T(4, 256, 64, 0, 8, 3, P, False, False, MG),
    T(4, 128, 64, 0, 4, 3, P, False, False, MG), T(4, 128, 128, 0, 8, 3, P, False, False, MG),
    T(4, 64, 128, 0, 4, 3, P, False, False, MG), T(4, 256, 32, 0, 4, 3, P, False, False, MG),
    T(4, 512, 32, 0, 8, 3, P, False, False, MG), T(4, 64, 64, 0, 2, 4, P, False, False, MG),
    T(4, 128, 32, 0, 4, 4, P, False, False, MG), T(4, 64, 32, 0, 2, 4, P, False, False, MG),
]
DEQUANT_MM = [  # dequant pass (BLOCK_K x BLOCK_N tiles) + cuBLAS
    T(1, 128, 64, 1, 4, 1, P, True, False, MG, DM), T(1, 256, 64, 1, 8, 1, P, True, False, MG, DM),
    T(1, 256, 32, 1, 4, 1, P, True, False, MG, DM),
]
MID = [
    T(64, 64, 128, 0, 4, 4, P, True, S), T(64, 64, 128, 0, 4, 4, P, True, S, MG),
    T(32, 128, 64, 0, 4, 3, P, True, S, MG), T(64, 128, 64, 1, 4, 3, P, True, S, MG),
    T(64, 128, 64, 1, 8, 4, P, True, S, MG), T(128, 128, 64, 1, 8, 3, P, True, S, MG),
    *DEQUANT_MM,
]
PREFILL = [
    T(128, 128, 64, 1, 8, 3, P, True, S), T(128, 128, 64, 1, 8, 3, P, True, S, MG),
    T(128, 256, 64, 1, 8, 3, P, True, S, MG), T(128, 64, 64, 1, 4, 4, P, True, S, MG),
    T(128, 128, 128, 1, 8, 3, P, True, S, MG), T(128, 128, 64, 1, 8, 3, P, True, False, MG),
    T(128, 256, 64, 1, 8, 4, P, True, False, MG),
    *DEQUANT_MM,
]
GEMV_MAX_REGS = 64


def candidates(M: int, measured_kind: str | None = None) -> list:
    """The pruned candidate list for M, the built-in default entry first (and the entry of an already
    measured table for this arch, so a re-sweep can only keep or improve on either)."""
    default = tw.table_tiles(M, "gpu")
    extra = [tw.table_tiles(M, measured_kind)] if measured_kind and measured_kind != "gpu" else []
    if M <= 16:
        cands = list(DECODE)
        if M <= 4:
            for c in GEMV:
                bm = min(c.block_m, 1 << (M - 1).bit_length())
                if bm * c.block_k * c.block_n / (32 * c.num_warps) <= GEMV_MAX_REGS:
                    cands.append(c)
    elif M <= 128:
        cands = list(MID)
    else:
        cands = list(PREFILL)
    out = [default]
    for c in extra + cands:
        if c not in out:
            out.append(c)
    return out


def exact_data(M: int, N: int, K: int, device, seed: int = 0):
    """Exact-tier data at any K (the suite's generator caps K): x in {-1, 0, 1}, q - 8 in [-8, 7], scales
    2^e with e in [-7, -4]. Every product is a multiple of 2^-7 and |partial sums| <= K/2, so all sums are
    exact in fp32 for K <= 2^17 and y rounds once into fp16 (|y| <= 65504): any order gives the same bits."""
    assert K <= 1 << 17 and K // 2 <= 65504
    g = torch.Generator().manual_seed(seed * 7919 + M)
    x = torch.randint(-1, 2, (M, K), generator=g).to(torch.float16)
    return x.to(device)


def exact_weight(N: int, K: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed * 104729 + N * 3 + K)
    q = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
    e = torch.randint(-7, -3, (K // GROUP, N), generator=g)
    scales = torch.pow(2.0, e.double()).to(torch.float16)
    w64 = (q.double() - ZP_BIAS) * scales.double().repeat_interleave(GROUP, dim=0)
    return codec_ops.triton_pack_qweight(q), scales, w64


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def _fatal(msg: str) -> bool:
    # a sticky CUDA error poisons the context: every later launch would fail too
    return any(s in msg for s in ("illegal memory access", "unspecified launch failure", "CUDA error: an illegal",
                                  "device-side assert"))


def choose(results: list[dict], ms) -> dict:
    """Per M: the config valid on every shape with the lowest mean time / best-on-that-shape."""
    chosen = {}
    for M in ms:
        rows = [r for r in results if r["M"] == M and r["status"] == "ok"]
        shapes = {(r["N"], r["K"]) for r in rows}
        if not shapes:
            continue
        best = {s: min(r["us"] for r in rows if (r["N"], r["K"]) == s) for s in shapes}
        by_cfg: dict[str, list] = {}
        for r in rows:
            by_cfg.setdefault(json.dumps(r["config"], sort_keys=True), []).append(r["us"] / best[(r["N"], r["K"])])
        full = {k: sum(v) / len(v) for k, v in by_cfg.items() if len(v) == len(shapes)}
        if full:
            k = min(full, key=full.get)
            chosen[M] = {"config": json.loads(k), "mean_slowdown_vs_best": round(full[k], 4)}
    return chosen


def table_rows(chosen: dict, ms) -> list[dict]:
    """Rows for the kernel: max_m = each swept M (merged when equal), the largest M as the catch-all."""
    rows = []
    done = [M for M in ms if M in chosen]
    for i, M in enumerate(done):
        cfg = chosen[M]["config"]
        last = i == len(done) - 1
        row = {"max_m": None if last else M, **cfg}
        if rows and {k: v for k, v in rows[-1].items() if k != "max_m"} == cfg:
            rows[-1]["max_m"] = row["max_m"]
        else:
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop timing new configs after this (default 420)")
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--merge", default=None, metavar="SWEEP_JSON",
                    help="a previous sweep_<arch>.json whose results for other M join the choice (split sweeps)")
    ap.add_argument("--dry-run", action="store_true",
                    help="list candidates and check one launch on small exact data (on the kernels' device); no timing")
    a = ap.parse_args(argv)
    ms = tuple(int(m) for m in a.ms.split(","))
    order = sorted(ms, key=lambda m: (0 if m <= 16 else 1 if m <= 128 else 2, m))  # decode first
    if a.dry_run:
        for M in ms:
            print(f"M={M}: {len(candidates(M))} candidates", flush=True)
        from conformance.core.runtime import kernel_device

        dev = kernel_device()  # the CPU under the interpreter, else the GPU the kernels compile for
        b_q, s, w64 = exact_weight(64, 256)
        x = exact_data(3, 64, 256, dev)
        y = tw.launch_w4a16_gemm(x, b_q.to(dev), s.to(dev), None, GROUP, ZP_BIAS, candidates(1)[1])
        assert torch.equal(y.cpu(), (x.cpu().double() @ w64).to(torch.float16)), f"exact data check failed on {dev}"
        print("dry run ok", flush=True)
        return 0
    if not torch.cuda.is_available():
        print("sweep: no GPU here (torch.cuda.is_available() is False); nothing measured", file=sys.stderr)
        return bench.EXIT_NO_GPU
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    arch, dev = _arch(), "cuda"
    props = torch.cuda.get_device_properties(0)
    sm = props.multi_processor_count
    l2 = int(getattr(props, "L2_cache_size", 64 << 20))
    timer = bench.CudaTimer(replays=a.replays)
    meta = {"arch": arch, "device": props.name, "sm_count": sm, "torch": torch.__version__,
            "triton": __import__("triton").__version__, "shapes": SHAPES, "ms": list(ms), "group_size": GROUP,
            "weight_type": "uint4b8", "dtype": "float16", "pruning": __doc__.split("Pruning")[1].strip(),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    measured_kind = tw.gpu_tile_kind(torch.device(dev))  # loads kernels/tiles/tiles_<arch>.json if any
    meta["previous_table"] = measured_kind != "gpu"
    t_start = time.perf_counter()
    results: list[dict] = []
    if a.merge:  # results of an earlier call for the M values this call does not sweep
        prev = json.loads(Path(a.merge).read_text())
        results = [r for r in prev.get("results", []) if r["M"] not in ms]
        ms = tuple(sorted(set(ms) | {r["M"] for r in results}))
        print(f"merged {len(results)} results from {a.merge}", flush=True)
    dense: list[dict] = []
    weights = {}
    for N, K in SHAPES:
        b_q, s, w64 = exact_weight(N, K)
        n_sets = bench.rotation_sets(b_q.numel() * 4 + s.numel() * 2, l2)
        sets = [(b_q.to(dev), s.to(dev))]
        sets += [(sets[0][0].clone(), sets[0][1].clone()) for _ in range(n_sets - 1)]
        w16 = w64.to(torch.float16).to(dev)
        weights[(N, K)] = (sets, w64.to(dev), w16)
        print(f"shape {N}x{K}: {n_sets} rotating weight sets", flush=True)
    stopped = None
    for M in order:
        if stopped:
            break
        for (N, K), (sets, w64d, w16) in weights.items():
            x = exact_data(M, N, K, dev)
            xs = [x] + [x.clone() for _ in range(len(sets) - 1)]
            y_ref = (x.double() @ w64d).to(torch.float16)
            try:
                dt = timer.graph([lambda xx=xx, w=w16: torch.matmul(xx, w) for xx in xs[:2]])
                dense.append({"M": M, "N": N, "K": K, "us": round(dt.median_us, 3)})
            except Exception as ex:  # noqa: BLE001
                dense.append({"M": M, "N": N, "K": K, "error": str(ex)[:200]})
            for cfg in candidates(M, measured_kind):
                if time.perf_counter() - t_start > a.budget_s:
                    stopped = f"time budget {a.budget_s} s reached at M={M}"
                    break
                fitted = tw.fit_tiles(cfg, M, N, K, GROUP, sm)
                r = {"M": M, "N": N, "K": K, "config": asdict(cfg), "fitted": asdict(fitted)}
                t0 = time.perf_counter()
                try:
                    with nan_filled_allocations():  # an unwritten output element shows up as NaN
                        y = tw.launch_w4a16_gemm(x, sets[0][0], sets[0][1], None, GROUP, ZP_BIAS, cfg)
                    torch.cuda.synchronize()
                    r["first_call_s"] = round(time.perf_counter() - t0, 2)
                    if not torch.equal(y, y_ref):
                        bad = int((y != y_ref).sum())
                        r.update(status="wrong", detail=f"{bad}/{y.numel()} elements differ from the exact reference")
                    else:
                        calls = [lambda o=o, xx=xx, c=cfg: tw.launch_w4a16_gemm(xx, o[0], o[1], None, GROUP, ZP_BIAS, c)
                                 for o, xx in zip(sets, xs)]
                        t = timer.graph(calls)
                        r.update(status="ok", us=round(t.median_us, 3), spread_us=[round(t.min_us, 3),
                                                                                   round(t.max_us, 3)])
                except Exception as ex:  # noqa: BLE001 - a config that fails to compile or launch is a result
                    msg = " ".join(str(ex).split())[:300]
                    r.update(status="error", detail=f"{type(ex).__name__}: {msg}")
                    if _fatal(msg):
                        stopped = f"fatal CUDA error at M={M} {N}x{K} {cfg}: {msg}"
                results.append(r)
                print(f"M={M:5d} {N:5d}x{K:<5d} {r['status']:5s} {r.get('us', '-'):>9} us  "
                      f"{json.dumps(r['fitted'], separators=(',', ':'))} {r.get('detail', '')[:120]}", flush=True)
                if stopped:
                    break
            if stopped:
                break
        chosen = choose(results, ms)
        doc = {**meta, "stopped": stopped, "elapsed_s": round(time.perf_counter() - t_start, 1), "chosen": chosen,
               "dense_fp16": dense, "results": results}
        (out / f"sweep_{arch}.json").write_text(json.dumps(doc, indent=1) + "\n")
    chosen = choose(results, ms)
    rows = table_rows(chosen, [m for m in sorted(ms)])
    defaults_kept = [M for M in ms if M not in chosen]
    if defaults_kept or not rows:
        # buckets the sweep did not reach keep the built-in defaults
        for M in defaults_kept:
            chosen[M] = {"config": asdict(tw.table_tiles(M, "gpu")), "mean_slowdown_vs_best": None, "default": True}
        rows = table_rows(chosen, sorted(ms))
    table = {"arch": arch, "device": props.name, "torch": torch.__version__, "triton": meta["triton"],
             "time_utc": meta["time_utc"], "source": "benchmarks/sweep_triton_w4a16.py", "table": rows,
             "defaults_kept_for_m": defaults_kept, "stopped": stopped}
    tw.tile_rows_from_json(table, "sweep output")  # the kernel must accept what we write
    (out / f"tiles_{arch}.json").write_text(json.dumps(table, indent=1) + "\n")
    n_ok = sum(r["status"] == "ok" for r in results)
    print(f"sweep done in {time.perf_counter() - t_start:.0f} s: {len(results)} configs, {n_ok} ok, "
          f"{sum(r['status'] == 'wrong' for r in results)} wrong, {sum(r['status'] == 'error' for r in results)} "
          f"errors; stopped: {stopped}", flush=True)
    for row in rows:
        print("table:", json.dumps(row), flush=True)
    return 1 if any(r["status"] == "wrong" for r in results) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
