"""Coverage sweep: every config of the layer-config space through every kernel's gate on one target.

Gates are pure, so this needs no hardware: `sweep("gfx1151")` runs anywhere. The result is a plain
dict (see `sweep`) that the CLI prints as a table, JSON or HTML and the validation report embeds.
"""
from __future__ import annotations

import base64
import io
import time
from collections import Counter, defaultdict

from conformance.core import registry
from conformance.core.targets import parse_target
from conformance.families import all_families, get_family
from conformance.families.base import PROBE_TARGETS  # noqa: F401 - the targets gate summaries probe


def config_class(config) -> str:
    """The row label configs are grouped by (the family's `class_label`: it folds some axes into one row)."""
    return get_family(config.family).class_label(config)


def _resolve(kernels):
    if kernels is None:
        return registry.all_kernels()
    if isinstance(kernels, str):
        return registry.resolve_kernels(kernels)
    return sorted((registry.get_kernel(k) if isinstance(k, str) else k for k in kernels),
                  key=lambda k: (-k.priority, k.name))


def sweep(target, kernels=None, *, N: int = 4096, K: int = 4096, hidden: int = 7168, seed: int | None = None,
          profile=None) -> dict:
    """Run every config of every family the kernels belong to through their gates on `target`.

    `target` is a Target or a name ('gfx1100'); `kernels` is None (all registered), names or Kernel
    objects. Returns {"target", "kernels", "configs": [{"config", "accepted_by", "selected", "refused"}],
    "classes", "gaps", "gaps_closed_by", "excluded", "wall_time_s"}; `configs` follows the JSON schema
    of docs (group_size -1 = channelwise), the rest summarises it by config class. With a run `seed`, also
    "paths" (plan_paths: the CI plan's cases per kernel path and format on `target`) and "paths_seed".
    """
    t0 = time.perf_counter()
    if isinstance(target, str):
        target = parse_target(target)
    ks = _resolve(kernels)
    fams = [f for f in all_families() if any(k.family == f.name for k in ks)]
    families = [f.name for f in fams]
    configs, excluded = [], []
    for fam in fams:  # each family's space as its coverage view, and what it leaves out on purpose
        cfgs, excl = fam.coverage_configs(ks, target, N=N, K=K, hidden=hidden)
        configs += cfgs
        excluded += excl
    rows = []
    for cfg in configs:
        sel = registry.select(cfg, target, ks)
        rows.append({
            "config": {"family": cfg.family, **cfg.to_dict()},
            "accepted_by": list(sel.accepted),
            "selected": sel.selected.name if sel.selected else None,
            "refused": dict(sel.refused),
        })
    report = {"target": str(target), "kernels": [k.name for k in ks], "families": families, "configs": rows}
    report.update(summarize(rows, ks, configs))
    report["excluded"] = excluded
    if seed is not None:
        report["paths"] = plan_paths(target, ks, seed=seed, profile=profile)
        report["paths_seed"] = seed
    report["wall_time_s"] = round(time.perf_counter() - t0, 4)
    return report


def plan_paths(target, kernels, *, seed: int, profile=None) -> list[dict]:
    """Per kernel whose CI plan on `target` (both tiers, run seed `seed`) has path cells (it declares
    `Kernel.launch`): {"kernel", "target", "axes": ("path", *the family's plan_path_cross), "cells": [{each axis:
    value, "cases": the plan's cases in the cell, "served": whether the gate serves it}], "missing": the served
    cells without a case (the plan's own test fails on any)}. Cells with cases are listed even where the probe
    found none served (a row's own shape may enter a path no probe shape does)."""
    from conformance.cases.ids import TIERS
    from conformance.cases.plan import build_plan

    t = parse_target(target) if isinstance(target, str) else target
    out = []
    for k in _resolve(kernels):
        fam = get_family(k.family)
        cases: Counter = Counter()
        served: set = set()
        axes = ("path", *fam.plan_path_cross)
        for tier in TIERS:
            p = build_plan(k, t, tier, seed=seed, profile=profile)
            served |= set(p.path_cells)
            for r in p.rows:
                if r.path is not None:
                    cases[(r.path, *(r.plan_class[fam.plan_axes.index(a)] for a in fam.plan_path_cross))] += 1
        if not served and not cases:
            continue
        cells = [{**dict(zip(axes, c)), "cases": cases[c], "served": c in served} for c in sorted(served | set(cases))]
        out.append({"kernel": k.name, "family": k.family, "target": str(t), "axes": list(axes), "cells": cells,
                    "missing": [dict(zip(axes, c)) for c in sorted(served) if not cases[c]]})
    return out


def render_paths(paths: list[dict], seed: int) -> list[str]:
    """The table view of plan_paths: per kernel, rows (path, the cross axes after the first) x columns (the first
    cross axis' values), each cell the count of cases; '-' where the gate serves no such cell, '!!' after a served
    cell without a case."""
    if not paths:
        return []
    lines = ["", f"CI plan paths (run seed {seed:#x}, both tiers): cases per kernel path x checkpoint format; "
             "'-' not served, '0 !!' served without a case"]
    for entry in paths:
        axes, cells = entry["axes"], entry["cells"]
        by = {tuple(c[a] for a in axes): c for c in cells}
        order = {v: i for i, v in enumerate(dict(get_family(entry["family"]).axes).get(axes[1], ()))} \
            if len(axes) > 1 else {}
        cols = sorted({c[axes[1]] for c in cells}, key=lambda v: (order.get(v, len(order)), str(v))) \
            if len(axes) > 1 else [None]
        rows = sorted({tuple(c[a] for a in axes if a != (axes[1] if len(axes) > 1 else None)) for c in cells},
                      key=lambda r: tuple(map(str, r)))
        head = [" ".join(a.upper() for a in axes if a != (axes[1] if len(axes) > 1 else None))]
        labels = [" ".join(map(str, r)) for r in rows]
        w = max(len(x) for x in labels + head) + 2
        widths = [max(len(str(col)), 6) + 2 for col in cols]
        lines += ["", f"  {entry['kernel']} on {entry['target']}" + (
            f": {len(entry['missing'])} served cells WITHOUT a case" if entry["missing"] else ""),
            "  " + f"{head[0]:<{w}}" + "".join(f"{'cases' if col is None else col:>{cw}}" for col, cw in
                                                  zip(cols, widths))]
        for r, label in zip(rows, labels):
            cells_txt = []
            for col, cw in zip(cols, widths):
                key = r if col is None else (r[0], col, *r[1:])
                c = by.get(key)
                txt = "-" if c is None else f"{c['cases']}" + (" !!" if c["served"] and not c["cases"] else "")
                cells_txt.append(f"{txt:>{cw}}")
            lines.append("  " + f"{label:<{w}}" + "".join(cells_txt))
    return lines


def summarize(rows, kernels, configs) -> dict:
    """Per config class: accepting counts per kernel of its family, selections, gaps with every refusal
    reason, and `gaps_closed_by`: kernel -> classes where it alone serves some config."""
    classes: dict[str, dict] = {}
    closed: dict[str, list[str]] = defaultdict(list)
    for row, cfg in zip(rows, configs):
        label = config_class(cfg)
        c = classes.get(label)
        if c is None:
            c = classes[label] = {
                "class": label, "family": cfg.family, "n_configs": 0, "served": 0,
                "accepted": {k.name: 0 for k in kernels if k.family == cfg.family},
                "selected": Counter(), "sole": Counter(), "gap_reasons": defaultdict(Counter)}
        c["n_configs"] += 1
        for k in row["accepted_by"]:
            c["accepted"][k] += 1
        if row["selected"]:
            c["served"] += 1
            c["selected"][row["selected"]] += 1
        else:
            for k, r in row["refused"].items():
                c["gap_reasons"][k][r] += 1
        if len(row["accepted_by"]) == 1:
            c["sole"][row["accepted_by"][0]] += 1
    out = []
    for c in classes.values():
        c["gap"] = c["served"] < c["n_configs"]  # some config of the class is served by no kernel
        c["selected"] = dict(c["selected"])
        c["sole"] = dict(c["sole"])
        c["gap_reasons"] = {k: dict(v.most_common()) for k, v in c["gap_reasons"].items()}
        for k in c["sole"]:
            closed[k].append(c["class"])
        out.append(c)
    gaps = [{"class": c["class"], "family": c["family"], "unserved": c["n_configs"] - c["served"],
             "n_configs": c["n_configs"]} for c in out if c["gap"]]
    return {"classes": out, "gaps": gaps, "gaps_closed_by": dict(closed),
            "n_unserved": sum(g["unserved"] for g in gaps)}


# ---------------------------------------------------------------- views


def _cell(n: int, total: int) -> str:
    return "all" if n == total else ("-" if n == 0 else f"{n}/{total}")


def _class(report, label: str) -> dict:
    return next(c for c in report["classes"] if c["class"] == label)


def render_table(report: dict) -> str:
    """Plain-text view: one row per config class per family, gaps flagged, then why each gap is a gap."""
    ks = report["kernels"]
    lines = [f"coverage on {report['target']}: {len(ks)} kernels, {len(report['configs'])} configs, "
             f"{report['n_unserved']} served by no kernel (swept in {report['wall_time_s']:.3f} s)"]
    for fam in report["families"]:
        classes = [c for c in report["classes"] if c["family"] == fam]
        if not classes:
            continue
        fk = [k for k in ks if k in classes[0]["accepted"]]
        w = max(len(c["class"]) for c in classes) + 2
        folded = get_family(fam).folded
        lines += ["", f"[{fam}]  cells: configs of the class each kernel accepts (over {folded})",
                  f"{'CONFIG CLASS':<{w}}" + "".join(f"{k:>{max(len(k), 5) + 2}}" for k in fk) + "   SELECTED"]
        for c in classes:
            cells = "".join(f"{_cell(c['accepted'][k], c['n_configs']):>{max(len(k), 5) + 2}}" for k in fk)
            if c["served"] == 0:
                sel = f"GAP: no kernel ({c['n_configs']} configs)"
            else:
                sel = ", ".join(f"{k} {_cell(n, c['n_configs'])}" for k, n in c["selected"].items())
                if c["gap"]:
                    sel = f"GAP: {c['n_configs'] - c['served']}/{c['n_configs']} unserved; " + sel
            lines.append(f"{c['class']:<{w}}{cells}   {'!! ' if c['gap'] else ''}{sel}")
    if report["gaps"]:
        lines += ["", "Gaps (configs no kernel serves) and why each kernel refused:"]
        for g in report["gaps"]:
            lines.append(f"  {g['class']}: {g['unserved']}/{g['n_configs']} configs unserved")
            for k, reasons in _class(report, g["class"])["gap_reasons"].items():
                for r, n in reasons.items():
                    lines.append(f"      {k}: {r}  (x{n})")
    else:
        lines += ["", "Gaps: none (every swept config is served by some kernel)"]
    if report["gaps_closed_by"]:
        lines += ["", "Gaps closed by (classes where only that kernel serves some configs):"]
        for k, labels in report["gaps_closed_by"].items():
            lines.append(f"  {k}: {', '.join(labels)}")
    lines += ["", "Left out of the space on purpose:"] + [f"  {e['what']}: {e['why']}" for e in report["excluded"]]
    if "paths" in report:
        lines += render_paths(report["paths"], report["paths_seed"])
    return "\n".join(lines) + "\n"


def heatmap_png(report: dict, family: str) -> bytes:
    """PNG heatmap of config class x kernel (fraction of the class's configs each kernel accepts)."""
    import matplotlib

    matplotlib.use("Agg")  # no display; also keeps the CLI independent of any GUI toolkit
    import matplotlib.pyplot as plt
    import numpy as np

    classes = [c for c in report["classes"] if c["family"] == family]
    ks = [k for k in report["kernels"] if any(k in c["accepted"] for c in classes)]
    data = np.array([[c["accepted"][k] / c["n_configs"] for k in ks] for c in classes])
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(ks), 0.9 + 0.32 * len(classes)), dpi=100)
    ax.imshow(data, cmap="Greens", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(ks)), ks, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(classes)), [c["class"] for c in classes], fontsize=8)
    for i, c in enumerate(classes):
        if c["gap"]:  # gaps stand out: red label and a red frame around the row
            ax.get_yticklabels()[i].set_color("red")
            ax.add_patch(plt.Rectangle((-0.5, i - 0.5), len(ks), 1, fill=False, ec="red", lw=2))
        for j, k in enumerate(ks):
            ax.text(j, i, _cell(c["accepted"][k], c["n_configs"]), ha="center", va="center", fontsize=7,
                    color="white" if data[i, j] > 0.5 else "black")
    ax.set_title(f"{family} on {report['target']}\nshare of configs accepted; red rows: gaps", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>Kernel coverage on {{ r.target }}</title>
<style>
body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}td.all{background:#c7e9c0}
td.some{background:#fdd49e}tr.gap td.label{color:#b00;font-weight:bold}tr.gap{background:#fee}
code{background:#f4f4f4}
</style></head><body>
<h1>Kernel coverage on {{ r.target }}</h1>
<p>{{ r.kernels|length }} kernels ({{ r.kernels|join(", ") }}); {{ r.configs|length }} configs;
<b>{{ r.n_unserved }}</b> served by no kernel. Swept in {{ "%.3f"|format(r.wall_time_s) }} s (gates only).</p>
{% for fam in families %}
<h2>{{ fam.name }}</h2>
<img alt="heatmap {{ fam.name }}" src="data:image/png;base64,{{ fam.png }}">
<table><tr><th>config class</th>{% for k in fam.kernels %}<th>{{ k }}</th>{% endfor %}<th>selected</th></tr>
{% for c in fam.classes %}<tr class="{{ 'gap' if c.gap else '' }}"><td class="label">{{ c.class }}</td>
{% for k in fam.kernels %}{% set n = c.accepted[k] %}
<td class="{{ 'all' if n == c.n_configs else ('some' if n else '') }}">
{{ cell(n, c.n_configs) }}</td>{% endfor %}
<td>{% if c.served == 0 %}GAP: no kernel{% else %}{% for k, n in c.selected.items() %}{{ k }} {{ cell(n, c.n_configs) }}
{% endfor %}{% if c.gap %} (GAP: {{ c.n_configs - c.served }} unserved){% endif %}{% endif %}</td></tr>
{% endfor %}</table>
{% endfor %}
<h2>Gaps</h2>
{% if gaps %}<ul>{% for g in gaps %}<li><b>{{ g.class }}</b>: {{ g.unserved }}/{{ g.n_configs }} unserved<ul>
{% for k, reasons in g.reasons.items() %}{% for reason, n in reasons %}
<li><code>{{ k }}</code>: {{ reason }} (x{{ n }})</li>
{% endfor %}{% endfor %}</ul></li>{% endfor %}</ul>
{% else %}<p>None: every swept config is served by some kernel.</p>{% endif %}
{% if r.gaps_closed_by %}<h2>Gaps closed by</h2><ul>
{% for k, labels in r.gaps_closed_by.items() %}<li><code>{{ k }}</code> alone serves some configs of:
{{ labels|join(", ") }}</li>{% endfor %}</ul>{% endif %}
{% if r.paths is defined and r.paths %}<h2>CI plan paths (run seed {{ "%#x"|format(r.paths_seed) }}, both tiers)</h2>
<p>Cases per kernel path and checkpoint format; '-': the gate serves no such cell; red: served without a case.</p>
{% for e in r.paths %}<h3>{{ e.kernel }} on {{ e.target }}</h3><table>
<tr>{% for a in e.axes %}<th>{{ a }}</th>{% endfor %}<th>cases</th></tr>
{% for c in e.cells %}<tr class="{{ 'gap' if c.served and not c.cases else '' }}">{% for a in e.axes %}
<td class="label">{{ c[a] }}</td>{% endfor %}<td>{{ c.cases }}</td></tr>{% endfor %}</table>{% endfor %}{% endif %}
<h2>Left out on purpose</h2><ul>{% for e in r.excluded %}<li>{{ e.what }}: {{ e.why }}</li>{% endfor %}</ul>
<details><summary>All {{ r.configs|length }} configs</summary><table>
<tr><th>config</th><th>selected</th><th>accepted by</th><th>refused</th></tr>
{% for row in r.configs %}<tr class="{{ 'gap' if row.selected is none else '' }}">
<td>{{ row.config|dictsort|map("join", "=")|join(" ") }}</td><td>{{ row.selected or "GAP" }}</td>
<td>{{ row.accepted_by|join(", ") }}</td>
<td>{% for k, why in row.refused.items() %}{{ k }}: {{ why }}<br>{% endfor %}</td></tr>{% endfor %}
</table></details>
</body></html>
"""


def render_html(report: dict) -> str:
    """Self-contained HTML (jinja2, autoescaped; heatmaps inline as base64 PNG)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    fams = []
    for fam in report["families"]:
        classes = [c for c in report["classes"] if c["family"] == fam]
        ks = [k for k in report["kernels"] if any(k in c["accepted"] for c in classes)]
        png = base64.b64encode(heatmap_png(report, fam)).decode("ascii")
        fams.append({"name": fam, "classes": classes, "kernels": ks, "png": png})
    gaps = [{**g, "reasons": {k: list(v.items()) for k, v in _class(report, g["class"])["gap_reasons"].items()}}
            for g in report["gaps"]]
    return env.from_string(_HTML).render(r=report, families=fams, gaps=gaps, cell=_cell)
