"""The stored statistical-tier calibration (benchmarks/results/calibration.json, written by benchmarks/calibrate.py)
is current and complete: it records the commit and run modes, enough cases that ran each kernel's own code
(calibrate.REAL_CODE_MIN), no false failure, the fp16-accumulator mutant still failing, and kernel source digests
equal to the files' digests now: a kernel whose numerics changed must be recalibrated (or, for a change that leaves
its arithmetic alone, be marked stale at exactly its current sources: `calibrate.py --mark-stale`, which the docs
block then names)."""
from __future__ import annotations

import json
import re

import pytest

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import calibrate  # noqa: E402

from conformance.core import registry  # noqa: E402

registry.load_all()

RECORD = calibrate.DEFAULT_OUT
RUN_MODES = {"interpreter", "device", "model"}


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


def _rerun(kernels) -> str:
    return f"rerun: {calibrate.rerun_command(kernels)}"


def test_records_commit_clean_flag_and_run_modes(record):
    assert re.fullmatch(r"[0-9a-f]{40}", record.get("commit") or ""), f"no commit recorded in {RECORD}"
    assert isinstance(record.get("clean_tree"), bool), f"no clean-tree flag in {RECORD}"
    assert record["kernels"], f"no kernel calibrated in {RECORD}"
    for name, e in record["kernels"].items():
        assert re.fullmatch(r"[0-9a-f]{40}", e.get("commit") or ""), f"{name}: no commit recorded"
        assert isinstance(e.get("clean_tree"), bool), f"{name}: no clean-tree flag"
        assert e["run_modes"] and set(e["run_modes"]) <= RUN_MODES, f"{name}: run modes {sorted(e['run_modes'])}"


@pytest.mark.parametrize("kernel", sorted(calibrate.REAL_CODE_MIN))
def test_enough_cases_ran_the_kernels_own_code(record, kernel):
    e = record["kernels"].get(kernel)
    assert e is not None, f"{kernel} is not calibrated in {RECORD}; {_rerun([kernel])}"
    real = sum(s["cases"] for m, s in e["run_modes"].items() if m in calibrate.REAL_MODES)
    need = calibrate.REAL_CODE_MIN[kernel]
    modes = "/".join(calibrate.REAL_MODES)
    assert real >= need, (f"{kernel}: {real} statistical-tier cases ran its own code ({modes}), {need} needed "
                          f"(model runs do not count); {_rerun([kernel])} at --scale 1")


def test_no_false_failure_and_every_case_in_its_rows_run_mode(record):
    bad = [f"{name}/{m}: {s['false_failures']} false failures, e.g. {s['failures'][:1]}"
           for name, e in record["kernels"].items() for m, s in e["run_modes"].items() if s["false_failures"]]
    bad += [f"{name}: {e['mode_mismatches']} cases ran outside their row's run modes"
            for name, e in record["kernels"].items() if e["mode_mismatches"]]
    assert not bad, "; ".join(bad)


def test_fp16_accumulator_mutant_still_fails(record):
    m = record["fp16_accumulator_mutant"]
    assert m["kernel"] == calibrate.MUTANT and m["cases"] > 0 and m["caught"] > 0, m


def test_kernel_sources_unchanged_since_calibration(record):
    stale = []
    for name, e in sorted(record["kernels"].items()):
        recorded = e["source"]
        module = calibrate.kernel_module_file(name)
        now = calibrate.source_digests(module)
        if module != recorded["module"] or now["digest"] != recorded["digest"]:
            mark = e.get("stale") or {}
            if mark.get("digest", {}).get("digest") == now["digest"] and mark.get("change") and mark.get("commit"):
                continue  # marked stale at exactly these sources (calibrate.py --mark-stale); the docs say so
            changed = sorted(f for f in set(now["files"]) | set(recorded["files"])
                             if now["files"].get(f) != recorded["files"].get(f))
            stale.append((name, changed or [module]))
    assert not stale, ("kernel source changed since calibration: "
                       + "; ".join(f"{n} ({', '.join(files)})" for n, files in stale)
                       + f"; {_rerun([n for n, _ in stale])}")


def test_docs_quote_the_record(record):
    text = calibrate.DOCS.read_text()
    assert text.count(calibrate.DOCS_BEGIN) == 1 and text.count(calibrate.DOCS_END) == 1, \
        f"{calibrate.DOCS}: the calibration block's markers are missing or repeated"
    block = text.split(calibrate.DOCS_BEGIN)[1].split(calibrate.DOCS_END)[0].strip()
    assert block == calibrate.render_docs(record), (f"{calibrate.DOCS}'s calibration block is not the record's; "
                                                    "run: PYTHONPATH=. python benchmarks/calibrate.py --docs")
