"""Test-only broken W4A16 kernels, loaded as a conformance plugin: each is a real kernel with ONE known bug.

Every bug here shipped somewhere (docs/shipped-bugs.md) or is a classic tiling slip. The proof-of-power
tests (tests/conformance/test_proof_of_power.py) and benchmarks/proof_of_power.py check that the suite's own
strategies + harness catch each one with a replayable case id.

Load only inside a test: `registry.load_plugin(PLUGIN)` then `register_all()`, and `unregister_all()` in the
teardown, or the suites collected afterwards would parametrize over these kernels. Each subclass keeps its
parent's gate and declared numerics, so the strategies draw exactly the parent's cases.

The Triton bugs change the Triton code for real: `_mutant_gemm_kernel` is a copy of triton_w4a16's kernel on the
path the interpreter tile table takes (PACKED_LOAD=False, USE_DOT=True, SWAP_AB=False, masked loads) with one
constexpr flag per bug (all False = the shipped kernel on the same tiles, checked bit for bit against
launch_w4a16_gemm by the proof-of-power test, so a change to the shipped numerics shows up there first), and
`launch_mutant` is a copy of its wrapper (fit_tiles and the split-K reduction are the shipped ones) whose only
optional change is the missing clamp. It runs wherever the shipped kernel does: on CPU tensors in the interpreter
with the shipped interpreter table, on CUDA tensors with MUTANT_GPU_TILES (the shipped GPU tables choose packed
loads, swap_ab, the dot-free GEMV path and auto split-K, none of which this copy has).
"""
from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from conformance.core import registry
from conformance.core.registry import register_kernel
from references.codecs import gptq as gptq_codec
from references.codecs import operands as ops

registry.load_all()
from conformance_kernels import _w4a16_common as common  # noqa: E402 - the built-in package exists after load_all
from conformance_kernels import triton_w4a16 as tw  # noqa: E402

PLUGIN = "tests.unit.broken_kernels"
TritonW4A16 = type(registry.get_kernel("triton_w4a16"))
TritonW4A16ActOrder = type(registry.get_kernel("triton_w4a16_actorder"))
TorchDequantW4A16 = type(registry.get_kernel("torch_dequant_w4a16"))


@triton.jit
def _mutant_gemm_kernel(
    a_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, group_size, tiles_per_split,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DEQ_VIA_FP16: tl.constexpr, LAST_N_TILE_OFF_BY_ONE: tl.constexpr, SKIP_M_TAIL: tl.constexpr,
):
    """triton_w4a16's _w4a16_gemm_kernel (PACKED_LOAD=False, USE_DOT=True path) plus three bug switches."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    if LAST_N_TILE_OFF_BY_ONE:
        # BUG: a partial last N tile computes its bound as N - 1, so its last column loads no weights
        n_bound = tl.where((pid_n + 1) * BLOCK_N > N, N - 1, N)
        mask_n_load = offs_n < n_bound
    else:
        mask_n_load = mask_n
    shift_n = (offs_n % 8) * 4
    act_ty = a_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, tiles_per_split):
        k0 = (pid_k * tiles_per_split + t) * BLOCK_K
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        words = tl.load(b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] // 8) * stride_bn,
                        mask=mask_k[:, None] & mask_n_load[None, :], other=0)
        q = (words >> shift_n[None, :]) & 0xF
        g = k0 // group_size
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_n_load, other=0.0)
        if HAS_ZP:
            zw = tl.load(z_ptr + g * stride_zg + (offs_n // 8) * stride_zn, mask=mask_n_load, other=0)
            z = (zw >> shift_n) & 0xF
            qz = q - z[None, :]
        else:
            qz = q - ZP_BIAS
        if DEQ_VIA_FP16:
            # BUG: dequantize in fp16 whatever the act dtype (bf16 scales lose range: tiny ones flush to 0)
            w = ((qz.to(tl.float16) * s.to(tl.float16)[None, :]).to(act_ty))
        else:
            w = qz.to(act_ty) * s[None, :]
        acc = tl.dot(a, w, acc)
    mask_m_store = mask_m
    if SKIP_M_TAIL:
        # BUG: rows past the last full BLOCK_M tile are never stored (the output keeps whatever memory held)
        mask_m_store = offs_m < M - M % BLOCK_M
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m_store[:, None] & mask_n[None, :])


# GPU tiles for the mutant: the copied path (tl.dot, per-column weight gathers, explicit split-K), BLOCK_K 128 as in
# the interpreter table, so BLOCK_K exceeds groups 32/64 and the missing clamp straddles them on a GPU too;
# BLOCK_N 64 keeps the gathered [BLOCK_K, BLOCK_N] int32 word tile at 64 registers a thread (4 warps)
MUTANT_GPU_TILES = [
    (16, tw.TileConfig(16, 64, 128, split_k=2, num_warps=4, num_stages=2)),
    (None, tw.TileConfig(64, 64, 128, num_warps=4, num_stages=2)),
]


def mutant_kind(x: torch.Tensor) -> str:
    """'interpreter' for CPU tensors / TRITON_INTERPRET=1 (as tw.launch_w4a16_gemm decides), else 'gpu'."""
    return "interpreter" if (x.device.type == "cpu" or tw.interpreting()) else "gpu"


def mutant_tiles(M: int, kind: str) -> tw.TileConfig:
    """The (unfitted) tile entry the mutant launches for M rows: the shipped interpreter table's, or on a GPU
    MUTANT_GPU_TILES'. Passing it to tw.launch_w4a16_gemm(tiles=...) runs the shipped kernel on the same tiles."""
    if kind == "interpreter":
        return tw.table_tiles(M, "interpreter")
    return next(cfg for max_m, cfg in MUTANT_GPU_TILES if max_m is None or M <= max_m)


def fit_tiles_without_clamp(cfg: tw.TileConfig, M: int, N: int, K: int, group_size: int) -> tw.TileConfig:
    """tw.fit_tiles minus the vllm#39705 fix: BLOCK_K stays the table's, even when it straddles groups."""
    assert cfg.use_dot and cfg.split_k >= 1, f"the mutant copies the tl.dot path with an explicit split-K, not {cfg}"
    bk = min(cfg.block_k, max(16, triton.next_power_of_2(K)))
    bm = min(cfg.block_m, max(16, triton.next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, triton.next_power_of_2(N)))
    k_tiles = triton.cdiv(K, bk)
    sk = max(d for d in range(1, min(cfg.split_k, k_tiles) + 1) if k_tiles % d == 0)
    return replace(cfg, block_m=bm, block_n=bn, block_k=bk, split_k=sk)


BUG_FLAGS = ("DEQ_VIA_FP16", "LAST_N_TILE_OFF_BY_ONE", "SKIP_M_TAIL")


def launch_mutant(x: torch.Tensor, o, *, clamp_block_k: bool = True, **bugs) -> torch.Tensor:
    """tw.launch_w4a16_gemm on _mutant_gemm_kernel: `bugs` switches flags of BUG_FLAGS on; clamp_block_k=False
    drops the BLOCK_K clamp (and the wrapper's straddle assertion, as the pre-fix wrapper had none)."""
    unknown = set(bugs) - set(BUG_FLAGS)
    assert not unknown, f"unknown bug flags {sorted(unknown)}; allowed: {BUG_FLAGS}"
    flags = {f: bool(bugs.get(f, False)) for f in BUG_FLAGS}
    b_q, scales, qzeros, group_size, zp_bias = o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias
    K, N = tw._check_operands(x, b_q, scales, qzeros, group_size, zp_bias)
    M = x.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    kind = mutant_kind(x)
    fit = tw.fit_tiles if clamp_block_k else fit_tiles_without_clamp
    cfg = fit(mutant_tiles(M, kind), M, N, K, group_size)
    if clamp_block_k:
        assert tw._k_tile_fits(cfg.block_k, group_size, K), f"BLOCK_K={cfg.block_k} straddles group_size={group_size}"
    k_tiles = triton.cdiv(K, cfg.block_k)
    splits = cfg.split_k
    tiles_per_split = k_tiles // splits
    has_zp = zp_bias == 0 and qzeros is not None
    z = qzeros if has_zp else b_q
    grid = (triton.cdiv(M, cfg.block_m), triton.cdiv(N, cfg.block_n), splits)
    if splits == 1:
        c, scs = out, 0
    else:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        scs = c.stride(0)
    _mutant_gemm_kernel[grid](
        x, b_q, scales, z, c,
        M, N, K, group_size, tiles_per_split,
        x.stride(0), x.stride(1), b_q.stride(0), b_q.stride(1), scales.stride(0), scales.stride(1),
        z.stride(0), z.stride(1), scs, c.stride(-2), c.stride(-1),
        ZP_BIAS=zp_bias, HAS_ZP=has_zp,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **flags,
    )
    if splits > 1:
        tw._splitk_reduce_kernel[(grid[0], grid[1])](
            c, out, M, N, c.stride(0), c.stride(1), c.stride(2), out.stride(0), out.stride(1),
            SPLIT_K=splits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps,
        )
    tw._LAST_LAUNCH.clear()
    tw._LAST_LAUNCH.update(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, split_k=cfg.split_k,
                           M=M, N=N, K=K, device_kind=kind, mutant=True)
    return out


class _TritonLaunchMutant(TritonW4A16):
    """triton_w4a16 whose apply launches the mutant kernel with `bugs` (and `clamp_block_k`)."""

    bugs: dict = {}
    clamp_block_k = True

    def apply(self, o, x):
        o = common.to_device(o, x.device)
        return tw.gemm_any_rank(x, lambda x2: launch_mutant(x2.contiguous(), o, clamp_block_k=self.clamp_block_k,
                                                             **self.bugs))


# ---- load-step bugs (the Triton kernel itself is the shipped one) ------------------------------------------

@register_kernel
class CtZerosNotTransposed(TritonW4A16):
    """BUG: the compressed-tensors zero points [N/8, G] are reinterpreted as [G, N/8] (a reshape, not a
    transpose). Shapes always agree, so nothing complains; the numbers are wrong when G > 1 and N/8 > 1."""

    name = "broken_ct_zeros_not_transposed"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "compressed_tensors" and o.qzeros is not None:
            G, n8 = o.qzeros.shape
            o.qzeros = checkpoint.tensors["weight_zero_point"].reshape(G, n8).contiguous()
        return o


@register_kernel
class ZerosAlwaysTransposed(TritonW4A16):
    """BUG (vllm#47159): the load step transposes the packed zero points as if every checkpoint stored them
    compressed-tensors style [N/8, G]; GPTQ/AWQ zeros already come as [G, N/8]. Shape error at load when
    G != N/8, silent garbage when G == N/8 (> 1)."""

    name = "broken_zeros_always_transposed"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if o.qzeros is not None:
            z = ops.unpack_zeros_gn(o.qzeros)
            as_stored = ops.pack_zeros_ng(z) if checkpoint.format == "compressed_tensors" else ops.pack_zeros_gn(z)
            o.qzeros = as_stored.t().contiguous()  # right for compressed-tensors only
        return o


@register_kernel
class PlusOneFromHasZeros(TritonW4A16):
    """BUG: decides GPTQ's +1 (v1 convention) from "does the checkpoint carry zero points" instead of from the
    weight type and the checkpoint's convention: stored qzeros are used as-is (no +1, and not ignored for
    uint4b8), the +1/bias only applies when no qzeros tensor exists. Breaks every v1 checkpoint with qzeros."""

    name = "broken_plus_one_from_has_zeros"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format in ("gptq_v1", "gptq_v2") and "qzeros" in checkpoint.tensors:
            stored = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2")  # raw nibbles, no +1
            o.qzeros, o.zp_bias = ops.pack_zeros_gn(stored), 0
        return o


@register_kernel
class V2ReadAsV1(TritonW4A16):
    """BUG (vllm#26343, vllm#38966): every GPTQ checkpoint is read with the v1 convention (stored qzeros + 1,
    as gptq_gemm with use_v2_format=False does, symmetric layers included). Right for v1; for v2 every weight
    is one scale off (a symmetric v2 layer stores 8 and gets 9)."""

    name = "broken_v2_read_as_v1"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format in ("gptq_v1", "gptq_v2") and "qzeros" in checkpoint.tensors:
            z = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v1")  # word + 0x11111111: v1's +1
            o.qzeros, o.zp_bias = ops.pack_zeros_gn(z & 0xF), 0
        return o


@register_kernel
class V1NibbleWisePlusOne(TritonW4A16):
    """BUG: adds GPTQ v1's +1 nibble by nibble ((stored + 1) & 0xF) instead of to the int32 word, so the borrow a
    zero point of 0 left in its neighbour nibble is never undone (AutoGPTQ#640's "unsafe math")."""

    name = "broken_v1_nibble_wise_plus_one"

    def load(self, checkpoint, config=None):
        o = super().load(checkpoint, config)
        if checkpoint.format == "gptq_v1" and o.qzeros is not None:
            stored = gptq_codec.unpack_qzeros(checkpoint.tensors["qzeros"], "v2")
            o.qzeros = ops.pack_zeros_gn((stored + 1) & 0xF)
        return o


@register_kernel
class IgnoresGIdx(TritonW4A16ActOrder):
    """BUG: accepts act-order but never sorts K by g_idx: row k is taken to be in group k // group_size."""

    name = "broken_ignores_g_idx"

    def load(self, checkpoint, config=None):
        from references import codecs

        w = codecs.decode(checkpoint)
        if w.wtype.has_bias():
            qzeros, zp_bias = None, w.wtype.bias
        else:
            qzeros, zp_bias = ops.pack_zeros_gn(w.zeros.contiguous()), 0
        return common.TritonW4A16Operands(ops.triton_pack_qweight(w.q.contiguous()),
                                          w.scales.to(checkpoint.act_dtype).contiguous(), qzeros, zp_bias, w.gs)


# ---- launch / kernel bugs (real Triton changes) --------------------------------------------------------------

@register_kernel
class NoBlockKClamp(_TritonLaunchMutant):
    """BUG (vllm#39705): the wrapper does not clamp BLOCK_K to the group size; a K tile straddling groups
    uses its first group's scale and zero point for all its rows."""

    name = "broken_no_block_k_clamp"
    clamp_block_k = False


@register_kernel
class Bf16DequantViaFp16(_TritonLaunchMutant):
    """BUG: dequantizes bf16 cases through fp16 (scales below fp16's range flush to zero, large ones overflow)."""

    name = "broken_bf16_dequant_via_fp16"
    bugs = {"DEQ_VIA_FP16": True}


@register_kernel
class LastNTileOffByOne(_TritonLaunchMutant):
    """BUG: in a partial last N tile the column bound is N - 1: the last output column gets no weights (0)."""

    name = "broken_last_n_tile_off_by_one"
    bugs = {"LAST_N_TILE_OFF_BY_ONE": True}


@register_kernel
class MTailUnwritten(_TritonLaunchMutant):
    """BUG: rows of M past the last full BLOCK_M tile are never written (uninitialized output)."""

    name = "broken_m_tail_unwritten"
    bugs = {"SKIP_M_TAIL": True}


# ---- numerics bug (plain torch kernel) ---------------------------------------------------------------------

@register_kernel
class Fp16Accumulator(TorchDequantW4A16):
    """BUG: accumulates the dot products in an fp16 running sum (one fp16 rounding per k) while declaring fp32.
    Products are exact (fp32 FMA, rounded once into the fp16 sum), as an HFMA-style accumulation does."""

    name = "broken_fp16_accumulator"

    def apply(self, w, x):
        from conformance_kernels.torch_dequant_w4a16 import dequantize_act

        wd = dequantize_act(w, x.dtype, x.device).float()
        x2 = x.reshape(-1, w.K).float()
        acc = torch.zeros((x2.shape[0], w.N), dtype=torch.float16, device=x.device)
        for k in range(w.K):
            acc = torch.addcmul(acc.float(), x2[:, k:k + 1], wd[k:k + 1]).to(torch.float16)
        return acc.to(x.dtype).reshape(*x.shape[:-1], w.N)


BROKEN = {c.name: c for c in (CtZerosNotTransposed, ZerosAlwaysTransposed, PlusOneFromHasZeros, V2ReadAsV1,
                              V1NibbleWisePlusOne, IgnoresGIdx, NoBlockKClamp, Bf16DequantViaFp16, LastNTileOffByOne,
                              MTailUnwritten, Fp16Accumulator)}
# the correct kernel each broken one is a variant of (same gate, same strategies)
BASE = {name: next(b for b in cls.__mro__[1:] if b in (TritonW4A16, TritonW4A16ActOrder, TorchDequantW4A16)).name
        for name, cls in BROKEN.items()}


def register_all() -> None:
    """(Re-)register every broken kernel (after an earlier unregister_all in this process)."""
    for cls in BROKEN.values():
        register_kernel(cls)


def unregister_all() -> None:
    for name in BROKEN:
        registry.unregister_kernel(name)
