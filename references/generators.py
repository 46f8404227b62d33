"""Seeded data for cases: canonical weights and activations per data regime (same seed -> same bits).

Every draw goes through a torch.Generator seeded from (seed, stream), never the global RNG.

The exact tier draws one of two regimes (EXACT_REGIMES); in both every W is (small integer) * 2^e, exact in
fp16 and bf16, and every product x*W and every partial sum, in any order (split-K atomics included), is an
integer multiple of one unit per column, exact in fp32 while its magnitude is <= 2^24 units. exact_tier_max_k()
returns the largest K for which that holds in a given accumulator.

- "exact": x integers in [-EXACT_X_MAX, EXACT_X_MAX], scales 2^e with e in a narrow band, q and z over the
  type's full stored range (every nibble value occurs); units 2^e_min, sums <= K*A*D*2^(e_max-e_min) units and
  |y| <= K*A*D*2^e_max <= EXACT_Y_LIMIT.
- "exact_wide": partial sums too wide for fp16. Every column's weights have one sign, x's sign alternates per
  EXACT_WIDE_BLOCK-wide K block (and per row), |x| in [1, EXACT_WIDE_X_MAX]: each 32-wide block partial sums
  terms of one sign to some 10^3..10^4 units, beyond the 2^11 fp16 holds, so a kernel that rounds block
  partials to fp16 changes bits; consecutive blocks cancel, so |y| stays small and the change shows. Scales
  2^(e0_n + d), d in [0, EXACT_WIDE_SPREAD], with e0_n per column such that EXACT_WIDE_X_MAX * sum_k |W_kn|
  <= EXACT_Y_LIMIT: |y| is bounded by construction, so only the fp32 unit bound limits K.

Trap data, in every case that can hold it (deterministic from the seed, own streams):
- asymmetric weights: zero points min and max (0 and 15; 8-bit 0 and 255) in every packing slot (n % 8;
  8-bit n % 4) of one group (two groups when N is a single packed word); cells whose weights are all zero stay zero.
- act-order permutations are never the identity, never self-inverse, never block-contiguous.
- bf16 extreme_scales: one column of scales above fp16's max (65504) and one below 2^-26 (fp16 rounds it to 0).
"""
from __future__ import annotations

import torch

from .errors import require
from .quantize import rtn_quantize
from .scalar_types import ScalarType, scalar_type
from .weight import ACT_DTYPES, CanonicalWeight, effective_group_size

DATA_REGIMES = ("exact", "exact_wide", "normal", "heavy_tailed", "outlier_channels", "all_zero_groups",
                "extreme_scales")
EXACT_REGIMES = ("exact", "exact_wide")  # the exact tier's regimes: every partial sum exact in fp32
# regimes whose activations mean something without their weight (exact_wide's x signs pair with its weight's)
ACTIVATION_REGIMES = tuple(r for r in DATA_REGIMES if r != "exact_wide")

EXACT_X_MAX = 4  # exact-tier activations are integers in [-4, 4]
EXACT_Y_LIMIT = 2.0 ** 14  # |y| bound of the exact tier: a quarter of fp16's max (65504)
# scale exponent band [e_min, e_max] of the exact tier, per weight bit width
EXACT_SCALE_EXPONENTS = {4: (-7, -4), 8: (-10, -8)}

WEIGHT_STD = 0.05  # realistic regimes: weights ~ N(0, 0.05^2) before quantization (LLM-like magnitude)
OUTLIER_FACTOR = 100.0  # outlier_channels: these input channels carry 100x activations
HEAVY_TAIL_DOF = 3  # heavy_tailed: Student-t with 3 degrees of freedom
ZERO_GROUP_FRACTION = 0.25  # all_zero_groups: share of (group, column) blocks whose weights are exactly 0
EXTREME_Y_LIMIT = 2.0 ** 14  # extreme_scales: bound on sum_k |x||W| with |x| <= 1, so y fits fp16 (not the
# bf16 trap columns, whose scales lie outside fp16's range on purpose)

# exact_wide: a 32-wide block inside one group sums x*(q-z) to about 32 * 32 * 7 (4-bit), beyond fp16's 2^11
EXACT_WIDE_X_MAX = 64  # |x| in [1, 64], exact in bf16
EXACT_WIDE_Q_SPAN = 15  # |q - z| <= 15 (8-bit types too, so the fp32 bound reaches K = 8192)
EXACT_WIDE_BLOCK = 32  # x's sign alternates every 32 K-terms (the block width fp16-partial kernels use)
EXACT_WIDE_SPREAD = 1  # group scales are 2^e0_n or 2^(e0_n + 1)

_STREAMS = {"weight": 1, "activation": 2, "act_order": 3, "outlier": 4, "zero_trap": 5, "scale_trap": 6,
            "fp8_trap": 7}


def generator(seed: int, stream: str) -> torch.Generator:
    """A CPU generator for one named stream of one seed (weights and activations never share draws)."""
    require(isinstance(seed, int) and seed >= 0, "seed", seed, "a non-negative int")
    return torch.Generator().manual_seed((seed * 1_000_003 + _STREAMS[stream]) % (1 << 63))


def _max_abs_value(wtype: ScalarType) -> int:
    """D: the largest |q - z| the exact tier draws (z free in the stored range for unbiased types)."""
    return max(wtype.max - wtype.bias, wtype.bias) if wtype.has_bias() else wtype.max


def _exact_wide_d(wtype: ScalarType) -> int:
    """D of exact_wide: the largest |q - z| it draws."""
    return min(_max_abs_value(wtype), EXACT_WIDE_Q_SPAN)


def exact_tier_max_k(wtype: ScalarType | str, acc_dtype: torch.dtype = torch.float32, regime: str = "exact") -> int:
    """Largest K for which the exact tier's claims hold on `regime`'s data with an accumulator of `acc_dtype`.

    exact: partial sums are multiples of 2^e_min bounded by K*A*D*2^(e_max-e_min) units: exact while that is
    <= 2^p (p = significand bits of acc_dtype, 24 for fp32); and |y| <= K*A*D*2^e_max <= EXACT_Y_LIMIT.
    exact_wide: units of 2^e0_n bounded by K*A*D*2^spread; |y| is bounded by construction at any K.
    """
    wtype = scalar_type(wtype)
    p = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}.get(acc_dtype)
    require(p is not None, "acc_dtype", acc_dtype, "float16, bfloat16, float32 or float64")
    require(regime in EXACT_REGIMES, "regime", regime, f"one of {EXACT_REGIMES}")
    if regime == "exact_wide":
        return (1 << p) // ((EXACT_WIDE_X_MAX * _exact_wide_d(wtype)) << EXACT_WIDE_SPREAD)
    e_min, e_max = EXACT_SCALE_EXPONENTS[wtype.size_bits]
    unit_max = EXACT_X_MAX * _max_abs_value(wtype)
    k_acc = (1 << p) // (unit_max << (e_max - e_min))
    k_out = int(EXACT_Y_LIMIT // (unit_max * 2.0 ** e_max))
    return min(k_acc, k_out)


def permutation_flaws(perm: torch.Tensor, group_size: int) -> list[str]:
    """What makes an act-order permutation a weak test: `identity` (g_idx changes nothing), `self-inverse`
    (applying perm instead of its inverse goes unseen) and `block-contiguous` (g_idx constant on every aligned
    pair of rows, hence on every aligned tile of any even size: a kernel reading one g_idx per tile passes)."""
    K = perm.numel()
    ar = torch.arange(K)
    g_idx = perm // group_size
    flaws = []
    if torch.equal(perm, ar):
        flaws.append("identity")
    if torch.equal(perm[perm], ar):
        flaws.append("self-inverse")
    if K >= 2 and torch.equal(g_idx[0:K - K % 2:2], g_idx[1:K - K % 2:2]):
        flaws.append("block-contiguous")
    return flaws


def act_order_permutation(K: int, group_size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(g_idx int32 [K], perm int64 [K]) as upstream tests draw them: g_idx[i] = perm[i] // gs.

    Applying `perm` to the rows of q (q[perm]) and of the reference weight keeps W = dequant(q) consistent.
    With at least two groups of at least two rows, draws are repeated (same generator, so still a function of
    the seed) until `permutation_flaws` finds none; such a permutation always exists then.
    """
    gs = effective_group_size(group_size, K)
    require(K > 0 and K % gs == 0, "K", K, f"a positive multiple of group_size={group_size}")
    perm = torch.randperm(K, generator=gen)
    if K // gs >= 2 and gs >= 2:
        while permutation_flaws(perm, gs):  # rare except at tiny K (K = 4, groups of 2: most draws)
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


def zero_point_traps(G: int, N: int, wtype: ScalarType, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """(trap [G, N] int32, g_a): the zero point forced on each (group, column) cell, -1 where none.

    Group g_a holds the type's min and max alternately per packed word (n // pack_factor, random phase), so
    with N >= 2 words every packing slot n % pack_factor holds both; with one word a second group holds the
    opposite pattern (when there is one)."""
    per = wtype.pack_factor
    phase = int(torch.randint(0, 2, (1,), generator=gen))
    g_a = int(torch.randint(0, G, (1,), generator=gen))
    g_b = (g_a + 1 + int(torch.randint(0, max(1, G - 1), (1,), generator=gen))) % G
    low = ((torch.arange(N) // per + phase) % 2) == 0
    row = torch.where(low, wtype.min, wtype.max).to(torch.int32)
    trap = torch.full((G, N), -1, dtype=torch.int32)
    trap[g_a] = row
    if N < 2 * per and G >= 2:
        trap[g_b] = wtype.min + wtype.max - row
    return trap, g_a


def _with_zero_traps(w: CanonicalWeight, trap: torch.Tensor) -> CanonicalWeight:
    """w with the trap zero points forced; a cell whose weights are all zero keeps them zero (q follows z)."""
    G, N = trap.shape
    rows_g = torch.arange(w.K) // w.gs  # traps go in before the act-order permutation
    forced = trap >= 0
    zero_cell = (w.q == w.zeros[rows_g]).reshape(G, w.gs, N).all(dim=1)
    zeros = torch.where(forced, trap, w.zeros)
    q = torch.where((forced & zero_cell)[rows_g], zeros[rows_g], w.q)
    return CanonicalWeight(q=q, scales=w.scales, zeros=zeros, g_idx=w.g_idx, group_size=w.group_size, wtype=w.wtype)


def _exact_wide_weight(K, N, G, group_size, wtype, act_dtype, gen, trap) -> CanonicalWeight:
    """exact_wide: every column's weights have one sign beta_n; scales 2^(e0_n + d) bound A * sum_k |W_kn|."""
    gs = K // G
    rows_g = torch.arange(K) // gs
    if wtype.has_bias():
        beta = torch.randint(0, 2, (N,), generator=gen) == 0
        z = torch.full((G, N), wtype.bias, dtype=torch.int32)
        zeros = None
    else:
        tz, g_a = trap
        beta = tz[g_a] == wtype.min  # the primary trap group never becomes a zero cell
        near = torch.randint(0, (wtype.max + 1) // 4, (G, N), generator=gen, dtype=torch.int32)
        z = torch.where(beta, near, wtype.max - near)
        z = zeros = torch.where(tz >= 0, tz, z)
    # [G, N]: q on beta's side of z, within EXACT_WIDE_Q_SPAN of it, so sign(q - z) is beta or 0
    lo = torch.where(beta, z, (z - EXACT_WIDE_Q_SPAN).clamp(min=wtype.min))
    hi = torch.where(beta, (z + EXACT_WIDE_Q_SPAN).clamp(max=wtype.max), z)
    span = (hi - lo + 1)[rows_g].double()
    q = (lo[rows_g] + torch.floor(torch.rand((K, N), generator=gen, dtype=torch.float64) * span)).to(torch.int32)
    d = torch.randint(0, EXACT_WIDE_SPREAD + 1, (G, N), generator=gen)
    Q = ((q - z[rows_g]).abs().double() * torch.pow(2.0, d.double())[rows_g]).sum(0)  # [N]: sum_k |W_kn| / 2^e0_n
    e0 = torch.floor(torch.log2(EXACT_Y_LIMIT / (EXACT_WIDE_X_MAX * Q.clamp(min=1.0))))
    scales = _pow2(e0[None, :] + d, act_dtype)
    return CanonicalWeight(q=q, scales=scales, zeros=zeros, g_idx=None, group_size=group_size, wtype=wtype)


def _extreme_scale_traps(scales: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """bf16 scales with one column above fp16's max (65504) and one below 2^-26 (under half fp16's smallest
    subnormal), so a bf16 scale rounded through fp16 becomes inf (NaN/inf output) or 0 (a wrong column)."""
    G, N = scales.shape
    cols = torch.randperm(N, generator=gen)[:2]
    mant = 1.0 + torch.rand((G, 2), generator=gen, dtype=torch.float64)
    e_big = torch.randint(16, 25, (G,), generator=gen).double()  # 2^16 > 65504
    e_tiny = torch.randint(-40, -26, (G,), generator=gen).double()  # < 2^-26
    out = scales.clone()
    out[:, cols[0]] = (mant[:, 0] * torch.pow(2.0, e_big)).to(scales.dtype)
    out[:, cols[1]] = (mant[:, 1] * torch.pow(2.0, e_tiny)).to(scales.dtype)
    return out


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
    trap = None if wtype.has_bias() else zero_point_traps(G, N, wtype, generator(seed, "zero_trap"))
    if regime in EXACT_REGIMES:
        kmax = exact_tier_max_k(wtype, regime=regime)
        require(K <= kmax, "K", K, f"<= {kmax} for the {regime} regime with {wtype.name} (exact_tier_max_k)")
    if regime == "exact":
        w = _exact_weight(K, N, G, group_size, wtype, act_dtype, gen)
    elif regime == "exact_wide":
        w = _exact_wide_weight(K, N, G, group_size, wtype, act_dtype, gen, trap)
        trap = None  # drawn in: q was drawn on each column's side of its (trap) zero point
    elif regime == "extreme_scales":
        w = _extreme_weight(K, N, G, group_size, wtype, act_dtype, gen)
        if act_dtype == torch.bfloat16:
            w = CanonicalWeight(q=w.q, scales=_extreme_scale_traps(w.scales, generator(seed, "scale_trap")),
                                zeros=w.zeros, g_idx=None, group_size=group_size, wtype=wtype)
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
    if trap is not None:
        w = _with_zero_traps(w, trap[0])
    return _permute(w, generator(seed, "act_order")) if act_order else w


def outlier_channels(K: int, seed: int) -> torch.Tensor:
    """The input channels (int64, sorted) that carry OUTLIER_FACTOR x activations: max(1, K // 64) of them."""
    gen = generator(seed, "outlier")
    return torch.randperm(K, generator=gen)[: max(1, K // 64)].sort().values


def random_activations(M: int, K: int, act_dtype: torch.dtype, regime: str, seed: int) -> torch.Tensor:
    """x [M, K] in act_dtype for `regime` drawn from `seed` (exact: integers in [-EXACT_X_MAX, EXACT_X_MAX];
    exact_wide: integers 1..EXACT_WIDE_X_MAX in magnitude, sign per row times (-1)^(k // EXACT_WIDE_BLOCK);
    extreme_scales: uniform in [-1, 1]; outlier_channels: N(0,1) with outlier_channels(K, seed) x100)."""
    require(regime in DATA_REGIMES, "regime", regime, f"one of {DATA_REGIMES}")
    require(act_dtype in ACT_DTYPES, "act_dtype", act_dtype, f"one of {ACT_DTYPES}")
    require(isinstance(M, int) and M > 0, "M", M, "a positive int")
    require(isinstance(K, int) and K > 0, "K", K, "a positive int")
    gen = generator(seed, "activation")
    if regime == "exact":
        x = torch.randint(-EXACT_X_MAX, EXACT_X_MAX + 1, (M, K), generator=gen).to(torch.float64)
    elif regime == "exact_wide":
        mag = torch.randint(1, EXACT_WIDE_X_MAX + 1, (M, K), generator=gen).to(torch.float64)
        row = torch.where(torch.rand((M, 1), generator=gen) < 0.5, -1.0, 1.0).double()
        block = 1.0 - 2.0 * ((torch.arange(K) // EXACT_WIDE_BLOCK) % 2).double()
        x = mag * row * block
    elif regime == "extreme_scales":
        x = torch.rand((M, K), generator=gen, dtype=torch.float64) * 2 - 1
    elif regime == "heavy_tailed":
        x = _student_t((M, K), HEAVY_TAIL_DOF, gen).clamp(-1000, 1000)
    else:
        x = torch.randn((M, K), generator=gen, dtype=torch.float64)
        if regime == "outlier_channels":
            x[:, outlier_channels(K, seed)] *= OUTLIER_FACTOR
    return x.to(act_dtype)
