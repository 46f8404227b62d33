"""`bisect ID --package P --good V1 --bad V2 [--find fix]`: the release (or commit) of a kernel library that broke
or fixed a case. The work lives in conformance.bisect (docs/bisect.md); this module only reads the options.

Exit 0: the boundary is named; 1: skipped steps leave several candidates (listed); 2: bad input, one line.
`--checkout` answers for the clone's checked-out files only, with repro's codes (0, 1, 125), for `git bisect run`.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

NAME = "bisect"
HELP = ("find the release (or commit) of a kernel library that broke a case, or fixed it (--find fix): installs "
        "each release with --no-deps into a cached scratch site and replays the id there")


def add_arguments(p) -> None:
    p.add_argument("case_id", metavar="ID", help="a case id or check id as a failure printed it")
    p.add_argument("--package", required=True, metavar="P", help="the library's distribution name, e.g. vllm, gemlite")
    p.add_argument("--good", default=None, metavar="V", help="a release (or, with --repo, a commit) where the case "
                   "passes")
    p.add_argument("--bad", default=None, metavar="V", help="a release (or commit) where the case fails")
    p.add_argument("--find", default="break", metavar="break|fix",
                   help="break (default): the first failing release after --good, --bad newer; fix: the first "
                        "passing release after --bad, --good newer")
    p.add_argument("--plugin", dest="bisect_plugins", action="append", default=[], metavar="MODULE",
                   help="the adapter that registers the kernel in each step (as `python -m conformance --plugin`)")
    p.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                   help="a folder of the package's wheels: its releases, read instead of the package index")
    p.add_argument("--cache", default=None, metavar="DIR", help="downloaded wheels and scratch sites (default: "
                   "$CONFORMANCE_BISECT_CACHE, else ~/.cache/conformance-bisect)")
    p.add_argument("--repo", type=Path, default=None, metavar="PATH",
                   help="bisect commits of this clone instead of releases: --good/--bad are commits")
    p.add_argument("--paths", default="", metavar="FILES",
                   help="comma-separated kernel files, relative to the repository root and to the site (with --repo: "
                        "the files placed over the installed release; without: files added to the diff)")
    p.add_argument("--over", default=None, metavar="V", help="with --repo: the release the files are placed over "
                   "(default: the package as this Python imports it)")
    p.add_argument("--checkout", action="store_true", help="with --repo: judge the clone's checked-out files once "
                   "(exit 0 pass, 1 fail, 125 cannot judge), for `git bisect run`")
    p.add_argument("--replay", default="subprocess", metavar="subprocess|in-process",
                   help="where each step runs (default subprocess: a fresh interpreter per release; in-process: "
                        "this one, for pure-Python packages)")
    p.add_argument("--repeat", default="1", metavar="N",
                   help="replays per step (default 1): a step is bad if any of its N replays fails, good only if "
                        "all pass; its record counts the failed ones (for nondeterministic findings)")
    p.add_argument("--target", default=None, metavar="T", help="passed to each step's repro")
    p.add_argument("--no-determinism", action="store_true", help="passed to each step's repro")
    p.add_argument("--timeout", default=None, metavar="S", help="passed to each step's repro")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the answer's record here")


def options(args):
    from conformance.bisect.driver import Options
    from references.errors import InvalidInput

    repro_args = []
    if args.target is not None:
        repro_args += ["--target", args.target]
    if args.no_determinism:
        repro_args.append("--no-determinism")
    if args.timeout is not None:
        repro_args += ["--timeout", str(args.timeout)]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if args.repo is None:
        for flag, v in (("--over", args.over), ("--checkout", args.checkout or None)):
            if v is not None:
                raise InvalidInput(flag, v, "only with --repo PATH (a commit bisect)")
    if not args.checkout:
        for flag, v in (("--good", args.good), ("--bad", args.bad)):
            if v is None:
                raise InvalidInput(flag, "", "a release" + (" or commit" if args.repo else "") + " (required)")
    from conformance.bisect.driver import check_repeat

    repeat = check_repeat(args.repeat)
    return Options(case_id=args.case_id, package=args.package, good=args.good, bad=args.bad, direction=args.find,
                   wheels=args.wheels, cache=args.cache, plugins=[*args.plugin, *args.bisect_plugins],
                   repro_args=repro_args, replay=args.replay, repo=args.repo, paths=paths, over=args.over,
                   json_out=args.json, repeat=repeat, command=shlex.join(["python", "-m", "conformance", *sys.argv[1:]])
                   if sys.argv[0].endswith(("__main__.py", "conformance")) else "")


def run(args) -> int:
    from conformance.bisect import driver

    opts = options(args)
    if args.checkout:
        return driver.checkout_step(opts)
    if opts.repo is not None:
        return driver.commit_bisect(opts)[0]
    return driver.release_bisect(opts)[0]
