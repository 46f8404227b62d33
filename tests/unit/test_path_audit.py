"""The path audit's comparison (conformance/cases/path_audit.py): a served (path, format, weight type) cell without a
row on that path is reported; a row on another path, another format or an undeclared path covers nothing. Pure:
no plan is built (milliseconds); benchmarks/plan_paths.py records the audit of every W4A16 kernel."""
from __future__ import annotations

from conformance.cases.path_audit import cell_of, uncovered
from conformance.families import get_family

SERVED = [("planar", "gptq_v1", "uint4"), ("planar", "awq", "uint4"), ("dequant_mm", "gptq_v1", "uint4")]


def test_a_served_cell_without_a_row_on_its_path_is_reported():
    rows = [("planar", "gptq_v1", "uint4"), ("planar", "awq", "uint4"), ("dot", "gptq_v1", "uint4"),
            ("dequant_mm", "gptq_v1", "uint4b8"), (None, "gptq_v1", "uint4")]
    assert uncovered(SERVED, rows) == [("dequant_mm", "gptq_v1", "uint4")]
    assert uncovered(SERVED, rows + [("dequant_mm", "gptq_v1", "uint4")]) == []
    assert uncovered(SERVED, []) == sorted(SERVED)


def test_cells_are_path_then_the_familys_cross_axes():
    fam = get_family("w4a16")
    values = {"format": "awq", "weight_type": "uint4", "dtype": "float16"}
    assert cell_of(fam, "gemv", values) == ("gemv", *(values[a] for a in fam.plan_path_cross))
    assert fam.plan_path_cross == ("format", "weight_type")
