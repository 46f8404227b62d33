"""`repro CASE_ID [--target T]`: run exactly one case; exit 0 pass, 1 fail, 125 cannot run here, 2 bad id.

Exit codes follow `git bisect run`: 125 tells bisect to skip a commit where the case cannot run (the
kernel is unavailable and has no model, its gate refuses the case on this target, or no kernel of that
name is registered at this commit: bisecting across a kernel's introduction must skip the commits before
it, not blame them). 2 is a malformed id or target (the same at every commit: fix the command).
"""
from __future__ import annotations

NAME = "repro"
HELP = ("replay one case id: exit 0 pass, 1 fail (or kernel error), 125 cannot run here (incl. kernel "
        "not registered at this commit), 2 bad id")

EXIT_PASS, EXIT_FAIL, EXIT_BAD_ID, EXIT_CANNOT_RUN = 0, 1, 2, 125


def add_arguments(p) -> None:
    p.add_argument("case_id", metavar="CASE_ID", help="a case id as printed by a failure, e.g. "
                   "w4a16/triton_w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234")
    p.add_argument("--target", default="auto", help="target to judge gates for (default: auto, this machine)")
    p.add_argument("--no-determinism", action="store_true", help="run the kernel once (skip the two-run check)")


def run(args) -> int:
    from conformance.cases.ids import parse_case_id
    from conformance.checks.harness import run_case
    from conformance.core import registry
    from conformance.core.targets import parse_target

    case = parse_case_id(args.case_id)  # InvalidInput -> exit 2 in cli.main
    target = parse_target(args.target)
    try:
        kernel = registry.get_kernel(case.kernel)
    except registry.RegistryError as e:
        print(f"SKIP {case.id} -- cannot judge at this commit: {e}")
        return EXIT_CANNOT_RUN
    v = run_case(case, kernel, target, check_determinism=not args.no_determinism)
    print(v.line())
    if v.metrics:
        print("metrics: " + ", ".join(f"{k}={val}" for k, val in sorted(v.metrics.items())))
    return {"pass": EXIT_PASS, "skip": EXIT_CANNOT_RUN}.get(v.outcome, EXIT_FAIL)
