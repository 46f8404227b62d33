"""validate --baseline-target: the target matrix (kernel x specialization -> gate, compile, resources, simulated
numerics) and what differs from the baseline target, built from small synthetic records; the glue on real kernels
without compiling; the HTML carries both, changes first; bad options are one-line errors (exit 2)."""
from __future__ import annotations

import pytest

from conformance.cases.ids import parse_case_id
from conformance.compile.baseline import diff
from conformance.core.targets import parse_target
from conformance.reports import baseline_changes, compile_matrix, report

T, B = "gfx1201", "gfx1100"


def _crec(arch, key, verdict, case="c1", kernel="kern", vgprs=64, lds=1024, message=""):
    prog = key.split(":")[0]
    return {"kernel": kernel, "target": arch, "key": key, "verdict": verdict, "message": message,
            "resources": None if verdict == "compile-error" else {"vgprs": vgprs, "lds_bytes": lds, "occupancy": 8},
            "id": f"compile/{arch}/{prog}/w4a16/{kernel}/{case}", "program": f"mod.{prog}", "path": "dot",
            "tiles": {"BLOCK_K": 32}, "cases": 3}


def _nrec(kernel, case, outcome, check="exact", detail="ok"):
    return {"kernel": kernel, "check": check, "outcome": outcome, "run_mode": "interpreter", "case_id": case,
            "detail": detail, "replay": f"python -m conformance repro {case}"}


# what each case launches on the target: two programs, one path without a Triton program
LAUNCHES = {("kern", "c1"): ("dot", ["gemm:aaa"]), ("kern", "c2"): ("dot", ["gemm:bbb"]),
            ("kern", "c3"): ("gemv_hip", []), ("kern", "bad"): None}


def _launch_of(kernel, case):
    return LAUNCHES.get((kernel, case))


def test_matrix_rows_carry_gate_compile_resources_and_the_numerics_of_the_cases_that_launch_them():
    crecs = [_crec(T, "gemm:aaa", "pass"), _crec(T, "gemm:bbb", "compile-error", case="c2", message="K >= 16"),
             _crec(B, "gemm:aaa", "pass")]  # another target's record: not a row of this matrix
    nrecs = [_nrec("kern", "c1", "pass"), _nrec("kern", "c1", "pass", "statistical"), _nrec("kern", "c2", "fail"),
             _nrec("kern", "c3", "pass"), _nrec("kern", "bad", "pass"), _nrec("kern", "c1", "skip")]
    m = compile_matrix.build(T, ["kern", "refused_kern"], nrecs, {"refused_kern": "target=gfx1201 not supported"},
                             _launch_of, crecs, {"kern": {T: "no JIT program (gemv_hip)"}})
    rows = {(r["kernel"], r["row"]): r for r in m["rows"]}
    assert set(rows) == {("kern", "gemm:aaa"), ("kern", "gemm:bbb"), ("kern", "path:gemv_hip"), ("refused_kern", "-")}
    a, b = rows[("kern", "gemm:aaa")], rows[("kern", "gemm:bbb")]
    assert (a["gate"], a["compile"], a["numeric_verdict"], a["numerics"]) == ("accepts", "pass", "pass", {"pass": 2})
    assert a["resources"] == {"vgprs": 64, "lds_bytes": 1024, "occupancy": 8}
    assert a["compile_id"] == "compile/gfx1201/gemm/w4a16/kern/c1"
    assert (b["compile"], b["message"], b["numeric_verdict"], b["failing_cases"]) == ("compile-error", "K >= 16",
                                                                                      "fail", ["c2"])
    assert rows[("kern", "path:gemv_hip")]["compile"] == "no JIT program (gemv_hip)"
    assert rows[("refused_kern", "-")]["gate"] == "target=gfx1201 not supported"
    assert [compile_matrix.row_class(r) for r in (a, b)] == ["pass", "fail"]
    assert m["counts"]["compile"] == {"-": 1, "compile-error": 1, "no JIT program (gemv_hip)": 1, "pass": 1}
    assert "gemm:bbb: compile compile-error (compile/gfx1201/gemm/w4a16/kern/c2)" in compile_matrix.text(m)


def test_matrix_without_the_lane_says_not_compiled():
    m = compile_matrix.build(T, ["kern"], [_nrec("kern", "c1", "fail")], {}, _launch_of)
    [row] = m["rows"]
    assert not m["compiled"] and row["compile"] == compile_matrix.NOT_COMPILED and row["numeric_verdict"] == "fail"


def test_changes_list_what_passes_on_the_baseline_and_fails_or_is_refused_here():
    base = [_nrec("kern", "c1", "pass"), _nrec("kern", "c2", "pass"), _nrec("kern", "c4", "pass"),
            _nrec("kern", "c5", "pass"), _nrec("kern", "c6", "fail")]
    here = [_nrec("kern", "c1", "pass"), _nrec("kern", "c2", "fail", detail="ratio 3.1"), _nrec("kern", "c6", "fail")]
    refuses = {"c4": "N=24 not supported", "c5": "N=24 not supported"}
    crecs = [_crec(B, "gemm:aaa", "pass", vgprs=64), _crec(T, "gemm:aaa", "pass", vgprs=80),  # +25%: reported
             _crec(B, "gemm:ccc", "pass", case="c3", lds=1000), _crec(T, "gemm:ccc", "pass", case="c3", lds=1090),
             _crec(B, "gemm:bbb", "pass", case="c2"), _crec(T, "gemm:bbb", "compile-error", case="c2", message="no")]
    ch = baseline_changes.build(T, B, here, base, lambda k, c: refuses.get(c),
                                {"hip_only": "target=gfx1201 not supported", "nowhere": "no"}, {"nowhere": "no"},
                                diff(crecs, T, B))
    assert [(r["case_id"], r["outcome"], r["detail"]) for r in ch["numerics"]] == [("c2", "fail", "ratio 3.1")]
    assert ch["gate"] == [{"kernel": "kern", "reason": "N=24 not supported", "cases": 2, "example": "c4"}]
    assert ch["gate_kernels"] == [{"kernel": "hip_only", "reason": "target=gfx1201 not supported"}]
    c = ch["compile"]
    assert [r["id"] for r in c["regressions"]] == ["compile/gfx1201/gemm/w4a16/kern/c2"]
    assert [(r["field"], r["baseline"], r["target"]) for r in c["resources"]] == [("vgprs", 64, 80)]  # lds +9%: not
    assert ch["counts"] == {"kernels_refused": 1, "cases_refused": 2, "numeric_regressions": 1,
                            "compile_regressions": 1, "compile_refused": 0, "resource_changes": 1}
    assert baseline_changes.any_change(ch)
    assert "FAIL kern exact c2" in baseline_changes.text(ch)


def test_equal_targets_have_no_changes():
    recs = [_nrec("kern", "c1", "pass")]
    ch = baseline_changes.build(T, B, recs, recs, lambda k, c: None, {}, {}, None)
    assert not baseline_changes.any_change(ch) and "compile lane not run" in baseline_changes.text(ch)


def test_glue_asks_the_real_kernels_gates_and_launches_without_compiling():
    from conformance.checks import catalogue
    from conformance.core import registry
    from conformance.reports.target_report import add_target_sections, gate_reason, launch_of

    case = next(c for c in catalogue.small_k_cases("triton_w4a16", 16))
    target = parse_target(T)
    path, keys = launch_of(target)("triton_w4a16", case.id)
    assert keys and all(":" in k for k in keys)
    assert launch_of(target)("triton_w4a16", "not a case id") is None
    hip_case = case.id.replace("/triton_w4a16/", "/rdna3_w4a16/")
    parse_case_id(hip_case)
    assert gate_reason(target)("rdna3_w4a16", hip_case)  # gfx1100 only: refused on gfx1201
    ks = registry.resolve_kernels(["triton_w4a16", "rdna3_w4a16"])
    doc = {"title": "t", "environment": {}, "records": [_nrec("triton_w4a16", case.id, "pass")]}
    base = {"records": [_nrec("triton_w4a16", case.id, "pass"), _nrec("rdna3_w4a16", hip_case, "pass")],
            "summary": {"n_failures": 0}}
    assert add_target_sections(doc, target, ks, seed=1, profile="ci", sets=("catalogue",), compile_lane=False,
                               baseline=parse_target(B), baseline_doc=base) == 0
    assert list(doc)[:4] == ["title", "baseline_changes", "target_matrix", "compile_lane"]
    ch = doc["baseline_changes"]
    assert [g["kernel"] for g in ch["gate_kernels"]] == ["rdna3_w4a16"] and ch["gate"][0]["example"] == hip_case
    rows = {r["row"]: r for r in doc["target_matrix"]["rows"] if r["kernel"] == "triton_w4a16"}
    assert set(rows) == set(keys) and all(r["numeric_verdict"] == "pass" for r in rows.values())


def test_html_shows_the_changes_before_the_matrix_and_both_before_the_results(monkeypatch):
    from conformance.reports import coverage
    from tests.unit.test_report import _doc

    monkeypatch.setattr(coverage, "heatmap_png", lambda cov, family: b"")  # matplotlib: seconds, not ours to test

    doc = _doc([_nrec("kern", "c2", "fail")])
    doc["baseline_changes"] = baseline_changes.build(T, B, doc["records"], [_nrec("kern", "c2", "pass")],
                                                     lambda k, c: None, {}, {}, None)
    doc["target_matrix"] = compile_matrix.build(T, ["kern"], doc["records"], {}, _launch_of,
                                                [_crec(T, "gemm:bbb", "compile-error", case="c2", message="<K>")])
    html = report.render_html(doc)
    i, j, k = (html.index('id="baseline"'), html.index('id="matrix"'), html.index('id="results"'))
    assert i < j < k
    assert "compile/gfx1201/gemm/w4a16/kern/c2" in html and "&lt;K&gt;" in html
    text = report.terminal_summary(doc)
    assert text.index("against baseline gfx1100") < text.index("target matrix gfx1201")


@pytest.mark.parametrize("argv, words", [
    (["--target", "gfx1201", "--baseline-target", "gfx1201"], "--baseline-target='gfx1201' is invalid; allowed: "
                                                              "a target other than --target (rocm:gfx1201)"),
    (["--target", "gfx1201", "--baseline-target", "gfx9999"], "--baseline-target='gfx9999' is invalid"),
    (["--target", "gfx1201", "--baseline-target", "cpu"], "--baseline-target='cpu' is invalid; allowed: a GPU"),
    (["--target", "cpu", "--compile"], "--target='cpu' is invalid; allowed: a GPU target"),
    (["--target", "gfx1201", "--compile-sets", "plan,nope"], "--compile-sets='plan,nope' is invalid"),
])
def test_bad_options_are_one_line_errors(argv, words, capsys, tmp_path):
    from conformance.cli import main

    assert main(["validate", *argv, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
    assert not (tmp_path / "r").exists()  # refused before anything ran


def test_compile_lane_merge_replaces_only_the_runs_kernels():
    from benchmarks.compile_lane import merge, record

    def run(kernel, verdict, arch):
        r = dict(_crec(arch, "gemm:aaa", verdict, kernel=kernel), constexprs={}, options={})
        return {"records": [r], "kernels": {kernel: {arch: "1/1 pass" if verdict == "pass" else "0/1 pass"}},
                "errors": [], "launch_errors": [f"{kernel} on {arch}: x"], "wall_s": 1.0, "seed": 1,
                "profile": "ci", "sets": ["catalogue"], "targets": [arch]}

    base = record({**run("old", "pass", B), "kernels": {"old": {B: "1/1 pass"}, "gl": {B: "refused"}}},
                  "aaa", True, "base")
    base["records"].append(dict(base["records"][0], kernel="gl"))
    out = merge(base, run("gl", "compile-error", T), "bbb", False, "merge")
    assert [(r["kernel"], r["target"]) for r in out["records"]] == [("old", B), ("gl", T)]
    assert out["table"] == {"old": {B: "1/1 pass"}, "gl": {T: "0/1 pass"}}
    assert [f["kernel"] for f in out["failures"]] == ["gl"] and out["verdicts"]["gl"] == {T: {"compile-error": 1}}
    assert out["launch_errors"] == [f"old on {B}: x", f"gl on {T}: x"]
    assert (out["commit"], out["tree_clean"]) == ("aaa", True)  # the base run's
    assert [(s["kernels"], s["commit"], s["tree_clean"]) for s in out["sections"]] == [(["gl"], "bbb", False)]
    again = merge(out, run("gl", "pass", T), "ccc", True, "merge")
    assert [s["commit"] for s in again["sections"]] == ["ccc"] and not again["failures"]


def test_gemlite_sees_each_targets_reference_part():
    from conformance.adapters.gemlite_target import capability, device_properties

    assert [capability(a) for a in ("sm90", "sm120", "gfx942", "gfx950", "gfx1151", "gfx1201")] == [
        (9, 0), (12, 0), (9, 4), (9, 5), (11, 5), (12, 0)]
    # GemLite picks its tuned config file by a tag in the lower-cased device name
    tags = {"sm80": "a100", "sm90": "h100", "sm120": "5090", "gfx942": "mi300x"}
    for arch, tag in tags.items():
        p = device_properties(arch)
        assert tag in p.name.lower().replace(" ", "_") and p.multi_processor_count > 0
