"""Prewarm (conformance/compile/prewarm.py, conformance/plugin/prewarm.py): the run's Triton programs compiled once
each before the cases, split over the xdist workers, with a barrier. On CPU: the split, the barrier, the worker
hook's bookkeeping and when it is off (a bad --conformance-prewarm: test_bad_inputs). On a GPU: a prewarmed
program is the very cache entry the JIT looks up for the case that launches it (so the case compiles nothing)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from conformance.compile import prewarm
from conformance.plugin import jit
from conformance.plugin import prewarm as plugin_prewarm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _specs(n):
    return [SimpleNamespace(program=f"p{i}") for i in range(n)]


def test_shares_cover_every_program_once_and_failures_are_counted():
    built = []

    def build(p):
        built.append(p)
        if p == "p3":
            raise RuntimeError("compile error")

    stats = [prewarm.compile_share(_specs(10), i, 3, build) for i in range(3)]
    assert sorted(built) == sorted(f"p{i}" for i in range(10)) and len(built) == 10
    assert [s["programs"] for s in stats] == [4, 3, 3]
    assert sum(s["failed"] for s in stats) == 1 and sum(s["compiled"] for s in stats) == 9


def test_claimed_shares_compile_every_program_once_and_balance_themselves(tmp_path):
    """Three workers claiming from one directory: every program compiled exactly once; a worker slowed by a costly
    compile takes fewer programs, the others take the rest instead of waiting (a fixed split gives each 10)."""
    built, lock = [], threading.Lock()

    def build(p):
        if p == "p0":
            threading.Event().wait(0.5)  # one costly compile
        with lock:
            built.append(p)

    stats = [None] * 3

    def worker(i):
        stats[i] = prewarm.compile_share(_specs(30), i, 3, build, claims=str(tmp_path))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(built) == sorted(f"p{i}" for i in range(30)) and len(built) == 30
    assert sum(s["programs"] for s in stats) == 30 and sum(s["compiled"] for s in stats) == 30
    slow = next(s for s in stats if s["seconds"] >= 0.5)  # the worker that claimed p0
    assert slow["programs"] < 10, stats


def test_the_barrier_waits_for_every_share_and_the_summary_adds_them(tmp_path):
    d = str(tmp_path)
    prewarm.mark_done(d, 0, {"programs": 2, "compiled": 2, "failed": 0, "seconds": 1.5, "enumerate_s": 0.4})
    assert prewarm.wait_for(d, 2, timeout_s=0.2) >= 0.2  # the second share never came: bounded wait
    t = threading.Timer(0.2, prewarm.mark_done, (d, 1, {"programs": 3, "compiled": 2, "failed": 1, "seconds": 2.0}))
    t.start()
    waited = prewarm.wait_for(d, 2, timeout_s=30)
    t.join()
    assert 0.1 < waited < 10
    s = prewarm.summary(prewarm.done(d))
    assert (s["workers"], s["programs"], s["compiled"], s["failed"], s["slowest_share_s"]) == (2, 5, 4, 1, 2.0)
    assert "4 of 5 programs compiled by 2 workers" in plugin_prewarm.line(s)


def _worker_config(tmp_path, wid, count, prewarm_on=True):
    wi = {"workerid": wid, "workercount": count,
          plugin_prewarm.WORKERINPUT_KEY: {"dir": str(tmp_path)} if prewarm_on else None}
    return SimpleNamespace(workerinput=wi, option=SimpleNamespace(collectonly=False))


@pytest.mark.parametrize("wid,count,runs", [("gw1", 2, True), ("gw2", 2, False), ("gw0", 1, True)])
def test_worker_hook_takes_its_share_marks_it_and_replacements_stay_out(tmp_path, monkeypatch, wid, count, runs):
    seen = []

    def share(session, directory, index, count_):
        seen.append((index, count_))
        return {"programs": 1, "compiled": 1, "failed": 0, "seconds": 0.01}

    monkeypatch.setattr(plugin_prewarm, "_run_share", share)
    monkeypatch.setattr(plugin_prewarm, "WAIT_S", 0.1)
    monkeypatch.setattr(plugin_prewarm, "machine_reason", lambda: None)  # as on a GPU host
    session = SimpleNamespace(config=_worker_config(tmp_path, wid, count))
    assert plugin_prewarm.pytest_runtestloop(session) is None  # the test loop itself still runs
    if runs:
        assert seen == [(int(wid[2:]), count)]
        assert "waited_s" in prewarm.done(str(tmp_path))[int(wid[2:])]
    else:  # gw2 of 2 replaced a crashed worker: no share, no wait
        assert seen == [] and prewarm.done(str(tmp_path)) == {}


def test_a_failing_share_still_marks_done_so_no_worker_waits_for_it(tmp_path, monkeypatch):
    def boom(*a):
        raise ValueError("plan could not be built")

    monkeypatch.setattr(plugin_prewarm, "_run_share", boom)
    monkeypatch.setattr(plugin_prewarm, "WAIT_S", 0.1)
    monkeypatch.setattr(plugin_prewarm, "machine_reason", lambda: None)  # as on a GPU host
    plugin_prewarm.pytest_runtestloop(SimpleNamespace(config=_worker_config(tmp_path, "gw0", 1)))
    assert prewarm.done(str(tmp_path))[0]["error"].startswith("ValueError: plan could not be built")


def test_a_worker_where_nothing_compiles_takes_no_share_and_waits_for_none(tmp_path, monkeypatch):
    """The controller hands the run directory without asking the machine (it may not have loaded torch yet): a worker
    whose machine compiles nothing (the interpreter) neither compiles, marks nor waits, as every worker there."""
    monkeypatch.setattr(plugin_prewarm, "_run_share", lambda *a: pytest.fail("no share where nothing compiles"))
    monkeypatch.setattr(plugin_prewarm, "machine_reason", lambda: "Triton runs in its interpreter here")
    monkeypatch.setattr(plugin_prewarm, "WAIT_S", 30.0)  # a wait would show
    t0 = time.monotonic()
    assert plugin_prewarm.pytest_runtestloop(SimpleNamespace(config=_worker_config(tmp_path, "gw0", 2))) is None
    assert prewarm.done(str(tmp_path)) == {} and time.monotonic() - t0 < 5


def test_prewarm_is_off_without_workers_or_a_compiler_and_says_why():
    def cfg(mode, n):
        return SimpleNamespace(getoption=lambda name: mode, option=SimpleNamespace(numprocesses=n))

    assert plugin_prewarm.wanted(cfg("off", 4)) == "--conformance-prewarm off"
    assert plugin_prewarm.wanted(cfg("auto", 0)) == "fewer than 2 xdist workers"
    from conformance.core.interpreter_fixes import interpreting

    if interpreting():  # a CPU machine: Triton interprets, nothing to compile
        assert "interpreter" in plugin_prewarm.wanted(cfg("auto", 4))


def test_programs_are_the_lanes_distinct_triton_programs_the_same_in_every_worker():
    from conformance.compile import lane
    from conformance.core import registry
    from conformance.core.targets import parse_target

    k = registry.get_kernel("fp8_group_quant_triton")
    t = parse_target("sm90")
    a = prewarm.programs([k], t, seed=5, profile="ci")
    b = prewarm.programs([k], t, seed=5, profile="ci")
    specs, _ = lane.specializations(k, t, seed=5, profile="ci")
    assert [s.program.key for s in a] == [s.program.key for s in b] == [s.program.key for s in specs]
    assert len({s.program.key for s in a}) == len(a) > 0


def test_declared_cases_add_their_programs_after_the_lanes(monkeypatch):
    """A case a test declares (the conformance_cases marker) that launches a program the lane's cases do not: its
    program joins the list, after the lane's, once; the tile rows declare every case they run."""
    from conformance.cases.ids import Case
    from conformance.core import registry
    from conformance.core.targets import parse_target
    from conformance.suite import test_tile_rows as rows

    k, t = registry.get_kernel("triton_w4a16"), parse_target("sm90")
    big = Case("w4a16", k.name, "normal", "statistical", 1, 128, "bfloat16", M=4096, N=512, K=512,
               weight_type="uint4", format="gptq_v2")  # an M beyond every CI-plan row: the table's last row
    lane_only = prewarm.programs([k], t, seed=5, profile="ci")
    both = prewarm.programs([k], t, seed=5, profile="ci", declared={k.name: [big, big]})
    keys = [s.program.key for s in both]
    big_keys = [p.key for p in k.launch(big.config(), big.M, t).programs]
    assert keys[:len(lane_only)] == [s.program.key for s in lane_only] and len(set(keys)) == len(keys)
    assert set(big_keys) <= set(keys) and not set(big_keys) <= {s.program.key for s in lane_only}
    # a declared case the kernel's gate refuses on the target is not warmed, even where the kernel's launch (a
    # plugin's, say) describes one without asking its gate (triton_w4a16's asks: None)
    gate, launch, big_launch = k.can_implement, k.launch, k.launch(big.config(), big.M, t)
    monkeypatch.setattr(k, "can_implement", lambda config, target: "refused" if config == big.config()
                        else gate(config, target))
    monkeypatch.setattr(k, "launch", lambda config, M, target: big_launch if config == big.config()
                        else launch(config, M, target))
    lane_refused = [s.program.key for s in prewarm.programs([k], t, seed=5, profile="ci")]
    assert [s.program.key for s in prewarm.programs([k], t, seed=5, profile="ci", declared={k.name: [big]})] \
        == lane_refused

    items = [SimpleNamespace(iter_markers=lambda name, p=p: [m.mark for m in p.marks if m.name == name])
             for p in rows.ROW_PARAMS]
    declared = plugin_prewarm.declared_cases(items)
    assert set(declared) == set(rows.KERNELS) and sum(map(len, declared.values())) == 2 * len(rows.ROW_PARAMS)
    assert declared["triton_w4a16"][:2] == rows.row_cases(*rows.ROW_PARAMS[0].values)


def _triton_packing() -> str | None:
    """Why this Triton's launch specializer and packing cannot serve as the oracle here (None: they can): the tests
    below call its private API (native_specialize_impl, JITFunction._pack_args), which other releases (a GPU
    machine's own) may lack or shape otherwise."""
    import inspect

    try:
        from triton.runtime.jit import JITFunction, native_specialize_impl
    except ImportError as e:
        return f"this Triton has no native_specialize_impl ({e})"
    want_spec = ["backend", "arg", "is_const", "specialize_value", "align"]
    want_pack = ["self", "backend", "kwargs", "bound_args", "specialization", "options"]
    try:
        got_spec = list(inspect.signature(native_specialize_impl).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: judged by a call below
        got_spec = want_spec
    got_pack = list(inspect.signature(JITFunction._pack_args).parameters) if hasattr(JITFunction, "_pack_args") else []
    if len(got_spec) != len(want_spec) or got_pack != want_pack:
        return (f"this Triton specializes or packs launches otherwise (native_specialize_impl{tuple(got_spec)}, "
                f"JITFunction._pack_args{tuple(got_pack)})")
    return None


def test_warmup_args_specialize_as_the_program_says():
    """What prewarm hands Triton's warmup specializes, by Triton's own specializer, to exactly the program's
    signature and divisibility: every Triton program the in-tree kernels launch on sm90 for the lane's cases, and
    the RDNA-only kernel's on gfx1201 (so the warmup compiles the cache entry the launch will look up)."""
    why = _triton_packing()
    if why:
        pytest.skip(why)
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    from conformance.compile.ci_lane import in_tree_kernels
    from conformance.core import registry
    from conformance.core.targets import parse_target

    seen = 0
    for arch, kernels in (("sm90", in_tree_kernels()), ("gfx1201", [registry.get_kernel("rdna_hybrid_w4a16")])):
        for s in prewarm.programs(kernels, parse_target(arch), seed=0, profile="ci"):
            p, args = s.program, prewarm.warmup_args(s.program)
            consts, div = dict(p.constexprs), set(p.divisible)
            for name, ty in p.signature:
                if ty == "constexpr":
                    assert args[name] == consts[name], (p.name, name)
                    continue
                got_ty, key = native_specialize_impl(BaseBackend, args[name], False, True, True)
                assert got_ty == ty, (p.name, name, got_ty, ty)
                if ty.startswith("*") or ty in ("i32", "i64", "u64"):
                    assert (key == "D") == (name in div), (p.name, name, key)
            seen += 1
    assert seen > 100


GPU_WARM = r"""
import json, sys
from conformance.core import registry
registry.load_all()
from conformance.compile import prewarm
from conformance.core.targets import detect_target

t = detect_target()
chosen = {}
for name in ("triton_w4a16", "triton_w4a16_actorder", "fp8_group_quant_triton"):
    for s in prewarm.programs([registry.get_kernel(name)], t, seed=7, profile="ci"):
        chosen.setdefault((name, tuple(sorted(s.paths))), s)  # one case per kernel and path
for s in chosen.values():
    for p in s.launch.programs:
        prewarm.warm(p)
print(json.dumps([[s.kernel, s.case.id] for s in chosen.values()]))
"""

GPU_RUN = r"""
import json, sys
from conformance.core import registry
registry.load_all()
from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.core.targets import detect_target
from conformance.plugin import jit

print("MODE", jit.install())
t = detect_target()
for kernel, cid in json.loads(sys.argv[1]):
    jit.set_kernel(kernel, cid)
    run_case(parse_case_id(cid), registry.get_kernel(kernel), t, check_determinism=False, record=False)
print("DONE")
"""


@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="no CUDA/HIP device here: whether the JIT finds a prewarmed program in its cache is "
                           "checked on a GPU machine only")
def test_a_prewarmed_program_is_the_jits_own_cache_entry(tmp_path):
    """One case per kernel and path: its programs warmed by prewarm.warm into an empty Triton cache in one process,
    then the case run in another: every specialization the case's JIT needs is a disk-cache hit, none a compile."""
    log = tmp_path / "jit.log"
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), CONFORMANCE_JIT_LOG=str(log),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    w = subprocess.run([sys.executable, "-c", GPU_WARM], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=300)
    assert w.returncode == 0, w.stdout[-3000:] + w.stderr[-3000:]
    cases = w.stdout.strip().splitlines()[-1]
    assert not log.exists() or jit.read_log(str(log))["compiles"] == 0  # warmups are not counted as compiles
    r = subprocess.run([sys.executable, "-c", GPU_RUN, cases], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    got = jit.read_log(str(log)) if log.exists() else {"compiles": 0, "cache_hits": 0}
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    misses = sorted({(e["fn"], e["test"]) for e in lines if not e["hit"]})
    assert got["compiles"] == 0, f"compiled although prewarmed: {misses[:10]}"
    assert got["cache_hits"] >= len(json.loads(cases)), r.stdout[-2000:]


def _jit_source(program, target_arch):
    """The ASTSource and options Triton's JIT builds for a launch of `program` (its binder's specialization of the
    warmup arguments, then JITFunction._pack_args), without a device."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend
    from triton.runtime.jit import native_specialize_impl

    from conformance.compile.triton_driver import _compilable_language, jit_view

    backend = make_backend(GPUTarget("cuda", int(target_arch[2:]), 32))
    with _compilable_language():
        view = jit_view(program.fn)
        args = prewarm.warmup_args(program)
        bound = {kp.name: args[kp.name] for kp in view.params}
        spec = [("constexpr", bound[kp.name]) if kp.is_constexpr else
                native_specialize_impl(backend, bound[kp.name], kp.is_const, not kp.do_not_specialize,
                                       not kp.do_not_specialize_on_alignment) for kp in view.params]
        kwargs = dict(program.options, debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
        if hasattr(knobs.compilation, "fpsan_homomorphic_casts"):
            kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
        options, sig, cexpr, attrs = view._pack_args(backend, kwargs, bound, spec, None)
        return ASTSource(view, sig, cexpr, attrs), options, backend


def test_the_lane_compiles_what_the_jit_compiles_for_the_launch():
    """The compile lane's source for a program (signature, constexprs, every attribute) and its options are what
    Triton's JIT builds for a launch of it (its own specializer and packing, the oracle here), for every Triton
    program the in-tree kernels launch on sm90 in the lane's cases. The JIT also lists an empty attribute list for
    each parameter it assumes nothing of; those change no code but do change the source's hash, so a lane compile is
    not the launch's cache entry (prewarm compiles through the JIT's warmup for that)."""
    why = _triton_packing()
    if why:
        pytest.skip(why)
    from conformance.compile.ci_lane import in_tree_kernels
    from conformance.compile.triton_driver import _ast_source, _compilable_language
    from conformance.core.target_limits import limits
    from conformance.core.targets import parse_target

    lim = limits("sm90")
    n = 0
    for s in prewarm.programs(in_tree_kernels(), parse_target("sm90"), seed=0, profile="ci"):
        jit_src, jit_opts, backend = _jit_source(s.program, "sm90")
        with _compilable_language():
            lane_src = _ast_source(s.program, lim)
        assert lane_src.signature == jit_src.signature, s.program.name
        assert lane_src.constants == jit_src.constants, s.program.name
        assert lane_src.attrs == {k: v for k, v in jit_src.attrs.items() if v}, (s.program.name, lane_src.attrs)
        assert backend.parse_options(dict(s.program.options)).hash() == jit_opts.hash(), s.program.name
        n += 1
    assert n > 100
