"""Compare a pinned multi-GPU run of the suite with a one-GPU run: the same seed draws the same case ids, so every
verdict must match, and the pinning must have spread the workers over the GPUs, one GPU per worker.

    python -m benchmarks.two_gpu ONE_GPU_REPORT.json MULTI_GPU_REPORT.json OUT.json   (from the repository root)

Both inputs are `--conformance-report` files of runs with the suite_record plugin loaded (each record carries
its `worker`, `gpu` and `test`). A verdict is the last outcome of each (test, kernel, check, case id): the
summary's own rule, so hypothesis's shrink replays do not count twice. Exit status 0 when the verdicts agree
and the pinning held, 1 when not, 2 for unusable input.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from references.errors import InvalidInput

from . import provenance

MAX_LISTED = 50


def _gpu_key(gpu) -> str | None:
    """One GPU's identity: its UUID when CUDA was up, else the visibility value the pinning set."""
    if not gpu:
        return None
    return gpu.get("uuid") or gpu.get("CUDA_VISIBLE_DEVICES") or gpu.get("HIP_VISIBLE_DEVICES")


def verdicts(records: list[dict]) -> dict[tuple, str]:
    """(test, kernel, check, case id) -> the last outcome recorded for it."""
    out = {}
    for r in records:
        out[(r.get("test"), r.get("kernel"), r.get("check"), r.get("case_id"))] = r.get("outcome")
    return out


def worker_gpus(records: list[dict]) -> dict[str, list[str]]:
    """Worker -> the distinct GPUs its records ran on (sorted)."""
    seen = defaultdict(set)
    for r in records:
        key = _gpu_key(r.get("gpu"))
        if r.get("worker") and key:
            seen[r["worker"]].add(key)
    return {w: sorted(g) for w, g in sorted(seen.items())}


def compare(one: dict, multi: dict, expect_gpus: int = 2) -> dict:
    """The comparison document: pinning (each worker on one GPU, `expect_gpus` GPUs used), verdict agreement, ok."""
    a, b = verdicts(one["records"]), verdicts(multi["records"])
    differ = sorted((k for k in a.keys() & b.keys() if a[k] != b[k]), key=str)
    only_one, only_multi = sorted(a.keys() - b.keys(), key=str), sorted(b.keys() - a.keys(), key=str)
    workers = worker_gpus(multi["records"])
    used = sorted({g for gs in workers.values() for g in gs})
    shared = {w: gs for w, gs in workers.items() if len(gs) != 1}
    unlabelled = sum(1 for r in multi["records"] if not _gpu_key(r.get("gpu")))
    pinning_ok = bool(workers) and not shared and len(used) >= expect_gpus
    same = not differ and not only_one and not only_multi

    def rows(keys, with_outcomes=False):
        return [dict(zip(("test", "kernel", "check", "case_id"), k),
                     **({"one_gpu": a[k], "multi_gpu": b[k]} if with_outcomes else {})) for k in keys[:MAX_LISTED]]

    return {"kind": "two-GPU verdict comparison", **provenance.record_fields(), "ok": pinning_ok and same,
            "pinning": {"ok": pinning_ok, "gpus_expected": expect_gpus, "gpus_used": used, "workers": workers,
                        "workers_on_several_gpus": shared, "records_without_gpu": unlabelled},
            "verdicts": {"same": same, "compared": len(a.keys() & b.keys()), "one_gpu": len(a),
                         "multi_gpu": len(b), "differ": rows(differ, True), "n_differ": len(differ),
                         "only_one_gpu": rows(only_one), "n_only_one_gpu": len(only_one),
                         "only_multi_gpu": rows(only_multi), "n_only_multi_gpu": len(only_multi)},
            "complete": bool(one.get("complete")) and bool(multi.get("complete"))}


def _load(path: str, what: str) -> dict:
    allowed = "a --conformance-report JSON file"
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InvalidInput(what, path, f"{allowed} ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise InvalidInput(what, path, f"{allowed} (it has no 'records' list)")
    return doc


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m benchmarks.two_gpu ONE_GPU_REPORT.json MULTI_GPU_REPORT.json OUT.json",
              file=sys.stderr)
        return 2
    try:
        doc = compare(_load(args[0], "ONE_GPU_REPORT"), _load(args[1], "MULTI_GPU_REPORT"))
    except InvalidInput as e:
        print(e, file=sys.stderr)
        return 2
    Path(args[2]).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    p, v = doc["pinning"], doc["verdicts"]
    print(f"pinning {'ok' if p['ok'] else 'NOT ok'}: {len(p['workers'])} workers on GPUs {p['gpus_used']}; "
          f"verdicts {'same' if v['same'] else 'DIFFER'}: {v['compared']} compared, {v['n_differ']} differ, "
          f"{v['n_only_one_gpu']} only in the one-GPU run, {v['n_only_multi_gpu']} only in the multi-GPU run")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
