"""One benchmark run: every runnable kernel x shape x M, each output gated against the reference before it
is timed, with the baselines a user would write (dense F.linear, torch.compile of a plain GPTQ unpack + dequant
+ F.linear with static and with dynamic M) and GemLite beside ours, plus the compile-boundary check, into one
report dict.

    run(opts, device="cuda", timer=None) -> report

The timer and device are parameters so the whole flow (gate, rows, report) runs on a CPU with a fake
timer in the tests; on a GPU the timer is bench.CudaTimer.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from conformance_bench import bench, provenance

from conformance.checks import guard
from conformance.core import registry
from conformance.core.dtypes import torch_dtype
from conformance.core.kernel import RunContext, kernel_call
from conformance.core.targets import Target, detect_target
from conformance.families import all_families, get_family

ROOT = Path(__file__).resolve().parent.parent
W4A16_WTYPE, W4A16_FORMAT = "uint4b8", "gptq_v2"
COMPILE_DECODE = (1, 16)
COMPILE_FLAG_RATIO = 1.05
BASELINES = ("dense", "compile", "gemlite")
GEMLITE_PLUGIN, GEMLITE_KERNEL = "conformance.adapters.gemlite", "gemlite_a16w4"
COMPILE_STATIC = "dequant_linear+compile_static"  # torch.compile(dynamic=False): one compile per (shape, M)
COMPILE_DYNAMIC = "dequant_linear+compile_dynamic"  # M marked dynamic, compiled once at prefill M per shape
RECOMPILE_LIMIT = 4096  # dynamo's default (8 per function) would run the 9th static M eagerly, silently


@dataclass
class Options:
    kernels: list | None = None  # kernel names; None = every registered kernel
    shapes: list = field(default_factory=lambda: bench.parse_shapes("issue"))
    ms: tuple = bench.M_SETS["all"]
    dtype: str = "float16"
    fp8_tokens: tuple = bench.FP8_TOKENS
    fp8_hidden: int = bench.FP8_HIDDEN
    baselines: tuple = BASELINES
    compile_boundary: bool = True
    compile_boundary_shapes: tuple | None = None  # NxK names the check runs on; None = every shape
    compile_backend: str = "inductor"  # torch.compile backend of the compiled baselines (the CPU tests use "eager")
    families: tuple = registry.FAMILIES  # benched in this order
    seed: int = 0
    log: object = sys.stderr


def _say(opts, msg: str) -> None:
    print(msg, file=opts.log, flush=True)


def _move(obj, device):
    from conformance.checks.contracts import replace_leaves, tensor_leaves

    return replace_leaves(obj, [t.to(device) for t in tensor_leaves(obj)])


def _clone(obj):
    """A copy with its own tensors: operand containers leaf by leaf, a module (GemLite's) deep-copied."""
    from conformance.checks.contracts import replace_leaves, tensor_leaves

    if isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj)
    return replace_leaves(obj, [t.clone() for t in tensor_leaves(obj)])


def _nbytes(obj) -> int:
    """Bytes of an operand set's tensors (a module's parameters and buffers)."""
    from conformance.checks.contracts import tensor_leaves

    ts = [*obj.parameters(), *obj.buffers()] if isinstance(obj, torch.nn.Module) else tensor_leaves(obj)
    return sum(t.numel() * t.element_size() for t in ts)


def _l2_bytes(device) -> int:
    if torch.device(device).type != "cuda":
        return 0  # no cache to defeat: one operand set
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def source_digest() -> str:
    """sha256 over the kernel and bench sources (kept from runs 1-9; the README's staleness check uses
    provenance.kernel_digest, which a bench-only edit does not change)."""
    h = hashlib.sha256()
    for p in sorted([*ROOT.glob("kernels/*.py"), *ROOT.glob("benchmarks/bench*.py")]):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _gemlite_env() -> dict | None:
    """GemLite's version and autotune mode when its adapter is loaded (None: not loaded)."""
    mod = sys.modules.get(GEMLITE_PLUGIN)
    if mod is None:
        return None
    try:
        version = importlib.metadata.version("gemlite")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"version": version, "unavailable": mod.UNAVAILABLE,
            "autotune": os.environ.get(mod.AUTOTUNE_ENV) or "gemlite's own default"}


def environment(device) -> dict:
    """Device, versions and code identity (commit, clean flag, kernel digest) recorded with every run."""
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
           **provenance.record_fields(), "source_digest": source_digest(),
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
           "gemlite": _gemlite_env()}
    if torch.device(device).type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(device=p.name, sm_count=p.multi_processor_count, l2_bytes=_l2_bytes(device),
                   memory_gib=round(p.total_memory / 2 ** 30, 1), target=str(detect_target()))
    else:
        env.update(device="cpu", target="cpu")
    return env


def _ctx(kernel, target: Target, device) -> RunContext:
    """The RunContext an API v2 kernel gets in the bench: this target, the bench device, its run mode here."""
    return RunContext(target, str(device), kernel.run_mode(target))


def _kernels(opts, family: str, config, target: Target) -> tuple[list, list]:
    """(kernels to run, rows for the kernels that cannot) for one config; refusals carry their reason. The
    `gemlite` baseline adds GemLite's kernel to a --kernels list (its gate-only stand-in says why it cannot run)."""
    names = opts.kernels
    if names is not None and "gemlite" in opts.baselines:  # kept below only for GemLite's own family
        names = list(dict.fromkeys([*names, GEMLITE_KERNEL]))
    ks = registry.all_kernels(family) if names is None else [
        k for k in registry.resolve_kernels(names) if k.family == family]
    run, skipped = [], []
    for k in ks:
        why = k.can_implement(config, target)
        status = "refused"
        if why is None:
            why, status = k.availability(target), "unavailable"
        if why is None:
            run.append(k)
        else:
            skipped.append({"family": family, "kernel": k.name, "status": status, "detail": why})
    return run, skipped


def _row(family, kernel, shape, M, N, K, status, detail="", **kw) -> dict:
    return {"family": family, "kernel": kernel, "shape": shape, "M": M, "N": N, "K": K, "status": status,
            "detail": detail, **kw}


def _timed_row(row: dict, timer, calls_graph, calls_eager, nbytes: int, flops: float, ceil: dict) -> dict:
    """Fill a row's graph/eager medians and roofline figures (errors in timing become status 'error').
    A timer with eager_reps = 0 times graphs only."""
    try:
        g = timer.graph(calls_graph)
        e = timer.eager(calls_eager) if getattr(timer, "eager_reps", 1) else None
    except Exception as ex:  # noqa: BLE001 - a launch failure is a result, reported with the row
        row.update(status="error", detail=f"timing failed: {type(ex).__name__}: {' '.join(str(ex).split())[:300]}")
        return row
    floor = bench.roofline_us(nbytes, flops, ceil["copy_gbps"], ceil.get("peak_tflops"))
    row.update(graph_us=round(g.median_us, 3), graph=g.to_dict(), bytes=nbytes, flops=flops,
               operand_sets=len(calls_graph),  # copies cycled through, so L2 holds none of them between calls
               roofline_us=round(floor, 3), roofline_frac=round(floor / g.median_us, 4) if g.median_us > 0 else None,
               gbps=round(nbytes / (g.median_us * 1e3), 1), tflops=round(flops / (g.median_us * 1e6), 2))
    if e is not None:
        row.update(eager_us=round(e.median_us, 3), eager=e.to_dict(),
                   launch_overhead_us=round(e.median_us - g.median_us, 3))
    return row


def _err(ex: Exception) -> str:
    return f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"


def _dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process (to see that a static-M call really compiled)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _recompile_limits():
    """dynamo's per-function and total recompile limits raised for the bench (names differ across torch)."""
    cfg = torch._dynamo.config
    limits = {}
    pairs = (("recompile_limit", "cache_size_limit"), ("accumulated_recompile_limit", "accumulated_cache_size_limit"))
    for names in pairs:
        name = next((n for n in names if hasattr(cfg, n)), None)
        if name is not None:
            limits[name] = RECOMPILE_LIMIT
    return cfg.patch(limits)


# ------------------------------------------------------------------------------------------------
# W4A16
# ------------------------------------------------------------------------------------------------

def _bench_w4a16(fam, opts, device, target, timer, ceil, rows, compile_rows, progress) -> None:
    """Every shape of opts.shapes, in order; one shape's failure becomes an error row and never loses the others."""
    for shape in opts.shapes:
        try:
            with _recompile_limits():
                _w4a16_shape(fam, opts, shape, device, target, timer, ceil, rows, compile_rows, progress)
        except Exception as ex:  # noqa: BLE001
            rows.append(_row(fam.name, "*", shape.name, None, shape.N, shape.K, "error",
                             f"{type(ex).__name__}: {ex}; {traceback.format_exc(limit=3)}"))
        progress()


def _sets(first, nbytes: int, l2: int, reload=None) -> list:
    """`first` and enough copies that one pass over them is >= L2_ROTATION_FACTOR x L2: clones, or `reload()`
    where the operands cannot be copied (a module with state deepcopy refuses)."""
    n = bench.rotation_sets(nbytes, l2) if nbytes > 0 else 1  # no tensors found: nothing to rotate
    try:
        return [first] + [_clone(first) for _ in range(n - 1)]
    except Exception:  # noqa: BLE001 - copying failed: load fresh operands instead (or report the load error)
        if reload is None:
            raise
        return [first] + [reload() for _ in range(n - 1)]


class _Baseline:
    """A plain-torch baseline row: a function of x over rotating operand sets, gated with declared act-dtype
    numerics; `compiled` counts the dynamo graphs each M's first call compiles (a static-M call must compile one:
    none means dynamo ran it eagerly)."""

    def __init__(self, name: str, fn, sets: list, nbytes, compiled: str | None = None):
        self.name, self.fn, self.sets, self.nbytes, self.compiled = name, fn, sets, nbytes, compiled
        self.compile_s: float | None = None  # dynamic: the one compile at prefill M, per shape
        self.error: str | None = None  # why fn is None


def _w4a16_baselines(fam, opts, shape, w, ckpt, W64, device, l2) -> list[_Baseline]:
    """dense F.linear on the dequantized weight (rounded once to the act dtype), and torch.compile of
    gptq_dequant_linear on the checkpoint's own qweight [K/8, N] and scales, static M and dynamic M."""
    out = []
    act = torch_dtype(opts.dtype)
    if "dense" in opts.baselines:
        wd = W64.to(act).t().contiguous()  # [N, K]: the layer in the act dtype, as a model holds it
        out.append(_Baseline(f"dense_{opts.dtype}", bench.dense_linear,
                             _sets((wd,), wd.numel() * wd.element_size(), l2), bench.dense_bytes))
    if "compile" in opts.baselines:
        qw, sc = ckpt.tensors["qweight"].to(device), ckpt.tensors["scales"].to(device)
        sets = _sets((qw, sc), qw.numel() * 4 + sc.numel() * sc.element_size(), l2)
        bias = w.wtype.bias
        torch._dynamo.reset()  # graphs of earlier shapes are dead weight in every guard check

        def user_fn(x, qweight, scales):  # what a user compiles: the layer's forward over its own tensors
            return bench.gptq_dequant_linear(x, qweight, scales, w.gs, bias)

        static = torch.compile(user_fn, dynamic=False, fullgraph=True, backend=opts.compile_backend)
        dyn = torch.compile(user_fn, fullgraph=True, backend=opts.compile_backend)
        w4 = functools.partial(bench.w4a16_bytes, group_size=w.gs, has_zeros=False, act_bytes=act.itemsize)
        out.append(_Baseline(COMPILE_STATIC, static, sets, w4, compiled="static"))
        d = _Baseline(COMPILE_DYNAMIC, dyn, sets, w4, compiled="dynamic")
        x_pre = bench.bench_activations(fam.bench_prefill_m, shape.K, act, opts.seed + 98, device)
        torch._dynamo.mark_dynamic(x_pre, 0)  # M symbolic: one graph for every M a server sees
        t0 = time.perf_counter()
        try:
            dyn(x_pre, *sets[0])
            _sync(device)
            d.compile_s = round(time.perf_counter() - t0, 2)
        except Exception as ex:  # noqa: BLE001 - reported on every M's row
            d.fn, d.error = None, f"compile at prefill M={fam.bench_prefill_m} failed: {_err(ex)}"
        out.append(d)
    return out


def _w4a16_shape(fam, opts, shape: bench.Shape, device, target, timer, ceil, rows, compile_rows, progress) -> None:
    from conformance.checks.tolerance import l2_bound
    from references import codecs
    from references.weight import CanonicalWeight

    act = torch_dtype(opts.dtype)
    N, K = shape.N, shape.K
    ms = shape.ms or opts.ms
    # the bench's one point of the family's config space
    config, = fam.config_space({"N": N, "K": K}, weight_type=(W4A16_WTYPE,), group_size=(bench.W4A16_GROUP,),
                               act_order=(False,), dtype=(opts.dtype,), format=(W4A16_FORMAT,))
    t0 = time.perf_counter()
    wd = bench.bench_weight(K, N, bench.W4A16_GROUP, W4A16_WTYPE, act, opts.seed, device)
    W64 = wd.dequantize(torch.float64)  # the reference weight, built where it is used
    w = CanonicalWeight(wd.q.cpu(), wd.scales.cpu(), None, None, wd.group_size, wd.wtype)
    del wd
    ckpt = codecs.encode(w, W4A16_FORMAT)
    _say(opts, f"[{fam.name} {shape.name}] weight built in {time.perf_counter() - t0:.1f} s")
    kernels, skipped = _kernels(opts, fam.name, config, target)
    rows += [dict(r, shape=shape.name, N=N, K=K) for r in skipped]
    l2 = _l2_bytes(device)
    loaded = {}
    for k in kernels:
        try:
            def reload(k=k):
                return _move(guard.call(k, "load", ckpt, _ctx(k, target, device), config), device)

            ops = reload()
            loaded[k.name] = (k, _sets(ops, _nbytes(ops), l2, reload))
        except Exception as ex:  # noqa: BLE001
            rows.append(_row(fam.name, k.name, shape.name, None, N, K, "error", f"load failed: {_err(ex)}"))
    baselines = _w4a16_baselines(fam, opts, shape, w, ckpt, W64, device, l2)

    for M in ms:
        x = bench.bench_activations(M, K, act, opts.seed + M, device)
        y_ref = x.double() @ W64
        S = x.double().abs() @ W64.abs()
        R = l2_bound(x, W64)
        xs_cache: dict[int, list] = {}

        def xs(n, x=x, cache=xs_cache):  # one activation tensor per operand set: x rotates with the weights
            if n not in cache:
                cache[n] = [x] + [x.clone() for _ in range(n - 1)]
            return cache[n]

        nbytes = bench.w4a16_bytes(M, N, K, bench.W4A16_GROUP, has_zeros=False, act_bytes=act.itemsize)
        flops = 2.0 * M * N * K
        for name, (k, sets) in loaded.items():
            row = _row(fam.name, name, shape.name, M, N, K, "ok")
            try:
                y = guard.call(k, "apply", sets[0], x, _ctx(k, target, device), mode="device")  # gated once, guarded
                _sync(device)
                gate = bench.gate_w4a16(k, config, y, y_ref, S, R, K, act)
            except Exception as ex:  # noqa: BLE001
                rows.append(dict(row, status="error", detail=_err(ex)))
                continue
            row.update(gate=gate.detail, gate_metrics=gate.metrics)
            if not gate.ok:
                rows.append(dict(row, status="wrong", detail=f"output fails the statistical tier: {gate.detail}"))
                _say(opts, f"[{fam.name} {shape.name} M={M}] {name}: WRONG -- {gate.detail}")
                continue
            xl = xs(len(sets))
            ctx = _ctx(k, target, device)
            calls = [lambda o=o, xx=xx, k=k, ctx=ctx: kernel_call(k, o, xx, ctx) for o, xx in zip(sets, xl)]
            if k.launch_config() is not None:
                row["tiles"] = k.launch_config()
            rows.append(_timed_row(row, timer, calls, calls, nbytes, flops, ceil))
            _say(opts, f"[{fam.name} {shape.name} M={M}] {name}: {rows[-1].get('graph_us')} us graph, "
                       f"{rows[-1].get('eager_us')} us eager, {rows[-1].get('roofline_frac')} of roofline")
        for b in baselines:
            rows.append(_baseline_row(fam, opts, shape, b, M, x, xs, y_ref, S, R, config, act, flops, timer, ceil,
                                      device))
        progress()
    if opts.compile_boundary and (opts.compile_boundary_shapes is None or shape.name in opts.compile_boundary_shapes):
        for k, sets in loaded.values():
            if k.op is not None:
                compile_rows += _compile_boundary(opts, k, sets, shape.name, K, act, device, timer)


def _baseline_row(fam, opts, shape, b: _Baseline, M, x, xs, y_ref, S, R, config, act, flops, timer, ceil,
                  device) -> dict:
    """One baseline at one M: its first call (which compiles a static-M graph) gated, then timed."""
    row = _row(fam.name, b.name, shape.name, M, shape.N, shape.K, "ok", baseline=True)
    if b.compiled:
        row["compile"] = b.compiled
    if b.fn is None:
        return dict(row, status="error", detail=b.error)
    before, t0 = (_dynamo_graphs() if b.compiled else 0), time.perf_counter()
    try:
        y = b.fn(x, *b.sets[0])
        _sync(device)
    except Exception as ex:  # noqa: BLE001
        return dict(row, status="error", detail=_err(ex))
    if b.compiled:
        new = _dynamo_graphs() - before
        row.update(graphs_compiled=new, first_call_s=round(time.perf_counter() - t0, 2))
        if b.compile_s is not None:
            row["compile_s"] = b.compile_s
        if b.compiled == "static" and new != 1:
            return dict(row, status="error", detail=f"torch.compile(dynamic=False) compiled {new} graphs at the first "
                                                    f"call with M={M}, expected 1 (a recompile limit runs it eagerly)")
    gate = bench.gate_w4a16(bench.PlainDequantDeclared(), config, y, y_ref, S, R, shape.K, act)
    row.update(gate=gate.detail, gate_metrics=gate.metrics)
    if not gate.ok:
        return dict(row, status="wrong", detail=f"output fails the statistical tier: {gate.detail}")
    calls = [lambda ops=ops, xx=xx: b.fn(xx, *ops) for ops, xx in zip(b.sets, xs(len(b.sets)))]
    out = _timed_row(row, timer, calls, calls, b.nbytes(M, shape.N, shape.K), flops, ceil)
    _say(opts, f"[{fam.name} {shape.name} M={M}] {b.name}: {out.get('graph_us')} us graph")
    return out


def _compile_boundary(opts, k, sets, shape_name, width, act, device, timer) -> list[dict]:
    """Compile apply() at a prefill M with M dynamic, then call the compiled graph at decode M (as a server
    does); time it against the eager op at the same M. Flags compiled/eager > COMPILE_FLAG_RATIO."""
    from conformance.checks.contracts import apply_fn, compile_with_inductor, inductor_dirs, tensor_leaves

    inductor_dirs()
    out = []
    pre_m = get_family(k.family).bench_prefill_m
    gen = torch.Generator().manual_seed(opts.seed + 99)
    x_pre = (torch.randn((pre_m, width), generator=gen)).to(act).to(device)
    f = apply_fn(k, sets[0])
    leaves = tensor_leaves(sets[0])
    try:
        _, cc = compile_with_inductor(f, [x_pre, *leaves])
    except Exception as ex:  # noqa: BLE001
        return [{"kernel": k.name, "shape": shape_name, "status": "error",
                 "detail": f"compile failed: {type(ex).__name__}: {str(ex)[:300]}"}]
    for m in COMPILE_DECODE:
        row = {"kernel": k.name, "shape": shape_name, "prefill_m": pre_m, "decode_m": m,
               "compile_s": round(cc.seconds, 2)}
        try:
            xs = [(torch.randn((m, width), generator=gen)).to(act).to(device) for _ in sets]
            fs = [apply_fn(k, o) for o in sets]
            eager_calls = [lambda fo=fo, xx=xx, o=o: fo(xx, *tensor_leaves(o)) for fo, xx, o in zip(fs, xs, sets)]
            comp_calls = [lambda xx=xx, o=o: cc.call_without_guards([x_pre, *leaves], [xx, *tensor_leaves(o)])
                          for xx, o in zip(xs, sets)]
            ye, yc = eager_calls[0](), comp_calls[0]()
            same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in
                       zip(ye if isinstance(ye, tuple) else (ye,), yc if isinstance(yc, tuple) else (yc,)))
            te, tc = timer.graph(eager_calls), timer.graph(comp_calls)
            ratio = tc.median_us / te.median_us if te.median_us > 0 else None
            row.update(status="ok" if same else "wrong", eager_us=round(te.median_us, 3),
                       compiled_us=round(tc.median_us, 3), ratio=round(ratio, 4) if ratio else None,
                       flagged=bool(ratio and ratio > COMPILE_FLAG_RATIO),
                       detail="" if same else "compiled output differs from eager (bitwise)")
        except Exception as ex:  # noqa: BLE001
            row.update(status="error", detail=f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}")
        out.append(row)
        _say(opts, f"[compile {k.name} {shape_name} M={m}] {row.get('status')} ratio {row.get('ratio')}")
    return out


# ------------------------------------------------------------------------------------------------
# FP8 group quant
# ------------------------------------------------------------------------------------------------

def _bench_fp8_group_quant(fam, opts, device, target, timer, ceil, rows, compile_rows, progress) -> None:
    """Every token count of opts.fp8_tokens at one hidden size; a failure becomes one error row."""
    if not opts.fp8_tokens:
        return
    try:
        _fp8(fam, opts, device, target, timer, ceil, rows, compile_rows)
    except Exception as ex:  # noqa: BLE001
        rows.append(_row(fam.name, "*", "", None, opts.fp8_hidden, bench.FP8_GROUP, "error",
                         f"{type(ex).__name__}: {ex}; {traceback.format_exc(limit=3)}"))


def _fp8(fam, opts, device, target, timer, ceil, rows, compile_rows) -> None:
    hidden, group = opts.fp8_hidden, bench.FP8_GROUP
    # the bench's one point of the family's config space
    config, = fam.config_space({"hidden": hidden}, group_size=(group,), dtype=("bfloat16",),
                               fp8_dtype=("float8_e4m3fn",), ue8m0=(False,), column_major_scales=(False,))
    kernels, skipped = _kernels(opts, fam.name, config, target)
    rows += [dict(r, shape=f"{hidden}/g{group}", N=hidden, K=group) for r in skipped]
    params = {k.name: guard.call(k, "load", config, _ctx(k, target, device)) for k in kernels}
    native = next((k for k in kernels if k.name == "fp8_group_quant_native"), None)
    l2 = _l2_bytes(device)
    for T in opts.fp8_tokens:
        gen = torch.Generator().manual_seed(opts.seed + T)
        x = (torch.randn((T, hidden), generator=gen) * 3).to(torch.bfloat16)
        nbytes = bench.fp8_quant_bytes(T, hidden, group, 2)
        n_sets = bench.rotation_sets(nbytes, l2)
        xs = [x.to(device)] + [x.to(device) for _ in range(n_sets - 1)]
        todo = [(k.name, k, (lambda xx, k=k: kernel_call(k, params[k.name], xx, _ctx(k, target, device))), False)
                for k in kernels]
        if native is not None and "compile" in opts.baselines:
            fn = torch.compile(lambda xx: native.apply(params[native.name], xx), dynamic=False)
            todo.append((f"{native.name}+compile", native, fn, True))
        for name, k, fn, is_base in todo:
            row = _row(fam.name, name, f"{hidden}/g{group}", T, hidden, group, "ok", baseline=is_base)
            try:
                out = fn(xs[0])
                _sync(device)
                gate = bench.gate_fp8(k, x, out, group, config.fp8_dtype, params=params[k.name])
            except Exception as ex:  # noqa: BLE001
                rows.append(dict(row, status="error", detail=f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"))
                continue
            row.update(gate=gate.detail, gate_metrics=gate.metrics)
            if not gate.ok:
                rows.append(dict(row, status="wrong", detail=gate.detail))
                continue
            calls = [lambda xx=xx, fn=fn: fn(xx) for xx in xs]
            rows.append(_timed_row(row, timer, calls, calls, nbytes, 0.0, ceil))
            _say(opts, f"[fp8 T={T}] {name}: {rows[-1].get('graph_us')} us, {rows[-1].get('roofline_frac')} of copy bw")
    if opts.compile_boundary:
        for k in kernels:
            if k.op is not None:
                compile_rows += _compile_boundary(opts, k, [params[k.name]], f"{hidden}/g{group}", hidden,
                                                  torch.bfloat16, device, timer)


# ------------------------------------------------------------------------------------------------

def run(opts: Options, device="cuda", timer=None, ceilings: dict | None = None, on_progress=None) -> dict:
    """The whole benchmark; `ceilings` ({"copy_gbps", "peak_tflops"}) are measured when not given.
    `on_progress(report)` is called with the report so far after each M of each shape (a killed run keeps them)."""
    registry.load_all()
    if "gemlite" in opts.baselines:
        _load_gemlite()
    target = detect_target() if torch.device(device).type == "cuda" else Target("cpu")
    timer = timer or bench.CudaTimer()
    env = environment(device)
    if ceilings is None:
        cb = bench.copy_bandwidth_gbps(device)
        ceilings = {"copy_gbps": round(cb["gbps"], 1), "torch_copy_gbps": round(cb["torch_copy_gbps"], 1),
                    "peak_tflops": round(bench.matmul_peak_tflops(device), 1)}
        _say(opts, f"ceilings: SM copy {ceilings['copy_gbps']} GB/s (torch copy_ {ceilings['torch_copy_gbps']}), "
                   f"fp16 matmul {ceilings['peak_tflops']} TFLOP/s")
    rows: list[dict] = []
    compile_rows: list[dict] = []
    t0 = time.perf_counter()

    def report(done: bool) -> dict:
        from conformance_bench.bench_report import evaluate_targets

        _add_speedups(rows)
        rep = {"environment": env, "ceilings": ceilings, "options": _opts_dict(opts), "rows": rows,
               "compile_boundary": compile_rows, "wall_s": round(time.perf_counter() - t0, 1), "complete": done}
        rep["targets"] = evaluate_targets(rep)
        return rep

    def progress():
        if on_progress is not None:
            on_progress(report(False))

    fams = sorted((f for f in all_families() if f.name in opts.families), key=lambda f: opts.families.index(f.name))
    for fam in fams:
        flow = globals().get(f"_bench_{fam.name}")  # each family's bench flow: `_bench_<family name>` here
        if flow is None:
            rows.append(_row(fam.name, "*", "", None, None, None, "error", "no bench flow for this family"))
            continue
        flow(fam, opts, device, target, timer, ceilings, rows, compile_rows, progress)
    return report(True)


def _load_gemlite() -> None:
    """GemLite's adapter as a plugin: its kernel, or the gate-only stand-in that says why GemLite cannot run here."""
    registry.load_plugin(GEMLITE_PLUGIN)
    if GEMLITE_KERNEL not in {k.name for k in registry.all_kernels()}:  # loaded earlier, then unregistered
        sys.modules[GEMLITE_PLUGIN].register()


def _add_speedups(rows: list[dict]) -> None:
    """speedup_vs_dense = dense graph time / row graph time, same shape and M, same run."""
    dense = {(r["shape"], r["M"]): r["graph_us"] for r in rows
             if r["kernel"].startswith("dense_") and r.get("graph_us")}
    for r in rows:
        d = dense.get((r.get("shape"), r.get("M")))
        if d and r.get("graph_us") and not r["kernel"].startswith("dense_"):
            r["speedup_vs_dense"] = round(d / r["graph_us"], 3)


def _opts_dict(opts: Options) -> dict:
    return {"kernels": opts.kernels, "shapes": [s.name + (f"@M{list(s.ms)}" if s.ms else "") for s in opts.shapes],
            "ms": list(opts.ms), "dtype": opts.dtype, "fp8_tokens": list(opts.fp8_tokens),
            "fp8_hidden": opts.fp8_hidden, "baselines": list(opts.baselines),
            "compile_boundary": opts.compile_boundary,
            "compile_boundary_shapes": opts.compile_boundary_shapes and list(opts.compile_boundary_shapes),
            "families": list(opts.families), "seed": opts.seed}
