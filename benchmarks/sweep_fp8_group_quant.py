"""Tile sweep for fp8_group_quant_triton (group 128, bf16 in, e4m3fn) against torch.compile of the plain-torch
route, under CUDA-graph replay. Every tile's output is compared bit for bit with the default tile's (the
tile changes the work split, never the arithmetic); the default itself is checked by the bench and the suite.

Usage (GPU, repo root): PYTHONPATH=. python benchmarks/sweep_fp8_group_quant.py OUT.json [--hidden 7168]
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from dataclasses import asdict

import torch

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import bench  # noqa: E402

from conformance.core import registry  # noqa: E402
from conformance.families.config import Fp8QuantConfig  # noqa: E402

registry.load_all()
mod = importlib.import_module("conformance_kernels.fp8_group_quant_triton")
Tile = mod.Fp8Tile

TOKENS = (1, 16, 64, 256, 1024, 4096, 8192)
CANDIDATES = [  # (block_m, groups_per_program, num_warps)
    Tile(32, 1, 4), Tile(1, 8, 4), Tile(2, 8, 4), Tile(4, 8, 4), Tile(4, 8, 8), Tile(8, 4, 4), Tile(8, 8, 8),
    Tile(16, 2, 4), Tile(1, 16, 4), Tile(2, 16, 8), Tile(1, 64, 8), Tile(1, 4, 2), Tile(2, 4, 2), Tile(1, 8, 2),
    Tile(4, 4, 4), Tile(16, 4, 8),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--group", type=int, default=128)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("sweep: no GPU here", file=sys.stderr)
        return bench.EXIT_NO_GPU
    dev = "cuda"
    timer = bench.CudaTimer(replays=50)
    native = registry.get_kernel("fp8_group_quant_native")
    cfg = Fp8QuantConfig(a.group, "bfloat16", hidden=a.hidden)
    p_native = native.load(cfg)
    compiled = torch.compile(lambda xx: native.apply(p_native, xx), dynamic=False)
    kw = dict(group_size=a.group, fp8_dtype=torch.float8_e4m3fn, fp8_max=448.0, eps=1e-10, ue8m0=False,
              column_major_scales=False)
    rows, t0 = [], time.perf_counter()
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20))
    for T in TOKENS:
        g = torch.Generator(device=dev).manual_seed(T)
        x = torch.randn(T, a.hidden, device=dev, generator=g).bfloat16()
        xs = [x] + [x.clone() for _ in range(bench.rotation_sets(x.numel() * 3, l2) - 1)]
        base = timer.graph([lambda xx=xx: compiled(xx) for xx in xs])
        q0, s0 = mod.launch(x, **kw)
        default = mod.default_tile(T, a.hidden // a.group, a.group)
        row = {"tokens": T, "compiled_us": round(base.median_us, 3), "default": asdict(default), "tiles": []}
        for tile in [default] + [c for c in CANDIDATES if c != default]:
            r = {"tile": asdict(tile)}
            try:
                q, s = mod.launch(x, **kw, tile=tile)
                same = torch.equal(q.view(torch.uint8), q0.view(torch.uint8)) and torch.equal(s, s0)
                if not same:
                    r["status"] = "wrong"
                else:
                    t = timer.graph([lambda xx=xx, tile=tile: mod.launch(xx, **kw, tile=tile) for xx in xs])
                    r.update(status="ok", us=round(t.median_us, 3), vs_compiled=round(base.median_us / t.median_us, 3))
            except Exception as ex:  # noqa: BLE001 - a tile that fails to compile is a result
                r["status"] = f"error: {type(ex).__name__}: {' '.join(str(ex).split())[:200]}"
            row["tiles"].append(r)
        ok = [r for r in row["tiles"] if r["status"] == "ok"]
        best = min(ok, key=lambda r: r["us"]) if ok else None
        row["best"] = best
        rows.append(row)
        print(f"tokens={T}: compiled {base.median_us:.2f} us, default {row['tiles'][0].get('us')} us, "
              f"best {best and best['us']} us {best and best['tile']}", flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": importlib.import_module("triton").__version__, "hidden": a.hidden, "group": a.group,
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "elapsed_s": round(time.perf_counter() - t0, 1), "rows": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 1 if any(r["status"] == "wrong" for row in rows for r in row["tiles"]) else 0


if __name__ == "__main__":
    sys.exit(main())
