"""The compile lane as tests (`pytest --conformance-compile-targets gfx1100,...,sm120`): one test per selected kernel
and target, which compiles every specialization the kernel's plan, catalogue and regression cases launch there
(conformance/compile/lane.py) and fails on any compile-error or resource-fail, each printed with its replay line.
Off by default (one skipped item says how to turn it on): a cold lane compiles hundreds of programs; compiles are
cached in the user cache dir, so a second run of an unchanged tree compiles nothing."""
from __future__ import annotations

import pytest

OPTION = "--conformance-compile-targets"


def _targets(config) -> list[str]:
    text = config.getoption(OPTION) or ""
    return [t.strip() for t in text.split(",") if t.strip()]


def pytest_generate_tests(metafunc):
    if "compile_target" not in metafunc.fixturenames:
        return
    from conformance.core import registry
    from conformance.core.target_limits import limits
    from conformance.core.targets import parse_target

    config = metafunc.config
    targets = _targets(config)
    if not targets:
        metafunc.parametrize("compile_kernel,compile_target", [pytest.param(None, None, marks=pytest.mark.skip(
            reason=f"compile lane off: {OPTION} T,T runs it (or python -m conformance compile)"))],
            ids=["off"])
        return
    for t in targets:
        tgt = parse_target(t)
        if not tgt.is_gpu:
            raise pytest.UsageError(f"{OPTION}={t!r} is invalid; allowed: GPU targets, e.g. gfx1201,sm90")
        limits(tgt.arch)
    opt = config.getoption("--conformance-kernels")
    kernels = registry.resolve_kernels(opt) if opt else registry.all_kernels()
    names = sorted(k.name for k in kernels)
    metafunc.parametrize("compile_kernel,compile_target", [(k, parse_target(t).arch) for k in names
                                                           for t in targets])


def test_compiles_for_target(compile_kernel, compile_target, request):
    from conformance.cli.compile import replay_command
    from conformance.compile import lane
    from conformance.core import registry

    st = request.config._conformance
    k = registry.get_kernel(compile_kernel)
    res = lane.run_lane([k], [compile_target], seed=st.seed, profile=request.config.getoption("--conformance-profile"))
    status = res["kernels"][k.name][compile_target]
    if not res["records"] and not res["errors"]:
        pytest.skip("; ".join(res.get("skipped") or [f"{k.name} on {compile_target}: {status}"]))  # the HIP reason
    bad = [r for r in res["records"] if r["verdict"] != "pass"]
    lines = [f"{r['verdict'].upper()} {r['id']} -- {r['message']} [{replay_command(r)}]" for r in bad]
    assert not bad and not res["errors"], "\n".join(lines + res["errors"])
