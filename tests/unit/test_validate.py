"""`validate` end to end (pytest subprocess, -n 2 merge, failing kernel, exit codes) and --try-refused."""
import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from validation_kernels import ALL, GatedDequantW4A16

from conformance.cases.profiles import get_profile
from conformance.core import registry
from conformance.core.targets import CPU, parse_target
from conformance.reports.try_refused import try_kernel
from conformance.reports.validate import SUITE_DIR, validate

HERE = Path(__file__).resolve().parent
W4A16_SUITE, FP8_SUITE = SUITE_DIR / "test_w4a16_suite.py", SUITE_DIR / "test_fp8_suite.py"


@pytest.fixture
def test_kernels(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the pytest subprocess imports validation_plugin from here
    for cls in ALL:
        registry.register_kernel(cls)
    yield
    for cls in ALL:
        registry.unregister_kernel(cls.name)


def test_two_workers_lose_no_record(tmp_path):
    # fp8_group_quant_cuda runs its model on either kind of machine (no vllm._C here): both of its tiers are judged
    kernels = ["fp8_group_quant_cuda", "torch_dequant_w4a16"]
    doc, code = validate(CPU, kernels=",".join(kernels), out_dir=tmp_path, workers=2,
                         paths=[W4A16_SUITE, FP8_SUITE])
    assert code == 0, doc.get("problem") or doc["summary"]
    saved = json.loads((tmp_path / "report.json").read_text())
    recs = saved["records"]
    # the merge keeps every record the processes made: each xdist worker reports how many it made
    produced = saved["records_produced"]
    assert isinstance(produced, int) and produced > 0 and len(recs) == produced
    # each (kernel, tier) test ran: hypothesis gives it at most max_examples cases, each one verdict
    per_test = Counter((r["kernel"], r["check"]) for r in recs)
    assert set(per_test) == {(k, t) for k in kernels for t in ("exact", "statistical")}
    assert all(1 <= n <= get_profile("ci").max_examples for n in per_test.values()), per_test
    cases = list(ET.parse(tmp_path / "junit.xml").getroot().iter("testcase"))
    # every suite test passed: a skip mid-test would cut its records short
    assert len(cases) == 4 and all(c.find(t) is None for c in cases for t in ("failure", "error", "skipped"))
    html = (tmp_path / "report.html").read_text()
    assert "PASS: 2 kernels, 4 checks, 0 failures" in html and not list(tmp_path.glob(".*tmp*"))
    assert saved["environment"]["target"] == "cpu" and saved["coverage"]["target"] == "cpu"
    assert "-n 2" in saved["command"]


def test_failing_kernel_exits_1_with_replay_lines(tmp_path, test_kernels):
    doc, code = validate(CPU, kernels="broken_dequant_w4a16", out_dir=tmp_path, workers=0, paths=[W4A16_SUITE],
                         plugins=["validation_plugin"], try_refused=True)
    assert code == 1
    fails = doc["summary"]["failures"]
    # the kernel comes from a plugin, so its replay line loads that plugin (it replays as printed)
    assert fails and all(re.match(r"python -m conformance --plugin validation_\w+ repro w4a16/broken_dequant_w4a16/",
                                  f["replay"]) for f in fails), fails[0]["replay"]
    html = (tmp_path / "report.html").read_text()
    assert "FAIL: 1 kernels" in html and fails[0]["replay"] in html
    # try-refused is reported apart and never counted as a conformance result
    assert "try_refused" not in {r["check"] for r in doc["records"]}
    assert "try_refused" not in {c["check"] for c in doc["summary"]["cells"]}
    tr = doc["try_refused"]["kernels"][0]
    assert tr["kernel"] == "broken_dequant_w4a16" and tr["refusals"][0]["verdict"] == "protects"
    assert "NOT conformance results" in html


def test_bad_arguments_exit_2(tmp_path):
    from conformance import cli

    assert cli.main(["validate", "--target", "gfx99zz", "--out", str(tmp_path)]) == 2
    assert cli.main(["validate", "--kernels", "no_such_kernel", "--out", str(tmp_path)]) == 2
    assert cli.main(["validate", "--profile", "weekly", "--out", str(tmp_path)]) == 2
    assert cli.main(["validate", "-n", "two", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "report.html").exists()


def test_try_refused_tells_protecting_refusals_from_liftable_ones(test_kernels):
    k = registry.get_kernel(GatedDequantW4A16.name)
    res = try_kernel(k, CPU)
    by_reason = {g["reason"]: g for g in res["refusals"]}
    prot = by_reason["group_size=32 not supported (test kernel mis-scales small groups)"]
    lift = by_reason["dtype=bfloat16 not supported (test kernel: needlessly strict)"]
    assert prot["verdict"] == "protects" and prot["n_fail"] > 0
    bad = [c for cl in prot["classes"] for c in cl["cases"] if c["outcome"] == "fail"]
    assert all(c["case_id"].startswith("w4a16/gated_dequant_w4a16/") for c in bad)
    assert any((c["max_ratio"] or 0) > 1 or (c["mismatches"] or 0) > 0 for c in bad)  # evidence: ratios, bits
    assert lift["verdict"] == "could be lifted" and lift["n_fail"] == lift["n_error"] == 0
    assert "caveat" not in lift  # it ran for real (device), not as a model
    assert k.can_implement(next(iter(lift["classes"]))["cases"] and _bf16_config(), CPU) is not None  # gate intact


def _bf16_config():
    from conformance.families.config import W4A16Config

    return W4A16Config("uint4", 128, False, "bfloat16", N=64, K=256)


def test_try_refused_model_runs_carry_a_caveat():
    # rdna3 is gated to gfx1100; on its neighbour gfx1151 nothing runs but its model here
    res = try_kernel(registry.get_kernel("rdna3_w4a16"), parse_target("gfx1151"))
    groups = res["refusals"]
    assert groups and all(g["run_modes"] == ["model"] and g["model_only"] for g in groups)
    assert all("gfx1100 only" in g["reason"] for g in groups)
    assert all("caveat" in g for g in groups if g["verdict"] == "could be lifted")
    assert registry.get_kernel("rdna3_w4a16").can_implement(_bf16_config(), parse_target("gfx1151")) is not None


def test_pythonpath_is_kept_for_the_suite(monkeypatch):
    from conformance.reports.validate import ROOT

    monkeypatch.setenv("PYTHONPATH", "/x")
    assert os.environ["PYTHONPATH"] == "/x" and ROOT.joinpath("conformance", "suite").is_dir()
