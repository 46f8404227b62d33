"""The canonical (logical) quantized weight: W[k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n]."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import require
from .scalar_types import ScalarType, scalar_type

ACT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# how a kernel forms W in its dequant dtype, by the number of roundings (Numerics.dequant_roundings)
DEQUANT_CONVENTIONS = {
    1: "(q - z) * s rounded once to the dequant dtype",
    2: "fma(q, s, round(-z * s)): -z*s rounded to the dequant dtype, then one fused multiply-add rounding (GemLite)",
}
# the float-zero form of two roundings (torch's int4pack GEMMs): fma(q - 8, s, z_f), z_f = round((8 - z) * s) in the
# dtype the kernel stores it in; 8 is the midpoint the kernels subtract from every 4-bit q
FLOAT_ZERO_OFFSET = 8


def effective_group_size(group_size: int, K: int) -> int:
    """group_size -1 (channelwise) means one group spanning K."""
    return K if group_size == -1 else group_size


@dataclass
class CanonicalWeight:
    """q [K, N] int32 in the type's stored range; zeros [G, N] int32 or None (biased types only);
    scales [G, N] in the activation dtype; g_idx [K] int32 or None (act-order); group_size -1 = K.

    Validated on construction; every codec encodes from and decodes to this.
    """

    q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    g_idx: torch.Tensor | None
    group_size: int
    wtype: ScalarType

    def __post_init__(self):
        self.wtype = scalar_type(self.wtype)
        q, s = self.q, self.scales
        require(isinstance(q, torch.Tensor) and q.dim() == 2, "q.shape",
                tuple(q.shape) if isinstance(q, torch.Tensor) else q, "a 2-D tensor [K, N]")
        require(q.dtype == torch.int32, "q.dtype", q.dtype, "torch.int32")
        K, N = q.shape
        require(N % 8 == 0 and N > 0, "N", N, "a positive multiple of 8")
        require(self.group_size == -1 or self.group_size > 0, "group_size", self.group_size,
                "-1 (channelwise) or a positive integer")
        gs = effective_group_size(self.group_size, K)
        require(K > 0 and K % gs == 0, "K", K, f"a positive multiple of group_size={self.group_size}")
        G = K // gs
        if q.numel():
            qmin, qmax = int(q.min()), int(q.max())
            require(qmin >= self.wtype.min and qmax <= self.wtype.max, "q values", (qmin, qmax),
                    f"{self.wtype.name} stored range [{self.wtype.min}, {self.wtype.max}]")
        require(s.dtype in ACT_DTYPES, "scales.dtype", s.dtype, f"one of {ACT_DTYPES}")
        require(tuple(s.shape) == (G, N), "scales.shape", tuple(s.shape), f"(G, N) = {(G, N)}")
        if self.wtype.has_bias():
            require(self.zeros is None, "zeros", "a tensor",
                    f"None for biased type {self.wtype.name} (zero point is the bias {self.wtype.bias})")
        else:
            require(self.zeros is not None, "zeros", None, f"an int32 [G, N] tensor for {self.wtype.name}")
            z = self.zeros
            require(z.dtype == torch.int32, "zeros.dtype", z.dtype, "torch.int32")
            require(tuple(z.shape) == (G, N), "zeros.shape", tuple(z.shape), f"(G, N) = {(G, N)}")
            zmin, zmax = int(z.min()), int(z.max())
            require(zmin >= self.wtype.min and zmax <= self.wtype.max, "zeros values", (zmin, zmax),
                    f"{self.wtype.name} stored range [{self.wtype.min}, {self.wtype.max}]")
        if self.g_idx is not None:
            g = self.g_idx
            require(g.dtype == torch.int32, "g_idx.dtype", g.dtype, "torch.int32")
            require(tuple(g.shape) == (K,), "g_idx.shape", tuple(g.shape), f"(K,) = {(K,)}")
            counts = torch.bincount(g.long().clamp(min=0), minlength=G)
            ok = int(g.min()) >= 0 and int(g.max()) < G and bool((counts == gs).all())
            require(ok, "g_idx", "inconsistent",
                    f"values in [0, {G}) with each group used exactly group_size={gs} times")

    @property
    def K(self) -> int:
        return self.q.shape[0]

    @property
    def N(self) -> int:
        return self.q.shape[1]

    @property
    def G(self) -> int:
        return self.scales.shape[0]

    @property
    def gs(self) -> int:
        """The effective group size (K for channelwise)."""
        return effective_group_size(self.group_size, self.K)

    @property
    def act_dtype(self) -> torch.dtype:
        return self.scales.dtype

    @property
    def act_order(self) -> bool:
        return self.g_idx is not None

    def group_of_row(self) -> torch.Tensor:
        """g(k) for every k: g_idx if act-order, else k // group_size (int64 [K])."""
        if self.g_idx is not None:
            return self.g_idx.long()
        return torch.arange(self.K, device=self.q.device) // self.gs

    def zero_points(self) -> torch.Tensor:
        """The zero point of every (group, column) as int32 [G, N]: explicit zeros or the type's bias."""
        if self.zeros is not None:
            return self.zeros
        return torch.full((self.G, self.N), self.wtype.bias, dtype=torch.int32, device=self.scales.device)

    def dequantize(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The logical weight W [K, N], computed in float64 and returned in `dtype`."""
        g = self.group_of_row()
        z = self.zero_points().to(torch.float64)[g]
        s = self.scales.to(torch.float64)[g]
        return ((self.q.to(torch.float64) - z) * s).to(dtype)

    def dequantize_rounded(self, dtype: torch.dtype, roundings: int = 1,
                           float_zero_dtype: torch.dtype | None = None) -> torch.Tensor:
        """W [K, N] as a kernel forms it in `dtype` under DEQUANT_CONVENTIONS[roundings] (1 or 2), exactly rounded.
        float_zero_dtype (roundings 2 only): the float-zero form fma(q - 8, s, z_f), z_f = (8 - z) * s rounded to
        float_zero_dtype first (FLOAT_ZERO_OFFSET).

        Every intermediate is exact in fp64 (a short integer times an act-dtype scale, and their sum), so the one
        cast to `dtype` is the convention's single rounding."""
        require(roundings in DEQUANT_CONVENTIONS, "roundings", roundings, f"one of {list(DEQUANT_CONVENTIONS)}")
        require(float_zero_dtype is None or roundings == 2, "roundings", roundings,
                "2 when float_zero_dtype is given (the zero term is rounded before the fused sum)")
        if roundings == 1:
            return self.dequantize(torch.float64).to(dtype)
        g = self.group_of_row()
        s = self.scales.to(torch.float64)
        offset = 0 if float_zero_dtype is None else FLOAT_ZERO_OFFSET
        zero_dtype = dtype if float_zero_dtype is None else float_zero_dtype
        zs = self.zero_term(float_zero_dtype is not None).to(zero_dtype).to(torch.float64)  # the first rounding
        return ((self.q.to(torch.float64) - offset) * s[g] + zs[g]).to(dtype)  # fma: one rounding of the exact sum

    def to(self, device) -> CanonicalWeight:
        """The same weight with every tensor on `device` (validated again there)."""
        def move(t):
            return None if t is None else t.to(device)
        return CanonicalWeight(move(self.q), move(self.scales), move(self.zeros), move(self.g_idx), self.group_size,
                               self.wtype)

    def zero_term(self, float_zero: bool = False) -> torch.Tensor:
        """The exact zero term a two-rounding dequant rounds first, fp64 [G, N]: -z * s (GemLite's fma(q, s, -z*s)),
        or with float_zero (8 - z) * s, torch int4pack's z_f in W = (q - 8) * s + z_f."""
        offset = FLOAT_ZERO_OFFSET if float_zero else 0
        return (offset - self.zero_points().to(torch.float64)) * self.scales.to(torch.float64)

    def equal(self, other: CanonicalWeight) -> bool:
        """Bit-exact equality of every field (scales compared by bits: -0.0 != 0.0, equal NaNs match)."""
        def same(a, b):
            if a is None or b is None:
                return a is None and b is None
            if a.dtype != b.dtype or a.shape != b.shape:
                return False
            if a.is_floating_point():  # torch.equal compares values: -0.0 == 0.0 and NaN != NaN
                bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
                a, b = a.contiguous().view(bits), b.contiguous().view(bits)
            return torch.equal(a, b)
        return (self.wtype == other.wtype and self.group_size == other.group_size
                and same(self.q, other.q) and same(self.zeros, other.zeros)
                and same(self.g_idx, other.g_idx) and same(self.scales, other.scales))
