"""Record the malformed-input corpus and the fuzz in benchmarks/results/reliability.json.

    python benchmarks/reliability.py [--draws 10000] [--out benchmarks/results/reliability.json]

Runs tests/unit/test_bad_inputs.py (every row of the corpus: CLI options, case ids, check ids, profiles, plugin
modules, report paths, pytest options) and tests/unit/test_fuzz_inputs.py (case ids and select arguments, --draws
per fuzz test) in one pytest process, and writes {"malformed_inputs", "malformed_clean", "fuzz_draws", "fuzz_clean",
"commit", "clean", ...}: a corpus row is clean when its test passed (exit code, one line naming the field, no
traceback), a fuzz draw when it parsed or was refused in one line."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=10000)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    a = p.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "unit")]
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench import provenance
    from test_bad_inputs import PYTEST_CASES, corpus_size

    with tempfile.TemporaryDirectory() as d:
        junit, counts = Path(d) / "junit.xml", Path(d) / "fuzz.jsonl"
        env = dict(os.environ, CONFORMANCE_FUZZ_DRAWS=str(a.draws), CONFORMANCE_FUZZ_COUNT=str(counts),
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "unit")]))
        cmd = [sys.executable, "-m", "pytest", "tests/unit/test_bad_inputs.py", "tests/unit/test_fuzz_inputs.py",
               "-p", "no:xdist", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        cases = list(ET.parse(junit).getroot().iter("testcase"))
        fuzz = [json.loads(ln) for ln in counts.read_text().splitlines()] if counts.exists() else []
    corpus = [c for c in cases if c.get("classname", "").endswith("test_bad_inputs")]
    bad = [c.get("name") for c in corpus if any(e.tag in ("failure", "error") for e in c)]
    # parametrized rows are testcases; the single tests holding several rows (the pytest options, the contained
    # plugins) count as their rows: corpus_size() is the corpus, a failing test fails all the rows it holds
    doc = {"malformed_inputs": corpus_size(),
           "malformed_clean": corpus_size() - sum(len(PYTEST_CASES) if "pytest_option" in n else 1 for n in bad),
           "fuzz_draws": sum(f["draws"] for f in fuzz), "fuzz_clean": sum(f["clean"] for f in fuzz),
           "fuzz_per_test": fuzz, "failing_tests": bad, "pytest_exit_code": proc.returncode,
           "command": " ".join(["python", "benchmarks/reliability.py", "--draws", str(a.draws)]),
           **provenance.record_fields(ROOT)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("malformed_inputs", "malformed_clean", "fuzz_draws", "fuzz_clean")}))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
