"""Compile, before any case runs, the Triton programs the run's cases will launch on this machine's GPU, split over
the run's xdist workers, so that each specialization is compiled once per run and not by every worker that meets
it first (Triton's JIT then finds it in its on-disk cache, shared by the workers through TRITON_CACHE_DIR).

    programs(kernels, target, seed, profile) -> [Spec]        # the compile lane's specs for the run's cases
    compile_share(specs, index, count, build, claims) -> stats  # worker `index` of `count` compiles its share
    mark_done(directory, index, stats); wait_for(directory, count, timeout_s) -> seconds waited

What a case launches is the kernel's own answer (`Kernel.launch`, the compile lane's source: the CI plan's rows,
the catalogue and the regression cases), so a plugin kernel that declares its launches is pre-compiled too. The
compile is the JIT's own (`warm`: Triton's warmup of the JIT function with mock tensors), so its binary is the
cache entry a launch of the same specialization finds. The lane's ASTSource compile (triton_driver.build) makes the
same code but not the JIT's key (the JIT also lists empty attribute entries, each release in its own way; on
Triton 3.6 on an H100 a suite prewarmed that way still compiled 509 times).
A program whose compile fails is left for its case to compile and report. The plugin side (when, which kernels,
the report's "prewarm") is conformance/plugin/prewarm.py.
"""
from __future__ import annotations

import json
import os
import time

DONE_PREFIX = "prewarm-"
_REPRESENTATIVE = {"i32": 0, "i64": 2 ** 33, "u64": 2 ** 63}  # + 16 (divisible by 16) or + 17 (neither 1 nor that)


def warmup_args(program) -> dict:
    """The arguments of `program`'s launch as Triton's warmup takes them: for each pointer a mock tensor of its dtype
    (16-byte aligned where the program marks it divisible), for each int a representative of its specialization
    class (divisible by 16, or neither 1 nor that; of its width), constexprs by value."""
    import torch
    from triton.runtime.jit import MockTensor

    from conformance.core.launch import TRITON_SCALARS

    to_torch = {v: getattr(torch, k) for k, v in TRITON_SCALARS.items() if hasattr(torch, k)}

    class Unaligned(MockTensor):
        def data_ptr(self):
            return 8  # not a multiple of 16: Triton does not mark it divisible

    consts, div = dict(program.constexprs), set(program.divisible)
    args = {}
    for name, ty in program.signature:
        if ty == "constexpr":
            args[name] = consts[name]
        elif ty.startswith("*"):
            dtype = to_torch[ty.lstrip("*k")]
            args[name] = MockTensor(dtype) if name in div else Unaligned(dtype)
        elif ty in _REPRESENTATIVE:
            args[name] = _REPRESENTATIVE[ty] + (16 if name in div else 17)
        elif ty == "u1":
            args[name] = True
        elif ty.startswith("fp"):
            args[name] = 1.5
        else:
            raise ValueError(f"{program.name}: argument {name} of type {ty!r} has no representative value")
    return args


def warm(program) -> None:
    """Compile `program` for this machine's GPU through its JIT function's own warmup (Triton's `fn.warmup` on
    warmup_args: no launch), so the binary lands in Triton's cache under the very key a launch of the same
    specialization looks up. Raises what the compile raises."""
    import triton

    fn = program.fn
    if not isinstance(fn, triton.runtime.jit.JITFunction):
        raise TypeError(f"{program.name}: not a JIT function here ({type(fn).__name__}): nothing to warm")
    fn.warmup(grid=(1,), **warmup_args(program), **dict(program.options))


def programs(kernels, target, *, seed: int, profile: str, declared: dict | None = None) -> list:
    """The distinct Triton programs (lane Specs, first-launch order) the cases of `kernels` launch on `target`:
    the lane's cases (plan, catalogue, regressions), then the cases tests declared that the kernel's gate accepts on
    `target` (`declared`: kernel name -> [Case], the `conformance_cases` marker of the run's items,
    conformance.plugin.prewarm); the same list in every worker (same seed, profile, kernels and items)."""
    from conformance.compile import hip_driver, lane
    from conformance.core import registry
    from conformance.core.kernel import case_rows

    declared = declared or {}
    out, seen = [], set()
    for k in sorted(kernels, key=lambda k: k.name):
        specs, _errors = lane.specializations(k, target, seed=seed, profile=profile)  # a raising launch: its case
        if declared.get(k.name):                                                       # reports it
            with registry.gate_batch():
                mine = list({(c.config(), case_rows(c)): c for c in declared[k.name]
                             if k.can_implement(c.config(), target) is None}.values())
            specs += lane.specializations(k, target, seed=seed, profile=profile, cases=mine)[0]
        for s in specs:
            if hip_driver.is_hip(s.program) or s.program.key in seen:
                continue
            seen.add(s.program.key)
            out.append(s)
    return out


CLAIM_PREFIX = "claim-"


def claim(directory: str, i: int) -> bool:
    """Take program `i` for this worker: True for the one worker whose exclusive create of its claim file wins."""
    try:
        os.close(os.open(os.path.join(directory, f"{CLAIM_PREFIX}{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def compile_share(specs: list, index: int, count: int, build, claims: str | None = None) -> dict:
    """Compile this worker's share with `build(program)`; {"programs", "compiled", "failed", "seconds"}. With a
    `claims` directory shared by the workers, the share is dynamic: each worker walks the list and compiles every
    program it claims first (compiles differ several-fold in cost, so a fixed split leaves one worker compiling
    while the others wait at the barrier); without one, specs[index::count]. A failing compile is counted, not
    raised: the case that launches it compiles it again and reports the error."""
    t0 = time.perf_counter()
    # lazily: a program is claimed just before this worker compiles it
    mine = iter(specs[index::count]) if claims is None else (s for i, s in enumerate(specs) if claim(claims, i))
    programs = failed = 0
    for s in mine:
        programs += 1
        try:
            build(s.program)
        except Exception:  # noqa: BLE001 - the case's own compile reports it, with its id
            failed += 1
    return {"programs": programs, "compiled": programs - failed, "failed": failed,
            "seconds": round(time.perf_counter() - t0, 3)}


def mark_done(directory: str, index: int, stats: dict) -> None:
    path = os.path.join(directory, f"{DONE_PREFIX}{index}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stats, f)
    os.replace(tmp, path)  # atomic: a waiting worker never reads half a file


def done(directory: str) -> dict[int, dict]:
    """index -> stats of the workers that finished their share."""
    out = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for n in names:
        if n.startswith(DONE_PREFIX) and n.endswith(".json"):
            try:
                with open(os.path.join(directory, n), encoding="utf-8") as f:
                    out[int(n[len(DONE_PREFIX):-5])] = json.load(f)
            except (OSError, ValueError):
                continue
    return out


def wait_for(directory: str, count: int, timeout_s: float, poll_s: float = 0.05) -> float:
    """Wait until `count` workers marked their share done, at most `timeout_s` (a worker that died before marking
    costs the others that much, once); the seconds waited."""
    t0 = time.monotonic()
    while len(done(directory)) < count and time.monotonic() - t0 < timeout_s:
        time.sleep(poll_s)
    return round(time.monotonic() - t0, 3)


def summary(stats: dict[int, dict]) -> dict:
    """The report's "prewarm" entry from the workers' stats: programs, compiled, failed, the slowest share's
    seconds and the longest wait."""
    vals = list(stats.values())
    return {"workers": len(vals), "programs": sum(v.get("programs", 0) for v in vals),
            "compiled": sum(v.get("compiled", 0) for v in vals), "failed": sum(v.get("failed", 0) for v in vals),
            "enumerate_s": max((v.get("enumerate_s", 0.0) for v in vals), default=0.0),
            "slowest_share_s": max((v.get("seconds", 0.0) for v in vals), default=0.0),
            "longest_wait_s": max((v.get("waited_s", 0.0) for v in vals), default=0.0),
            "notes": sorted({v[k] for v in vals for k in ("skipped", "error") if v.get(k)})[:3]}
