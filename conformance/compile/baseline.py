"""What changes from a baseline target to a target, in compile records: what passes there and fails or is refused
here, and resource changes past a threshold (10% by default).

    diff(records, target, baseline) -> {"regressions": [...], "refused": [...], "resources": [...]}

Records are matched by kernel, program and case (a compile id without its arch), so the same case's program is
compared across the two targets whatever tiles each picked.
"""
from __future__ import annotations

RESOURCE_FIELDS = ("vgprs", "sgprs", "registers", "lds_bytes", "shared_bytes", "scratch_bytes", "local_bytes",
                   "occupancy")
THRESHOLD = 0.10


def _match_key(rec: dict) -> tuple:
    _, _arch, prog, case = rec["id"].split("/", 3)
    return rec["kernel"], prog, case


def diff(records: list, target: str, baseline: str, kernels_table: dict | None = None,
         threshold: float = THRESHOLD) -> dict:
    """Records of `target` against those of `baseline` (archs, e.g. "gfx1201", "gfx1100")."""
    here = {_match_key(r): r for r in records if r["target"] == target}
    base = {_match_key(r): r for r in records if r["target"] == baseline}
    regressions, changes = [], []
    for k, b in base.items():
        h = here.get(k)
        if h is None:
            continue
        if b["verdict"] == "pass" and h["verdict"] != "pass":
            regressions.append({"kernel": k[0], "program": k[1], "id": h["id"], "verdict": h["verdict"],
                                "message": h["message"], "baseline": b["id"]})
        if b["verdict"] == h["verdict"] == "pass":
            for f in RESOURCE_FIELDS:
                x, y = (b["resources"] or {}).get(f), (h["resources"] or {}).get(f)
                if isinstance(x, int) and isinstance(y, int) and x != y and abs(y - x) > threshold * max(abs(x), 1):
                    changes.append({"kernel": k[0], "program": k[1], "id": h["id"], "field": f, "baseline": x,
                                    "target": y})
    refused = []
    for name, row in (kernels_table or {}).items():
        b, h = row.get(baseline, ""), row.get(target, "")
        if "pass" in b and h in ("refused", "no launch declared"):
            refused.append({"kernel": name, "baseline": b, "target": h})
    return {"target": target, "baseline": baseline, "regressions": regressions, "refused": refused,
            "resources": changes}


def diff_text(d: dict, limit: int = 20) -> str:
    lines = [f"compile: {d['target']} against baseline {d['baseline']}: {len(d['regressions'])} pass there and fail "
             f"here, {len(d['refused'])} kernels refused here, {len(d['resources'])} resource changes > "
             f"{int(THRESHOLD * 100)}%"]
    for r in d["regressions"][:limit]:
        lines.append(f"  {r['verdict'].upper()} {r['id']} -- {r['message']}")
    for r in d["refused"][:limit]:
        lines.append(f"  REFUSED {r['kernel']}: {r['target']} (baseline: {r['baseline']})")
    for r in d["resources"][:limit]:
        lines.append(f"  {r['field']} {r['baseline']} -> {r['target']} {r['id']}")
    return "\n".join(lines)
