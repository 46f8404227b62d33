"""Merging the JSON reports of the shards of one run (`--conformance-shard I/N` jobs) into one report, the one an
unsharded run would have written: records in shard order, plan coverage per (kernel, tier, target) with the rows
that ran summed, cases per second (per family and per kernel) recomputed from the summed cases and seconds, JIT
compiles summed, seeds kept, lists (the skipped tests' reasons) concatenated.

Refused, with one line naming the file, the key and what is allowed (InvalidInput): a report that is not a complete
report of a sharded run, reports of different runs (seed, commit, target or profile differ), a shard twice, a shard
missing, and a key this module does not know how to merge whose values differ between the shards.
"""
from __future__ import annotations

import json

from references.errors import InvalidInput

SAME_RUN = ("seed", "commit", "target", "profile")  # every shard of one run agrees on these
# keys merged below; any other key must be equal in every shard (kept) or a list (concatenated)
MERGED = {"records", "produced", "complete", "crashed_workers", "plan", "cases_per_second", "threads", "shard",
          "jit", "seed_source", "selection", "cases_per_second_per_kernel", "workers", "planned", "stopped_kernels",
          "workers_replaced", *SAME_RUN}


def load(path: str) -> dict:
    """One shard's report; an unreadable file or one that is not a JSON object is InvalidInput naming the path."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidInput("report", path, f"a readable --conformance-report JSON file ({type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise InvalidInput("report", path, "a --conformance-report JSON object")
    return doc


def _check(named: list[tuple[str, dict]]) -> int:
    """Validate the shards of one run; returns the shard count N."""
    if not named:
        raise InvalidInput("reports", "[]", "the JSON reports of every shard of one run (I/N for each I in 1..N)")
    first_path, first = named[0]
    for path, doc in named:
        if doc.get("complete") is not True:
            raise InvalidInput(f"{path}: complete", doc.get("complete"),
                               "true (a report its run finished; an interrupted shard must be rerun)")
        shard = doc.get("shard")
        if not (isinstance(shard, dict) and all(isinstance(shard.get(k), int) for k in ("index", "count"))):
            raise InvalidInput(f"{path}: shard", shard, "a report written with --conformance-shard I/N")
        for key in SAME_RUN:
            if doc.get(key) != first.get(key):
                raise InvalidInput(f"{path}: {key}", doc.get(key),
                                   f"{first.get(key)!r} as in {first_path} (the shards of one run share seed, commit, "
                                   "target and profile)")
    count = first["shard"]["count"]
    seen: dict[int, str] = {}
    for path, doc in named:
        i, n = doc["shard"]["index"], doc["shard"]["count"]
        if n != count:
            raise InvalidInput(f"{path}: shard", f"{i}/{n}", f"a shard of {count} as in {first_path}")
        if i in seen:
            raise InvalidInput(f"{path}: shard", f"{i}/{n}", f"each shard once (shard {i}/{n} is also {seen[i]})")
        seen[i] = path
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        raise InvalidInput("reports", ", ".join(f"{seen[i]} ({i}/{count})" for i in sorted(seen)),
                           f"every shard 1..{count}; missing: {', '.join(f'{i}/{count}' for i in missing)}")
    return count


def _merge_plan(docs: list[dict]) -> list[dict]:
    """One entry per (kernel, tier, target): the plan's summary (the same in every shard: same seed and commit) with
    the rows that ran summed (shards run disjoint rows)."""
    out: dict[tuple, dict] = {}
    for doc in docs:
        for s in doc.get("plan") or []:
            key = (s["kernel"], s["tier"], s["target"])
            if key in out:
                out[key]["rows_ran"] = out[key].get("rows_ran", 0) + s.get("rows_ran", 0)
            else:
                out[key] = dict(s)
    return [out[k] for k in sorted(out)]


def _merge_throughput(docs: list[dict], key: str) -> dict:
    """Per family (or kernel): cases and seconds summed, cases per second recomputed."""
    from conformance.plugin.report import throughput_entry

    cases: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for doc in docs:
        for fam, v in (doc.get(key) or {}).items():
            cases[fam] = cases.get(fam, 0) + v["cases"]
            seconds[fam] = seconds.get(fam, 0.0) + v["seconds"]
    return {fam: throughput_entry(cases[fam], seconds[fam]) for fam in sorted(cases)}


def _merge_jit(docs: list[dict]) -> dict | None:
    from conformance.plugin.jit import merge_docs

    jits = [d["jit"] for d in docs if d.get("jit")]
    return merge_docs(jits) if jits else None


def _merge_replaced(docs: list[dict]) -> dict:
    from collections import Counter

    why = Counter()
    for d in docs:
        why.update((d.get("workers_replaced") or {}).get("why") or {})
    return {"count": sum(why.values()), "why": dict(sorted(why.items()))}


def merge(named: list[tuple[str, dict]]) -> dict:
    """The merged report of [(path, report), ...] (any order); InvalidInput when they are not the shards of one run."""
    count = _check(named)
    named = sorted(named, key=lambda pd: pd[1]["shard"]["index"])
    docs = [d for _, d in named]
    first = docs[0]
    produced = [d.get("produced") for d in docs]
    out = {key: first.get(key) for key in SAME_RUN}
    out.update({
        "seed_source": first.get("seed_source"), "selection": first.get("selection"),
        "shard": {"count": count, "merged": [d["shard"]["index"] for d in docs]},
        "shards": [{"index": d["shard"]["index"], "file": p, "records": len(d.get("records") or []),
                    "produced": d.get("produced"), "threads": d.get("threads"), "workers": d.get("workers")}
                   for p, d in named],
        "records": [r for d in docs for r in d.get("records") or []],
        "produced": sum(produced) if all(isinstance(p, int) for p in produced) else None,
        "complete": True,
        "crashed_workers": [dict(c, shard=d["shard"]["index"]) for d in docs for c in d.get("crashed_workers") or []],
        "plan": _merge_plan(docs), "cases_per_second": _merge_throughput(docs, "cases_per_second"),
        "cases_per_second_per_kernel": _merge_throughput(docs, "cases_per_second_per_kernel"), "threads": None,
        "jit": _merge_jit(docs), "workers": None,  # one timeline per shard job: in "shards"
        "planned": sum(d["planned"] for d in docs) if all(isinstance(d.get("planned"), int) for d in docs) else None,
        "stopped_kernels": {k: v for d in docs for k, v in (d.get("stopped_kernels") or {}).items()},
        "workers_replaced": _merge_replaced(docs)})
    for key in sorted({k for d in docs for k in d} - MERGED):  # keys added since: equal, or lists to concatenate
        values = [d.get(key) for d in docs]
        if all(isinstance(v, list) for v in values):
            out[key] = [x for v in values for x in v]
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        else:
            path = next(p for p, d in named if d.get(key) != values[0])
            raise InvalidInput(f"{path}: {key}", next(v for v in values if v != values[0]),
                               f"{values[0]!r} as in {named[0][0]} (merge-reports merges only lists and equal "
                               "values of this key)")
    return out
