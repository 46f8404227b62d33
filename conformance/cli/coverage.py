"""`coverage`: sweep the config space through every kernel's gate on a target (no hardware needed), and count the CI
plan's cases per kernel path and checkpoint format there (`--seed`: the plan's run seed)."""
from __future__ import annotations

import json
import sys

from conformance.cli import _args
from references.errors import InvalidInput

NAME = "coverage"
HELP = ("which kernel serves which config on a target (gates only), with the gaps no kernel serves, and the CI "
        "plan's cases per kernel path and checkpoint format")
FORMATS = ("table", "json", "html")


def add_arguments(parser) -> None:
    _args.add_target(parser)
    _args.add_kernels(parser)
    parser.add_argument("--format", default="table", help=f"one of {', '.join(FORMATS)} (default: %(default)s)")
    parser.add_argument("--out", default=None, metavar="PATH", help="write here instead of stdout")
    parser.add_argument("--n", type=int, default=4096, help="layer N for w4a16 gates (default: %(default)s)")
    parser.add_argument("--k", type=int, default=4096, help="layer K for w4a16 gates (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=7168, help="hidden size for fp8 gates (default: %(default)s)")
    parser.add_argument("--seed", default=None, metavar="N",
                        help="run seed of the CI plan whose cases per kernel path and format are counted, decimal or "
                             "0x-hex (default: $CONFORMANCE_SEED, else the commit's, as a ci run)")


def check_sizes(n: int, k: int, hidden: int) -> None:
    """The sweep's layer sizes, by the shared dimension rules (conformance.families.limits): N a positive
    multiple of 8, K and hidden positive multiples of every group size the sweep covers (so every swept config
    is a valid layer); InvalidInput names the flag."""
    import math

    from conformance.families import get_family, limits

    w4_groups = [g for g in get_family("w4a16").COVERAGE_GROUPS if g > 0]
    fp8_groups = [g for _, vals in get_family("fp8_group_quant").axes if _ == "group_size" for g in vals]
    for flag, value, mult in (("--n", n, 8), ("--k", k, math.lcm(*w4_groups)), ("--hidden", hidden,
                                                                                   math.lcm(*fp8_groups))):
        limits.require_dim(flag, value, multiple_of=mult)


def run(args) -> int:
    from conformance.reports import coverage, files

    if args.format not in FORMATS:
        raise InvalidInput("--format", args.format, f"one of {list(FORMATS)}")
    check_sizes(args.n, args.k, args.hidden)
    if args.out:  # checked before the sweep: no work is thrown away on an unwritable path
        files.writable_file("--out", args.out)
    target = _args.parse_target(args.target, allow_unknown=True)  # future chips are the point of coverage
    kernels = _args.resolve_kernels(args.kernels)
    from conformance.cases.seeds import parse_seed, resolve_run_seed

    seed = parse_seed("--seed", args.seed) if args.seed is not None else resolve_run_seed(None, "ci")[0]
    report = coverage.sweep(target, kernels, N=args.n, K=args.k, hidden=args.hidden, seed=seed)
    if args.format == "json":
        text = json.dumps(report, indent=1) + "\n"
    elif args.format == "html":
        text = coverage.render_html(report)
    else:
        text = coverage.render_table(report)
    if args.out:
        files.atomic_write_text(args.out, text, "--out")
        print(f"wrote {args.out} ({len(report['configs'])} configs, {report['n_unserved']} unserved, "
              f"swept in {report['wall_time_s']:.3f} s)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
