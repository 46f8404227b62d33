"""`python -m conformance bisect` across releases: five fake releases of the toy kernel library `toykern` (0.3.0
breaks `dequant`, 0.5.0 fixes it; tests/unit/toykern_releases.py) in a folder of wheels, replayed in this process
(`--replay in-process`: the steps import no torch of their own). Both directions must name the right release, skips
follow git's rule, and every bad input is one line and exit 2 with nothing installed.

The fresh-process route (the default, `--replay subprocess`) costs a torch import per step: its test runs with
CONFORMANCE_SLOW_TESTS=1 (tests/unit/test_bisect_commits.py runs `git bisect run` the same way)."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conformance import cli
from conformance.bisect import releases, search, sites
from references.errors import InvalidInput
from tests.unit import toykern_releases as toy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return toy.wheel_folder(tmp_path_factory.mktemp("toykern-wheels"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bisect-cache")


def bisect(wheels, cache, *args, case=toy.CASE):
    return cli.main(["bisect", case, "--package", "toykern", "--wheels", str(wheels), "--cache", str(cache),
                     "--plugin", toy.PLUGIN, "--replay", "in-process", *args])


def test_break_names_the_first_bad_release_and_diffs_the_kernel_file(wheels, cache, tmp_path, capsys):
    rc = bisect(wheels, cache, "--good", "0.1.0", "--bad", "0.4.0", "--json", str(tmp_path / "r.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "last good release: 0.2.0" in out and "first bad release: 0.3.0" in out, out
    # the diff is of the kernel's file (found from the registered kernel), not of every file that changed
    assert "+++ toykern-0.3.0/toykern/dequant.py" in out and "__init__.py" not in out, out
    assert '+    zq = z.long()[g] + 1' in out, out
    rec = json.loads((tmp_path / "r.json").read_text())
    assert (rec["first_bad"], rec["last_good"], rec["package"], rec["find"]) == ("0.3.0", "0.2.0", "toykern", "break")
    assert [s["release"] for s in rec["steps"]][:2] == ["0.4.0", "0.1.0"]  # both ends first, the bad end first
    assert {s["release"]: s["answer"] for s in rec["steps"]}["0.3.0"] == "bad"
    assert rec["files"] == [toy.KERNEL_FILE] and rec["wall_s"] >= 0
    bad_step = next(s for s in rec["steps"] if s["release"] == "0.3.0")
    assert bad_step["verdict"].startswith("FAIL ") and "mismatches=192" in bad_step["metrics"]


def test_fix_names_the_first_fixed_release(wheels, cache, tmp_path, capsys):
    rc = bisect(wheels, cache, "--bad", "0.3.0", "--good", "0.5.0", "--find", "fix", "--json", str(tmp_path / "f.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "last bad release: 0.4.0" in out and "first good release: 0.5.0" in out, out
    rec = json.loads((tmp_path / "f.json").read_text())
    assert (rec["first_good"], rec["last_bad"], rec["find"]) == ("0.5.0", "0.4.0", "fix")


def test_a_release_that_cannot_load_is_skipped(tmp_path, cache, capsys):
    folder = toy.wheel_folder(tmp_path / "w")
    # 0.2.5 does not import (exit 2 in the step: the plugin fails): a skip, as git's 125
    toy.write_wheel(folder, "0.2.5", {"toykern/__init__.py": 'raise ImportError("0.2.5 was yanked")\n'})
    rc = bisect(folder, tmp_path / "c", "--good", "0.1.0", "--bad", "0.4.0", "--json", str(tmp_path / "s.json"))
    out = capsys.readouterr().out
    assert rc == 1, out  # the skipped release hides the boundary: both candidates are named
    assert "first bad release: one of 0.2.5, 0.3.0" in out, out
    rec = json.loads((tmp_path / "s.json").read_text())
    assert rec["candidates"] == ["0.2.5", "0.3.0"]
    assert {s["release"]: s["answer"] for s in rec["steps"]}["0.2.5"] == "skip"


def test_a_good_end_without_the_kernel_counts_good(tmp_path, capsys):
    folder = tmp_path / "w"
    toy.write_wheel(folder, "0.0.1", {"toykern/__init__.py": '__version__ = "0.0.1"\n'})  # no dequant yet
    for v in ("0.3.0", "0.4.0", "0.5.0"):
        toy.write_wheel(folder, v)
    assert bisect(folder, tmp_path / "c", "--good", "0.0.1", "--bad", "0.4.0") == 0
    out = capsys.readouterr().out
    assert "step 2: 0.0.1: good" in out and "absent, counted good: SKIP" in out, out
    assert "first bad release: 0.3.0" in out, out
    # at the bad end, absence is no answer: one line, exit 2
    assert bisect(folder, tmp_path / "c", "--bad", "0.0.1", "--good", "0.5.0", "--find", "fix") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --bad='0.0.1'") and "a release on which the case can be judged" in err, err


def test_search_steps_around_skips_and_reports_candidates():
    def run(answers):
        return search.bisect(len(answers), lambda i: (answers[i], None))

    r = run(["old", "skip", "old", "new", "new"])
    assert (r.last_old, r.first_new, r.candidates) == (2, 3, [3])
    assert [i for i, _, _ in r.steps] == [4, 0, 2, 3]  # ends, middle, then the one left
    r = run(["old", "old", "skip", "skip", "new"])
    assert r.ambiguous and r.candidates == [2, 3, 4] and r.last_old == 1
    with pytest.raises(search.EndMismatch) as e:
        run(["old", "new", "old"])  # the new end answers old
    assert (e.value.end, e.value.index) == ("new", 2)


def test_repeat_catches_a_bug_that_shows_in_some_replays_only(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "w"
    toy.write_wheel(folder, "0.1.0")
    for v in ("0.3.0", "0.4.0"):  # broken in every 3rd process only (the 2nd, 5th, ...)
        toy.write_wheel(folder, v, {**toy.files(v), toy.KERNEL_FILE: toy.FLAKY.format(note=v)})
    monkeypatch.setenv("TOYKERN_FLAKY_COUNTER", str(tmp_path / "counter"))
    # one replay per step: the bad end's first process is a clean one, so the id "passes on the bad release"
    assert bisect(folder, tmp_path / "c", "--good", "0.1.0", "--bad", "0.4.0") == 2
    assert "a case that fails on the bad release 0.4.0 (it passes there" in capsys.readouterr().err
    (tmp_path / "counter").unlink()
    rc = bisect(folder, tmp_path / "c", "--good", "0.1.0", "--bad", "0.4.0", "--repeat", "3",
                "--json", str(tmp_path / "r.json"))
    out = capsys.readouterr().out
    assert rc == 0 and "first bad release: 0.3.0" in out, out
    assert "step 1: 0.4.0: bad (1 of 3 replays failed, exit 1" in out, out
    steps = {s["release"]: s for s in json.loads((tmp_path / "r.json").read_text())["steps"]}
    assert {v: (s["answer"], s["repeat"], s["failed"]) for v, s in steps.items()} == {
        "0.4.0": ("bad", 3, 1), "0.1.0": ("good", 3, 0), "0.3.0": ("bad", 3, 1)}
    assert steps["0.3.0"]["verdict"].startswith("FAIL "), steps["0.3.0"]  # the failing replay's line
    assert (tmp_path / "counter").read_text() == "6"  # 3 replays of each flaky release, each its own import


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_repeat_must_be_a_whole_number_of_replays(wheels, cache, capsys, value):
    assert bisect(wheels, cache, "--good", "0.1.0", "--bad", "0.4.0", "--repeat", value) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --repeat={value!r}") and "at least 1" in err, err


@pytest.mark.parametrize("args, field, allowed", [
    (["--good", "0.1.0", "--bad", "0.9.0"], "--bad", "a release of toykern: 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0"),
    (["--good", "0.2.0", "--bad", "0.2.0"], "--bad", "a release other than --good=0.2.0"),
    (["--good", "0.4.0", "--bad", "0.1.0"], "--good", "a release older than --bad=0.1.0"),
    (["--good", "0.1.0", "--bad", "0.5.0", "--find", "fix"], "--bad", "a release older than --good=0.1.0"),
    (["--good", "0.1.0", "--bad", "0.4.0", "--find", "sideways"], "--find", "one of ['break', 'fix']"),
])
def test_bad_versions_are_one_line_and_exit_2(wheels, cache, capsys, args, field, allowed):
    assert bisect(wheels, cache, *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {field}=") and allowed in err, err


def test_unknown_package_malformed_id_and_a_passing_bad_release(wheels, cache, capsys):
    assert cli.main(["bisect", toy.CASE, "--package", "nosuchkern", "--wheels", str(wheels), "--good", "1",
                     "--bad", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --package='nosuchkern' is invalid") and "toykern" in err, err
    assert bisect(wheels, cache, "--good", "0.1.0", "--bad", "0.4.0", case="w4a16/toy_dequant_w4a16/M=3") == 2
    assert capsys.readouterr().err.startswith("error: ")
    # 0.2.0 passes: not a bad release for this id (judged once, then refused)
    assert bisect(wheels, cache, "--good", "0.1.0", "--bad", "0.2.0") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ID=") and "a case that fails on the bad release 0.2.0 (it passes there: PASS" \
        in err and err.count("\n") == 1, err
    # 0.3.0 fails and so does 0.4.0: as a fix search, 0.4.0 is no good release
    assert bisect(wheels, cache, "--bad", "0.3.0", "--good", "0.4.0", "--find", "fix") == 2
    assert "a case that passes on the good release 0.4.0" in capsys.readouterr().err


def test_no_index_is_one_line_and_exit_2(monkeypatch):
    said = subprocess.CompletedProcess([], 1, "", "ERROR: Could not fetch URL https://pypi.org/simple/gemlite/: "
                                       "connection refused\n")
    monkeypatch.setattr(releases.subprocess, "run", lambda *a, **k: said)
    with pytest.raises(InvalidInput) as e:
        releases.from_index("gemlite")
    assert e.value.field == "--package" and "a package on a reachable index, or --wheels DIR" in str(e.value)
    assert "connection refused" in str(e.value) and "\n" not in str(e.value)
    said.stderr = "ERROR: No matching distribution found for nosuchkern"
    with pytest.raises(InvalidInput, match="pip found no release of it"):
        releases.from_index("nosuchkern")
    assert releases.parse_pip_index("gemlite (0.6.0)\nAvailable versions: 0.6.0, 0.5.1, 0.4.0\n") == \
        ["0.6.0", "0.5.1", "0.4.0"]


def test_a_broken_wheel_leaves_no_site_and_nothing_in_site_packages(wheels, tmp_path, capsys):
    before = {p: sorted(os.listdir(p)) for p in site.getsitepackages() if os.path.isdir(p)}
    folder = tmp_path / "w"
    folder.mkdir()
    for f in wheels.glob("*.whl"):
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "toykern-0.6.0-py3-none-any.whl").write_bytes(b"not a zip")
    c = tmp_path / "c"
    assert bisect(folder, c, "--good", "0.1.0", "--bad", "0.6.0") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: wheel=") and "a readable wheel (zip) file" in err, err
    assert not (c / "sites").exists() or [p.name for p in (c / "sites").iterdir()] == [], "a partial site is left"
    assert before == {p: sorted(os.listdir(p)) for p in before}


def test_install_places_purelib_data_at_the_top_and_is_cached(tmp_path):
    wheel = toy.write_wheel(tmp_path / "w", "0.1.0", {**toy.files("0.1.0"),
                                                      "toykern-0.1.0.data/purelib/toyextra.py": "X = 1\n",
                                                      "toykern-0.1.0.data/scripts/toy": "#!/bin/sh\n"})
    s = sites.install(wheel, tmp_path / "c")
    assert (s / "toyextra.py").read_text() == "X = 1\n" and (s / toy.KERNEL_FILE).is_file()
    assert not list(s.glob("*.data")) and sites.top_level(s) == ["toyextra", "toykern"]
    (s / "marker").write_text("kept")
    assert sites.install(wheel, tmp_path / "c") == s and (s / "marker").is_file()  # reused, not reinstalled
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("../escape.py", "")
    with pytest.raises(InvalidInput, match="members stay inside it"):
        sites.install(wheel, tmp_path / "c2")


@pytest.mark.skipif(os.environ.get("CONFORMANCE_SLOW_TESTS") != "1",
                    reason="one fresh interpreter per step (about 4 CPU-s each): CONFORMANCE_SLOW_TESTS=1")
def test_the_default_fresh_process_route_names_the_release(wheels, tmp_path):
    p = subprocess.run([sys.executable, "-m", "conformance", "bisect", toy.CASE, "--package", "toykern", "--wheels",
                        str(wheels), "--cache", str(tmp_path / "c"), "--plugin", toy.PLUGIN, "--good", "0.2.0",
                        "--bad", "0.3.0"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "first bad release: 0.3.0" in p.stdout and "+++ toykern-0.3.0/toykern/dequant.py" in p.stdout
