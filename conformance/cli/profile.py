"""`profile --save FILE | --compare FILE`: error profiles over a fixed seeded corpus (conformance.error_profile).

--save writes per kernel and config class the max and p99 error ratio; --compare re-runs the corpus and
exits 1 naming every class whose max ratio grew more than 2x (or that fails, or went missing), even
when every case still passes. Exit 0 otherwise; 2 on bad arguments.
"""
from __future__ import annotations

import sys

from conformance.cli import _args
from references.errors import InvalidInput

NAME = "profile"
HELP = "save or compare per-class error-ratio profiles (max, p99) over a fixed seeded corpus"


def add_arguments(parser) -> None:
    _args.add_target(parser, default="auto")
    _args.add_kernels(parser)
    parser.add_argument("--save", default=None, metavar="FILE", help="run the corpus and write the profile here")
    parser.add_argument("--compare", default=None, metavar="FILE",
                        help="run the corpus and compare with this saved profile (exit 1 on >2x growth)")
    parser.add_argument("--growth", type=float, default=None, metavar="X",
                        help="max-ratio growth that counts as a change (default 2.0)")


def run(args) -> int:
    from conformance.reports import error_profile

    if (args.save is None) == (args.compare is None):
        raise InvalidInput("--save/--compare", (args.save, args.compare),
                           "exactly one of --save FILE or --compare FILE")
    growth = error_profile.GROWTH_LIMIT if args.growth is None else args.growth
    if not (growth > 1 and growth < float("inf")):
        raise InvalidInput("--growth", args.growth, "a number > 1")
    target = _args.parse_target(args.target)
    kernels = _args.resolve_kernels(args.kernels)
    if args.save:  # checked before the corpus runs: no work is thrown away on an unwritable path
        from conformance.reports import files

        files.writable_file("--save", args.save)
    saved = error_profile.load(args.compare) if args.compare else None  # fully validated before the corpus runs
    prof = error_profile.run_profile(kernels, target)
    if args.save:
        error_profile.save(prof, args.save)
        sys.stdout.write(error_profile.render_profile(prof))
        n = sum(len(c) for c in prof["kernels"].values())
        print(f"saved {args.save}: {len(prof['kernels'])} kernels, {n} classes ({prof['wall_time_s']} s)")
        failing = [f"{k} / {c}" for k, cs in prof["kernels"].items() for c, v in cs.items() if v["failures"]]
        for f in failing:
            print(f"FAILING {f}")
        return 1 if failing else 0
    if saved["target"] != prof["target"]:
        print(f"note: saved on target {saved['target']}, compared on {prof['target']}", file=sys.stderr)
    diff = error_profile.compare(saved, prof, growth)
    sys.stdout.write(error_profile.render_diff(diff, growth))
    return 0 if diff.ok else 1
