"""Anyone's kernel, judged like ours: plugin kernels defined outside kernels/ (tests/unit/thirdparty_kernels.py and
its broken twins in thirdparty_broken.py) meet every suite file, every catalogue entry and every replay line.

- the done-when run: `pytest conformance/suite --conformance-plugin ... --conformance-kernels thirdparty_dequant_w4a16`
  passes with real runs of the w4a16 suite, the catalogue and the contract checks, and the plugin imports nothing
  private;
- a failing plugin case's printed replay line replays as printed in a fresh process (exit 1), and a kernel that
  cannot run for a simulated target (no device, no model) is exit 125, not 1;
- a simulated target runs a Triton kernel's real code in the interpreter, and the terminal summary says so, loudly
  when a requested kernel ran nothing;
- the fusion check runs on plugin quant routes: a matchable one passes, a wrapper op fails;
- the contract checks: nondeterministic kernels are compared within their bound across the compile boundary.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

from conformance.core import registry
from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
GOOD = "tests.unit.thirdparty_kernels"
BROKEN = "tests.unit.thirdparty_broken"


def _env(cache: Path | None = None):
    """The subprocess environment; `cache`: the run's own cache dir (failed plan rows and hypothesis examples it
    remembers stay in this test's tmp_path), inductor's compile cache staying the user's (a cold compile: ~20 s)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CONFORMANCE_PLUGINS", None)
    env.pop("PYTEST_ADDOPTS", None)
    if cache is not None:
        from conformance.core.tree import cache_dir

        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir("inductor") / "inductor"))
        env["CONFORMANCE_CACHE_DIR"] = str(cache)
    return env


@pytest.fixture(scope="module")
def plugins():
    """Both plugin modules, registered for this module only (other suites must never parametrize over them)."""
    registry.load_all()
    registry.load_plugin(GOOD)
    registry.load_plugin(BROKEN)
    import tests.unit.thirdparty_broken as tb
    import tests.unit.thirdparty_kernels as tk

    kernels = [c() for m in (tk, tb) for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, registry.Kernel) and c.__module__ == m.__name__]
    for k in kernels:
        registry.register_kernel(k)
    yield {k.name: k for k in kernels}
    for k in kernels:
        registry.unregister_kernel(k.name)


def test_plugin_imports_only_the_public_api():
    """The done-when plugin imports conformance.api and references only (plus torch and the stdlib)."""
    tree = ast.parse((ROOT / "tests/unit/thirdparty_kernels.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in mods if m.split(".")[0] in ("conformance", "conformance_kernels", "kernels", "references")}
    assert ours <= {"conformance.api", "references", "references.codecs"}, ours


def test_done_when_plugin_runs_through_every_suite_file(tmp_path):
    """The whole shipped suite (conformance/suite) on a plugin w4a16 kernel: w4a16 suite, catalogue, contracts."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pytest", "conformance/suite", "-q", "-p", "no:cacheprovider", "-n", "0",
           "--conformance-plugin", GOOD, "--conformance-kernels", "thirdparty_dequant_w4a16",
           "--conformance-report", str(report),
           # the plan's exact-tier rows run the plugin through test_plan.py; its ~187 statistical rows repeat the
           # same plan code (tests/unit/test_plan.py covers the statistical plan) at ~10 s on 2 cores
           "-k", "not (test_plan and statistical)"]
    r = warm_python.run(cmd, cwd=ROOT, env=_env(tmp_path / "cache"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    recs = [x for x in json.loads(report.read_text())["records"] if x["kernel"] == "thirdparty_dequant_w4a16"]
    checks = {x["check"] for x in recs if x["outcome"] == "pass"}
    assert {"exact", "statistical", "fake_vs_real", "make_fx", "opcheck", "compile_boundary"} <= checks, checks
    # the catalogue ran its entries on the plugin: each pinned case id of the catalogue shows up as a pass
    from conformance.checks import catalogue

    passed = {x["case_id"] for x in recs if x["outcome"] == "pass"}
    pinned = {c.id for e in catalogue.ENTRIES if e.family == "w4a16"  # a w4a16 kernel: the w4a16 entries
              for c in e.all_cases("thirdparty_dequant_w4a16")}
    assert pinned <= passed, sorted(pinned - passed)[:3]
    assert re.search(r"thirdparty_dequant_w4a16: real code [1-9]", r.stdout), r.stdout[-3000:]


def test_failing_plugin_case_replays_as_printed(plugins):
    """The catalogue catches the plugin's v2-read-as-v1 twin with a wrong answer, and its printed replay line (it
    names the plugin) exits 1 in a fresh process with no CONFORMANCE_PLUGINS; the parent kernel's line exits 0."""
    from conformance.checks import catalogue
    from conformance.checks.harness import run_case
    from conformance.core.targets import detect_target

    res = catalogue.run_entry(catalogue.entry("v2_not_read_as_v1"), "thirdparty_v2_as_v1", detect_target(),
                              record=False)
    # the twin breaks asymmetric layers only (a uint4b8 layer has no zero points to shift): fail, then pass
    assert [v.outcome for v in res.verdicts] == ["fail", "pass"], [v.line() for v in res.verdicts]
    v = res.verdicts[0]
    assert v.replay == f"python -m conformance --plugin {BROKEN} repro {v.case_id}"
    r = warm_python.run([sys.executable, *shlex.split(v.replay)[1:]], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and r.stdout.startswith(f"FAIL {v.case_id}"), r.stdout + r.stderr
    good = run_case(catalogue.entry("v2_not_read_as_v1").case(0, "thirdparty_dequant_w4a16"), target=detect_target(),
                    record=False)
    assert good.passed and good.replay.split()[4] == GOOD, good.line()


def test_repro_exit_codes_for_plugin_kernels(plugins, monkeypatch, capsys):
    """0 pass, 1 fail, 125 cannot run here (a device-only kernel on a simulated target; no kernel of that name),
    2 bad id, for plugin kernels exactly as for built-in ones."""
    from conformance import cli
    from conformance.checks import catalogue
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: {})
    body = catalogue.entry("v2_not_read_as_v1").cases[0]
    assert cli.main(["repro", f"w4a16/thirdparty_dequant_w4a16/{body}"]) == 0
    assert cli.main(["repro", f"w4a16/thirdparty_v2_as_v1/{body}"]) == 1
    assert cli.main(["repro", f"w4a16/thirdparty_hip_only/{body}", "--target", "gfx1100"]) == 125
    out = capsys.readouterr().out
    assert "cannot run here and has no model" in out, out
    assert cli.main(["repro", f"w4a16/thirdparty_not_loaded/{body}"]) == 125
    assert "--plugin MODULE" in capsys.readouterr().out
    assert cli.main(["repro", "w4a16/thirdparty_dequant_w4a16/M=3"]) == 2


def test_simulated_target_runs_real_code_and_summary_says_so(tmp_path):
    """--conformance-target gfx1100 on a CPU host: triton_w4a16's real code runs in the interpreter (not its model),
    the summary counts it; a requested kernel that ran nothing gets a loud WARNING line with its reasons."""
    from conformance.core.runtime import gpu_present

    if gpu_present():
        pytest.skip("a GPU host: a simulated gfx1100 target runs models there, not the interpreter")
    cmd = [sys.executable, "-m", "pytest", "conformance/suite/test_w4a16_suite.py", "-q", "-p", "no:cacheprovider",
           "-n", "0", "--conformance-plugin", BROKEN, "--conformance-target", "gfx1100",
           "--conformance-kernels", "triton_w4a16,thirdparty_hip_only", "--conformance-tiers", "exact"]
    r = warm_python.run(cmd, cwd=ROOT, env=_env(tmp_path / "cache"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    m = re.search(r"triton_w4a16: real code (\d+) \(interpreter (\d+)\), model (\d+)", r.stdout)
    assert m and int(m.group(1)) > 0 and m.group(1) == m.group(2) and m.group(3) == "0", r.stdout[-3000:]
    warn = [ln for ln in r.stdout.splitlines() if ln.startswith("WARNING: kernel thirdparty_hip_only")]
    assert warn and "NOTHING of it ran" in warn[0] and "has no model" in warn[0], r.stdout[-3000:]
    assert not any(ln.startswith("WARNING: kernel triton_w4a16") for ln in r.stdout.splitlines())


def test_fusion_check_runs_on_plugin_routes(plugins):
    """Every fusion_route kernel is a route; the plugin that calls the upstream op is fused, the one behind a
    wrapper op FAILS the fusion check (a ContractFailure, not an error)."""
    from conformance.checks import fusion
    from conformance.checks.contracts import ContractFailure
    from conformance.checks.quant_layer import RmsNormQuantLayer, fusion_routes, route_availability
    from conformance.families.config import Fp8QuantConfig

    routes = fusion_routes()
    assert {"thirdparty_fp8_quant", "thirdparty_wrapped_quant", "triton", "native"} <= set(routes)
    if route_availability("thirdparty_fp8_quant") is not None:
        pytest.skip(route_availability("thirdparty_fp8_quant"))
    cfg = Fp8QuantConfig(group_size=64, dtype="bfloat16", hidden=128)
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn((3, 128), generator=gen) * 3).to(torch.bfloat16)
    w = (torch.rand(128, generator=gen) + 0.5).to(torch.bfloat16)
    from tests.unit.devices import on_dev  # the routes call the Triton op: tensors on the kernels' device

    x, w = on_dev(x, w)
    ok = fusion.check_fusion(RmsNormQuantLayer(cfg, w, 1e-6, "thirdparty_fp8_quant"), x)
    assert ok["fused_pairs"] == 1
    with pytest.raises(ContractFailure, match="not matchable"):
        fusion.check_fusion(RmsNormQuantLayer(cfg, w, 1e-6, "thirdparty_wrapped_quant"), x)


def test_compile_boundary_bound_for_nondeterministic_kernels(plugins):
    """A kernel declaring deterministic=False is compared within 2x its declared statistical bound: a last-bit
    difference passes, a wrong value fails."""
    from conformance.checks import contracts

    k = plugins["thirdparty_dequant_w4a16"]
    spec = {"M": 4, "N": 32, "K": 128, "group_size": 32, "wtype": "uint4", "act_order": False, "dtype": "float16",
            "format": "gptq_v2", "seed": 3}
    sample = contracts.build_sample(k, spec)
    y = k.apply(sample.operands, sample.x)
    nudged = (y.view(torch.int16) + 1).view(torch.float16)  # one ulp everywhere
    assert contracts._outside_statistical_bound(k, sample, nudged, y) is None
    wrong = y.clone()
    wrong[0, 0] += 64
    assert "beyond 2x the bound" in contracts._outside_statistical_bound(k, sample, wrong, y)
