"""JIT compiles per kernel: how many real Triton compiles each kernel's tests paid and their seconds (the JSON
report's "jit": {"mode", "per_kernel": {kernel: {"jit_compiles", "jit_seconds", "jit_cache_hits"}},
"jit_compiles", "jit_seconds"}; the terminal summary prints them per kernel beside cases/s).

Counted through Triton's hooks (triton.knobs, Triton >= 3.4): `runtime.jit_cache_hook` runs before a JIT function
compiles a specialization new to this process and `runtime.jit_post_compile_hook` after it; the seconds between
them are the compile's. `compilation.listener` says whether the compile was served from Triton's on-disk cache
(cache_hit): those count as `jit_cache_hits`, not compiles; a warmup (prewarm's compiles) is not counted; where the
listener is missing every new specialization counts as a compile and the mode says so. Hooks a user installed before
keep running (they are chained). In the interpreter (TRITON_INTERPRET=1, CPU machines) nothing compiles: 0 compiles,
mode "interpreter".
Each compile is attributed to the kernel whose test is running (`set_kernel`, called by the plugin before each
test's setup); each test report carries the compiles made since the previous report (xdist workers included).

$CONFORMANCE_JIT_LOG=FILE: every process of the run appends one JSON line per new specialization to FILE
({"pid", "worker", "kernel", "test", "fn", "spec" (a digest of the specialization key Triton caches the compile by),
"hit", "s"}), so a run can show which compiles were made twice (`duplicates`): a run should compile each
specialization once (benchmarks/gpu_ci.py reads it).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time

REPORT_ATTR = "conformance_jit"  # test report attribute: {kernel: [compiles, seconds, cache_hits]} since last report
OTHER = "(no kernel)"  # compiles of tests not parametrized by a kernel

_lock = threading.Lock()
_local = threading.local()  # the compile in progress in this thread: start time, disk-cache hit
_current = [OTHER, ""]  # the kernel whose test runs in this process, and the test's node id
LOG_ENV = "CONFORMANCE_JIT_LOG"
_pending: dict[str, list] = {}  # kernel -> [compiles, seconds, cache_hits] not yet attached to a report
_mode: list[str] = []  # set once per process by install()


def set_kernel(name: str | None, test: str = "") -> None:
    """The kernel whose test runs now (and that test's node id): later compiles are its own."""
    _current[0], _current[1] = name or OTHER, test


def _note(hit: bool, seconds: float, what: str = "") -> None:
    with _lock:
        c = _pending.setdefault(_current[0], [0, 0.0, 0])
        if hit:
            c[2] += 1
        else:
            c[0] += 1
            c[1] += seconds
    path = os.environ.get(LOG_ENV)
    if path:
        _log(path, hit, seconds, what)


def _log(path: str, hit: bool, seconds: float, what: str) -> None:
    fn = what.split("[", 1)[0]
    line = json.dumps({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                       "kernel": _current[0], "test": _current[1], "fn": fn,
                       "spec": hashlib.sha1(what.encode()).hexdigest()[:12], "hit": hit, "s": round(seconds, 3)})
    try:  # one short write in append mode: lines of concurrent processes do not interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # a diagnostic log never fails a test


def read_log(path: str) -> dict:
    """A $CONFORMANCE_JIT_LOG file summed up: {"compiles", "cache_hits", "distinct", "duplicates" (compiles of a
    specialization this run had compiled before), "seconds", "duplicate_seconds", "top_duplicates" [[fn, n]]}."""
    from collections import Counter

    seen: set = set()
    out = {"compiles": 0, "cache_hits": 0, "distinct": 0, "duplicates": 0, "seconds": 0.0, "duplicate_seconds": 0.0}
    dup_fn: Counter = Counter()
    with open(path, encoding="utf-8") as f:
        for ln in f:
            try:
                e = json.loads(ln)
            except ValueError:
                continue
            if e.get("hit"):
                out["cache_hits"] += 1
                continue
            out["compiles"] += 1
            out["seconds"] += e.get("s", 0.0)
            if e["spec"] in seen:
                out["duplicates"] += 1
                out["duplicate_seconds"] += e.get("s", 0.0)
                dup_fn[e.get("fn", "?")] += 1
            seen.add(e["spec"])
    out["distinct"] = len(seen)
    out["seconds"], out["duplicate_seconds"] = round(out["seconds"], 2), round(out["duplicate_seconds"], 2)
    out["top_duplicates"] = [list(x) for x in dup_fn.most_common(8)]
    return out


def take() -> dict:
    """The compiles noted since the last take(), per kernel (and forget them)."""
    with _lock:
        out = {k: list(v) for k, v in _pending.items()}
        _pending.clear()
    return out


def install() -> str:
    """Install the counting hooks once per process (after the kernels are loaded: TRITON_INTERPRET is decided
    then); returns the mode: "interpreter", "triton", "triton (disk-cache hits counted as compiles)", or
    "unavailable (...)" where Triton has no hooks to count with."""
    if _mode:
        return _mode[0]
    from conformance.core.interpreter_fixes import interpreting

    if interpreting():
        _mode.append("interpreter")
        return _mode[0]
    try:
        from triton import knobs
    except ImportError:
        _mode.append("unavailable (no triton.knobs: Triton older than 3.4, or not installed)")
        return _mode[0]
    _mode.append(hook(knobs))
    return _mode[0]


def hook(knobs) -> str:
    """Chain the counting hooks into `knobs` (triton.knobs, or a stand-in with its `runtime` and `compilation`
    attributes); returns the mode."""
    rt = getattr(knobs, "runtime", None)
    if not (hasattr(rt, "jit_cache_hook") and hasattr(rt, "jit_post_compile_hook")):
        return "unavailable (this Triton has no runtime.jit_cache_hook / jit_post_compile_hook)"
    prev_cache, prev_post = rt.jit_cache_hook, rt.jit_post_compile_hook

    def cache_hook(*args, **kwargs):
        _local.start, _local.hit = time.perf_counter(), False
        _local.warmup = bool(kwargs.get("is_manual_warmup"))
        fn = getattr(kwargs.get("fn"), "name", None) or str(kwargs.get("repr") or "").split("[", 1)[0]
        _local.what = f"{fn}[{kwargs.get('key')!r}]"  # the specialization key: what the JIT caches by
        return prev_cache(*args, **kwargs) if prev_cache else None  # truthy would skip the compile: theirs only

    def post_compile_hook(*args, **kwargs):
        start = getattr(_local, "start", None)
        if not getattr(_local, "warmup", False):  # a prewarm compile (conformance.plugin.prewarm) is not a case's
            _note(bool(getattr(_local, "hit", False)), time.perf_counter() - start if start is not None else 0.0,
                  getattr(_local, "what", ""))
        _local.start = None
        return prev_post(*args, **kwargs) if prev_post else None

    rt.jit_cache_hook, rt.jit_post_compile_hook = cache_hook, post_compile_hook
    comp = getattr(knobs, "compilation", None)
    if comp is None or not hasattr(comp, "listener"):
        return "triton (disk-cache hits counted as compiles)"
    prev_listener = comp.listener

    def listener(*args, **kwargs):
        _local.hit = bool(kwargs.get("cache_hit", False))
        if prev_listener:
            prev_listener(*args, **kwargs)

    comp.listener = listener
    return "triton"


def add(totals: dict, delta: dict) -> None:
    """Add one report's compiles ({kernel: [compiles, seconds, cache_hits]}) into `totals` (same form)."""
    for kern, (n, s, hits) in delta.items():
        t = totals.setdefault(kern, [0, 0.0, 0])
        t[0], t[1], t[2] = t[0] + n, t[1] + s, t[2] + hits


def doc(mode: str | None, totals: dict, prewarm: dict | None = None) -> dict:
    """The JSON report's "jit" entry from per-kernel totals (and the run's prewarm figures when given:
    conformance.plugin.prewarm; its compiles are not the cases' and not counted here)."""
    per = {k: {"jit_compiles": n, "jit_seconds": round(s, 3), "jit_cache_hits": hits}
           for k, (n, s, hits) in sorted(totals.items())}
    out = {"mode": mode, "per_kernel": per, "jit_compiles": sum(v[0] for v in totals.values()),
           "jit_seconds": round(sum(v[1] for v in totals.values()), 3)}
    if prewarm is not None:
        out["prewarm"] = prewarm
    return out


def line(mode: str | None, entry: dict | None) -> str:
    """One kernel's JIT figure for the terminal: `JIT 12 compiles, 30.5 s (3 disk-cache hits)`."""
    if entry is None:
        return "JIT 0 compiles" + (f" ({mode})" if mode and mode != "triton" else "")
    hits = f" ({entry['jit_cache_hits']} disk-cache hits)" if entry.get("jit_cache_hits") else ""
    return f"JIT {entry['jit_compiles']} compiles, {entry['jit_seconds']} s{hits}"


def merge_docs(docs: list[dict]) -> dict:
    """The "jit" entry of several reports (the shards of one run): compiles, seconds and cache hits summed per
    kernel and in total; the mode kept when every report agrees, else the modes joined with '+'."""
    totals: dict[str, list] = {}
    for d in docs:
        for kern, v in (d.get("per_kernel") or {}).items():
            add(totals, {kern: [v["jit_compiles"], v["jit_seconds"], v.get("jit_cache_hits", 0)]})
    modes = sorted({d.get("mode") for d in docs if d.get("mode")})
    return doc("+".join(modes) if modes else None, totals)
