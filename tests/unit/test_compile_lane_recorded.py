"""The compile lane in CPU CI: the lane's CI run (the in-tree kernels' plan, catalogue and regression cases, fixed
seed) on each of the nine targets, judged from the compile results checked into the tree for the locked Triton
(conformance/compile/recorded.py): every program the kernels launch there has a recorded result, and each passes
the target's limits. A kernel or plan change that launches a program without a result fails here with the command
that compiles and records it."""
from __future__ import annotations

from pathlib import Path

import pytest

from conformance.compile import ci_lane, recorded
from conformance.core.target_limits import LANE_TARGETS


@pytest.mark.parametrize("arch", LANE_TARGETS)
def test_every_program_of_the_ci_lane_has_a_recorded_passing_compile(arch):
    if recorded.load() is None:
        pytest.skip(f"no compile results recorded for Triton {recorded.triton_version()} (the lock's Triton has "
                    f"them; record this one with `{recorded.RECORD_COMMAND}`)")
    from conformance.cli.compile import replay_command

    res = ci_lane.check(arch)
    missing = res["unrecorded"]
    assert not missing, (f"{len(missing)} programs launched on {arch} have no recorded compile result (a kernel or "
                         f"the plan changed): run `{recorded.RECORD_COMMAND}` and commit "
                         f"{recorded.path().name}; first: {missing[:3]}")
    assert res["records"], f"no program of the in-tree kernels is launched on {arch}"
    bad = [f"{r['verdict'].upper()} {r['id']} -- {r['message']} [{replay_command(r)}]"
           for r in res["records"] if r["verdict"] != "pass"]
    assert not bad and not res["errors"], "\n".join(bad + res["errors"])


def test_an_unrecorded_program_is_listed_not_compiled(monkeypatch):
    """Offline, a program with no cached or recorded result is listed under "unrecorded" (its compile id), and
    nothing is compiled."""
    from conformance.compile import lane, triton_driver

    def no_compile(*a, **k):
        raise AssertionError("offline lane compiled a program")

    monkeypatch.setattr(triton_driver, "compile_program", no_compile)
    monkeypatch.setattr(recorded, "lookup", lambda key: None)
    monkeypatch.setattr(lane, "_cache_file", lambda key: Path("/nonexistent/x"))
    res = ci_lane.check("sm80")
    assert res["unrecorded"] and not res["records"]
    assert all(cid.startswith("compile/sm80/") for cid in res["unrecorded"])
