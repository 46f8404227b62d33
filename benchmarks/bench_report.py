"""Writers for a bench report: JSON, a markdown table, a PNG plot (roofline fraction vs M per shape), and
the issue's performance targets evaluated on the report's own numbers (same run, same device)."""
from __future__ import annotations

import json
from pathlib import Path

from conformance_bench import provenance

TARGET_KERNEL = "triton_w4a16"
TARGET_SHAPES = ("14336x4096", "4096x14336")
DECODE_TARGET_M = 16
DECODE_SPEEDUP = 3.0
DECODE_ROOFLINE = 0.70
FP8_KERNEL = "fp8_group_quant_triton"
FP8_BIG_TOKENS = 8192
FP8_COPY_FRACTION = 0.85


def tile_path(t: dict | None) -> str:
    """A W4A16 launch config in a few words: path, blocks (MxNxK), split-K; '' when the row has none."""
    if not t:
        return ""
    if t.get("dequant_mm"):
        return f"dequant_mm {t.get('block_k')}x{t.get('block_n')}"
    name = "gemv" if not t.get("use_dot", True) else "swap_ab" if t.get("swap_ab") else "dot"
    magic = "+magic" if t.get("magic") else ""
    split = f" sk{t['split_k']}" if t.get("split_k", 1) != 1 else ""
    return f"{name}{magic} {t.get('block_m')}x{t.get('block_n')}x{t.get('block_k')}{split}"


def row_path(r: dict) -> str:
    """The table's path column: the launch path of a kernel row; how a compiled baseline compiled."""
    if r.get("compile"):
        n = r.get("graphs_compiled")
        return f"{r['compile']} M" + (f", {n} graph compiled" if n == 1 else f", {n} graphs compiled" if n else "")
    return tile_path(r.get("tiles"))


def _ok_rows(report, family=None):
    return [r for r in report["rows"] if r.get("status") == "ok" and r.get("graph_us")
            and (family is None or r["family"] == family)]


def evaluate_targets(report: dict) -> list[dict]:
    """One entry per target of the issue that this report can judge: {target, ok, detail}; targets with
    no measured rows are reported as ok=None (not measured), never as passed."""
    out = []
    rows = _ok_rows(report, "w4a16")
    wrong = [r for r in report["rows"] if r.get("status") == "wrong"]
    out.append({"target": "every timed kernel passed the correctness gate", "ok": not wrong,
                "detail": "; ".join(f"{r['kernel']} {r.get('shape')} M={r.get('M')}" for r in wrong[:10])
                or "none wrong"})
    for shape in TARGET_SHAPES:
        mine = sorted((r for r in rows if r["kernel"] == TARGET_KERNEL and r["shape"] == shape), key=lambda r: r["M"])
        dec = [r for r in mine if r["M"] <= DECODE_TARGET_M]
        if not mine:
            out.append({"target": f"{TARGET_KERNEL} {shape}", "ok": None, "detail": "not measured"})
            continue
        if dec:
            bad = [r for r in dec if (r.get("speedup_vs_dense") or 0) < DECODE_SPEEDUP
                   or (r.get("roofline_frac") or 0) < DECODE_ROOFLINE]
            out.append({"target": f"{TARGET_KERNEL} {shape} M<={DECODE_TARGET_M}: >= {DECODE_SPEEDUP}x dense and "
                                  f">= {DECODE_ROOFLINE:.0%} of roofline", "ok": not bad,
                        "detail": ", ".join(f"M={r['M']}: {r.get('speedup_vs_dense')}x, {r.get('roofline_frac')}"
                                            for r in dec)})
        slower = [r for r in mine if (r.get("speedup_vs_dense") or 0) < 1.0]
        out.append({"target": f"{TARGET_KERNEL} {shape}: never slower than dense at any M", "ok": not slower,
                    "detail": ", ".join(f"M={r['M']}: {r.get('speedup_vs_dense')}x" for r in slower) or
                              f"all {len(mine)} M at or above dense"})
    f8 = _ok_rows(report, "fp8_group_quant")
    big = [r for r in f8 if r["kernel"] == FP8_KERNEL and r["M"] == FP8_BIG_TOKENS]
    if big:
        frac = big[0].get("roofline_frac") or 0
        out.append({"target": f"{FP8_KERNEL} {FP8_BIG_TOKENS} tokens: >= {FP8_COPY_FRACTION:.0%} of copy bandwidth",
                    "ok": frac >= FP8_COPY_FRACTION, "detail": f"{frac:.3f}"})
    comp = {r["M"]: r["graph_us"] for r in f8 if r["kernel"].endswith("+compile")}
    mine = [r for r in f8 if r["kernel"] == FP8_KERNEL and r["M"] in comp]
    if mine:
        slower = [r for r in mine if r["graph_us"] > comp[r["M"]]]
        out.append({"target": f"{FP8_KERNEL} no slower than torch.compile of the plain-torch quant", "ok": not slower,
                    "detail": ", ".join(f"T={r['M']}: {r['graph_us']} vs {comp[r['M']]} us" for r in slower) or
                              f"all {len(mine)} token counts"})
    cb = [r for r in report.get("compile_boundary", []) if r.get("status") == "ok"]
    if cb:
        flagged = [r for r in cb if r.get("flagged")]
        out.append({"target": "compiled/eager <= 1.05 at decode after compiling at prefill", "ok": not flagged,
                    "detail": ", ".join(f"{r['kernel']} {r['shape']} M={r['decode_m']}: {r['ratio']}" for r in flagged)
                              or f"{len(cb)} checks"})
    return out


def _fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def render_markdown(report: dict) -> str:
    """A table per family (graph us, eager us, roofline fraction, x dense), then compile-boundary and targets."""
    env, ceil = report["environment"], report["ceilings"]
    partial = "" if report.get("complete", True) else " (PARTIAL: the run did not finish)"
    lines = [f"# bench: {env.get('device')} ({env.get('target')}){partial}", "",
             f"torch {env.get('torch')}, triton {env.get('triton')}, {provenance.describe(env)}, "
             f"kernel digest {env.get('kernel_digest')}, source {env.get('source_digest')}, {env.get('time_utc')}", "",
             f"Ceilings measured in this run: SM copy {_fmt(ceil.get('copy_gbps'))} GB/s "
             f"(torch copy_ {_fmt(ceil.get('torch_copy_gbps'))}), fp16 matmul {_fmt(ceil.get('peak_tflops'))} TFLOP/s. "
             "Times are medians in microseconds; graph = CUDA-graph replay (launch overhead excluded), eager = "
             "launched from Python; roofline = max(bytes / copy bandwidth, flops / matmul rate).", ""]
    gl = env.get("gemlite")
    if gl:
        lines += [f"GemLite {gl.get('version')}, autotune {gl.get('autotune')}" if not gl.get("unavailable") else
                  f"GemLite not timed: {gl['unavailable']}", ""]
    from conformance.families import all_families

    for fam, mlabel in ((f.name, f.size_label) for f in all_families()):
        rows = [r for r in report["rows"] if r["family"] == fam]
        if not rows:
            continue
        lines += [f"## {fam}", "", f"| shape | {mlabel} | kernel | status | graph us | eager us | roofline us | "
                                   "of roofline | x dense | path |", "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
        for r in sorted(rows, key=lambda r: (r.get("shape") or "", r.get("M") or 0, r["kernel"])):
            status = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
            lines.append(f"| {r.get('shape', '')} | {_fmt(r.get('M'))} | {r['kernel']} | {status} | "
                         f"{_fmt(r.get('graph_us'))} | {_fmt(r.get('eager_us'))} | {_fmt(r.get('roofline_us'))} | "
                         f"{_fmt(r.get('roofline_frac'), 2)} | {_fmt(r.get('speedup_vs_dense'), 2)} | "
                         f"{row_path(r)} |")
        lines.append("")
        notes = [r for r in rows if r["status"] != "ok"]
        if notes:
            lines += ["Not timed:", ""] + [f"- {r['kernel']} {r.get('shape', '')} {mlabel}={_fmt(r.get('M'))}: "
                                           f"{r['status']}: {' '.join(str(r.get('detail', '')).split())[:300]}"
                                           for r in notes] + [""]
    cb = report.get("compile_boundary", [])
    if cb:
        lines += ["## compile boundary (compiled at prefill M, called at decode M)", "",
                  "| kernel | shape | prefill M | decode M | eager us | compiled us | ratio | flag |",
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in cb:
            lines.append(f"| {r['kernel']} | {r.get('shape')} | {_fmt(r.get('prefill_m'))} | "
                         f"{_fmt(r.get('decode_m'))} | "
                         f"{_fmt(r.get('eager_us'))} | {_fmt(r.get('compiled_us'))} | {_fmt(r.get('ratio'), 3)} | "
                         f"{'**> 1.05**' if r.get('flagged') else r.get('status')} |")
        lines.append("")
    if report.get("targets"):
        lines += ["## targets", ""]
        for t in report["targets"]:
            mark = {True: "PASS", False: "FAIL", None: "not measured"}[t["ok"]]
            lines.append(f"- {mark}: {t['target']} ({t['detail']})")
        lines.append("")
    return "\n".join(lines)


def plot_png(report: dict, path: Path) -> bool:
    """Roofline fraction vs M (log2), one panel per w4a16 shape plus one for fp8; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from conformance.families import get_family

    rows = _ok_rows(report)
    panels = sorted({(r["family"], r["shape"]) for r in rows})
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (fam, shape) in zip(axes[0], panels):
        mine = [r for r in rows if r["family"] == fam and r["shape"] == shape]
        for k in sorted({r["kernel"] for r in mine}):
            pts = sorted((r["M"], r["roofline_frac"]) for r in mine if r["kernel"] == k)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k,
                    linestyle="--" if k.startswith("dense_") or "+compile" in k else "-")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_title(f"{fam} {shape}")
        ax.set_xlabel(get_family(fam).size_label)
        ax.set_ylabel("fraction of roofline")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def write(report: dict, out_dir: str | Path, plot: bool = True) -> list[Path]:
    """bench.json, bench.md and (with `plot`, matplotlib permitting) bench_roofline.png under out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json", out / "bench.md"]
    paths[0].write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(render_markdown(report), encoding="utf-8")
    png = out / "bench_roofline.png"
    if plot and plot_png(report, png):
        paths.append(png)
    return paths
