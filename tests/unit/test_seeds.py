"""Run seeds (conformance/cases/seeds.py) and how a run uses them: resolution order, bad values, the header,
the JSON report, the CI plan and the suite's hypothesis draws taking the seed, the ci example database, xdist
workers getting the controller's seed, and failed plan cases remembered for the next run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from conformance.cases import plan, seeds
from conformance.cases.profiles import get_profile, seed_test, seeded_settings
from references.errors import InvalidInput
from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture
def clean_env(monkeypatch):
    for name in (seeds.ENV, *seeds.COMMIT_ENVS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _head(cwd) -> str | None:
    p = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def test_resolution_order(clean_env, tmp_path):
    """explicit > $CONFORMANCE_SEED > (ci) $GITHUB_SHA > $CI_COMMIT_SHA > git HEAD of cwd > 0 "no commit found";
    nightly/exhaustive: random unless given."""
    assert seeds.resolve_run_seed(None, "ci", tmp_path) == (0, "no commit found")
    head = _head(ROOT)
    if head:  # a checkout (an sdist has no .git: the order above still holds)
        assert seeds.resolve_run_seed(None, "ci", ROOT) == (int(head[:8], 16), f"commit {head}")
    clean_env.setenv("CI_COMMIT_SHA", "00000000deadbeef")
    assert seeds.resolve_run_seed(None, "ci", tmp_path) == (0, "commit 00000000deadbeef")
    clean_env.setenv("GITHUB_SHA", "6B2CCC455DAC6538")
    assert seeds.resolve_run_seed(None, "ci", tmp_path) == (0x6B2CCC45, "commit 6b2ccc455dac6538")
    clean_env.setenv(seeds.ENV, "0x10")
    assert seeds.resolve_run_seed(None, "ci", tmp_path) == (16, seeds.ENV)
    assert seeds.resolve_run_seed("12", "ci", tmp_path) == (12, "--conformance-seed")
    assert seeds.resolve_run_seed(None, "nightly", tmp_path) == (16, seeds.ENV)
    clean_env.delenv(seeds.ENV)
    drawn = {seeds.resolve_run_seed(None, "nightly", tmp_path) for _ in range(3)}
    assert {src for _, src in drawn} == {"random (nightly)"} and len(drawn) > 1
    assert seeds.resolve_run_seed(3, "exhaustive", tmp_path) == (3, "--conformance-seed")
    assert seeds.describe(0x6B2CCC4, "commit 6b2ccc4") == "seed 0x6b2ccc4 (commit 6b2ccc4)"


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5", "0xZZ", "", str(2 ** 64), True, -3])
def test_bad_seeds_name_the_field(bad):
    with pytest.raises(InvalidInput) as e:
        seeds.parse_seed("--conformance-seed", bad)
    assert e.value.field == "--conformance-seed" and "non-negative integer" in e.value.allowed


def test_bad_environment_seed_is_a_usage_error(clean_env):
    """$CONFORMANCE_SEED=abc: pytest's usage error naming the variable (the option itself is in test_bad_inputs)."""
    from conformance import pytest_plugin

    class Config:
        def getoption(self, name):
            return None

    clean_env.setenv(seeds.ENV, "abc")
    with pytest.raises(pytest.UsageError, match="CONFORMANCE_SEED='abc'.*non-negative integer"):
        pytest_plugin._seed_option(Config())
    clean_env.setenv(seeds.ENV, "0x2a")
    assert pytest_plugin._seed_option(Config()) == 42


def test_workers_take_the_controllers_seed():
    """xdist: the controller hands its seed to each worker (pytest_configure_node) and a worker uses it, so a random
    nightly seed plans the same rows everywhere."""
    from conformance import pytest_plugin

    class Controller:
        _conformance = pytest_plugin._State()

    Controller._conformance.seed, Controller._conformance.seed_source = 0xABC, "random (nightly)"

    class Node:
        config, workerinput = Controller(), {}

    node = Node()
    pytest_plugin.pytest_configure_node(node)

    class Worker:
        workerinput = node.workerinput

    assert pytest_plugin._resolve_seed(Worker()) == (0xABC, "random (nightly)")


def _draws(seed: int, fail_at=None) -> list[int]:
    out = []

    @settings(max_examples=8, deadline=None)
    @given(st.integers(0, 10 ** 9))
    def probe(v):
        out.append(v)
        assert v != fail_at

    try:
        seed_test(probe, get_profile("ci"), seed)()
    except AssertionError:
        pass
    return out


def test_seeded_draws_repeat_and_failures_replay_first(tmp_path, monkeypatch):
    """With the ci database (derandomize off) a seed still fixes the draws; another seed draws others; a failure
    is stored and replayed first by the next run, whatever its seed."""
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path))
    a = _draws(11)
    assert a == _draws(11) and a != _draws(12)
    bad = a[-1]
    _draws(11, fail_at=bad)  # finds it, shrinks, stores it in the ci database under the cache dir
    assert any((tmp_path / get_profile("ci").seeded_database).rglob("*"))
    replay = _draws(99, fail_at=bad)
    assert replay[0] == bad, replay[:3]


# ---- one suite run in a subprocess: header, report, plan rows, hypothesis draws, remembered failures --------------

KERNELS = "broken_dequant_w4a16,torch_dequant_w4a16"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`pytest` on the plan and the w4a16 suite with --conformance-seed 7: the plan of a kernel that fails every
    case (broken_dequant_w4a16, tests/unit/validation_kernels.py) and torch_dequant_w4a16's hypothesis draws."""
    d = tmp_path_factory.mktemp("seeded-run")
    report = d / "report.json"
    cmd = [sys.executable, "-m", "pytest", "conformance/suite/test_plan.py", "conformance/suite/test_w4a16_suite.py",
           "-p", "no:cacheprovider", "--conformance-plugin", "validation_plugin", "--conformance-kernels", KERNELS,
           "--conformance-tiers", "statistical", "--conformance-seed", "7", "--conformance-report", str(report),
           "-k", "test_plan and broken or test_w4a16_conformance and torch_dequant"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), CONFORMANCE_CACHE_DIR=str(d / "cache"),
               CONFORMANCE_NO_ENTRY_POINTS="1")
    p = warm_python.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return {"p": p, "report": json.loads(report.read_text()), "cache": d / "cache"}


@pytest.fixture
def validation_kernels():
    sys.path.insert(0, str(HERE))
    from validation_kernels import ALL

    from conformance.core import registry

    registry.load_all()
    for cls in ALL:
        registry.register_kernel(cls)
    yield
    for cls in ALL:
        registry.unregister_kernel(cls.name)


def test_run_header_report_and_summary_carry_the_seed(run):
    p, doc = run["p"], run["report"]
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]  # the broken kernel's rows fail
    assert "conformance: profile ci, seed 0x7 (--conformance-seed)" in p.stdout.splitlines()[:6], p.stdout[:800]
    assert (doc["seed"], doc["seed_source"]) == (7, "--conformance-seed")
    assert "seed 0x7 (--conformance-seed)" in p.stdout.split("conformance summary")[1].splitlines()[0]
    from conformance.core.targets import detect_target

    assert f"broken_dequant_w4a16 statistical ({detect_target()}): all:" in p.stdout  # the run's own target
    assert [s["kernel"] for s in doc["plan"]] == ["broken_dequant_w4a16"]
    assert doc["cases_per_second"]["w4a16"]["cases"] > 0 and "w4a16:" in p.stdout.split("per family")[1]


def test_plan_rows_and_hypothesis_draws_follow_the_seed(run, validation_kernels):
    """The plan rows that ran are ci_plan(seed=7); the hypothesis draws are those of seed 7 (reproduced here with
    the suite's own strategy), not the function's derandomized ones."""
    from conformance.cases import strategies
    from conformance.core.targets import CPU

    recs = run["report"]["records"]
    ran = [r["case_id"] for r in recs if r["kernel"] == "broken_dequant_w4a16"]
    assert ran == [c.id for c in plan.ci_plan("broken_dequant_w4a16", CPU, "statistical", seed=7)]
    drawn = []

    @hypothesis_seed(7)
    @settings(seeded_settings(get_profile("ci"), get_profile("ci").settings()), database=None)
    @given(data=st.data())
    def probe(data):
        drawn.append(data.draw(strategies.cases("torch_dequant_w4a16", CPU, tier="statistical", profile="ci"),
                               label="case").id)

    probe()
    assert [r["case_id"] for r in recs if r["kernel"] == "torch_dequant_w4a16"] == drawn
    assert len(drawn) == get_profile("ci").max_examples


def test_failed_plan_cases_are_remembered_for_the_next_run(run, monkeypatch):
    """The controller wrote the failed rows' ids to the replay file; the next run plans them first."""
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(run["cache"]))
    failed = [r["case_id"] for r in run["report"]["records"] if r["outcome"] == "fail"]
    from conformance.core.targets import detect_target

    assert failed and plan.replay_case_ids("broken_dequant_w4a16", "statistical", detect_target()) == failed
