"""The bench command and its machinery on a CPU: the no-GPU exit, shape/M parsing, the roofline bytes model,
the whole run with a fake timer (Triton kernels in the interpreter at tiny shapes; on a GPU machine on the GPU,
where the kernels compile: tests/unit/devices.py), the correctness gate (a wrong kernel is reported wrong and never
timed), targets, and the JSON/markdown/PNG writers."""
from __future__ import annotations

import json

import pytest
import torch

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import bench, bench_report, bench_run, provenance  # noqa: E402

from conformance import cli  # noqa: E402
from conformance.core import registry  # noqa: E402
from references.errors import InvalidInput  # noqa: E402
from tests.unit.devices import DEV  # noqa: E402

registry.load_all()


# ------------------------------------------------------------------------------------------------
# command line

def test_no_gpu_exits_3_with_a_clear_message(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["bench", "--m", "decode"]) == bench.EXIT_NO_GPU == 3
    err = capsys.readouterr().err
    assert "no GPU" in err and "nothing was measured" in err


def test_bad_arguments_exit_2_before_the_gpu_question(capsys):
    assert cli.main(["bench", "--shapes", "4096x"]) == 2
    assert "--shapes" in capsys.readouterr().err
    assert cli.main(["bench", "--baselines", "cublas"]) == 2
    assert cli.main(["bench", "--kernels", "nope"]) == 2
    assert cli.main(["bench", "--shapes", "issue", "--compile-boundary-shapes", "8192x8192"]) == 2
    assert "--compile-boundary-shapes='8192x8192'" in capsys.readouterr().err
    assert cli.main(["bench", "--eager-reps", "1"]) == 2 and cli.main(["bench", "--budget-s", "0"]) == 2


def test_parse_shapes_and_ms():
    s = bench.parse_shapes("issue,14336x4096,8x1024x512")
    assert [(x.N, x.K, x.ms) for x in s] == [(4096, 4096, ()), (14336, 4096, ()), (4096, 14336, ()), (1024, 512, (8,))]
    assert len(bench.parse_shapes("llama3-70b")) == 4
    assert bench.parse_ms("decode,3") == (1, 2, 3, 4, 8, 16, 32, 64)
    assert bench.parse_ms("prefill")[-1] == 4096
    with pytest.raises(InvalidInput, match="--shapes"):
        bench.parse_shapes("llama9")
    with pytest.raises(InvalidInput, match="--m"):
        bench.parse_ms("0")


# ------------------------------------------------------------------------------------------------
# roofline model

def test_w4a16_bytes_matches_the_issue_roofline():
    # issue: 4096x4096 and 14336x4096 at M=1 are 2.1 us and 7.3 us at ~4270 GB/s
    b1 = bench.w4a16_bytes(1, 4096, 4096)
    assert b1 == 4096 * 4096 // 2 + 32 * 4096 * 2 + 4096 * 2 + 4096 * 2
    assert round(bench.roofline_us(b1, 0, 4270), 1) == 2.0
    assert round(bench.roofline_us(bench.w4a16_bytes(1, 14336, 4096), 0, 4270), 1) == 7.1
    assert bench.w4a16_bytes(1, 64, 256, has_zeros=True) - bench.w4a16_bytes(1, 64, 256) == 2 * 64 // 2
    assert bench.w4a16_bytes(1, 64, 256, group_size=-1) == 256 * 64 // 2 + 64 * 2 + 256 * 2 + 64 * 2


def test_roofline_takes_the_larger_of_memory_and_compute():
    flops = 2.0 * 4096 * 4096 * 4096
    mem = bench.roofline_us(bench.dense_bytes(4096, 4096, 4096), 0, 4000)
    both = bench.roofline_us(bench.dense_bytes(4096, 4096, 4096), flops, 4000, 800)
    assert both == pytest.approx(flops / 800e6) and both > mem
    assert bench.fp8_quant_bytes(8192, 7168) == 8192 * 7168 * 3 + 8192 * 56 * 4
    with pytest.raises(InvalidInput, match="copy_gbps"):
        bench.roofline_us(1, 0, 0)


def test_rotation_sets_cover_l2_and_respect_caps():
    assert bench.rotation_sets(8 << 20, 60 << 20) == 23
    assert bench.rotation_sets(200 << 20, 60 << 20) == 1
    assert bench.rotation_sets(1, 60 << 20) == bench.MAX_SETS


# ------------------------------------------------------------------------------------------------
# a whole run on the CPU with a fake timer

class FakeTimer:
    """Runs every call once (so the kernels really execute) and returns canned medians per kernel."""

    def __init__(self, us):
        self.us, self.calls = us, 0

    def _t(self, calls):
        for f in calls:
            f()
        self.calls += 1
        return bench.Timing(self.us, self.us, self.us, len(calls), 1)

    def graph(self, calls):
        return self._t(calls)

    def eager(self, calls):
        t = self._t(calls)
        return bench.Timing(t.median_us + 5, t.min_us + 5, t.max_us + 5, t.calls, 1)


CEIL = {"copy_gbps": 1.0, "peak_tflops": 1.0}  # slow ceilings: tiny problems get readable roofline times


def _opts(**kw):
    base = dict(kernels=["triton_w4a16", "torch_dequant_w4a16", "rdna3_w4a16"], shapes=[bench.Shape(64, 256, "tiny")],
                ms=(1, 3), baselines=("dense",), compile_boundary=False, families=("w4a16",), fp8_tokens=(),
                log=open("/dev/null", "w"))
    base.update(kw)
    return bench_run.Options(**base)


def test_cpu_run_gates_times_and_reports(tmp_path):
    partial, digest = [], provenance.kernel_digest()
    report = bench_run.run(_opts(), device=DEV, timer=FakeTimer(10.0), ceilings=CEIL,
                           on_progress=lambda rep: partial.append(json.loads(json.dumps(rep, default=str))))
    # after each M and after the shape: a run killed at its time limit keeps every finished M
    assert len(partial) == 3 and all(p["complete"] is False for p in partial) and report["complete"] is True
    assert [sorted({r["M"] for r in p["rows"] if r.get("graph_us")}) for p in partial] == [[1], [1, 3], [1, 3]]
    assert "PARTIAL" in bench_report.render_markdown(partial[0])
    rows = {(r["kernel"], r.get("M")): r for r in report["rows"]}
    assert rows[("triton_w4a16", 1)]["status"] == "ok"
    assert rows[("triton_w4a16", 1)]["gate_metrics"]["max_ratio"] <= 1
    r = rows[("triton_w4a16", 3)]
    assert r["graph_us"] == 10.0 and r["eager_us"] == 15.0 and r["launch_overhead_us"] == 5.0
    assert r["roofline_us"] == pytest.approx(bench.w4a16_bytes(3, 64, 256) / 1e3, abs=1e-3)
    assert r["roofline_frac"] == pytest.approx(r["roofline_us"] / 10.0, abs=1e-4)
    assert r["speedup_vs_dense"] == 1.0 and r["tiles"]["M"] == 3
    dense = rows[("dense_float16", 1)]  # F.linear on the dequantized weight: gated like any row
    assert dense["status"] == "ok" and dense["gate_metrics"]["max_ratio"] <= 1
    assert rows[("rdna3_w4a16", None)]["status"] == "refused" and "gfx1100" in rows[("rdna3_w4a16", None)]["detail"]
    env = report["environment"]
    assert env["source_digest"] and env["torch"] == torch.__version__
    assert env["kernel_digest"] == digest and env["commit"] and "clean" in env
    paths = bench_report.write(report, tmp_path / "b")
    assert [p.name for p in paths][:2] == ["bench.json", "bench.md"]
    assert json.loads(paths[0].read_text())["rows"]
    md = paths[1].read_text()
    assert "| 64x256 | 3 | triton_w4a16 | ok | 10.0 | 15.0 |" in md and "rdna3_w4a16" in md
    if len(paths) == 3:
        assert paths[2].read_bytes()[:4] == b"\x89PNG"


def test_a_fast_wrong_kernel_is_reported_wrong_not_fast(monkeypatch):
    k = registry.get_kernel("triton_w4a16")
    good = type(k).apply

    def off_by_a_bit(self, o, x):
        y = good(self, o, x)
        return y + y.abs().max() * 0.01  # 1% of the largest output: far outside the rounding model

    monkeypatch.setattr(type(k), "apply", off_by_a_bit)
    timer = FakeTimer(0.001)  # would be "fastest" by far
    report = bench_run.run(_opts(kernels=["triton_w4a16"], baselines=()), device=DEV, timer=timer, ceilings=CEIL)
    assert {r["status"] for r in report["rows"]} == {"wrong"}
    assert all("graph_us" not in r and "statistical tier" in r["detail"] for r in report["rows"])
    assert timer.calls == 0  # nothing timed
    gate = next(t for t in report["targets"] if "correctness gate" in t["target"])
    assert gate["ok"] is False and "triton_w4a16" in gate["detail"]
    assert "**wrong**" in bench_report.render_markdown(report)


def test_fp8_run_on_cpu_gates_each_kernel():
    opts = _opts(kernels=["fp8_group_quant_triton", "fp8_group_quant_native"], families=("fp8_group_quant",),
                 fp8_tokens=(3,), fp8_hidden=256, baselines=())
    report = bench_run.run(opts, device=DEV, timer=FakeTimer(2.0), ceilings=CEIL)
    ok = {r["kernel"]: r for r in report["rows"] if r["status"] == "ok"}
    assert set(ok) == {"fp8_group_quant_triton", "fp8_group_quant_native"}
    assert ok["fp8_group_quant_triton"]["gate_metrics"]["max_ratio"] <= 0.5  # correctly rounded
    assert ok["fp8_group_quant_triton"]["bytes"] == bench.fp8_quant_bytes(3, 256)


def test_fp8_gate_catches_a_wrong_scale():
    k = registry.get_kernel("fp8_group_quant_native")
    from conformance.families.config import Fp8QuantConfig

    p = k.load(Fp8QuantConfig(group_size=128, dtype="bfloat16", hidden=256))
    x = (torch.randn(4, 256, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    q, s = k.apply(p, x)
    assert bench.gate_fp8(k, x, (q, s), 128, "float8_e4m3fn").ok
    assert not bench.gate_fp8(k, x, (q, s * 1.001), 128, "float8_e4m3fn").ok


# ------------------------------------------------------------------------------------------------
# targets from fake rows

def _fake_report(dec_speedup, dec_frac, prefill_speedup):
    rows = []
    for shape in bench_report.TARGET_SHAPES:
        for M, sp, fr in ((1, dec_speedup, dec_frac), (16, dec_speedup, dec_frac), (4096, prefill_speedup, 0.5)):
            rows.append({"family": "w4a16", "kernel": "triton_w4a16", "shape": shape, "M": M, "status": "ok",
                         "graph_us": 10.0, "speedup_vs_dense": sp, "roofline_frac": fr})
    rows.append({"family": "fp8_group_quant", "kernel": "fp8_group_quant_triton", "shape": "7168/g128",
                 "M": 8192, "status": "ok", "graph_us": 50.0, "roofline_frac": 0.9})
    rows.append({"family": "fp8_group_quant", "kernel": "fp8_group_quant_native+compile", "shape": "7168/g128",
                 "M": 8192, "status": "ok", "graph_us": 40.0, "roofline_frac": 0.95})
    return {"rows": rows, "compile_boundary": [{"kernel": "triton_w4a16", "shape": "s", "decode_m": 1,
                                                "status": "ok", "ratio": 1.2, "flagged": True}]}


def test_targets_pass_and_fail_on_the_numbers():
    good = {t["target"]: t["ok"] for t in bench_report.evaluate_targets(_fake_report(3.5, 0.75, 1.1))}
    assert all(v for k, v in good.items() if "triton_w4a16 " in k)
    bad = bench_report.evaluate_targets(_fake_report(2.9, 0.75, 0.9))
    failed = [t["target"] for t in bad if t["ok"] is False]
    assert any("M<=16" in t for t in failed) and any("never slower" in t for t in failed)
    assert any("torch.compile" in t for t in failed)  # 50 us vs compiled 40 us
    assert any("compiled/eager" in t for t in failed)
    low_frac = bench_report.evaluate_targets(_fake_report(3.5, 0.6, 1.1))
    assert any(t["ok"] is False and "roofline" in t["target"] for t in low_frac)


# ------------------------------------------------------------------------------------------------
# the tile sweep's pure parts (its GPU loop needs a device)

def _sweep_module():
    import importlib.util
    from pathlib import Path

    p = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_triton_w4a16.py"
    spec = importlib.util.spec_from_file_location("sweep_triton_w4a16", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_choice_and_table_are_loadable_by_the_kernel():
    sw = _sweep_module()
    a, b = {"block_m": 16, "block_n": 64, "block_k": 128}, {"block_m": 64, "block_n": 128, "block_k": 64}
    res = [  # a wins at M=1 on both shapes; at M=4096 b is slower on one shape but a is invalid on the other
        {"M": 1, "N": 1, "K": 1, "config": a, "status": "ok", "us": 1.0},
        {"M": 1, "N": 2, "K": 1, "config": a, "status": "ok", "us": 2.0},
        {"M": 1, "N": 1, "K": 1, "config": b, "status": "ok", "us": 3.0},
        {"M": 1, "N": 2, "K": 1, "config": b, "status": "ok", "us": 1.9},
        {"M": 4096, "N": 1, "K": 1, "config": a, "status": "ok", "us": 1.0},
        {"M": 4096, "N": 2, "K": 1, "config": a, "status": "wrong"},
        {"M": 4096, "N": 1, "K": 1, "config": b, "status": "ok", "us": 2.0},
        {"M": 4096, "N": 2, "K": 1, "config": b, "status": "ok", "us": 2.0},
    ]
    chosen = sw.choose(res, (1, 4096))
    assert chosen[1]["config"] == a and chosen[4096]["config"] == b
    rows = sw.table_rows(chosen, (1, 4096))
    assert rows == [{"max_m": 1, **a}, {"max_m": None, **b}]
    assert sw.table_rows({1: chosen[1], 2: chosen[1], 8: chosen[4096]}, (1, 2, 8)) == \
        [{"max_m": 2, **a}, {"max_m": None, **b}]
    parsed = sw.tw.tile_rows_from_json({"table": rows})
    assert parsed[0][1].block_k == 128 and parsed[-1][0] is None


def test_sweep_candidates_and_exact_data(capsys):
    sw = _sweep_module()
    for M in sw.MS:
        cands = sw.candidates(M)
        assert cands[0] == sw.tw.table_tiles(M, "gpu") and len(cands) == len(set(cands)) <= 20
        assert all(c.use_dot for c in cands) or M <= 4  # the GEMV path only for tiny M
    assert sw.main(["--out", "unused", "--dry-run"]) == 0
    assert "dry run ok" in capsys.readouterr().out


def test_speedup_is_dense_time_over_kernel_time_same_shape_and_m():
    rows = [{"kernel": "dense_float16", "shape": "a", "M": 1, "graph_us": 30.0},
            {"kernel": "triton_w4a16", "shape": "a", "M": 1, "graph_us": 10.0},
            {"kernel": "triton_w4a16", "shape": "a", "M": 2, "graph_us": 10.0},
            {"kernel": "triton_w4a16", "shape": "b", "M": 1, "graph_us": 10.0}]
    bench_run._add_speedups(rows)
    assert rows[1]["speedup_vs_dense"] == 3.0
    assert "speedup_vs_dense" not in rows[0] and "speedup_vs_dense" not in rows[2] and "speedup_vs_dense" not in rows[3]


def test_slow_calls_get_fewer_repetitions_but_never_too_few():
    t = bench.CudaTimer()
    assert t._reps(50, 1e-4) == 50
    assert t._reps(50, bench.TIME_BUDGET_S / 10) == 10
    assert t._reps(50, 10.0) == bench.MIN_REPS
    assert bench.CudaTimer(budget_s=bench.TIME_BUDGET_S / 5)._reps(50, bench.TIME_BUDGET_S / 10) == bench.MIN_REPS


def test_gptq_dequant_linear_is_the_weight_it_claims():
    """The compiled baseline's user function reads GPTQ's own qweight exactly (exact-tier data: bit-exact)."""
    from references import codecs
    from references.gemm import reference_gemm
    from references.generators import random_activations, random_canonical

    w = random_canonical(256, 64, 64, "uint4b8", torch.float16, "exact", 5)
    x = random_activations(3, 256, torch.float16, "exact", 6)
    t = codecs.encode(w, "gptq_v2").tensors
    y = bench.gptq_dequant_linear(x, t["qweight"], t["scales"], 64, 8)
    assert torch.equal(y, reference_gemm(x, w).to(torch.float16))
    assert not torch.equal(bench.gptq_dequant_linear(x, t["qweight"], t["scales"], 64, 7), y)


def test_bench_weight_is_seeded_symmetric_and_never_zero_scaled():
    a = bench.bench_weight(256, 64, 128, "uint4b8", torch.float16, 3, "cpu")
    b = bench.bench_weight(256, 64, 128, "uint4b8", torch.float16, 3, "cpu")
    assert torch.equal(a.q, b.q) and torch.equal(a.scales, b.scales) and a.zeros is None
    assert int(a.q.min()) == 0 and int(a.q.max()) == 15 and bool((a.scales >= bench.SCALE_LO).all())
    with pytest.raises(InvalidInput, match="weight_type"):
        bench.bench_weight(256, 64, 128, "uint4", torch.float16, 3, "cpu")


# On a GPU the compiled baselines go through inductor, as the bench runs them there. On a CPU host inductor would
# generate and build C++ (tens of seconds cold on 2 cores) for graphs the bench never times
# there; aot_eager runs the same dynamo capture and AOT autograd trace without the code generation.
BASELINE_BACKEND = "inductor" if torch.cuda.is_available() else "aot_eager"


def test_compiled_baselines_through_a_real_backend_are_gated_and_timed():
    """The compiled baselines (inductor on a GPU, aot_eager on CPU), at M = 2: both gated, then timed."""
    report = bench_run.run(_opts(kernels=["triton_w4a16"], ms=(2,), baselines=("compile",),
                                 compile_backend=BASELINE_BACKEND), device=DEV, timer=FakeTimer(10.0), ceilings=CEIL)
    rows = {r["kernel"]: r for r in report["rows"]}
    for name in (bench_run.COMPILE_STATIC, bench_run.COMPILE_DYNAMIC):
        r = rows[name]
        assert r["status"] == "ok" and r["baseline"] and r["gate_metrics"]["max_ratio"] <= 1 and r["graph_us"], r


def test_static_m_compiles_per_m_and_dynamic_m_once_per_shape():
    """Static M compiles one graph at every new M; dynamic M, compiled once at prefill M before the M loop, serves
    every later M without compiling (graph counting is dynamo's, the same under any backend)."""
    report = bench_run.run(_opts(kernels=["triton_w4a16"], ms=(2, 3), baselines=("compile",), compile_backend="eager"),
                           device=DEV, timer=FakeTimer(10.0), ceilings=CEIL)
    rows = {(r["kernel"], r["M"]): r for r in report["rows"]}
    for M in (2, 3):
        st, dy = rows[(bench_run.COMPILE_STATIC, M)], rows[(bench_run.COMPILE_DYNAMIC, M)]
        assert st["status"] == dy["status"] == "ok"
        assert (st["compile"], st["graphs_compiled"]) == ("static", 1)
        assert (dy["compile"], dy["graphs_compiled"]) == ("dynamic", 0) and dy["compile_s"] > 0
    md = bench_report.render_markdown(report)
    assert "| static M, 1 graph compiled |" in md and "| dynamic M |" in md


def test_a_static_m_call_that_did_not_compile_is_an_error(monkeypatch):
    """dynamo runs a function eagerly once it hits its recompile limit (fullgraph or not, depending on the torch
    version: silently, or raising): a 'compiled' row must never time eager torch."""
    opts = _opts(kernels=["triton_w4a16"], ms=(2,), baselines=("compile",), compile_backend="eager")
    monkeypatch.setattr(bench_run, "RECOMPILE_LIMIT", 1)  # the dynamic graph already holds the one entry
    rows = {r["kernel"]: r for r in bench_run.run(opts, device=DEV, timer=FakeTimer(10.0), ceilings=CEIL)["rows"]}
    assert rows[bench_run.COMPILE_DYNAMIC]["status"] == "ok"
    assert rows[bench_run.COMPILE_STATIC]["status"] == "error" and "graph_us" not in rows[bench_run.COMPILE_STATIC]
    monkeypatch.undo()
    monkeypatch.setattr(bench_run, "_dynamo_graphs", lambda: 0)  # as if the call ran eagerly without a word
    rows = {r["kernel"]: r for r in bench_run.run(opts, device=DEV, timer=FakeTimer(10.0), ceilings=CEIL)["rows"]}
    st = rows[bench_run.COMPILE_STATIC]
    assert st["status"] == "error" and "compiled 0 graphs" in st["detail"] and "graph_us" not in st, st


def test_wrong_baselines_are_reported_wrong_not_timed(monkeypatch):
    """Layout bugs (K words read in reverse, N reversed) are caught; the baselines' declared act-dtype accumulation
    (torch may add split-K partials in fp16) is too loose for subtler ones, e.g. a zero point off by one."""
    real = bench.gptq_dequant_linear
    monkeypatch.setattr(bench, "gptq_dequant_linear", lambda x, q, s, g, z: real(x, q.flip(0), s, g, z))
    monkeypatch.setattr(bench, "dense_linear", lambda x, w: torch.nn.functional.linear(x, w.flip(0)))
    report = bench_run.run(_opts(kernels=["triton_w4a16"], ms=(2,), baselines=("dense", "compile"),
                                 compile_backend="eager"), device=DEV, timer=FakeTimer(10.0), ceilings=CEIL)
    rows = {r["kernel"]: r for r in report["rows"]}
    for name in ("dense_float16", bench_run.COMPILE_STATIC, bench_run.COMPILE_DYNAMIC):
        assert rows[name]["status"] == "wrong" and "graph_us" not in rows[name], (name, rows[name])
    assert rows["triton_w4a16"]["status"] == "ok"


def test_gemlite_is_benched_beside_ours_or_says_why_not():
    """The gemlite baseline loads the adapter as a plugin: a row for GemLite (refused with the import error here,
    where gemlite needs a GPU) and its state in the environment."""
    from conformance.core.registry import unregister_kernel

    try:
        report = bench_run.run(_opts(kernels=["triton_w4a16"], ms=(1,), baselines=("gemlite",)), device=DEV,
                               timer=FakeTimer(10.0), ceilings=CEIL)
    finally:
        unregister_kernel(bench_run.GEMLITE_KERNEL)  # other tests in this process count the registered kernels
    gl = [r for r in report["rows"] if r["kernel"] == bench_run.GEMLITE_KERNEL]
    env = report["environment"]["gemlite"]
    if env["unavailable"]:
        # refused with its reason: the import error, or, where gemlite is installed but needs a GPU to import (then
        # registered compile-only), its gate's refusal of this CPU target
        assert [r["status"] for r in gl] == ["refused"]
        assert gl[0]["detail"] == env["unavailable"] or gl[0]["detail"].startswith("target=cpu not supported"), gl
        assert "GemLite not timed: gemlite not importable" in bench_report.render_markdown(report)
    else:  # a machine where gemlite imports (a GPU host running the CPU tests)
        assert gl and env["version"]


def test_markdown_names_each_launch_path():
    """The table's path column says which kernel path served the row (the figures differ by path)."""
    from conformance_bench.bench_report import tile_path

    assert tile_path({"dequant_mm": True, "block_k": 64, "block_n": 128}) == "dequant_mm 64x128"
    assert tile_path({"use_dot": False, "block_m": 1, "block_n": 256, "block_k": 64, "split_k": 8}) == \
        "gemv 1x256x64 sk8"
    assert tile_path({"use_dot": True, "swap_ab": True, "magic": True, "block_m": 16, "block_n": 256,
                      "block_k": 64, "split_k": 1}) == "swap_ab+magic 16x256x64"
    assert tile_path(None) == ""
    report = bench_run.run(_opts(kernels=["triton_w4a16"], ms=(1,), baselines=()), device=DEV,
                           timer=FakeTimer(10.0), ceilings=CEIL)
    tiles = next(r["tiles"] for r in report["rows"] if r["kernel"] == "triton_w4a16")  # the launch that served M=1
    row = next(line for line in bench_report.render_markdown(report).splitlines() if "| triton_w4a16 | ok |" in line)
    assert tiles["M"] == 1 and row.rstrip().endswith(f"| {tile_path(tiles)} |"), row


def test_operand_sets_of_a_module_are_copies_or_fresh_loads():
    """GemLite's operands are a module: its rotation copies are deep copies (own storage), or fresh loads where
    deepcopy is refused, so L2 never holds the next call's weights."""
    lin = torch.nn.Linear(64, 64, bias=False)
    nbytes = bench_run._nbytes(lin)
    assert nbytes == 64 * 64 * 4
    sets = bench_run._sets(lin, nbytes, 64 * 64 * 4)  # L2 of one weight: 3 copies pass over 3x L2
    assert len(sets) == 3 and len({s.weight.data_ptr() for s in sets}) == 3
    assert all(torch.equal(s.weight, lin.weight) for s in sets)

    class NoCopy(torch.nn.Linear):
        def __deepcopy__(self, memo):
            raise TypeError("not copyable")

    loads = []
    nc = NoCopy(64, 64, bias=False)
    sets = bench_run._sets(nc, nbytes, 64 * 64 * 4, reload=lambda: loads.append(1) or NoCopy(64, 64, bias=False))
    assert len(sets) == 3 and len(loads) == 2
    with pytest.raises(TypeError, match="not copyable"):
        bench_run._sets(nc, nbytes, 64 * 64 * 4)
    assert bench_run._sets(object(), 0, 64) != []  # nothing to copy: one set
