"""Cases and case ids: one immutable Case per (kernel, layer config, data regime, tier, seed); its id is one
shell-safe line that parses back to the same Case.

Id grammar: `FAMILY/KERNEL/key=value,key=value,...`, keys in any order, e.g.
  w4a16/triton_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1234
The keys come from one field table per family: the family's own `case_fields` (conformance.families.<name>)
followed by COMMON_FIELDS (regime, tier, seed). That table generates `Case.id` (every key, table order), the
parser, its error messages and the docs' table (docs/case-ids.md). A key whose CaseField has a default may be
left out of an id; unknown, duplicate or missing required keys are errors. Values are written canonically
(`M=03` is refused) and use only letters, digits and `_ . + -`, so an id needs no shell quoting.

The positional ids printed before this grammar (`w4a16/KERNEL/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234`)
still parse to the same Case: each family declares its old layout as data (`legacy_id_fields`), followed by
the common `<regime>-<tier>-s<seed>` (COMMON_LEGACY_ID_FIELDS). `case.id` always prints the new grammar.

Nothing here names a family: a new family is a module in conformance.families with a Family object (its
case_fields, regimes, validate_case, config_from_case) and its name in conformance.core.registry.FAMILIES.
"""
from __future__ import annotations

import functools
import numbers
import re
from dataclasses import FrozenInstanceError

from conformance.core.registry import FAMILIES
from conformance.core.registry import KERNEL_NAME_RE as KERNEL_RE  # one grammar for names and the id's kernel field
from conformance.families import get_family
from conformance.families.base import CaseField
from references.errors import InvalidInput, require

TIERS = ("exact", "statistical")
VALUE_RE = re.compile(r"[A-Za-z0-9_.+-]+")  # a value as written in an id: shell-safe, no ',' '=' '/'

# Fields every case has, written after the family's own. regime's choices are the family's `regimes`.
COMMON_FIELDS = (
    CaseField("regime", "regime", str, "data regime: how the seeded data is drawn (the family's regimes)"),
    CaseField("tier", "tier", TIERS, "exact: bit for bit; statistical: within the tolerance model's bound"),
    CaseField("seed", "seed", int, "data seed, a non-negative int: the case's only randomness"),
)
# The old positional ids end in <regime>-<tier>-s<seed> (positions counted from the end).
COMMON_LEGACY_ID_FIELDS = ((-3, "regime", r"([A-Za-z0-9_]+)"), (-2, "tier", r"([A-Za-z0-9_]+)"),
                           (-1, "seed", r"s([0-9]+)"))
# Case(family, kernel, regime, tier, seed, group_size, dtype, ...): the old dataclass's positional order
_LEGACY_POSITIONAL = ("group_size", "dtype")
_KERNEL_ALLOWED = "a registered kernel name (letters, digits, '_' and '.')"


def id_fields(family) -> tuple:
    """The id field table of `family` (a name or a Family): its case_fields, then regime (choices: the
    family's regimes), tier and seed. Case.id writes the keys in this order."""
    fam = get_family(family) if isinstance(family, str) else family
    return _id_fields(fam.name)


@functools.cache
def _id_fields(name: str) -> tuple:
    fam = get_family(name)
    regime, *rest = COMMON_FIELDS
    return (*fam.case_fields, CaseField(regime.key, regime.attr, tuple(fam.regimes), regime.doc), *rest)


@functools.cache
def _field_owners() -> dict:
    """attr -> the CaseField declaring it, over every family (for reading another family's attribute)."""
    out = {}
    for name in FAMILIES:
        for f in get_family(name).case_fields:
            out.setdefault(f.attr, f)
    return out


def _absent(field: CaseField):
    """What a case of another family reads for `field`: False for a flag, None otherwise."""
    return False if field.kind is bool else None


def format_value(field: CaseField, value) -> str:
    """`value` as written after `key=` in an id."""
    if field.fmt is not None:
        return field.fmt(value)
    if field.kind is bool:
        return "1" if value else "0"
    return str(value)


def _kind_text(field: CaseField) -> str:
    if isinstance(field.kind, tuple):
        return f"one of {[format_value(field, v) for v in field.kind]}"
    if field.kind is bool:
        return "1 or 0"
    if field.kind is int:
        return "an integer"
    return "a name (letters, digits, '_' and '.')"


def allowed_text(field: CaseField) -> str:
    """What an id may write for `field`: its choices or kind, the attribute it fills and its doc."""
    return f"{_kind_text(field)} ({field.attr}: {field.doc})"


def parse_value(field: CaseField, text: str):
    """The value of `key=text`; InvalidInput(key, text, allowed) unless text is a canonical value of the field."""
    allowed = allowed_text(field)
    if not VALUE_RE.fullmatch(text):
        raise InvalidInput(field.key, text, allowed)
    try:
        if field.parse is not None:
            value = field.parse(text)
        elif field.kind is bool:
            value = {"1": True, "0": False}[text]
        elif field.kind is int:
            value = int(text)
        else:
            value = text
    except (KeyError, ValueError, TypeError):
        raise InvalidInput(field.key, text, allowed) from None
    if isinstance(field.kind, tuple) and value not in field.kind:
        raise InvalidInput(field.key, text, allowed)
    canonical = format_value(field, value)
    require(canonical == text, field.key, text, f"{allowed}, written {canonical}")
    return value


def _coerce(field: CaseField, value):
    """`value` for attribute field.attr of a Case, checked against the field's kind (plain int / bool)."""
    if field.kind is bool:
        ok, want = isinstance(value, numbers.Integral) and value in (0, 1), "True or False"
        value = bool(value) if ok else value
    elif field.kind is int:
        ok, want = isinstance(value, numbers.Integral) and not isinstance(value, bool), "an int"
        value = int(value) if ok else value
    elif isinstance(field.kind, tuple):
        ok, want = isinstance(value, str) and value in field.kind, f"one of {list(field.kind)}"
    else:
        ok, want = isinstance(value, str) and bool(VALUE_RE.fullmatch(value)), "a name"
    require(ok, field.attr, value, f"{want} ({field.doc})")
    text = format_value(field, value)
    require(isinstance(text, str) and bool(VALUE_RE.fullmatch(text)), field.attr, value,
            "a value written with letters, digits and '_ . + -' only (ids must need no shell quoting)")
    return value


def _rebuild(kwargs: dict) -> Case:
    return Case(**kwargs)


class Case:
    """One replayable check: family, kernel, regime, tier, seed, plus the family's own fields (its
    `case_fields`: w4a16 M, N, K, group_size (-1 = channelwise), weight_type, act_order, dtype, format;
    fp8_group_quant tokens, hidden, group_size, dtype, fp8_dtype, ue8m0, column_major_scales).

    Construct with keywords (`Case(family="w4a16", kernel=..., regime=..., tier=..., seed=..., M=3, ...)`;
    group_size and dtype may also follow seed positionally). A field left out takes its CaseField default
    (a required one raises InvalidInput). Another family's field may be passed only at its absent value
    (None, or False for a flag) and reads back as that value (`fp8_case.M is None`); a name no family
    declares is a TypeError. Validated on construction: each field's kind and choices, the kernel name,
    the tier, the family's regimes, seed >= 0, then the family's `validate_case`. Immutable and hashable;
    equal when family, kernel, regime, tier, seed and every family field are equal.
    """

    __slots__ = ("family", "kernel", "regime", "tier", "seed", "_fields", "_key")

    def __init__(self, family, kernel, regime, tier, seed, *positional, **fields):
        require(family in FAMILIES, "family", family, f"one of {list(FAMILIES)}")
        fam = get_family(family)
        if len(positional) > len(_LEGACY_POSITIONAL):
            raise TypeError(f"Case() takes at most {5 + len(_LEGACY_POSITIONAL)} positional arguments")
        for name, value in zip(_LEGACY_POSITIONAL, positional):
            if name in fields:
                raise TypeError(f"Case() got multiple values for argument {name!r}")
            fields[name] = value
        require(isinstance(kernel, str) and bool(KERNEL_RE.fullmatch(kernel)), "kernel", kernel, _KERNEL_ALLOWED)
        require(tier in TIERS, "tier", tier, f"one of {list(TIERS)}")
        require(regime in fam.regimes, "regime", regime, f"one of {list(fam.regimes)} for family {family}")
        require(isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0, "seed", seed,
                "a non-negative int")
        values = {}
        for f in fam.case_fields:
            if f.attr in fields:
                values[f.attr] = _coerce(f, fields.pop(f.attr))
            elif f.required:
                raise InvalidInput(f.attr, None, f"a value (required for family {family}): {f.doc}")
            else:
                values[f.attr] = _coerce(f, f.default)
        for name, value in fields.items():
            other = _field_owners().get(name)
            if other is None:
                raise TypeError(f"Case() got an unexpected keyword argument {name!r}")
            absent = _absent(other)
            ok = value is absent or (absent is False and isinstance(value, numbers.Integral) and value == 0)
            require(ok, name, value, f"{absent!r} for family {family} ({name} is not one of its fields)")
        seed = int(seed)
        for name, value in (("family", family), ("kernel", kernel), ("regime", regime), ("tier", tier),
                            ("seed", seed), ("_fields", values),
                            ("_key", (family, kernel, regime, tier, seed, tuple(values.items())))):
            object.__setattr__(self, name, value)
        fam.validate_case(self)

    def __getattr__(self, name):
        # called only for names that are not slots: the family's fields, else another family's (absent)
        if not name.startswith("__"):
            try:
                values = object.__getattribute__(self, "_fields")
            except AttributeError:
                values = {}
            if name in values:
                return values[name]
            other = _field_owners().get(name)
            if other is not None:
                return _absent(other)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}: a Case is immutable (use .replace)")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}: a Case is immutable")

    def __eq__(self, other):
        return self._key == other._key if isinstance(other, Case) else NotImplemented

    def __hash__(self):
        return hash(self._key)

    def __reduce__(self):
        return _rebuild, (self.to_dict(),)

    def __repr__(self) -> str:
        return "Case(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"

    @property
    def id(self) -> str:
        """The one-line case id: `family/kernel/` then every key of id_fields(family) as key=value, in table
        order, joined by ','. parse_case_id(case.id) == case, and shlex.quote(case.id) == case.id."""
        body = ",".join(f"{f.key}={format_value(f, getattr(self, f.attr))}" for f in id_fields(self.family))
        return f"{self.family}/{self.kernel}/{body}"

    def __str__(self) -> str:
        return self.id

    def config(self):
        """The layer config a kernel's gate judges: the family's config_from_case (W4A16Config,
        Fp8QuantConfig, ...); the row count (M, tokens) is not part of it."""
        return get_family(self.family).config_from_case(self)

    def with_kernel(self, kernel: str) -> Case:
        """The same case for another kernel (same data, same seed)."""
        return self.replace(kernel=kernel)

    def replace(self, **changes) -> Case:
        """A new Case with `changes` applied (validated like any Case)."""
        return Case(**{**self.to_dict(), **changes})

    def to_dict(self) -> dict:
        """family, kernel, regime, tier, seed and the family's fields, in id order; Case(**d) == self."""
        return {"family": self.family, "kernel": self.kernel, "regime": self.regime, "tier": self.tier,
                "seed": self.seed, **self._fields}


def _legacy_shape(family) -> str:
    """The old positional layout of `family` as text, e.g. M<M>-N<N>-...-ao|noao-...-s<seed>."""
    layout = family.legacy_id_fields + COMMON_LEGACY_ID_FIELDS
    by_attr = {f.attr: f for f in id_fields(family)}
    parts = [""] * len(layout)
    for pos, attr, pattern in layout:
        key = by_attr[attr].key
        parts[pos] = "|".join(pattern) if isinstance(pattern, dict) else re.sub(r"\(.*\)", f"<{key}>", pattern)
    return "-".join(parts)


def _legacy_texts(family, body: str) -> dict:
    """key -> value text of an old positional id body (fields joined by '-')."""
    layout = family.legacy_id_fields + COMMON_LEGACY_ID_FIELDS
    # '-' joins the fields, so a negative number (`s-1`, `M-3`) would read as one field too many: a '-' before a
    # digit belongs to the value (no field's text starts with a digit), which the field's own rule then refuses
    toks = re.split(r"-(?![0-9])", body)
    keys = [f.key for f in id_fields(family)]
    require(len(toks) == len(layout), "case id fields", body,
            f"key=value pairs joined by ',' (keys {keys}), or the old layout {_legacy_shape(family)} "
            f"({len(layout)} fields joined by '-')")
    by_attr = {f.attr: f for f in id_fields(family)}
    out = {}
    for pos, attr, pattern in layout:
        f, tok = by_attr[attr], toks[pos]
        where = f"old id field {pos % len(layout) + 1} ({attr}): {_legacy_shape(family).split('-')[pos]}"
        if isinstance(pattern, dict):
            require(tok in pattern, f.key, tok, f"one of {list(pattern)}; {where}")
            out[f.key] = pattern[tok]
        else:
            m = re.fullmatch(pattern.replace("[0-9]+", "-?[0-9]+"), tok)  # a signed number: the field's rule says
            require(m is not None, f.key, tok, where)
            out[f.key] = m.group(1)
    return out


def _key_value_texts(family, body: str, fields=None, what: str | None = None) -> dict:
    """key -> value text of a key=value body (keys of `fields`, default id_fields(family)); unknown and repeated keys
    raise InvalidInput (`what` names the table in the message)."""
    table = {f.key: f for f in (id_fields(family) if fields is None else fields)}
    what = what or f"a key of family {family.name}"
    out = {}
    for part in body.split(","):
        key, eq, text = part.partition("=")
        require(bool(eq and key), "case id field", part,
                f"key=value (fields joined by ','; keys {list(table)}), e.g. {EXAMPLE_ID}")
        require(key != "check" or "check" in table, key, text,
                "no check= key in a case id: an id with check= names a contract or fusion check (a check id); "
                "`python -m conformance repro ID` replays it")
        require(key in table, key, text, f"{what}: one of {list(table)}")
        require(key not in out, key, text, f"one value per key ({key}={out.get(key)} is already given)")
        out[key] = text
    return out


def parse_case_id(text: str) -> Case:
    """Parse a case id (the key=value grammar, or an old positional id) into its Case.

    Any bad part raises references.errors.InvalidInput naming the field (the id key for a value, `case id`
    / `family` / `kernel` / `case id field` for the frame), the value and what is allowed; so do unknown,
    repeated and missing required keys, and values that break a family rule (those name the attribute).
    """
    require(isinstance(text, str), "case id", text, "a string")
    parts = text.strip().split("/")
    require(len(parts) == 3, "case id", text, f"FAMILY/KERNEL/FIELDS, e.g. {EXAMPLE_ID}")
    name, kernel, body = parts
    require(name in FAMILIES, "family", name, f"one of {list(FAMILIES)}")
    family = get_family(name)
    require(bool(KERNEL_RE.fullmatch(kernel)), "kernel", kernel, _KERNEL_ALLOWED)
    legacy = "=" not in body and bool(family.legacy_id_fields)
    texts = _legacy_texts(family, body) if legacy else _key_value_texts(family, body)
    values = {}
    for f in id_fields(family):
        if f.key in texts:
            values[f.attr] = parse_value(f, texts[f.key])
        elif f.required:
            raise InvalidInput(f.key, None, f"a value: {f.key}= is required; {allowed_text(f)}")
    return Case(family=name, kernel=kernel, **values)


def render_field_tables() -> str:
    """The markdown field tables of docs/case-ids.md (between its GENERATED markers), from the field tables."""
    def table(rows) -> list[str]:
        out = ["| key | attribute | values | default | meaning |", "|---|---|---|---|---|"]
        for f in rows:
            default = "required" if f.required else f"`{format_value(f, f.default)}`"
            values = _kind_text(f) if not isinstance(f.kind, tuple) else ", ".join(
                f"`{format_value(f, v)}`" for v in f.kind)
            out.append(f"| `{f.key}` | `{f.attr}` | {values} | {default} | {f.doc} |")
        return out

    lines = ["### Every family", "", "Written after the family's own keys.", "", *table(COMMON_FIELDS)]
    for name in FAMILIES:
        fam = get_family(name)
        lines += ["", f"### `{name}`", "", *table(fam.case_fields), "",
                  "regimes: " + ", ".join(f"`{r}`" for r in fam.regimes)]
        if fam.legacy_id_fields:
            lines += ["", f"old positional layout: `{name}/KERNEL/{_legacy_shape(fam)}`"]
    return "\n".join(lines) + "\n"


_COMPAT_REGIMES = {"W4A16_REGIMES": "w4a16", "FP8_REGIMES": "fp8_group_quant"}


def __getattr__(name):
    # v1 names, now read from the family objects (lazily: family modules load on first use)
    if name in _COMPAT_REGIMES:
        return tuple(get_family(_COMPAT_REGIMES[name]).regimes)
    if name == "REGIMES":
        return {n: tuple(get_family(n).regimes) for n in FAMILIES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EXAMPLE_ID = ("w4a16/triton_w4a16/"
              "M=3,N=64,K=256,g=32,wt=uint4,ao=1,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=1234")
EXAMPLE_FP8_ID = ("fp8_group_quant/fp8_group_quant_native/"
                  "T=5,H=512,g=128,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=0,regime=normal,tier=statistical,seed=7")


if __name__ == "__main__":
    print(render_field_tables(), end="")
