"""Outside conformance/families nothing branches on a family name: family-specific behaviour is a member of
the family object (`conformance.families.get_family(name)`), so a third family touches no other module.

Read with `ast` (nothing is imported): every .py under conformance/ (except conformance/families/) and
benchmarks/ must have no comparison (==, !=, in, not in, is) with the literal "w4a16" or "fp8_group_quant"
and no dict literal keyed by one. Passing a name as data (a call argument, a kernel's own `family = ...`) is
fine; branching on it is not.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILY_NAMES = ("w4a16", "fp8_group_quant")
TREES = ("conformance", "benchmarks")
EXEMPT = ("conformance/families",)  # the family modules own everything family-specific


def _is_name(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in FAMILY_NAMES


def _name_literals(node) -> bool:
    """The literal itself, or a tuple/list/set literal holding one (`x in ("w4a16", ...)`)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_name(e) for e in node.elts)
    return _is_name(node)


def family_branches(source: str, filename: str = "<src>") -> list[str]:
    """'line: what' for every comparison with a family-name literal and every dict literal keyed by one."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare) and any(_name_literals(n) for n in [node.left, *node.comparators]):
            out.append(f"{node.lineno}: comparison {ast.unparse(node)}")
        elif isinstance(node, ast.Dict) and any(k is not None and _is_name(k) for k in node.keys):
            out.append(f"{node.lineno}: dict keyed by a family name")
    return out


def _files():
    for tree in TREES:
        for f in sorted((ROOT / tree).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if not rel.startswith(EXEMPT):
                yield rel, f


def test_nothing_outside_the_families_branches_on_a_family_name():
    found = [f"{rel}:{hit}" for rel, f in _files() for hit in family_branches(f.read_text(), rel)]
    assert not found, ("branches on a family name outside conformance/families (make it a Family member):\n  "
                       + "\n  ".join(found))


def test_the_check_sees_each_kind_of_branch():
    """The walk finds ==, !=, in (literal on either side, or in a tuple), and dict keys; data is not flagged."""
    src = '''
if case.family == "w4a16": pass
if "fp8_group_quant" != family: pass
if "w4a16" in opts.families: pass
if family in ("w4a16", "fp8_group_quant"): pass
PREFILL = {"w4a16": 512}
Case(family="w4a16", kernel="k")
family = "fp8_group_quant"
'''
    assert [h.split(":")[0] for h in family_branches(src)] == ["2", "3", "4", "5", "6"]
