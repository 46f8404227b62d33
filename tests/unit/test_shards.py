"""Shards (--conformance-shard I/N) and merge-reports: every item in exactly one shard whatever the order or the
worker count, one-line usage errors, and the merged report of 3 shards has the (case id, verdict) set of the
unsharded run. The end-to-end check runs the 3 shards and the unsharded run in ONE subprocess (one torch import,
four pytest.main calls) on 8 rows of torch_dequant_w4a16's CI plan."""
import json
import os
import sys
from pathlib import Path

import pytest

from conformance.plugin import merge
from conformance.plugin.collection import shard_of
from conformance.plugin.options import _shard
from references.errors import InvalidInput
from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]


class _Config:
    def __init__(self, shard):
        self.shard = shard

    def getoption(self, name):
        assert name == "--conformance-shard", name
        return self.shard


def test_every_item_is_in_exactly_one_shard_whatever_the_order():
    ids = [f"conformance/suite/test_plan.py::test_plan[k-exact-{i}]" for i in range(300)]
    for n in (1, 2, 3, 7):
        shards = {nid: shard_of(nid, n) for nid in ids}
        assert set(shards.values()) == set(range(1, n + 1))  # 1-based, none empty at 300 items
        assert {nid: shard_of(nid, n) for nid in reversed(ids)} == shards  # a function of the id alone
    sizes = [sum(1 for nid in ids if shard_of(nid, 3) == i) for i in (1, 2, 3)]
    assert min(sizes) > 60, sizes  # balanced enough that no CI job idles (300 / 3 = 100 expected)


@pytest.mark.parametrize("bad", ["0/3", "4/3", "3", "a/b", "1/0", "-1/3", "", "1/3/5", "1.5/3"])
def test_a_bad_shard_is_a_one_line_usage_error(bad):
    with pytest.raises(pytest.UsageError) as e:
        _shard(_Config(bad))
    msg = str(e.value)
    assert "\n" not in msg and f"--conformance-shard={bad!r} is invalid" in msg and "1 <= I <= N" in msg, msg


def test_good_shards_parse():
    assert _shard(_Config(None)) is None
    assert _shard(_Config("2/3")) == (2, 3) and _shard(_Config("1/1")) == (1, 1)


def _doc(index, count=3, **over):
    doc = {"target": "cpu", "profile": "ci", "seed": 7, "seed_source": "--conformance-seed", "commit": "abc",
           "shard": {"index": index, "count": count}, "complete": True, "selection": [{"family": "f"}],
           "records": [{"kernel": "k", "check": "exact", "outcome": "pass", "case_id": f"c{index}"}],
           "produced": 1, "crashed_workers": [],
           "plan": [{"kernel": "k", "tier": "exact", "target": "cpu", "rows": 9, "rows_ran": 3}],
           "cases_per_second": {"w4a16": {"cases": 3, "seconds": 1.5, "cases_per_second": 2.0}},
           "jit": {"mode": "triton", "per_kernel": {"k": {"jit_compiles": index, "jit_seconds": 0.5}},
                   "jit_compiles": index, "jit_seconds": 0.5}}
    doc.update(over)
    return doc


def test_merge_sums_what_the_shards_split_and_keeps_what_they_share():
    out = merge.merge([(f"s{i}.json", _doc(i)) for i in (3, 1, 2)])
    assert [r["case_id"] for r in out["records"]] == ["c1", "c2", "c3"]  # shard order, whatever the argument order
    assert out["produced"] == 3 and out["complete"] is True and out["shard"] == {"count": 3, "merged": [1, 2, 3]}
    assert (out["seed"], out["commit"], out["target"], out["profile"]) == (7, "abc", "cpu", "ci")
    assert out["plan"] == [{"kernel": "k", "tier": "exact", "target": "cpu", "rows": 9, "rows_ran": 9}]
    assert out["cases_per_second"] == {"w4a16": {"cases": 9, "seconds": 4.5, "cases_per_second": 2.0}}
    assert out["jit"]["per_kernel"]["k"] == {"jit_compiles": 6, "jit_seconds": 1.5, "jit_cache_hits": 0}
    assert out["jit"]["jit_compiles"] == 6


@pytest.mark.parametrize("docs, field, allowed", [
    ([_doc(1), _doc(2, seed=8), _doc(3)], "s2.json: seed", "share seed, commit"),
    ([_doc(1), _doc(2), _doc(3, commit="def")], "s3.json: commit", "share seed, commit"),
    ([_doc(1), _doc(2), _doc(2)], "s3.json: shard", "each shard once"),
    ([_doc(1), _doc(3)], "reports", "missing: 2/3"),
    ([_doc(1), _doc(2, complete=False), _doc(3)], "s2.json: complete", "true"),
    ([_doc(1), _doc(2, shard=None), _doc(3)], "s2.json: shard", "--conformance-shard I/N"),
    ([_doc(1), _doc(2, count=4), _doc(3)], "s2.json: shard", "a shard of 3"),
    ([_doc(1, other="x"), _doc(2, other="x"), _doc(3, other="y")], "s3.json: other", "equal values"),
])
def test_merge_refuses_what_is_not_one_run(docs, field, allowed):
    with pytest.raises(InvalidInput) as e:
        merge.merge([(f"s{i + 1}.json", d) for i, d in enumerate(docs)])
    assert e.value.field == field and allowed in e.value.allowed, str(e.value)
    assert "\n" not in str(e.value)


def test_cli_refuses_with_one_line_and_exit_2(tmp_path, capsys):
    from conformance.cli import main

    paths = []
    for i, d in enumerate([_doc(1), _doc(2, seed=8), _doc(3)]):
        paths.append(tmp_path / f"s{i + 1}.json")
        paths[-1].write_text(json.dumps(d))
    out = tmp_path / "all.json"
    assert main(["merge-reports", *map(str, paths), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "seed=8 is invalid" in err and "\n" not in err, err
    assert not out.exists()
    paths[1].write_text(json.dumps(_doc(2)))
    assert main(["merge-reports", *map(str, paths), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["records"]) == 3


# 8 cheap rows (tenths of a second each on 2 cores), 2-3 per shard
ROWS = [f"conformance/suite/test_plan.py::test_plan[torch_dequant_w4a16-exact-{i}]"
        for i in (4, 5, 8, 9, 12, 13, 14, 15)]
DRIVER = '''
import sys, pytest
from conformance.core import results
args, runs = sys.argv[1:-4], sys.argv[-4:]
for i, report in enumerate(runs):
    results.drain()  # one process, four runs: each run's records only
    shard = ["--conformance-shard", f"{i + 1}/3"] if i < 3 else []
    code = pytest.main([*args, *shard, "--conformance-report", report])
    if code != 0:
        sys.exit(f"run {i + 1} exited {code}")
'''


def test_three_shards_merge_to_the_unsharded_run(tmp_path):
    assert {shard_of(r, 3) for r in ROWS} == {1, 2, 3}  # every shard has items: each run exits 0
    reports = [str(tmp_path / f"{name}.json") for name in ("s1", "s2", "s3", "all")]
    env = dict(os.environ, PYTHONPATH=str(ROOT), CONFORMANCE_CACHE_DIR=str(tmp_path / "cache"))
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--conformance-seed", "7", "--conformance-kernels",
            "torch_dequant_w4a16", "--conformance-tiers", "exact", *ROWS]
    p = warm_python.run([sys.executable, "-c", DRIVER, *args, *reports], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    docs = [json.loads(Path(r).read_text()) for r in reports]
    assert [d["shard"] for d in docs] == [{"index": i, "count": 3} for i in (1, 2, 3)] + [None]
    merged = merge.merge(list(zip(reports[:3], docs[:3])))
    verdicts = [{(r["case_id"], r["outcome"]) for r in d["records"]} for d in (merged, docs[3])]
    assert verdicts[0] == verdicts[1] and len(verdicts[1]) >= len(ROWS), verdicts
    assert all(len(v) < len(verdicts[1]) for v in ({(r["case_id"], r["outcome"]) for r in d["records"]}
                                                   for d in docs[:3]))  # each shard ran only part of it
    assert [(s["kernel"], s["tier"], s["rows_ran"]) for s in merged["plan"]] == \
        [(s["kernel"], s["tier"], s["rows_ran"]) for s in docs[3]["plan"]]
