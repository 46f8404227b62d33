"""`bisect --repo PATH --paths FILES`: the commit of a library's clone that broke (or fixed) a case, each commit's
kernel file placed over an installed release. A scratch git repository holds toykern's five release states, each
followed by a README-only commit (tests/unit/toykern_releases.py); the installed release under the files is 0.1.0
from a folder of wheels. Steps run in this process (`--replay in-process`); `git bisect run` with `--checkout`
starts a fresh interpreter per commit and runs with CONFORMANCE_SLOW_TESTS=1."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli
from tests.unit import toykern_releases as toy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    base = tmp_path_factory.mktemp("toykern-git")
    shas = toy.git_clone(base / "repo")
    return base / "repo", shas, toy.wheel_folder(base / "wheels"), base / "cache"


def bisect(clone, *args):
    repo, _, wheels, cache = clone
    return cli.main(["bisect", toy.CASE, "--package", "toykern", "--repo", str(repo), "--paths", toy.KERNEL_FILE,
                     "--over", "0.1.0", "--wheels", str(wheels), "--cache", str(cache), "--plugin", toy.PLUGIN,
                     "--replay", "in-process", *args])


def test_commit_bisect_names_the_breaking_commit(clone, tmp_path, capsys):
    _, shas, _, _ = clone
    rc = bisect(clone, "--good", shas["0.1.0"], "--bad", shas["0.4.0"], "--json", str(tmp_path / "c.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"first bad commit: {shas['0.3.0']} (" in out and "toykern 0.3.0" in out, out
    assert "+    zq = z.long()[g] + 1" in out, out  # git's diff of the kernel file between the two commits
    rec = json.loads((tmp_path / "c.json").read_text())
    assert (rec["first_bad_commit"], rec["last_good_commit"]) == (shas["0.3.0"], shas["0.2.0"])
    # only the commits that touch the kernel file are steps: the README commits never are
    assert {s["commit"] for s in rec["steps"]} <= {shas[v][:12] for v in toy.RELEASES}


def test_commit_bisect_finds_the_fix(clone, capsys):
    _, shas, _, _ = clone
    assert bisect(clone, "--bad", shas["0.3.0"], "--good", "HEAD", "--find", "fix") == 0
    out = capsys.readouterr().out
    assert f"first good commit: {shas['0.5.0']} (" in out, out


def test_checkout_answers_for_the_checked_out_files(clone, capsys):
    repo, shas, wheels, cache = clone
    codes, branch = {}, toy._git(repo, "symbolic-ref", "--short", "HEAD")
    try:
        for v in ("0.2.0", "0.3.0"):
            toy._git(repo, "checkout", "-q", shas[v])
            codes[v] = cli.main(["bisect", toy.CASE, "--package", "toykern", "--repo", str(repo), "--paths",
                                 toy.KERNEL_FILE, "--over", "0.1.0", "--wheels", str(wheels), "--cache", str(cache),
                                 "--plugin", toy.PLUGIN, "--replay", "in-process", "--checkout"])
    finally:
        toy._git(repo, "checkout", "-q", branch)
    assert codes == {"0.2.0": 0, "0.3.0": 1}, capsys.readouterr().out


@pytest.mark.parametrize("paths, good, field", [
    ("toykern/nothing.py", "0.1.0", "--paths"),  # unchanged between the ends: cannot explain the change
    ("../outside.py", "0.1.0", "--paths"),
    (toy.KERNEL_FILE, "no-such-rev", "--good"),
])
def test_bad_commit_inputs_are_one_line_and_exit_2(clone, capsys, paths, good, field):
    repo, shas, wheels, cache = clone
    assert cli.main(["bisect", toy.CASE, "--package", "toykern", "--repo", str(repo), "--paths", paths, "--over",
                     "0.1.0", "--wheels", str(wheels), "--cache", str(cache), "--plugin", toy.PLUGIN,
                     "--good", shas.get(good, good), "--bad", shas["0.4.0"]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}=") and err.count("\n") == 1, err


def test_not_a_clone_and_a_reversed_range(clone, tmp_path, capsys):
    _, shas, _, _ = clone
    assert bisect(clone, "--good", shas["0.4.0"], "--bad", shas["0.1.0"]) == 2
    assert capsys.readouterr().err.startswith("error: --good=")
    assert cli.main(["bisect", toy.CASE, "--package", "toykern", "--repo", str(tmp_path), "--paths", toy.KERNEL_FILE,
                     "--good", "a", "--bad", "b"]) == 2
    assert capsys.readouterr().err.startswith("error: --repo=")


@pytest.mark.skipif(os.environ.get("CONFORMANCE_SLOW_TESTS") != "1",
                    reason="git bisect run starts a fresh interpreter per commit: CONFORMANCE_SLOW_TESTS=1")
def test_git_bisect_run_with_checkout(clone):
    repo, shas, wheels, cache = clone
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PYTHONPATH"] = str(ROOT)
    toy._git(repo, "bisect", "start", shas["0.4.0"], shas["0.1.0"])
    try:
        p = subprocess.run(["git", "bisect", "run", sys.executable, "-m", "conformance", "bisect", toy.CASE,
                            "--package", "toykern", "--repo", ".", "--paths", toy.KERNEL_FILE, "--over", "0.1.0",
                            "--wheels", str(wheels), "--cache", str(cache), "--plugin", toy.PLUGIN, "--checkout"],
                           cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    finally:
        toy._git(repo, "bisect", "reset")
    m = re.search(r"^([0-9a-f]{40}) is the first bad commit", p.stdout, re.M)
    assert m and m.group(1) == shas["0.3.0"], p.stdout + p.stderr
