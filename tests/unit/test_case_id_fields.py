"""The case-id field tables are the one source: docs/case-ids.md shows them, and a family that ids.py has never
heard of gets ids, a parser, error messages, old-id parsing and attribute reads from its table alone."""
import re
import sys
import types
from pathlib import Path

import pytest

import conformance.families as families_pkg
from conformance.cases import ids
from conformance.cases.ids import COMMON_FIELDS, Case, parse_case_id, render_field_tables
from conformance.families import all_families
from conformance.families.base import CaseField, Family
from references.errors import InvalidInput, require

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "case-ids.md"
BEGIN, END = "<!-- BEGIN generated: python -m conformance.cases.ids -->", "<!-- END generated -->"


def test_docs_show_the_field_tables():
    text = DOC.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{DOC} needs the {BEGIN} ... {END} block"
    block = text.split(BEGIN)[1].split(END)[0].strip("\n") + "\n"
    assert block == render_field_tables(), (
        f"{DOC} is out of date with the case-id field tables: paste the output of `python -m conformance.cases.ids` "
        f"between its markers")


def test_field_tables_name_every_key_once_per_family():
    for fam in all_families():
        keys = [f.key for f in fam.case_fields + COMMON_FIELDS]
        attrs = [f.attr for f in fam.case_fields + COMMON_FIELDS]
        assert len(set(keys)) == len(keys) and len(set(attrs)) == len(attrs), fam.name
        for f in fam.case_fields + COMMON_FIELDS:
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", f.key) and f.doc, f
            assert f"| `{f.key}` | `{f.attr}` |" in render_field_tables()
        legacy_attrs = {attr for _, attr, _ in fam.legacy_id_fields}
        assert legacy_attrs <= {f.attr for f in fam.case_fields}, fam.name


# ---- a third family, declared only by its module --------------------------------------------------------------

class ToyFamily(Family):
    name = "toy_rmsnorm"
    regimes = ("normal", "tiny")
    case_fields = (
        CaseField("R", "rows", int, "rows, positive"),
        CaseField("eps", "eps_kind", ("fp32eps", "fixed"), "epsilon convention"),
        CaseField("w", "with_weight", bool, "scale by a weight vector", default=True),
    )
    legacy_id_fields = ((0, "rows", r"R([0-9]+)"), (1, "eps_kind", r"([a-z0-9]+)"),
                        (2, "with_weight", {"w": "1", "now": "0"}))

    def validate_case(self, case):
        require(case.rows > 0, "rows", case.rows, "a positive int")

    def config_from_case(self, case):
        return ("toy", case.rows, case.eps_kind, case.with_weight)


@pytest.fixture
def toy_family(monkeypatch):
    mod = types.ModuleType("conformance.families.toy_rmsnorm")
    mod.FAMILY = ToyFamily()
    names = (*families_pkg.FAMILY_NAMES, "toy_rmsnorm")
    monkeypatch.setitem(sys.modules, "conformance.families.toy_rmsnorm", mod)
    monkeypatch.setattr(families_pkg, "FAMILY_NAMES", names)
    monkeypatch.setattr(ids, "FAMILIES", names)
    ids._id_fields.cache_clear()
    ids._field_owners.cache_clear()
    yield mod.FAMILY
    ids._id_fields.cache_clear()
    ids._field_owners.cache_clear()


def test_a_new_family_needs_no_edit_to_ids(toy_family):
    case = Case(family="toy_rmsnorm", kernel="toy_k", regime="tiny", tier="exact", seed=3, rows=7, eps_kind="fixed")
    assert case.id == "toy_rmsnorm/toy_k/R=7,eps=fixed,w=1,regime=tiny,tier=exact,seed=3"
    assert parse_case_id(case.id) == case
    assert parse_case_id("toy_rmsnorm/toy_k/seed=3,tier=exact,regime=tiny,eps=fixed,R=7") == case
    assert parse_case_id("toy_rmsnorm/toy_k/R7-fixed-w-tiny-exact-s3") == case  # its own old layout
    assert case.config() == ("toy", 7, "fixed", True) and case.with_weight is True
    assert case.M is None and case.act_order is False  # other families' fields read as absent
    assert parse_case_id(ids.EXAMPLE_ID).rows is None
    with pytest.raises(InvalidInput) as e:
        parse_case_id("toy_rmsnorm/toy_k/R=7,eps=loose,regime=tiny,tier=exact,seed=3")
    assert e.value.field == "eps" and "fp32eps" in e.value.allowed
    with pytest.raises(InvalidInput) as e:
        parse_case_id("toy_rmsnorm/toy_k/R=0,eps=fixed,regime=tiny,tier=exact,seed=3")
    assert e.value.field == "rows"
    with pytest.raises(InvalidInput) as e:
        parse_case_id("toy_rmsnorm/toy_k/R=7,eps=fixed,regime=exact,tier=exact,seed=3")
    assert e.value.field == "regime" and "tiny" in e.value.allowed
    assert "### `toy_rmsnorm`" in render_field_tables() and "| `eps` | `eps_kind` |" in render_field_tables()
