"""The RDNA W4A16 kernels (rdna3_w4a16, rdna_hybrid_w4a16): gates, load steps read back through each kernel's
model, and the hybrid's Triton skinny GEMM in the interpreter, bit-exact on exact-tier cases against
reference_gemm(x, w).to(dtype); nibble placement against hand-written words; dispatch and run modes.

Shapes are small and tiles forced on purpose so several programs and M/N tails run in the interpreter. The
hybrid's Triton path takes its inputs on the kernels' device (tests/unit/devices.py): compiled on a GPU machine.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from conformance.core import registry
from conformance.core.runtime import interpreting
from conformance.core.targets import CPU, parse_target
from conformance.families.config import W4A16Config
from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import InvalidInput
from references.gemm import reference_gemm
from references.generators import random_activations, random_canonical
from references.weight import CanonicalWeight
from tests.unit.devices import DEV, on_dev

registry.load_all()
hy = importlib.import_module("conformance_kernels.rdna_hybrid_w4a16")
r3 = importlib.import_module("conformance_kernels.rdna3_w4a16")
RDNA3 = registry.get_kernel("rdna3_w4a16")
HYB = registry.get_kernel("rdna_hybrid_w4a16")
DTYPES = [torch.float16, torch.bfloat16]
GFX1100, GFX1151, GFX1201 = parse_target("gfx1100"), parse_target("gfx1151"), parse_target("gfx1201")


def _codecs():
    from references import codecs

    return codecs


def cfg(**kw):
    base = dict(weight_type="uint4b8", group_size=128, act_order=False, dtype="float16", N=4096, K=4096)
    base.update(kw)
    return W4A16Config(**base)


def exact_case(K, N, gs, wtype, dtype, fmt, M, seed, act_order=False):
    """(canonical weight, checkpoint in `fmt`, x, expected y) for one exact-tier case."""
    w = random_canonical(K, N, gs, wtype, dtype, "exact", seed, act_order=act_order)
    # v1 cannot store a zero point of 0 as a nibble: write it with the borrow policy real v1 writers follow
    ckpt = _codecs().encode(w, fmt, **({"v1_zero_policy": "borrow"} if fmt == "gptq_v1" else {}))
    x = random_activations(M, K, dtype, "exact", seed)
    return w, ckpt, x, reference_gemm(x, w).to(dtype)


def assert_bits(y, expected):
    torch.testing.assert_close(y.cpu(), expected.cpu(), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ gates

def test_rdna3_refuses_uint4_on_gfx1100_with_reason():
    reason = RDNA3.can_implement(cfg(weight_type="uint4"), GFX1100)
    assert reason and "uint4" in reason and "uint4b8 only" in reason


def test_gfx1151_refused_by_rdna3_served_by_hybrid():
    reason = RDNA3.can_implement(cfg(), GFX1151)
    assert reason and "garbage" in reason and "lemonade-sdk/vllm-rocm#24" in reason
    assert HYB.can_implement(cfg(), GFX1151) is None
    sel = registry.select(cfg(), GFX1151, kernels=[RDNA3, HYB])
    assert sel.selected is HYB and "rdna3_w4a16" in sel.refused


@pytest.mark.parametrize("arch", ["gfx1101", "gfx1201", "gfx942"])
def test_rdna3_is_gfx1100_only(arch):
    assert "gfx1100 only" in RDNA3.can_implement(cfg(), parse_target(arch))


def test_hybrid_serves_gfx11_and_gfx12_only():
    for arch in ("gfx1100", "gfx1151", "gfx1201", "gfx1200"):
        assert HYB.can_implement(cfg(weight_type="uint4"), parse_target(arch)) is None, arch
    assert "gfx11/gfx12" in HYB.can_implement(cfg(), parse_target("gfx942"))
    for t in (CPU, parse_target("sm90")):
        assert "ROCm" in HYB.can_implement(cfg(), t) and "ROCm" in RDNA3.can_implement(cfg(), t)


def test_selection_on_gfx1100_prefers_rdna3_and_says_why_uint4_falls_to_hybrid():
    assert registry.select(cfg(), GFX1100, kernels=[RDNA3, HYB]).selected is RDNA3
    sel = registry.select(cfg(weight_type="uint4"), GFX1100, kernels=[RDNA3, HYB])
    assert sel.selected is HYB and "uint4b8 only" in sel.refused["rdna3_w4a16"]


@pytest.mark.parametrize("kw, rdna3_says, hybrid_says", [
    (dict(group_size=-1), "channelwise", "channelwise"),
    (dict(group_size=256), None, "group_size=256"),
    (dict(group_size=16, K=64), None, "group_size=16"),
    (dict(N=4100), "N=4100", "N=4100"),
    (dict(K=4128, group_size=64), "K=4128", "K=4128"),  # 4128 % 64 != 0 (and % 16 == 0)
    (dict(K=40, group_size=32), "K=40", "multiple of 16"),
    (dict(act_order=True), None, "act-order"),
    (dict(weight_type="uint8b128"), "uint8b128", "uint8b128"),
])
def test_config_gates(kw, rdna3_says, hybrid_says):
    for kernel, says in ((RDNA3, rdna3_says), (HYB, hybrid_says)):
        reason = kernel.can_implement(cfg(**kw), GFX1100)
        if says is None:
            assert reason is None, (kernel.name, reason)
        else:
            assert reason and says in reason, (kernel.name, reason)


def test_gates_are_pure_and_accept_both_act_dtypes():
    for dtype in ("float16", "bfloat16"):
        assert RDNA3.can_implement(cfg(dtype=dtype), GFX1100) is None
        assert HYB.can_implement(cfg(dtype=dtype, weight_type="uint4", group_size=32), GFX1201) is None


def test_rdna3_not_available_without_the_hip_op():
    if r3.hip_op() is None:
        assert "ROCm" in RDNA3.availability(GFX1100) or "not built" in RDNA3.availability(GFX1100)
        assert RDNA3.run_mode(GFX1100) == "model"


# ------------------------------------------------------------------- hybrid Triton skinny GEMM: placement

def _skinny(x, qweight, scales, zeros, gs, zp_bias, tiles=(16, 16, 16)):
    """The Triton skinny GEMM on DEV (a padded qweight keeps its row stride there: HYB's own placement)."""
    ops = hy.HybridOperands(qweight, scales, zeros, "", zp_bias, gs, x.shape[1], qweight.shape[0])
    with hy.forced_tiles(*tiles):
        return hy.skinny_gemm(*HYB.op_args(ops, x.to(DEV)))


def test_skinny_reads_nibbles_from_hand_written_words():
    # K=32 (one group), N=16. Row n of qweight holds the same word for every K/8 slot. Interleaved order: slot j
    # (bits 4j) holds logical k = [0,2,4,6,1,3,5,7][j], so word 0x76543210 stores q[k] = [0,4,1,5,2,6,3,7].
    K, N, gs = 32, 16, 32
    qweight = torch.full((N, K // 8), 0x76543210, dtype=torch.int32)
    x = torch.zeros((16, K), dtype=torch.float16)
    x[torch.arange(8), torch.arange(8)] = 1  # row m picks input k = m
    scales = torch.ones((N, 1), dtype=torch.float16)
    y = _skinny(x, qweight, scales, None, gs, 0)
    expected_q = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7], dtype=torch.float16)
    assert torch.equal(y[:8, 0].cpu(), expected_q)
    # packed zeros [N/8, G]: word 0x76543210 sequential along N gives z[n] = n % 8
    zeros = torch.full((N // 8, 1), 0x76543210, dtype=torch.int32)
    y = _skinny(x, qweight, scales, zeros, gs, 0)
    z = torch.arange(N) % 8
    assert torch.equal(y[:8].cpu(), (expected_q[:, None] - z[None, :]).to(torch.float16))


def test_skinny_block_k_must_not_straddle_groups():
    x = torch.zeros((16, 64), dtype=torch.float16)
    qweight = torch.zeros((16, 8), dtype=torch.int32)
    scales = torch.ones((16, 2), dtype=torch.float16)
    with pytest.raises(InvalidInput, match="BLOCK_K"):
        _skinny(x, qweight, scales, None, 32, 8, tiles=(16, 16, 64))
    for gs in (32, 64, 128):
        for M in (6, 100, 5000):
            assert gs % hy.skinny_tiles(M, 4096, 4096, gs).block_k == 0


def test_skinny_op_fake_impl_matches_shape_without_computing():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty((7, 64), dtype=torch.bfloat16)
        y = hy.skinny_gemm(x, torch.empty((24, 8), dtype=torch.int32), torch.empty((24, 2), dtype=torch.bfloat16),
                           None, 32, 8)
        z = hy.hybrid_apply(x, torch.empty((24, 8), dtype=torch.int32), torch.empty((24, 2), dtype=torch.bfloat16),
                            None, 32, 8)
    for t in (y, z):
        assert t.shape == (7, 24) and t.dtype == torch.bfloat16


# --------------------------------------------------------------------------------------- hybrid dispatch

def test_hybrid_dispatch_follows_runtime_m_and_reports_run_mode():
    assert hy.gemv_route(5, 4096) and not hy.gemv_route(6, 4096) and not hy.gemv_route(5, 8192)
    assert hy.gemv_route(1, 32768) and not hy.gemv_route(2, 32768)
    gemv_mode = "device" if hy.gemv_availability() is None else "model"
    triton_mode = "interpreter" if interpreting() else "device"
    assert HYB.run_mode_for(1, 4096, GFX1151) == gemv_mode
    assert HYB.run_mode_for(6, 4096, GFX1151) == triton_mode
    w, ckpt, _, _ = exact_case(64, 16, 32, "uint4b8", torch.float16, "gptq_v2", 1, seed=3)
    ops = HYB.load(ckpt)
    for M, path in ((1, "gemv"), (5, "gemv"), (6, "triton"), (17, "triton")):
        x = random_activations(M, 64, torch.float16, "exact", seed=M)
        y = HYB.apply(ops, on_dev(x))
        assert hy.LAST_LAUNCH["path"].startswith(path) and hy.LAST_LAUNCH["M"] == M
        assert hy.LAST_LAUNCH["run_mode"] == HYB.run_mode_for(M, 64, GFX1151)
        launch = HYB.launch_config()
        assert ("block_k" in launch) == (path == "triton") and launch.get("block_k", 32) <= 32
        assert_bits(y, reference_gemm(x, w).to(torch.float16))


# ------------------------------------------------------------------------- exact tier through every format

FORMATS = list(CHECKPOINT_FORMATS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS)
def test_rdna3_model_exact(fmt, dtype):
    # K <= 256: one split of the HIP kernel, so its act-dtype split-K sum adds nothing to round
    for seed, (K, gs, act_order) in enumerate([(256, 64, False), (128, 32, True)]):
        if act_order and fmt == "awq":
            continue  # AWQ has no g_idx
        w, ckpt, x, expected = exact_case(K, 24, gs, "uint4b8", dtype, fmt, 3, seed=seed, act_order=act_order)
        ops = RDNA3.load(ckpt)
        assert (ops.q_perm is not None) == act_order
        assert_bits(RDNA3.model(ops, x), expected)


def test_rdna3_stores_v1_zeros_seven_for_uint4b8_from_v1_and_v2_checkpoints():
    for fmt in ("gptq_v1", "gptq_v2"):
        _, ckpt, _, _ = exact_case(64, 16, 32, "uint4b8", torch.float16, fmt, 1, seed=1)
        ops = RDNA3.load(ckpt)
        assert ops.qzeros.shape == (2, 2) and torch.all(ops.qzeros == 0x77777777)


def test_rdna3_q_perm_is_argsort_of_g_idx():
    w, ckpt, _, _ = exact_case(64, 16, 32, "uint4b8", torch.float16, "gptq_v2", 1, seed=5, act_order=True)
    ops = RDNA3.load(ckpt)
    assert torch.equal(w.g_idx[ops.q_perm.long()].long(), torch.arange(64) // 32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS)
def test_hybrid_exact_models_and_triton(fmt, dtype):
    K, N, gs = 128, 24, 32
    for seed, (wtype, form) in enumerate([("uint4", "packed"), ("uint4", "unpacked"), ("uint4b8", "packed")]):
        w, ckpt, x, expected = exact_case(K, N, gs, wtype, dtype, fmt, 20, seed=seed)
        ops = HYB.load(ckpt, zero_form=form)
        assert ops.zero_form == (form if wtype == "uint4" else "none")
        assert_bits(HYB.model(ops, x), expected)  # M=20: the Triton path's numerics
        assert_bits(HYB.model(ops, x[:3]), expected[:3])  # M=3: the GEMV's numerics
        # M and N tails: 2 x 2 programs of 16 x 16, one K tile per group (tiles inside a group: padded-row test)
        assert_bits(_skinny(x, *ops.args(), tiles=(16, 16, 32)), expected)


def test_hybrid_padded_row_stride():
    w, ckpt, x, expected = exact_case(64, 16, 32, "uint4", torch.float16, "compressed_tensors", 18, seed=9)
    ops = HYB.load(ckpt, row_pad=4)
    assert ops.qweight.stride(0) == 64 // 8 + 4
    assert_bits(_skinny(x, *ops.args()), expected)  # K tiles of 16 inside groups of 32
    assert_bits(HYB.model(ops, x), expected)


def _v1_weight_with_zero_points_of_zero(dtype):
    w = random_canonical(64, 16, 32, "uint4", dtype, "exact", 11)
    zeros = w.zeros.clone()
    zeros[0, :3] = 0
    zeros[1, 5] = 0
    return CanonicalWeight(q=w.q, scales=w.scales, zeros=zeros, g_idx=None, group_size=32, wtype="uint4")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hybrid_reads_v1_borrowed_zero_points(dtype):
    w = _v1_weight_with_zero_points_of_zero(dtype)
    ckpt = _codecs().encode(w, "gptq_v1", v1_zero_policy="borrow")
    x = random_activations(18, 64, dtype, "exact", 11)
    expected = reference_gemm(x, w).to(dtype)
    for form in hy.ZERO_FORMS:
        ops = HYB.load(ckpt, zero_form=form)
        assert_bits(HYB.model(ops, x), expected)
        assert_bits(_skinny(x, *ops.args()), expected)


def test_rdna3_load_refuses_zero_points_it_cannot_hold():
    ckpt = _codecs().encode(_v1_weight_with_zero_points_of_zero(torch.float16), "gptq_v1", v1_zero_policy="borrow")
    with pytest.raises(InvalidInput, match="zero points"):
        RDNA3.load(ckpt)


def test_hybrid_load_refuses_act_order():
    _, ckpt, _, _ = exact_case(64, 16, 32, "uint4", torch.float16, "gptq_v2", 1, seed=2, act_order=True)
    with pytest.raises(InvalidInput, match="g_idx"):
        HYB.load(ckpt)
