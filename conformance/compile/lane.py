"""The compile lane: every specialization the suite's cases would launch on a GPU target, compiled by that target's
own compiler on this machine, each compile a verdict with its resources and a replayable id.

    specializations(kernel, target, seed, profile, sets) -> [Spec]   # deduped by program key
    run_lane(kernels, targets, seed, profile, sets, cache) -> [record]
    replay(compile_id) -> exit code (0 pass, 1 compile-error / resource-fail, 125 cannot judge here, 2 bad id)

Cases: the CI plan's rows of both tiers for the target (`sets` "plan"), the catalogue's pinned cases of the kernel's
family ("catalogue") and the smallest-K regression cases ("regressions"), each kept where the kernel's gate accepts
it on the target. What a case launches there is the kernel's own answer, `Kernel.launch(config, M, target)`; a
kernel that declares none has no compile records (the table says so). Each distinct program (name, signature,
constexprs, options) is compiled once per target.

A record (one per compile, `compile.json`): kernel, target, key (program name and a hash of its specialization),
verdict (pass, compile-error with the compiler's first line, resource-fail with the limit crossed), message,
resources (registers, spills, scratch, LDS / shared memory, occupancy, warnings), id (`compile/<arch>/<program>/
<case id>`: the first case that launches it; `python -m conformance repro ID` recompiles it), plus path, tiles,
program, constexprs, cases (how many cases launch it), seconds and cached.

Compiles are cached under the user cache dir (`conformance.core.tree.cache_dir("compile")`), keyed by the program's
specialization, the hash of its source and of every JIT function it calls, the target and the Triton version
(`entry_key`): a second run of an unchanged tree compiles nothing. Results checked into the tree for the locked
Triton (conformance/compile/recorded.py) are read next, so CPU CI judges the lane without compiling.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field

from conformance.cases.ids import Case, parse_case_id
from conformance.core import registry
from conformance.core.kernel import case_rows
from conformance.core.launch import Launch, Program
from conformance.core.target_limits import LANE_TARGETS, limits
from conformance.core.targets import Target, parse_target
from references.errors import InvalidInput, require

SETS = ("plan", "catalogue", "regressions")
VERDICTS = ("pass", "compile-error", "resource-fail", "empty-kernel")
CACHE_VERSION = 2  # bump when a record's meaning changes
ID_PREFIX = "compile/"
EXIT_PASS, EXIT_FAIL, EXIT_BAD_ID, EXIT_CANNOT = 0, 1, 2, 125


@dataclass
class Spec:
    """One program to compile for one target: the kernel, the first case that launches it and its launch, and how
    many cases launch it."""

    kernel: str
    target: Target
    program: Program
    launch: Launch
    case: Case
    cases: int = 1
    paths: set = field(default_factory=set)


def short_name(program: Program) -> str:
    return program.name.rsplit(".", 1)[-1]


def program_hash(program: Program) -> str:
    return hashlib.sha256(repr(program.key).encode()).hexdigest()[:12]


def record_key(program: Program) -> str:
    """A record's `key`: the program's short name and the hash of its specialization (what a report matches on)."""
    return f"{short_name(program)}:{program_hash(program)}"


def compile_id(target: Target, program: Program, case: Case) -> str:
    return f"{ID_PREFIX}{target.arch}/{short_name(program)}/{case.id}"


def lane_cases(kernel, target: Target, *, seed: int, profile: str = "ci", sets=SETS) -> list[Case]:
    """The cases of `sets` for `kernel` that its gate accepts on `target`, in a stable order."""
    with registry.gate_batch():  # the plans' gate calls and these: see registry.gate_batch
        return _lane_cases(kernel, target, seed, profile, sets)


def _lane_cases(kernel, target: Target, seed: int, profile: str, sets) -> list[Case]:
    from conformance.cases.ids import TIERS
    from conformance.cases.plan import ci_plan
    from conformance.checks import catalogue

    out: list[Case] = []
    if "plan" in sets:
        for tier in TIERS:
            out += ci_plan(kernel, target, tier, seed=seed, profile=profile)
    if "catalogue" in sets:
        for e in catalogue.ENTRIES:
            if e.family == kernel.family:
                out += e.all_cases(kernel.name)
    if "regressions" in sets:  # the small-K cases are of one family: kept for that family's kernels
        out += [c for K in catalogue.SMALL_K for c in catalogue.small_k_cases(kernel.name, K)
                if c.family == kernel.family]
    seen, kept = set(), []
    for c in out:
        key = (c.config(), case_rows(c))
        if key in seen:
            continue
        seen.add(key)
        if kernel.can_implement(c.config(), target) is None:
            kept.append(c)
    return kept


def specializations(kernel, target: Target, *, seed: int, profile: str = "ci", sets=SETS,
                    cases: list | None = None) -> tuple[list[Spec], list[str]]:
    """(the distinct programs the cases launch on `target`, in first-launch order; errors of `launch` itself)."""
    specs: dict = {}
    errors = []
    for c in (lane_cases(kernel, target, seed=seed, profile=profile, sets=sets) if cases is None else cases):
        try:
            launch = kernel.launch(c.config(), case_rows(c), target)
        except Exception as e:  # noqa: BLE001 - a launch that raises is the kernel's error, reported per case
            errors.append(f"{c.id}: launch raised {type(e).__name__}: {e}")
            continue
        if launch is None:
            continue
        for p in launch.programs:
            s = specs.get(p.key)
            if s is None:
                specs[p.key] = Spec(kernel.name, target, p, launch, c, paths={launch.path})
            else:
                s.cases += 1
                s.paths.add(launch.path)
    return list(specs.values()), errors


# ---- compiling, cached ------------------------------------------------------------------------------------------

def entry_key(program: Program, arch: str) -> str:
    """The compile's cache key: the program's specialization, the hash of its source and of every JIT function it
    calls, the target and the Triton version (a changed kernel or another Triton is another entry)."""
    import triton

    from conformance.compile.triton_driver import source_digest

    text = json.dumps([CACHE_VERSION, repr(program.key), source_digest(program), arch, triton.__version__])
    return hashlib.sha256(text.encode()).hexdigest()


def _cache_file(key: str):
    from conformance.core.tree import cache_dir

    return cache_dir("compile", "triton") / f"{key}.json"


class Unrecorded(Exception):
    """compile_spec(offline=True) found neither a cached nor a recorded result: the program would need a compile."""


def raw_result(spec: Spec, *, cache: bool = True, offline: bool = False) -> tuple[dict, bool | str]:
    """(the compiler's result for one spec: {"ok", "message", "resources", "seconds"}, where it came from: False
    compiled now, True the user cache, "recorded" the verdicts checked into the tree, conformance/compile/
    recorded.py). `offline`: never compile (Unrecorded instead)."""
    from conformance.compile import hip_driver, recorded
    from conformance.compile.triton_driver import compile_program

    lim = limits(spec.target.arch)
    if hip_driver.is_hip(spec.program):
        if offline:
            raise Unrecorded(f"{spec.program.name}: HIP programs are not recorded")
        return hip_driver.compile_program(spec.program, lim, cache=cache), False
    key = entry_key(spec.program, lim.arch) if cache else None  # the source digest is most of a lookup's cost
    path = _cache_file(key) if cache else None
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8")), True
        except (OSError, ValueError):
            pass
    if cache:
        raw = recorded.lookup(key)
        if raw is not None:
            return raw, "recorded"
    if offline:
        raise Unrecorded(f"{spec.program.name} on {lim.arch}")
    raw = compile_program(spec.program, lim)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(raw), encoding="utf-8")
        os.replace(tmp, path)  # atomic: xdist workers may write the same entry
    return raw, False


def compile_spec(spec: Spec, *, cache: bool = True, offline: bool = False) -> dict:
    """The record of one spec: compiled (or read from the cache or the recorded verdicts) and judged against its
    target's limits. A HIP program (conformance/compile/hip_driver.py) is compiled by clang; one that writes no
    global memory is an `empty-kernel`. `offline`: raise Unrecorded rather than compile."""
    from conformance.compile import hip_driver
    from conformance.compile.resources import judge

    lim = limits(spec.target.arch)
    raw, cached = raw_result(spec, cache=cache, offline=offline)
    if raw["ok"]:
        verdict, message, occ, warns = judge(raw["resources"], lim, spec.program)
        res = dict(raw["resources"], occupancy=occ, warnings=warns)
        empty = hip_driver.empty_reason(res, lim.arch)
        if empty:
            verdict, message = "empty-kernel", empty
    else:
        verdict, message, res = "compile-error", raw["message"], None
    return {"kernel": spec.kernel, "target": lim.arch, "key": record_key(spec.program), "verdict": verdict,
            "message": message, "resources": res, "id": compile_id(spec.target, spec.program, spec.case),
            "program": spec.program.name, "path": "/".join(sorted(spec.paths)), "tiles": dict(spec.launch.tiles),
            "constexprs": {k: _plain(v) for k, v in spec.program.constexprs},
            "options": dict(spec.program.options), "cases": spec.cases, "seconds": raw.get("seconds"),
            "cached": raw.get("cached", cached), **({"compiler": raw["compiler"]} if "compiler" in raw else {})}


def _plain(v):
    return v if isinstance(v, (int, float, str, bool)) or v is None else repr(v)


def lane_kernels(names=None) -> list:
    """The kernels the lane reads: `names` (each must be registered), else every registered kernel."""
    if names:
        return [registry.get_kernel(n) for n in names]
    return list(registry.all_kernels())


def run_lane(kernels, targets, *, seed: int, profile: str = "ci", sets=SETS, cache: bool = True,
             progress=None, offline: bool = False) -> dict:
    """{"records": [...], "kernels": {name: {target: status line}}, "errors": [...], "unrecorded": [compile ids]}:
    every kernel on every target (`offline`: nothing is compiled; a program neither cached nor recorded is listed
    under "unrecorded" instead of a record).
    A kernel that declares no launch on any accepted case is listed as such (no record). A kernel whose HIP source
    a multi-arch build compiles past its gate (hip_driver.home_target) is compiled there with its home target's
    launches; HIP programs this machine cannot compile (no clang, no vLLM source) are skipped, the reason in
    "skipped"."""
    from conformance.compile import hip_driver

    records, errors, table, skipped, unrecorded = [], [], {}, [], []
    for k in kernels:
        row = table.setdefault(k.name, {})
        for t in targets:
            target = t if isinstance(t, Target) else parse_target(t)
            cases = lane_cases(k, target, seed=seed, profile=profile, sets=sets)
            via = hip_driver.home_target(k, target) if not cases else None
            if via is not None:
                cases = lane_cases(k, via, seed=seed, profile=profile, sets=sets)
            if not cases:
                row[target.arch] = "refused"
                continue
            specs, errs = specializations(k, via or target, seed=seed, profile=profile, sets=sets, cases=cases)
            specs = [dataclasses.replace(s, target=target) for s in specs]
            why = next((w for s in specs if hip_driver.is_hip(s.program) and (w := hip_driver.unavailable(s.program))),
                       None)
            if why:
                row[target.arch] = "skipped (HIP)"
                skipped.append(f"{k.name} on {target.arch}: {len(specs)} HIP programs not compiled: {why}")
                continue
            errors += [f"{k.name} on {target.arch}: {e}" for e in errs]
            if not specs:
                paths = sorted({la.path for c in cases[:50]
                                if (la := k.launch(c.config(), case_rows(c), target)) is not None}) if not errs else []
                row[target.arch] = ("launch error" if errs else
                                    f"no JIT program ({', '.join(paths)})" if paths else "no launch declared")
                continue
            recs = []
            for s in specs:
                try:
                    recs.append(compile_spec(s, cache=cache, offline=offline))
                except Unrecorded:
                    unrecorded.append(compile_id(s.target, s.program, s.case))
            records += recs
            bad = sum(r["verdict"] != "pass" for r in recs)
            past = f" (past gate, as on {via.arch})" if via else ""
            row[target.arch] = f"{len(recs) - bad}/{len(recs)} pass{past}"
            if progress:
                progress(k.name, target.arch, recs)
    return {"records": records, "kernels": table, "errors": errors, "skipped": skipped, "unrecorded": unrecorded}


def table_text(result: dict, targets) -> str:
    """The target x kernel table: passing / compiled per cell, 'refused' where the gate takes no case there."""
    archs = [t if isinstance(t, str) else t.arch for t in targets]
    archs = [a.split(":")[-1] for a in archs]
    names = sorted(result["kernels"])
    w = max([len("kernel"), *(len(n) for n in names)])
    cells = {n: [result["kernels"][n].get(a, "-") for a in archs] for n in names}
    cw = [max(len(a), *(len(cells[n][i]) for n in names)) if names else len(a) for i, a in enumerate(archs)]
    lines = ["kernel".ljust(w) + "  " + "  ".join(a.ljust(cw[i]) for i, a in enumerate(archs))]
    for n in names:
        lines.append(n.ljust(w) + "  " + "  ".join(c.ljust(cw[i]) for i, c in enumerate(cells[n])))
    return "\n".join(lines)


# ---- replay -----------------------------------------------------------------------------------------------------

def parse_compile_id(text: str) -> tuple[Target, str, Case]:
    """(target, program short name, case) of a compile id; InvalidInput naming the id otherwise."""
    parts = text.split("/", 3)
    require(len(parts) == 4 and parts[0] + "/" == ID_PREFIX and parts[1] and parts[2], "compile id", text,
            "compile/<arch>/<program>/<case id>, as a compile record's id")
    target = parse_target(parts[1])
    require(target.is_gpu, "compile id target", parts[1], f"a GPU target ({', '.join(LANE_TARGETS)})")
    return target, parts[2], parse_case_id(parts[3])


def replay(text: str, *, cache: bool = False) -> tuple[int, str]:
    """(exit code, one line) of recompiling the program a compile id names."""
    from conformance.compile import hip_driver

    try:
        target, prog, case = parse_compile_id(text)
        limits(target.arch)
    except InvalidInput as e:
        return EXIT_BAD_ID, f"error: {e}"
    try:
        kernel = registry.get_kernel(case.kernel)
    except registry.RegistryError as e:
        return EXIT_CANNOT, f"SKIP {text} -- {e}"
    why = kernel.can_implement(case.config(), target)
    via = hip_driver.home_target(kernel, target) if why is not None else None
    if why is not None and (via is None or kernel.can_implement(case.config(), via) is not None):
        return EXIT_CANNOT, f"SKIP {text} -- the gate refuses it on {target}: {why}"
    launch = kernel.launch(case.config(), case_rows(case), via or target)
    match = [p for p in (launch.programs if launch else ()) if short_name(p) == prog]
    if not match:
        return EXIT_CANNOT, (f"SKIP {text} -- {kernel.name} launches no program {prog!r} for this case on "
                             f"{target} at this commit")
    if hip_driver.is_hip(match[0]) and (why := hip_driver.unavailable(match[0])):
        return EXIT_CANNOT, f"SKIP {text} -- cannot compile HIP here: {why}"
    spec = Spec(kernel.name, target, match[0], launch, case)
    rec = compile_spec(spec, cache=cache)
    line = f"{rec['verdict'].upper()} {text}" + (f" -- {rec['message']}" if rec["message"] else "")
    return (EXIT_PASS if rec["verdict"] == "pass" else EXIT_FAIL), line
