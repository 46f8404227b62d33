"""The per-target part of a validation report: the compile lane for the target (and a baseline target), the target
matrix (conformance.reports.compile_matrix) and what changes from the baseline (conformance.reports.baseline_changes).

    add_target_sections(doc, target, kernels, seed=..., profile=..., sets=..., compile_lane=True,
                        baseline=None, baseline_doc=None, progress=None) -> compile failures on the target

It asks the kernels themselves, as the compile lane does: their gates (`can_implement`) for refusals, their
declared launches (`Kernel.launch`) for the programs a case runs, and conformance.compile.lane.run_lane for the
compiles (cached: an unchanged tree compiles nothing the second time).
"""
from __future__ import annotations

import time
from collections import Counter

from conformance.core.targets import Target


def _kernel(name: str):
    from conformance.core import registry

    try:
        return registry.get_kernel(name)
    except registry.RegistryError:
        return None  # a record of a kernel not registered in this process: nothing to ask


def _case(case_id: str):
    from conformance.cases.ids import parse_case_id
    from references.errors import InvalidInput

    try:
        return parse_case_id(case_id)
    except InvalidInput:
        return None


def gate_reason(target: Target):
    """(kernel, case_id) -> why the kernel's gate refuses the case on `target`, None when it accepts it (or the
    case id does not parse: then there is nothing to compare)."""
    def reason(kernel: str, case_id: str):
        case, k = _case(case_id), _kernel(kernel)
        return None if case is None or k is None else k.can_implement(case.config(), target)

    return reason


def launch_of(target: Target):
    """(kernel, case_id) -> (path, [compile record keys]) the case launches on `target` (keys [] for a path with no
    JIT program); None when the case does not parse or the gate refuses it there. Memoized per call of this."""
    from conformance.compile.lane import record_key
    from conformance.core.kernel import case_rows

    memo: dict = {}

    def launched(kernel: str, case_id: str):
        if (kernel, case_id) in memo:
            return memo[(kernel, case_id)]
        case, k, out = _case(case_id), _kernel(kernel), None
        if case is not None and k is not None:
            if k.can_implement(case.config(), target) is None:
                try:
                    la = k.launch(case.config(), case_rows(case), target)
                except Exception as e:  # noqa: BLE001 - the kernel's own error, shown as its path
                    out = (f"launch raised {type(e).__name__}", [])
                else:
                    out = ("no launch declared", []) if la is None else (la.path, [record_key(p) for p in la.programs])
        memo[(kernel, case_id)] = out
        return out

    return launched


def gate_refusals(target: Target, kernels) -> dict:
    """{kernel: its gate's most common reason} for the kernels whose gate accepts no config of the coverage sweep on
    `target` (conformance.reports.coverage.sweep: every config class of their families)."""
    from conformance.reports.coverage import sweep

    rows = sweep(target, kernels)["configs"]
    out = {}
    for k in kernels:
        if not any(k.name in r["accepted_by"] for r in rows):
            reasons = Counter(r["refused"][k.name] for r in rows if k.name in r["refused"])
            out[k.name] = reasons.most_common(1)[0][0] if reasons else "no config of its family here"
    return out


def add_target_sections(doc: dict, target: Target, kernels, *, seed: int, profile: str, sets, compile_lane: bool,
                        baseline: Target | None = None, baseline_doc: dict | None = None, progress=None) -> int:
    """Add `baseline_changes` (first, when a baseline is given), `target_matrix` and `compile_lane` to `doc`;
    returns how many of the target's compiles failed (compile-error or resource-fail)."""
    from conformance.compile import baseline as compile_baseline
    from conformance.compile import lane
    from conformance.reports import baseline_changes, compile_matrix

    say = progress or (lambda msg: None)
    names = [k.name for k in kernels]
    arch = target.arch
    result, lane_info = None, {"ran": False}
    if compile_lane:
        targets = [target] + ([baseline] if baseline is not None else [])
        say(f"compile lane for {', '.join(t.arch for t in targets)} (sets {','.join(sets)})")
        t0 = time.perf_counter()
        result = lane.run_lane(kernels, targets, seed=seed, profile=profile, sets=tuple(sets))
        lane_info = {"ran": True, "targets": [t.arch for t in targets], "sets": list(sets), "seed": f"{seed:#x}",
                     "wall_s": round(time.perf_counter() - t0, 1), "table": result["kernels"],
                     "launch_errors": result["errors"], "compiles": len(result["records"])}
    refusals = gate_refusals(target, kernels)
    matrix = compile_matrix.build(arch, names, doc.get("records") or [], refusals, launch_of(target),
                                  None if result is None else result["records"],
                                  None if result is None else result["kernels"])
    sections = {}
    if baseline is not None:
        diff = None if result is None else compile_baseline.diff(result["records"], arch, baseline.arch,
                                                                   result["kernels"])
        sections["baseline_changes"] = baseline_changes.build(
            str(target), str(baseline), doc.get("records") or [], (baseline_doc or {}).get("records") or [],
            gate_reason(target), refusals, gate_refusals(baseline, kernels), diff)
        if baseline_doc is not None:
            sections["baseline_changes"]["baseline_report"] = {
                k: baseline_doc.get(k) for k in ("exit_code", "suite_seconds")} | {
                "report": baseline_doc.get("report_dir"), "failures": baseline_doc["summary"]["n_failures"]}
    sections["target_matrix"] = matrix
    sections["compile_lane"] = lane_info
    title = doc.get("title") or f"Conformance validation of {target}"
    rest = {k: v for k, v in doc.items() if k != "title"}
    doc.clear()
    doc["title"] = title  # then the sections: the changes from the baseline are the first thing a reader sees
    doc.update(sections)
    doc.update(rest)
    records = [] if result is None else [r for r in result["records"] if r["target"] == arch]
    return sum(r["verdict"] != "pass" for r in records)
