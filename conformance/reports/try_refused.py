"""`validate --try-refused`: run kernels on corpus configs their own gates refuse, with the gate bypassed.

For each kernel that can run here at all (apply, or its model), every corpus class its gate refuses on
the target is run through harness.run_case with a copy of the kernel whose `can_implement` accepts
everything. Results are grouped by the gate's refusal reason and judged:

  protects         some case fails (wrong numbers): the refusal keeps users from wrong results
  kernel raises    no case fails but some raise (load/apply reject it): the gate mirrors a hard limit
  could be lifted  every case that ran passes: the refusal may be stricter than it needs to be
  not judged       nothing ran to a verdict (every case skipped)

These are never conformance results: they are recorded with check "try_refused" in their own report
section, never through conformance.results, and a model run says nothing about a real device.
"""
from __future__ import annotations

import copy
import math
import time

from conformance.cases import corpus
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.targets import Target

CHECK = "try_refused"
# exact tier (layout, zero-point and offset bugs show bit for bit) and one statistical case per class
CASES_PER_CLASS = 2
VERDICTS = ("protects", "kernel raises", "could be lifted", "not judged")
MODEL_CAVEAT = ("evidence from the kernel's model only (plain torch reading of its operands): it shows the "
                "load step and operand layout handle these configs, not that the real kernel computes them "
                "right on this target; confirm on a device before lifting the gate")


def bypassed(kernel: registry.Kernel) -> registry.Kernel:
    """A shallow copy of `kernel` whose gate accepts every config (same class, so its model is found)."""
    k = copy.copy(kernel)
    k.can_implement = lambda config, target: None
    return k


def _judge(outcomes: list[str]) -> str:
    if "fail" in outcomes:
        return "protects"
    if "error" in outcomes:
        return "kernel raises"
    return "could be lifted" if "pass" in outcomes else "not judged"


def _ratio(v) -> float | None:
    r = v.metrics.get("max_ratio")
    if r is None and "mismatches" in v.metrics:
        return None
    return r


def try_kernel(kernel: registry.Kernel, target: Target) -> dict:
    """Every refused corpus class of one kernel, run with the gate bypassed, grouped by refusal reason."""
    why = kernel.availability(target)
    if why is not None and not kernel.has_model:
        return {"kernel": kernel.name, "not_run": f"cannot run here and has no model: {why}", "refusals": []}
    open_k = bypassed(kernel)
    groups: dict[str, dict] = {}
    for cls in corpus.classes(kernel.family):
        reason = corpus.gate_refusal(kernel, cls, target)
        if reason is None:
            continue
        g = groups.setdefault(reason, {"reason": reason, "classes": []})
        cases = []
        for case in cls.cases(kernel.name)[:CASES_PER_CLASS]:
            v = run_case(case, open_k, target, check_determinism=False, record=False)
            cases.append({"case_id": v.case_id, "tier": v.check, "outcome": v.outcome, "run_mode": v.run_mode,
                          "max_ratio": _ratio(v), "mismatches": v.metrics.get("mismatches"),
                          "detail": v.detail[:300], "replay": v.replay})
        outcomes = [c["outcome"] for c in cases]
        ratios = [c["max_ratio"] for c in cases if c["max_ratio"] is not None]
        g["classes"].append({"class": cls.label, "verdict": _judge(outcomes), "cases": cases,
                             "n_pass": outcomes.count("pass"), "n_fail": outcomes.count("fail"),
                             "n_error": outcomes.count("error"),
                             "max_ratio": max(ratios) if ratios else None})
    refusals = []
    for g in groups.values():
        outcomes = [c["outcome"] for cl in g["classes"] for c in cl["cases"]]
        modes = sorted({c["run_mode"] for cl in g["classes"] for c in cl["cases"] if c["run_mode"]})
        g["verdict"] = _judge(outcomes)
        g["n_cases"] = len(outcomes)
        g["n_pass"] = outcomes.count("pass")
        g["n_skip"] = outcomes.count("skip")
        g["n_fail"] = outcomes.count("fail")
        g["n_error"] = outcomes.count("error")
        g["run_modes"] = modes
        g["model_only"] = modes == ["model"]
        if g["verdict"] == "could be lifted" and g["model_only"]:
            g["caveat"] = MODEL_CAVEAT
        refusals.append(g)
    return {"kernel": kernel.name, "family": kernel.family, "run_mode": kernel.run_mode(target),
            "not_run": None, "refusals": refusals}


def try_refused(kernels, target: Target) -> dict:
    """The report section: per kernel, refusal groups with verdicts and evidence (case ids, error ratios)."""
    t0 = time.perf_counter()
    out = [try_kernel(k, target) for k in kernels]
    counts = {v: sum(1 for k in out for g in k["refusals"] if g["verdict"] == v) for v in VERDICTS}
    return {"check": CHECK, "target": str(target),
            "label": "gates bypassed on purpose: NOT conformance results; they never count as passes or "
                     "failures of a kernel",
            "kernels": out, "counts": counts, "wall_time_s": round(time.perf_counter() - t0, 2)}


def render_text(section: dict) -> str:
    """Terminal lines: per kernel and refusal reason, the verdict and its evidence."""
    lines = [f"try-refused on {section['target']} ({section['label']}; {section['wall_time_s']} s)"]
    for k in section["kernels"]:
        if k["not_run"]:
            lines.append(f"  {k['kernel']}: not tried ({k['not_run']})")
            continue
        if not k["refusals"]:
            lines.append(f"  {k['kernel']}: its gate refuses no corpus class on this target")
        for g in k["refusals"]:
            worst = [c for cl in g["classes"] for c in cl["cases"] if c["outcome"] != "pass"][:1]
            ratios = [cl["max_ratio"] for cl in g["classes"] if cl["max_ratio"] is not None]
            ev = f"{g['n_pass']}/{g['n_cases']} cases pass" + (f", {g['n_skip']} skip" if g["n_skip"] else "")
            if ratios:
                ev += f", max ratio {max(ratios):.3g}" if math.isfinite(max(ratios)) else ", max ratio inf"
            if worst:
                ev += f"; e.g. {worst[0]['outcome'].upper()} {worst[0]['case_id']}"
            lines.append(f"  {k['kernel']}: [{g['verdict'].upper()}] {g['reason']}  "
                         f"({len(g['classes'])} classes; {ev}; ran as {','.join(g['run_modes'])})")
    return "\n".join(lines) + "\n"
