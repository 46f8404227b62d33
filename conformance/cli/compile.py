"""`compile --targets gfx1100,...,sm120 [--kernels a,b] [--profile ci] [--out DIR] [--seed N] [--sets ...]
[--baseline-target T] [--no-cache]`: the compile lane (conformance/compile/lane.py). Writes DIR/compile.json (one
record per compile), prints the table target x kernel and each failure with its replay line; exit 0 when every
compile passes, 1 otherwise, 2 on bad arguments.

`compile --record-verdicts [--targets ...]`: compile the lane's CI run of the in-tree kernels (fixed seed) and write
the results checked into the tree for this Triton (conformance/compile/recorded.py); CPU CI reads them."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

NAME = "compile"
HELP = ("compile every Triton kernel's specializations for GPU targets with each target's own compiler (no GPU "
        "needed), judge resources against the target's limits; exit 0 all pass, 1 any compile-error or "
        "resource-fail")


def add_arguments(p) -> None:
    from conformance.core.target_limits import LANE_TARGETS

    p.add_argument("--targets", default=",".join(LANE_TARGETS), metavar="T,T",
                   help="GPU targets (default: %(default)s)")
    p.add_argument("--kernels", default=None, metavar="K,K", help="kernels (default: every registered kernel)")
    p.add_argument("--profile", default="ci", metavar="P", help="the plan profile whose cases are compiled")
    p.add_argument("--out", default="report", metavar="DIR", help="output directory (default: %(default)s)")
    p.add_argument("--seed", default=None, metavar="N", help="run seed (default: as validate: the commit's)")
    p.add_argument("--sets", default="plan,catalogue,regressions", metavar="S,S",
                   help="case sets: plan, catalogue, regressions (default: all)")
    p.add_argument("--baseline-target", default=None, metavar="T",
                   help="also print and record what differs on each target from this one")
    p.add_argument("--no-cache", action="store_true", help="compile everything again (the cache is not read)")
    p.add_argument("--record-verdicts", action="store_true",
                   help="compile the lane's CI run of the in-tree kernels (seed 0, ci profile, every set) on --targets "
                        "and write conformance/compile/recorded/triton-<version>.json, which CPU CI reads")
    p.add_argument("--vllm-src", default=None, metavar="DIR",
                   help="vLLM 0.33.0 source tree for the HIP kernels (default: $CONFORMANCE_VLLM_SRC, else the cache)")


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def replay_command(rec: dict) -> str:
    """`python -m conformance [--plugin MODULE] repro ID`: a plugin kernel's line names the module that registers it."""
    from conformance.core import registry

    mod = type(registry.get_kernel(rec["kernel"])).__module__
    plugin = "" if mod.startswith("conformance_kernels") else f"--plugin {mod} "
    return f"python -m conformance {plugin}repro {rec['id']}"


def run(args) -> int:
    from conformance.cases.profiles import get_profile
    from conformance.cases.seeds import resolve_run_seed
    from conformance.compile import lane
    from conformance.compile.baseline import diff, diff_text
    from conformance.core.target_limits import limits
    from conformance.core.targets import parse_target
    from references.errors import require

    targets = [parse_target(t) for t in _split(args.targets)]
    require(targets and all(t.is_gpu for t in targets), "--targets", args.targets, "GPU targets, comma-separated")
    for t in targets:
        limits(t.arch)
    if args.record_verdicts:
        return _record([t.arch for t in targets])
    sets = tuple(_split(args.sets))
    require(sets and all(s in lane.SETS for s in sets), "--sets", args.sets, f"a subset of {list(lane.SETS)}")
    get_profile(args.profile)
    seed, source = resolve_run_seed(args.seed, args.profile)
    base = parse_target(args.baseline_target) if args.baseline_target else None
    if base is not None:
        limits(base.arch)
        if base not in targets:
            targets.append(base)
    if args.vllm_src is not None:
        from conformance.compile import hip_driver

        hip_driver.configure(vllm_src=args.vllm_src)
    kernels = lane.lane_kernels(_split(args.kernels) or None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def progress(kernel, arch, recs):
        bad = [r for r in recs if r["verdict"] != "pass"]
        print(f"compile: {kernel} on {arch}: {len(recs) - len(bad)}/{len(recs)} pass", file=sys.stderr, flush=True)

    result = lane.run_lane(kernels, targets, seed=seed, profile=args.profile, sets=sets, cache=not args.no_cache,
                           progress=progress)
    wall = round(time.perf_counter() - t0, 1)
    doc = {"seed": seed, "seed_source": source, "profile": args.profile, "sets": list(sets),
           "targets": [t.arch for t in targets], "wall_s": wall, "kernels": result["kernels"],
           "launch_errors": result["errors"], "skipped": result["skipped"], "records": result["records"]}
    if base is not None:
        doc["baseline"] = [diff(result["records"], t.arch, base.arch, result["kernels"]) for t in targets
                           if t != base]
    (out / "compile.json").write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    print(lane.table_text(result, [t.arch for t in targets]))
    failed = [r for r in result["records"] if r["verdict"] != "pass"]
    for r in failed:
        print(f"{r['verdict'].upper()} {r['id']} -- {r['message']}  [replay: {replay_command(r)}]")
    for d in doc.get("baseline", []):
        print(diff_text(d))
    for e in result["errors"]:
        print(f"LAUNCH ERROR {e}")
    for line in result["skipped"]:
        print(f"SKIP {line}")
    n = len(result["records"])
    print(f"compile: {n - len(failed)} of {n} compiles pass on {len(targets)} targets in {wall} s; "
          f"{out / 'compile.json'}")
    return 1 if failed or result["errors"] else 0


def _record(archs: list[str]) -> int:
    from conformance.compile import ci_lane

    t0 = time.perf_counter()

    def progress(kernel, arch, n):
        print(f"compile: {kernel} on {arch}: {n} results so far ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)

    out = ci_lane.record(targets=archs, progress=progress)
    doc = json.loads(out.read_text(encoding="utf-8"))
    print(f"compile: {len(doc['entries'])} results for Triton {doc['triton']} on {len(archs)} targets written to "
          f"{out} in {time.perf_counter() - t0:.1f} s")
    return 0
