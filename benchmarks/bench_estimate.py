"""How long a bench plan takes on a GPU, estimated from a recorded run's per-call times (no GPU needed).

    python -m conformance_bench.bench_estimate benchmarks/results/h200/bench.json     # the `final` plan

Timing: each timed row costs what CudaTimer spends on it: the first calls and the capture (eager time per call),
`warmup` graph replays and the graph repetitions (graph time per call, capped at budget_s per timing, at least
MIN_REPS), `warmup` eager passes and the eager repetitions; `calls` per pass = max(MIN_CALLS_PER_GRAPH, rotation
sets). Per-call times come from the recorded run at the same shape and M; a shape it did not measure is scaled
from the recorded shape with the closest roofline time at that M (time / roofline time of a recorded row, times
this shape's roofline time). Rows the recorded run lacks take their cost model from another row: GemLite from
ours, the compiled baselines from dense plus one pass that reads the int4 weight and writes it in fp16.

Fixed costs are assumptions, not measurements (no GPU run has timed them yet): COMPILE_S per torch.compile
graph, JIT_S for the Triton compiles of our kernel and GemLite, PER_SHAPE_S for drawing, encoding and loading
one shape's weights (scaled by its size), CEILINGS_S for the copy-bandwidth and matmul-rate measurements.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import bench

L2_BYTES = 60 << 20  # H200
COMPILE_S = {"static": 1.0, "dynamic": 3.0, "boundary": 8.0, "fp8": 1.0}  # seconds per compile (assumed)
JIT_S = 45.0  # Triton compiles: triton_w4a16's table paths x alignment variants, GemLite's kernels (assumed)
PER_SHAPE_S = 1.0  # draw + encode + load of a 58M-weight shape (4096 x 14336), scaled by size (assumed)
CEILINGS_S = 5.0
FINAL_PLAN = {  # benchmarks/run_gpu.sh FINAL_BENCH
    "shapes": "14336x4096,4096x14336,llama3-8b,llama3-70b", "ms": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
    "rows": ("triton_w4a16", "dense_float16", "dequant_linear+compile_static", "dequant_linear+compile_dynamic",
             "gemlite_a16w4"),
    "boundary_shapes": 2, "fp8_tokens": 6, "replays": 20, "eager_reps": 5, "budget_s": 0.1, "warmup": 3}


def timing_seconds(t_graph_us: float, t_eager_us: float, calls: int, plan: dict) -> float:
    """CudaTimer's time on one row: graph (first calls, capture, warmup, reps) + eager (warmup, reps)."""
    g, e = t_graph_us * 1e-6 * calls, t_eager_us * 1e-6 * calls  # one pass
    reps_g = max(bench.MIN_REPS, min(plan["replays"], int(plan["budget_s"] / g))) if g > 0 else plan["replays"]
    reps_e = 0
    if plan["eager_reps"]:
        reps_e = max(bench.MIN_REPS, min(plan["eager_reps"], int(plan["budget_s"] / e))) if e > 0 else 0
    return 2 * e + (plan["warmup"] + reps_g) * g + ((plan["warmup"] + reps_e) * e if plan["eager_reps"] else 0)


def _per_call(recorded: dict, kernel: str, N: int, K: int, M: int) -> tuple[float, float] | None:
    """(graph us, eager us) of `kernel` at (N, K, M) from the recorded run, scaled by roofline time."""
    rows = [r for r in recorded["rows"] if r["kernel"] == kernel and r.get("M") == M and r.get("graph_us")
            and r.get("roofline_us")]
    if not rows:
        return None
    floor = _roofline_us(recorded, kernel, N, K, M)
    ref = min(rows, key=lambda r: abs(r["roofline_us"] - floor))
    f = floor / ref["roofline_us"]
    return ref["graph_us"] * f, (ref.get("eager_us") or ref["graph_us"]) * f


def _roofline_us(recorded, kernel, N, K, M) -> float:
    c = recorded["ceilings"]
    nbytes = bench.dense_bytes(M, N, K) if kernel.startswith("dense_") else bench.w4a16_bytes(M, N, K)
    return bench.roofline_us(nbytes, 2.0 * M * N * K, c["copy_gbps"], c["peak_tflops"])


def _row_times(recorded, name, N, K, M) -> tuple[float, float]:
    if name == "gemlite_a16w4":
        name = "triton_w4a16"
    if "+compile" in name:
        g, e = _per_call(recorded, "dense_float16", N, K, M)
        deq = (K * N // 2 + K * N * 2) / (recorded["ceilings"]["copy_gbps"] * 1e3)  # read int4, write fp16
        return g + deq, e + deq + 40.0  # dynamo's guards and the launch of two kernels, eager
    return _per_call(recorded, name, N, K, M)


def estimate(recorded: dict, plan: dict = FINAL_PLAN) -> dict:
    """Seconds by part for `plan` (FINAL_PLAN's keys), from the recorded run's per-call times."""
    shapes = bench.parse_shapes(plan["shapes"])
    timing = 0.0
    for s in shapes:
        for M in plan["ms"]:
            for name in plan["rows"]:
                g, e = _row_times(recorded, name, s.N, s.K, M)
                per_set = s.N * s.K * 2 if name.startswith("dense_") else bench.w4a16_bytes(1, s.N, s.K)
                calls = max(bench.MIN_CALLS_PER_GRAPH, bench.rotation_sets(per_set, L2_BYTES))
                timing += timing_seconds(g, e, calls, plan)
    n = len(shapes)
    weights = sum(s.N * s.K for s in shapes) / (4096 * 14336) * PER_SHAPE_S
    compiles = (n * len(plan["ms"]) * COMPILE_S["static"] + n * 2 * COMPILE_S["dynamic"]  # + the M = 1 graph
                + plan["boundary_shapes"] * COMPILE_S["boundary"] + plan["fp8_tokens"] * COMPILE_S["fp8"])
    parts = {"timing": round(timing, 1), "compiles": round(compiles, 1), "jit": JIT_S, "weights": round(weights, 1),
             "ceilings": CEILINGS_S}
    return {**parts, "total": round(sum(parts.values()), 1), "shapes": [s.name for s in shapes],
            "timed_rows": n * len(plan["ms"]) * len(plan["rows"])}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m conformance_bench.bench_estimate RECORDED_BENCH.json", file=sys.stderr)
        return 2
    print(json.dumps(estimate(json.loads(Path(args[0]).read_text())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
