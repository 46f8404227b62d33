"""The validation report: escaping, MODEL runs never shown as device runs, failures with replay lines, plots,
atomic writes."""
import json

from conformance.core.targets import CPU
from conformance.reports import coverage, report
from conformance.reports.validate import environment, summarize

EVIL = "<script>alert(1)</script>"


def _doc(records, tests=(), exit_code=None):
    s = summarize(records, list(tests), sorted({r["kernel"] for r in records}))
    doc = {"title": "Conformance validation of cpu", "environment": {**environment(CPU, "ci"), "wall_time_s": 1.0},
           "command": "pytest ...", "pytest_exit_code": 0, "suite_seconds": 1.0,
           "coverage": coverage.sweep(CPU, ["torch_dequant_w4a16"]), "selection": [], "summary": s,
           "run_mode_meaning": {"device": "d", "interpreter": "i", "model": "the real kernel did NOT run"},
           "records": records, "junit": "junit.xml"}
    doc["exit_code"] = (1 if s["n_failures"] else 0) if exit_code is None else exit_code
    return doc


def _rec(kernel, check, outcome, mode, case, ratio=None, detail="ok"):
    return {"kernel": kernel, "check": check, "outcome": outcome, "run_mode": mode, "case_id": case,
            "metrics": {} if ratio is None else {"max_ratio": ratio}, "detail": detail,
            "replay": f"python -m conformance repro {case}" if case else ""}


RECS = [
    _rec("kern_dev", "statistical", "pass", "device", "w4a16/kern_dev/a", 0.2),
    _rec("kern_dev", "statistical", "pass", "device", "w4a16/kern_dev/b", 0.0),
    _rec("kern_model", "statistical", "pass", "model", "w4a16/kern_model/a", 0.3),
    _rec("kern_model", "exact", "fail", "model", "w4a16/kern_model/c", None, EVIL),
    _rec("kern_model", "exact", "fail", "model", "w4a16/kern_model/d", None, "shrunk"),
    _rec("kern_dev", "make_fx", "pass", "interpreter", None, None, "{'fake': 1}"),
]


def test_summary_counts_and_one_failure_line_per_check():
    s = _doc(RECS)["summary"]
    cell = {(c["kernel"], c["check"]): c for c in s["cells"]}
    assert cell[("kern_model", "exact")]["fail"] == 2 and cell[("kern_dev", "statistical")]["pass"] == 2
    assert s["n_kernels"] == 2 and s["n_checks"] == 4 and s["n_failures"] == 1
    [f] = s["failures"]
    assert f["case_id"] == "w4a16/kern_model/d" and f["failing_cases"] == 2  # the last (shrunk) one
    assert [c["check"] for c in s["contracts"]] == ["make_fx"]


def test_html_escapes_and_labels_model_runs(tmp_path):
    doc = _doc(RECS)
    html = report.render_html(doc)
    assert EVIL not in html
    assert "FAIL: 2 kernels, 4 checks, 1 failures" in html
    assert "python -m conformance repro w4a16/kern_model/d" in html
    # every results row of the model-run kernel carries the MODEL badge and never the device badge
    rows = [r for r in html.split("<tr") if "<td>kern_model</td>" in r]
    assert rows and all('badge model">MODEL' in r and "badge device" not in r for r in rows)
    doc["summary"]["failures"][0]["detail"] = EVIL
    html = report.render_html(doc)
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_terminal_summary_headline_and_replay():
    text = report.terminal_summary(_doc(RECS))
    assert text.splitlines()[1] == "FAIL: 2 kernels, 4 checks, 1 failures (6 results; target cpu, profile ci)"
    assert "replay: python -m conformance repro w4a16/kern_model/d" in text and "MODEL" in text


def test_histogram_is_a_png_and_copes_with_zero_and_inf():
    png = report.ratio_histogram_png("k", [{"ratio": 0.0}, {"ratio": 0.5}, {"ratio": 3.0}, {"ratio": float("inf")}])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_report_is_atomic_and_self_contained(tmp_path):
    doc = _doc(RECS[:3])
    sizes = report.write_report(tmp_path, doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json"]
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["n_failures"] == 0
    html = (tmp_path / "report.html").read_text()
    assert "PASS: 2 kernels, 2 checks, 0 failures" in html and sizes["report.html"] == len(html.encode())
    assert "data:image/png;base64," in html and "<link" not in html and "src=\"http" not in html
