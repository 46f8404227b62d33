"""Seeded data for cases: canonical weights and activations per data regime (same seed -> same bits).

Every draw goes through a torch.Generator seeded from (seed, stream), never the global RNG.

The "exact" regime is the exact tier: x are integers in [-EXACT_X_MAX, EXACT_X_MAX], scales are powers of
two 2^e with e in a narrow band, and q - z spans the type's full stored range (every nibble value occurs).
Then every W is (small integer) * 2^e, exact in fp16 and bf16; every product x*W and every partial sum, in
any order (split-K atomics included), is an integer multiple of 2^e_min of magnitude <= K*A*D*2^(e_max-e_min)
units, exact in fp32 while that is <= 2^24; and |y| <= K*A*D*2^e_max <= EXACT_Y_LIMIT. exact_tier_max_k()
returns the largest K for which all of that holds.
"""
from __future__ import annotations

import torch

from .errors import require
from .quantize import rtn_quantize
from .scalar_types import ScalarType, scalar_type
from .weight import ACT_DTYPES, CanonicalWeight, effective_group_size

DATA_REGIMES = ("exact", "normal", "heavy_tailed", "outlier_channels", "all_zero_groups", "extreme_scales")

EXACT_X_MAX = 4  # exact-tier activations are integers in [-4, 4]
EXACT_Y_LIMIT = 2.0 ** 14  # |y| bound of the exact tier: a quarter of fp16's max (65504)
# scale exponent band [e_min, e_max] of the exact tier, per weight bit width
EXACT_SCALE_EXPONENTS = {4: (-7, -4), 8: (-10, -8)}

WEIGHT_STD = 0.05  # realistic regimes: weights ~ N(0, 0.05^2) before quantization (LLM-like magnitude)
OUTLIER_FACTOR = 100.0  # outlier_channels: these input channels carry 100x activations
HEAVY_TAIL_DOF = 3  # heavy_tailed: Student-t with 3 degrees of freedom
ZERO_GROUP_FRACTION = 0.25  # all_zero_groups: share of (group, column) blocks whose weights are exactly 0
EXTREME_Y_LIMIT = 2.0 ** 14  # extreme_scales: bound on sum_k |x||W| with |x| <= 1, so y fits fp16

_STREAMS = {"weight": 1, "activation": 2, "act_order": 3, "outlier": 4}


def generator(seed: int, stream: str) -> torch.Generator:
    """A CPU generator for one named stream of one seed (weights and activations never share draws)."""
    require(isinstance(seed, int) and seed >= 0, "seed", seed, "a non-negative int")
    return torch.Generator().manual_seed((seed * 1_000_003 + _STREAMS[stream]) % (1 << 63))


def _max_abs_value(wtype: ScalarType) -> int:
    """D: the largest |q - z| the exact tier draws (z free in the stored range for unbiased types)."""
    return max(wtype.max - wtype.bias, wtype.bias) if wtype.has_bias() else wtype.max


def exact_tier_max_k(wtype: ScalarType | str, acc_dtype: torch.dtype = torch.float32) -> int:
    """Largest K for which the exact tier's claims hold with an accumulator of `acc_dtype`.

    Partial sums are multiples of 2^e_min bounded by K*A*D*2^(e_max-e_min) units: exact while that is
    <= 2^p (p = significand bits of acc_dtype, 24 for fp32); and |y| <= K*A*D*2^e_max <= EXACT_Y_LIMIT.
    """
    wtype = scalar_type(wtype)
    p = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}.get(acc_dtype)
    require(p is not None, "acc_dtype", acc_dtype, "float16, bfloat16, float32 or float64")
    e_min, e_max = EXACT_SCALE_EXPONENTS[wtype.size_bits]
    unit_max = EXACT_X_MAX * _max_abs_value(wtype)
    k_acc = (1 << p) // (unit_max << (e_max - e_min))
    k_out = int(EXACT_Y_LIMIT // (unit_max * 2.0 ** e_max))
    return min(k_acc, k_out)


def act_order_permutation(K: int, group_size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(g_idx int32 [K], perm int64 [K]) as upstream tests draw them: g_idx[i] = perm[i] // gs.

    Applying `perm` to the rows of q (q[perm]) and of the reference weight keeps W = dequant(q) consistent.
    """
    gs = effective_group_size(group_size, K)
    require(K > 0 and K % gs == 0, "K", K, f"a positive multiple of group_size={group_size}")
    perm = torch.randperm(K, generator=gen)
    g_idx = (torch.arange(K) // gs)[perm].to(torch.int32).contiguous()
    return g_idx, perm


def _permute(w: CanonicalWeight, gen: torch.Generator) -> CanonicalWeight:
    g_idx, perm = act_order_permutation(w.K, w.group_size, gen)
    return CanonicalWeight(q=w.q[perm].contiguous(), scales=w.scales, zeros=w.zeros, g_idx=g_idx,
                           group_size=w.group_size, wtype=w.wtype)


def _pow2(exponents: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.pow(2.0, exponents.to(torch.float64)).to(dtype)


def _exact_weight(K, N, G, group_size, wtype, act_dtype, gen) -> CanonicalWeight:
    e_min, e_max = EXACT_SCALE_EXPONENTS[wtype.size_bits]
    q = torch.randint(wtype.min, wtype.max + 1, (K, N), generator=gen, dtype=torch.int32)
    zeros = None
    if not wtype.has_bias():
        zeros = torch.randint(wtype.min, wtype.max + 1, (G, N), generator=gen, dtype=torch.int32)
    scales = _pow2(torch.randint(e_min, e_max + 1, (G, N), generator=gen), act_dtype)
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=None, group_size=group_size, wtype=wtype)


def _extreme_weight(K, N, G, group_size, wtype, act_dtype, gen) -> CanonicalWeight:
    """Scales spread over the act dtype's normal range, each column scaled down so sum_k |W| <= limit."""
    gs = K // G
    q = torch.randint(wtype.min, wtype.max + 1, (K, N), generator=gen, dtype=torch.int32)
    zeros = None
    if not wtype.has_bias():
        zeros = torch.randint(wtype.min, wtype.max + 1, (G, N), generator=gen, dtype=torch.int32)
    finfo = torch.finfo(act_dtype)
    e_lo = max(int(torch.tensor(finfo.smallest_normal).log2()) + 1, -60)  # -13 for fp16, -60 for bf16
    group_bound = gs * _max_abs_value(wtype) * 2.0  # mantissa < 2
    e_hi = int(torch.tensor(EXTREME_Y_LIMIT / group_bound).log2().floor())
    e = torch.randint(e_lo, max(e_lo, e_hi) + 1, (G, N), generator=gen)
    mant = 1.0 + torch.rand((G, N), generator=gen, dtype=torch.float64)
    total = (group_bound * mant * torch.pow(2.0, e.double())).sum(dim=0)  # [N]
    shift = torch.ceil(torch.log2(total / EXTREME_Y_LIMIT)).clamp(min=0)
    e = (e - shift.long()).clamp(min=e_lo)
    scales = (mant * torch.pow(2.0, e.double())).to(act_dtype)
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=None, group_size=group_size, wtype=wtype)


def _student_t(shape, dof: int, gen: torch.Generator) -> torch.Tensor:
    z = torch.randn(shape, generator=gen, dtype=torch.float64)
    chi2 = (torch.randn((dof, *shape), generator=gen, dtype=torch.float64) ** 2).sum(dim=0)
    return z / torch.sqrt(chi2 / dof)


def random_canonical(K: int, N: int, group_size: int, wtype: ScalarType | str, act_dtype: torch.dtype,
                     regime: str, seed: int, act_order: bool = False) -> CanonicalWeight:
    """A canonical weight for `regime` drawn from `seed`; act_order=True returns it row-permuted with g_idx."""
    wtype = scalar_type(wtype)
    require(regime in DATA_REGIMES, "regime", regime, f"one of {DATA_REGIMES}")
    require(act_dtype in ACT_DTYPES, "act_dtype", act_dtype, f"one of {ACT_DTYPES}")
    require(isinstance(K, int) and K > 0, "K", K, "a positive int")
    require(isinstance(N, int) and N > 0 and N % 8 == 0, "N", N, "a positive multiple of 8")
    require(group_size == -1 or group_size > 0, "group_size", group_size, "-1 (channelwise) or a positive integer")
    gs = effective_group_size(group_size, K)
    require(K % gs == 0, "K", K, f"a positive multiple of group_size={group_size}")
    G = K // gs
    gen = generator(seed, "weight")
    if regime == "exact":
        kmax = exact_tier_max_k(wtype)
        require(K <= kmax, "K", K, f"<= {kmax} for the exact tier with {wtype.name} (exact_tier_max_k)")
        w = _exact_weight(K, N, G, group_size, wtype, act_dtype, gen)
    elif regime == "extreme_scales":
        w = _extreme_weight(K, N, G, group_size, wtype, act_dtype, gen)
    else:
        if regime == "heavy_tailed":
            wf = _student_t((K, N), HEAVY_TAIL_DOF, gen) * WEIGHT_STD
        else:
            wf = torch.randn((K, N), generator=gen, dtype=torch.float64) * WEIGHT_STD
        if regime == "all_zero_groups":
            blocks = torch.rand((G, N), generator=gen) < ZERO_GROUP_FRACTION
            blocks[torch.randint(0, G, (1,), generator=gen), torch.randint(0, N, (1,), generator=gen)] = True
            wf = wf * (~blocks).repeat_interleave(gs, dim=0)
        w = rtn_quantize(wf, group_size, wtype, act_dtype)
    return _permute(w, generator(seed, "act_order")) if act_order else w


def outlier_channels(K: int, seed: int) -> torch.Tensor:
    """The input channels (int64, sorted) that carry OUTLIER_FACTOR x activations: max(1, K // 64) of them."""
    gen = generator(seed, "outlier")
    return torch.randperm(K, generator=gen)[: max(1, K // 64)].sort().values


def random_activations(M: int, K: int, act_dtype: torch.dtype, regime: str, seed: int) -> torch.Tensor:
    """x [M, K] in act_dtype for `regime` drawn from `seed` (exact: integers in [-EXACT_X_MAX, EXACT_X_MAX];
    extreme_scales: uniform in [-1, 1]; outlier_channels: N(0,1) with outlier_channels(K, seed) x100)."""
    require(regime in DATA_REGIMES, "regime", regime, f"one of {DATA_REGIMES}")
    require(act_dtype in ACT_DTYPES, "act_dtype", act_dtype, f"one of {ACT_DTYPES}")
    require(isinstance(M, int) and M > 0, "M", M, "a positive int")
    require(isinstance(K, int) and K > 0, "K", K, "a positive int")
    gen = generator(seed, "activation")
    if regime == "exact":
        x = torch.randint(-EXACT_X_MAX, EXACT_X_MAX + 1, (M, K), generator=gen).to(torch.float64)
    elif regime == "extreme_scales":
        x = torch.rand((M, K), generator=gen, dtype=torch.float64) * 2 - 1
    elif regime == "heavy_tailed":
        x = _student_t((M, K), HEAVY_TAIL_DOF, gen).clamp(-1000, 1000)
    else:
        x = torch.randn((M, K), generator=gen, dtype=torch.float64)
        if regime == "outlier_channels":
            x[:, outlier_channels(K, seed)] *= OUTLIER_FACTOR
    return x.to(act_dtype)
