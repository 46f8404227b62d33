"""CPU seconds per test file of a pytest run, summed over the test process and the subprocesses its tests start and
wait for (getrusage SELF + CHILDREN deltas around each test's setup, call and teardown), written per process and
merged: where the README test command's CPU goes.

Usage (repo root):
  CPU_PER_FILE_DIR=/tmp/cpf python -m pytest -n auto -q -p benchmarks.probes.cpu_per_file
  python benchmarks/probes/cpu_per_file.py /tmp/cpf [--top 30] [--by test]

Each pytest process (controller and every xdist worker) writes CPU_PER_FILE_DIR/<pid>.json at its end:
{"files": {path: cpu_s}, "tests": {node id: cpu_s}, "process_total": its own user+sys, "in_tests": the files' sum
(its own and its tests' subprocesses)}; its own CPU outside tests (startup, collection, session end) is
process_total less its own share.
A subprocess a test starts but does not wait for is not counted; a command a test forks from a warm interpreter
(tests/warm_python.py) is, from the CPU the warm interpreter reports for it.
"""
from __future__ import annotations

import json
import os
import resource
import sys
from collections import defaultdict

_files: dict[str, float] = defaultdict(float)
_tests: dict[str, float] = defaultdict(float)


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    warm = sys.modules.get("tests.warm_python")  # commands forked from a warm interpreter are not our children
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + (warm.stats["warm_cpu_s"] if warm else 0.0)


try:
    import pytest

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):  # setup, call and teardown of one test
        c0 = _cpu()
        try:
            return (yield)
        finally:
            spent = _cpu() - c0
            _files[item.nodeid.split("::")[0]] += spent
            _tests[item.nodeid] += spent

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(config):
        out = os.environ.get("CPU_PER_FILE_DIR")
        if not out:
            return
        os.makedirs(out, exist_ok=True)
        me = resource.getrusage(resource.RUSAGE_SELF)  # not CHILDREN: the controller's children are the workers
        own = me.ru_utime + me.ru_stime
        in_tests = sum(_files.values())
        doc = {"files": dict(_files), "tests": dict(_tests), "process_total": round(own, 2),
               "in_tests": round(in_tests, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER")}
        with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
            json.dump(doc, f)
except ImportError:  # imported as a script for the merge
    pass


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", choices=("file", "test"), default="file", help="one line per test file or per test")
    a = ap.parse_args(argv)
    files, own = defaultdict(float), 0.0
    for name in os.listdir(a.dir):
        with open(os.path.join(a.dir, name)) as fh:
            d = json.load(fh)
        own += d["process_total"]
        for f, s in d["files" if a.by == "file" else "tests"].items():
            files[f] += s
    for f, s in sorted(files.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"{s:8.1f}  {f}")
    print(f"{sum(files.values()):8.1f}  in tests (with their subprocesses); {own:.1f} CPU-s of the pytest processes "
          "themselves (tests' own share included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
