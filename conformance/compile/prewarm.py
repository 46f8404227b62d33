"""Compile, before any case runs, the Triton programs the run's cases will launch on this machine's GPU, split over
the run's xdist workers, so that each specialization is compiled once per run and not by every worker that meets
it first (Triton's JIT then finds it in its on-disk cache, shared by the workers through TRITON_CACHE_DIR).

    programs(kernels, target, seed, profile) -> [Spec]        # the compile lane's specs for the run's cases
    take_share(specs, target, index, count, build) -> stats   # its share, unless the cache marker says all are in
    compile_share(specs, index, count, build) -> stats        # worker `index` of `count` compiles its share
    mark_done(directory, index, stats); wait_for(directory, count, timeout_s) -> seconds waited
    marker_path(specs, target) -> path | None; write_marker(path, stats)   # "all of these are in this cache"

What a case launches is the kernel's own answer (`Kernel.launch`, the compile lane's source: the CI plan's rows,
the catalogue and the regression cases), so a plugin kernel that declares its launches is pre-compiled too. The
compile is the JIT's own (`warm`: Triton's warmup of the JIT function with mock tensors), so its binary is the
cache entry a launch of the same specialization finds. The lane's ASTSource compile (triton_driver.build) makes the
same code but not the JIT's key (the JIT also lists empty attribute entries, each release in its own way; on
Triton 3.6 on an H100 a suite prewarmed that way still compiled 509 times).
A program whose compile fails is left for its case to compile and report. The plugin side (when, which kernels,
the report's "prewarm") is conformance/plugin/prewarm.py.

A run whose every program compiled leaves a marker file in Triton's cache directory, named by a digest of what
decides those binaries (the programs, their JIT functions' source keys, the target, Triton's version and TRITON_*
settings); the next run that finds it compiles nothing and waits for nobody: warming a cache that holds every
program only costs each worker its share of disk lookups and the barrier. A marker that outlived its cache entries
(someone pruned the directory) costs time, not verdicts: the cases compile what they miss.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

DONE_PREFIX = "prewarm-"
MARKER_PREFIX = "conformance-prewarm-"  # + digest + ".json", in Triton's cache directory
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


def programs(kernels, target, *, seed: int, profile: str) -> list:
    """The distinct Triton programs (lane Specs, first-launch order) the cases of `kernels` launch on `target`:
    the same list in every worker (same seed, profile and kernels)."""
    from conformance.compile import hip_driver, lane

    out, seen = [], set()
    for k in sorted(kernels, key=lambda k: k.name):
        specs, _errors = lane.specializations(k, target, seed=seed, profile=profile)  # a raising launch: its case
        for s in specs:                                                                # reports it
            if hip_driver.is_hip(s.program) or s.program.key in seen:
                continue
            seen.add(s.program.key)
            out.append(s)
    return out


def take_share(specs: list, target, index: int, count: int, build) -> dict:
    """Worker `index` of `count`: its share compiled (compile_share's stats plus "marker": where to leave the marker
    once every share is in), or, where an earlier run's marker for these programs is in the cache, nothing compiled
    and {"cached": its share's size}."""
    marker = marker_path(specs, target)
    if marker and os.path.exists(marker):
        mine = len(specs[index::count])
        return {"programs": mine, "compiled": 0, "failed": 0, "seconds": 0.0, "cached": mine}
    return {**compile_share(specs, index, count, build), "marker": marker}


def compile_share(specs: list, index: int, count: int, build) -> dict:
    """Compile specs[index::count] with `build(program)`; {"programs", "compiled", "failed", "seconds"}. A failing
    compile is counted, not raised: the case that launches it compiles it again and reports the error."""
    t0 = time.perf_counter()
    mine = specs[index::count]
    failed = 0
    for s in mine:
        try:
            build(s.program)
        except Exception:  # noqa: BLE001 - the case's own compile reports it, with its id
            failed += 1
    return {"programs": len(mine), "compiled": len(mine) - failed, "failed": failed,
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
    seconds, the longest wait, and `cached`: the programs a worker skipped because an earlier run's marker says the
    cache holds them all."""
    vals = list(stats.values())
    return {"workers": len(vals), "programs": sum(v.get("programs", 0) for v in vals),
            "compiled": sum(v.get("compiled", 0) for v in vals), "failed": sum(v.get("failed", 0) for v in vals),
            "enumerate_s": max((v.get("enumerate_s", 0.0) for v in vals), default=0.0),
            "slowest_share_s": max((v.get("seconds", 0.0) for v in vals), default=0.0),
            "longest_wait_s": max((v.get("waited_s", 0.0) for v in vals), default=0.0),
            "cached": sum(v.get("cached", 0) for v in vals),
            "notes": sorted({v[k] for v in vals for k in ("skipped", "error") if v.get(k)})[:3]}


def cache_dir() -> str | None:
    """Triton's on-disk cache directory for this process, None where it is not the plain file cache (a custom or
    remote cache manager: whether it holds a binary is the manager's business, so no marker is trusted there)."""
    if os.environ.get("TRITON_CACHE_MANAGER") or os.environ.get("TRITON_REMOTE_CACHE_BACKEND"):
        return None
    try:
        from triton import knobs

        return str(knobs.cache.dir) or None
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_CACHE_DIR") or None


def cache_digest(specs: list, target) -> str:
    """What decides the binaries of `specs` on `target`: each program's key, each JIT function's own source key
    (Triton's cache_key: its source and what it calls), Triton's version and every TRITON_* setting but the cache
    directory's. Equal digests: the same binaries."""
    import triton

    fns = {}
    for s in specs:
        fn = s.program.fn
        fns.setdefault(s.program.name, fn.cache_key)
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and k != "TRITON_CACHE_DIR")
    text = repr((str(target), triton.__version__, env, sorted(fns.items()), sorted(repr(s.program.key) for s in specs)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def marker_path(specs: list, target) -> str | None:
    """The marker file saying every program of `specs` is compiled in this process's Triton cache (it may not exist
    yet); None where the cache is not a plain directory or there is nothing to warm."""
    d = cache_dir()
    if not d or not specs:
        return None
    try:
        digest = cache_digest(specs, target)
    except Exception:  # noqa: BLE001 - a source key Triton cannot compute: no marker, the warmups run as before
        return None
    return os.path.join(d, f"{MARKER_PREFIX}{digest}.json")


def write_marker(path: str, stats: dict[int, dict], count: int) -> bool:
    """Leave the marker when all `count` shares compiled every program (no failure, no error); True when written."""
    vals = list(stats.values())
    if len(vals) != count or any(v.get("failed") or v.get("error") or v.get("skipped") for v in vals):
        return False
    if sum(v.get("compiled", 0) for v in vals) != sum(v.get("programs", 0) for v in vals):
        return False
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"programs": sum(v.get("programs", 0) for v in vals), "written": time.time()}, f)
        os.replace(tmp, path)
    except OSError:
        return False  # a read-only cache: the next run warms again
    return True
