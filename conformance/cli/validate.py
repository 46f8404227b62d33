"""`validate`: run the whole suite for a target and write a self-contained report (JSON, HTML, JUnit XML).

Exit code 0 when every check passed, 1 when any check failed (or pytest failed), 2 on bad arguments or
when the suite wrote no report.
"""
from __future__ import annotations

import argparse
import sys

from conformance.cli import _args
from references.errors import InvalidInput

NAME = "validate"
HELP = "run every registered kernel's checks for a target and write report.html/report.json/junit.xml"


def add_arguments(parser) -> None:
    _args.add_target(parser)
    _args.add_kernels(parser)
    parser.add_argument("--profile", default="ci", metavar="P",
                        help="ci (default: small shapes, a few minutes on 2 CPU cores), nightly or exhaustive")
    parser.add_argument("--out", default="report", metavar="DIR", help="report directory (default: %(default)s)")
    parser.add_argument("--junitxml", default=None, metavar="PATH", help="JUnit XML path (default: DIR/junit.xml)")
    parser.add_argument("--try-refused", action="store_true",
                        help="also run kernels on configs their gates refuse here (gate bypassed; reported "
                             "separately, never counted as conformance results)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="per-call time limit in seconds: a hung kernel fails that case and the run goes on "
                             "(default by profile: ci 60, nightly 300, exhaustive 900; 0 = none)")
    parser.add_argument("--seed", default=None, metavar="N",
                        help="run seed, decimal or 0x-hex (default: $CONFORMANCE_SEED, else for ci the commit under "
                             "test): the CI plan's placements and data seeds, the hypothesis draws")
    parser.add_argument("--baseline-target", default=None, metavar="B",
                        help="also validate target B (its report in DIR/baseline-B) and put what passes on B and "
                             "fails or is refused on the target at the top of the report")
    parser.add_argument("--compile", dest="compile_lane", action=argparse.BooleanOptionalAction, default=None,
                        help="compile the kernels' programs for the target (and B) with the compile lane and add "
                             "the target matrix (default: on with --baseline-target)")
    parser.add_argument("--compile-sets", default="plan,catalogue,regressions", metavar="S,S",
                        help="the compile lane's case sets: plan, catalogue, regressions (default: all)")
    parser.add_argument("-n", dest="workers", default="auto", metavar="N",
                        help="pytest-xdist workers: a number, 'auto' (default) or 0 for one process")


def _workers(text: str):
    t = str(text).strip().lower()
    if t == "auto":
        return "auto"
    if t.isdigit():
        return int(t)
    raise InvalidInput("-n", text, "a non-negative integer or 'auto'")


def run(args) -> int:
    """Exit 0/1 as the report says, 2 on bad arguments (every one checked before the run, output paths too),
    130/143 when SIGINT/SIGTERM stopped it (the pytest child's process group is stopped, the previous report kept)."""
    from conformance.cases.profiles import get_profile
    from conformance.reports import files, report
    from conformance.reports.validate import Interrupted, validate

    target = _args.parse_target(args.target)
    if args.kernels is not None:
        _args.resolve_kernels(args.kernels)  # unknown names: exit 2 before anything runs
    try:
        get_profile(args.profile)
    except InvalidInput as e:
        raise InvalidInput("--profile", args.profile, e.allowed) from None
    workers = _workers(args.workers)
    from conformance.cases.seeds import parse_seed

    seed = None if args.seed is None else parse_seed("--seed", args.seed)
    if args.timeout is not None and not (0 <= args.timeout < float("inf")):
        raise InvalidInput("--timeout", args.timeout, "seconds, a finite number >= 0 (0: no limit)")
    baseline = None
    if args.baseline_target is not None:
        baseline = _args.parse_lane_target(args.baseline_target, "--baseline-target")
        if baseline == target:
            raise InvalidInput("--baseline-target", args.baseline_target,
                               f"a target other than --target ({target})")
    compile_lane = baseline is not None if args.compile_lane is None else args.compile_lane
    if compile_lane:
        _args.parse_lane_target(args.target, "--target")
    sets = _args.parse_sets(args.compile_sets, "--compile-sets")
    files.writable_dir("--out", args.out)
    if args.junitxml:
        files.writable_file("--junitxml", args.junitxml)
    try:
        doc, code = validate(target, profile=args.profile, kernels=args.kernels, out_dir=args.out,
                             junitxml=args.junitxml, workers=workers, try_refused=args.try_refused,
                             plugins=getattr(args, "plugin", []), timeout=args.timeout, seed=seed,
                             progress=lambda msg: print(msg, file=sys.stderr, flush=True), baseline=baseline,
                             compile_lane=compile_lane, compile_sets=sets)
    except Interrupted as e:
        print(f"validate: {e}; the pytest run was stopped and the previous report in {args.out} left as it was",
              file=sys.stderr)
        return e.exit_code
    sys.stdout.write(report.terminal_summary(doc))
    from pathlib import Path

    out = Path(args.out)
    sizes = ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in
                      (out / "report.html", out / "report.json", Path(doc["junit"])) if p.exists())
    print(f"wrote {out / 'report.html'} ({sizes})")
    return code
