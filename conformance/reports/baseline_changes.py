"""What differs on a target from a baseline target, for the top of a validation report: what passes on the
baseline and fails or is refused on the target.

    build(target, baseline, target_records, baseline_records, gate_reason, gate_refusals, compile_diff=None) -> dict

- gate: cases that passed on the baseline whose gate refuses them on the target (grouped by kernel and reason,
  with a count and one case id), and kernels whose gate takes something on the baseline and nothing on the target;
- numerics: the same kernel, check and case id passed on the baseline and failed or errored on the target
  (simulated: the target's gates and tile choices, programs in the interpreter or as models);
- compile: conformance.compile.baseline.diff of the two targets' compile records (pass there, fail here; kernels
  refused here; resource changes past its threshold), None when the compile lane did not run.

Pure: `gate_reason(kernel, case_id)` says why the target's gate refuses a case (None: it accepts it).
"""
from __future__ import annotations

from collections import defaultdict

FAILED = ("fail", "error")


def _passed(records: list) -> dict:
    """{(kernel, check, case_id): record} of the passing records that name a case (the last one per key)."""
    return {(r["kernel"], r["check"], r["case_id"]): r for r in records
            if r.get("case_id") and r.get("outcome") == "pass"}


def build(target: str, baseline: str, target_records: list, baseline_records: list, gate_reason,
          gate_refusals: dict, baseline_gate_refusals: dict, compile_diff: dict | None = None) -> dict:
    """The changes from `baseline` to `target` (their names as the report prints them). `gate_refusals` /
    `baseline_gate_refusals`: {kernel: reason} for kernels whose gate takes nothing on that target."""
    base_pass = _passed(baseline_records)
    here = {(r["kernel"], r["check"], r["case_id"]): r for r in target_records if r.get("case_id")}
    numerics = []
    for key, b in sorted(base_pass.items()):
        h = here.get(key)
        if h is not None and h.get("outcome") in FAILED:
            numerics.append({"kernel": key[0], "check": key[1], "case_id": key[2], "outcome": h["outcome"],
                             "detail": (h.get("detail") or "")[:300], "replay": h.get("replay", ""),
                             "baseline_run_mode": b.get("run_mode"), "run_mode": h.get("run_mode")})
    refused: dict = defaultdict(list)
    for kernel, case_id in sorted({(k, c) for k, _check, c in base_pass}):
        why = gate_reason(kernel, case_id)
        if why is not None:
            refused[(kernel, why)].append(case_id)
    gate = [{"kernel": k, "reason": why, "cases": len(ids), "example": ids[0]}
            for (k, why), ids in sorted(refused.items())]
    gate_kernels = [{"kernel": k, "reason": why} for k, why in sorted(gate_refusals.items())
                    if k not in baseline_gate_refusals]
    out = {"target": target, "baseline": baseline, "gate_kernels": gate_kernels, "gate": gate,
           "numerics": numerics, "compile": compile_diff}
    out["counts"] = counts(out)
    return out


def counts(ch: dict) -> dict:
    c = ch.get("compile") or {}
    return {"kernels_refused": len(ch["gate_kernels"]), "cases_refused": sum(g["cases"] for g in ch["gate"]),
            "numeric_regressions": len(ch["numerics"]), "compile_regressions": len(c.get("regressions", ())),
            "compile_refused": len(c.get("refused", ())), "resource_changes": len(c.get("resources", ()))}


def any_change(ch: dict) -> bool:
    return any(ch["counts"].values())


def text(ch: dict, limit: int = 20) -> str:
    """The terminal lines: one summary line, then each change (at most `limit` per kind)."""
    from conformance.compile.baseline import diff_text

    n = ch["counts"]
    lines = [f"{ch['target']} against baseline {ch['baseline']}: {n['kernels_refused']} kernels and "
             f"{n['cases_refused']} passing cases refused here, {n['numeric_regressions']} numeric results pass "
             f"there and fail here" + ("" if ch["compile"] is not None else "; compile lane not run")]
    for g in ch["gate_kernels"][:limit]:
        lines.append(f"  REFUSED {g['kernel']}: {g['reason']}")
    for g in ch["gate"][:limit]:
        lines.append(f"  REFUSED {g['kernel']} x{g['cases']} ({g['example']}): {g['reason']}")
    for r in ch["numerics"][:limit]:
        lines.append(f"  {r['outcome'].upper()} {r['kernel']} {r['check']} {r['case_id']}")
    if ch["compile"] is not None:
        lines.append(diff_text(ch["compile"], limit))
    return "\n".join(lines)
