"""Harness: verdicts record how the kernel ran, hygiene catches unwritten outputs and nondeterminism,
and `repro` exits 0 / 1 / 125 / 2 as `git bisect run` expects."""
import pytest
import torch

from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.cli import main
from conformance.core import registry, results
from conformance.core.targets import CPU

registry.load_all()
BASE = registry.get_kernel("torch_dequant_w4a16")
EXACT = "w4a16/{k}/M=3,N=16,K=64,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=7"
STAT = "w4a16/{k}/M=5,N=16,K=128,g=64,wt=uint4b8,ao=0,dt=bf16,fmt=gptq_v1,regime=normal,tier=statistical,seed=3"
OLD_EXACT = "w4a16/{k}/M3-N16-K64-g32-uint4-noao-fp16-gptq_v2-exact-exact-s7"  # positional ids still replay


class _Derived(type(BASE)):
    family = "w4a16"


class OffByOne(_Derived):
    """Deliberately broken: adds one scale step to every weight (the GPTQ v1/v2 confusion)."""
    name = "test_broken_offbyone"

    def apply(self, w, x):
        y = super().apply(w, x)
        return (y.float() + x.float().sum(-1, keepdim=True) * w.scales.float()[0, 0]).to(x.dtype)

    model = apply


class Unwritten(_Derived):
    """Leaves the last output column unwritten in a torch.empty buffer."""
    name = "test_unwritten_column"

    def apply(self, w, x):
        y = super().apply(w, x)
        out = torch.empty_like(y)
        out[:, :-1] = y[:, :-1]
        return out


class Flaky(_Derived):
    """Declares determinism but perturbs one element on every other call."""
    name = "test_flaky"
    calls = 0

    def apply(self, w, x):
        Flaky.calls += 1
        y = super().apply(w, x)
        if Flaky.calls % 2 == 0:
            y = y.clone()
            y[0, 0] = (y[0, 0].float() * (1 + 2 ** -9) + 2 ** -20).to(y.dtype)  # >= one fp16 ulp away
        return y


class NoDevice(_Derived):
    """Cannot run here; its model still runs (run_mode must say 'model')."""
    name = "test_no_device"

    def availability(self, target):
        return "simulated: no device"

    def run_mode(self, target):
        return "model" if self.availability(target) else "device"


class NoDeviceNoModel(NoDevice):
    name = "test_no_device_no_model"
    has_model = False


@pytest.fixture
def quiet_records(monkeypatch):
    """Keep deliberate failures out of the session's records (and so out of the summary and report)."""
    got = []
    monkeypatch.setattr(results, "record", lambda *a, **kw: got.append((a, kw)))
    return got


@pytest.fixture
def kernels(quiet_records):
    ks = [OffByOne(), Unwritten(), Flaky(), NoDevice(), NoDeviceNoModel()]
    for k in ks:
        registry.register_kernel(k)
    yield {k.name: k for k in ks}
    for k in ks:
        registry.unregister_kernel(k.name)


def test_pass_records_run_mode_device_for_plain_torch():
    before = len(results.records())
    v = run_case(parse_case_id(EXACT.format(k="torch_dequant_w4a16")), target=CPU)
    assert v.outcome == "pass" and v.run_mode == "device", v.line()
    rec = results.records()[before:]
    assert len(rec) == 1 and rec[0]["run_mode"] == "device" and rec[0]["case_id"] == v.case_id


def test_triton_runs_in_the_interpreter():
    """On this machine's own target Triton runs in the interpreter where there is no GPU, compiled where there is."""
    from conformance.core.targets import detect_target

    here = detect_target()
    v = run_case(parse_case_id(EXACT.format(k="triton_w4a16")), target=here)
    assert v.outcome == "pass" and v.run_mode == ("device" if here.is_gpu else "interpreter"), v.line()


def test_model_run_is_labelled_model(kernels):
    v = run_case(parse_case_id(EXACT.format(k="test_no_device")), target=CPU)
    assert v.outcome == "pass" and v.run_mode == "model" and "model run" in v.detail


def test_simulated_gpu_target_is_never_a_device_run():
    v = run_case(parse_case_id(EXACT.format(k="torch_dequant_w4a16")), target="gfx1100", record=False)
    assert v.run_mode == "model" and "--target rocm:gfx1100" in v.replay, v.line()


def test_broken_kernel_fails_both_tiers_with_one_replay_line(kernels):
    for tmpl in (EXACT, STAT):
        v = run_case(parse_case_id(tmpl.format(k="test_broken_offbyone")), target=CPU)
        assert v.outcome == "fail", v.line()
        # a kernel registered by a test module: the line names that module (`--plugin MODULE repro ID`)
        assert "\n" not in v.line() and "python -m conformance " in v.line() and f"repro {v.case_id}" in v.line()


def test_unwritten_output_is_caught_by_nan_fill(kernels):
    v = run_case(parse_case_id(STAT.format(k="test_unwritten_column")), target=CPU)
    assert v.outcome == "fail" and v.detail.startswith("5 NaN/Inf outputs, first at [0, 15]: nan"), v.line()


def test_nondeterminism_is_caught(kernels):
    v = run_case(parse_case_id(EXACT.format(k="test_flaky")), target=CPU)
    assert v.outcome == "fail" and "NOT DETERMINISTIC" in v.detail
    assert run_case(parse_case_id(EXACT.format(k="test_flaky")), target=CPU, check_determinism=False).outcome in (
        "pass", "fail")


@pytest.mark.parametrize("case_id, code", [
    (EXACT.format(k="torch_dequant_w4a16"), 0),
    (EXACT.format(k="test_broken_offbyone"), 1),
    (EXACT.format(k="rdna3_w4a16"), 125),  # gate refuses on cpu
    (EXACT.format(k="test_no_device_no_model"), 125),  # cannot run, no model
    ("w4a16/torch_dequant_w4a16/M3-N15-K64-g32-uint4-noao-fp16-gptq_v2-exact-exact-s7", 2),
    (EXACT.format(k="no_such_kernel"), 125),  # not registered at this commit: bisect must skip, not blame
    (OLD_EXACT.format(k="torch_dequant_w4a16"), 0),
    (OLD_EXACT.format(k="test_broken_offbyone"), 1),
    (EXACT.format(k="torch_dequant_w4a16").replace("N=16", "N=15"), 2),
    (EXACT.format(k="torch_dequant_w4a16") + ",bits=4", 2),  # unknown key
])
def test_repro_exit_codes(kernels, capsys, case_id, code):
    assert main(["repro", case_id, "--target", "cpu"]) == code
    out = capsys.readouterr()
    if code == 2:
        assert "error:" in out.err
    else:
        assert parse_case_id(case_id).id in out.out  # the key=value id, also for a positional one
    if "no_such_kernel" in case_id:
        assert "not registered" in out.out and "torch_dequant_w4a16" in out.out  # names what is registered
