"""What Triton's integer-overflow sanitizer costs in the interpreter, and that skipping it changes no verdict
(conformance/core/interpreter_speed.py skips it where its asserts are off).

On a CPU machine (TRITON_INTERPRET=1), the first ROWS CI-plan rows of each interpreted Triton kernel, both tiers,
at run seed 0, are judged with the sanitizer kept (upstream behaviour) and skipped, in alternating rounds; the
verdict lines must be identical. Records the CPU seconds per kernel for each setting and their ratio.

Usage (repo root, CPU machine): python benchmarks/probes/interpreter_sanitizer.py [OUT.json]
The recorded figure is benchmarks/results/interpreter_sanitizer.json.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KERNELS = ("triton_w4a16", "triton_w4a16_actorder", "rdna_hybrid_w4a16", "fp8_group_quant_triton")
ROWS = 6  # plan rows per kernel and tier
ROUNDS = 3


def _judge(cases, target) -> tuple[float, list[str]]:
    from conformance.checks.harness import run_case

    t0 = time.process_time()
    lines = [run_case(c, target=target, record=False).line() for c in cases]
    return time.process_time() - t0, lines


def measure() -> dict:
    from conformance.core import interpreter_speed, registry
    from conformance.core.runtime import configure_triton, interpreting

    configure_triton()
    if not interpreting():
        raise SystemExit("interpreter_sanitizer: run on a machine without a GPU (Triton in its interpreter)")
    registry.load_all()
    from conformance.cases.plan import ci_plan
    from conformance.cases.strategies import suite_target
    from conformance.core.targets import detect_target

    here = detect_target()
    out = {}
    for name in KERNELS:
        k = registry.get_kernel(name)
        cases = [c for tier in ("exact", "statistical")
                 for c in ci_plan(k, suite_target(k, here, tier), tier, seed=0)[:ROWS]]
        target = suite_target(k, here, "statistical")
        _judge(cases[:1], target)  # first-call costs (imports, caches) out of the timed rounds
        kept, skipped = [], []
        for _ in range(ROUNDS):
            interpreter_speed.remove()
            t, lines_kept = _judge(cases, target)
            kept.append(t)
            interpreter_speed.apply()
            t, lines_skipped = _judge(cases, target)
            skipped.append(t)
            if lines_kept != lines_skipped:
                raise SystemExit(f"interpreter_sanitizer: {name}: verdicts differ with and without the sanitizer")
        out[name] = {"cases": len(cases), "cpu_s_sanitizer_kept": round(min(kept), 2),
                     "cpu_s_sanitizer_skipped": round(min(skipped), 2),
                     "kept_over_skipped": round(min(kept) / min(skipped), 2), "same_verdicts": True}
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    import torch
    import triton
    from conformance_bench import provenance

    doc = {**provenance.record_fields(), "python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "rows_per_tier": ROWS, "rounds": ROUNDS, "timer": "process CPU seconds, best of the rounds",
           "kernels": measure()}
    text = json.dumps(doc, indent=1)
    print(text)
    if argv:
        Path(argv[0]).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
