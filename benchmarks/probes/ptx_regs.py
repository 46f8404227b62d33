"""Compile triton_w4a16's GEMM kernel for a GPU arch on any machine (no GPU needed) and report what limits
occupancy: registers per thread, spills, shared memory, and PTX instruction counts (shared-memory round
trips, cp.async pipelining, shuffles, wgmma). Uses Triton's own ptxas; results in one JSON line per tile.

Usage (repo root): python benchmarks/probes/ptx_regs.py [--arch 90] [--dtype float16] [--has-zp] TILE [TILE ...]
TILE = block_m,block_n,block_k,num_warps,num_stages[,flag...] with flags packed, gemv, swap, magic,
e.g. `16,256,64,8,3,packed,swap,magic` (the sm90 decode row) or `1,256,64,8,3,packed,gemv`.
Registers x threads per program bound the programs per SM (65536 registers per SM on sm80/sm90), and the
bytes of weight tile each program has in flight set the memory-level parallelism (see benchmarks/README).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU, never the interpreter
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FLAGS = ("packed", "gemv", "swap", "magic")


def parse_tile(text: str) -> dict:
    parts = text.split(",")
    if len(parts) < 5 or not all(p.isdigit() for p in parts[:5]) or any(f not in FLAGS for f in parts[5:]):
        raise SystemExit(f"error: TILE={text!r} is invalid; allowed: block_m,block_n,block_k,num_warps,num_stages"
                         f"[,flag...] with flags from {FLAGS}")
    bm, bn, bk, warps, stages = map(int, parts[:5])
    f = set(parts[5:])
    return dict(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages, packed="packed" in f,
                use_dot="gemv" not in f, swap="swap" in f, magic="magic" in f)


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself assembles `arch` with (it picks the PTX version it emits by that tool; on a GPU host a
    different ptxas may refuse that PTX), else one beside triton, else one under /usr/local/cuda*."""
    import triton

    try:
        from triton.backends.nvidia import compiler as nv

        return nv.get_ptxas(arch).path
    except (ImportError, AttributeError, TypeError):  # older Triton: no get_ptxas(arch)
        pass
    here = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):  # the newest one reads the PTX version Triton emits
        if (here / name).is_file():
            return str(here / name)
    found = glob.glob("/usr/local/cuda*/bin/ptxas")
    if not found:
        raise SystemExit("error: no ptxas found beside triton or under /usr/local/cuda*")
    return found[0]


def compile_tile(t: dict, arch: int, dtype: str, has_zp: bool) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    from conformance.core import registry

    registry.load_all()
    import importlib

    tw = importlib.import_module("conformance_kernels.triton_w4a16")
    k = tw._w4a16_gemm_kernel
    act = {"float16": "*fp16", "bfloat16": "*bf16"}[dtype]
    ptrs = {"a_ptr": act, "b_ptr": "*i32", "s_ptr": act, "z_ptr": "*i32", "c_ptr": "*fp32"}
    ones = {"stride_ak", "stride_bn", "stride_sn", "stride_zn", "stride_cn"}
    consts = dict(ZP_BIAS=0 if has_zp else 8, HAS_ZP=has_zp, BLOCK_M=t["block_m"], BLOCK_N=t["block_n"],
                  BLOCK_K=t["block_k"], PACKED_LOAD=t["packed"], USE_DOT=t["use_dot"], EVEN_K=True, EVEN_N=True,
                  SWAP_AB=t["swap"] and t["use_dot"], MAGIC=t["magic"],
                  MAGIC_BITS=0x6400 if dtype == "float16" else 0x4300)
    sig, cexpr, attrs = {}, {}, {}
    for i, n in enumerate(k.arg_names):
        if n in ptrs:
            sig[n], attrs[(i,)] = ptrs[n], [["tt.divisibility", 16]]
        elif n in ones:
            sig[n], cexpr[(i,)] = "constexpr", 1
        elif n in consts:
            sig[n], cexpr[(i,)] = "constexpr", consts[n]
        else:
            sig[n] = "i32"
            if n not in ("M", "tiles_per_split"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=k, signature=sig, constexprs=cexpr, attrs=attrs)
    cc = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                        options={"num_warps": t["num_warps"], "num_stages": t["num_stages"]})
    ptx = cc.asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.ptx").write_text(ptx)
        ptxas = _ptxas(arch)
        r = subprocess.run([ptxas, f"-arch=sm_{arch}a" if arch >= 90 else f"-arch=sm_{arch}", "-v",
                            str(Path(d) / "k.ptx"), "-o", str(Path(d) / "k.cubin")], capture_output=True, text=True)
    log = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", log)
    if r.returncode != 0 or not regs:  # no register report is no figure: say why instead of writing None
        raise SystemExit(f"error: {ptxas} -arch=sm_{arch} exited {r.returncode} without a register report: "
                         f"{' '.join(log.split())[-600:]}")
    spill = re.search(r"(\d+) bytes spill stores", log)
    threads = 32 * t["num_warps"]
    n_regs = int(regs.group(1))
    return {"tile": t, "dtype": dtype, "has_zp": has_zp, "arch": f"sm{arch}", "ptxas_path": ptxas, "registers": n_regs,
            "spill_store_bytes": int(spill.group(1)) if spill else None, "shared_bytes": cc.metadata.shared,
            "programs_per_sm_by_registers": 65536 // (n_regs * threads),
            "weight_tile_bytes": t["block_k"] * t["block_n"] // 2,
            "ptx": {name: len(re.findall(pat, ptx)) for name, pat in (
                ("st.shared", r"\bst\.shared"), ("ld.shared", r"\bld\.shared"), ("cp.async", r"\bcp\.async\.c"),
                ("ldmatrix", r"\bldmatrix"), ("shfl", r"\bshfl"), ("bar.sync", r"\bbar\.sync"),
                ("wgmma", r"\bwgmma\.mma_async"), ("mma.sync", r"\bmma\.sync"), ("cvt", r"\bcvt\."),
                ("fma", r"\bfma\.rn"))}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tiles", nargs="+", metavar="TILE")
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (default 90)")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--has-zp", action="store_true", help="uint4 with a zero-point tensor (default uint4b8)")
    a = ap.parse_args(argv)
    for text in a.tiles:
        print(json.dumps(compile_tile(parse_tile(text), a.arch, a.dtype, a.has_zp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
