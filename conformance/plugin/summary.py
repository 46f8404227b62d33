"""The terminal summary: verdicts per kernel and check, run modes per kernel (a loud warning for a requested kernel
of which nothing ran), CI plan coverage, cases per second (per family; per kernel beside its JIT compiles), the
selection ledger and the replay lines of failures."""
from __future__ import annotations

from collections import Counter, defaultdict

from conformance.plugin import timeline
from conformance.plugin.jit import doc as jit_doc
from conformance.plugin.jit import line as jit_line
from conformance.plugin.options import _is_worker, _target
from conformance.plugin.prewarm import line as prewarm_line
from conformance.plugin.report import kernel_throughput, ledger, plan_summary, throughput
from conformance.plugin.skips import short_reason
from conformance.plugin.state import _State


def _class_label(entry: dict) -> str:
    from conformance.families import get_family

    fam = get_family(entry["family"])
    return fam.ledger_label(fam.config_type(**entry["config"]))


REAL_MODES = ("device", "interpreter")  # run modes that executed the kernel's real code


def run_counts(last: dict) -> dict:
    """Per kernel, from the last verdict of each (kernel, check, case): cases that ran the real code (device or
    interpreter), ran the kernel's model, or ran nothing (skip): {kernel: Counter(real=, model=, skipped=)}."""
    out = defaultdict(Counter)
    for (kern, _check, _case), r in last.items():
        if r["outcome"] == "skip" or not r.get("run_mode"):
            out[kern]["skipped"] += 1
        elif r["run_mode"] in REAL_MODES:
            out[kern]["real"] += 1
            out[kern][r["run_mode"]] += 1
        else:
            out[kern]["model"] += 1
    return out


def _skip_reasons(tr, kernel: str, last: dict) -> list[str]:
    """Distinct skip reasons for `kernel`: its skip records and its skipped tests (parametrized by its name)."""
    reasons = [r.get("detail", "") for (k, _c, _i), r in last.items() if k == kernel and r["outcome"] == "skip"]
    for rep in tr.stats.get("skipped", []):
        if f"[{kernel}" in rep.nodeid or f"-{kernel}-" in rep.nodeid or f"-{kernel}]" in rep.nodeid:
            lr = rep.longrepr
            reasons.append(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr))
    return sorted({short_reason(r) for r in reasons if r})


def _write_run_modes(tr, config, last: dict) -> None:
    """How each kernel ran: cases that ran real code (device/interpreter), its model, or nothing. A kernel named by
    --conformance-kernels whose every case ran nothing gets a loud WARNING line with the skip reasons (the session's
    exit status is left as pytest set it: a gate that refuses a target is a legitimate answer, but a run that
    tested nothing of a kernel someone asked for must not read as a pass)."""
    counts = run_counts(last)
    tr.write_sep("-", "run modes per kernel (cases: real code = device/interpreter, model, nothing = skipped)")
    for kern in sorted(counts):
        c = counts[kern]
        real = ", ".join(f"{m} {c[m]}" for m in REAL_MODES if c[m])
        tr.write_line(f"{kern}: real code {c['real']}" + (f" ({real})" if real else "")
                      + f", model {c['model']}, nothing (skipped) {c['skipped']}")
    opt = config.getoption("--conformance-kernels")
    requested = [n.strip() for n in opt.split(",") if n.strip()] if opt else []
    for kern in requested:
        c = counts.get(kern, Counter())
        if c["real"] or c["model"]:
            continue
        reasons = _skip_reasons(tr, kern, last)
        tr.write_line(f"WARNING: kernel {kern} was requested (--conformance-kernels) but NOTHING of it ran: every "
                      f"case was skipped; reasons: {reasons or ['no case was drawn or recorded']}", red=True, bold=True)


def kernel_cost_lines(per_kernel: dict, jit_doc: dict) -> list[str]:
    """Per kernel: cases judged per second and the JIT compiles with their seconds
    (`triton_w4a16: 430 cases in 38.2 s (11.26 cases/s); JIT 212 compiles, 95.1 s`)."""
    mode, jits = jit_doc.get("mode"), jit_doc.get("per_kernel") or {}
    out = []
    for kern in sorted(set(per_kernel) | set(jits)):
        v = per_kernel.get(kern)
        cases = (f"{v['cases']} cases in {v['seconds']} s" + (f" ({v['cases_per_second']} cases/s)"
                                                                if v["cases_per_second"] else "")) if v else "no cases"
        out.append(f"{kern}: {cases}; {jit_line(mode, jits.get(kern))}")
    return out


def _write_kernel_costs(tr, config) -> None:
    st: _State = config._conformance
    per_kernel = kernel_throughput(config)
    doc = jit_doc(st.jit_mode, st.jit)
    if not per_kernel and not doc["per_kernel"]:
        return
    tr.write_sep("-", f"cases per second and JIT compiles, per kernel (JIT: {st.jit_mode}; "
                      f"{doc['jit_compiles']} compiles, {doc['jit_seconds']} s in all)")
    if st.prewarm and "off" not in st.prewarm:
        tr.write_line(prewarm_line(st.prewarm))
    for line in kernel_cost_lines(per_kernel, doc):
        tr.write_line(line)


def _write_faults(tr, config) -> None:
    """Gates that raised (each fails the run, one line), kernels the crash breaker stopped, workers replaced and why,
    and planned items that never reported (the report is then incomplete)."""
    from collections import Counter

    from conformance.plugin.report import tested_gate_faults
    from conformance.plugin.state import gate_fault_line

    st: _State = config._conformance
    for kernel, reason in tested_gate_faults(config).items():
        tr.write_line(gate_fault_line(kernel, reason), red=True, bold=True)
    for kernel, why in sorted(st.stopped.items()):
        tr.write_line(f"conformance: {kernel} stopped by the crash breaker: {why}", red=True)
    replaced = [c for c in st.crashed if c.get("replaced", True)]
    if replaced:
        why = Counter(c.get("reason", "crash") for c in replaced)
        firsts = "; ".join(f"{c.get('reason', 'crash')} in {c.get('case_id') or c.get('test')}" for c in replaced[:5])
        tr.write_line(f"conformance: workers replaced: {len(replaced)} ("
                      + ", ".join(f"{n} {r}" for r, n in sorted(why.items())) + f"): {firsts}", red=True)
    for c in st.crashed:
        if not c.get("replaced", True):
            tr.write_line(f"conformance: {c.get('reason')} in {c.get('case_id')}: this process's later device cases "
                          "were not run (no worker to replace it: run with -n 1 or more)", red=True)
    missing = st.missing()
    if missing:
        tr.write_line(f"conformance: INCOMPLETE: {len(missing)} of {len(st.planned or ())} planned tests never "
                      f"reported (first: {missing[0]}); the report says complete: false", red=True, bold=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_worker(config):
        return
    st: _State = config._conformance
    tr = terminalreporter
    _write_faults(tr, config)
    recs = st.records
    if not recs:
        if config.getoption("--conformance-kernels"):  # requested kernels that recorded nothing still say so
            _write_run_modes(tr, config, {})
        return
    from conformance.cases.seeds import describe

    tr.write_sep("=", f"conformance summary (target {_target(config)}, profile "
                      f"{config.getoption('--conformance-profile')}, {describe(st.seed, st.seed_source)})")
    # last verdict per (kernel, check, case): hypothesis's shrink replays do not inflate counts
    last = {}
    for r in recs:
        last[(r["kernel"], r["check"], r.get("case_id") or id(r))] = r
    table = defaultdict(Counter)
    modes = defaultdict(set)
    for (kern, check, _), r in sorted(last.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
        table[(kern, check)][r["outcome"]] += 1
        if r.get("run_mode"):
            modes[(kern, check)].add(r["run_mode"])
    w = max(len(k) for k, _ in table) + 2
    tr.write_line(f"{'kernel':<{w}}{'check':<14}{'run_mode':<22}{'pass':>6}{'fail':>6}{'error':>6}{'skip':>6}")
    for (kern, check), c in sorted(table.items()):
        tr.write_line(f"{kern:<{w}}{check:<14}{','.join(sorted(modes[(kern, check)])) or '-':<22}"
                      f"{c['pass']:>6}{c['fail']:>6}{c['error']:>6}{c['skip']:>6}")
    _write_run_modes(tr, config, last)
    from conformance.cases.plan import summary_line
    from conformance.reports.report import throughput_lines

    plans = plan_summary(config)
    if plans:
        tr.write_sep("-", "CI plan coverage per kernel and tier (classes accepted / run / pair-covered; "
                          "details in --conformance-report)")
        for s in plans:
            tr.write_line(summary_line(s))
    tp = throughput(config)
    if tp:
        tr.write_sep("-", "cases judged per second, per family")
        for line in throughput_lines(tp):
            tr.write_line(line)
    _write_kernel_costs(tr, config)
    doc = st.timeline.doc() if st.timeline else None
    for line in (timeline.line(doc), timeline.startup_line(doc)):  # where the wall went, per worker
        if line:
            tr.write_line(line)
    tr.write_sep("-", "selection ledger")
    for e in ledger(config):
        tr.write_line(f"{_class_label(e)}: selected {e['selected'] or 'NOTHING'}")
        for r in e["refused"]:
            tr.write_line(f"    {r['kernel']} refused: {short_reason(r['reason'])}")
    bad = [r for r in last.values() if r["outcome"] in ("fail", "error")]
    if bad:
        tr.write_sep("-", f"{len(bad)} failing case(s): replay lines")
        for r in bad:
            if r.get("case_id"):
                tr.write_line(f"{r['outcome'].upper()} {r['case_id']} [{r.get('run_mode')}]  {r.get('replay', '')}")
            else:  # a worker crash outside any case: no id to replay, so say what died
                tr.write_line(f"{r['outcome'].upper()} {r['kernel']}: {r.get('detail', '')}")
