"""JIT compiles per kernel: how many real compiles each kernel's cases paid and their seconds (the JSON report's
"jit": {"mode", "per_kernel": {kernel: {"jit_compiles", "jit_seconds"}}, "jit_compiles", "jit_seconds"})."""
from __future__ import annotations


def merge_docs(docs: list[dict]) -> dict:
    """The "jit" entry of several reports (the shards of one run, or xdist workers): compiles and seconds summed per
    kernel and in total; the mode kept when every report agrees, else the modes joined with '+'."""
    per: dict[str, dict] = {}
    for d in docs:
        for kern, v in (d.get("per_kernel") or {}).items():
            p = per.setdefault(kern, {"jit_compiles": 0, "jit_seconds": 0.0})
            p["jit_compiles"] += v["jit_compiles"]
            p["jit_seconds"] = round(p["jit_seconds"] + v["jit_seconds"], 3)
    modes = sorted({d.get("mode") for d in docs if d.get("mode")})
    return {"mode": "+".join(modes) if modes else None, "per_kernel": dict(sorted(per.items())),
            "jit_compiles": sum(p["jit_compiles"] for p in per.values()),
            "jit_seconds": round(sum(p["jit_seconds"] for p in per.values()), 3)}
