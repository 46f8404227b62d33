"""Where the CI plan kills a broken kernel: run its plan rows (conformance.cases.plan.ci_plan), both tiers, in plan
order, stopping at the first `fail`.

    hunt(kernel, seed, target=None, tiers=TIERS, profile=None, max_rows=None, only=None) -> Hunt

Rows are taken in plan order, both tiers side by side (row 1 of each tier, then row 2, ...), so `position` is the
first 1-based row index at which either tier's plan fails: the row a CI run of that seed reports first. `only`
(a predicate on a plan row) skips the rows a broken kernel's bug cannot reach, for one whose bug only one path
(format, dtype) runs (tests/unit/broken_paths.py: the other rows run the shipped code, so they cannot fail; the
position is the same). Only a `fail` (a wrong answer) kills; an `error` (the kernel raised) is recorded and stops
the hunt too, since a crash is not the suite catching the bug. The determinism double run is off: a kill is the one
bug's wrong answer. target None is this machine's (detect_target): the interpreter on CPU, the device on a GPU
host.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from conformance.checks.harness import Verdict, run_case
from conformance.core.targets import detect_target, parse_target

TIERS = ("exact", "statistical")


@dataclass
class Hunt:
    """`verdicts`: every row run, in order, up to and including the kill (or the error); `plan_rows()`: rows per
    tier; `position`: the kill's 1-based row index (None when the plans ran out or an error stopped the hunt)."""

    kernel: str
    seed: int
    target: str
    verdicts: list[Verdict] = field(default_factory=list)
    kill: Verdict | None = None
    error: Verdict | None = None
    position: int | None = None
    seconds: float = 0.0
    kill_path: str | None = None  # the path the killing case takes (Kernel.launch), None: not declared
    kill_role: str | None = None  # the killing row's plan role: class, large_k or path
    skipped: int = 0  # rows of other paths left out (`only`)
    tiers: tuple = TIERS
    profile: object = None

    def plan_rows(self) -> dict:
        """{tier: the row count of its whole plan} (builds the path rows a hunt that stopped early did not need)."""
        return {tier: len(rs) for tier, rs in plans(self.kernel, self.seed, parse_target(self.target), self.tiers,
                                                   self.profile).items()}

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "seed": self.seed, "target": self.target, "plan_rows": self.plan_rows(),
                "killed": self.kill is not None, "position": self.position, "rows_run": len(self.verdicts),
                "rows_skipped": self.skipped, "kill_path": self.kill_path, "kill_role": self.kill_role,
                "case_id": self.kill.case_id if self.kill else None,
                "tier": self.kill.check if self.kill else None,
                "detail": self.kill.detail[:300] if self.kill else None,
                "error": self.error.line()[:500] if self.error else None, "seconds": round(self.seconds, 2)}


def plans(kernel: str, seed: int, target=None, tiers=TIERS, profile=None, rows: bool = False) -> dict:
    """{tier: the kernel's CI plan on `target` (default this machine's) at run seed `seed`}: its cases, or with
    `rows` its PlanRows (each with the path its case takes)."""
    from conformance.cases.plan import build_plan
    from conformance.core import registry

    k = registry.get_kernel(kernel)
    t = detect_target() if target is None else target
    out = {tier: build_plan(k, t, tier, seed=seed, profile=profile).rows for tier in tiers}
    return out if rows else {tier: [r.case for r in rs] for tier, rs in out.items()}


class _Rows:
    """One tier's plan rows in order, its class rows first (plan.class_rows) and the whole plan (with its path rows)
    only once a hunt gets past them: most kills are in the first rows, and the path rows are most of a plan's cost."""

    def __init__(self, k, t, tier: str, seed: int, profile):
        from conformance.cases.plan import class_rows

        self.args = (k, t, tier)
        self.kw = {"seed": seed, "profile": profile}
        self.rows, self.whole = class_rows(k, t, tier, **self.kw), False

    def at(self, i: int):
        """Row i (0-based), or None past the plan's end."""
        if i >= len(self.rows) and not self.whole:
            from conformance.cases.plan import build_plan

            self.rows, self.whole = build_plan(*self.args, **self.kw).rows, True
        return self.rows[i] if i < len(self.rows) else None


def hunt(kernel: str, seed: int, target=None, tiers=TIERS, profile=None, max_rows: int | None = None,
         only=None) -> Hunt:
    """Run `kernel`'s plan rows (both tiers side by side, in plan order) until the first fail or error, or (when
    given) past row `max_rows` of each tier; `only(row) -> bool` leaves out the rows it refuses."""
    from conformance.core import registry

    t = detect_target() if target is None else target
    k = registry.get_kernel(kernel)
    by_tier = {tier: _Rows(k, t, tier, seed, profile) for tier in tiers}
    h = Hunt(kernel, seed, str(t), tiers=tuple(tiers), profile=profile)
    t0 = time.perf_counter()
    i = 0
    while max_rows is None or i < max_rows:
        row_i = {tier: by_tier[tier].at(i) for tier in tiers}
        if all(r is None for r in row_i.values()):
            break
        for tier in tiers:
            row = row_i[tier]
            if row is None:
                continue
            if only is not None and not only(row):
                h.skipped += 1
                continue
            v = run_case(row.case, k, t, check_determinism=False, record=False)
            h.verdicts.append(v)
            if v.outcome in ("fail", "error"):
                if v.outcome == "fail":
                    h.kill, h.position, h.kill_path, h.kill_role = v, i + 1, row.path, row.role
                else:
                    h.error = v
                h.seconds = time.perf_counter() - t0
                return h
        i += 1
    h.seconds = time.perf_counter() - t0
    return h
