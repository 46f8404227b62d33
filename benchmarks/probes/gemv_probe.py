"""Probe of M=1 (GEMV) designs for W4A16 on a GPU: which structure reaches the memory roofline.

Every sweep config of triton_w4a16 sat on one floor (~35 us on 14336x4096, 0.85 TB/s) whatever the
tile, path or dequant trick (sweep run 6: benchmarks/results/h200/sweep_sm90.json). This probe separates
the causes with small stand-alone kernels, each checked bit for bit on exact data and timed under CUDA graphs:

  read     the weight words only (xor-sum per word): the floor of the [K, N/8] access pattern
  slot     no reshape: the 8 nibbles of a word stay on their own tensor axis [BK, W, 8]; fp32 FMAs into a
           [BK, W, 8] accumulator summed once after the loop
  group    same unpack; per K tile (one group) sum a*(q - z) over K, then one multiply by the scale
  group_pf group + the next tile's words loaded before this tile is computed (manual prefetch)
  kpack    weights packed along K ([K/8, N], GPTQ's qweight layout): a word's 8 nibbles are 8 K rows of
           one column, so the unpacked axis is reduced inside a thread

Usage (GPU, repo root): PYTHONPATH=. python benchmarks/probes/gemv_probe.py OUT.json
"""
from __future__ import annotations

import importlib
import json
import sys
import time

import torch
import triton
import triton.language as tl

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import bench  # noqa: E402

from conformance.core import registry  # noqa: E402

registry.load_all()
tw = importlib.import_module("conformance_kernels.triton_w4a16")

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]  # (N, K)
GROUP, BIAS = 128, 8


@triton.jit
def _read_kernel(b_ptr, ws_ptr, N, K, tiles_per_split, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    W: tl.constexpr = BLOCK_N // 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_w = pid_n * W + tl.arange(0, W)
    acc = tl.zeros((BLOCK_K, W), dtype=tl.int32)
    for t in range(0, tiles_per_split):
        offs_k = (pid_k * tiles_per_split + t) * BLOCK_K + tl.arange(0, BLOCK_K)
        acc ^= tl.load(b_ptr + offs_k[:, None] * (N // 8) + offs_w[None, :])
    r = tl.xor_sum(acc, axis=0)
    tl.store(ws_ptr + pid_k * (N // 8) + offs_w, r)


@triton.jit
def _slot_kernel(a_ptr, b_ptr, s_ptr, ws_ptr, N, K, tiles_per_split, GS: tl.constexpr,
                 BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, MODE: tl.constexpr):
    """MODE 0: deferred [BK, W, 8] accumulator; 1: per-tile K sum then scale; 2: 1 + manual prefetch."""
    W: tl.constexpr = BLOCK_N // 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_w = pid_n * W + tl.arange(0, W)
    sh = tl.arange(0, 8) * 4
    cols = offs_w[:, None] * 8 + tl.arange(0, 8)[None, :]  # [W, 8] output columns
    zf = 8388608.0 + 8.0  # magic 2^23 + zero point (uint4b8)
    if MODE == 0:
        acc3 = tl.zeros((BLOCK_K, W, 8), dtype=tl.float32)
    else:
        acc = tl.zeros((W, 8), dtype=tl.float32)
    k_first = pid_k * tiles_per_split * BLOCK_K
    if MODE == 2:
        nxt = tl.load(b_ptr + (k_first + tl.arange(0, BLOCK_K))[:, None] * (N // 8) + offs_w[None, :])
    for t in range(0, tiles_per_split):
        k0 = k_first + t * BLOCK_K
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if MODE == 2:
            words = nxt
            k1 = tl.minimum(k0 + BLOCK_K, K - BLOCK_K)  # last iteration re-reads its own tile
            nxt = tl.load(b_ptr + (k1 + tl.arange(0, BLOCK_K))[:, None] * (N // 8) + offs_w[None, :])
        else:
            words = tl.load(b_ptr + offs_k[:, None] * (N // 8) + offs_w[None, :])
        a = tl.load(a_ptr + offs_k).to(tl.float32)
        qf = ((words[:, :, None] >> sh[None, None, :]) & 0xF | 0x4B000000).to(tl.float32, bitcast=True) - zf
        s = tl.load(s_ptr + (k0 // GS) * N + cols).to(tl.float32)
        if MODE == 0:
            acc3 += a[:, None, None] * (qf * s[None, :, :])
        else:
            acc += tl.sum(a[:, None, None] * qf, axis=0) * s
    if MODE == 0:
        acc = tl.sum(acc3, axis=0)
    tl.store(ws_ptr + pid_k * N + cols, acc)


@triton.jit
def _kpack_kernel(a_ptr, b_ptr, s_ptr, ws_ptr, N, K, tiles_per_split, GS: tl.constexpr,
                  BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """b [K/8, N]: word (kw, n) holds q[8 kw + j, n] at bits 4j. Per tile (one group): sum over K, scale."""
    KW: tl.constexpr = BLOCK_K // 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    sh = tl.arange(0, 8) * 4
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    zf = 8388608.0 + 8.0
    for t in range(0, tiles_per_split):
        k0 = (pid_k * tiles_per_split + t) * BLOCK_K
        offs_kw = k0 // 8 + tl.arange(0, KW)
        words = tl.load(b_ptr + offs_kw[:, None] * N + offs_n[None, :])  # [KW, BN]
        a = tl.load(a_ptr + offs_kw[:, None] * 8 + tl.arange(0, 8)[None, :]).to(tl.float32)  # [KW, 8]
        qf = ((words[:, None, :] >> sh[None, :, None]) & 0xF | 0x4B000000).to(tl.float32, bitcast=True) - zf
        part = tl.sum(tl.sum(a[:, :, None] * qf, axis=1), axis=0)
        acc += part * tl.load(s_ptr + (k0 // GS) * N + offs_n).to(tl.float32)
    tl.store(ws_ptr + pid_k * N + offs_n, acc)


def launch(variant, bn, bk, warps, stages, x, o, N, K, sm):
    """One call of `variant` on x [1, K] with operand set o = (b [K, N/8], b [K/8, N], scales)."""
    dev = x.device
    bq_n, bq_k, ss = o
    k_tiles = K // bk
    sk = tw._auto_split(k_tiles, triton.cdiv(N, bn), sm)
    tps = k_tiles // sk
    ws = torch.empty((sk, N), dtype=torch.float32, device=dev)
    grid = (triton.cdiv(N, bn), sk)
    if variant == "read":
        wsi = torch.empty((sk, N // 8), dtype=torch.int32, device=dev)
        _read_kernel[grid](bq_n, wsi, N, K, tps, BLOCK_K=bk, BLOCK_N=bn, num_warps=warps,
                           num_stages=stages)
        return wsi
    if variant == "kpack":
        _kpack_kernel[grid](x, bq_k, ss, ws, N, K, tps, GS=GROUP, BLOCK_K=bk, BLOCK_N=bn,
                            num_warps=warps, num_stages=stages)
    else:
        mode = {"slot": 0, "group": 1, "group_pf": 2}[variant]
        _slot_kernel[grid](x, bq_n, ss, ws, N, K, tps, GS=GROUP, BLOCK_K=bk, BLOCK_N=bn, MODE=mode,
                           num_warps=warps, num_stages=stages)
    out = torch.empty((1, N), dtype=torch.float16, device=dev)
    tw._splitk_reduce_kernel[(1, triton.cdiv(N, 2048))](
        ws, out, 1, N, ws.stride(0), 0, 1, 0, 1, SPLIT_K=sk, BLOCK_M=1, BLOCK_N=2048, num_warps=4)
    return out


def exact_problem(N, K, device):
    g = torch.Generator().manual_seed(N + K)
    q = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
    s = torch.pow(2.0, torch.randint(-7, -3, (K // GROUP, N), generator=g).double()).half()
    x = torch.randint(-1, 2, (1, K), generator=g).half()
    w64 = (q.double() - BIAS) * s.double().repeat_interleave(GROUP, 0)
    y = (x.double() @ w64).half()
    from references import packing
    from references.codecs import operands as ops
    b_n = ops.triton_pack_qweight(q)  # [K, N/8]
    b_k = packing.pack(q, dim=0)  # [K/8, N], sequential along K (GPTQ's qweight layout)
    return x.to(device), b_n.to(device), b_k.to(device), s.to(device), y.to(device)


def main(out_path: str) -> int:
    dev = "cuda"
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20))
    timer = bench.CudaTimer(replays=30)
    copy_gbps = bench.measure_copy_bandwidth() if hasattr(bench, "measure_copy_bandwidth") else None
    rows = []
    t_start = time.perf_counter()
    for N, K in SHAPES:
        x, b_n, b_k, s, y_ref = exact_problem(N, K, dev)
        n_sets = bench.rotation_sets(b_n.numel() * 4 + s.numel() * 2, l2)
        sets = [(b_n, b_k, s)] + [(b_n.clone(), b_k.clone(), s.clone()) for _ in range(n_sets - 1)]
        wbytes = b_n.numel() * 4 + s.numel() * 2
        dense_w = torch.randn(K, N, device=dev, dtype=torch.float16)
        dense = timer.graph([lambda x=x, w=dense_w: torch.matmul(x, w)])
        rows.append({"variant": "dense_fp16", "N": N, "K": K, "us": round(dense.median_us, 3)})
        print(f"{N}x{K} dense {dense.median_us:.2f} us", flush=True)

        configs = [("read", 256, 64, 4, 1), ("read", 256, 128, 4, 3), ("read", 512, 64, 8, 3), ("read", 128, 128, 4, 1)]
        configs += [("slot", 256, 16, 4, 3), ("slot", 256, 32, 8, 3), ("slot", 128, 32, 4, 3), ("slot", 512, 16, 8, 1)]
        configs += [(v, bn, 128, w, st) for v in ("group", "group_pf") for bn, w in ((256, 4), (256, 8), (128, 4),
                                                                                    (512, 8)) for st in (1, 3)]
        configs += [("group", 256, 64, 4, 3), ("group_pf", 256, 64, 4, 1)]
        configs += [("kpack", bn, 128, w, st) for bn, w in ((256, 4), (512, 4), (512, 8), (1024, 8), (128, 2))
                    for st in (1, 3)]
        for variant, bn, bk, warps, stages in configs:
            r = {"variant": variant, "N": N, "K": K, "block_n": bn, "block_k": bk, "num_warps": warps,
                 "num_stages": stages}
            try:
                y = launch(variant, bn, bk, warps, stages, x, sets[0], N, K, sm)
                torch.cuda.synchronize()
                if variant == "read":
                    r["status"] = "ok"
                else:
                    r["status"] = "ok" if torch.equal(y, y_ref) else \
                        f"wrong: {int((y != y_ref).sum())}/{y.numel()} differ"
                c = (variant, bn, bk, warps, stages)
                t = timer.graph([lambda o=o, c=c, x=x, nk=(N, K): launch(*c, x, o, *nk, sm) for o in sets])
                r["us"] = round(t.median_us, 3)
                r["weight_tb_s"] = round(wbytes / t.median_us / 1e6, 3)
                r["x_dense"] = round(dense.median_us / t.median_us, 3)
            except Exception as ex:  # noqa: BLE001 - a variant that fails to compile is a result
                r["status"] = f"error: {type(ex).__name__}: {' '.join(str(ex).split())[:200]}"
            rows.append(r)
            print(json.dumps(r), flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "copy_gbps": copy_gbps,
           "elapsed_s": round(time.perf_counter() - t_start, 1), "doc": __doc__, "rows": rows}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("gemv_probe: no GPU here", file=sys.stderr)
        sys.exit(bench.EXIT_NO_GPU)
    sys.exit(main(sys.argv[1]))
