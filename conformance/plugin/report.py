"""The JSON report (--conformance-report): written atomically, incrementally during the run and complete at the end,
and what it summarizes (CI plan coverage, cases per second, the selection ledger)."""
from __future__ import annotations

import json
import time

from conformance.plugin import jit
from conformance.plugin.options import _is_worker, _shard, _target

REPORT_INTERVAL_S = 2.0


def _write_if_asked(config, *, complete: bool, force: bool = False) -> None:
    """Write --conformance-report (if given) atomically; incremental writes at most every REPORT_INTERVAL_S."""
    path = config.getoption("--conformance-report")
    st = getattr(config, "_conformance", None)  # conformance.plugin.state._State
    if not path or st is None or _is_worker(config):
        return
    now = time.monotonic()
    if not force and now - st.last_write < REPORT_INTERVAL_S:
        return
    st.last_write = now
    # `complete` only when every planned item has its report and no record was lost (an early end is incomplete)
    write_report(path, st.records, config, produced=st.produced(), complete=complete and st.complete(),
                 crashed=st.crashed, final=complete)


def write_report(path: str, records: list[dict], config, produced: int | None = None, *, complete: bool = True,
                 crashed=(), final: bool | None = None) -> None:
    """Atomically write {"target", "profile", "seed", "seed_source", "commit", "shard", "selection", "records",
    "produced", "complete", "crashed_workers", "plan", "cases_per_second", "cases_per_second_per_kernel", "jit",
    "threads", "skipped", "workers"} JSON (temp file, then rename). `produced`: how many records the processes made
    (each worker counts its own, crash records included); a sound merge has len(records) == produced. `complete` is
    False for the incremental writes during the run.
    conformance.plugin.merge merges the reports of the shards of one run."""
    from conformance.reports.files import atomic_write_text

    st = getattr(config, "_conformance", None)
    doc = {"target": str(_target(config)), "profile": config.getoption("--conformance-profile"),
           "seed": st.seed if st else None, "seed_source": st.seed_source if st else None,
           "selection": ledger(config), "records": records, "produced": produced, "complete": complete,
           "crashed_workers": list(crashed),
           "plan": plan_summary(config) if (complete if final is None else final) else [],
           "cases_per_second": throughput(config), "threads": st.threads if st else None,
           "commit": st.commit if st else None, "shard": _shard_doc(config),
           "skipped": st.skipped if st else [], "cases_per_second_per_kernel": kernel_throughput(config),
           "jit": jit.doc(st.jit_mode, st.jit, st.prewarm) if st else None,
           "workers": st.timeline.doc() if st and st.timeline else None,  # conformance.plugin.timeline
           "planned": len(st.planned) if st and st.planned is not None else None,
           "missing": st.missing()[:100] if st else [],
           "gate_faults": [{"kernel": k, "reason": r} for k, r in _gate_faults(config).items()],
           "stopped_kernels": dict(st.stopped) if st else {},
           "workers_replaced": _replaced(crashed)}
    atomic_write_text(path, json.dumps(doc, indent=1, default=str), "--conformance-report")


def _gate_faults(config) -> dict:
    return tested_gate_faults(config) if getattr(config, "_conformance", None) else {}


def tested_gate_faults(config) -> dict[str, str]:
    """{kernel: reason} of the kernels under test (--conformance-kernels, else all) whose gate raised in this run."""
    st = config._conformance
    opt = config.getoption("--conformance-kernels")
    wanted = {n.strip() for n in opt.split(",") if n.strip()} if opt else None
    return {k: r for k, r in sorted(st.gate_faults.items()) if wanted is None or k in wanted}


def _replaced(crashed) -> dict:
    """{"count": N, "why": {reason: n}}: xdist workers that died or retired and were replaced."""
    from collections import Counter

    why = Counter(c.get("reason", "crash") for c in crashed if c.get("replaced", True))
    return {"count": sum(why.values()), "why": dict(sorted(why.items()))}


def _shard_doc(config) -> dict | None:
    """{"index": I, "count": N} of --conformance-shard (1-based), None for an unsharded run."""
    shard = _shard(config)
    return None if shard is None else {"index": shard[0], "count": shard[1]}


COVERAGE_KEY = "conformance_coverage"  # workeroutput: a worker's coverage summaries of the plans it ran rows of


def plan_summary(config) -> list[dict]:
    """Per (kernel, tier, target) whose plan tests ran: conformance.cases.plan.coverage_summary (accepted classes,
    run, pair-covered, rows, per-class details) plus how many of its rows reported ("rows_ran"). Under xdist the
    summaries come from the workers (worker_coverage, merged by take_worker_coverage), which built those plans at
    collection: the controller builds a plan only for a key no worker sent (every worker that ran it crashed)."""
    st = getattr(config, "_conformance", None)
    if st is None:
        return []
    out = []
    for key, indices in sorted(st.plan_ran.items()):
        s = st.coverage.get(key) or _coverage(config, *key)
        if s is not None:
            out.append(dict(s, rows_ran=len([i for i in indices if i is not None])))
    return out


def _coverage(config, kernel: str, tier: str, target: str) -> dict | None:
    """coverage_summary of one plan under the run's seed and profile; None for a kernel gone since collection."""
    from conformance.cases.plan import coverage_summary
    from conformance.cases.profiles import get_profile
    from conformance.core import registry

    try:
        k = registry.get_kernel(kernel)
    except Exception:  # noqa: BLE001 - a kernel gone since collection: nothing to summarize
        return None
    profile = get_profile(config.getoption("--conformance-profile"))
    return coverage_summary(k, target, tier, seed=config._conformance.seed, profile=profile)


def worker_coverage(config) -> str:
    """xdist worker (pytest_sessionfinish): JSON [[kernel, tier, target], summary] of every plan it ran a row of
    (its plans are cached since collection: no rebuild), for the controller's plan_summary."""
    st = config._conformance
    return json.dumps([[list(key), s] for key in sorted(st.plan_keys) if (s := _coverage(config, *key)) is not None])


def take_worker_coverage(st, doc: str | None) -> None:
    """xdist controller (pytest_testnodedown): merge a worker's worker_coverage into st.coverage (the first
    worker's summary of a plan stands: every worker builds the same plan)."""
    for key, s in json.loads(doc) if doc else ():
        st.coverage.setdefault(tuple(key), s)


def throughput(config) -> dict:
    """Per family: cases judged, the seconds of the tests that judged them, and cases per second."""
    st = getattr(config, "_conformance", None)
    if st is None:
        return {}
    return {fam: throughput_entry(n, st.family_seconds[fam]) for fam, n in sorted(st.family_cases.items())}


def kernel_throughput(config) -> dict:
    """Per kernel: cases judged, the seconds of the tests that judged them, and cases per second."""
    st = getattr(config, "_conformance", None)
    if st is None:
        return {}
    return {k: throughput_entry(n, st.kernel_seconds[k]) for k, n in sorted(st.kernel_cases.items())}


def throughput_entry(cases: int, seconds: float) -> dict:
    """One family's throughput: {"cases", "seconds", "cases_per_second"} (None when no seconds were spent)."""
    return {"cases": cases, "seconds": round(seconds, 2),
            "cases_per_second": round(cases / seconds, 2) if seconds else None}



def ledger(config) -> list[dict]:
    """Per representative config class (each family's `ledger_configs`): the kernel selected on the target and
    every refusal reason."""
    from conformance.core import registry
    from conformance.families import all_families

    st = getattr(config, "_conformance", None)
    if st is not None and st.ledger is not None:  # the same for the whole run: computed once
        return st.ledger
    t = _target(config)
    out = []
    for fam in all_families():
        for cfg in fam.ledger_configs():
            sel = registry.select(cfg, t)  # gates that raise are refusals (registry containment), never a crash
            out.append({"family": fam.name, "config": cfg.to_dict(), **sel.to_dict()})
    if st is not None:
        st.ledger = out
    return out


