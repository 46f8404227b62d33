"""`bench`: time every runnable kernel on this machine's GPU (graph and eager), each output gated against
the reference first; roofline fractions and dense ratios from ceilings measured in the same run.

Exit codes: 0 done (wrong or failing kernels are reported in the tables, not as an exit code),
2 bad arguments, 3 no GPU here (nothing measured; the message says why).
"""
from __future__ import annotations

import sys

from conformance.cli import _args

NAME = "bench"
HELP = ("GPU timings (CUDA-graph and eager) beside dense, torch.compile and GemLite baselines, with roofline "
        "fractions; exits 3 without a GPU")


def add_arguments(parser) -> None:
    _args.add_kernels(parser)
    parser.add_argument("--shapes", default="issue", metavar="S,...",
                        help="layer sets (issue, llama2-7b, llama3-8b, llama3-70b), NxK layers or MxNxK problems "
                             "(default: %(default)s)")
    parser.add_argument("--m", default="all", metavar="M,...",
                        help="M values or sets: decode (1..64), prefill (128..4096), all, quick (default: %(default)s)")
    parser.add_argument("--dtype", default="float16",
                        help="activation dtype: float16 or bfloat16 (default: %(default)s)")
    parser.add_argument("--family", default="w4a16,fp8_group_quant", metavar="F,...",
                        help="families to bench, in this order (default: %(default)s)")
    parser.add_argument("--fp8-tokens", default=",".join(map(str, (1, 16, 128, 1024, 4096, 8192))), metavar="T,...",
                        help="fp8 group-quant token counts, hidden 7168, group 128, bf16 in (default: %(default)s)")
    parser.add_argument("--baselines", default="dense,compile,gemlite", metavar="B,...",
                        help="dense (F.linear with the act-dtype [N, K] weight), compile (W4A16: torch.compile of a "
                             "plain GPTQ unpack + dequant + F.linear, static M and dynamic M; fp8: torch.compile of "
                             "the native route), gemlite (GemLite's A16W4 through conformance.adapters.gemlite, "
                             "timed when it imports); 'none' for none (default: %(default)s)")
    parser.add_argument("--no-compile-boundary", action="store_true",
                        help="skip timing custom ops compiled at prefill M and called at decode M")
    parser.add_argument("--compile-boundary-shapes", default=None, metavar="NxK,...",
                        help="run the compile-boundary check on these shapes only (default: every shape)")
    parser.add_argument("--replays", type=int, default=50, help="graph replays per timing (default: %(default)s)")
    parser.add_argument("--eager-reps", type=int, default=15,
                        help="eager repetitions per timing; 0 times CUDA graphs only (default: %(default)s)")
    parser.add_argument("--budget-s", type=float, default=0.25,
                        help="seconds of timed repetitions per timing: slow calls get fewer, never fewer than 5 "
                             "(default: %(default)s)")
    parser.add_argument("--out", default="out/bench", metavar="DIR",
                        help="where bench.json, bench.md, bench_roofline.png go (default: %(default)s)")


def _options(args):
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import bench, bench_run

    from conformance.core.registry import FAMILIES
    from conformance.families.config import ACT_DTYPES
    from references.errors import InvalidInput, require

    require(args.dtype in ACT_DTYPES, "--dtype", args.dtype, f"one of {sorted(ACT_DTYPES)}")
    fams = tuple(f.strip() for f in args.family.split(",") if f.strip())
    require(fams and all(f in FAMILIES for f in fams), "--family", args.family, f"names from {list(FAMILIES)}")
    base = tuple(b.strip() for b in args.baselines.split(",") if b.strip() and b.strip() != "none")
    require(all(b in bench_run.BASELINES for b in base), "--baselines", args.baselines,
            f"names from {list(bench_run.BASELINES)} or 'none'")
    require(args.replays >= 3, "--replays", args.replays, "an int >= 3")
    require(args.eager_reps == 0 or args.eager_reps >= 3, "--eager-reps", args.eager_reps, "0 or an int >= 3")
    require(args.budget_s > 0, "--budget-s", args.budget_s, "a positive number of seconds")
    shapes = bench.parse_shapes(args.shapes)
    cb_shapes = None
    if args.compile_boundary_shapes is not None:
        cb_shapes = tuple(t.strip() for t in args.compile_boundary_shapes.split(",") if t.strip())
        names = sorted({s.name for s in shapes})
        require(cb_shapes and all(n in names for n in cb_shapes), "--compile-boundary-shapes",
                args.compile_boundary_shapes, f"comma-separated NxK names of benched shapes: {names}")
    kernels = None
    if args.kernels is not None:
        kernels = [k.name for k in _args.resolve_kernels(args.kernels)]
    try:
        tokens = tuple(int(t) for t in args.fp8_tokens.split(",") if t.strip())
    except ValueError:
        raise InvalidInput("--fp8-tokens", args.fp8_tokens, "comma-separated positive ints") from None
    require(all(t > 0 for t in tokens), "--fp8-tokens", args.fp8_tokens, "comma-separated positive ints")
    return bench_run.Options(kernels=kernels, shapes=shapes, ms=bench.parse_ms(args.m),
                             dtype=args.dtype, fp8_tokens=tokens, baselines=base,
                             compile_boundary=not args.no_compile_boundary, compile_boundary_shapes=cb_shapes,
                             families=fams)


def run(args) -> int:
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import bench, bench_report, bench_run

    opts = _options(args)  # bad arguments are reported (exit 2) before the device question
    why = bench.no_gpu_reason()
    if why is not None:
        print(f"bench: {why}. Run it on a machine with a GPU (see benchmarks/README.md).", file=sys.stderr)
        return bench.EXIT_NO_GPU
    timer = bench.CudaTimer(replays=args.replays, eager_reps=args.eager_reps, budget_s=args.budget_s)
    report = bench_run.run(opts, device="cuda", timer=timer,
                           on_progress=lambda rep: bench_report.write(rep, args.out, plot=False))
    paths = bench_report.write(report, args.out)
    for t in report["targets"]:
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[t["ok"]]
        print(f"{mark} {t['target']}: {t['detail']}")
    print(f"wrote {', '.join(map(str, paths))} in {report['wall_s']} s", file=sys.stderr)
    return 0
