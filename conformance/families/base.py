"""The op-family interface: everything the suite knows about one op family lives in one `Family` object.

Like PyTorch's OpInfo, a family object owns its config type, its one config space, its case-id fields, its
strategies, its input builder, its reference and its comparison. Outside `conformance.families` nothing
branches on a family name: code asks the family object (`conformance.families.get_family(name)`).
"""
from __future__ import annotations

import itertools
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

from references.errors import require


@dataclass(frozen=True)
class CaseField:
    """One family-specific field of a case and of its id (`key=value` in the id).

    key: the key written in ids (short, stable: renaming it breaks stored ids);
    attr: the Case attribute / config field it fills;
    kind: int, bool, or a tuple of allowed string values;
    doc: one line for the docs' field table;
    fmt / parse: value <-> id text (default: str() / int() / "1"|"0" for bool / identity for strings);
    default: the value when an id omits the key (absent: the key is required).
    """

    key: str
    attr: str
    kind: Any
    doc: str
    fmt: Any = None
    parse: Any = None
    default: Any = ...

    @property
    def required(self) -> bool:
        return self.default is ...


@dataclass(frozen=True)
class Exclusion:
    """A combination left out of a family's config space on purpose: `what` and `why` are shown in coverage
    reports; `applies(cls)` is True for the config classes it removes."""

    what: str
    why: str
    applies: Any


@dataclass
class Grade:
    """A comparison's result as the family reports it: pass/fail, metrics for reports, one line of detail."""

    ok: bool
    metrics: dict
    detail: str


class Family:
    """One op family. Subclasses set the data members and implement the methods marked (family); the rest
    is generic. Members, each with its contract:

    Identity and case ids
      name: the family name (a `core.registry.FAMILIES` entry); config_type: its layer-config dataclass.
      case_fields / legacy_id_fields / regimes: the case-id table, the old positional id layout, data regimes.
      validate_case(case) / config_from_case(case): cross-field case rules; the config a gate judges.
    Config space (the one enumeration every consumer uses)
      axes: ((axis, values), ...): the discrete config axes in nesting order, each with all its values.
      exclusions: Exclusion rules, stated once; config_classes() never yields a class they apply to.
      Class: namedtuple of one value per axis (made from `axes`).
      config_classes(order=None, **values) -> [Class]: the product of the axes (an axis may be narrowed or
        reordered by passing its values, the nesting by `order`) minus exclusions.
      config(cls, **shape) -> config (family): the layer config of a class at a shape (N/K, hidden).
      config_space(shape=None, order=None, **values) -> [config]: config(cls, **shape) for config_classes().
      probe_shapes: shapes (dicts for config()) that the derived gate summary probes.
      gate_summary(kernel, targets=PROBE_TARGETS) -> str: one line derived from the kernel's can_implement.
    Labels and representatives
      size_label: what the row count of one call is called in tables ("M", "tokens").
      class_label(config) -> str (family): the coverage row a config falls in (folds the `folded` axes).
      folded: the axes a coverage row folds, in words.
      ledger_configs() -> [config] (family): the representative classes of the selection ledger.
      ledger_label(config) -> str (family): one ledger line's class, e.g. "w4a16 uint4 g128 noao float16".
      representative_config() -> config (family): a typical config, for "accepts no case" messages.
      coverage_configs(kernels, target, **shape) -> (configs, exclusions) (family): the space a coverage sweep
        runs through the gates on `target`, and the exclusions (dicts what/why) it reports.
      prefill_m / bench_prefill_m: rows of the compile-boundary prefill call in contract checks (interpreter
        sized) and in the GPU bench.
    Strategies and corpus
      tier_regimes(tier) -> tuple (family): the data regimes cases of a tier draw from.
      accepted_classes(kernel, target, tier, profile) -> [Class] (family): classes the gate accepts at some
        shape within the profile's ceilings (probed, cached).
      draw_case(draw, kernel, target, tier, profile) -> dict (family): Case keyword arguments (all but family,
        kernel, tier) of a case the kernel's gate accepts on target; raises ValueError when none exists.
      any_case_fields() -> strategy of dicts (family): any valid case's fields, no gate (id round trips).
      corpus_classes() -> [(label, fields)] (family): the fixed corpus classes; fields are Case kwargs.
      corpus_case_fields(fields, seed0) -> [dict] (family): a class's fixed cases' Case kwargs.
    Running and grading
      exact_unjudgeable(numerics) -> str | None (family): why the exact tier cannot judge a kernel declaring
        these numerics (None: it can).
      run(case, kernel, config, ex) -> (Grade-like, note) (family): build the inputs from the case's seed,
        load, call through `ex` (the harness's checks.execution.Execution: device, NaN-filled allocations,
        determinism, tolerance), compare with the reference; note is the determinism note.
    Contract checks and CLI
      contract_config(spec) / contract_inputs(kernel, spec) -> (operands, x) (family): a contract-check spec
        dict as a config, and its operands (through the kernel's own load) and activations.
      contract_specs() / contract_representatives() / contract_alternates(spec, accepts) (family): the
        hypothesis specs, fixed representative specs, and extra opcheck specs of the suite's contract tests.
      contract_spec_fields: ((spec key, case attr), ...) for every spec key but seed: a contract failure's
        check id writes its spec as case fields (conformance.cases.check_ids); () = no check ids.
      cli_fields: `select` argument dests only this family reads; config_from_args(args) -> config (family).
    Kernel paths in the CI plan (conformance/cases/plan.py; the other plan hooks: docs/ci-plan.md section 6)
      plan_path_cross: plan axes crossed in full with the path a case takes (`Kernel.launch(...).path`);
        plan_path_pairs: plan axes each path meets pairwise. Both () by default: every path entered once.
      plan_rows_field: the case field holding the row count `Kernel.launch` takes ("M", "tokens").
      plan_path_shapes(kernel, target, tier, members, tiles) -> [fields]: the smallest shapes of a plan class
        the gate accepts (row count 1: the plan probes it), smallest first; [] (default): none.
      plan_size(fields) -> int: a shape's size without its rows (the plan enters a path at the least rows x
        size); plan_row_limit(kernel, tier, fields, regime) -> str | None: why a path row at these fields cannot
        run under a data regime (the exact tier's K limits); None by default.
      plan_path_fit(fields) -> bool: whether a row of these fields can show how its path reads what the cell's
        format stores (W4A16: stored zero points need two groups and two zeros words); a cell that some fitting
        shape enters is covered only by fitting rows. True by default.
    """

    name: str = ""
    config_type: type = None
    case_fields: tuple = ()  # CaseField table: generates case ids, their parser and the docs' table
    # The positional id layout before key=value ids (bodies joined by '-'), so old ids keep parsing:
    # ((position, attr, pattern), ...) for the family's fields (regime, tier, seed follow them); pattern is a
    # regex whose group 1 is the value as written after `key=`, or a dict {old token: value as written}.
    legacy_id_fields: tuple = ()
    regimes: tuple = ()  # data regimes a case of this family may name

    # ---- kernel paths in the CI plan: defaults (a family without path shapes: paths only where class rows enter)
    plan_path_cross: tuple = ()
    plan_path_pairs: tuple = ()
    plan_rows_field: str = "M"

    def plan_path_shapes(self, kernel, target, tier: str, members: list, tiles) -> list:
        return []

    def plan_size(self, fields: dict) -> int:
        return 1

    def plan_row_limit(self, kernel, tier: str, fields: dict, regime: str) -> str | None:
        return None

    def plan_path_fit(self, fields: dict) -> bool:
        return True

    def validate_case(self, case) -> None:
        """Raise references.errors.InvalidInput when `case`'s fields do not fit together (Case has already
        checked each field's kind and choices, the tier, the regime and the seed)."""

    def config_from_case(self, case):
        """The layer config (a `config_type`) that a kernel's gate judges for `case`."""
        raise NotImplementedError(f"family {self.name!r} has no config_from_case")

    # ---- the config space (generic over `axes` and `exclusions`) ------------------------------------------
    axes: tuple = ()
    exclusions: tuple = ()
    probe_shapes: tuple = ()
    summary_all: tuple = ()  # axes the gate summary writes as "all" when every value is accepted
    size_label: str = "M"
    folded: str = ""
    prefill_m: int = 64
    bench_prefill_m: int = 512
    cli_fields: tuple = ()
    contract_spec_fields: tuple = ()  # ((contract spec key, case attr), ...): check ids (cases.check_ids)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.axes:
            cls.Class = namedtuple(f"{cls.__name__}Class", [a for a, _ in cls.axes])

    def excluded(self, cls) -> Exclusion | None:
        """The first exclusion that removes `cls`, or None."""
        return next((e for e in self.exclusions if e.applies(cls)), None)

    def config_classes(self, order=None, **values) -> list:
        """Every config class (one value per axis) minus exclusions; `values` narrows or reorders an axis,
        `order` (axis names) sets the nesting of the enumeration (default: `axes` order)."""
        names = [a for a, _ in self.axes]
        unknown = sorted(set(values) - set(names))
        require(not unknown, "config axis", unknown, f"axes of {self.name}: {names}")
        vals = {a: tuple(values.get(a, v)) for a, v in self.axes}
        order = tuple(order or names)
        out = []
        for combo in itertools.product(*(vals[a] for a in order)):
            cls = self.Class(**dict(zip(order, combo)))
            if self.excluded(cls) is None:
                out.append(cls)
        return out

    def config(self, cls, **shape):
        raise NotImplementedError(f"family {self.name!r} has no config")

    def config_space(self, shape: dict | None = None, order=None, **values) -> list:
        """The layer configs of config_classes(order, **values) at one shape (family defaults when None)."""
        return [self.config(c, **(shape or {})) for c in self.config_classes(order, **values)]

    def gate_summary(self, kernel, targets=None) -> str:
        """One line derived from `kernel.can_implement`: the probe targets and, per axis, the values accepted
        by some (class, probe shape) on some probe target."""
        from conformance.core.targets import parse_target

        probes = [parse_target(t) for t in (targets or PROBE_TARGETS)]
        accepted_on, seen = [], {a: set() for a, _ in self.axes}
        for t in probes:
            hit = False
            for cls in self.config_classes():
                if any(_accepts(kernel, self, cls, shape, t) for shape in self.probe_shapes):
                    hit = True
                    for a in seen:
                        seen[a].add(getattr(cls, a))
            if hit:
                accepted_on.append(t.arch or str(t))
        if not accepted_on:
            return "accepts no probed config on " + ", ".join(t.arch or str(t) for t in probes)
        parts = ["targets: " + ", ".join(accepted_on)]
        for a, values in self.axes:
            got = [v for v in values if v in seen[a]]
            if a in self.summary_all and len(got) == len(values):
                text = "all"
            elif all(isinstance(v, bool) for v in values):
                text = "/".join("yes" if v else "no" for v in got)
            else:
                text = ", ".join(str(v) for v in got)
            parts.append(f"{AXIS_WORDS.get(a, a)}: {text}")
        return "; ".join(parts)


# Targets the derived gate summary probes (gates are pure: no hardware needed)
PROBE_TARGETS = ("cpu", "cuda:sm80", "cuda:sm90", "rocm:gfx942", "rocm:gfx1100", "rocm:gfx1151", "rocm:gfx1201")
AXIS_WORDS = {"weight_type": "weight types", "group_size": "groups", "act_order": "act-order", "dtype": "dtypes",
              "format": "formats", "fp8_dtype": "fp8 dtypes", "ue8m0": "UE8M0",
              "column_major_scales": "column-major scales"}


def _accepts(kernel, family, cls, shape: dict, target) -> bool:
    try:
        config = family.config(cls, **shape)
    except ValueError:  # a class that does not fit this probe shape (e.g. a group that does not divide K)
        return False
    return kernel.can_implement(config, target) is None
