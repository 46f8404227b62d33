"""The statistical-tier error model and the exact-tier bit comparison (derivation: docs/tolerance.md).

Per element:  tol = u_out*|y| + c*sqrt(K)*u_acc*S + u_deq*min(S, c*R),
S = |x| @ |W| and R = sqrt(x^2 @ W^2) (fp64), c = C_ACC, u = unit roundoff of a dtype (fp16 2^-11, bf16 2^-8,
fp32 2^-24): u_out of the output dtype, u_deq and u_acc of the kernel's declared dequant and accumulate dtypes.
Without R (tolerance(..., R=None)) the dequant term is u_deq*S. Error ratio = |y_kernel - y| / tol; a verdict
fails when the max ratio exceeds 1 or the output has NaN/inf the reference does not.

NaN and Inf are failures in both tiers (conformance.core.bits.nonfinite_problem: one rule for every family)
unless the reference holds the identical value at that index; the detail names the count and the first index.

Blocked accumulation (Kernel.numerics(config, M).accumulation = (inner, B, outer), B < K: blocks of B K-terms
summed in `inner`, the P = ceil(K/B) partials rounded to `outer` and added in `outer` in any order): the
accumulation term becomes c*sqrt(B)*u_inner*S + c*u_outer*sqrt(sum_j p_j^2 + sum_{j=2..P} T_j^2), T_j bounding
any running sum of j partials over every order; without the exact partials (a kernel that permutes K) it is
c*sqrt(2P-1)*u_outer*min(S, c*R).

Two dequant roundings (Numerics.dequant_roundings = 2, GemLite's fma(q, s, round(-z*s))): the pre-rounded -z*s
errs by up to u_deq*|z*s|, which is not bounded by |W|, so a second dequant term u_deq*min(S_z, c*R_z) is
charged, S_z = |x| @ |z*s| and R_z = sqrt(x^2 @ (z*s)^2) (without them: S and R, i.e. u_deq charged twice).
The float zero of torch's int4pack GEMMs (Numerics.float_zero_dtype, W = fma(q - 8, s, z_f)) pre-rounds z_f =
(8 - z)*s in its own storage dtype: that term is charged at u of float_zero_dtype (ErrorModel.zero_dtype) with
S_z, R_z of (8 - z)*s, the fused rounding at u_deq as before.

compare_exact: bit equality of the kernel output and the reference cast once to the output dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from conformance.core.bits import nonfinite_problem

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
    dequant_roundings: int = 1  # 2: -z*s rounded before the fma, charged as a second dequant term
    zero_dtype: torch.dtype | None = None  # the dtype the pre-rounded zero term is held in; None: dequant_dtype

    def blocked(self, K: int) -> bool:
        """True when K spans more than one block: the outer roundings are charged separately."""
        return self.block is not None and K > self.block

    def tolerance(self, y_ref: torch.Tensor, S: torch.Tensor, K: int, R: torch.Tensor | None = None,
                  partials: torch.Tensor | None = None, zs: tuple | None = None) -> torch.Tensor:
        """Per-element bound (fp64) for reference y_ref, S = |x| @ |W|, optionally R = sqrt(x^2 @ W^2), the
        exact block partials [P, M, N] (`block_partials`; used only when `blocked(K)`) and zs = (S_z, R_z) of the
        pre-rounded zero term (used only with dequant_roundings = 2; default (S, R))."""
        deq = S if R is None else torch.minimum(S, self.c * R)
        zero = 0.0
        if self.dequant_roundings == 2:
            Sz, Rz = (S, R) if zs is None else zs
            zero = unit_roundoff(self.zero_dtype or self.dequant_dtype) * (
                Sz if Rz is None else torch.minimum(Sz, self.c * Rz))
        if not self.blocked(K):
            acc = self.c * math.sqrt(K) * unit_roundoff(self.accumulate_dtype) * S
        else:
            acc = (self.c * math.sqrt(self.block) * unit_roundoff(self.accumulate_dtype) * S
                   + self.c * unit_roundoff(self.outer_dtype) * self._outer_magnitude(y_ref, S, K, R, partials))
        return unit_roundoff(self.out_dtype) * y_ref.abs() + acc + unit_roundoff(self.dequant_dtype) * deq + zero

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
    return ErrorModel(out_dtype, num.dequant_dtype or out_dtype, inner, block=block, outer_dtype=outer,
                      dequant_roundings=num.dequant_roundings, zero_dtype=num.float_zero_dtype)


@dataclass
class Comparison:
    """Outcome of comparing a kernel output to the reference: `ok`, metrics (plain floats/ints) and a detail line."""

    ok: bool
    metrics: dict
    detail: str


def _index(flat: int, shape) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))]


def l2_bound(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """R = sqrt(x^2 @ W^2) in fp64 [M, N]: the scale of sign-symmetric per-term errors."""
    x64, w64 = x.double(), W.double()
    return ((x64 * x64) @ (w64 * w64)).sqrt()


def compare_statistical(y: torch.Tensor, y_ref: torch.Tensor, S: torch.Tensor, model: ErrorModel, K: int,
                        R: torch.Tensor | None = None, xw: tuple | None = None, zs: tuple | None = None) -> Comparison:
    """Error ratio |y - y_ref| / tol per element; ok iff every ratio <= 1 and no unexpected NaN/inf.

    xw = (x, W) in the kernel's K order lets a blocked model use the exact block partials; leave it None when
    the kernel permutes K (act-order): the model then falls back to the min(S, c*R) magnitude bound.
    zs = (S_z, R_z): the magnitude of the pre-rounded zero term for a two-rounding dequant (`ErrorModel.tolerance`).

    Metrics: max_ratio, p99_ratio, nmse (sum err^2 / sum y_ref^2), max_abs_err, worst_index, mean_ratio.
    """
    expected = y_ref.to(y.dtype)
    bad = nonfinite_problem(y, expected)
    finite = torch.isfinite(expected.double())
    err = (y.double() - y_ref).abs().where(finite, 0.0)
    partials = block_partials(*xw, model.block) if xw is not None and model.blocked(K) else None
    tol = model.tolerance(y_ref, S, K, R, partials, zs)
    # tol == 0 only where S == 0 (all-zero rows/columns): then y must be exactly 0
    ratio = torch.where(tol > 0, err / tol.clamp(min=torch.finfo(torch.float64).tiny),
                        torch.where(err > 0, torch.full_like(err, math.inf), torch.zeros_like(err)))
    flat = int(ratio.flatten().argmax()) if ratio.numel() else 0
    denom = float((y_ref.where(finite, 0.0) ** 2).sum())
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
    """Bit equality of y and `expected` (same dtype); the detail is nonfinite_problem's line when y has NaN/Inf the
    reference does not hold, else assert_close(rtol=0, atol=0)'s message."""
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
    nonfinite = nonfinite_problem(y, expected)
    if nonfinite is not None:  # the NaN/Inf rule's detail comes first: it names what no tier may let through
        return Comparison(False, metrics, nonfinite)
    try:
        torch.testing.assert_close(y, expected, rtol=0, atol=0, equal_nan=False)
        msg = "bit patterns differ (e.g. -0.0 vs 0.0 or NaN payloads)"
    except AssertionError as e:
        msg = " ".join(str(e).split())
    return Comparison(False, metrics, f"{n_bad}/{y.numel()} elements differ, first at {metrics['worst_index']}: {msg}")


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().reshape(-1).view(view).reshape(t.shape)
