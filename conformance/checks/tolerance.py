"""The statistical-tier error model and the exact-tier bit comparison.

Per element:  tol = u_out*|y| + c*sqrt(K)*u_acc*S + u_deq*min(S, c*R),
S = |x| @ |W| and R = sqrt(x^2 @ W^2) (fp64), u = unit roundoff of a dtype (fp16 2^-11, bf16 2^-8,
fp32 2^-24). Error ratio = |y_kernel - y| / tol; a verdict fails when the max ratio exceeds 1.
Without R (tolerance(..., R=None)) the dequant term is DESIGN.md's u_deq*S.

Why these terms: u_out*|y| is the final cast of the output; u_deq*S bounds the dequantization of each
weight into the kernel's dequant dtype (one rounding of (q - z)*s, relative <= u_deq, times |x_k|, summed);
products of fp16/bf16 operands are exact in fp32, so the rest is the accumulation: Higham & Mary's
probabilistic bound (SIAM J. Sci. Comput. 2019, inner products) says a sum of K terms with independent
mean-zero rounding errors has |err| <= lambda*sqrt(K)*u_acc*S (to first order) with probability
>= 1 - 2*K*exp(-lambda^2*(1-u)^2/2); the factor K is a union bound over the K partial sums.

Why min(S, c*R) for the dequant term (a sharpening of DESIGN.md's u_deq*S): each weight's dequant
rounding d_k (|d_k| <= u_deq) is fixed, but every data regime draws x sign-symmetric, so
sum_k x_k W_k d_k is a sum of random-sign terms bounded by c*u_deq*R with the same probability as
below (Hoeffding); u_deq*S is the worst case and stays as the cap. With u_deq*S alone an fp16
accumulator is only ~1.5-2x over the bound at K=4096 (the two terms are the same size), which is too
thin to be a guarantee; with the sharpened term it is ~5x over, while correct kernels' per-case max ratio
measures median ~0.27, max 0.90 over 14700 W4A16 cases (benchmarks/results/calibration.json).

Why C_ACC = 8: per element the failure probability is below 2*K*exp(-32) ~ 2.5e-14*K (1e-10 at
K=4096; an earlier version of this note dropped the K), so over ~1e9 checked elements of a nightly run
the union bound allows at most ~0.1 expected false failures at K=4096 and far fewer in CI (K <= 512,
~1e6 elements). The bound is loose (union bound, worst-case magnitudes): a sequential fp32 sum of
normal fp16 products used at most 1.7% (K=512) and 0.6% (K=4096) of the c=8 allowance over 2000 dot
products each (numpy, measured when this note was corrected); correct kernels' max ratios near 0.9
(calibration) can come from the deterministic output-rounding term alone (u_out*|y| is exactly half
an ulp at the bottom of a binade). The term stays a rounding-level quantity.
Blocked, split-K and tree summation only lower the error, so the bound holds for
them too. It cannot mask an fp16 accumulator: such a kernel's error is a random walk of K roundings of
the running sum, about 2^-11 * S / 2 for normal data, while the accumulation allowance is
8*sqrt(K)*2^-24*S = 3e-5*S at K=4096 (16x smaller than 2^-11*S) and the dequant allowance is
8*2^-11*R ~ 2^-11*S/5: a K=4096 fp16-accumulated dot product lands ~5x over the bound
(tests/unit/test_tolerance.py measures it). Limit: a tiled kernel that rounds its accumulator to fp16
only once per 32-wide K tile makes 32x fewer roundings and sits near the bound; that bug needs
the exact tier (partial sums above 2^11 units) to be caught reliably.

Blocked accumulation (Kernel.numerics(config, M).accumulation = (inner, B, outer), B < K): blocks of B
consecutive K-terms are summed in `inner`, and the P = ceil(K/B) block partials p_j are each rounded to `outer`
and added in `outer` in any order (split-K partials added by atomics, e.g. rdna3_w4a16: fp32 splits of 256
summed in fp16/bf16).
Charging that kernel c*sqrt(K)*u_outer*S (as if every one of K terms were added in `outer`) is ~100x loose: a
truly narrow-accumulating kernel would pass. The accumulation term is instead
    c*sqrt(B)*u_inner*S + c*u_outer*sqrt(sum_j p_j^2 + sum_{j=2..P} T_j^2):
- inner: Higham & Mary per block gives c*sqrt(B)*u_inner*S_j with S_j = the block's share of S; sum_j S_j = S.
- outer: the rounding of partial p_j costs delta_j*p_j, the j-th addition delta'_j*s_j where s_j is the running
  sum of j partials (s_1 = 0 + p_1 is exact: P-1 roundings), all |delta| <= u_outer. Under the same model as
  above (independent mean-zero roundings; the data fixes the magnitudes) Hoeffding bounds the 2P-1 terms by
  c*u_outer*sqrt(sum of squared magnitudes), the same c and failure probability for the same reason.
  The atomic order is unknown, so |s_j| is bounded over every order: T_j = min(the larger of the sums of the j
  largest positive / j largest negative partials, |y| + T_{P-j}) (the full sum is y in every order). This needs
  the exact block partials (fp64, from x and W: `partials`); without them (a kernel that permutes K, e.g.
  act-order), each |p_j|, |s_j| <= min(S, c*R) -- every partial or prefix of a data-independent order is a
  random-sign sum with l2 scale <= R (the dequant term's argument) -- giving c*sqrt(2P-1)*u_outer*min(S, c*R).
Why not just sqrt(P)*u_outer*S: the partials are random-sign sums of size ~R (S/R ~ 0.64*sqrt(K) on normal data),
so an S-scaled outer term is still ~20x loose at K=4096 and passes a kernel that adds all K terms in fp16.
Measured (tests/unit/test_tolerance.py; benchmarks/results/calibration_rdna3.json, rdna3_w4a16's model through
the harness): the correct split-K kernel's per-case max ratio has median ~0.11 (was 0.003 under the sqrt(K)
act-dtype charge), max 0.74 (K <= 256, one split: the fp32 model); a truly fp16-accumulating variant lands at
~1.1-2x the bound. The two differ by only ~sqrt(B/2) ~ 11x in error, so that catch is thin: it misses small
M*N cases, and act-order cases (no partials: the min(S, c*R) fallback) are not caught at all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

C_ACC = 8.0

UNIT_ROUNDOFF = {
    torch.float16: 2.0 ** -11,
    torch.bfloat16: 2.0 ** -8,
    torch.float32: 2.0 ** -24,
    torch.float64: 2.0 ** -53,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = 2^-p for a dtype with p significand bits (fp16 2^-11, bf16 2^-8, fp32 2^-24)."""
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"dtype={dtype} has no unit roundoff here; allowed: {list(UNIT_ROUNDOFF)}") from None


@dataclass(frozen=True)
class ErrorModel:
    """The dtypes a kernel declares: u_out from the output dtype, u_deq and u_acc from the kernel."""

    out_dtype: torch.dtype
    dequant_dtype: torch.dtype
    accumulate_dtype: torch.dtype  # the inner (per-block) accumulator
    c: float = C_ACC
    block: int | None = None  # K-terms per inner block; None: one block spans K
    outer_dtype: torch.dtype | None = None  # the dtype block partials are rounded to and added in

    def blocked(self, K: int) -> bool:
        """True when K spans more than one block: the outer roundings are charged separately."""
        return self.block is not None and K > self.block

    def tolerance(self, y_ref: torch.Tensor, S: torch.Tensor, K: int, R: torch.Tensor | None = None,
                  partials: torch.Tensor | None = None) -> torch.Tensor:
        """Per-element bound (fp64) for reference y_ref, S = |x| @ |W|, optionally R = sqrt(x^2 @ W^2) and the
        exact block partials [P, M, N] (`block_partials`; used only when `blocked(K)`)."""
        deq = S if R is None else torch.minimum(S, self.c * R)
        if not self.blocked(K):
            acc = self.c * math.sqrt(K) * unit_roundoff(self.accumulate_dtype) * S
        else:
            acc = (self.c * math.sqrt(self.block) * unit_roundoff(self.accumulate_dtype) * S
                   + self.c * unit_roundoff(self.outer_dtype) * self._outer_magnitude(y_ref, S, K, R, partials))
        return unit_roundoff(self.out_dtype) * y_ref.abs() + acc + unit_roundoff(self.dequant_dtype) * deq

    def _outer_magnitude(self, y_ref, S, K, R, partials) -> torch.Tensor:
        """sqrt of the summed squared magnitudes of the 2P-1 outer roundings, bounded over every summation order."""
        P = math.ceil(K / self.block)
        if partials is None:
            mag = S if R is None else torch.minimum(S, self.c * R)
            return math.sqrt(2 * P - 1) * mag
        if partials.shape[0] != P:
            raise ValueError(f"partials.shape[0]={partials.shape[0]}; "
                             f"allowed: P = ceil(K={K}/block={self.block}) = {P}")
        # T[j] bounds |sum of any j partials|; T[0] = 0
        desc = partials.sort(dim=0, descending=True).values
        top = torch.maximum(desc.clamp(min=0).cumsum(0), (-desc.flip(0)).clamp(min=0).cumsum(0))
        T = torch.cat([torch.zeros_like(top[:1]), top])
        # any j of the P partials sum to y minus the other P - j: |s_j| <= |y| + T[P-j]
        bridge = torch.minimum(T[1:], y_ref.abs()[None] + T.flip(0)[1:])
        return ((partials ** 2).sum(0) + (bridge[1:] ** 2).sum(0)).sqrt()


def block_partials(x: torch.Tensor, W: torch.Tensor, block: int) -> torch.Tensor:
    """The exact (fp64) partials of x @ W over consecutive K blocks of `block` rows: [ceil(K/block), M, N]."""
    x64, w64 = x.double(), W.double()
    return torch.stack([x64[:, k0:k0 + block] @ w64[k0:k0 + block] for k0 in range(0, x.shape[1], block)])


def error_model_for(kernel, config, out_dtype: torch.dtype, M: int | None = None) -> ErrorModel:
    """The model from the kernel's declared numerics for this config and M (Kernel.numerics: dtypes, blocks)."""
    num = kernel.numerics(config, M)
    inner, block, outer = num.accumulation
    return ErrorModel(out_dtype, num.dequant_dtype or out_dtype, inner, block=block, outer_dtype=outer)


@dataclass
class Comparison:
    """Outcome of comparing a kernel output to the reference: `ok`, metrics (plain floats/ints) and a detail line."""

    ok: bool
    metrics: dict
    detail: str


def _index(flat: int, shape) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))]


def nonfinite_problem(y: torch.Tensor, expected: torch.Tensor) -> str | None:
    """A detail line when y has NaN/inf where `expected` (same dtype) does not agree, else None."""
    y64, e64 = y.double(), expected.double()
    bad = ~torch.isfinite(y64) & ~((y64 == e64) & torch.isinf(e64))
    bad |= torch.isinf(e64) & (y64 != e64)
    if not bool(bad.any()):
        return None
    flat = int(bad.flatten().nonzero()[0])
    idx = _index(flat, y.shape)
    return (f"{int(bad.sum())} non-finite or overflow mismatches; first at {idx}: "
            f"got {float(y64.flatten()[flat])}, expected {float(e64.flatten()[flat])}")


def l2_bound(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """R = sqrt(x^2 @ W^2) in fp64 [M, N]: the scale of sign-symmetric per-term errors."""
    x64, w64 = x.double(), W.double()
    return ((x64 * x64) @ (w64 * w64)).sqrt()


def compare_statistical(y: torch.Tensor, y_ref: torch.Tensor, S: torch.Tensor, model: ErrorModel, K: int,
                        R: torch.Tensor | None = None, xw: tuple | None = None) -> Comparison:
    """Error ratio |y - y_ref| / tol per element; ok iff every ratio <= 1 and no unexpected NaN/inf.

    xw = (x, W) in the kernel's K order lets a blocked model use the exact block partials; leave it None when
    the kernel permutes K (act-order): the model then falls back to the min(S, c*R) magnitude bound.

    Metrics: max_ratio, p99_ratio, nmse (sum err^2 / sum y_ref^2), max_abs_err, worst_index, mean_ratio.
    """
    expected = y_ref.to(y.dtype)
    bad = nonfinite_problem(y, expected)
    finite = torch.isfinite(expected.double())
    err = (y.double() - y_ref).abs().where(finite, torch.zeros((), dtype=torch.float64))
    partials = block_partials(*xw, model.block) if xw is not None and model.blocked(K) else None
    tol = model.tolerance(y_ref, S, K, R, partials)
    # tol == 0 only where S == 0 (all-zero rows/columns): then y must be exactly 0
    ratio = torch.where(tol > 0, err / tol.clamp(min=torch.finfo(torch.float64).tiny),
                        torch.where(err > 0, torch.full_like(err, math.inf), torch.zeros_like(err)))
    flat = int(ratio.flatten().argmax()) if ratio.numel() else 0
    denom = float((y_ref.where(finite, torch.zeros((), dtype=torch.float64)) ** 2).sum())
    metrics = {
        "max_ratio": float(ratio.max()) if ratio.numel() else 0.0,
        "mean_ratio": float(ratio.mean()) if ratio.numel() else 0.0,
        # the bulk of the distribution, for error profiles: drift shows here before the max moves
        "p99_ratio": float(ratio.flatten().kthvalue(max(1, math.ceil(0.99 * ratio.numel())))[0])
        if ratio.numel() else 0.0,
        "nmse": float((err ** 2).sum()) / denom if denom > 0 else float((err ** 2).sum()),
        "max_abs_err": float(err.max()) if err.numel() else 0.0,
        "worst_index": _index(flat, y.shape) if ratio.numel() else [],
    }
    if bad is not None:
        return Comparison(False, metrics, bad)
    ok = metrics["max_ratio"] <= 1.0
    w = metrics["worst_index"]
    detail = (f"max |err|/tol = {metrics['max_ratio']:.3g} at {w} (got {float(y.double().flatten()[flat]):.6g}, "
              f"ref {float(y_ref.flatten()[flat]):.6g}, tol {float(tol.flatten()[flat]):.3g}); "
              f"nmse {metrics['nmse']:.3g}")
    return Comparison(ok, metrics, detail)


def compare_exact(y: torch.Tensor, expected: torch.Tensor) -> Comparison:
    """Bit equality of y and `expected` (same dtype); the detail is assert_close(rtol=0, atol=0)'s message."""
    if y.dtype != expected.dtype or y.shape != expected.shape:
        return Comparison(False, {"mismatches": -1},
                          f"dtype/shape mismatch: got {y.dtype}{tuple(y.shape)}, expected {expected.dtype}"
                          f"{tuple(expected.shape)}")
    same = _bits(y) == _bits(expected)
    n_bad = int((~same).sum())
    metrics = {"mismatches": n_bad, "elements": y.numel()}
    if n_bad == 0:
        return Comparison(True, metrics, "bit-exact")
    flat = int((~same).flatten().nonzero()[0])
    metrics["worst_index"] = _index(flat, y.shape)
    diff = (y.double() - expected.double()).abs()
    metrics["max_abs_err"] = float(diff[torch.isfinite(diff)].max()) if bool(torch.isfinite(diff).any()) else math.inf
    try:
        torch.testing.assert_close(y, expected, rtol=0, atol=0, equal_nan=False)
        msg = "bit patterns differ (e.g. -0.0 vs 0.0 or NaN payloads)"
    except AssertionError as e:
        msg = " ".join(str(e).split())
    return Comparison(False, metrics, f"{n_bad}/{y.numel()} elements differ, first at {metrics['worst_index']}: {msg}")


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().reshape(-1).view(view).reshape(t.shape)
