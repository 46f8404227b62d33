"""Probe (GPU): for a few programs the in-tree kernels launch, what Triton's JIT compiles (warmed through
conformance.compile.prewarm.warm, captured at runtime.jit_cache_hook) against what the compile lane hands
triton.compile (conformance.compile.triton_driver._ast_source): signature, constexprs, attrs and options, and
whether their attributes agree once the JIT's empty entries are left out (on Triton 3.9 they do, and the empty
entries are why the hashes differ: tests/unit/test_prewarm.py); this confirms it on a GPU machine's Triton.

    python -m benchmarks.probes.lane_vs_jit_key OUT_JSON [--n 6]
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=6)
    a = ap.parse_args(argv)
    from conformance.core import registry

    registry.load_all()
    from triton import knobs

    from conformance.compile import prewarm
    from conformance.compile.triton_driver import _ast_source
    from conformance.core.target_limits import limits
    from conformance.core.targets import detect_target

    t = detect_target()
    lim = limits(t.arch)
    seen: list = []
    knobs.runtime.jit_cache_hook = lambda **kw: seen.append(kw["compile"]) and None
    out = []
    specs = prewarm.programs([registry.get_kernel("triton_w4a16"), registry.get_kernel("fp8_group_quant_triton")],
                             t, seed=0, profile="ci")
    for s in specs[:a.n]:
        seen.clear()
        prewarm.warm(s.program)
        jit = seen[-1] if seen else {}
        src = _ast_source(s.program, lim)
        row = {"program": s.program.name, "case": s.case.id,
               "jit": {"signature": jit.get("signature"), "constants": repr(jit.get("constants")),
                       "attrs": repr(jit.get("configs")), "options": {k: repr(jit.get(k)) for k in (
                           "num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "launch_cooperative_grid")}},
               "lane": {"signature": src.signature, "constants": repr(src.constants), "attrs": repr(src.attrs),
                        "options": dict(s.program.options)}}
        row["signature_equal"] = row["jit"]["signature"] == row["lane"]["signature"]
        row["constants_equal"] = row["jit"]["constants"] == row["lane"]["constants"]
        jit_attrs = (jit.get("configs") or [{}])[0]
        row["attrs_equal_without_empty"] = {k: v for k, v in jit_attrs.items() if v} == src.attrs
        row["attrs_equal"] = row["jit"]["attrs"] == repr([src.attrs])
        out.append(row)
        print(json.dumps({k: row[k] for k in ("program", "signature_equal", "constants_equal", "attrs_equal",
                                                         "attrs_equal_without_empty")}))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, default=repr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
