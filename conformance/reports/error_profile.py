"""Error profiles: per kernel and config class, the max and p99 error ratio over a fixed seeded corpus.

    profile = run_profile(kernels, target)       # {"kernels": {name: {class: {...}}}, ...}
    save(profile, path); compare(load(path), run_profile(...)) -> Comparison of classes

The corpus is conformance.corpus (statistical tier only, the tier with a ratio). A class's p99 is the
largest per-case 99th-percentile element ratio of its cases. `compare` flags every class whose max
ratio grew more than GROWTH_LIMIT times, even when every case still passes: drift shows here long
before a verdict fails. Ratios below RATIO_FLOOR are compared as RATIO_FLOOR, so a class sitting at
~0 (a kernel bit-identical to the reference) does not flag on rounding-level noise.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from conformance.cases import corpus
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.targets import Target, parse_target
from references.errors import InvalidInput

FORMAT_VERSION = 1
GROWTH_LIMIT = 2.0
RATIO_FLOOR = 1e-3


def _kernels(kernels) -> list[registry.Kernel]:
    if kernels is None:
        return registry.all_kernels()
    if isinstance(kernels, str):
        return registry.resolve_kernels(kernels)
    return [registry.get_kernel(k) if isinstance(k, str) else k for k in kernels]


def runnable(kernel, target: Target) -> bool:
    """True when the kernel can run here at all: available, or it has a model."""
    return kernel.availability(target) is None or kernel.has_model


def run_profile(kernels=None, target="cpu") -> dict:
    """Run the statistical corpus for every runnable kernel on the classes its gate accepts on `target`."""
    t0 = time.perf_counter()
    t = parse_target(target) if isinstance(target, str) else target
    out: dict[str, dict] = {}
    skipped = {}
    for k in _kernels(kernels):
        if not runnable(k, t):
            skipped[k.name] = f"cannot run here and has no model: {k.availability(t)}"
            continue
        classes = {}
        for cls in corpus.classes(k.family):
            cases = corpus.accepted_cases(k, cls, t, tier="statistical")
            if not cases:
                continue
            vs = [run_case(c, k, t, check_determinism=False, record=False) for c in cases]
            ratios = [v.metrics.get("max_ratio", float("inf")) for v in vs]
            worst = max(range(len(vs)), key=lambda i: ratios[i])
            classes[cls.label] = {
                "max_ratio": max(ratios),
                "p99_ratio": max(v.metrics.get("p99_ratio", v.metrics.get("max_ratio", float("inf"))) for v in vs),
                "n_cases": len(vs),
                "failures": [v.case_id for v in vs if v.outcome != "pass"],
                "worst_case": vs[worst].case_id,
                "run_mode": sorted({v.run_mode or "-" for v in vs}),
                "case_ids": [v.case_id for v in vs],
            }
        out[k.name] = classes
    return {"version": FORMAT_VERSION, "target": str(t), "kernels": out, "not_run": skipped,
            "growth_limit": GROWTH_LIMIT, "wall_time_s": round(time.perf_counter() - t0, 2)}


def save(profile: dict, path: str) -> None:
    """Write the profile JSON atomically (temp file, then rename); an unwritable path is InvalidInput(--save)."""
    from conformance.reports.files import atomic_write_text

    atomic_write_text(path, json.dumps(profile, indent=1) + "\n", "--save")


_CLASS_FIELDS = {"max_ratio": "a finite number >= 0 (or Infinity)", "p99_ratio": "a finite number >= 0 (or Infinity)",
                 "failures": "a list of case ids", "worst_case": "a case id string"}


def _ratio_ok(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v >= 0


def validate_profile(doc, path: str) -> dict:
    """Check every field `compare` reads: a saved profile is input, so a missing or mistyped field (or a NaN
    ratio, which would compare as OK) is InvalidInput naming the field path, e.g. `--compare kernels.k.c.max_ratio`."""
    def bad(where: str, value, allowed: str):
        raise InvalidInput(f"--compare {path}: {where}", value, allowed)

    if not isinstance(doc, dict):
        bad("document", type(doc).__name__, "a JSON object written by `profile --save`")
    if doc.get("version") != FORMAT_VERSION:
        bad("version", doc.get("version"), f"{FORMAT_VERSION} (written by `profile --save`)")
    if not isinstance(doc.get("target"), str):
        bad("target", doc.get("target"), "a target name string, e.g. 'cpu'")
    kernels = doc.get("kernels")
    if not isinstance(kernels, dict):
        bad("kernels", type(kernels).__name__ if kernels is not None else None,
            "an object {kernel: {class: {max_ratio, p99_ratio, failures, worst_case}}}")
    for kname, classes in kernels.items():
        if not isinstance(classes, dict):
            bad(f"kernels.{kname}", type(classes).__name__, "an object {class label: class entry}")
        for label, entry in classes.items():
            where = f"kernels.{kname}.{label}"
            if not isinstance(entry, dict):
                bad(where, type(entry).__name__, "an object with " + ", ".join(_CLASS_FIELDS))
            for key, allowed in _CLASS_FIELDS.items():
                v = entry.get(key)
                ok = (_ratio_ok(v) if key.endswith("_ratio") else
                      isinstance(v, list) and all(isinstance(x, str) for x in v) if key == "failures" else
                      isinstance(v, str))
                if not ok:
                    bad(f"{where}.{key}", v, allowed + ("" if key in entry else " (missing)"))
    return doc


def load(path: str) -> dict:
    """The saved profile at `path`, validated (validate_profile); unreadable or malformed: InvalidInput."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InvalidInput("--compare", path, f"a readable error-profile JSON file ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]})") from None
    return validate_profile(doc, path)


@dataclass
class ProfileDiff:
    """What changed between a saved profile and a new run. `ok` is False on any entry of grew/failing/missing."""

    grew: list[dict] = field(default_factory=list)  # max ratio grew > GROWTH_LIMIT x
    failing: list[dict] = field(default_factory=list)  # some case of the class fails now
    missing: list[str] = field(default_factory=list)  # kernel/class in the saved profile, not run now
    new: list[str] = field(default_factory=list)  # run now, not in the saved profile (informational)
    rows: list[dict] = field(default_factory=list)  # every compared class

    @property
    def ok(self) -> bool:
        return not (self.grew or self.failing or self.missing)


def compare(saved: dict, current: dict, growth_limit: float = GROWTH_LIMIT) -> ProfileDiff:
    """Class by class: flag max-ratio growth beyond `growth_limit`, failing cases, and classes gone missing."""
    diff = ProfileDiff()
    for kname, classes in sorted(saved["kernels"].items()):
        now_k = current["kernels"].get(kname)
        for label, old in sorted(classes.items()):
            now = None if now_k is None else now_k.get(label)
            key = f"{kname} / {label}"
            if now is None:
                diff.missing.append(key)
                continue
            new_max = now["max_ratio"]
            # a NaN ratio (a kernel returning NaN where the reference has none) never compares as OK
            growth = (float("inf") if math.isnan(new_max) else
                      max(new_max, RATIO_FLOOR) / max(old["max_ratio"], RATIO_FLOOR))
            if math.isnan(growth):  # inf / inf: a class that failed before and still fails
                growth = 1.0
            row = {"kernel": kname, "class": label, "old_max": old["max_ratio"], "new_max": now["max_ratio"],
                   "old_p99": old["p99_ratio"], "new_p99": now["p99_ratio"], "growth": growth,
                   "worst_case": now["worst_case"]}
            diff.rows.append(row)
            if growth > growth_limit:
                diff.grew.append(row)
            if now["failures"]:
                diff.failing.append({**row, "failures": now["failures"]})
    for kname, classes in sorted(current["kernels"].items()):
        for label in sorted(classes):
            if label not in saved["kernels"].get(kname, {}):
                diff.new.append(f"{kname} / {label}")
    return diff


def render_diff(diff: ProfileDiff, growth_limit: float = GROWTH_LIMIT) -> str:
    """Terminal lines: one per flagged class (named), then a one-line verdict."""
    lines = []
    for r in diff.grew:
        lines.append(f"GREW {r['kernel']} / {r['class']}: max ratio {r['old_max']:.3g} -> {r['new_max']:.3g} "
                     f"({r['growth']:.2f}x > {growth_limit:g}x; p99 {r['old_p99']:.3g} -> {r['new_p99']:.3g}); "
                     f"worst case {r['worst_case']}")
    for r in diff.failing:
        lines.append(f"FAILING {r['kernel']} / {r['class']}: " + ", ".join(r["failures"]))
    for key in diff.missing:
        lines.append(f"MISSING {key}: in the saved profile but not run now (kernel gone, or its gate refuses it)")
    for key in diff.new:
        lines.append(f"new {key}: not in the saved profile (not compared)")
    n = len(diff.rows)
    verdict = ("OK" if diff.ok else "CHANGED") + (
        f": {n} classes compared; {len(diff.grew)} grew > {growth_limit:g}x, {len(diff.failing)} failing, "
        f"{len(diff.missing)} missing")
    return "\n".join(lines + [verdict]) + "\n"


def render_profile(profile: dict, top: int = 3) -> str:
    """Terminal lines: per kernel the class count and worst max ratio, then its `top` worst classes."""
    lines = [f"error profile on {profile['target']} ({profile['wall_time_s']} s)"]
    for kname, classes in profile["kernels"].items():
        if not classes:
            lines.append(f"  {kname}: no corpus class accepted on this target")
            continue
        worst = sorted(classes.items(), key=lambda kv: -kv[1]["max_ratio"])
        lines.append(f"  {kname}: {len(classes)} classes, {sum(c['n_cases'] for c in classes.values())} cases, "
                     f"max ratio {worst[0][1]['max_ratio']:.3g}")
        for label, c in worst[:top]:
            lines.append(f"      {label:<34} max {c['max_ratio']:.3g}  p99 {c['p99_ratio']:.3g}"
                         f"{'  FAILING' if c['failures'] else ''}")
    for kname, why in profile["not_run"].items():
        lines.append(f"  {kname}: not run ({why})")
    return "\n".join(lines) + "\n"
