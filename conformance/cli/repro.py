"""`repro CASE_ID [--target T]`: run exactly one case; exit 0 pass, 1 fail, 125 cannot run here, 2 bad id.

CASE_ID is a case id or a check id (`...,check=opcheck,...`: a contract or fusion check on one input,
conformance.cases.check_ids), replayed by conformance.checks.check_replay with the same exit codes, or a compile
id (`compile/<arch>/<program>/<case id>`, from `python -m conformance compile`): the program recompiled for that
target by its own compiler (0 pass, 1 compile-error or resource-fail, 125 not launched here, 2 bad id). A check id runs
on this machine (--target must be left at auto, or name this machine's target).

Exit codes follow `git bisect run`: 125 tells bisect to skip a commit where the case cannot run (the
kernel is unavailable and has no model, its gate refuses the case on this target, or no kernel of that
name is registered at this commit: bisecting across a kernel's introduction must skip the commits before
it, not blame them). 2 is a malformed id or target (the same at every commit: fix the command).
"""
from __future__ import annotations

import sys

NAME = "repro"
HELP = ("replay one case id, check id or compile id: exit 0 pass, 1 fail (or kernel error), 125 cannot run here (incl. "
        "kernel not registered at this commit), 2 bad id")

EXIT_PASS, EXIT_FAIL, EXIT_BAD_ID, EXIT_CANNOT_RUN = 0, 1, 2, 125


def add_arguments(p) -> None:
    p.add_argument("case_id", metavar="CASE_ID", help="a case id or check id as printed by a failure, e.g. "
                   "w4a16/triton_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,"
                   "seed=1234 or w4a16/triton_w4a16/check=opcheck,M=5,N=256,K=256,g=128,wt=uint4,ao=0,dt=fp16,"
                   "fmt=gptq_v2,seed=1")
    p.add_argument("--target", default="auto", help="target to judge gates for (default: auto, this machine)")
    p.add_argument("--no-determinism", action="store_true", help="run the kernel once (skip the two-run check; "
                   "a check id has none)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="per-call time limit in seconds; a kernel running longer is an ERROR verdict (exit 1); "
                        "0 = none (default: 300)")


def _checked_target_and_timeout(args):
    """The --target (named in errors as --target) and the --timeout limit, configured for this process's run_case
    (a timeout is this case's ERROR verdict: exit 1)."""
    import math

    from conformance.checks import timeout
    from conformance.cli import _args
    from references.errors import require

    limit = timeout.REPRO_DEFAULT_S if args.timeout is None else args.timeout
    require(math.isfinite(limit) and limit >= 0, "--timeout", args.timeout, "seconds, a finite number >= 0 (0: none)")
    target = _args.parse_target(args.target)
    timeout.configure(limit, propagate=False)
    return target


def run(args) -> int:
    from conformance.cases.check_ids import CheckCase, parse_id
    from conformance.core import registry

    if args.case_id.startswith("compile/"):  # a compile record's id: recompile its program for its target
        from conformance.compile.lane import replay

        code, line = replay(args.case_id)
        print(line)
        return code

    case = parse_id(args.case_id)  # InvalidInput -> exit 2 in cli.main
    target = _checked_target_and_timeout(args)
    if isinstance(case, CheckCase):
        from conformance.core.targets import detect_target
        from references.errors import require

        require(target == detect_target(), "--target", args.target, f"auto or {detect_target()} for a check id "
                "(contract and fusion checks run the kernel's op on this machine)")
    try:
        kernel = registry.get_kernel(case.kernel)
    except registry.RegistryError as e:
        # a plugin kernel's printed replay line names its module (`--plugin MODULE`); without it, it is absent here
        print(f"SKIP {case.id} -- cannot judge at this commit: {e} (a plugin kernel registers only when its module "
              "is loaded: `python -m conformance --plugin MODULE repro ID` or CONFORMANCE_PLUGINS=MODULE)")
        return EXIT_CANNOT_RUN
    # said before the kernel runs: a kernel that ends the process (os._exit, a segfault) still leaves the case named
    print(f"repro: running {case.id} on {target}", file=sys.stderr, flush=True)
    if isinstance(case, CheckCase):
        from conformance.checks.check_replay import run_check_case

        v = run_check_case(case, kernel)
    else:
        from conformance.checks.harness import run_case

        v = run_case(case, kernel, target, check_determinism=not args.no_determinism)
    print(v.line())
    if v.metrics:
        print("metrics: " + ", ".join(f"{k}={val}" for k, val in sorted(v.metrics.items())))
    # skip: the gate refuses on this target, or the kernel cannot run here and has no model (harness._execution:
    # e.g. a device-only op for a simulated GPU target): 125, never 1
    return {"pass": EXIT_PASS, "skip": EXIT_CANNOT_RUN}.get(v.outcome, EXIT_FAIL)
