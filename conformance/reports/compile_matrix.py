"""The target matrix of a validation report: kernel x specialization -> gate, compile, resources, simulated numerics.

    build(target, kernels, numeric_records, gate_refusals, launch_of, compile_records=None, lane_table=None) -> dict

A row is one program the kernel launches on the target (a compile record's `key`: program name and specialization
hash), or, for cases that launch no Triton program there, the kernel's code path ("path:<name>"), or, for a kernel
whose gate takes nothing on the target, the kernel alone with the gate's reason. Numeric records (the suite's, one
per kernel x check x case) are attributed to every row their case launches, so a row says how the cases that run
that program did in simulation. Pure: what a case launches comes from `launch_of(kernel, case_id)` (the report
glue asks the kernel, `Kernel.launch`; tests pass a table).
"""
from __future__ import annotations

from collections import Counter

RESOURCE_FIELDS = ("vgprs", "sgprs", "registers", "spills", "scratch_bytes", "local_bytes", "lds_bytes",
                   "shared_bytes", "occupancy")
GATE_ACCEPTS = "accepts"
NOT_COMPILED = "not compiled"  # the lane was off, or no case of its sets launches this program
FAILING_SHOWN = 5  # failing case ids kept per row (the counts say how many in all)


def numeric_verdict(counts: Counter) -> str:
    """fail when any record failed or errored, pass when some passed, else 'not run' (only skips, or none)."""
    if counts["fail"] or counts["error"]:
        return "fail"
    return "pass" if counts["pass"] else "not run"


def _resources(rec: dict) -> dict:
    res = rec.get("resources") or {}
    return {f: res[f] for f in RESOURCE_FIELDS if res.get(f) is not None}


def _row(kernel: str, row: str, gate: str) -> dict:
    return {"kernel": kernel, "row": row, "program": None, "path": None, "tiles": {}, "gate": gate,
            "compile": NOT_COMPILED, "compile_id": None, "message": "", "resources": {}, "numerics": Counter(),
            "failing_cases": []}


def build(target: str, kernels, numeric_records: list, gate_refusals: dict, launch_of, compile_records=None,
          lane_table: dict | None = None) -> dict:
    """The matrix of `target` (an arch). `gate_refusals`: {kernel: reason} for kernels whose gate takes nothing
    there; `compile_records`: the lane's records (any targets; those of `target` are read), None when the lane
    did not run; `lane_table`: the lane's {kernel: {arch: status}} (its 'no JIT program (...)' lines)."""
    rows: dict = {}
    for r in compile_records or []:
        if r["target"] != target:
            continue
        row = rows.setdefault((r["kernel"], r["key"]), _row(r["kernel"], r["key"], GATE_ACCEPTS))
        row.update(program=r.get("program"), path=r.get("path"), tiles=r.get("tiles") or {}, compile=r["verdict"],
                   compile_id=r["id"], message=r.get("message") or "", resources=_resources(r), cases=r.get("cases"))
    for rec in numeric_records:
        case_id = rec.get("case_id")
        if not case_id or rec.get("outcome") == "skip":
            continue  # a skip ran nothing; a record without a case (a whole-kernel check) has no program
        launched = launch_of(rec["kernel"], case_id)
        if launched is None:
            continue  # the case does not parse or its gate refuses it here: not this target's launch
        path, keys = launched
        for key in keys or [f"path:{path}"]:
            row = rows.get((rec["kernel"], key))
            if row is None:
                row = rows[(rec["kernel"], key)] = _row(rec["kernel"], key, GATE_ACCEPTS)
                row["path"] = path
                if not keys:
                    status = (lane_table or {}).get(rec["kernel"], {}).get(target, "")
                    row["compile"] = status if status.startswith("no JIT program") else f"no JIT program ({path})"
            row["numerics"][rec["outcome"]] += 1
            if rec["outcome"] in ("fail", "error") and case_id not in row["failing_cases"]:
                if len(row["failing_cases"]) < FAILING_SHOWN:
                    row["failing_cases"].append(case_id)
    for k in kernels:
        if k in gate_refusals and not any(key[0] == k for key in rows):
            rows[(k, "-")] = _row(k, "-", gate_refusals[k])
            rows[(k, "-")]["compile"] = "-"
    out = []
    for (_k, _key), row in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[1]["compile"] == NOT_COMPILED,
                                                                  kv[0][1])):
        counts = row.pop("numerics")
        row["numerics"] = {o: counts[o] for o in ("pass", "fail", "error", "skip") if counts[o]}
        row["numeric_verdict"] = numeric_verdict(counts)
        out.append(row)
    totals = Counter(r["compile"] for r in out)
    return {"target": target, "compiled": compile_records is not None, "rows": out,
            "counts": {"rows": len(out), "kernels": len({r["kernel"] for r in out}),
                       "compile": dict(sorted(totals.items())),
                       "numerics": dict(sorted(Counter(r["numeric_verdict"] for r in out).items()))}}


def row_class(row: dict) -> str:
    """The HTML class of a row: fail (compile or numerics failed), skip (refused or not run), else pass."""
    if row["compile"] in ("compile-error", "resource-fail") or row["numeric_verdict"] == "fail":
        return "fail"
    return "skip" if row["gate"] != GATE_ACCEPTS or row["numeric_verdict"] == "not run" else "pass"


def text(matrix: dict, limit: int = 40) -> str:
    """A few lines for the terminal: counts, then each failing row."""
    c = matrix["counts"]
    lines = [f"target matrix {matrix['target']}: {c['rows']} rows over {c['kernels']} kernels; compile "
             + ", ".join(f"{v} {k}" for k, v in c["compile"].items()) + "; numerics "
             + ", ".join(f"{v} {k}" for k, v in c["numerics"].items())]
    bad = [r for r in matrix["rows"] if row_class(r) == "fail"]
    for r in bad[:limit]:
        lines.append(f"  {r['kernel']} {r['row']}: compile {r['compile']}"
                     + (f" ({r['compile_id']})" if r["compile_id"] else "")
                     + f", numerics {r['numeric_verdict']}" + (f" -- {r['message']}" if r["message"] else ""))
    return "\n".join(lines)
