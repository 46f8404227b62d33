"""The validation report: JSON and one self-contained HTML page (jinja2, autoescaped; plots inline as PNG).

    write_report(out_dir, doc)     # out_dir/report.json and out_dir/report.html, each written atomically
    render_html(doc) -> str;  terminal_summary(doc) -> str;  ratio_histogram_png(kernel, samples) -> bytes

`doc` is the document conformance.validate builds. A model run is always shown as MODEL (the real
kernel did not run), never as a device run; try-refused results sit in their own, labelled section.
"""
from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

RATIO_FLOOR = 1e-6  # log-scale plots: ratios of 0 (bit-exact elements) are drawn here


def _atomic_write(path: Path, text: str) -> None:
    """Temp file beside `path`, then os.replace (conformance.reports.files): no torn or stray file."""
    from conformance.reports.files import atomic_write_text

    atomic_write_text(path, text, str(path.parent))


def write_report(out_dir, doc: dict) -> dict:
    """Write report.json and report.html under out_dir (temp file + os.replace); returns their sizes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "report.json", json.dumps(doc, indent=1, default=str, allow_nan=True) + "\n")
    _atomic_write(out / "report.html", render_html(doc))
    return {name: (out / name).stat().st_size for name in ("report.json", "report.html")}


# ---- plots -------------------------------------------------------------------------------------------

def ratio_histogram_png(kernel: str, samples: list[dict]) -> bytes:
    """Histogram of per-case max error ratios (|err|/tol), log-scale x, with the fail line at 1."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; no GUI toolkit imported
    import matplotlib.pyplot as plt
    import numpy as np

    vals = np.array([s["ratio"] for s in samples], dtype=float)
    finite = vals[np.isfinite(vals)]
    clipped = np.clip(finite, RATIO_FLOOR, None)
    lo = min(1e-3, clipped.min() if clipped.size else 1e-3)
    hi = max(2.0, clipped.max() if clipped.size else 2.0)
    bins = np.logspace(math.log10(lo) - 0.1, math.log10(hi) + 0.1, 30)
    fig, ax = plt.subplots(figsize=(4.2, 2.3), dpi=90)
    ax.hist(clipped[clipped <= 1], bins=bins, color="#4a9c5d", label="pass (<= 1)")
    if (clipped > 1).any():
        ax.hist(clipped[clipped > 1], bins=bins, color="#c0392b", label="fail (> 1)")
    ax.axvline(1.0, color="#c0392b", lw=1.2, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("max |err| / tol per case (log)", fontsize=8)
    ax.set_ylabel("cases", fontsize=8)
    modes = ",".join(sorted({s.get("run_mode") or "-" for s in samples}))
    n_inf = int((~np.isfinite(vals)).sum())
    ax.set_title(f"{kernel} [{modes}]: {len(vals)} cases" + (f", {n_inf} inf" if n_inf else ""), fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


# ---- terminal ----------------------------------------------------------------------------------------

def _fmt_ratio(r) -> str:
    if r is None:
        return "-"
    return "inf" if not math.isfinite(r) else f"{r:.3g}"


def _mode_label(modes: list[str]) -> str:
    return ",".join("MODEL" if m == "model" else m for m in modes) or "-"


def throughput_lines(tp: dict) -> list[str]:
    """Per family: cases judged, the seconds of the tests that judged them, cases per second."""
    return [f"{fam}: {v['cases']} cases in {v['seconds']} s"
            + (f" ({v['cases_per_second']} cases/s)" if v["cases_per_second"] else "") for fam, v in tp.items()]


def headline(doc: dict) -> str:
    s = doc["summary"]
    verdict = "PASS" if doc.get("exit_code") == 0 else "FAIL"
    return (f"{verdict}: {s['n_kernels']} kernels, {s['n_checks']} checks, {s['n_failures']} failures "
            f"({s['n_results']} results; target {doc['environment']['target']}, profile "
            f"{doc['environment']['profile']})")


def terminal_summary(doc: dict) -> str:
    """A readable plain-text summary: headline, kernel x check table, failures with replay lines."""
    s, env = doc["summary"], doc["environment"]
    lines = [f"== conformance validation: {env['target']}"
             f"{' (simulated on ' + env['detected_target'] + ')' if env['simulated'] else ''}; "
             f"Triton {env['triton_mode']}; {env['wall_time_s']} s ==", headline(doc), ""]
    if doc.get("baseline_changes"):
        from conformance.reports import baseline_changes

        lines += [baseline_changes.text(doc["baseline_changes"]), ""]
    if doc.get("target_matrix"):
        from conformance.reports import compile_matrix

        lines += [compile_matrix.text(doc["target_matrix"]), ""]
    w = max([len(c["kernel"]) for c in s["cells"]] + [6]) + 2
    cw = max([len(c["check"]) for c in s["cells"]] + [16]) + 2  # check names come from any test (plugins too)
    lines.append(f"{'kernel':<{w}}{'check':<{cw}}{'ran as':<20}{'pass':>5}{'fail':>5}{'err':>5}{'skip':>5}"
                 f"{'cases':>6}  max ratio")
    for c in s["cells"]:
        lines.append(f"{c['kernel']:<{w}}{c['check']:<{cw}}{_mode_label(c['run_modes']):<20}{c['pass']:>5}"
                     f"{c['fail']:>5}{c['error']:>5}{c['skip']:>5}{c['cases']:>6}  {_fmt_ratio(c['max_ratio'])}")
    if any("model" in c["run_modes"] for c in s["cells"]):
        lines.append("MODEL = " + doc["run_mode_meaning"]["model"])
    for g in doc.get("gate_faults") or []:  # one line each: the run failed because of it
        lines.append(f"FAILED RUN: kernel {g['kernel']}: its {g['reason']} (a gate must return None or a reason)")
    replaced = doc.get("workers_replaced") or {}
    if replaced.get("count"):
        lines.append(f"workers replaced: {replaced['count']} ("
                     + ", ".join(f"{n} {why}" for why, n in replaced.get("why", {}).items()) + ")")
    for k, why in sorted((doc.get("stopped_kernels") or {}).items()):
        lines.append(f"stopped by the crash breaker: {k}: {why}")
    if doc.get("complete") is False:
        lines.append("INCOMPLETE: the suite did not report every planned test (see report.json)")
    if env.get("seed") is not None:
        lines += ["", f"run seed {env['seed']} ({env.get('seed_source')}): failing case ids replay without it"]
    if doc.get("plan"):
        from conformance.cases.plan import summary_line

        lines += ["", "CI plan coverage (classes accepted / run / pair-covered; per class in report.json):"]
        lines += ["  " + summary_line(p) for p in doc["plan"]]
    if doc.get("cases_per_second"):
        lines += ["", "cases judged per second:"] + ["  " + t for t in throughput_lines(doc["cases_per_second"])]
    if s["failures"] or s["test_failures"]:
        lines += ["", f"failures ({len(s['failures']) + len(s['test_failures'])}):"]
        for f in s["failures"]:
            lines.append(f"  {f['outcome'].upper()} {f['case_id'] or f['kernel'] + ' ' + f['check']} "
                         f"[{f['run_mode']}]")
            if f["replay"]:
                lines.append(f"      replay: {f['replay']}")
            lines.append(f"      {f['detail'][:200]}")
            if f["failing_cases"] > 1:
                lines.append(f"      ({f['failing_cases']} failing cases in all, counting hypothesis's shrinking)")
        for t in s["test_failures"]:
            lines.append(f"  {t['outcome'].upper()} {t['test']}: {t['message'][:200]}")
    if doc.get("try_refused"):
        from conformance.reports.try_refused import render_text

        lines += ["", render_text(doc["try_refused"]).rstrip()]
    if doc.get("problem"):
        lines += ["", "PROBLEM: " + doc["problem"]]
    return "\n".join(lines) + "\n"


# ---- HTML --------------------------------------------------------------------------------------------

TEMPLATE = Path(__file__).resolve().parent / "templates" / "report.html.j2"  # package data


def _row_class(c: dict) -> str:
    if c["fail"] or c["error"]:
        return "fail"
    return "pass" if c["pass"] else "skip"


def _verdict_class(v: str) -> str:
    return {"protects": "verdict-protects", "could be lifted": "verdict-lift"}.get(v, "verdict-raises")


def _env_rows(env: dict) -> list[tuple[str, str]]:
    rows = []
    for k, v in env.items():
        if k == "interpreter_fixes":
            v = f"{'applied' if v.get('applied') else 'not applied'}: {v.get('reason')}" + (
                "; " + "; ".join(v.get("patches", [])) if v.get("patches") else "")
        elif k == "interpreter_speed":
            v = v.get("reason")
        rows.append((k, "-" if v is None else str(v)))
    return rows


def matrix_row_class(row: dict) -> str:
    from conformance.reports.compile_matrix import row_class

    return row_class(row)


def render_html(doc: dict) -> str:
    """The self-contained HTML page for a validation document."""
    import statistics

    import jinja2

    from conformance.reports.coverage import heatmap_png

    s = doc["summary"]
    plots = []
    for kernel, samples in sorted(s["ratios"].items()):
        vals = [x["ratio"] for x in samples]
        plots.append({"kernel": kernel, "png": _b64(ratio_histogram_png(kernel, samples)), "n": len(vals),
                      "max": max(vals), "median": statistics.median(vals),
                      "modes": ",".join(sorted({x.get("run_mode") or "-" for x in samples}))})
    cov = doc["coverage"]
    heatmaps = [{"family": f, "png": _b64(heatmap_png(cov, f))} for f in cov["families"]]
    cov_families = [{"name": f, "classes": [c for c in cov["classes"] if c["family"] == f],
                     "gap": any(c["gap"] for c in cov["classes"] if c["family"] == f)} for f in cov["families"]]
    mode_of = {}
    for c in s["cells"]:
        for m in c["run_modes"]:
            mode_of.setdefault(m, set()).add(c["kernel"])
    mode_counts = [(m, len(ks)) for m, ks in sorted(mode_of.items())]
    contract_kernels = sorted({r["kernel"] for r in s["contracts"]})
    from conformance.checks.contracts import CONTRACT_CHECKS

    contract_checks = [c for c in CONTRACT_CHECKS if any(r["check"] == c for r in s["contracts"])]

    def contract_cell(k, c):
        return [r for r in s["contracts"] if r["kernel"] == k and r["check"] == c]

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        doc=doc, s=s, env=doc["environment"], env_rows=_env_rows(doc["environment"]), plots=plots, cov=cov,
        heatmaps=heatmaps, cov_families=cov_families, mode_counts=mode_counts, any_model="model" in mode_of,
        contract_kernels=contract_kernels, contract_checks=contract_checks, contract_cell=contract_cell,
        tr=doc.get("try_refused"), ratio=_fmt_ratio, row_class=_row_class, verdict_class=_verdict_class,
        ch=doc.get("baseline_changes"), tm=doc.get("target_matrix"), lane=doc.get("compile_lane"),
        matrix_class=matrix_row_class)
