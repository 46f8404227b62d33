"""Coverage sweep: the JSON schema, the gfx1100 gap for asymmetric act-order, and the table/HTML views."""
import base64
import json
import re

import pytest

from conformance import cli
from conformance.core import registry
from conformance.core.targets import CPU
from conformance.families import get_family
from conformance.reports import coverage

ROCM_THREE = "triton_w4a16,rdna3_w4a16,rdna_hybrid_w4a16"


def sweep_json(capsys, *argv):
    assert cli.main(["coverage", "--format", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def rows(report, **match):
    return [r for r in report["configs"] if all(r["config"][k] == v for k, v in match.items())]


@pytest.fixture
def gfx1100_three(capsys):
    return sweep_json(capsys, "--target", "gfx1100", "--kernels", ROCM_THREE)


def test_json_schema(gfx1100_three):
    r = gfx1100_three
    assert r["target"] == "rocm:gfx1100" and r["kernels"] == ["rdna3_w4a16", "rdna_hybrid_w4a16", "triton_w4a16"]
    for row in r["configs"]:
        assert set(row) == {"config", "accepted_by", "selected", "refused"}
        assert {"weight_type", "group_size", "act_order", "format", "dtype"} <= set(row["config"])
        # every kernel either accepts or refuses with a reason; the selection is the first acceptor
        assert sorted(row["accepted_by"] + list(row["refused"])) == sorted(r["kernels"])
        assert all(isinstance(why, str) and why for why in row["refused"].values())
        assert row["selected"] == (row["accepted_by"][0] if row["accepted_by"] else None)
    assert {row["config"]["group_size"] for row in r["configs"]} == {-1, 32, 64, 128, 256}
    assert {row["config"]["format"] for row in r["configs"]} == {"gptq_v1", "gptq_v2", "awq", "compressed_tensors"}
    assert {row["config"]["dtype"] for row in r["configs"]} == {"float16", "bfloat16"}
    assert r["wall_time_s"] > 0


def test_gfx1100_uint4_without_act_order(gfx1100_three):
    for gs in (32, 64, 128):
        for row in rows(gfx1100_three, weight_type="uint4", act_order=False, group_size=gs):
            assert sorted(row["accepted_by"]) == ["rdna_hybrid_w4a16", "triton_w4a16"], row
            assert row["selected"] == "rdna_hybrid_w4a16"
            assert "uint4" in row["refused"]["rdna3_w4a16"]
    chan = rows(gfx1100_three, weight_type="uint4", act_order=False, group_size=-1)
    assert chan and all(row["accepted_by"] == ["triton_w4a16"] for row in chan)


def test_gfx1100_uint4_act_order_is_a_gap_closed_by_the_actorder_kernel(gfx1100_three, capsys):
    ao = rows(gfx1100_three, weight_type="uint4", act_order=True)
    assert ao and all(row["accepted_by"] == [] and row["selected"] is None and len(row["refused"]) == 3
                      for row in ao)
    gap_classes = {g["class"] for g in gfx1100_three["gaps"]}
    assert gap_classes == {f"uint4 g{gs} act-order" for gs in (32, 64, 128, 256)}

    closed = sweep_json(capsys, "--target", "gfx1100", "--kernels", ROCM_THREE + ",triton_w4a16_actorder")
    ao = rows(closed, weight_type="uint4", act_order=True)
    assert len(ao) == len(rows(gfx1100_three, weight_type="uint4", act_order=True))
    assert all(row["accepted_by"] == ["triton_w4a16_actorder"] for row in ao)
    assert closed["gaps"] == []
    assert gap_classes <= set(closed["gaps_closed_by"]["triton_w4a16_actorder"])
    # ...and only those: classes other kernels also serve are not credited to it
    assert "uint4 g128 no act-order" not in closed["gaps_closed_by"]["triton_w4a16_actorder"]

    assert cli.main(["coverage", "--target", "gfx1100", "--kernels", ROCM_THREE + ",triton_w4a16_actorder"]) == 0
    table = capsys.readouterr().out
    assert "Gaps: none" in table
    closed_line = next(ln for ln in table.splitlines() if ln.strip().startswith("triton_w4a16_actorder:"))
    assert "uint4 g32 act-order" in closed_line


def test_table_makes_gaps_stand_out(capsys):
    assert cli.main(["coverage", "--target", "gfx1100", "--kernels", ROCM_THREE]) == 0
    table = capsys.readouterr().out
    gap_rows = [ln for ln in table.splitlines() if "GAP" in ln]
    assert sorted(ln.split("  ")[0].strip() for ln in gap_rows) == sorted(
        f"uint4 g{gs} act-order" for gs in (32, 64, 128, 256))
    assert all(ln.split()[-1] != "all" and "!!" in ln for ln in gap_rows)
    # every refusal reason of a gap is printed under it
    assert "act_order=True not supported" in table.split("Gaps (configs no kernel serves)")[1]


def test_8bit_types_only_when_some_kernel_claims_them():
    r = coverage.sweep("gfx1100", ROCM_THREE)
    assert {row["config"]["weight_type"] for row in r["configs"]} == {"uint4", "uint4b8"}
    claimers = [k for k in registry.all_kernels("w4a16") if get_family("w4a16").claims_8bit([k], CPU)]
    if claimers:
        r = coverage.sweep("gfx1100", [claimers[0].name, "triton_w4a16"])
        assert {"uint8", "uint8b128"} <= {row["config"]["weight_type"] for row in r["configs"]}


def test_excluded_combinations_are_absent_and_reported(gfx1100_three):
    assert not rows(gfx1100_three, format="awq", act_order=True)
    assert not rows(gfx1100_three, group_size=-1, act_order=True)
    assert not rows(gfx1100_three, format="awq", weight_type="uint8")  # AWQ defines 4-bit weights only
    assert len(gfx1100_three["excluded"]) == 3


class _FakeFp8(registry.Kernel):
    """A gate-only fp8 kernel, never registered: accepts e4m3fn, group 128, 16-bit inputs only."""

    name, family, priority = "fake_fp8_<script>", "fp8_group_quant", 1

    def can_implement(self, config, target):
        if config.fp8_dtype != "float8_e4m3fn":
            return f"fp8_dtype={config.fp8_dtype} <script>alert(1)</script>"
        if config.dtype == "float32":
            return "dtype=float32 not supported"
        return None if config.group_size == 128 else f"group_size={config.group_size} not 128"


def test_fp8_space_and_html_view(tmp_path):
    r = coverage.sweep("cpu", [_FakeFp8()])
    assert r["families"] == ["fp8_group_quant"]
    cfgs = [row["config"] for row in r["configs"]]
    assert {c["fp8_dtype"] for c in cfgs} == {"float8_e4m3fn", "float8_e4m3fnuz"}
    assert {c["group_size"] for c in cfgs} == {32, 64, 128} and {c["ue8m0"] for c in cfgs} == {False, True}
    served = [row for row in r["configs"] if row["selected"]]
    assert served and all(row["config"]["group_size"] == 128 and row["config"]["fp8_dtype"] == "float8_e4m3fn"
                          for row in served)
    partial = [c for c in r["classes"] if c["class"] == "float8_e4m3fn g128"]
    assert partial[0]["gap"] and partial[0]["served"] == 4 and partial[0]["n_configs"] == 6
    line = next(ln for ln in coverage.render_table(r).splitlines() if ln.startswith("float8_e4m3fn g128 "))
    assert "GAP: 2/6 unserved" in line
    html = coverage.render_html(r)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # autoescaped
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "http" not in html.split("<body>")[1]  # self-contained: nothing fetched
    assert html.count('<tr class="gap">') >= sum(1 for g in r["gaps"])


def test_html_out_file(tmp_path, capsys):
    out = tmp_path / "cov" / "coverage.html"
    assert cli.main(["coverage", "--target", "gfx1100", "--kernels", ROCM_THREE, "--format", "html",
                     "--out", str(out)]) == 0
    html = out.read_text()
    assert "uint4 g32 act-order" in html and "GAP" in html and "data:image/png;base64," in html
    assert "swept in" in capsys.readouterr().err


def test_bad_view_and_target_exit_2(capsys):
    assert cli.main(["coverage", "--format", "pdf"]) == 2
    assert "--format='pdf'" in capsys.readouterr().err
    assert cli.main(["coverage", "--target", "gfx11"]) == 2
    assert "--target='gfx11'" in capsys.readouterr().err


def test_fp8_dtype_follows_the_platform():
    # gfx94x quantizes to e4m3fnuz, other GPUs to e4m3fn: the other dtype would be a gap no model hits
    for target, fp8 in (("gfx942", "float8_e4m3fnuz"), ("sm90", "float8_e4m3fn"), ("gfx1201", "float8_e4m3fn")):
        r = coverage.sweep(target, [_FakeFp8()])
        assert {row["config"]["fp8_dtype"] for row in r["configs"]} == {fp8}, target
        assert any("fp8_dtype" in e["what"] and fp8 in e["why"] for e in r["excluded"]), r["excluded"]


def test_plan_paths_count_cases_per_path_and_format(capsys):
    """With a run seed, the sweep counts the CI plan's cases (both tiers) per kernel path x format x weight type on
    the target: triton_w4a16 on cpu has every cell of its three paths served and with a case; the table prints
    one row per (path, weight type) with a column per checkpoint format, and the JSON the same cells."""
    r = sweep_json(capsys, "--target", "cpu", "--kernels", "triton_w4a16", "--seed", "0")
    assert r["paths_seed"] == 0
    (entry,) = r["paths"]
    assert entry["kernel"] == "triton_w4a16" and entry["axes"] == ["path", "format", "weight_type"]
    cells = {(c["path"], c["format"], c["weight_type"]): c for c in entry["cells"]}
    assert {p for p, _, _ in cells} == {"planar", "planar+splitk", "dequant_mm"}
    assert len(cells) == 3 * 4 * 2 and all(c["served"] and c["cases"] >= 1 for c in cells.values())
    assert entry["missing"] == []
    assert cli.main(["coverage", "--target", "cpu", "--kernels", "triton_w4a16", "--seed", "0"]) == 0
    table = capsys.readouterr().out.split("CI plan paths (run seed 0x0")[1]
    head = next(ln for ln in table.splitlines() if ln.strip().startswith("PATH"))
    assert head.split()[2:] == ["gptq_v1", "gptq_v2", "awq", "compressed_tensors"]
    row = next(ln for ln in table.splitlines() if ln.split()[:2] == ["dequant_mm", "uint4"])
    assert row.split()[2:] == [str(cells[("dequant_mm", f, "uint4")]["cases"])
                               for f in ("gptq_v1", "gptq_v2", "awq", "compressed_tensors")]


def test_a_served_cell_without_a_case_stands_out():
    """The table marks a served cell with no case '0 !!' and counts it in the kernel's line; '-' where the gate
    serves no such cell."""
    entry = {"kernel": "k", "family": "w4a16", "target": "cpu", "axes": ["path", "format", "weight_type"],
             "cells": [{"path": "gemv", "format": "awq", "weight_type": "uint4", "cases": 0, "served": True},
                       {"path": "gemv", "format": "gptq_v1", "weight_type": "uint4", "cases": 2, "served": True}],
             "missing": [{"path": "gemv", "format": "awq", "weight_type": "uint4"}]}
    lines = coverage.render_paths([entry], 5)
    assert "k on cpu: 1 served cells WITHOUT a case" in "\n".join(lines)
    row = next(ln for ln in lines if ln.split()[:2] == ["gemv", "uint4"])
    assert row.split()[2:] == ["2", "0", "!!"]
    assert coverage.render_paths([], 5) == []
