"""Record the compile lane's HIP results in benchmarks/results/compile_lane.json under its `hip` key, leaving every
other key (the Triton records of benchmarks/compile_lane.py) as it is.

    python -m conformance_bench.compile_lane_hip --vllm-src DIR [--also-clang ziglang] [--out FILE]

Compiles (cold: a fresh cache) what rdna3_w4a16 launches for the suite's cases (plan, catalogue, regressions) on
gfx1100, gfx1151 and gfx1201 with conformance/compile/hip_driver.py, and, for the targets where vLLM's source
compiles the bodies out (`#if defined(__gfx1100__)`), the same translation unit with that guard lifted
(-D__HIP__RDNA3__): what the kernels would cost there once upstream builds them. Carries the commit and whether the
tree was clean (commit first, then record from the clean tree).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TARGETS = ("gfx1100", "gfx1151", "gfx1201")
KERNEL = "rdna3_w4a16"
LIFT = "__HIP__RDNA3__"  # the macro q_gemm_rdna3.cu defines only for __gfx1100__


def _lifted(records: list) -> list:
    """Each empty-kernel record's program compiled with the guard lifted, judged like the lane judges."""
    import dataclasses

    from conformance.compile import hip_driver
    from conformance.compile.lane import Spec, compile_spec, parse_compile_id
    from conformance.core import registry
    from conformance.core.kernel import case_rows

    out = []
    for r in records:
        if r["verdict"] != "empty-kernel":
            continue
        target, prog, case = parse_compile_id(r["id"])
        k = registry.get_kernel(case.kernel)
        launch = k.launch(case.config(), case_rows(case), hip_driver.home_target(k, target))
        (p,) = [p for p in launch.programs if p.name.endswith("." + prog)]
        p = dataclasses.replace(p, options=p.options + (("hip_define", LIFT),))
        rec = compile_spec(Spec(k.name, target, p, launch, case))
        out.append({k2: rec[k2] for k2 in ("target", "key", "verdict", "message", "resources", "id")})
    return out


def _verdicts(records: list) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault(r["target"], {}).setdefault(r["verdict"], 0)
        out[r["target"]][r["verdict"]] += 1
    return out


def _other_compiler(name: str, seed: int, records: list) -> dict:
    """The lane again with another clang: its version, verdicts, and the compiles whose verdict differs."""
    from conformance.compile import hip_driver, lane
    from conformance.core import registry

    os.environ[hip_driver.ENV_CLANG] = name
    try:
        clang, why = hip_driver.find_clang()
        if clang is None:
            return {"name": name, "skipped": why}
        res = lane.run_lane([registry.get_kernel(KERNEL)], list(TARGETS), seed=seed)
    finally:
        del os.environ[hip_driver.ENV_CLANG]
    first = {r["id"]: r for r in records}
    differ = [{"id": r["id"], "verdict": r["verdict"], "first": first[r["id"]]["verdict"], "message": r["message"]}
              for r in res["records"] if r["id"] in first and first[r["id"]]["verdict"] != r["verdict"]]
    return {"name": name, "compiler": hip_driver.clang_version(clang), "verdicts": _verdicts(res["records"]),
            "differ": differ}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-src", required=True, metavar="DIR", help="vLLM 0.33.0 source tree (holds csrc/rocm/)")
    ap.add_argument("--out", default="benchmarks/results/compile_lane.json")
    ap.add_argument("--also-clang", default=None, metavar="NAME",
                    help="run the lane again with this compiler ($CONFORMANCE_HIP_CLANG's values, e.g. ziglang) and "
                         "record its verdicts and every compile whose verdict differs")
    args = ap.parse_args(argv)

    from conformance_bench.provenance import code_identity

    from conformance.cases.seeds import resolve_run_seed
    from conformance.compile import hip_driver, lane
    from conformance.core import registry

    ident = code_identity(Path(__file__).resolve().parents[1])  # this checkout, not the installed copy
    registry.load_all()
    hip_driver.configure(vllm_src=args.vllm_src)
    clang, why = hip_driver.find_clang()
    if clang is None:
        print(f"error: {why}", file=sys.stderr)
        return 1
    src = Path(args.vllm_src) / "csrc" / "rocm" / "q_gemm_rdna3.cu"
    seed, _ = resolve_run_seed(None, "ci")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["CONFORMANCE_CACHE_DIR"] = cache  # cold: every unit compiled by this run
        t0 = time.perf_counter()
        result = lane.run_lane([registry.get_kernel(KERNEL)], list(TARGETS), seed=seed)
        wall = round(time.perf_counter() - t0, 1)
        lifted = _lifted(result["records"])
        other = _other_compiler(args.also_clang, seed, result["records"]) if args.also_clang else None
    verdicts = _verdicts(result["records"])
    section = {
        "commit": ident["commit"], "tree_clean": ident["clean"],
        "command": (f"python -m conformance_bench.compile_lane_hip --vllm-src DIR (DIR: vllm-{hip_driver.VLLM_VERSION}"
                    ".tar.gz from PyPI, unpacked; = python -m conformance compile --targets gfx1100,gfx1151,gfx1201 "
                    "--kernels rdna3_w4a16 --vllm-src DIR, plus the guard-lifted compiles; 2-core CPU machine "
                    "shared with other jobs)"),
        "compiler": hip_driver.clang_version(clang), "flags": list(hip_driver.FLAGS),
        "source": {"file": "csrc/rocm/q_gemm_rdna3.cu", "vllm": hip_driver.VLLM_VERSION,
                   "sha256": hashlib.sha256(src.read_bytes()).hexdigest()},
        "seed": seed, "wall_s": wall, "table": result["kernels"], "verdicts": verdicts,
        "skipped": result["skipped"], "launch_errors": result["errors"], "records": result["records"],
        "guard_lifted": lifted, "other_compiler": other,
        "note": ("gfx1151 / gfx1201 take gfx1100's launches (the gate refuses them; vLLM's CMake builds the source "
                 "for every arch of a list that holds gfx1100). empty-kernel: the compiled kernel is s_endpgm alone "
                 "(docs/shipped-bugs.md). guard_lifted: the same programs compiled with -D" + LIFT + "."),
    }
    path = Path(args.out)
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    doc["hip"] = section
    path.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8")  # its format
    print(lane.table_text(result, list(TARGETS)))
    for t, v in sorted(verdicts.items()):
        print(f"{t}: {v}")
    for r in lifted:
        print(f"guard lifted: {r['verdict'].upper()} {r['target']} {r['key']} {r['message']}")
    if other:
        print(f"{args.also_clang}: {other.get('compiler')} {other.get('verdicts') or other.get('skipped')}; "
              f"{len(other.get('differ', []))} verdicts differ")
    print(f"hip: {len(result['records'])} compiles in {wall} s; wrote the hip key of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
