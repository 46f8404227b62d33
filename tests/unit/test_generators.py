"""Generators: determinism, what each regime promises, and the exact tier's claim checked by arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from references import generators as gen
from references.errors import InvalidInput
from references.generators import (
    DATA_REGIMES,
    EXACT_SCALE_EXPONENTS,
    EXACT_X_MAX,
    EXACT_Y_LIMIT,
    act_order_permutation,
    exact_tier_max_k,
    random_activations,
    random_canonical,
)
from references.scalar_types import scalar_type

WTYPES = ["uint4", "uint4b8", "uint8", "uint8b128"]


def _bits(t):
    if t is None:
        return None
    return t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t


@pytest.mark.parametrize("regime", DATA_REGIMES)
def test_same_seed_same_bits(regime):
    for ao in (False, True):
        a = random_canonical(64, 16, 16, "uint4", torch.bfloat16, regime, seed=5, act_order=ao)
        b = random_canonical(64, 16, 16, "uint4", torch.bfloat16, regime, seed=5, act_order=ao)
        for f in ("q", "scales", "zeros", "g_idx"):
            x, y = _bits(getattr(a, f)), _bits(getattr(b, f))
            assert (x is None and y is None) or torch.equal(x, y), f
    xa = random_activations(4, 64, torch.float16, regime, seed=5)
    assert torch.equal(_bits(xa), _bits(random_activations(4, 64, torch.float16, regime, seed=5)))
    # a different seed draws different data, and the global RNG is not touched
    state = torch.random.get_rng_state()
    c = random_canonical(64, 16, 16, "uint4", torch.bfloat16, regime, seed=6)
    assert torch.equal(state, torch.random.get_rng_state())
    assert not torch.equal(_bits(a.scales), _bits(c.scales)) or not torch.equal(a.q, c.q)
    assert not torch.equal(_bits(xa), _bits(random_activations(4, 64, torch.float16, regime, seed=6)))


def test_act_order_permutation_matches_upstream_construction():
    g = torch.Generator().manual_seed(1)
    g_idx, perm = act_order_permutation(48, 16, g)
    assert g_idx.dtype == torch.int32 and sorted(perm.tolist()) == list(range(48))
    # upstream: g_idx[i] = i // gs, then g_idx = g_idx[perm]
    upstream = torch.tensor([i // 16 for i in range(48)], dtype=torch.int32)[perm]
    assert torch.equal(g_idx, upstream)
    assert torch.bincount(g_idx.long()).tolist() == [16, 16, 16]
    assert not torch.equal(perm, torch.arange(48))


def test_act_order_weight_is_row_permuted_plain_weight():
    plain = random_canonical(64, 8, 16, "uint4", torch.float16, "normal", seed=9)
    ao = random_canonical(64, 8, 16, "uint4", torch.float16, "normal", seed=9, act_order=True)
    W, Wao = plain.dequantize(), ao.dequantize()
    # every permuted row is a plain row, and its g_idx is that row's group
    idx = [int(torch.nonzero((W == Wao[i]).all(1)).flatten()[0]) for i in range(64)]
    assert sorted(idx) == list(range(64))
    assert [i // 16 for i in idx] == ao.g_idx.tolist()


# ---- the exact tier -------------------------------------------------------------------------------

def _p(dtype):
    return {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24}[dtype]


def _exact_in(v: np.ndarray, p: int) -> bool:
    """Every value of v (fp64) has a significand of at most p bits."""
    m, _ = np.frexp(v)
    return bool(np.all(np.ldexp(m, p) == np.round(np.ldexp(m, p))))


def _fp32_sum_orders(prod: np.ndarray, rng: np.random.Generator):
    """Yield fp32 sums of prod (1-D) in sequential, reversed, shuffled and split-K-atomic orders."""
    f = prod.astype(np.float32)
    assert np.array_equal(f.astype(np.float64), prod)  # every product exact in fp32

    def seq(a):
        acc = np.float32(0)
        for v in a:
            acc = np.float32(acc + v)
        return acc
    yield seq(f)
    yield seq(f[::-1])
    yield seq(f[rng.permutation(len(f))])
    for splits in (2, 5):  # split-K: partial sums per slice, then fp32 atomics in a random order
        parts = [seq(c) for c in np.array_split(f[rng.permutation(len(f))], splits)]
        yield seq(np.array(parts, dtype=np.float32)[rng.permutation(splits)])


@pytest.mark.parametrize("wtype", WTYPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_tier_data_is_exact(wtype, dtype):
    K = min(exact_tier_max_k(wtype), 2048)
    w = random_canonical(K, 8, 64, wtype, dtype, "exact", seed=2, act_order=True)
    x = random_activations(2, K, dtype, "exact", seed=2)
    xs = x.double().numpy()
    assert np.all(xs == np.round(xs)) and np.abs(xs).max() <= EXACT_X_MAX
    e = np.log2(w.scales.double().numpy())
    lo, hi = EXACT_SCALE_EXPONENTS[scalar_type(wtype).size_bits]
    assert np.all(e == np.round(e)) and e.min() >= lo and e.max() <= hi
    # every nibble/byte value occurs (the point of the tier: catch packing bugs)
    assert torch.unique(w.q).numel() == scalar_type(wtype).max + 1
    W = w.dequantize().numpy()
    # W exact in fp16 and bf16; so are q*s and z*s (kernels that fold the zero point into the scale)
    s = w.scales.double()[w.group_of_row()].numpy()
    z = w.zero_points().double()[w.group_of_row()].numpy()
    for p in (11, 8):
        assert _exact_in(W, p) and _exact_in(w.q.double().numpy() * s, p) and _exact_in(z * s, p)
    rng = np.random.default_rng(0)
    y64 = xs @ W
    assert np.abs(y64).max() <= EXACT_Y_LIMIT
    for m in range(2):
        for n in range(8):
            prod = xs[m] * W[:, n]
            for acc in _fp32_sum_orders(prod, rng):
                assert float(acc) == y64[m, n]


def _worst_case_products(K: int, wtype: str, unit_last: bool) -> np.ndarray:
    """K products of the largest magnitude the tier allows; unit_last replaces the last by the smallest unit,
    the hardest case for fp32 (big partial sum, then one unit that must not be lost)."""
    t = scalar_type(wtype)
    D = max(t.max - t.bias, t.bias) if t.has_bias() else t.max
    lo, hi = EXACT_SCALE_EXPONENTS[t.size_bits]
    prod = np.full(K, float(EXACT_X_MAX * D) * 2.0 ** hi)
    if unit_last:
        prod[-1] = 2.0 ** lo  # x = 1, q - z = 1, smallest scale
    return prod


def _fp32_seq(prod):
    acc = np.float32(0)
    for v in prod.astype(np.float32):
        acc = np.float32(acc + v)
    return float(acc)


@pytest.mark.parametrize("wtype", WTYPES)
def test_exact_tier_bound_is_sharp(wtype):
    """At K = exact_tier_max_k the worst cases are exact in fp32 and |y| <= EXACT_Y_LIMIT; at K + 1 the
    largest allowed data passes the limit."""
    kmax = exact_tier_max_k(wtype)
    assert kmax >= 4096  # the tier must cover the shapes the suite draws
    big = _worst_case_products(kmax, wtype, unit_last=False)
    assert _fp32_seq(big) == big.sum() and big.sum() <= EXACT_Y_LIMIT
    mixed = _worst_case_products(kmax, wtype, unit_last=True)
    assert _fp32_seq(mixed) == mixed.sum()
    assert _worst_case_products(kmax + 1, wtype, unit_last=False).sum() > EXACT_Y_LIMIT
    # far past the bound the fp32 claim fails too: the test can tell exact from inexact
    far = _worst_case_products(64 * kmax, wtype, unit_last=True)
    assert _fp32_seq(far) != far.sum()


def test_exact_tier_max_k_values_and_accumulators():
    # the arithmetic written out: A=4; 4-bit e in [-7,-4], 8-bit e in [-10,-8]; Y_LIMIT=2^14
    assert exact_tier_max_k("uint4") == min(2**24 // (4 * 15 * 8), int(2**14 // (4 * 15 * 2**-4)))
    assert exact_tier_max_k("uint4b8") == 8192
    assert exact_tier_max_k("uint8") == 4112
    assert exact_tier_max_k("uint8b128") == 8192
    # an fp16 accumulator cannot run the exact tier at any useful K: say so rather than pretend
    assert exact_tier_max_k("uint4b8", torch.float16) < 16
    with pytest.raises(InvalidInput) as e:
        exact_tier_max_k("uint4", torch.int32)
    assert e.value.field == "acc_dtype"


def test_exact_regime_refuses_k_beyond_bound():
    with pytest.raises(InvalidInput) as e:
        random_canonical(8192 + 64, 8, 64, "uint4", torch.float16, "exact", seed=0)
    assert e.value.field == "K" and "8256" in str(e.value) and "4369" in str(e.value)


# ---- the realistic regimes ------------------------------------------------------------------------

@pytest.mark.parametrize("regime", DATA_REGIMES)
@pytest.mark.parametrize("wtype", WTYPES)
def test_regimes_are_finite_and_fit_fp16(regime, wtype):
    K = 256
    w = random_canonical(K, 16, 32, wtype, torch.float16, regime, seed=4)
    x = random_activations(8, K, torch.float16, regime, seed=4)
    W = w.dequantize()
    assert torch.isfinite(W).all() and torch.isfinite(x).all()
    S = x.double().abs() @ W.abs()
    assert S.max() < 65504 / 4  # y cannot overflow fp16 even in the worst sign pattern


def test_outlier_channels():
    x = random_activations(16, 256, torch.float16, "outlier_channels", seed=3)
    cols = gen.outlier_channels(256, seed=3)
    assert len(cols) == 4
    big = x[:, cols].double().abs().mean()
    rest = np.delete(x.double().abs().numpy(), cols.numpy(), axis=1).mean()
    assert 30 < big / rest < 300


def test_all_zero_groups():
    w = random_canonical(128, 32, 32, "uint4", torch.float16, "all_zero_groups", seed=8)
    blocks = w.dequantize().reshape(4, 32, 32).eq(0).all(dim=1)  # [G, N]: whole group exactly zero
    assert 0.1 < blocks.float().mean() < 0.4
    plain = random_canonical(128, 32, 32, "uint4", torch.float16, "normal", seed=8)
    assert not plain.dequantize().reshape(4, 32, 32).eq(0).all(dim=1).any()


def test_heavy_tailed_has_heavier_tails():
    x = random_activations(64, 256, torch.float16, "heavy_tailed", seed=1).double()
    n = random_activations(64, 256, torch.float16, "normal", seed=1).double()

    def kurt(t):
        t = t - t.mean()
        return float((t**4).mean() / (t**2).mean() ** 2)
    assert kurt(n) < 3.5 and kurt(x) > 6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_extreme_scales(dtype):
    w = random_canonical(512, 64, 32, "uint4", dtype, "extreme_scales", seed=2)
    s = w.scales.double()
    fi = torch.finfo(dtype)
    assert s.min() >= fi.smallest_normal  # normal range only
    assert s.max() / s.min() > 2.0**10  # truly spread
    # |x| <= 1 in this regime, so sum_k |W| bounds |y|
    x = random_activations(8, 512, dtype, "extreme_scales", seed=2)
    assert x.abs().max() <= 1
    # bf16's trap columns (tests/unit/test_trap_data.py) lie outside fp16's range on purpose; the rest keep the bound
    trap = (s > 65504).all(0) | (s < 2.0**-25).all(0)
    assert int(trap.sum()) == (2 if dtype == torch.bfloat16 else 0)
    assert w.dequantize().abs().sum(0)[~trap].max() <= gen.EXTREME_Y_LIMIT


@pytest.mark.parametrize("kwargs,field", [
    (dict(regime="uniform"), "regime"),
    (dict(N=12), "N"),
    (dict(K=48), "K"),
    (dict(act_dtype=torch.float64), "act_dtype"),
    (dict(seed=-1), "seed"),
    (dict(group_size=0), "group_size"),
])
def test_bad_generator_input(kwargs, field):
    args = dict(K=64, N=16, group_size=32, wtype="uint4", act_dtype=torch.float16, regime="normal", seed=0)
    args.update(kwargs)
    with pytest.raises(InvalidInput) as e:
        random_canonical(**args)
    assert e.value.field == field and repr(kwargs[next(iter(kwargs))]) in str(e.value)
    with pytest.raises(InvalidInput):
        random_activations(2, 64, torch.float16, "uniform", 0)
