"""Each contract check fails on the broken kernel built to break it, and passes on the real kernel; every failure
replays: its record carries a check id (conformance.cases.check_ids) and replay line, `repro` of that id exits 1,
and `repro` of the same check id on the real kernel exits 0."""
from __future__ import annotations

import pytest

from conformance import cli
from conformance.cases.check_ids import parse_id
from conformance.checks import check_replay, contracts, fusion
from conformance.core import registry, results
from conformance.families.config import Fp8QuantConfig
from conformance.reports import validate as validate_report
from tests.unit.devices import ON_GPU

PLUGIN = "tests.unit.broken_contract_kernels"
SPEC = {"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
        "act_order": False, "format": "gptq_v2", "seed": 2}

RUN_MODE = "device" if ON_GPU else "interpreter"  # how the replayed check ran the real op on this machine


@pytest.fixture(scope="module")
def mutants():
    registry.load_all()
    registry.load_plugin(PLUGIN)
    import tests.unit.broken_contract_kernels as mod

    for n in mod.MUTANT_NAMES:  # re-register if an earlier module-scope teardown removed them
        registry.register_kernel(getattr(mod, {"mutant_fake_wrong_n": "FakeWrongN",
                                               "mutant_plain_python_op": "PlainPythonOp",
                                               "mutant_frozen_tiles": "FrozenTiles",
                                               "mutant_wrapped_quant": "WrappedQuant"}[n]))
    yield {n: registry.get_kernel(n) for n in mod.MUTANT_NAMES}
    for n in mod.MUTANT_NAMES:
        registry.unregister_kernel(n)


@pytest.fixture
def recorded(monkeypatch):
    """The records run_check writes, kept in this test's own list (the deliberate failures stay out of the run's
    records, summary and report)."""
    got = []
    monkeypatch.setattr(results, "record", lambda kernel, check, outcome, **kw: got.append(
        dict(kernel=kernel, check=check, outcome=outcome, **kw)) or got[-1])
    return got


def _sample(kernel):
    return contracts.build_sample(kernel, SPEC)


def _failure(check, kernel, fn, recorded, match, **kw) -> dict:
    """Run `fn` as the suite does (contracts.run_check): it must fail with `match`, and its record must carry a
    check id of `check` on `kernel` and the line that replays it; returns the record."""
    with pytest.raises(contracts.ContractFailure, match=match) as ei:
        contracts.run_check(check, kernel, fn, **kw)
    rec = recorded[-1]
    assert (rec["kernel"], rec["check"], rec["outcome"]) == (kernel.name, check, "fail")
    cid = rec["case_id"]
    assert cid.startswith(f"{kernel.family}/{kernel.name}/check={check},")
    assert rec["replay"] == f"python -m conformance --plugin {PLUGIN} repro {cid}"
    assert str(ei.value).endswith(f"-- replay: {rec['replay']}")  # pytest's failure message names it too
    return rec


def _repro(case_id: str, capsys) -> tuple[int, str]:
    code = cli.main(["repro", case_id])
    return code, capsys.readouterr().out


def test_fake_wrong_n_is_caught_and_replays(mutants, recorded, capsys):
    k = mutants["mutant_fake_wrong_n"]
    rec = _failure("fake_vs_real", k, lambda: contracts.check_fake_vs_real(k, _sample(k)), recorded, "shape")
    assert rec["case_id"] == ("w4a16/mutant_fake_wrong_n/"
                              "check=fake_vs_real,M=5,N=256,K=256,g=128,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,seed=2")
    code, out = _repro(rec["case_id"], capsys)
    assert code == 1 and out.startswith(f"FAIL {rec['case_id']} [{RUN_MODE}] replay: {rec['replay']} -- ")
    assert "fake vs real output 0 differ" in out
    code, out = _repro(rec["case_id"].replace(k.name, "triton_w4a16"), capsys)  # the real kernel, same input
    assert code == 0 and out.startswith("PASS w4a16/triton_w4a16/check=fake_vs_real,"), out


def test_plain_python_op_is_caught_and_replays(mutants, recorded, capsys):
    k = mutants["mutant_plain_python_op"]
    s = _sample(k)
    with pytest.raises(contracts.ContractFailure, match="not a torch.library"):
        contracts.check_fake_vs_real(k, s)
    for check, fn in (("make_fx", contracts.check_make_fx), ("opcheck", contracts.check_opcheck)):
        rec = _failure(check, k, lambda fn=fn: fn(k, s), recorded, "not a torch.library")
        assert _repro(rec["case_id"], capsys)[0] == 1
    code, out = _repro(rec["case_id"].replace(k.name, "triton_w4a16"), capsys)  # opcheck of the real kernel
    assert code == 0 and "test_faketensor=SUCCESS" in out, out


def test_frozen_tiles_are_caught_and_replay(mutants, capsys):
    # one compile per kernel (each is seconds in the interpreter): the mutant's failure is found by `repro` of the
    # check id the suite's record names (test_contracts passes contracts.check_id of its spec to run_check)
    contracts.inductor_dirs()
    k = mutants["mutant_frozen_tiles"]
    cid = contracts.check_id("compile_boundary", k, SPEC)
    code, out = _repro(cid, capsys)
    assert code == 1 and out.startswith(f"FAIL {cid} [{RUN_MODE}] replay: python -m conformance --plugin {PLUGIN} "
                                        f"repro {cid} -- ") and "traced and frozen" in out, out
    real = check_replay.run_check_case(parse_id(cid.replace(k.name, "triton_w4a16")))  # what repro runs: exit 0
    assert real.outcome == "pass" and real.metrics["tiles_distinguish_prefill_decode"], real.line()


def test_unmatched_quant_wrapper_is_caught_and_replays(mutants, recorded, capsys):
    cfg = Fp8QuantConfig(group_size=64, dtype="bfloat16", hidden=256)
    k = mutants["mutant_wrapped_quant"]
    bad, x = check_replay.fusion_layer(k, cfg, fusion.TOKENS, 0)
    rec = _failure("fusion", k, lambda: fusion.check_fusion(bad, x), recorded, "not matchable",
                   case_id=fusion.check_id(k.name, cfg))
    assert rec["case_id"] == ("fp8_group_quant/mutant_wrapped_quant/"
                              "check=fusion,T=7,H=256,g=64,dt=bf16,f8=e4m3fn,ue8m0=0,colmajor=0,seed=0")
    code, out = _repro(rec["case_id"], capsys)
    assert code == 1 and "not matchable" in out
    code, out = _repro(rec["case_id"].replace(k.name, "fp8_group_quant_triton"), capsys)
    assert code == 0 and out.startswith("PASS fp8_group_quant/fp8_group_quant_triton/check=fusion,"), out
    # the reports print a contract failure's replay line like any case's (the same record fields)
    summary = validate_report.summarize([rec], [], [k.name])
    assert [(f["case_id"], f["replay"]) for f in summary["failures"]] == [(rec["case_id"], rec["replay"])]


def test_a_v2_kernels_run_context_is_resolved_once_outside_the_traced_function(monkeypatch):
    """apply_fn resolves an API v2 call's RunContext when it builds f, never inside f: inside, detect_target's
    torch.cuda.get_device_capability became a dynamo graph node beside the op on the H200, a false compile-boundary
    failure for every v2 kernel (the vLLM adapter's)."""
    import torch

    from conformance.core import kernel as kmod

    calls = []
    here = kmod.RunContext.here.__func__
    monkeypatch.setattr(kmod.RunContext, "here", classmethod(lambda cls, k, *a, **kw: (calls.append(k.name),
                                                                                        here(cls, k, *a, **kw))[1]))

    class V2Probe(kmod.Kernel):
        name, family, api_version = "v2_probe", "w4a16", 2

        def can_implement(self, config, target):
            return None

        def load(self, checkpoint, ctx):
            raise NotImplementedError

        def apply(self, w, x, ctx):
            assert isinstance(ctx, kmod.RunContext)
            return x * w

    f = contracts.apply_fn(V2Probe(), torch.tensor(2.0))
    assert calls == ["v2_probe"]
    assert [float(f(torch.ones(1), torch.tensor(3.0))) for _ in range(3)] == [3.0] * 3
    assert calls == ["v2_probe"]  # the traced function asks nothing more
