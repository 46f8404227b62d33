"""One benchmark run: every runnable kernel x shape x M, each output gated against the reference before it
is timed, with dense and torch.compile baselines and the compile-boundary check, into one report dict.

    run(opts, device="cuda", timer=None) -> report

The timer and device are parameters so the whole flow (gate, rows, report) runs on a CPU with a fake
timer in the tests; on a GPU the timer is bench.CudaTimer.
"""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from conformance_bench import bench

from conformance.core import registry
from conformance.core.dtypes import torch_dtype
from conformance.core.kernel import RunContext, kernel_call, kernel_load
from conformance.core.targets import Target, detect_target
from conformance.families import all_families, get_family

ROOT = Path(__file__).resolve().parent.parent
W4A16_WTYPE, W4A16_FORMAT = "uint4b8", "gptq_v2"
COMPILE_DECODE = (1, 16)
COMPILE_FLAG_RATIO = 1.05
BASELINES = ("dense", "compile")


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
    families: tuple = registry.FAMILIES
    seed: int = 0
    log: object = sys.stderr


def _say(opts, msg: str) -> None:
    print(msg, file=opts.log, flush=True)


def _move(obj, device):
    from conformance.checks.contracts import replace_leaves, tensor_leaves

    return replace_leaves(obj, [t.to(device) for t in tensor_leaves(obj)])


def _clone(obj):
    from conformance.checks.contracts import replace_leaves, tensor_leaves

    return replace_leaves(obj, [t.clone() for t in tensor_leaves(obj)])


def _nbytes(obj) -> int:
    from conformance.checks.contracts import tensor_leaves

    return sum(t.numel() * t.element_size() for t in tensor_leaves(obj))


def _l2_bytes(device) -> int:
    if torch.device(device).type != "cuda":
        return 0  # no cache to defeat: one operand set
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def source_digest() -> str:
    """sha256 over the kernel and bench sources: identifies the code even where .git did not travel."""
    h = hashlib.sha256()
    for p in sorted([*ROOT.glob("kernels/*.py"), *ROOT.glob("benchmarks/bench*.py")]):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def environment(device) -> dict:
    """Device, versions and code identity recorded with every run."""
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
           "commit": os.environ.get("CONFORMANCE_COMMIT") or git_commit(), "source_digest": source_digest(),
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node()}
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
    """(kernels to run, rows for the kernels that cannot) for one config; refusals carry their reason."""
    names = opts.kernels
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
    """Fill a row's graph/eager medians and roofline figures (errors in timing become status 'error')."""
    try:
        g = timer.graph(calls_graph)
        e = timer.eager(calls_eager)
    except Exception as ex:  # noqa: BLE001 - a launch failure is a result, reported with the row
        row.update(status="error", detail=f"timing failed: {type(ex).__name__}: {' '.join(str(ex).split())[:300]}")
        return row
    floor = bench.roofline_us(nbytes, flops, ceil["copy_gbps"], ceil.get("peak_tflops"))
    row.update(graph_us=round(g.median_us, 3), eager_us=round(e.median_us, 3),
               graph=g.to_dict(), eager=e.to_dict(), bytes=nbytes, flops=flops, roofline_us=round(floor, 3),
               roofline_frac=round(floor / g.median_us, 4) if g.median_us > 0 else None,
               gbps=round(nbytes / (g.median_us * 1e3), 1), tflops=round(flops / (g.median_us * 1e6), 2),
               launch_overhead_us=round(e.median_us - g.median_us, 3))
    return row


# ------------------------------------------------------------------------------------------------
# W4A16
# ------------------------------------------------------------------------------------------------

def _bench_w4a16(fam, opts, device, target, timer, ceil, rows, compile_rows, progress) -> None:
    """Every shape of opts.shapes; one shape's failure becomes an error row and never loses the others."""
    for shape in opts.shapes:
        try:
            _w4a16_shape(fam, opts, shape, device, target, timer, ceil, rows, compile_rows)
        except Exception as ex:  # noqa: BLE001
            rows.append(_row(fam.name, "*", shape.name, None, shape.N, shape.K, "error",
                             f"{type(ex).__name__}: {ex}; {traceback.format_exc(limit=3)}"))
        progress()


def _w4a16_shape(fam, opts, shape: bench.Shape, device, target, timer, ceil, rows, compile_rows) -> None:
    from conformance.checks.tolerance import l2_bound
    from references import codecs
    from references.codecs import operands as codec_ops
    from references.generators import random_activations, random_canonical
    from references.scalar_types import scalar_type

    act = torch_dtype(opts.dtype)
    N, K = shape.N, shape.K
    ms = shape.ms or opts.ms
    # the bench's one point of the family's config space
    config, = fam.config_space({"N": N, "K": K}, weight_type=(W4A16_WTYPE,), group_size=(bench.W4A16_GROUP,),
                               act_order=(False,), dtype=(opts.dtype,), format=(W4A16_FORMAT,))
    t0 = time.perf_counter()
    w = random_canonical(K, N, bench.W4A16_GROUP, W4A16_WTYPE, act, "normal", opts.seed)
    ckpt = codecs.encode(w, W4A16_FORMAT)
    W64 = w.dequantize(torch.float64).to(device)
    _say(opts, f"[{fam.name} {shape.name}] weight built in {time.perf_counter() - t0:.1f} s")
    kernels, skipped = _kernels(opts, fam.name, config, target)
    rows += [dict(r, shape=shape.name, N=N, K=K) for r in skipped]
    l2 = _l2_bytes(device)
    loaded = {}
    for k in kernels:
        try:
            ops = _move(kernel_load(k, ckpt, _ctx(k, target, device), config), device)
            n_sets = bench.rotation_sets(_nbytes(ops), l2)
            loaded[k.name] = (k, [ops] + [_clone(ops) for _ in range(n_sets - 1)])
        except Exception as ex:  # noqa: BLE001
            rows.append(_row(fam.name, k.name, shape.name, None, N, K, "error",
                             f"load failed: {type(ex).__name__}: {ex}"))
    dense = None
    if "dense" in opts.baselines:
        gen = torch.Generator().manual_seed(opts.seed + 17)
        w16 = (torch.randn((K, N), generator=gen) * 0.02).to(act).to(device)
        n_sets = bench.rotation_sets(w16.numel() * w16.element_size(), l2)
        dense = [w16] + [w16.clone() for _ in range(n_sets - 1)]
    plain = []  # (row name, fn) of the plain-torch dequant + matmul baseline and its torch.compile
    if "compile" in opts.baselines:
        b_q = codec_ops.triton_pack_qweight(w.q).to(device)
        n_sets = bench.rotation_sets(b_q.numel() * 4 + w.scales.numel() * 2, l2)
        psets = [(b_q, w.scales.to(device))]
        psets += [(t[0].clone(), t[1].clone()) for t in psets * (n_sets - 1)]
        bias = scalar_type(W4A16_WTYPE).bias
        compiled = torch.compile(bench.plain_dequant_matmul, dynamic=True)  # one compile per shape, any M
        plain = [(name, [lambda xx, o=o, f=f: f(xx, o[0], o[1], bench.W4A16_GROUP, bias) for o in psets])
                 for name, f in (("dequant_matmul", bench.plain_dequant_matmul), ("dequant_matmul+compile", compiled))]

    for M in ms:
        x = random_activations(M, K, act, "normal", opts.seed + M).to(device)
        y_ref = x.double() @ W64
        S = x.double().abs() @ W64.abs()
        R = l2_bound(x, W64)
        xs_cache: dict[int, list] = {}

        def xs(n, x=x, cache=xs_cache):  # one activation tensor per operand set: x rotates with the weights
            if n not in cache:
                cache[n] = [x] + [x.clone() for _ in range(n - 1)]
            return cache[n]

        nbytes = bench.w4a16_bytes(M, N, K, bench.W4A16_GROUP, has_zeros=False, act_bytes=2)
        flops = 2.0 * M * N * K
        for name, (k, sets) in loaded.items():
            row = _row(fam.name, name, shape.name, M, N, K, "ok")
            try:
                y = kernel_call(k, sets[0], x, _ctx(k, target, device))
                _sync(device)
                gate = bench.gate_w4a16(k, config, y, y_ref, S, R, K, act)
            except Exception as ex:  # noqa: BLE001
                rows.append(dict(row, status="error", detail=f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"))
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
        if dense is not None:
            xl = xs(len(dense))
            calls = [lambda wd=wd, xx=xx: torch.matmul(xx, wd) for wd, xx in zip(dense, xl)]
            row = _row(fam.name, f"dense_{opts.dtype}", shape.name, M, N, K, "ok", baseline=True)
            rows.append(_timed_row(row, timer, calls, calls, bench.dense_bytes(M, N, K), flops, ceil))
        for name, fns in plain:
            row = _row(fam.name, name, shape.name, M, N, K, "ok", baseline=True)
            try:
                gate = bench.gate_w4a16(bench.PlainDequantDeclared(), config, fns[0](x), y_ref, S, R, K, act)
                row.update(gate=gate.detail, gate_metrics=gate.metrics)
                if gate.ok:
                    calls = [lambda f=f, xx=xx: f(xx) for f, xx in zip(fns, xs(len(fns)))]
                    rows.append(_timed_row(row, timer, calls, calls, nbytes, flops, ceil))
                else:
                    rows.append(dict(row, status="wrong", detail=gate.detail))
            except Exception as ex:  # noqa: BLE001
                rows.append(dict(row, status="error", detail=f"{type(ex).__name__}: {str(ex)[:300]}"))
    if opts.compile_boundary:
        for k, sets in loaded.values():
            if k.op is not None:
                compile_rows += _compile_boundary(opts, k, sets, shape.name, K, act, device, timer)


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
    params = {k.name: kernel_load(k, config, _ctx(k, target, device)) for k in kernels}
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
    `on_progress(report)` is called with the report so far after each shape (a killed run keeps them)."""
    registry.load_all()
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

    for fam in all_families():
        if fam.name not in opts.families:
            continue
        flow = globals().get(f"_bench_{fam.name}")  # each family's bench flow: `_bench_<family name>` here
        if flow is None:
            rows.append(_row(fam.name, "*", "", None, None, None, "error", "no bench flow for this family"))
            continue
        flow(fam, opts, device, target, timer, ceilings, rows, compile_rows, progress)
    return report(True)


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
            "compile_boundary": opts.compile_boundary, "families": list(opts.families), "seed": opts.seed}
