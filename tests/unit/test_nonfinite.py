"""NaN and Inf are failures in every tier (W4A16 exact, statistical, exact judged statistically; FP8 exact and
statistical) unless the reference holds the identical value there; the detail names the count and first index."""
from __future__ import annotations

import pytest
import torch

from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.checks.tolerance import ErrorModel, compare_exact, compare_statistical
from conformance.core import registry
from conformance.core.bits import nonfinite_problem
from conformance.core.targets import CPU

registry.load_all()
W4 = type(registry.get_kernel("torch_dequant_w4a16"))
FP8 = type(registry.get_kernel("fp8_group_quant_native"))
W4_CASE = "w4a16/{k}/M={M},N=16,K=128,g=64,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime={r},tier={t},seed=3"
FP8_CASE = "fp8_group_quant/{k}/T=4,H=256,g=128,dt=bf16,f8=e4m3fn,regime={r},tier={t},seed=2"
W4_TIERS = (("exact", "exact", 3), ("exact_wide", "exact", 3), ("normal", "statistical", 3),
            ("exact", "exact", 2))  # M=2 of the last: the fp16-partials declaration, judged statistically


def _poison(y: torch.Tensor, value: float, at=(2, 5)) -> torch.Tensor:
    y = y.clone()
    y[at] = value
    return y


class W4Poisoned(W4):
    """A correct W4A16 kernel whose output gets one NaN/Inf (VALUE) at [1, 9]; at M <= 2 it declares fp16 block
    partials, so its exact-tier cases there are judged by the declared error model."""

    name = "test_w4_nonfinite"
    value = float("nan")

    def numerics(self, config, M=None):
        num = super().numerics(config, M)
        return num.replace(accumulation=(torch.float32, 32, torch.float16)) if M is not None and M <= 2 else num

    def apply(self, w, x):
        return _poison(super().apply(w, x), self.value, (1, 9))


class W4Inf(W4Poisoned):
    name = "test_w4_inf"
    value = float("-inf")


class Fp8Poisoned(FP8):
    """A correct FP8 kernel whose output gets a NaN q byte (`what` = "q") or an inf scale ("scales") at [3, 1]."""

    name = "test_fp8_nan_q"
    what = "q"

    def apply(self, params, x):
        q, s = super().apply(params, x)
        if self.what == "q":
            q = q.clone()
            q.view(torch.uint8)[3, 130] = 0x7F  # e4m3fn NaN
        else:
            s = s.clone()
            s[3, 1] = float("inf")
        return q, s


class Fp8InfScale(Fp8Poisoned):
    name = "test_fp8_inf_scale"
    what = "scales"


@pytest.fixture
def kernels(monkeypatch):
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: None)
    ks = [W4Poisoned(), W4Inf(), Fp8Poisoned(), Fp8InfScale()]
    for k in ks:
        registry.register_kernel(k)
    yield
    for k in ks:
        registry.unregister_kernel(k.name)


@pytest.mark.parametrize("regime, tier, M", W4_TIERS)
@pytest.mark.parametrize("kernel, shown", [("test_w4_nonfinite", "nan"), ("test_w4_inf", "-inf")])
def test_w4a16_every_tier_fails_a_nan_or_inf(kernels, regime, tier, M, kernel, shown):
    v = run_case(parse_case_id(W4_CASE.format(k=kernel, M=M, r=regime, t=tier)), target=CPU, record=False)
    assert v.outcome == "fail", v.line()
    assert f"1 NaN/Inf outputs, first at [1, 9]: {shown}" in v.detail, v.line()
    if M == 2:  # the exact tier's declared-error-model path was the one taken
        assert v.metrics.get("exact_judged_statistically"), v.line()


@pytest.mark.parametrize("tier", ["exact", "statistical"])
@pytest.mark.parametrize("kernel, detail", [("test_fp8_nan_q", "q: 1 NaN/Inf outputs, first at [3, 130]: nan"),
                                            ("test_fp8_inf_scale", "scales: 1 NaN/Inf outputs, first at [3, 1]: inf")])
def test_fp8_both_tiers_fail_a_nan_or_inf(kernels, tier, kernel, detail):
    for regime in ("normal", "saturation"):
        v = run_case(parse_case_id(FP8_CASE.format(k=kernel, r=regime, t=tier)), target=CPU, record=False)
        assert v.outcome == "fail" and v.detail == detail, v.line()


def test_the_unpoisoned_kernels_pass(kernels):
    """The same kernels without the injected value pass: the failures above are the NaN/Inf rule's."""
    v = run_case(parse_case_id(W4_CASE.format(k="torch_dequant_w4a16", M=3, r="normal", t="statistical")),
                 target=CPU, record=False)
    assert v.outcome == "pass", v.line()
    v = run_case(parse_case_id(FP8_CASE.format(k="fp8_group_quant_native", r="normal", t="statistical")),
                 target=CPU, record=False)
    assert v.outcome == "pass", v.line()


# ---- the comparisons themselves --------------------------------------------------------------------------------

MODEL = ErrorModel(torch.float16, torch.float16, torch.float32)


def _data():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 64, generator=g, dtype=torch.float64).half()
    W = (torch.randn(64, 16, generator=g, dtype=torch.float64) * 0.05).half()
    y = x.double() @ W.double()
    return y, (x.double().abs() @ W.double().abs())


@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_compare_statistical_fails_nonfinite_even_under_a_huge_bound(value, shown):
    y, S = _data()
    loose = ErrorModel(torch.float16, torch.float16, torch.float16, c=1e30)  # tolerance far above any value
    got = _poison(y.half(), value)
    for model in (MODEL, loose):
        c = compare_statistical(got, y, S, model, 64)
        assert not c.ok and c.detail == f"1 NaN/Inf outputs, first at [2, 5]: {shown}", c.detail
    assert compare_statistical(y.half(), y, S, loose, 64).ok


def test_compare_exact_names_count_and_first_index():
    y = torch.arange(12, dtype=torch.float32).reshape(3, 4).half()
    got = y.clone()
    got[0, 3], got[2, 0], got[2, 1] = float("nan"), float("inf"), float("nan")
    c = compare_exact(got, y)
    assert not c.ok and c.detail == "3 NaN/Inf outputs, first at [0, 3]: nan", c.detail
    assert c.metrics["mismatches"] == 3


def test_identical_nonfinite_reference_values_are_allowed():
    """An output that overflows in the reference too (inf == inf) is not a NaN/Inf failure; a finite value where
    the reference overflows is one."""
    ref = torch.tensor([[1.0, float("inf")], [float("-inf"), 2.0]], dtype=torch.float16)
    assert compare_exact(ref.clone(), ref).ok
    assert nonfinite_problem(ref.clone(), ref) is None
    both_nan = torch.tensor([float("nan")])
    assert nonfinite_problem(both_nan, both_nan.clone()) is None
    wrong_sign = ref.clone()
    wrong_sign[0, 1] = float("-inf")
    assert nonfinite_problem(wrong_sign, ref) == "1 NaN/Inf outputs, first at [0, 1]: -inf"
    finite = ref.clone()
    finite[1, 0] = 65504.0
    assert nonfinite_problem(finite, ref) == ("1 finite outputs where the reference is NaN/Inf, first at [1, 0]: "
                                              "65504.0 (reference -inf)")
    y, S = _data()
    y_inf = y.clone()
    y_inf[0, 0] = float("inf")  # the reference itself overflows there; the kernel agrees
    got = y_inf.half()
    c = compare_statistical(got, y_inf, S, MODEL, 64)
    assert "NaN/Inf" not in c.detail, c.detail
