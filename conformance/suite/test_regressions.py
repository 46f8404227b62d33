"""Regressions that shipped (docs/shipped-bugs.md), pinned as exact-tier hypothesis @examples (statistical tier
only where exact-tier data cannot show the bug: bf16 dequantized through fp16).

Each test draws exact-tier cases from the family of configurations where the bug lived and runs them through
the harness on the correct kernels; the @example(case=...) ids pin the named instance, so every scenario runs on
every CI run whatever hypothesis draws. A `_guard` assertion checks that each pinned example really contains
the trap (e.g. a zero point of 0, N/8 == G), so a change to the generators cannot quietly empty a regression.
ROCm-only kernels run here as their models (or the Triton skinny path) under a simulated gfx1100 target; every
other kernel runs for this machine's own target (detect_target: the interpreter on CPU, the device on a GPU), so
on a GPU the regressions exercise the real Triton launch, not its model.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from conformance.cases.ids import Case, parse_case_id
from conformance.cases.strategies import m_values
from conformance.checks.harness import run_case
from conformance.core import registry
from conformance.core.dtypes import torch_dtype
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


def _id(text: str) -> Case:
    return parse_case_id(text)


def _target(kernel: str):
    """gfx1100 (simulated) for the ROCm-only kernels, else this machine's target: on a GPU host the cpu target
    would send Triton kernels to their model (no interpreter there) and the launch would never be tested."""
    return parse_target(TARGET_OF[kernel]) if kernel in TARGET_OF else detect_target()


def _weight(case: Case):
    return random_canonical(case.K, case.N, case.group_size, case.weight_type, torch_dtype(case.dtype),
                            case.regime, case.seed, act_order=case.act_order)


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


# ---- compressed-tensors zero points [N/8, G] must be transposed to [G, N/8] ------------------------------------
# vllm#33200 (Conch got CT's packed (N/8, G) zeros where (G, N) was expected: illegal memory access) and
# vllm#48998 (a shape-based "needs transpose?" test is ambiguous when N/8 == G: MiniMax-M3-AWQ-INT4 at tp=8).

CT_EQ = "w4a16/triton_w4a16/M5-N32-K128-g32-uint4-noao-fp16-compressed_tensors-exact-exact-s11"  # N/8 = G = 4
CT_NE = "w4a16/triton_w4a16/M5-N64-K128-g32-uint4-noao-bf16-compressed_tensors-exact-exact-s12"  # 8 != 4
CT_EQ_HYBRID = "w4a16/rdna_hybrid_w4a16/M17-N16-K256-g128-uint4-noao-fp16-compressed_tensors-exact-exact-s13"


@given(case=scenario_cases(ASYM_KERNELS, weight_types=("uint4",), formats=("compressed_tensors",)))
@example(case=_id(CT_EQ))
@example(case=_id(CT_NE))
@example(case=_id(CT_EQ_HYBRID))
@example(case=_id(CT_EQ).with_kernel("torch_dequant_w4a16"))
def test_ct_zero_points_transposed(case):
    _passes(case)


# ---- the opposite: GPTQ/AWQ zeros are already [G, N/8]; transposing them is wrong --------------------------------
# vllm#47159 (Triton W4A16 always transposed qzeros: shape assertion at startup on GPTQ models), fixed by
# vllm#47770; when N/8 == G nothing asserts and the output is garbage.

GPTQ_EQ = "w4a16/triton_w4a16/M3-N16-K64-g32-uint4-noao-fp16-gptq_v2-exact-exact-s21"  # N/8 = G = 2: silent
GPTQ_NE = "w4a16/triton_w4a16/M3-N64-K128-g64-uint4-noao-bf16-gptq_v2-exact-exact-s22"  # (2, 8) vs (8, 2)
AWQ_EQ = "w4a16/triton_w4a16/M7-N24-K96-g32-uint4-noao-fp16-awq-exact-exact-s23"  # N/8 = G = 3


@given(case=scenario_cases(ASYM_KERNELS, weight_types=("uint4",), formats=("gptq_v1", "gptq_v2", "awq"),
                           n8_eq_g=True))
@example(case=_id(GPTQ_EQ))
@example(case=_id(GPTQ_NE))
@example(case=_id(AWQ_EQ))
@example(case=_id(AWQ_EQ).with_kernel("rdna_hybrid_w4a16"))
def test_gptq_zero_points_not_transposed(case):
    _passes(case)


# ---- the +1 of GPTQ v1 follows the checkpoint convention and the weight type, never "has zero points" -----------
# docs/shipped-bugs.md; the convention split is AutoGPTQ#325 (zeros -= 1 removed, old checkpoints broke) and
# AutoGPTQ#640 (checkpoint_format gptq_v2). v1 uint4 stores z - 1 explicitly (must add 1); v1 uint4b8 still
# carries qzeros = 7 (must use the bias 8); v2 uint4b8 carries 8 (must not add 1).

V1_ASYM = "w4a16/triton_w4a16/M5-N32-K256-g64-uint4-noao-fp16-gptq_v1-exact-exact-s31"
V1_SYM = "w4a16/triton_w4a16/M5-N32-K256-g64-uint4b8-noao-bf16-gptq_v1-exact-exact-s32"
V2_SYM = "w4a16/rdna3_w4a16/M5-N32-K256-g64-uint4b8-noao-fp16-gptq_v2-exact-exact-s33"


@given(case=scenario_cases(ALL_KERNELS, formats=("gptq_v1", "gptq_v2")))
@example(case=_id(V1_ASYM))
@example(case=_id(V1_SYM))
@example(case=_id(V2_SYM))
@example(case=_id(V1_SYM).with_kernel("rdna3_w4a16"))
@example(case=_id(V1_ASYM).with_kernel("rdna_hybrid_w4a16"))
def test_v1_offset_follows_convention(case):
    _passes(case)


# ---- a GPTQ v2 checkpoint must not be read as v1 ----------------------------------------------------------------
# vllm#26343 (v2 read as v1: every weight one scale off, the model emits "!!!!"), fixed by vllm#26092;
# vllm#38966: checkpoints labelled "gptq" that store v2 zeros (symmetric 4-bit: 8 where v1 stores 7).

V2_ASYM = "w4a16/triton_w4a16/M9-N40-K256-g128-uint4-noao-bf16-gptq_v2-exact-exact-s41"
V2_SYM_TRITON = "w4a16/triton_w4a16/M9-N40-K256-g128-uint4b8-noao-fp16-gptq_v2-exact-exact-s42"


@given(case=scenario_cases(ALL_KERNELS, formats=("gptq_v2",)))
@example(case=_id(V2_ASYM))
@example(case=_id(V2_SYM_TRITON))
@example(case=_id(V2_SYM_TRITON).with_kernel("rdna3_w4a16"))
def test_v2_not_read_as_v1(case):
    _passes(case)


# ---- GPTQ v1 with a zero point of 0 (the int32 borrow) -------------------------------------------------------------
# v1 cannot store z = 0 (z - 1 = -1): int32 packing borrows from the next nibble. AutoGPTQ#640 ("unsafe math"),
# GPTQModel#2350 (AWQ->ExLlamaV2 repack turned 0 into 15: NaN perplexity), TGI#2120 (zeros of 0 reset to 1).

V1_ZERO = "w4a16/triton_w4a16/M3-N64-K256-g64-uint4-noao-fp16-gptq_v1-exact-exact-s51"
V1_ZERO_AO = "w4a16/triton_w4a16_actorder/M33-N64-K256-g32-uint4-ao-bf16-gptq_v1-exact-exact-s52"


def _has_zero_point_zero(case: Case) -> bool:
    return bool((_weight(case).zeros == 0).any())


@given(case=scenario_cases(ASYM_KERNELS, weight_types=("uint4",), formats=("gptq_v1",), act_order=(False, True)))
@example(case=_id(V1_ZERO))
@example(case=_id(V1_ZERO_AO))
@example(case=_id(V1_ZERO).with_kernel("rdna_hybrid_w4a16"))
@example(case=_id(V1_ZERO_AO).with_kernel("torch_dequant_w4a16"))
def test_v1_zero_point_zero_borrow(case):
    assume(_has_zero_point_zero(case))
    _passes(case)


@pytest.mark.parametrize("text", [V1_ZERO, V1_ZERO_AO])
def test_v1_borrow_examples_contain_the_trap(text):
    """_guard: the pinned cases hold z = 0 below the top nibble, so the stored word really borrowed."""
    case = _id(text)
    w = _weight(case)
    assert _has_zero_point_zero(case)
    slot = torch.nonzero(w.zeros == 0)[:, 1] % 8
    assert bool((slot < 7).any()), f"{text}: every z = 0 sits in the top nibble (no borrow from a neighbour)"
    ckpt = codecs.encode(w, "gptq_v1", v1_zero_policy="borrow")
    naive = codecs.gptq.unpack_qzeros(ckpt.tensors["qzeros"], "v2")  # nibble by nibble: 15 where z - 1 = -1
    assert not torch.equal(naive + 1, w.zeros), "the naive per-nibble reading would not differ"


# ---- a symmetric checkpoint that carries qzeros: the kernel must ignore them ------------------------------------
# vllm#21066 (Machete fed GPTQ's always-allocated qzeros to a symmetric layer; fixes #20974, #20986),
# vllm#47770 (Triton W4A16: uint4b8 passes qzeros=None and the scalar zp_bias), vllm#52637 (same for RDNA hybrid).

SYM_V1 = "w4a16/triton_w4a16/M6-N48-K192-g64-uint4b8-noao-fp16-gptq_v1-exact-exact-s61"
SYM_AWQ = "w4a16/rdna_hybrid_w4a16/M6-N48-K192-g64-uint4b8-noao-bf16-awq-exact-exact-s62"


@given(case=scenario_cases(ALL_KERNELS, weight_types=("uint4b8",), formats=("gptq_v1", "gptq_v2", "awq")))
@example(case=_id(SYM_V1))
@example(case=_id(SYM_AWQ))
@example(case=_id(SYM_V1).with_kernel("rdna3_w4a16"))
def test_symmetric_qzeros_ignored(case):
    _passes(case)


def _runs_for_real(kernel, target, M: int, K: int) -> bool:
    """The harness's rule (harness._execution / run_case): apply runs only where the kernel is available and not
    modelled, and never for a simulated GPU target that is not this machine's (a ROCm kernel on a CUDA host)."""
    if kernel.availability(target) is not None:
        return False
    mode = kernel.run_mode_for(M, K, target)
    return mode != "model" and not (target.is_gpu and target != detect_target())


def _run_kernel(kernel, target, ckpt, x):
    """The kernel's output for x (on CPU): apply on this machine's kernel device where it runs for real, else
    its model on CPU, as run_case does."""
    ops = kernel.load(ckpt)
    if _runs_for_real(kernel, target, x.shape[0], x.shape[1]):
        return kernel.apply(ops, x.to(kernel_device())).cpu()
    return kernel.model(ops, x)


@pytest.mark.parametrize("kernel_name", ALL_KERNELS)
@pytest.mark.parametrize("fmt", ["gptq_v1", "gptq_v2", "awq"])
def test_symmetric_garbage_qzeros_ignored(kernel_name, fmt):
    """A uint4b8 checkpoint whose qzeros hold random nibbles (not the bias) gives bit-identical, exact output."""
    k, t = registry.get_kernel(kernel_name), _target(kernel_name)
    cfg = W4A16Config(weight_type="uint4b8", group_size=32, act_order=False, dtype="float16", format=fmt,
                      N=32, K=128)
    if k.can_implement(cfg, t) is not None:
        pytest.skip(f"{kernel_name} refuses {fmt}: {k.can_implement(cfg, t)}")
    w = random_canonical(128, 32, 32, "uint4b8", torch.float16, "exact", 71)
    x = random_activations(17, 128, torch.float16, "exact", 71)
    ckpt = codecs.encode(w, fmt)
    assert "qzeros" in ckpt.tensors  # GPTQ and AWQ writers emit qzeros for symmetric layers too
    garbage = torch.randint(-2 ** 31, 2 ** 31 - 1, ckpt.tensors["qzeros"].shape, dtype=torch.int64,
                            generator=torch.Generator().manual_seed(5)).to(torch.int32)
    tampered = codecs.encode(w, fmt)
    tampered.tensors["qzeros"] = garbage
    y_clean = _run_kernel(k, t, ckpt, x)
    y_garbage = _run_kernel(k, t, tampered, x)
    assert torch.equal(y_clean.view(torch.int16), y_garbage.view(torch.int16))
    torch.testing.assert_close(y_garbage, reference_gemm(x, w).to(torch.float16), rtol=0, atol=0)


# ---- the uint4 checkpoint that lands on a slower kernel: selection must say so ------------------------------------
# docs/shipped-bugs.md and vllm#46186 (cadamcat): RDNA3W4A16 serves uint4b8 only, so every asymmetric
# (AWQ / compressed-tensors symmetric:false) checkpoint on gfx1100 silently moves down the priority list.

@given(group=st.sampled_from((32, 64, 128, -1, 256)), fmt=st.sampled_from(("gptq_v2", "awq", "compressed_tensors")),
       dtype=st.sampled_from(("float16", "bfloat16")))
@example(group=128, fmt="awq", dtype="float16")
@example(group=-1, fmt="compressed_tensors", dtype="bfloat16")
def test_uint4_on_gfx1100_selection_is_reported(group, fmt, dtype):
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


UINT4_GFX1100 = "w4a16/rdna_hybrid_w4a16/M7-N64-K256-g32-uint4-noao-fp16-awq-exact-exact-s81"


@given(case=scenario_cases(("rdna_hybrid_w4a16",), weight_types=("uint4",), formats=("awq", "compressed_tensors")))
@example(case=_id(UINT4_GFX1100))
def test_uint4_on_gfx1100_selected_kernel_is_exact(case):
    sel = registry.select(case.config(), parse_target("gfx1100"))
    assert sel.selected.name == case.kernel
    _passes(case)


# ---- BLOCK_K must not exceed the group size ---------------------------------------------------------------------
# vllm#39705: with BLOCK_K > group_size a K tile straddles groups and uses one group's scale (group-32 models
# looped on tool calls past 10K tokens). Our interpreter table has BLOCK_K = 128 and the GPU table 64/128:
# the wrapper's clamp must hold for every table entry.

BK_SPLITK = "w4a16/triton_w4a16/M3-N64-K256-g32-uint4-noao-fp16-gptq_v2-exact-exact-s91"  # M <= 16: split-K row
BK_BIG_M = "w4a16/triton_w4a16/M33-N64-K256-g32-uint4b8-noao-bf16-gptq_v2-exact-exact-s92"
BK_AO = "w4a16/triton_w4a16_actorder/M40-N16-K512-g64-uint4-ao-fp16-compressed_tensors-exact-exact-s93"


@given(case=scenario_cases(("triton_w4a16", "triton_w4a16_actorder"), formats=("gptq_v2", "awq"),
                           act_order=(False, True), groups=(32, 64)))
@example(case=_id(BK_SPLITK))
@example(case=_id(BK_BIG_M))
@example(case=_id(BK_AO))
def test_block_k_clamped_to_group(case):
    assume(case.K > case.group_size)  # one group: nothing to straddle
    from conformance_kernels import triton_w4a16 as tw

    tw._LAST_LAUNCH.clear()  # a stale record of an earlier test's launch must not answer for this case
    _passes(case)
    launch = tw.last_launch_config()
    assert launch, f"{case.id}: the Triton kernel never launched (ran as its model on {_target(case.kernel)})"
    assert (launch["M"], launch["N"], launch["K"]) == (case.M, case.N, case.K), (case.id, launch)
    bk = launch["block_k"]
    assert case.group_size % bk == 0, f"{case.id}: launched BLOCK_K={bk} straddles group_size={case.group_size}"


@pytest.mark.parametrize("device_kind", ["interpreter", "gpu"])
@pytest.mark.parametrize("group", [32, 64])
def test_block_k_clamp_holds_for_every_table_entry(device_kind, group):
    from conformance_kernels import triton_w4a16 as tw

    for max_m, cfg in tw.TILE_TABLE[device_kind]:
        assert cfg.block_k > group or device_kind == "gpu"  # the table really offers tiles wider than the group
        fitted = tw.fit_tiles(cfg, max_m or 64, 256, 8 * group, group)
        assert group % fitted.block_k == 0, (device_kind, cfg, fitted)


@pytest.mark.parametrize("block_k", [64, 128])
def test_block_k_override_is_clamped(block_k):
    """An explicit tile override with BLOCK_K 64/128 on group 32 still launches BLOCK_K <= 32, and is exact."""
    from conformance_kernels import triton_w4a16 as tw
    from conformance_kernels._w4a16_common import to_device

    k = registry.get_kernel("triton_w4a16")
    w = random_canonical(256, 64, 32, "uint4", torch.float16, "exact", 95)
    x = random_activations(20, 256, torch.float16, "exact", 95)
    dev = kernel_device()  # cuda on a GPU host: the launch takes device tensors there
    o = to_device(k.load(codecs.encode(w, "gptq_v2")), dev)
    y = tw.launch_w4a16_gemm(x.to(dev), o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias,
                             tiles=tw.TileConfig(32, 64, block_k)).cpu()
    assert tw.last_launch_config()["block_k"] <= 32
    torch.testing.assert_close(y, reference_gemm(x, w).to(torch.float16), rtol=0, atol=0)


# ---- act-order must be applied, or refused, never ignored ------------------------------------------------------
# docs/formats.md, section 3: real GPTQ checkpoints use desc_act=True; vLLM kernels without g_idx support must
# refuse them (upstream gates: "act-order (g_idx) not supported"), and the ones that accept must permute K.

AO_V1 = "w4a16/triton_w4a16_actorder/M5-N32-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s101"
AO_CT = "w4a16/torch_dequant_w4a16/M5-N32-K256-g64-uint4b8-ao-bf16-compressed_tensors-exact-exact-s102"
AO_RDNA3 = "w4a16/rdna3_w4a16/M5-N32-K256-g32-uint4b8-ao-fp16-gptq_v2-exact-exact-s103"


def _g_idx_is_trivial(case: Case) -> bool:
    w = _weight(case)
    return w.g_idx is None or bool(torch.equal(w.g_idx.long(), torch.arange(case.K) // w.gs))


@given(case=scenario_cases(("triton_w4a16_actorder", "torch_dequant_w4a16", "rdna3_w4a16"),
                           formats=("gptq_v1", "gptq_v2", "compressed_tensors"), act_order=(True,)))
@example(case=_id(AO_V1))
@example(case=_id(AO_CT))
@example(case=_id(AO_RDNA3))
def test_act_order_applied(case):
    assume(not _g_idx_is_trivial(case))
    _passes(case)


@pytest.mark.parametrize("text", [AO_V1, AO_CT, AO_RDNA3])
def test_act_order_examples_contain_the_trap(text):
    """_guard: the pinned act-order cases have a g_idx that is not k // group_size."""
    assert not _g_idx_is_trivial(_id(text))


@pytest.mark.parametrize("kernel_name", ["triton_w4a16", "rdna_hybrid_w4a16"])
def test_act_order_refused_not_ignored(kernel_name):
    """Kernels without act-order refuse it in the gate and in load (a non-trivial g_idx is an error, not dropped)."""
    k, t = registry.get_kernel(kernel_name), _target(kernel_name)
    case = _id(AO_V1).with_kernel(kernel_name)
    assert "act-order" in (k.can_implement(case.config(), t) or "")
    ckpt = codecs.encode(_weight(case), "gptq_v1", v1_zero_policy="borrow")
    with pytest.raises(Exception, match="g_idx"):
        k.load(ckpt)


# ---- bf16 activations must be dequantized in bf16, not through fp16 -------------------------------------------
# A kernel that dequantizes a bf16 layer's weights through fp16 loses every scale outside fp16's range (bf16
# scales reach 2^-60 in the extreme_scales regime): exact-tier data (power-of-two scales inside both ranges) can
# never see it, so this one is pinned in the statistical tier. The CI budget's random draws alone missed it
# (docs/proof-of-power.md); the broken kernel fails this example at an error ratio of ~70.
BF16_EXTREME = "w4a16/triton_w4a16/M5-N64-K256-g64-uint4b8-noao-bf16-gptq_v2-extreme_scales-statistical-s0"


@given(case=st.builds(
    lambda kernel, seed, M, wt, fmt: Case("w4a16", kernel, "extreme_scales", "statistical", seed, 64, "bfloat16",
                                          M=M, N=64, K=256, weight_type=wt, act_order=False, format=fmt),
    st.sampled_from(("triton_w4a16", "triton_w4a16_actorder", "torch_dequant_w4a16")), st.integers(0, 2**16),
    st.sampled_from((1, 5, 17)), st.sampled_from(("uint4", "uint4b8")), st.sampled_from(("gptq_v2", "awq"))))
@example(case=_id(BF16_EXTREME))
def test_bf16_dequantized_in_bf16(case):
    _passes(case)


def test_bf16_example_contains_the_trap():
    """_guard: the pinned bf16 case has scales fp16 cannot hold (below its smallest subnormal, 2^-24)."""
    w = _weight(_id(BF16_EXTREME))
    assert float(w.scales.float().abs().min()) < 2.0 ** -24
