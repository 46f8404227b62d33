"""How faithful the compile lane's HIP header shim (conformance/compile/hip_shim/) is: the same code compiled with
the shim and with ROCm's real HIP headers and device library, by the same clang.

    python -m conformance_bench.probes.hip_shim_probe --rocm-root DIR --vllm-src DIR [--out FILE]

DIR for --rocm-root: Debian's ROCm 5.2 packages unpacked, no root needed:
    apt-get download libamdhip64-dev rocm-device-libs && for d in *.deb; do dpkg -x $d DIR; done
(headers in DIR/usr/include/hip, bitcode in DIR/usr/lib/x86_64-linux-gnu/amdgcn/bitcode). ROCm 5.2 has no
hip_bf16.h (it came with ROCm 6) and no gfx11 ISA bitcode: the real-header build takes hip_bf16.h and the torch
declarations from the shim and links ockl.bc by hand (its work-item functions are what HIP's blockIdx / gridDim
call), so the comparison isolates the HIP runtime and fp16 headers.

1. Layouts: sizeof / alignof / member offsets of __half, __half2, int4 and the bf16 type, read from a device
   array in each build's assembly; and __half2 passed to __builtin_amdgcn_fdot2 (compiles with both).
2. vLLM 0.33.0's csrc/rocm/q_gemm_rdna3.cu for gfx1100: per kernel, the resources of each build and whether the
   lane's verdict inputs agree (the set of kernels, scratch, LDS and VGPRs within the target's limits, global
   writes).
Writes FILE (default benchmarks/results/hip_shim_probe.json) with the commit and whether the tree was clean.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LAYOUT_TU = r"""
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stddef.h>
#ifdef PROBE_ROCM52
#include <hip/hip_bfloat16.h>
typedef hip_bfloat16 BF16;
#else
#include <hip/hip_bf16.h>
typedef __hip_bfloat16 BF16;
#endif
__device__ int probe_layout[] = {
  (int)sizeof(__half), (int)alignof(__half), (int)sizeof(__half2), (int)alignof(__half2),
  (int)offsetof(__half2, x), (int)offsetof(__half2, y),
  (int)sizeof(int4), (int)alignof(int4), (int)offsetof(int4, x), (int)offsetof(int4, y), (int)offsetof(int4, z),
  (int)offsetof(int4, w), (int)sizeof(BF16), (int)alignof(BF16)};
__device__ float probe_dot(__half2 a, __half2 b) { return __builtin_amdgcn_fdot2(a, b, 0.0f, false); }
"""
LAYOUT_FIELDS = ("sizeof(__half)", "alignof(__half)", "sizeof(__half2)", "alignof(__half2)", "offsetof(__half2,x)",
                 "offsetof(__half2,y)", "sizeof(int4)", "alignof(int4)", "offsetof(int4,x)", "offsetof(int4,y)",
                 "offsetof(int4,z)", "offsetof(int4,w)", "sizeof(bf16)", "alignof(bf16)")
DEVICE_LIBS = ("ockl", "oclc_wavefrontsize64_off", "oclc_abi_version_400", "oclc_isa_version_1030",
               "oclc_correctly_rounded_sqrt_on", "oclc_daz_opt_off", "oclc_finite_only_off", "oclc_unsafe_math_off")


def _clang(clang, args, src, out) -> None:
    p = subprocess.run([*clang, "-x", "hip", "--cuda-device-only", "-O3", "-S", "-std=c++17", *args, str(src), "-o",
                        str(out)], capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise SystemExit(f"clang failed: {' '.join(args)}\n{p.stderr[-2000:]}")


def _real_args(rocm: Path, mixed: Path) -> list:
    bc = rocm / "usr/lib/x86_64-linux-gnu/amdgcn/bitcode"
    libs = [a for n in DEVICE_LIBS for a in ("-Xclang", "-mlink-builtin-bitcode", "-Xclang", str(bc / f"{n}.bc"))]
    return ["-nogpulib", f"--rocm-path={rocm / 'usr'}", *libs, "-I", str(mixed)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocm-root", required=True, type=Path)
    ap.add_argument("--vllm-src", required=True, type=Path)
    ap.add_argument("--out", default="benchmarks/results/hip_shim_probe.json")
    a = ap.parse_args(argv)

    from conformance_bench.provenance import code_identity

    from conformance.compile import hip_driver
    from conformance.core.target_limits import limits

    ident = code_identity(Path(__file__).resolve().parents[2])  # this checkout, not the installed conformance_bench
    clang, why = hip_driver.find_clang()
    if clang is None:
        raise SystemExit(why)
    shim = ["-nogpulib", "-nogpuinc", "-I", str(hip_driver.SHIM_DIR)]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        mixed = d / "mixed"  # the shim's bf16 header and torch declarations only: ROCm 5.2 has neither
        for rel in ("hip/hip_bf16.h", "torch/all.h", "c10/cuda/CUDAGuard.h", "ATen/cuda/CUDAContext.h"):
            (mixed / rel).parent.mkdir(parents=True, exist_ok=True)
            (mixed / rel).write_text((hip_driver.SHIM_DIR / rel).read_text())
        (d / "layout.hip").write_text(LAYOUT_TU)
        layouts = {}
        for name, args in (("shim", shim), ("rocm52", [*_real_args(a.rocm_root, mixed), "-DPROBE_ROCM52"])):
            _clang(clang, ["--offload-arch=gfx1100", *args], d / "layout.hip", d / f"layout_{name}.s")
            text = (d / f"layout_{name}.s").read_text()
            block = text[text.index("probe_layout:"):]
            vals = [int(v) for v in re.findall(r"^\s*\.long\s+(\d+)", block, re.M)[:len(LAYOUT_FIELDS)]]
            layouts[name] = dict(zip(LAYOUT_FIELDS, vals))
        src = a.vllm_src / "csrc/rocm/q_gemm_rdna3.cu"
        inc = ["-I", str(src.parent)]
        units = {}
        for name, args in (("shim", shim), ("rocm52", _real_args(a.rocm_root, mixed))):
            _clang(clang, ["--offload-arch=gfx1100", *args, *inc], src, d / f"vllm_{name}.s")
            units[name] = hip_driver.kernels_of((d / f"vllm_{name}.s").read_text())
    lim = limits("gfx1100")
    rows, agree = [], sorted(units["shim"]) == sorted(units["rocm52"])
    keys = ("vgprs", "sgprs", "scratch_bytes", "lds_bytes", "compiler_occupancy", "instructions", "global_writes")
    for n in sorted(units["shim"]):
        s, r = units["shim"][n], units["rocm52"].get(n, {})

        def inputs(x):
            return (x.get("scratch_bytes", 0) > 0, x.get("vgprs", 0) > lim.max_regs,
                    x.get("lds_bytes", 0) > lim.lds_bytes, x.get("global_writes", 0) > 0)
        same = bool(r) and inputs(s) == inputs(r)
        agree &= same
        rows.append({"kernel": n, "verdict_inputs_agree": same, "shim": {k: s.get(k) for k in keys},
                     "rocm52": {k: r.get(k) for k in keys}})
    doc = {"commit": ident["commit"], "tree_clean": ident["clean"], "compiler": hip_driver.clang_version(clang),
           "command": "python -m conformance_bench.probes.hip_shim_probe --rocm-root DIR --vllm-src DIR (DIR: Debian "
                      "bookworm libamdhip64-dev 5.2.3-8 and rocm-device-libs 5.2.3-2 unpacked; vLLM 0.33.0 sdist)",
           "layouts": layouts, "layouts_equal": layouts["shim"] == layouts["rocm52"], "vllm_gfx1100": rows,
           "verdict_inputs_agree": agree}
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"layouts equal: {doc['layouts_equal']}; vLLM kernels' verdict inputs agree: {agree}")
    for row in rows:
        print(f"  {row['kernel'][:70]}: shim {row['shim']} | rocm52 {row['rocm52']}")
    return 0 if doc["layouts_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
