"""Check ids: one replayable id per contract or fusion check of one kernel on one input, in the case-id grammar.

    FAMILY/KERNEL/check=CHECK,<the family's case fields>,seed=N
    w4a16/triton_w4a16/check=fake_vs_real,M=5,N=256,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,seed=1

Keys: `check` (which check: CHECKS), then the family's own `case_fields` (the same keys, values, spellings and
defaults as in a case id), then `seed`, in any order; no regime or tier (a check draws its input its own way,
from the seed). `check=` is what tells a check id from a case id (`parse_id` reads both). Values, errors and
shell-safety are those of conformance.cases.ids.

A contract check's input is a family's contract spec (`Family.contract_specs`); the family maps its spec keys to
its case fields (`Family.contract_spec_fields`), so `CheckCase.from_spec(check, kernel, family, spec).spec() ==
spec`. The fusion check's input is a quant config, a row count and a seed (`CheckCase.from_config`).
`python -m conformance repro ID` replays a check id (conformance.checks.check_replay).
"""
from __future__ import annotations

import numbers

from conformance.cases import ids
from conformance.core.registry import FAMILIES
from conformance.core.registry import KERNEL_NAME_RE as KERNEL_RE
from conformance.families import get_family
from conformance.families.base import CaseField
from references.errors import InvalidInput, require

# every contract check a report shows, in its column order (conformance.checks.contracts re-exports it)
CHECKS = ("fake_vs_real", "make_fx", "opcheck", "compile_boundary", "fusion")
CHECK_FIELD = CaseField("check", "check", CHECKS, "which check: fake vs real (FakeTensor), make_fx graph, "
                        "opcheck, the torch.compile boundary, or the RMSNorm + quant fusion pass")
SEED_FIELD = next(f for f in ids.COMMON_FIELDS if f.key == "seed")
EXAMPLE_CHECK_ID = ("w4a16/triton_w4a16/"
                    "check=fake_vs_real,M=5,N=256,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,seed=1")


def check_id_fields(family) -> tuple:
    """The id field table of a check of `family` (a name or Family): check, the family's case_fields, seed."""
    fam = get_family(family) if isinstance(family, str) else family
    return (CHECK_FIELD, *fam.case_fields, SEED_FIELD)


def is_check_id(text) -> bool:
    """True when `text` is written as a check id (a `check=` key in its fields), whether or not it is valid."""
    return isinstance(text, str) and text.count("/") == 2 and any(
        p.startswith(CHECK_FIELD.key + "=") for p in text.strip().split("/")[2].split(","))


class CheckCase:
    """One check of one kernel on one input: family, kernel, check, seed and the family's case fields (as attributes,
    like a Case's). Validated on construction: each field's kind and choices, the kernel name, the check, seed >= 0,
    and the family's rules across fields (its `validate_case`). Immutable, hashable, equal by value."""

    __slots__ = ("family", "kernel", "check", "seed", "_fields")

    def __init__(self, family, kernel, check, seed, **fields):
        require(family in FAMILIES, "family", family, f"one of {list(FAMILIES)}")
        fam = get_family(family)
        require(isinstance(kernel, str) and bool(KERNEL_RE.fullmatch(kernel)), "kernel", kernel,
                "a registered kernel name (letters, digits, '_' and '.')")
        require(check in CHECKS, "check", check, f"one of {list(CHECKS)}")
        require(isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0, "seed", seed,
                "a non-negative int")
        values = {}
        for f in fam.case_fields:
            if f.attr in fields:
                values[f.attr] = ids._coerce(f, fields.pop(f.attr))
            elif f.required:
                raise InvalidInput(f.attr, None, f"a value (required for family {family}): {f.doc}")
            else:
                values[f.attr] = ids._coerce(f, f.default)
        if fields:
            raise TypeError(f"CheckCase() got unexpected fields {sorted(fields)} for family {family}")
        for name, value in (("family", family), ("kernel", kernel), ("check", check), ("seed", int(seed)),
                            ("_fields", values)):
            object.__setattr__(self, name, value)
        self.case()  # the family's rules across fields (K a multiple of the group size, ...)

    def __getattr__(self, name):
        if not name.startswith("__"):
            try:
                values = object.__getattribute__(self, "_fields")
            except AttributeError:
                values = {}
            if name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}: a CheckCase is immutable")

    def _key(self) -> tuple:
        return self.family, self.kernel, self.check, self.seed, tuple(self._fields.items())

    def __eq__(self, other):
        return self._key() == other._key() if isinstance(other, CheckCase) else NotImplemented

    def __hash__(self):
        return hash(self._key())

    def __repr__(self) -> str:
        return f"CheckCase({self.id})"

    def __str__(self) -> str:
        return self.id

    @property
    def id(self) -> str:
        """`family/kernel/check=...,<case fields>,seed=N`, every key in table order; parse_id(cc.id) == cc."""
        values = {"check": self.check, "seed": self.seed, **self._fields}
        body = ",".join(f"{f.key}={ids.format_value(f, values[f.attr])}" for f in check_id_fields(self.family))
        return f"{self.family}/{self.kernel}/{body}"

    @property
    def fields(self) -> dict:
        """The family's case fields: attribute -> value."""
        return dict(self._fields)

    @property
    def rows(self) -> int:
        """The input's row count (the family's `size_label` field: M, tokens)."""
        return self._fields[get_family(self.family).size_label]

    def case(self) -> ids.Case:
        """A Case with the same fields, kernel and seed (statistical tier, the family's first regime): the family's
        cross-field rules and config_from_case apply to it. Only its fields mean anything."""
        fam = get_family(self.family)
        return ids.Case(family=self.family, kernel=self.kernel, regime=fam.regimes[0], tier="statistical",
                        seed=self.seed, **self._fields)

    def config(self):
        """The layer config the fields describe (the family's config_from_case)."""
        return self.case().config()

    def spec(self) -> dict:
        """The family's contract spec (conformance.checks.contracts builds the sample from it)."""
        pairs = _spec_pairs(self.family)
        return {**{key: self._fields[attr] for key, attr in pairs}, "seed": self.seed}

    @classmethod
    def from_spec(cls, check: str, kernel: str, family: str, spec: dict) -> CheckCase:
        """The check id of `check` on a contract spec of `family` (every spec key must map to a case field)."""
        pairs = _spec_pairs(family)
        known = [key for key, _ in pairs] + ["seed"]
        require(set(spec) == set(known), "spec", sorted(spec), f"exactly the keys {known} (family {family}'s "
                "contract_spec_fields and seed): a spec key without an id field could not be replayed")
        return cls(family, kernel, check, spec["seed"], **{attr: spec[key] for key, attr in pairs})

    @classmethod
    def from_config(cls, check: str, kernel: str, config, rows: int, seed: int) -> CheckCase:
        """The check id of `check` on `rows` rows of `config` (a layer config whose fields are case attributes)."""
        fam = get_family(config.family)
        fields = {f.attr: getattr(config, f.attr) for f in fam.case_fields if hasattr(config, f.attr)}
        return cls(fam.name, kernel, check, seed, **{**fields, fam.size_label: rows})


def _spec_pairs(family: str) -> tuple:
    pairs = tuple(get_family(family).contract_spec_fields)
    require(bool(pairs), "family", family, "a family that declares contract_spec_fields (its contract specs' keys "
            "as case fields)")
    return pairs


def parse_check_id(text: str) -> CheckCase:
    """Parse a check id; a bad part raises InvalidInput naming the key (or `case id`, `family`, `kernel`), the value
    and what is allowed, as parse_case_id does."""
    require(isinstance(text, str), "case id", text, "a string")
    parts = text.strip().split("/")
    require(len(parts) == 3, "case id", text, f"FAMILY/KERNEL/FIELDS, e.g. {EXAMPLE_CHECK_ID}")
    name, kernel, body = parts
    require(name in FAMILIES, "family", name, f"one of {list(FAMILIES)}")
    family = get_family(name)
    require(bool(KERNEL_RE.fullmatch(kernel)), "kernel", kernel, "a registered kernel name (letters, digits, '_' "
            "and '.')")
    table = check_id_fields(family)
    texts = ids._key_value_texts(family, body, table, what=f"a key of a check id of family {family.name}")
    values = {}
    for f in table:
        if f.key in texts:
            values[f.attr] = ids.parse_value(f, texts[f.key])
        elif f.required:
            raise InvalidInput(f.key, None, f"a value: {f.key}= is required; {ids.allowed_text(f)}")
    check, seed = values.pop("check"), values.pop("seed")
    return CheckCase(name, kernel, check, seed, **values)


def parse_id(text: str):
    """A case id (ids.parse_case_id: a Case) or a check id (parse_check_id: a CheckCase), told apart by `check=`."""
    return parse_check_id(text) if is_check_id(text) else ids.parse_case_id(text)


def render_check_fields() -> str:
    """The markdown table of docs/case-ids.md's check-id section (between its GENERATED markers)."""
    def row(f):
        values = ", ".join(f"`{v}`" for v in f.kind) if isinstance(f.kind, tuple) else ids._kind_text(f)
        return f"| `{f.key}` | {values} | {f.doc} |"

    lines = ["| key | values | meaning |", "|---|---|---|", row(CHECK_FIELD),
             "| the family's keys | as in a case id (tables above) | the input's shape, dtype and layout |",
             row(SEED_FIELD), ""]
    for name in FAMILIES:
        pairs = tuple(get_family(name).contract_spec_fields)
        if pairs:
            by_attr = {f.attr: f.key for f in get_family(name).case_fields}
            lines.append(f"- `{name}`: contract spec key -> id key: "
                         + ", ".join(f"`{k}` -> `{by_attr[a]}`" for k, a in pairs) + ", `seed` -> `seed`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_check_fields(), end="")
