"""`coverage`: sweep the config space through every kernel's gate on a target (no hardware needed)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from conformance.cli import _args
from references.errors import InvalidInput

NAME = "coverage"
HELP = "which kernel serves which config on a target (gates only), with the gaps no kernel serves"
FORMATS = ("table", "json", "html")


def add_arguments(parser) -> None:
    _args.add_target(parser)
    _args.add_kernels(parser)
    parser.add_argument("--format", default="table", help=f"one of {', '.join(FORMATS)} (default: %(default)s)")
    parser.add_argument("--out", default=None, metavar="PATH", help="write here instead of stdout")
    parser.add_argument("--n", type=int, default=4096, help="layer N for w4a16 gates (default: %(default)s)")
    parser.add_argument("--k", type=int, default=4096, help="layer K for w4a16 gates (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=7168, help="hidden size for fp8 gates (default: %(default)s)")


def run(args) -> int:
    from conformance.reports import coverage

    if args.format not in FORMATS:
        raise InvalidInput("--format", args.format, f"one of {list(FORMATS)}")
    target = _args.parse_target(args.target)
    kernels = _args.resolve_kernels(args.kernels)
    report = coverage.sweep(target, kernels, N=args.n, K=args.k, hidden=args.hidden)
    if args.format == "json":
        text = json.dumps(report, indent=1) + "\n"
    elif args.format == "html":
        text = coverage.render_html(report)
    else:
        text = coverage.render_table(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out} ({len(report['configs'])} configs, {report['n_unserved']} unserved, "
              f"swept in {report['wall_time_s']:.3f} s)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
