"""The exact_wide regime: block partials too wide for fp16, every partial sum exact in fp32, the output the fp64
reference rounded once; correct kernels stay bit-exact on it, a kernel that rounds 32-wide block partials to fp16
while declaring fp32 fails it, and a declared narrower accumulator is judged by its error model there."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.cases.ids import Case, parse_case_id
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.targets import CPU, parse_target
from conformance.families import get_family
from conformance.families.w4a16 import _w4a16_table, exact_limit_reason
from references.errors import InvalidInput
from references.generators import (
    EXACT_WIDE_BLOCK,
    EXACT_WIDE_X_MAX,
    EXACT_Y_LIMIT,
    exact_tier_max_k,
    random_activations,
    random_canonical,
)

registry.load_all()
FAM = get_family("w4a16")
WTYPES = ("uint4", "uint4b8", "uint8", "uint8b128")


@pytest.fixture
def broken_accumulation():
    """broken_fp16_partials registered for one test (another module's teardown may have unregistered it)."""
    import tests.unit.broken_accumulation as ba

    ba.register()
    yield ba
    ba.unregister()


def test_exact_tier_max_k_per_regime():
    # exact_wide: A = 64, D = min(largest |q - z|, 15), scales 2^e0 or 2^(e0+1): units <= K*A*D*2 <= 2^p
    assert {w: exact_tier_max_k(w, regime="exact_wide") for w in WTYPES} == {
        "uint4": 2**24 // (64 * 15 * 2), "uint4b8": 2**24 // (64 * 8 * 2), "uint8": 2**24 // (64 * 15 * 2),
        "uint8b128": 2**24 // (64 * 15 * 2)}
    assert min(exact_tier_max_k(w, regime="exact_wide") for w in WTYPES) >= 8192  # the plan's large-K rows
    assert exact_tier_max_k("uint4", torch.float16, "exact_wide") == 1  # no fp16 accumulator holds it
    assert exact_tier_max_k("uint4") == 4369  # the exact regime is unchanged
    with pytest.raises(InvalidInput) as e:
        exact_tier_max_k("uint4", regime="normal")
    assert e.value.field == "regime"
    with pytest.raises(InvalidInput) as e:
        random_canonical(8738 + 2, 8, 2, "uint4", torch.float16, "exact_wide", 0)
    assert e.value.field == "K" and "8738" in str(e.value)


def _units(w, x):
    """(x, W) in fp64 and every column's unit: its smallest scale (every product is an integer multiple of it)."""
    return x.double(), w.dequantize(), w.scales.double().amin(0)


@pytest.mark.parametrize("wtype", WTYPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_wide_data_is_exact_in_fp32_and_too_wide_for_fp16(wtype, dtype):
    K = 2048 if wtype != "uint4b8" else 4096
    for g, ao in ((128, True), (-1, False)):
        w = random_canonical(K, 16, g, wtype, dtype, "exact_wide", seed=3, act_order=ao)
        x = random_activations(4, K, dtype, "exact_wide", seed=3)
        xd, W, unit = _units(w, x)
        # x: integers, |x| in [1, 64], sign alternating per 32-wide block (and per row)
        assert torch.equal(xd, xd.round()) and xd.abs().min() >= 1 and xd.abs().max() <= EXACT_WIDE_X_MAX
        blocks = torch.sign(xd[:, ::EXACT_WIDE_BLOCK])
        assert torch.equal(blocks[:, 1:], -blocks[:, :-1])
        assert torch.equal(torch.sign(xd), blocks.repeat_interleave(EXACT_WIDE_BLOCK, 1)[:, :K])
        # W: exact in fp16 and bf16, one sign per column, column bound A * sum|W| <= EXACT_Y_LIMIT
        assert torch.equal(W.half().double(), W) and torch.equal(W.bfloat16().double(), W)
        assert bool(((W >= 0).all(0) | (W <= 0).all(0)).all())
        assert float((EXACT_WIDE_X_MAX * W.abs().sum(0)).max()) <= EXACT_Y_LIMIT
        # every product an integer number of units; the sum of their magnitudes (the bound on any partial sum, in
        # any order) below 2^24 units: every partial sum is exact in fp32
        terms = xd[:, :, None] * W[None] / unit  # [M, K, N]
        assert torch.equal(terms, terms.round())
        assert float(terms.abs().sum(1).max()) < 2**24
        acc = np.cumsum((xd[:, :, None] * W[None]).numpy().astype(np.float32), axis=1, dtype=np.float32)
        assert np.array_equal(acc.astype(np.float64), np.cumsum((xd[:, :, None] * W[None]).numpy(), axis=1))
        # 32-wide block partials (the kernel's K order) mostly NOT representable in fp16
        P = torch.stack([xd[:, k:k + 32] @ W[k:k + 32] for k in range(0, K, 32)])
        assert float((P.half().double() != P).double().mean()) > 0.5, wtype
        assert float((P.abs() > EXACT_Y_LIMIT).double().mean()) == 0  # y cannot overflow fp16 either


def _cases(kernel: str, K: int, n: int) -> list:
    """n exact_wide exact-tier cases of `kernel` at K, cycling through the strategy classes its gate accepts
    there: N 16..64, M 1..9, seeds 0, 1, ..."""
    k = registry.get_kernel(kernel)
    table = [c for c, ks in _w4a16_table(FAM, kernel, CPU, "statistical", K, 64) if K in ks]
    out, seed = [], 0
    while len(out) < n:
        cls, N = table[seed % len(table)], 16 * (1 + seed % 4)
        cfg = FAM.config(cls, N, K)
        if k.can_implement(cfg, CPU) is None:
            out.append(Case(family="w4a16", kernel=kernel, regime="exact_wide", tier="exact", seed=seed,
                            M=1 + seed % 9, N=N, K=K, group_size=cfg.group_size, weight_type=cls.weight_type,
                            act_order=cls.act_order, dtype=cls.dtype, format=cls.format))
        seed += 1
    return out


@pytest.mark.parametrize("K", [64, 512, 4096])
def test_fp16_block_partials_claiming_fp32_fail_exact_wide(K, broken_accumulation):
    vs = [run_case(c, target=CPU, check_determinism=False, record=False)
          for c in _cases("broken_fp16_partials", K, 6)]
    assert all(v.outcome == "fail" and v.metrics["mismatches"] > 0 for v in vs), [v.line() for v in vs]


@pytest.mark.parametrize("kernel, K, n", [("torch_dequant_w4a16", 64, 4), ("torch_dequant_w4a16", 8192, 2),
                                          ("triton_w4a16", 256, 3), ("triton_w4a16_actorder", 128, 2)])
def test_correct_kernels_are_bit_exact_on_exact_wide(kernel, K, n):
    for c in _cases(kernel, K, n):
        v = run_case(c, target=CPU, check_determinism=False, record=False)
        assert v.outcome == "pass" and v.detail.startswith("bit-exact"), v.line()


def test_declared_fp16_partials_are_judged_by_their_error_model():
    """rdna3_w4a16 declares (fp32, 256, act dtype): bit-exact up to one 256-row split, its blocked model beyond."""
    gfx = parse_target("gfx1100")
    num = registry.get_kernel("rdna3_w4a16").numerics(FAM.config(FAM.config_classes()[0], 64, 512), 3)
    assert exact_limit_reason(num, "uint4b8", 512, 3, "exact_wide").endswith("holds exact_wide sums only up to K=2")
    assert exact_limit_reason(num, "uint4b8", 256, 3, "exact_wide") is None
    cid = ("w4a16/rdna3_w4a16/M=3,N=64,K={K},g=128,wt=uint4b8,ao=0,dt=fp16,fmt=gptq_v1,regime=exact_wide,"
           "tier=exact,seed=4")
    small = run_case(parse_case_id(cid.format(K=256)), target=gfx, record=False)
    assert small.outcome == "pass" and small.detail.startswith("bit-exact"), small.line()
    big = run_case(parse_case_id(cid.format(K=512)), target=gfx, record=False)
    assert big.outcome == "pass" and big.metrics["exact_judged_statistically"], big.line()
    fp32 = registry.get_kernel("torch_dequant_w4a16").numerics(None, 3)
    assert exact_limit_reason(fp32, "uint4", 8192, 3, "exact_wide") is None


def test_the_exact_tier_draws_exact_wide():
    assert FAM.tier_regimes("exact") == ("exact", "exact_wide")
    assert not set(FAM.tier_regimes("statistical")) & {"exact", "exact_wide"}
    ok = parse_case_id("w4a16/triton_w4a16/M=3,N=16,K=64,g=32,wt=uint4,dt=fp16,fmt=gptq_v2,regime=exact_wide,"
                       "tier=exact,seed=1")
    assert ok.regime == "exact_wide"
    with pytest.raises(InvalidInput) as e:
        parse_case_id("w4a16/triton_w4a16/M=3,N=16,K=64,g=32,wt=uint4,dt=fp16,fmt=gptq_v2,regime=normal,"
                      "tier=exact,seed=1")
    assert e.value.field == "regime" and "exact_wide" in str(e.value)


def test_strategies_past_the_exact_regimes_bound_draw_exact_wide():
    """Beyond exact_tier_max_k(wt) for `exact` (4369 for uint4) only exact_wide holds: the draw keeps to it."""
    from hypothesis import find, settings
    from hypothesis import strategies as st

    class Prof:
        k_max, n_max, m_max = 8192, 16, 2

    k = registry.get_kernel("torch_dequant_w4a16")
    draw_case = st.composite(lambda draw: FAM.draw_case(draw, k, CPU, "exact", Prof))
    got = find(draw_case(), lambda d: d["K"] > 4369 and d["weight_type"] == "uint4",
               settings=settings(max_examples=500, database=None))
    assert got["regime"] == "exact_wide"
