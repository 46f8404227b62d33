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
import os
from pathlib import Path

RATIO_FLOOR = 1e-6  # log-scale plots: ratios of 0 (bit-exact elements) are drawn here


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
    w = max([len(c["kernel"]) for c in s["cells"]] + [6]) + 2
    lines.append(f"{'kernel':<{w}}{'check':<18}{'ran as':<20}{'pass':>5}{'fail':>5}{'err':>5}{'skip':>5}"
                 f"{'cases':>6}  max ratio")
    for c in s["cells"]:
        lines.append(f"{c['kernel']:<{w}}{c['check']:<18}{_mode_label(c['run_modes']):<20}{c['pass']:>5}"
                     f"{c['fail']:>5}{c['error']:>5}{c['skip']:>5}{c['cases']:>6}  {_fmt_ratio(c['max_ratio'])}")
    if any("model" in c["run_modes"] for c in s["cells"]):
        lines.append("MODEL = " + doc["run_mode_meaning"]["model"])
    if s["failures"] or s["test_failures"]:
        lines += ["", f"failures ({len(s['failures']) + len(s['test_failures'])}):"]
        for f in s["failures"]:
            lines.append(f"  {f['outcome'].upper()} {f['case_id'] or f['kernel'] + ' ' + f['check']} "
                         f"[{f['run_mode']}]")
            if f["replay"]:
                lines.append(f"      replay: {f['replay']}")
            lines.append(f"      {f['detail'][:200]}")
        for t in s["test_failures"]:
            lines.append(f"  {t['outcome'].upper()} {t['test']}: {t['message'][:200]}")
    if doc.get("try_refused"):
        from .try_refused import render_text

        lines += ["", render_text(doc["try_refused"]).rstrip()]
    if doc.get("problem"):
        lines += ["", "PROBLEM: " + doc["problem"]]
    return "\n".join(lines) + "\n"


# ---- HTML --------------------------------------------------------------------------------------------

_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ doc.title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;
vertical-align:top;text-align:left}th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.banner{padding:.8em 1em;border-radius:6px;font-size:1.25em;font-weight:600;margin:.6em 0}
.banner.pass{background:#d9f2dd;color:#17612b;border:1px solid #8fd19e}
.banner.fail{background:#fbdada;color:#8a1010;border:1px solid #e79595}
tr.pass td{background:#eef9f0}tr.fail td{background:#fde3e3}tr.skip td{background:#f4f4f4;color:#666}
td.pass{background:#cdeed4}td.fail,td.error{background:#f6bcbc;font-weight:600}td.skip{background:#eee}
.badge{display:inline-block;border-radius:4px;padding:0 6px;font-size:12px;font-weight:600;margin-right:3px}
.badge.device{background:#2e7d32;color:#fff}.badge.interpreter{background:#1565c0;color:#fff}
.badge.model{background:#ef8f00;color:#fff}.badge.none{background:#999;color:#fff}
code{background:#f4f4f4;padding:0 3px;font-size:12px;word-break:break-all}
.small{font-size:12px;color:#555}.warn{background:#fff4d6;border:1px solid #f0c36d;padding:.5em .8em;border-radius:4px}
.grid{display:flex;flex-wrap:wrap;gap:10px}.grid figure{margin:0;border:1px solid #ddd;padding:4px}
figcaption{font-size:12px;color:#444;max-width:380px}nav a{margin-right:1em}
tr.gap td.label{color:#a00;font-weight:600}tr.gap td{background:#fff0f0}
.verdict-protects{color:#17612b;font-weight:600}.verdict-lift{color:#8a5a00;font-weight:600}
.verdict-raises{color:#1565c0;font-weight:600}
</style></head><body>
<h1>{{ doc.title }}</h1>
<div class="banner {{ 'pass' if doc.exit_code == 0 else 'fail' }}">
{{ 'PASS' if doc.exit_code == 0 else 'FAIL' }}: {{ s.n_kernels }} kernels, {{ s.n_checks }} checks,
{{ s.n_failures }} failures</div>
<p>{{ s.n_results }} check results ({{ s.n_records }} records) from {{ s.tests.values()|sum }} pytest tests
({% for k, v in s.tests|dictsort %}{{ v }} {{ k }}{{ ", " if not loop.last }}{% endfor %}).
Target <b>{{ env.target }}</b>{% if env.simulated %} <b>simulated</b> on a machine whose own target is
{{ env.detected_target }}{% endif %}; profile <b>{{ env.profile }}</b>; Triton {{ env.triton_mode }};
wall time {{ env.wall_time_s }} s (suite {{ doc.suite_seconds }} s).
How kernels ran: {% for m, n in mode_counts %}<span class="badge {{ m }}">{{ 'MODEL' if m == 'model' else m }}</span>
{{ n }} kernel(s) {% endfor %}</p>
{% if doc.get("problem") %}<p class="warn"><b>Problem:</b> {{ doc.problem }}</p>{% endif %}
{% if any_model %}<p class="warn"><span class="badge model">MODEL</span> {{ doc.run_mode_meaning.model }}.
A model run tests the kernel's load step and operand layout, not the kernel's arithmetic on a device.</p>{% endif %}
<nav><a href="#results">Results</a><a href="#ratios">Error ratios</a><a href="#failures">Failures</a>
<a href="#contracts">Contract checks</a>{% if tr %}<a href="#try-refused">Try-refused</a>{% endif %}
<a href="#coverage">Coverage</a><a href="#ledger">Selection</a><a href="#skips">Skips</a><a href="#env">Environment</a></nav>

<h2 id="results">Results per kernel and check</h2>
<p class="small">exact: bit-exact against the fp64 reference on exactly representable data; statistical: max
|err|/tol &le; 1 under the dot-product error model. Counts are distinct cases (hypothesis replays counted once).
Ran as: {% for m, what in doc.run_mode_meaning.items() %}<span class="badge {{ m }}">{{ 'MODEL' if m == 'model' else m }}</span>
{{ what }}. {% endfor %}</p>
<table><tr><th>kernel</th><th>check</th><th>ran as</th><th>pass</th><th>fail</th><th>error</th><th>skip</th>
<th>cases</th><th>max ratio</th><th>notes</th></tr>
{% for c in s.cells %}<tr class="{{ row_class(c) }}"><td>{{ c.kernel }}</td><td>{{ c.check }}</td>
<td>{% for m in c.run_modes %}<span class="badge {{ m }}">{{ 'MODEL' if m == 'model' else m }}</span>{% else %}
<span class="badge none">did not run</span>{% endfor %}</td>
<td class="n">{{ c.pass }}</td><td class="n">{{ c.fail }}</td><td class="n">{{ c.error }}</td><td class="n">{{ c.skip }}</td>
<td class="n">{{ c.cases }}</td><td class="n">{{ ratio(c.max_ratio) }}</td>
<td class="small">{% for why, n in c.skip_reasons.items() %}{{ why }}{% if n > 1 %} (x{{ n }}){% endif %}<br>{% endfor %}</td></tr>
{% endfor %}</table>

<h2 id="ratios">Error-ratio distributions (statistical tier)</h2>
<p class="small">Per kernel: each case's max |err|/tol. A verdict fails above 1 (dashed line); drift shows as the
mass moving right long before it crosses.</p>
{% if plots %}<div class="grid">{% for p in plots %}<figure><img alt="error ratios of {{ p.kernel }}"
src="data:image/png;base64,{{ p.png }}"><figcaption>{{ p.kernel }}: {{ p.n }} cases, max {{ ratio(p.max) }},
median {{ ratio(p.median) }}; ran as {{ p.modes }}</figcaption></figure>{% endfor %}</div>
{% else %}<p>No statistical-tier results.</p>{% endif %}

<h2 id="failures">Failures ({{ s.failures|length + s.test_failures|length }})</h2>
{% if s.failures or s.test_failures %}<table><tr><th>outcome</th><th>kernel / check</th><th>case and replay</th><th>detail</th></tr>
{% for f in s.failures %}<tr class="fail"><td>{{ f.outcome|upper }}</td><td>{{ f.kernel }}<br>{{ f.check }}
<span class="badge {{ f.run_mode or 'none' }}">{{ 'MODEL' if f.run_mode == 'model' else (f.run_mode or '-') }}</span></td>
<td><code>{{ f.case_id or '-' }}</code>{% if f.replay %}<br>replay: <code>{{ f.replay }}</code>{% endif %}</td>
<td class="small">{{ f.detail }}</td></tr>{% endfor %}
{% for t in s.test_failures %}<tr class="fail"><td>{{ t.outcome|upper }}</td><td colspan="2"><code>{{ t.test }}</code></td>
<td class="small">{{ t.message[:800] }}</td></tr>{% endfor %}</table>
{% else %}<p>None.</p>{% endif %}

<h2 id="contracts">Contract checks</h2>
<p class="small">Custom-op contracts (fake impl vs real, make_fx one node, torch.library.opcheck, torch.compile
boundary) and RMSNorm+FP8 fusion of every quant route.</p>
{% if contract_kernels %}<table><tr><th>kernel</th>{% for c in contract_checks %}<th>{{ c }}</th>{% endfor %}</tr>
{% for k in contract_kernels %}<tr><td>{{ k }}</td>{% for c in contract_checks %}{% set rs = contract_cell(k, c) %}
<td class="{{ rs[0].outcome if rs|length == 1 else ('fail' if rs|selectattr('outcome', 'in', ['fail', 'error'])|list else ('pass' if rs else '')) }}">
{% for r in rs %}<span title="{{ r.detail }}">{{ r.outcome }}</span>{% if r.case_id %} <span class="small">{{ r.case_id }}</span>{% endif %}
{% if r.run_mode %}<span class="badge {{ r.run_mode }}">{{ 'MODEL' if r.run_mode == 'model' else r.run_mode }}</span>{% endif %}
{% if r.seconds is not none %}<span class="small">{{ r.seconds }} s</span>{% endif %}<br>{% endfor %}</td>{% endfor %}</tr>
{% endfor %}</table>
<details><summary>Contract check details</summary><table><tr><th>kernel</th><th>check</th><th>outcome</th><th>detail</th></tr>
{% for r in s.contracts %}<tr class="{{ r.outcome }}"><td>{{ r.kernel }}</td><td>{{ r.check }}</td><td>{{ r.outcome }}</td>
<td class="small">{{ r.detail }}</td></tr>{% endfor %}</table></details>
{% else %}<p>No contract checks ran (no custom-op kernels selected).</p>{% endif %}

{% if tr %}<h2 id="try-refused">Try-refused: gates bypassed on purpose</h2>
<p class="warn"><b>Not conformance results.</b> {{ tr.label }}. Each kernel that can run here was run on the
corpus configs its own gate refuses on {{ tr.target }}. <span class="verdict-protects">protects</span>: some case
computes wrong numbers, the refusal keeps users from them. <span class="verdict-raises">kernel raises</span>:
the kernel's own load/apply rejects the config (the gate mirrors a hard limit).
<span class="verdict-lift">could be lifted</span>: every case passes. ({{ tr.wall_time_s }} s)</p>
<table><tr><th>kernel</th><th>refusal reason (gate)</th><th>verdict</th><th>evidence</th></tr>
{% for k in tr.kernels %}{% if k.not_run %}<tr class="skip"><td>{{ k.kernel }}</td><td colspan="3">not tried: {{ k.not_run }}</td></tr>
{% elif not k.refusals %}<tr class="skip"><td>{{ k.kernel }}</td><td colspan="3">its gate refuses no corpus class on this target</td></tr>
{% endif %}{% for g in k.refusals %}<tr><td>{{ k.kernel }}</td><td>{{ g.reason }}</td>
<td class="{{ verdict_class(g.verdict) }}">{{ g.verdict }}</td>
<td class="small">{{ g.n_cases - g.n_fail - g.n_error }}/{{ g.n_cases }} cases pass ({{ g.n_fail }} fail,
{{ g.n_error }} raise) over {{ g.classes|length }} classes; ran as {% for m in g.run_modes %}<span class="badge {{ m }}">{{ 'MODEL' if m == 'model' else m }}</span>{% endfor %}
{% if g.caveat %}<br><b>Caveat:</b> {{ g.caveat }}{% endif %}
<details><summary>per class</summary><table><tr><th>class</th><th>verdict</th><th>max ratio</th><th>cases</th></tr>
{% for cl in g.classes %}<tr><td>{{ cl.class }}</td><td class="{{ verdict_class(cl.verdict) }}">{{ cl.verdict }}</td>
<td class="n">{{ ratio(cl.max_ratio) }}</td><td>{% for c in cl.cases %}<span class="{{ c.outcome }}">{{ c.outcome|upper }}</span>
<code>{{ c.case_id }}</code>{% if c.mismatches %} {{ c.mismatches }} elements differ{% endif %}
{% if c.outcome != 'pass' %}<br><span class="small">{{ c.detail }}</span>{% endif %}<br>{% endfor %}</td></tr>{% endfor %}
</table></details></td></tr>{% endfor %}{% endfor %}</table>
{% endif %}

<h2 id="coverage">Coverage on {{ cov.target }} (gates only)</h2>
<p>{{ cov.kernels|length }} kernels, {{ cov.configs|length }} configs swept;
<b>{{ cov.n_unserved }}</b> configs served by no kernel{% if cov.gaps %} in {{ cov.gaps|length }} config classes
(red rows){% endif %}.</p>
{% for h in heatmaps %}<img alt="coverage heatmap {{ h.family }}" src="data:image/png;base64,{{ h.png }}">{% endfor %}
{% if cov.gaps %}<p><b>Gaps</b> (config classes with configs no kernel serves):</p><ul>{% for g in cov.gaps %}
<li class="label" style="color:#a00"><b>{{ g['class'] }}</b>: {{ g.unserved }}/{{ g.n_configs }} configs unserved</li>{% endfor %}</ul>
{% else %}<p>No gaps: every swept config is served by some kernel.</p>{% endif %}
{% for fam in cov_families %}<details {{ 'open' if fam.gap else '' }}><summary>{{ fam.name }}: {{ fam.classes|length }}
config classes</summary><table><tr><th>config class</th><th>configs</th><th>served</th>
<th>selected</th><th>why unserved</th></tr>
{% for c in fam.classes %}<tr class="{{ 'gap' if c.gap else '' }}"><td class="label">{{ c['class'] }}</td>
<td class="n">{{ c.n_configs }}</td><td class="n">{{ c.served }}</td>
<td>{% for k, n in c.selected.items() %}{{ k }} ({{ n }})<br>{% endfor %}</td>
<td class="small">{% for k, reasons in c.gap_reasons.items() %}{% for r, n in reasons.items() %}<code>{{ k }}</code>: {{ r }} (x{{ n }})<br>{% endfor %}{% endfor %}</td></tr>
{% endfor %}</table></details>{% endfor %}

<h2 id="ledger">Selection ledger</h2>
<p class="small">Per representative config class (N = K = 4096): the kernel selection picks on {{ env.target }}
and why each other kernel refused.</p>
<table><tr><th>family</th><th>config</th><th>selected</th><th>refused</th></tr>
{% for e in doc.selection %}<tr class="{{ '' if e.selected else 'fail' }}"><td>{{ e.family }}</td>
<td class="small">{{ e.config|dictsort|map('join', '=')|join(' ') }}</td><td>{{ e.selected or 'NOTHING' }}</td>
<td class="small">{% for r in e.refused %}<code>{{ r.kernel }}</code>: {{ r.reason }}<br>{% endfor %}</td></tr>{% endfor %}
</table>

<h2 id="skips">Skipped tests ({{ s.skipped_tests|length }})</h2>
<table><tr><th>test</th><th>reason</th></tr>{% for t in s.skipped_tests %}<tr class="skip"><td><code>{{ t.test }}</code></td>
<td class="small">{{ t.message }}</td></tr>{% else %}<tr><td colspan="2">none</td></tr>{% endfor %}</table>

<h2 id="env">Environment</h2>
<table>{% for k, v in env_rows %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table>
<p class="small">Suite command: <code>{{ doc.command }}</code><br>JUnit XML: <code>{{ doc.junit }}</code>;
machine-readable report: <code>report.json</code> (every record).</p>
</body></html>
"""


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
        rows.append((k, "-" if v is None else str(v)))
    return rows


def render_html(doc: dict) -> str:
    """The self-contained HTML page for a validation document."""
    import statistics

    import jinja2

    from .coverage import heatmap_png

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
    from .validate import CONTRACT_CHECKS

    contract_checks = [c for c in CONTRACT_CHECKS if any(r["check"] == c for r in s["contracts"])]

    def contract_cell(k, c):
        return [r for r in s["contracts"] if r["kernel"] == k and r["check"] == c]

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(_HTML).render(
        doc=doc, s=s, env=doc["environment"], env_rows=_env_rows(doc["environment"]), plots=plots, cov=cov,
        heatmaps=heatmaps, cov_families=cov_families, mode_counts=mode_counts, any_model="model" in mode_of,
        contract_kernels=contract_kernels, contract_checks=contract_checks, contract_cell=contract_cell,
        tr=doc.get("try_refused"), ratio=_fmt_ratio, row_class=_row_class, verdict_class=_verdict_class)
