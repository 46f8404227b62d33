"""The tolerance model: fp32-accumulated results pass, wrong results and fp16 accumulation fail."""
import math

import torch

from conformance.tolerance import (ErrorModel, compare_exact, compare_statistical, l2_bound, unit_roundoff)


def _data(M, K, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).half()
    W = (torch.randn(K, N, generator=g) * 0.05).half()
    x64, W64 = x.double(), W.double()
    return x, W, x64 @ W64, x64.abs() @ W64.abs(), l2_bound(x, W)


MODEL = ErrorModel(torch.float16, torch.float16, torch.float32)


def test_unit_roundoffs():
    assert unit_roundoff(torch.float16) == 2.0 ** -11
    assert unit_roundoff(torch.bfloat16) == 2.0 ** -8
    assert unit_roundoff(torch.float32) == 2.0 ** -24


def test_fp32_accumulated_result_passes():
    x, W, y, S, R = _data(8, 1024, 64)
    y_k = (x.float() @ W.float()).half()
    c = compare_statistical(y_k, y, S, MODEL, 1024, R)
    assert c.ok, c.detail
    assert c.metrics["max_ratio"] < 0.5  # margin: a correct kernel is far from the bound


def test_wrong_result_fails_with_worst_index():
    x, W, y, S, R = _data(4, 256, 32)
    y_k = (x.float() @ W.float()).half()
    y_k[2, 7] += 0.05
    c = compare_statistical(y_k, y, S, MODEL, 256, R)
    assert not c.ok and c.metrics["worst_index"] == [2, 7]


def test_nan_output_fails():
    x, W, y, S, R = _data(4, 256, 32)
    y_k = (x.float() @ W.float()).half()
    y_k[1, 1] = float("nan")
    c = compare_statistical(y_k, y, S, MODEL, 256, R)
    assert not c.ok and "non-finite" in c.detail


def test_fp16_accumulated_sum_over_k4096_fails():
    """A kernel that accumulates in fp16 while declaring fp32 must fail at realistic K."""
    K = 4096
    x, W, y, S, R = _data(2, K, 64, seed=1)
    acc = torch.zeros(2, 64, dtype=torch.float16)
    for k in range(K):  # sequential fp16 accumulator: every partial sum rounded to fp16
        acc = (acc.float() + x[:, k:k + 1].float() * W[k].float()).half()
    c = compare_statistical(acc, y, S, MODEL, K, R)
    assert not c.ok
    assert c.metrics["max_ratio"] > 2, c.metrics  # a clear failure, not a coin flip


def test_design_bound_without_R_is_looser():
    x, W, y, S, R = _data(2, 512, 16)
    assert bool((MODEL.tolerance(y, S, 512) >= MODEL.tolerance(y, S, 512, R)).all())
    assert math.isclose(float(MODEL.tolerance(y, S, 512)[0, 0]),
                        2 ** -11 * abs(float(y[0, 0])) + 8 * math.sqrt(512) * 2 ** -24 * float(S[0, 0])
                        + 2 ** -11 * float(S[0, 0]))


def test_exact_compare_reports_assert_close_message():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    assert compare_exact(a, a.clone()).ok
    b = a.clone()
    b[1, 0] = 3.001953125  # one fp16 ulp above 3
    c = compare_exact(b, a)
    assert not c.ok and c.metrics["mismatches"] == 1 and c.metrics["worst_index"] == [1, 0]
    assert "Mismatched elements: 1 / 4" in c.detail
    neg0 = torch.tensor([-0.0], dtype=torch.float16)
    assert not compare_exact(neg0, torch.tensor([0.0], dtype=torch.float16)).ok  # bits, not values
