"""Checks about one of OUR kernels that the shipped bugs of docs/shipped-bugs.md call for: triton_w4a16's launched
BLOCK_K and its tile tables (vllm#39705), and which built-in kernel gfx1100 selects for uint4 (vllm#46186).

Every shipped-bug CASE lives in the catalogue (conformance/checks/catalogue.py) and runs on every registered
kernel, plugins included (conformance/suite/test_catalogue.py); this module keeps what is about a named
built-in kernel, and the smallest channelwise K for every w4a16 kernel (a tile limit only a device enforces);
each test is parametrized by the `kernel_name` it is about, so --conformance-kernels deselects it with that
kernel. Its hypothesis draws come from the family of configs where the bug lived, and pin the catalogue's
cases with @example. ROCm-only kernels run here as their models (or the Triton skinny path) under a simulated
gfx1100 target; every other kernel runs for this machine's own target (detect_target: the interpreter on CPU, the
device on a GPU), so on a GPU the checks exercise the real Triton launch, not its model.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from conformance.cases.ids import Case
from conformance.cases.strategies import m_values
from conformance.checks import catalogue, guard
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.runtime import kernel_device
from conformance.core.targets import detect_target, parse_target
from conformance.families.config import W4A16Config
from references import codecs
from references.gemm import reference_gemm
from references.generators import exact_tier_max_k, random_activations, random_canonical

# a simulated target for kernels gated to ROCm: their load step and model (or Triton path) still run here
TARGET_OF = {"rdna3_w4a16": "gfx1100", "rdna_hybrid_w4a16": "gfx1100"}
K_MAX = 512  # interpreter cost: keep shapes small, several groups and tiles still fit
ASYM_KERNELS = ("triton_w4a16", "triton_w4a16_actorder", "torch_dequant_w4a16", "rdna_hybrid_w4a16")
ALL_KERNELS = ASYM_KERNELS + ("rdna3_w4a16",)


def _target(kernel: str):
    """gfx1100 (simulated) for the ROCm-only kernels, else this machine's target: on a GPU host the cpu target
    would send Triton kernels to their model (no interpreter there) and the launch would never be tested."""
    return parse_target(TARGET_OF[kernel]) if kernel in TARGET_OF else detect_target()


@st.composite
def scenario_cases(draw, kernels, *, weight_types=("uint4", "uint4b8"), formats=("gptq_v1", "gptq_v2"),
                   act_order=(False,), groups=(32, 64, 128), n8_eq_g: bool | None = None) -> Case:
    """An exact-tier Case in a bug's family of configs that the drawn kernel's gate accepts on its target.
    n8_eq_g: True draws N/8 == G (shapes of a transposed zero tensor agree), False N/8 != G, None either."""
    kernel = draw(st.sampled_from(kernels))
    wt = draw(st.sampled_from(weight_types))
    fmt = draw(st.sampled_from(formats))
    ao = draw(st.sampled_from(act_order)) and fmt != "awq"
    gs = draw(st.sampled_from(groups))
    G = draw(st.integers(1, min(K_MAX, exact_tier_max_k(wt)) // gs))
    if n8_eq_g is True:
        N = 8 * G
    else:
        N = 8 * draw(st.integers(1, 16))
        assume(n8_eq_g is None or N // 8 != G)
    case = Case(family="w4a16", kernel=kernel, regime="exact", tier="exact", seed=draw(st.integers(0, 2 ** 31 - 1)),
                group_size=gs, dtype=draw(st.sampled_from(("float16", "bfloat16"))), M=draw(m_values(40)),
                N=N, K=gs * G, weight_type=wt, act_order=ao, format=fmt)
    k = registry.get_kernel(kernel)
    assume(k.can_implement(case.config(), _target(kernel)) is None)
    # the exact tier holds only while the kernel's declared accumulator keeps every partial sum exact
    # (rdna3_w4a16 sums its 256-row K splits in the act dtype, so K > 256 is not an exact-tier case for it)
    num = k.numerics(case.config(), case.M)
    assume(case.K <= exact_tier_max_k(wt, num.accumulate_dtype))
    assume(num.exact_tier_max_k is None or case.K <= num.exact_tier_max_k)
    return case


def _passes(case: Case) -> None:
    k = registry.get_kernel(case.kernel)
    t = _target(case.kernel)
    assert k.can_implement(case.config(), t) is None, f"{case.id}: gate refuses on {t}"
    v = run_case(case, k, t)
    assert v.passed, v.line()


# ---- the uint4 checkpoint that lands on a slower kernel: selection must say so ------------------------------------
# docs/shipped-bugs.md and vllm#46186 (cadamcat): RDNA3W4A16 serves uint4b8 only, so every asymmetric
# (AWQ / compressed-tensors symmetric:false) checkpoint on gfx1100 silently moves down the priority list.

@given(group=st.sampled_from((32, 64, 128, -1, 256)), fmt=st.sampled_from(("gptq_v2", "awq", "compressed_tensors")),
       dtype=st.sampled_from(("float16", "bfloat16")))
@example(group=128, fmt="awq", dtype="float16")
@example(group=-1, fmt="compressed_tensors", dtype="bfloat16")
@pytest.mark.parametrize("kernel_name", ["rdna3_w4a16"])  # --conformance-kernels deselects it with its kernel
def test_uint4_on_gfx1100_selection_is_reported(kernel_name, group, fmt, dtype):
    gfx1100 = parse_target("gfx1100")
    cfg = W4A16Config(weight_type="uint4", group_size=group, act_order=False, dtype=dtype, format=fmt,
                      N=4096, K=4096)
    sel = registry.select(cfg, gfx1100)
    reason = sel.refused.get("rdna3_w4a16", "")
    assert "weight_type=uint4" in reason and "uint4b8" in reason, sel.to_dict()
    # the hybrid kernel takes group 32/64/128; anything else falls to the Triton kernel, and selection says which
    want = "rdna_hybrid_w4a16" if group in (32, 64, 128) else "triton_w4a16"
    assert sel.selected is not None and sel.selected.name == want, sel.to_dict()
    if want == "triton_w4a16":
        assert "group_size" in sel.refused["rdna_hybrid_w4a16"]
    assert {r["kernel"] for r in sel.to_dict()["refused"]} >= {"rdna3_w4a16"}
    # the symmetric twin of the same layer does get the RDNA3 kernel: the refusal is about the weight type only
    if group > 0:
        twin = registry.select(W4A16Config(weight_type="uint4b8", group_size=group, act_order=False, dtype=dtype,
                                           format=fmt, N=4096, K=4096), gfx1100)
        assert twin.selected.name == "rdna3_w4a16", twin.to_dict()


@given(case=scenario_cases(("rdna_hybrid_w4a16",), weight_types=("uint4",), formats=("awq", "compressed_tensors")))
@example(case=catalogue.entry("uint4_fallback_exact").case(0, "rdna_hybrid_w4a16"))
@pytest.mark.parametrize("kernel_name", ["rdna_hybrid_w4a16"])
def test_uint4_on_gfx1100_selected_kernel_is_exact(kernel_name, case):
    """The kernel gfx1100 falls back to for uint4 is the hybrid, and it is exact (the catalogue's
    uint4_fallback_exact entry runs the same case on every kernel)."""
    sel = registry.select(case.config(), parse_target("gfx1100"))
    assert sel.selected.name == case.kernel
    _passes(case)


# ---- BLOCK_K must not exceed the group size ---------------------------------------------------------------------
# vllm#39705: with BLOCK_K > group_size a K tile straddles groups and uses one group's scale (group-32 models
# looped on tool calls past 10K tokens). Our interpreter table has BLOCK_K = 128 and the GPU table 64/128:
# the wrapper's clamp must hold for every table entry.

_BK = catalogue.entry("block_k_within_group")  # cases: M <= 16 (split-K row), M = 33, act-order with M = 40


@given(case=scenario_cases(("triton_w4a16", "triton_w4a16_actorder"), formats=("gptq_v2", "awq"),
                           act_order=(False, True), groups=(32, 64)))
@example(case=_BK.case(0, "triton_w4a16"))
@example(case=_BK.case(1, "triton_w4a16"))
@example(case=_BK.case(2, "triton_w4a16_actorder"))
@pytest.mark.parametrize("kernel_name", ["triton_w4a16"])  # and its act-order twin: one GEMM, one launch record
def test_block_k_clamped_to_group(kernel_name, case):
    """The launched BLOCK_K divides the group (the output alone could hide a straddle on exact-tier data)."""
    assume(case.K > case.group_size)  # one group: nothing to straddle
    from conformance_kernels import triton_w4a16 as tw

    tw._LAST_LAUNCH.clear()  # a stale record of an earlier test's launch must not answer for this case
    _passes(case)
    launch = tw.last_launch_config()
    assert launch, f"{case.id}: the Triton kernel never launched (ran as its model on {_target(case.kernel)})"
    assert (launch["M"], launch["N"], launch["K"]) == (case.M, case.N, case.K), (case.id, launch)
    bk = launch["block_k"]
    if launch.get("planar"):  # the planar path reads scales per 32-row plane: a plane must not straddle a group
        plane = bk // 4
        assert case.group_size % plane == 0, f"{case.id}: planar plane of {plane} rows straddles g={case.group_size}"
    else:
        assert case.group_size % bk == 0, f"{case.id}: launched BLOCK_K={bk} straddles group_size={case.group_size}"


@pytest.mark.parametrize("device_kind", ["interpreter", "gpu"])
@pytest.mark.parametrize("group", [32, 64])
@pytest.mark.parametrize("kernel_name", ["triton_w4a16"])
def test_block_k_clamp_holds_for_every_table_entry(kernel_name, device_kind, group):
    from conformance_kernels import triton_w4a16 as tw

    for max_m, cfg in tw.TILE_TABLE[device_kind]:
        assert cfg.block_k > group or device_kind == "gpu"  # the table really offers tiles wider than the group
        fitted = tw.fit_tiles(cfg, max_m or 64, 256, 8 * group, group)
        assert group % fitted.block_k == 0, (device_kind, cfg, fitted)


@pytest.mark.parametrize("block_k", [64, 128])
@pytest.mark.parametrize("kernel_name", ["triton_w4a16"])
def test_block_k_override_is_clamped(kernel_name, block_k):
    """An explicit tile override with BLOCK_K 64/128 on group 32 still launches BLOCK_K <= 32, and is exact."""
    from conformance_kernels import triton_w4a16 as tw
    from conformance_kernels._w4a16_common import to_device

    k = registry.get_kernel("triton_w4a16")
    w = random_canonical(256, 64, 32, "uint4", torch.float16, "exact", 95)
    x = random_activations(20, 256, torch.float16, "exact", 95)
    dev = kernel_device()  # cuda on a GPU host: the launch takes device tensors there
    o = to_device(guard.call(k, "load", codecs.encode(w, "gptq_v2")), dev)
    y = tw.launch_w4a16_gemm(x.to(dev), o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias,
                             tiles=tw.TileConfig(32, 64, block_k)).cpu()
    assert tw.last_launch_config()["block_k"] <= 32
    torch.testing.assert_close(y, reference_gemm(x, w).to(torch.float16), rtol=0, atol=0)


# ---- the smallest K a kernel accepts: tile limits that only a device enforces ---------------------------------------
# tl.dot needs K >= 16 on a GPU: a wrapper that shrinks the K tile to 8 for a K = 8 channelwise layer compiles in
# Triton's interpreter and fails on the device. The CI plan reaches K = 8 / 16 on a seeded rotation; these cases run
# them on every run, for every w4a16 kernel (plugins included), at M values that take each path of a tile table
# (GEMV, swap_ab dot, dot, dequant_mm, the catch-all).

SMALL_K = catalogue.SMALL_K


@pytest.mark.parametrize("K", SMALL_K)
@pytest.mark.parametrize("kernel_name", sorted(k.name for k in registry.all_kernels("w4a16")))
def test_smallest_channelwise_k_runs(kernel_name, K):
    """Channelwise layers with K = 8 and 16 pass the exact tier wherever the kernel's gate accepts them."""
    k = registry.get_kernel(kernel_name)
    t = _target(kernel_name)
    failures, refusals, ran = [], set(), 0
    for case in catalogue.small_k_cases(kernel_name, K):
        why = k.can_implement(case.config(), t)
        if why is not None:
            refusals.add(why)
            continue
        v = run_case(case, k, t)
        if v.outcome == "skip":  # accepted, but it cannot run here (its compiled op absent, no model): not judged
            refusals.add(v.detail)
            continue
        ran += 1
        if not v.passed:
            failures.append(v.line())
    if not ran:
        pytest.skip(f"{kernel_name} runs no channelwise K={K} case on {t}: {sorted(refusals)}")
    assert not failures, "\n".join(failures)
