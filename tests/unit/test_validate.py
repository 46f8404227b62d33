"""`validate` end to end (pytest subprocess, failing kernel, exit codes) and --try-refused. Its -n 2 merge is checked
on the two-worker run of tests/conformance/test_determinism.py (one validate -n 2 serves both)."""
import os
import re
from pathlib import Path

import pytest
from validation_kernels import ALL, GatedDequantW4A16

from conformance.core import registry
from conformance.core.targets import CPU, parse_target
from conformance.reports.try_refused import try_kernel
from conformance.reports.validate import SUITE_DIR, validate

HERE = Path(__file__).resolve().parent
W4A16_SUITE = SUITE_DIR / "test_w4a16_suite.py"


@pytest.fixture
def test_kernels(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the pytest subprocess imports validation_plugin from here
    for cls in ALL:
        registry.register_kernel(cls)
    yield
    for cls in ALL:
        registry.unregister_kernel(cls.name)


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
