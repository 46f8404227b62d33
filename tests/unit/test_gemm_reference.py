"""reference_gemm / abs_bound against numpy, with the weight dequantized a different way (loops over groups)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from references.errors import InvalidInput
from references.gemm import abs_bound, reference_gemm
from references.generators import random_activations, random_canonical


def numpy_dequant(w) -> np.ndarray:
    """W[k, n] = (q - z) * s, group by group: rows of group g are those with g_idx == g (or k // gs)."""
    q = w.q.numpy().astype(np.float64)
    s = w.scales.to(torch.float64).numpy()
    z = w.zeros.numpy().astype(np.float64) if w.zeros is not None else np.full(s.shape, float(w.wtype.bias))
    K, N = q.shape
    groups = w.g_idx.numpy() if w.g_idx is not None else np.arange(K) // w.gs
    W = np.empty((K, N))
    for g in range(s.shape[0]):
        rows = np.nonzero(groups == g)[0]
        assert len(rows) == w.gs
        W[rows, :] = (q[rows, :] - z[g][None, :]) * s[g][None, :]
    return W


CASES = [("uint4", 64, False), ("uint4b8", 32, True), ("uint8", -1, False), ("uint8b128", 16, True),
         ("uint4", 16, True)]


@pytest.mark.parametrize("wtype,gs,act_order", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_tier_equals_numpy_bit_for_bit(wtype, gs, act_order, dtype):
    # exact-tier data: every sum is exact, so any summation order gives the same fp64 bits
    w = random_canonical(128, 16, gs, wtype, dtype, "exact", seed=7, act_order=act_order)
    x = random_activations(5, 128, dtype, "exact", seed=7)
    W = numpy_dequant(w)
    xn = x.double().numpy()
    assert np.array_equal(reference_gemm(x, w).numpy(), xn @ W)
    assert np.array_equal(abs_bound(x, w).numpy(), np.abs(xn) @ np.abs(W))


@pytest.mark.parametrize("regime", ["normal", "heavy_tailed", "outlier_channels", "all_zero_groups",
                                    "extreme_scales"])
@pytest.mark.parametrize("act_order", [False, True])
def test_realistic_regimes_match_numpy(regime, act_order):
    w = random_canonical(64, 16, 16, "uint4", torch.float16, regime, seed=3, act_order=act_order)
    x = random_activations(3, 64, torch.float16, regime, seed=3)
    W = numpy_dequant(w)
    xn = x.double().numpy()
    y, S = reference_gemm(x, w), abs_bound(x, w)
    assert y.dtype == torch.float64 and S.dtype == torch.float64 and y.shape == (3, 16)
    # loop order differs from BLAS: compare against the scale of the sum, fp64 roundoff only
    S_np = np.abs(xn) @ np.abs(W)
    assert np.all(np.abs(y.numpy() - xn @ W) <= 1e-13 * S_np)
    assert np.allclose(S.numpy(), S_np, rtol=1e-13, atol=0)
    assert np.all(np.abs(y.numpy()) <= S.numpy() * (1 + 1e-13))


def test_act_order_reference_equals_unpermuted_with_permuted_x():
    # y = x @ W[perm] must equal x' @ W with x'[:, perm] = x
    plain = random_canonical(64, 8, 16, "uint4b8", torch.float16, "exact", seed=11)
    ao = random_canonical(64, 8, 16, "uint4b8", torch.float16, "exact", seed=11, act_order=True)
    x = random_activations(4, 64, torch.float16, "exact", seed=11)
    # recover the permutation from the rows: ao.q[i] == plain.q[p[i]]
    match = (ao.q[:, None, :] == plain.q[None, :, :]).all(-1) & (
        ao.g_idx.long()[:, None] == torch.arange(64)[None, :] // 16)
    perm = match.float().argmax(1)
    assert torch.equal(ao.q, plain.q[perm])
    x2 = torch.empty_like(x)
    x2[:, perm] = x
    assert torch.equal(reference_gemm(x, ao), reference_gemm(x2, plain))


def test_hand_computed_gemm():
    from references.weight import CanonicalWeight
    q = torch.full((2, 8), 8, dtype=torch.int32)
    q[:, 0] = torch.tensor([10, 5])
    w = CanonicalWeight(q=q, scales=torch.full((1, 8), 0.5, dtype=torch.float16), zeros=None, g_idx=None,
                        group_size=-1, wtype="uint4b8")
    x = torch.tensor([[1.0, 2.0], [-3.0, 0.5]], dtype=torch.float16)
    # W[:, 0] = [(10-8)*.5, (5-8)*.5] = [1, -1.5]: y = [1 - 3, -3 - .75], S = [1 + 3, 3 + .75]
    assert reference_gemm(x, w)[:, 0].tolist() == [-2.0, -3.75]
    assert abs_bound(x, w)[:, 0].tolist() == [4.0, 3.75]
    assert reference_gemm(x, w)[:, 1:].eq(0).all()


@pytest.mark.parametrize("x,field", [
    (torch.zeros(4, 8), "x.shape"),
    (torch.zeros(64), "x.shape"),
    (torch.zeros(2, 64, dtype=torch.int32), "x.dtype"),
])
def test_bad_x(x, field):
    w = random_canonical(64, 8, 16, "uint4", torch.float16, "normal", seed=0)
    for fn in (reference_gemm, abs_bound):
        with pytest.raises(InvalidInput) as e:
            fn(x, w)
        assert e.value.field == field
        assert (repr(tuple(x.shape)) if field == "x.shape" else repr(x.dtype)) in str(e.value)
