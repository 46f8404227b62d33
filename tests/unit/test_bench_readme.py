"""benchmarks/README.md's GPU figures are generated from the committed bench JSON: a hand edit, or a JSON the
block was not regenerated from, fails here; figures measured on other kernels are marked STALE, not refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.core.tree import import_tree_package

import_tree_package("conformance_bench")
from conformance_bench import provenance, readme_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "benchmarks" / "results" / "h200" / "bench.json"
FIX = f"python -m conformance_bench.readme_table {JSON.relative_to(ROOT)} --write"


def test_readme_block_is_the_scripts_output_for_the_committed_json():
    block = readme_table.current_block((ROOT / "benchmarks" / "README.md").read_text())
    assert block == readme_table.render(readme_table.load(JSON)), (
        f"benchmarks/README.md's generated block is not the output for {JSON.name} and the current kernels "
        f"(hand-edited, a new JSON, or kernels changed since): run `{FIX}`")


def test_the_header_prints_the_recorded_digest_and_says_stale_when_the_kernels_differ():
    rep = readme_table.load(JSON)
    env = rep["environment"]
    head = provenance.kernel_digest()
    header = readme_table.render(rep).splitlines()[2]
    recorded = env.get("kernel_digest") or env["source_digest"]
    assert recorded in header and env["time_utc"] in header
    assert ("STALE" in header) == (env.get("kernel_digest") != head)
    current = dict(rep, environment=dict(env, kernel_digest=head))
    assert "STALE" not in readme_table.render(current) and "figures are current" in readme_table.render(current)
    other = dict(rep, environment=dict(env, kernel_digest="0" * 16))
    assert "**STALE**, the kernels changed since this run" in readme_table.render(other, head_digest=head)
    unknown = dict(rep, environment={k: v for k, v in env.items() if k not in ("commit", "clean")})
    assert "commit unknown (no .git and no CONFORMANCE_COMMIT)" in readme_table.render(unknown)


def test_table_rows_come_from_the_json(tmp_path):
    rep = readme_table.load(JSON)
    mine = next(r for r in rep["rows"] if r["kernel"] == "triton_w4a16" and r["M"] == 1 and r["status"] == "ok")
    line = next(ln for ln in readme_table.render(rep).splitlines() if ln.startswith(f"| {mine['shape']} | 1 |"))
    assert f"| {mine['graph_us']:.1f} |" in line
    changed = json.loads(json.dumps(rep))
    next(r for r in changed["rows"] if r is not None and r.get("kernel") == "triton_w4a16" and r.get("M") == 1
         and r.get("shape") == mine["shape"])["graph_us"] = 1234.5
    assert "| 1234.5 |" in readme_table.render(changed)


def test_check_and_write_on_a_readme_copy(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (ROOT / "benchmarks" / "README.md").read_text()
    edited = text.replace("| 4096x4096 | 1 |", "| 4096x4096 | 1 | 9.9 |", 1)
    assert edited != text
    readme.write_text(edited)
    args = [str(JSON), "--readme", str(readme)]
    assert readme_table.main([*args, "--check"]) == 1 and "DIFFERS" in capsys.readouterr().out
    assert readme_table.main([*args, "--write"]) == 0
    assert readme_table.main([*args, "--check"]) == 0 and readme.read_text() == text
    readme.write_text("# no block here\n")
    assert readme_table.main([*args, "--check"]) == 2
    assert "bench-table:begin" in capsys.readouterr().err
    assert readme_table.main([str(tmp_path / "missing.json")]) == 2


@pytest.mark.parametrize("bad", ["[]", '{"rows": []}', "not json"])
def test_a_file_that_is_not_a_bench_json_is_refused(tmp_path, bad):
    p = tmp_path / "b.json"
    p.write_text(bad)
    with pytest.raises(readme_table.InvalidInput, match="JSON="):
        readme_table.load(p)


def test_the_readme_quotes_the_final_plans_estimate():
    """The bench step's time the README states is bench_estimate's for the committed JSON and the FINAL_BENCH
    plan of run_gpu.sh (same shapes, M values and timer settings)."""
    import re

    from conformance_bench import bench_estimate

    est = bench_estimate.estimate(readme_table.load(JSON))
    text = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    assert f"{est['timing']:.0f} s of timing for the {est['timed_rows']} timed rows" in text
    assert f"{est['total']:.0f} s, about the step's" in text
    plan = bench_estimate.FINAL_PLAN
    flags = re.search(r'^FINAL_BENCH="(.*?)"', (ROOT / "benchmarks" / "run_gpu.sh").read_text(), re.M | re.S).group(1)
    assert f"--shapes {plan['shapes']}" in flags and "--m " + ",".join(map(str, plan["ms"])) in flags
    assert f"--replays {plan['replays']} --eager-reps {plan['eager_reps']} --budget-s {plan['budget_s']}" in \
        " ".join(flags.split())
