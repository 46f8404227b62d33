"""Trap data, present in every case that can hold it: zero points at both extremes in every packing slot,
act-order permutations that are never identity / self-inverse / block-contiguous, bf16 scales outside fp16's
range in extreme_scales, and FP8 groups with exact rounding ties and saturating values. Each trap is shown
catching the bug it is there for."""
from __future__ import annotations

import pytest
import torch

from conformance.cases.ids import parse_case_id
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.targets import CPU
from conformance.families.fp8_inputs import FP8_REGIMES, fp8_activations
from references.fp8 import FP8_MAX, fp8_group_quant_reference
from references.generators import (
    DATA_REGIMES,
    act_order_permutation,
    generator,
    permutation_flaws,
    random_canonical,
)
from references.scalar_types import scalar_type
from references.weight import CanonicalWeight

registry.load_all()

# ---- zero points 0 and max in every packing slot --------------------------------------------------------------

# (K, N, group_size): several groups with one packed word of columns, two groups with two words, one group
ZERO_SHAPES = ((256, 8, 32), (256, 16, 128), (96, 24, -1))


def _slots_hold_both(z: torch.Tensor, wt) -> bool:
    """Some group holds min and max in every slot n % pack_factor, or (one packed word: N == pack_factor...) every
    slot holds both across the groups."""
    per, lo, hi = wt.pack_factor, wt.min, wt.max
    slots = [z[:, j::per] for j in range(per)]  # [G, N/per] per slot
    one_group = any(all({lo, hi} <= set(s[g].tolist()) for s in slots) for g in range(z.shape[0]))
    across = all({lo, hi} <= set(s.flatten().tolist()) for s in slots)
    return one_group if z.shape[1] >= 2 * per else across


@pytest.mark.parametrize("wtype", ["uint4", "uint8"])
@pytest.mark.parametrize("regime", DATA_REGIMES)
def test_asymmetric_zero_points_hold_both_extremes_in_every_slot(wtype, regime):
    wt = scalar_type(wtype)
    for K, N, g in ZERO_SHAPES:
        for ao in (False, True) if g != -1 else (False,):
            for seed in (1, 2):
                w = random_canonical(K, N, g, wt, torch.float16, regime, seed, act_order=ao)
                assert _slots_hold_both(w.zeros, wt), (K, N, g, ao, seed, w.zeros[:, :8])


def test_trap_zero_points_keep_zero_cells_zero():
    """all_zero_groups: a (group, column) cell of zeros stays zero when its zero point is forced (q follows z)."""
    for seed in range(6):
        w = random_canonical(128, 16, 32, "uint4", torch.float16, "all_zero_groups", seed)
        plain = random_canonical(128, 16, 32, "uint4b8", torch.float16, "all_zero_groups", seed)  # no zero points
        cells = w.dequantize().reshape(4, 32, 16).eq(0).all(dim=1)
        assert torch.equal(cells, plain.dequantize().reshape(4, 32, 16).eq(0).all(dim=1))


# ---- act-order permutations -------------------------------------------------------------------------------------

# every group size the W4A16 strategies can draw with act-order (their config space and any_case_fields), and every
# K with at least two groups up to the largest profile's k_max (any_case_fields: K up to 64 groups)
PERM_GROUPS = {32: 4096, 64: 4096, 128: 4096, 256: 4096, 8: 8 * 64, 24: 24 * 64}


def test_act_order_permutations_have_no_flaws_for_every_drawable_shape():
    checked = 0
    for gs, k_max in PERM_GROUPS.items():
        for K in range(2 * gs, k_max + 1, gs):
            for seed in (0, 1):
                g_idx, perm = act_order_permutation(K, gs, generator(seed, "act_order"))
                assert permutation_flaws(perm, gs) == [], (K, gs, seed)
                assert torch.equal(g_idx.long(), perm // gs)
                checked += 1
    assert checked > 700


def test_permutation_flaws_are_recognised_and_redrawn():
    K, gs = 8, 4
    assert permutation_flaws(torch.arange(K), gs) == ["identity", "self-inverse", "block-contiguous"]
    swap = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])  # pairs swapped: an involution inside groups
    assert "self-inverse" in permutation_flaws(swap, gs)
    groups_swapped = torch.tensor([4, 5, 6, 7, 0, 1, 2, 3])  # whole groups exchanged: block-contiguous too
    assert permutation_flaws(groups_swapped, gs) == ["self-inverse", "block-contiguous"]
    rotated_pairs = torch.tensor([2, 3, 4, 5, 6, 7, 0, 1])  # g_idx constant on aligned pairs only
    assert permutation_flaws(rotated_pairs, gs) == ["block-contiguous"]
    # K = 4 in groups of 2: most permutations are flawed, so plain randperm fails often; the drawn ones never
    flawed_first = sum(bool(permutation_flaws(torch.randperm(4, generator=generator(s, "act_order")), 2))
                       for s in range(40))
    assert flawed_first > 10
    for s in range(40):
        assert permutation_flaws(act_order_permutation(4, 2, generator(s, "act_order"))[1], 2) == []


# ---- bf16 scales outside fp16's range ---------------------------------------------------------------------------

@pytest.mark.parametrize("wtype", ["uint4", "uint4b8", "uint8"])
def test_bf16_extreme_scales_leave_fp16s_range(wtype):
    for K, N, g in ((256, 8, 32), (512, 64, 128), (64, 16, -1)):
        for seed in (0, 3):
            s = random_canonical(K, N, g, wtype, torch.bfloat16, "extreme_scales", seed).scales.double()
            assert bool((s > 65504).all(0).any()) and bool((s < 2.0 ** -25).all(0).any())
            # rounded through fp16 they become inf and 0
            f16 = s.to(torch.bfloat16).to(torch.float16)
            assert torch.isinf(f16).any() and (f16 == 0).any()
            s16 = random_canonical(K, N, g, wtype, torch.float16, "extreme_scales", seed).scales.double()
            assert torch.isfinite(s16).all() and s16.min() >= 2.0 ** -14  # fp16 cases: no trap, normal range


class ScalesViaFp16(type(registry.get_kernel("torch_dequant_w4a16"))):
    """BUG: rounds bf16 scales through fp16 before dequantizing (exact for fp16 cases)."""

    name = "test_trap_scales_via_fp16"

    def apply(self, w, x):
        w16 = CanonicalWeight(q=w.q, scales=w.scales.to(torch.float16).to(w.scales.dtype), zeros=w.zeros,
                              g_idx=w.g_idx, group_size=w.group_size, wtype=w.wtype)
        return super().apply(w16, x)


FP8_KERNEL = type(registry.get_kernel("fp8_group_quant_native"))


class TiesAway(FP8_KERNEL):
    """BUG: rounds x / s half away from zero (nudges ties outward before the round-to-nearest-even cast)."""

    name = "test_trap_ties_away"

    def apply(self, p, x):
        q, s = super().apply(p, x)
        v = x.float().reshape(x.shape[0], -1, p.group_size) / s.unsqueeze(-1)
        v = (v * (1 + 2.0 ** -20)).clamp(-p.fp8_max, p.fp8_max)
        return v.reshape(x.shape).to(q.dtype), s


@pytest.fixture
def kernels(monkeypatch):
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: None)
    ks = [ScalesViaFp16(), TiesAway()]
    for k in ks:
        registry.register_kernel(k)
    yield
    for k in ks:
        registry.unregister_kernel(k.name)


W4 = "w4a16/{k}/M=3,N=16,K=128,g=64,wt=uint4,ao=0,dt={dt},fmt=gptq_v2,regime={r},tier=statistical,seed={s}"


def test_bf16_scale_rounded_through_fp16_is_caught(kernels):
    for seed in (1, 2, 3):
        v = run_case(parse_case_id(W4.format(k="test_trap_scales_via_fp16", dt="bf16", r="extreme_scales", s=seed)),
                     target=CPU, record=False)
        assert v.outcome == "fail", v.line()
    # without the trap's range the bug is invisible: normal bf16 scales are exact in fp16
    for dt, r in (("bf16", "normal"), ("fp16", "extreme_scales")):
        v = run_case(parse_case_id(W4.format(k="test_trap_scales_via_fp16", dt=dt, r=r, s=1)), target=CPU,
                     record=False)
        assert v.outcome == "pass", v.line()


# ---- FP8: rounding ties and saturation in every regime --------------------------------------------------------

FP8_SHAPES = ((3, 256, 128, "bfloat16", "float8_e4m3fn"), (1, 64, 64, "float16", "float8_e4m3fnuz"),
              (2, 128, 32, "float32", "float8_e4m3fn"))


def _groups(x, gs):
    return x.float().reshape(-1, gs)


@pytest.mark.parametrize("regime", FP8_REGIMES)
def test_fp8_inputs_hold_ties_and_saturation_in_every_regime(regime):
    for T, H, gs, dt, f8 in FP8_SHAPES:
        for seed in (0, 5):
            x = fp8_activations(T, H, dt, regime, seed, gs, f8)
            assert torch.equal(x, fp8_activations(T, H, dt, regime, seed, gs, f8))  # a function of the seed
            fmax = FP8_MAX[f8]
            q, s = fp8_group_quant_reference(x, gs, f8)
            xg, qg, sg = _groups(x, gs), q.reshape(-1, gs).double(), s.reshape(-1).double()
            ratio = xg.double() / sg[:, None]
            # the boundary group: scale a power of two, x/s on +-fp8_max and on ties that go down, up (to even),
            # into the next binade and to zero
            pow2 = sg.log2() == sg.log2().round()
            ties = {(1.0625, 1.0), (-1.1875, -1.25), (0.96875, 1.0), (fmax, fmax), (-fmax, -fmax)}
            found = [b for b in pow2.nonzero().flatten().tolist()
                     if all(bool(((ratio[b] == v) & (qg[b] == r)).any()) for v, r in ties)]
            nonzero = int((xg != 0).any(1).sum())  # all_zero_groups: a case whose only group is zero holds none
            assert bool(found) == (nonzero >= 1), (regime, T, H, gs, dt, f8, seed)
            if not found:
                continue
            sub = ratio[found[0]].abs()
            assert bool(((sub > 0) & (sub < 2.0 ** -9) & (qg[found[0]] == 0)).any())  # half the least subnormal
            if nonzero >= 2:  # the saturation group: fp32 x / s lands past fp8_max for both signs
                past = (xg / s.reshape(-1)[:, None]).abs() > fmax
                assert bool((past.any(1) & (xg.max(1).values == -xg.min(1).values)).any()), (regime, T, H)


def test_fp8_ties_rounded_away_are_caught_on_realistic_regimes(kernels):
    for regime in ("normal", "heavy_tailed", "outlier_channels"):
        cid = f"fp8_group_quant/test_trap_ties_away/T=4,H=256,g=128,dt=bf16,f8=e4m3fn,regime={regime},tier=exact,seed=2"
        v = run_case(parse_case_id(cid), target=CPU, record=False)
        assert v.outcome == "fail" and v.metrics["q_mismatches"] > 0, v.line()
