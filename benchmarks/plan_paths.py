"""Record the path audit (conformance/cases/path_audit.py) of every W4A16 kernel: ours, vLLM's and GemLite's where
they import on this machine, on targets cpu, gfx1100, gfx1151 and sm90, at run seeds 0-7: the cells each kernel's
gate serves there, how many the CI plan's rows (both tiers) cover, and the served cells without a case (none).

Usage (repo root; vLLM from scripts/install-vllm.sh, its import takes minutes on a 2-core machine):
    PYTHONPATH=.vllm/site:$PWD python benchmarks/plan_paths.py [OUT.json]   # default benchmarks/results/plan_paths.json
Commit first, then record from the clean tree (the record carries commit and tree_clean).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = ("cpu", "gfx1100", "gfx1151", "sm90")  # gfx1151: where vLLM's hybrid takes its packed_dequant path
SEEDS = range(8)
PLUGINS = ("conformance.adapters.vllm", "conformance.adapters.gemlite")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else ROOT / "benchmarks" / "results" / "plan_paths.json"
    from benchmarks.provenance import code_identity

    ident = code_identity(ROOT)  # first: the tree as measured, before the imports' seconds
    from conformance.cases.path_audit import audit
    from conformance.core import registry
    from conformance.families import get_family

    t0 = time.process_time()
    registry.load_all(list(PLUGINS))
    load_s = time.process_time() - t0
    plugins = {}
    for mod in PLUGINS:
        m = sys.modules.get(mod)
        plugins[mod] = m.describe() if hasattr(m, "describe") else f"UNAVAILABLE={getattr(m, 'UNAVAILABLE', None)}"
    rows, refused = [], {}
    for k in registry.all_kernels():
        if not get_family(k.family).plan_path_cross:
            continue  # a family whose plan crosses no axis with the path (today every family but W4A16's)
        for t in TARGETS:
            for seed in SEEDS:
                c0 = time.process_time()
                a = audit(k, t, seed)
                a["cpu_s"] = round(time.process_time() - c0, 2)
                if not a["served"] and a["refusal"]:
                    refused[f"{k.name}@{t}"] = a["refusal"]  # the gate serves nothing here: one line, not 8 rows
                    break
                rows.append(a)
                print(f"{k.name:28s} {t:8s} seed {seed}: {a['served']:3d} cells served, {a['covered']:3d} covered, "
                      f"{len(a['without_case'])} without a case; {a['cpu_s']} CPU s", flush=True)
    doc = {"what": "path audit: (path, format, weight type) cells each W4A16 kernel's gate serves vs the CI plan's "
                   "rows, both tiers", "commit": ident["commit"], "tree_clean": ident["clean"],
           "targets": list(TARGETS), "seeds": list(SEEDS), "plugins": plugins, "load_cpu_s": round(load_s, 1),
           "audits": rows, "refused": refused,
           "kernels_with_paths": sorted({a["kernel"] for a in rows if a["declares_paths"]}),
           "without_case_total": sum(len(a["without_case"]) for a in rows),
           "cpu_count": os.cpu_count(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(rows)} audits, {doc['without_case_total']} served cells without a case; wrote {out}")
    return 1 if doc["without_case_total"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
