"""Kernel API v2 declarations, shown on plugin-style kernels defined here (outside kernels/, importing only
`conformance.api` and `references`): an honest declaration passes, a wrong one fails through the real harness.

- FP8 group quant whose scale multiplies by the fp32 reciprocal of fp8_max (vLLM main): exact tier passes with
  `fp8_scale="reciprocal"`, fails with "divide" on cases where the 1-ulp difference occurs.
- W4A16 that adds fp16 partial sums of 32-wide blocks at M <= 4 (GemLite-style): passes when its numerics say so
  for that M, fails when it claims fp32 accumulation.
Plus the reference conventions (reciprocal scale, two-rounding dequant) against independent computations, and
the declaration errors.
"""
from __future__ import annotations

import bisect
import functools
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
import torch

from conformance.api import CPU, Intake, Kernel, Numerics, RunContext, W4A16Config
from conformance.api import Fp8QuantConfig as _Fp8Config
from references import codecs
from references.fp8 import FP8_MAX, fp8_group_quant_reference, fp32_reciprocal
from references.generators import random_canonical
from references.weight import DEQUANT_CONVENTIONS

# ------------------------------------------------------------------------------------------------------------
# plugin-style kernels
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fp8Params:
    group_size: int
    fp8_dtype: str
    fp8_max: float
    eps: float = 1e-10


class ReciprocalFp8(Kernel):
    """vLLM main's group quant: s = max(amax, eps) * fp32(1/fp8_max), q = fp8(clamp(x / s)). API v2."""

    name = "conv_fp8_reciprocal"
    family = "fp8_group_quant"
    api_version = 2

    def __init__(self, declared: str):
        self.declared = declared

    def can_implement(self, config, target):
        if not isinstance(config, _Fp8Config) or config.ue8m0 or config.column_major_scales:
            return "only plain fp32 row-major scales (allowed: ue8m0=False, column_major_scales=False)"
        return None

    def run_mode(self, target):
        return "device"  # plain torch: runs natively, never through the Triton interpreter

    def numerics(self, config, M=None):
        return Numerics(zero_group_policy="triton", fp8_scale=self.declared)

    def load(self, config, ctx):
        assert isinstance(ctx, RunContext) and ctx.mode == "device", ctx  # v2: the harness passes its context
        return _Fp8Params(config.group_size, config.fp8_dtype, FP8_MAX[config.fp8_dtype])

    def apply(self, p, x, ctx):
        # ctx.device names the kernels' device ("cuda" on a GPU host, where x is on the current one, cuda:0)
        assert x.device.type == torch.device(ctx.device).type, (x.device, ctx)
        xg = x.float().reshape(x.shape[0], -1, p.group_size)
        amax = torch.maximum(xg.abs().amax(-1), torch.tensor(p.eps, dtype=torch.float32, device=x.device))
        s = amax * torch.tensor(1.0 / p.fp8_max, dtype=torch.float32, device=x.device)  # the reciprocal multiply
        q = (xg / s.unsqueeze(-1)).clamp(-p.fp8_max, p.fp8_max).reshape(x.shape)
        return q.to(getattr(torch, p.fp8_dtype)), s


BLOCK = 32  # K-terms per fp32 block partial when M <= SMALL_M
SMALL_M = 4


class Fp16PartialsW4A16(Kernel):
    """GemLite-style: at M <= 4 fp32 sums of 32-wide K blocks, each rounded to fp16 and added in fp16; fp32 for
    larger M. `honest` declares exactly that; otherwise it claims fp32 for every M. API v2."""

    name = "conv_fp16_partials"
    family = "w4a16"
    api_version = 2
    intake = Intake(formats=("gptq_v2", "compressed_tensors"))

    def __init__(self, honest: bool):
        self.honest = honest

    def can_implement(self, config, target):
        if config.dtype != "float16" or config.act_order:
            return f"dtype={config.dtype!r}, act_order={config.act_order} not supported (allowed: float16, False)"
        return None

    def run_mode(self, target):
        return "device"

    def numerics(self, config, M=None):
        base = Numerics(dequant_dtype=torch.float16)
        if self.honest and M is not None and M <= SMALL_M:
            return base.replace(accumulation=(torch.float32, BLOCK, torch.float16), atomics=True)
        return base

    def load(self, checkpoint, ctx):
        return codecs.decode(checkpoint).dequantize(torch.float16).to(ctx.device)

    def apply(self, W, x, ctx):
        if x.shape[0] > SMALL_M:
            return (x.float() @ W.float()).half()
        acc = torch.zeros((x.shape[0], W.shape[1]), dtype=torch.float16, device=x.device)
        for k0 in range(0, x.shape[1], BLOCK):  # fp16 partial sums: one rounding per block
            acc = acc + (x[:, k0:k0 + BLOCK].float() @ W[k0:k0 + BLOCK].float()).half()
        return acc


def _run(kernel, case_id: str):
    from conformance.cases.ids import parse_case_id
    from conformance.checks.harness import run_case

    return run_case(parse_case_id(case_id), kernel, CPU, record=False)


# ------------------------------------------------------------------------------------------------------------
# FP8: divide vs reciprocal
# ------------------------------------------------------------------------------------------------------------

FP8_CASE = "fp8_group_quant/conv_fp8_reciprocal/T=4,H=256,g=128,dt=bf16,f8=e4m3fn,regime=normal,tier={tier},seed={seed}"
FP8_SEEDS = (3, 9)  # seeds whose scales (and for these, q bytes) differ between the two conventions


@pytest.mark.parametrize("seed", FP8_SEEDS)
def test_reciprocal_fp8_kernel_passes_only_under_its_declared_convention(seed):
    from conformance.families.fp8_inputs import fp8_activations

    x = fp8_activations(4, 256, "bfloat16", "normal", seed, 128, "float8_e4m3fn")
    qd, sd = fp8_group_quant_reference(x, 128, fp8_scale="divide")
    qr, sr = fp8_group_quant_reference(x, 128, fp8_scale="reciprocal")
    assert bool((sd != sr).any())  # the 1-ulp difference occurs on this case

    honest = _run(ReciprocalFp8("reciprocal"), FP8_CASE.format(tier="exact", seed=seed))
    assert honest.outcome == "pass", honest.line()
    wrong = _run(ReciprocalFp8("divide"), FP8_CASE.format(tier="exact", seed=seed))
    assert wrong.outcome == "fail" and wrong.metrics["scale_mismatches"] > 0, wrong.line()
    # the statistical tier tolerates the ulp either way: the convention is an exact-tier matter
    stat = _run(ReciprocalFp8("divide"), FP8_CASE.format(tier="statistical", seed=seed))
    assert stat.outcome == "pass", stat.line()


def test_fast_reciprocal_is_judged_statistically_only():
    exact = _run(ReciprocalFp8("fast_reciprocal"), FP8_CASE.format(tier="exact", seed=3))
    assert exact.outcome == "skip" and "fp8_scale='fast_reciprocal'" in exact.detail, exact.line()
    stat = _run(ReciprocalFp8("fast_reciprocal"), FP8_CASE.format(tier="statistical", seed=3))
    assert stat.outcome == "pass", stat.line()


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _round_f32(r: Fraction) -> int:
    """Bits of the fp32 nearest the rational r > 0 (ties to even), by search over fp32 bit patterns."""
    lo = _f32_bits(float(r))  # a double rounding of r: the answer is this pattern or a neighbour
    cands = [lo - 1, lo, lo + 1]
    vals = [Fraction(struct.unpack("<f", struct.pack("<I", b))[0]) for b in cands]
    best = min(abs(v - r) for v in vals)
    return min((b for b, v in zip(cands, vals) if abs(v - r) == best), key=lambda b: b & 1)


def test_reciprocal_constant_is_the_correctly_rounded_fp32_inverse():
    for m in (448.0, 224.0, 240.0):
        assert int(fp32_reciprocal(m).view(torch.int32)) == _round_f32(1 / Fraction(m))
    assert int(fp32_reciprocal(448.0).view(torch.int32)) == 0x3B124925  # hand-checked: 1/448 in fp32


def test_reference_scales_follow_each_convention_by_hand():
    # amax 3: 3/448 rounds to 0x3bdb6db7; 3 * fp32(1/448) rounds to 0x3bdb6db8 (one ulp up)
    x = torch.zeros(1, 128, dtype=torch.float32)
    x[0, 5] = 3.0
    for conv, want in (("divide", 0x3BDB6DB7), ("reciprocal", 0x3BDB6DB8)):
        _, s = fp8_group_quant_reference(x, 128, fp8_scale=conv)
        assert int(s.view(torch.int32)[0, 0]) == want, conv
    assert _round_f32(Fraction(3, 448)) == 0x3BDB6DB7
    inv = Fraction(struct.unpack("<f", struct.pack("<I", 0x3B124925))[0])
    assert _round_f32(3 * inv) == 0x3BDB6DB8


@pytest.mark.parametrize("conv", ["divide", "reciprocal"])
def test_reference_matches_numpy_float32(conv):
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(16, 512, generator=gen) * 3).to(torch.bfloat16)
    q, s = fp8_group_quant_reference(x, 128, fp8_scale=conv)
    xg = x.float().numpy().reshape(16, 4, 128)
    amax = np.maximum(np.abs(xg).max(-1), np.float32(1e-10))
    s_np = amax / np.float32(448.0) if conv == "divide" else amax * np.float32(1.0 / 448.0)
    assert s_np.dtype == np.float32 and np.array_equal(s.numpy().view(np.int32), s_np.view(np.int32))
    q_np = np.clip(xg / s_np[..., None], np.float32(-448), np.float32(448)).reshape(16, 512)
    assert torch.equal(torch.from_numpy(q_np).to(torch.float8_e4m3fn).view(torch.uint8), q.view(torch.uint8))


# ------------------------------------------------------------------------------------------------------------
# W4A16: fp16 partial sums at small M
# ------------------------------------------------------------------------------------------------------------

W4_CASE = ("w4a16/conv_fp16_partials/M={M},N=16,K=512,g=128,wt=uint4,dt=fp16,fmt=gptq_v2,regime={regime},"
           "tier={tier},seed=5")


def test_fp16_partials_pass_when_declared_per_m_and_fail_when_claiming_fp32():
    exact = W4_CASE.format(M=2, regime="exact", tier="exact")
    honest = _run(Fp16PartialsW4A16(honest=True), exact)
    assert honest.outcome == "pass" and honest.metrics.get("exact_judged_statistically"), honest.line()
    wrong = _run(Fp16PartialsW4A16(honest=False), exact)
    assert wrong.outcome == "fail" and wrong.metrics["mismatches"] > 0, wrong.line()
    # above M = 4 it really sums in fp32: the exact tier is bit-exact for both declarations
    for honest_flag in (True, False):
        big = _run(Fp16PartialsW4A16(honest=honest_flag), W4_CASE.format(M=5, regime="exact", tier="exact"))
        assert big.outcome == "pass" and big.detail == "bit-exact", big.line()
    # statistical tier: the declared blocked model holds (fp32's bound cannot separate 32-wide fp16 partials at
    # CI sizes, docs/tolerance.md 2.4: the exact tier above is what catches the false claim)
    ok = _run(Fp16PartialsW4A16(honest=True), W4_CASE.format(M=2, regime="normal", tier="statistical"))
    assert ok.outcome == "pass", ok.line()


def test_intake_narrows_the_formats_a_loader_is_fed():
    k = Fp16PartialsW4A16(honest=True)
    cfg = W4A16Config("uint4", 128, False, "float16", "awq", N=16, K=256)
    assert "not in the kernel's intake" in k.can_implement(cfg, CPU)
    v = _run(k, W4_CASE.format(M=2, regime="normal", tier="statistical").replace("gptq_v2", "awq"))
    assert v.outcome == "skip" and "intake" in v.detail, v.line()
    only = Intake(tensors=("qweight", "scales"))
    ckpt = codecs.encode(random_canonical(256, 16, 128, "uint4b8", torch.float16, "normal", 1), "gptq_v2")
    assert set(only.restrict(ckpt).tensors) == {"qweight", "scales"} <= set(ckpt.tensors)


def test_atomics_withdraw_the_determinism_claim():
    from conformance.checks.execution import Execution

    class Flaky(Fp16PartialsW4A16):
        calls = 0

        def apply(self, W, x, ctx):
            Flaky.calls += 1
            return torch.full((x.shape[0], W.shape[1]), float(Flaky.calls), dtype=torch.float16)

    k, W, x = Flaky(honest=True), torch.zeros(64, 8), torch.zeros(2, 64)
    cfg = W4A16Config("uint4", 32, False, "float16", N=8, K=64)
    ex = Execution(k, "device", target=CPU)
    first = ex.call(W, x)
    assert ex.determinism(W, x, first, cfg, 2) == (True, "")  # atomics at M = 2: not claimed, not checked
    assert ex.determinism(W, x, first, cfg, 8)[0] is False  # fp32 at M = 8: claimed, and broken


# ------------------------------------------------------------------------------------------------------------
# two-rounding dequant
# ------------------------------------------------------------------------------------------------------------

@functools.cache
def _round_table(dtype) -> tuple:
    """(sorted finite values as floats, {value: bit pattern}) of a 16-bit float dtype (-0.0 left out)."""
    bits = torch.arange(-(2 ** 15), 2 ** 15, dtype=torch.int32).to(torch.int16)
    vals = bits.view(dtype).double()
    keep = torch.isfinite(vals) & ~((vals == 0) & (bits < 0))
    pattern = {float(v): int(b) & 0xFFFF for v, b in zip(vals[keep].tolist(), bits[keep].tolist())}
    return sorted(pattern), pattern


def _round_to(dtype, r: Fraction) -> Fraction:
    """The dtype value nearest the rational r, ties to the even bit pattern (round-to-nearest-even)."""
    values, pattern = _round_table(dtype)
    i = bisect.bisect_left(values, float(r))
    cands = [Fraction(values[j]) for j in range(max(i - 2, 0), min(i + 2, len(values)))]
    best = min(abs(v - r) for v in cands)
    return min((v for v in cands if abs(v - r) == best), key=lambda v: pattern[float(v)] & 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_two_rounding_dequant_matches_a_rational_computation(dtype):
    w = random_canonical(64, 8, 32, "uint4", dtype, "normal", 2)
    got = w.dequantize_rounded(dtype, 2)
    one = w.dequantize_rounded(dtype, 1)
    g = w.group_of_row()
    z, s = w.zero_points()[g], w.scales[g]
    for k in range(0, 64, 3):
        for n in range(8):
            sv = Fraction(float(s[k, n]))
            c = _round_to(dtype, -int(z[k, n]) * sv)  # round(-z*s) to the dtype
            want = _round_to(dtype, int(w.q[k, n]) * sv + c)  # fma: exact q*s + c, rounded once
            assert Fraction(float(got[k, n])) == want, (k, n)
    assert not torch.equal(got, one)  # the conventions differ on realistic data


def test_two_rounding_dequant_by_hand():
    # s = fp16(0.1) = 0.0999755859375, q = 14, z = 15. One rounding: (14 - 15) * s = -s exactly. Two: -15 * s =
    # -1.4996337890625 rounds to -1.5 (fp16 spacing 2^-10 there), then 14 * s - 1.5 = -0.100341796875 is an fp16
    # value (1644 * 2^-14): 7.5 ulp of |W| away, which is why the bound charges u_deq on |z * s|, not on |W|
    from references.weight import CanonicalWeight

    s16 = torch.full((1, 8), 0.1, dtype=torch.float16)
    w = CanonicalWeight(torch.full((8, 8), 14, dtype=torch.int32), s16, torch.full((1, 8), 15, dtype=torch.int32),
                        None, -1, "uint4")
    assert float(s16[0, 0]) == 0.0999755859375
    assert float(w.dequantize_rounded(torch.float16, 1)[0, 0]) == -0.0999755859375
    assert float(w.dequantize_rounded(torch.float16, 2)[0, 0]) == -0.100341796875
    assert set(DEQUANT_CONVENTIONS) == {1, 2}


def test_two_roundings_charge_a_second_dequant_term():
    from conformance.checks.tolerance import ErrorModel

    y, S, R = torch.ones(2, 3), torch.full((2, 3), 100.0, dtype=torch.float64), torch.full((2, 3), 4.0,
                                                                                            dtype=torch.float64)
    Sz, Rz = S * 3, R * 3
    one = ErrorModel(torch.float16, torch.float16, torch.float32).tolerance(y, S, 64, R)
    two = ErrorModel(torch.float16, torch.float16, torch.float32, dequant_roundings=2)
    u = 2.0 ** -11
    assert torch.allclose(two.tolerance(y, S, 64, R, zs=(Sz, Rz)) - one, torch.minimum(Sz, 8 * Rz) * u)
    assert torch.allclose(two.tolerance(y, S, 64, R) - one, torch.minimum(S, 8 * R) * u)  # u_deq twice


# ------------------------------------------------------------------------------------------------------------
# declarations: loud errors, v1 unchanged
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("fp8_scale", "multiply"), ("dequant_roundings", 3),
                                          ("dequant_roundings", True), ("atomics", "yes")])
def test_bad_declaration_is_one_line_naming_field_value_and_allowed(field, value):
    with pytest.raises(ValueError) as e:
        Numerics(**{field: value})
    msg = str(e.value)
    assert "\n" not in msg and f"Numerics.{field}={value!r}" in msg and "allowed" in msg


def test_bad_api_version_and_intake_are_refused_at_class_creation():
    with pytest.raises(ValueError, match="api_version=3"):
        type("V3", (Kernel,), {"api_version": 3, "can_implement": lambda self, c, t: None})
    with pytest.raises(ValueError, match="Intake.formats"):
        type("BadIntake", (Kernel,), {"intake": ("gptq_v3",), "can_implement": lambda self, c, t: None})


def test_v1_kernel_is_called_as_before():
    from conformance.api import kernel_call, kernel_load

    class V1(Kernel):
        name, family = "conv_v1", "w4a16"
        gate_summary = "v1 note"

        def can_implement(self, config, target):
            return None

        def load(self, source, config=None):
            return ("loaded", source, config)

        def apply(self, operands, x):
            return ("applied", operands, x)

    k = V1()
    assert k.api_version == 1 and k.gate_note == "v1 note" and k.intake == Intake()
    assert kernel_load(k, "ckpt") == ("loaded", "ckpt", None)
    assert kernel_load(k, "ckpt", None, "cfg") == ("loaded", "ckpt", "cfg")
    assert kernel_call(k, "ops", "x") == ("applied", "ops", "x")
    assert k.numerics(None) == Numerics()  # new fields default: divide, one rounding, no atomics
