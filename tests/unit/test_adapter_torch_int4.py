"""The torch int4pack adapter (conformance/adapters/torch_int4.py): torch's CPU int4 GEMM judged natively on
every CI run (a slice of cases through the harness, in-process), the float-zero dequant declared and derived
into the bound (Numerics.float_zero_dtype), the gates' rules, the tinygemm load step through its model, and the
recorded runs (benchmarks/results/third_party.json)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conformance.api import (
    Numerics,
    W4A16Config,
    get_kernel,
    load_all,
    parse_target,
    register_kernel,
    unregister_kernel,
)
from conformance.cases.ids import parse_case_id
from conformance.checks import tolerance
from conformance.checks.harness import run_case
from references import codecs, packing
from references.errors import InvalidInput
from references.generators import EXACT_REGIMES, random_canonical

load_all()
from conformance.adapters import torch_int4  # noqa: E402 - importing registers its kernels...

for _name in (torch_int4.CPU_NAME, torch_int4.CUDA_NAME):
    unregister_kernel(_name)  # ... only while this module's tests run (the fixture below), not in other tests


@pytest.fixture(scope="module", autouse=True)
def _adapter_registered():
    torch_int4.register()
    yield
    for name in (torch_int4.CPU_NAME, torch_int4.CUDA_NAME):
        unregister_kernel(name)

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "third_party.json"
CPU = parse_target("cpu")
SM90 = parse_target("sm90")

# the CI slice of torch's CPU op: both dtypes, both weight types, every format, groups 32..256 and channelwise,
# N tails of its 32-wide (AVX2) / 64-wide (AVX512) blocks, exact and statistical tiers
CPU_SLICE = (
    "M=5,N=48,K=256,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v1,regime=exact,tier=exact,seed=3",
    "M=1,N=16,K=256,g=ch,wt=uint4b8,ao=0,dt=bf16,fmt=awq,regime=exact_wide,tier=exact,seed=4",
    "M=17,N=80,K=512,g=128,wt=uint4,ao=0,dt=bf16,fmt=compressed_tensors,regime=exact,tier=exact,seed=5",
    "M=3,N=32,K=512,g=128,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime=normal,tier=statistical,seed=1",
    "M=2,N=64,K=768,g=256,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=all_zero_groups,tier=statistical,seed=2",
    "M=4,N=16,K=96,g=32,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v1,regime=outlier_channels,tier=statistical,seed=6",
)


def _case(kernel: str, body: str):
    return parse_case_id(f"w4a16/{kernel}/{body}")


@pytest.mark.parametrize("body", CPU_SLICE)
def test_cpu_op_passes_natively(body):
    v = run_case(_case("torch_int4_cpu", body), target="cpu", record=False)
    assert v.outcome == "pass" and v.run_mode == "device", v.line() + " " + v.detail


class _IntegerZeroInSlot(torch_int4.TorchInt4Cpu):
    """The GPTQ reading of the op: the integer zero point z where the op takes the float z_f."""

    name = "torch_int4_cpu_integer_zero"

    def load(self, ckpt, ctx=None):
        w = codecs.decode(ckpt)
        sz = torch.stack([w.scales, w.zero_points().to(w.scales.dtype)], -1).contiguous()
        q = w.q.t().contiguous()
        return torch_int4.Int4PackOperands(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), w.gs, sz)


class _FloatZeroUndeclared(torch_int4.TorchInt4Cpu):
    """The real op, declared as if its zero were an integer one rounded once (no float_zero_dtype)."""

    name = "torch_int4_cpu_undeclared"

    def numerics(self, config, M=None):
        return Numerics(dequant_dtype=torch.float32, accumulation=(torch.float32, None, torch.float32))


@pytest.fixture
def registered():
    made = []

    def add(kernel):
        register_kernel(kernel)
        made.append(kernel.name)
        return kernel

    yield add
    for name in made:
        unregister_kernel(name)


def test_integer_zero_in_the_float_slot_fails(registered):
    registered(_IntegerZeroInSlot())
    v = run_case(_case("torch_int4_cpu_integer_zero", CPU_SLICE[0]), target="cpu", record=False)
    assert v.outcome == "fail", v.line()


def test_the_float_zero_rounding_must_be_declared(registered):
    """bf16 z_f = (8 - z) * s loses bits a one-rounding declaration does not allow for: the undeclared twin
    fails where the declared op passes (same op, same case)."""
    registered(_FloatZeroUndeclared())
    body = CPU_SLICE[3]
    honest = run_case(_case("torch_int4_cpu", body), target="cpu", record=False)
    wrong = run_case(_case("torch_int4_cpu_undeclared", body), target="cpu", record=False)
    assert honest.outcome == "pass" and honest.metrics["max_ratio"] < 0.5, honest.line()
    assert wrong.outcome == "fail" and wrong.metrics["max_ratio"] > 1.0, wrong.line()


@pytest.mark.parametrize("regime", EXACT_REGIMES)
@pytest.mark.parametrize("act", [torch.float16, torch.bfloat16])
def test_float_zero_is_exact_on_exact_tier_data(regime, act):
    """Power-of-two scales and small integers: z_f = (8 - z) * s is exact in every dtype, so the float-zero W is
    (q - z) * s bit for bit, in the CPU op's fp32 and in tinygemm's bf16: the exact tier judges both ops."""
    for seed in range(4):
        w = random_canonical(256, 32, 64, "uint4", act, regime, seed)
        exact = w.dequantize(torch.float64)
        for deq in (torch.float32, act):
            W = w.dequantize_rounded(deq, 2, float_zero_dtype=act)
            assert torch.equal(W.double(), exact), (regime, act, deq, seed)


def test_float_zero_reference_is_not_the_integer_zero_one():
    """On realistic scales the float-zero W differs from (q - z) * s rounded once: the convention is real."""
    w = random_canonical(256, 32, 64, "uint4", torch.bfloat16, "normal", 0)
    fz = w.dequantize_rounded(torch.float32, 2, float_zero_dtype=torch.bfloat16)
    assert not torch.equal(fz, w.dequantize_rounded(torch.float32, 1))
    zf = w.zero_term(float_zero=True).to(torch.bfloat16).double()[w.group_of_row()]
    assert torch.equal(fz, ((w.q.double() - 8) * w.scales.double()[w.group_of_row()] + zf).float())


def test_bound_charges_the_float_zero_at_its_own_dtype():
    """u(float_zero_dtype) * min(S_z, c R_z) replaces the dequant dtype's unit for the zero term; the rest is
    unchanged, and without float_zero_dtype the model is GemLite's two-rounding one."""
    g = torch.Generator().manual_seed(0)
    y, S, R = (torch.rand(3, 8, generator=g, dtype=torch.float64) + 0.5 for _ in range(3))
    Sz, Rz = torch.rand(3, 8, generator=g, dtype=torch.float64), torch.rand(3, 8, generator=g, dtype=torch.float64)
    base = dict(out_dtype=torch.bfloat16, dequant_dtype=torch.float32, accumulate_dtype=torch.float32,
                dequant_roundings=2)
    fz = tolerance.ErrorModel(**base, zero_dtype=torch.bfloat16).tolerance(y, S, 256, R, zs=(Sz, Rz))
    plain = tolerance.ErrorModel(**base).tolerance(y, S, 256, R, zs=(Sz, Rz))
    zterm = torch.minimum(Sz, tolerance.C_ACC * Rz)
    assert torch.allclose(fz - plain, (2.0 ** -8 - 2.0 ** -24) * zterm, rtol=1e-12, atol=0)
    k, cfg = get_kernel("torch_int4_cpu"), W4A16Config("uint4", 64, False, "bfloat16", N=32, K=256)
    assert tolerance.error_model_for(k, cfg, torch.bfloat16, 3).zero_dtype == torch.bfloat16
    assert k.numerics(cfg, 3).float_zero_dtype == torch.bfloat16


def test_float_zero_declaration_errors_name_the_field():
    with pytest.raises(InvalidInput, match="Numerics.float_zero_dtype"):
        Numerics(dequant_roundings=2, float_zero_dtype=torch.float64)
    with pytest.raises(InvalidInput, match="Numerics.dequant_roundings"):
        Numerics(float_zero_dtype=torch.bfloat16)


def _cfg(**kw):
    base = dict(weight_type="uint4", group_size=64, act_order=False, dtype="bfloat16", N=64, K=256)
    return W4A16Config(**{**base, **kw})


@pytest.mark.parametrize("kernel,target,kw,rule", [
    ("torch_int4_cpu", CPU, {"N": 40}, "_convert_weight_to_int4pack_cpu's N check"),
    ("torch_int4_cpu", CPU, {"group_size": 16, "K": 256}, "qGroupSize check"),
    ("torch_int4_cpu", CPU, {"group_size": -1, "K": 512}, "channelwise: one group of K=512"),
    ("torch_int4_cpu", CPU, {"act_order": True}, "has no g_idx"),
    ("torch_int4_cpu", CPU, {"weight_type": "uint8"}, "int4 only"),
    ("torch_int4_cpu", SM90, {}, "torch's CPU kernel"),
    ("torch_int4_tinygemm", SM90, {"dtype": "float16"}, "_weight_int4pack_mm's A dtype check"),
    ("torch_int4_tinygemm", parse_target("sm75"), {}, "cuda sm80+"),
    ("torch_int4_tinygemm", CPU, {}, "cuda sm80+"),
    ("torch_int4_tinygemm", SM90, {"group_size": 512, "K": 1024}, "qGroupSize check"),
])
def test_gates_name_the_ops_rules(kernel, target, kw, rule):
    why = get_kernel(kernel).can_implement(_cfg(**kw), target)
    assert why is not None and rule in why, why


def test_gates_accept_what_the_ops_take():
    assert get_kernel("torch_int4_cpu").can_implement(_cfg(N=48, dtype="float16"), CPU) is None
    assert get_kernel("torch_int4_cpu").can_implement(_cfg(group_size=-1, K=256), CPU) is None
    assert get_kernel("torch_int4_tinygemm").can_implement(_cfg(N=8, K=96, group_size=32), SM90) is None
    assert [torch_int4.inner_k_tiles(K) for K in (96, 192, 256)] == [2, 4, 8]


def test_tinygemm_uint8_layout_is_torchaos():
    """The load step's uint8 [N, K/2] (references.packing.HIGH_NIBBLE_FIRST) is torchao's own expression."""
    q = torch.randint(0, 16, (24, 64), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    ours = packing.pack(q, dim=1, order=packing.HIGH_NIBBLE_FIRST).view(torch.uint8)
    assert torch.equal(ours, ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8))
    assert torch.equal(packing.unpack(ours.view(torch.int32), dim=1, order=packing.HIGH_NIBBLE_FIRST), q)


class _TinyGemmLowNibbleFirst(torch_int4.TorchInt4TinyGemm):
    """tinygemm's load step with the nibbles of each byte swapped (the low nibble taken as the even k)."""

    name = "torch_int4_tinygemm_low_first"

    def load(self, ckpt, ctx=None):
        ops = super().load(ckpt, ctx)
        w = ops.w_uint8
        ops.w_uint8 = ((w & 0x0F) << 4) | (w >> 4)
        return ops


@pytest.mark.parametrize("tier,regime", [("exact", "exact"), ("statistical", "normal")])
def test_tinygemm_model_tests_its_load_step_without_a_gpu(registered, tier, regime):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the suite runs tinygemm itself there (benchmarks/third_party_gpu.sh)")
    body = f"M=3,N=24,K=192,g=64,wt=uint4,ao=0,dt=bf16,fmt=gptq_v2,regime={regime},tier={tier},seed=7"
    v = run_case(_case("torch_int4_tinygemm", body), target="sm90", record=False)
    assert v.outcome == "pass" and v.run_mode == "model", v.line()
    registered(_TinyGemmLowNibbleFirst())
    bad = run_case(_case("torch_int4_tinygemm_low_first", body), target="sm90", record=False)
    assert bad.outcome == "fail" and bad.run_mode == "model", bad.line()


def test_missing_op_registers_gate_only_with_the_reason(monkeypatch):
    monkeypatch.setattr(torch_int4, "CPU_OPS", ("_no_such_int4_op",))
    try:
        assert torch_int4.register() == ["torch_int4_cpu", "torch_int4_tinygemm"]
        k = get_kernel("torch_int4_cpu")
        why = k.can_implement(_cfg(), CPU)
        assert why == torch_int4.UNAVAILABLE["torch_int4_cpu"] and "has no aten._no_such_int4_op" in why
        assert not k.has_model and "torch_int4_tinygemm" not in torch_int4.UNAVAILABLE
    finally:
        monkeypatch.undo()
        torch_int4.register()
    assert get_kernel("torch_int4_cpu").can_implement(_cfg(), CPU) is None


# ---- the recorded runs ------------------------------------------------------------------------------------------

CPU_RECORDED = ("torch_int4_cpu", "torchao_fp8_act_quant", "torchao_fp8_act_quant_lhs")
MIN_VERDICTS = 50


def test_third_party_record_holds_runs_with_replayable_failures():
    """benchmarks/results/third_party.json: the keys, runs of the kernels recorded on CPU (and of every kernel that
    ran itself somewhere, tinygemm once the GPU run is merged) with >= 50 verdicts of the kernel itself (device or
    interpreter), every failure with its case id, detail and replay line."""
    from benchmarks.third_party import real_verdicts

    doc = json.loads(RECORD.read_text())
    assert {"commit", "clean", "packages", "runs", "failures"} <= set(doc), sorted(doc)
    assert {"torch", "triton", "torchao"} <= set(doc["packages"]), doc["packages"]
    for run in doc["runs"]:
        assert {"command", "machine", "target", "kernels"} <= set(run), sorted(run)
        for k, c in run["kernels"].items():
            assert c["cases"] == c["passed"] + c["failed"] + c["skipped"], (k, c)
    # tinygemm's CPU runs are of its model (load step only): its own verdicts come from the GPU run once merged
    ran = {k for run in doc["runs"] for k in run["kernels"] if real_verdicts({"runs": [run]}, k)}
    for k in sorted(set(CPU_RECORDED) | ran):
        assert real_verdicts(doc, k) >= MIN_VERDICTS, (k, real_verdicts(doc, k))
    for f in doc["failures"]:
        assert f["case_id"] and f["detail"] and f["replay"].startswith("python -m conformance"), f
        assert f["case_id"] in f["replay"], f
