"""RDNA hybrid W4A16 (upstream RDNAHybridW4A16LinearKernel): HIP split-K GEMV for decode, Triton skinny GEMM else.

Operands (one weight copy for both paths): qweight int32 [N, K/8] packed along K in the interleaved (exllama)
nibble order, rows possibly padded (stride(0) >= K/8); scales [N, G] in the act dtype; zero points raw z in one
of the two upstream forms -- packed int32 [N/8, G] (newer) or unpacked [N, G] in the act dtype (older
wvSplitK_int4_g) -- or none for uint4b8 (constant zero 8).
Dispatch on the runtime M, inside one opaque custom op: `M <= 5 and K*M <= 32768` -> HIP
`torch.ops._rocm_C.wvSplitK_int4_g` (or its plain-torch model when the op is absent); larger M -> our Triton
skinny GEMM on the same layout (dequantize into the act dtype, fp32 accumulate, one group per K tile).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from conformance.core import runtime
from conformance.core.launch import Launch, Ptr, triton_program
from conformance.core.registry import Kernel, register_kernel
from conformance.core.targets import Target
from conformance.families.config import act_dtype
from references import packing
from references.errors import require

from ._device import check_x_device
from ._w4a16_common import _codecs, sorted_g_idx_is_contiguous

SUPPORTED_GROUP_SIZES = (32, 64, 128)
SUPPORTED_WTYPES = ("uint4b8", "uint4")
GEMV_MAX_M = 5  # the HIP skinny kernel is instantiated for N_in (our M) up to 5
GEMV_LDS_ELEMENTS = 64 * 1024 // 2  # activations M*K must fit one workgroup's 64 KiB LDS as 16-bit values
ZERO_FORMS = ("packed", "unpacked")

# How the last call ran: dispatch path, tiles, run mode. Tests and contract checks read it.
LAST_LAUNCH: dict = {}


def gemv_route(M: int, K: int) -> bool:
    """True when upstream sends this call to the HIP split-K GEMV (decode), False for the Triton GEMM."""
    return M <= GEMV_MAX_M and K * M <= GEMV_LDS_ELEMENTS


def gemv_hip_op():
    """The HIP GEMV op handle, or None where it is not built (not ROCm, or vLLM's _rocm_C not loaded)."""
    if getattr(torch.version, "hip", None) is None:
        return None
    ns = getattr(torch.ops, "_rocm_C", None)
    return getattr(ns, "wvSplitK_int4_g", None) if ns is not None else None


def gemv_availability() -> str | None:
    """None if the HIP GEMV can run here, else why not."""
    if getattr(torch.version, "hip", None) is None:
        return "HIP GEMV needs a ROCm build of torch (torch.version.hip is None)"
    if gemv_hip_op() is None:
        return "torch.ops._rocm_C.wvSplitK_int4_g is not built (load vLLM's _rocm_C extension)"
    if not torch.cuda.is_available():
        return "no ROCm device visible"
    return None


def triton_availability() -> str | None:
    """None if the Triton skinny GEMM can run here (interpreter or GPU), else why not."""
    if runtime.interpreting() or torch.cuda.is_available():
        return None
    return "no GPU and TRITON_INTERPRET is off: the Triton skinny GEMM cannot run"


def triton_run_mode() -> str:
    return "interpreter" if runtime.interpreting() else "device"


# ----------------------------------------------------------------------------------------------------------
# Triton skinny GEMM on the [N, K/8] layout
# ----------------------------------------------------------------------------------------------------------

# Nibble positions come from references.packing (the one place that knows nibble orders): entries 0-7 are the
# bit shift of logical value j inside a weight word (interleaved), entries 8-15 inside a packed zero word
# (sequential). The kernel loads this table instead of hard-coding a second copy of either order.
_SHIFTS = [4 * packing.INTERLEAVED.index(j) for j in range(8)] + [4 * packing.SEQUENTIAL.index(j) for j in range(8)]
_shift_tables: dict = {}


def _shift_table(device) -> torch.Tensor:
    key = str(device)
    if key not in _shift_tables:
        _shift_tables[key] = torch.tensor(_SHIFTS, dtype=torch.int32, device=device)
    return _shift_tables[key]


ZF_NONE, ZF_PACKED, ZF_UNPACKED = 0, 1, 2


@triton.jit
def _skinny_w4a16_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, shift_ptr, y_ptr,
    M, N, K, G, stride_xm, stride_wn, group_size,
    ZP_BIAS: tl.constexpr, ZERO_FORM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[M, N] = x[M, K] @ W[K, N], W dequantized per K tile from w [N, K/8] (one group per tile)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # BLOCK_K is a multiple of 8, so the nibble slot of each k in the tile is the same every iteration
    w_shift = tl.load(shift_ptr + (kk % 8))
    if ZERO_FORM == 1:
        z_shift = tl.load(shift_ptr + 8 + (offs_n % 8))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + kk
        mask_k = offs_k < K
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        # [BLOCK_K, BLOCK_N] words: every word is read for each of its 8 k (served from cache on a GPU)
        words = tl.load(w_ptr + offs_n[None, :] * stride_wn + (offs_k // 8)[:, None],
                        mask=mask_k[:, None] & mask_n[None, :], other=0)
        q = (words >> w_shift[:, None]) & 0xF
        g = k0 // group_size  # the wrapper guarantees group_size % BLOCK_K == 0: the tile is in one group
        s = tl.load(s_ptr + offs_n * G + g, mask=mask_n, other=0.0)
        if ZERO_FORM == 1:
            zw = tl.load(z_ptr + (offs_n // 8) * G + g, mask=mask_n, other=0)
            qz = (q - ((zw >> z_shift) & 0xF)[None, :]).to(tl.float32)
        elif ZERO_FORM == 2:
            z = tl.load(z_ptr + offs_n * G + g, mask=mask_n, other=0.0)
            qz = q.to(tl.float32) - z.to(tl.float32)[None, :]
        else:
            qz = (q - ZP_BIAS).to(tl.float32)
        # (q - z) * s is exact in fp32 (a 5-bit integer times a 16-bit float), so the one cast below is the
        # dequant's only rounding: the same bits as a correctly rounded multiply in the act dtype.
        w = (qz * s.to(tl.float32)[None, :]).to(s.dtype)
        acc += tl.dot(a, w)
    y = acc.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y, mask=mask_m[:, None] & mask_n[None, :])


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4


_forced_tiles: list[TileConfig] = []


@contextlib.contextmanager
def forced_tiles(block_m: int, block_n: int, block_k: int, num_warps: int = 4):
    """Force the Triton tile config inside the block (tests use it to exercise multi-tile and tail paths)."""
    _forced_tiles.append(TileConfig(block_m, block_n, block_k, num_warps))
    try:
        yield
    finally:
        _forced_tiles.pop()


def _pow2_at_least(n: int, lo: int, hi: int) -> int:
    p = lo
    while p < n and p < hi:
        p *= 2
    return p


def _largest_pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def skinny_tiles(M: int, N: int, K: int, group_size: int, interpreter: bool | None = None) -> TileConfig:
    """The tile config for a call: the largest legal tiles under the interpreter (its cost is per program x
    k-step), modest tiles on a GPU (`interpreter` None: as Triton runs here). BLOCK_K always divides group_size so
    a K tile never straddles two groups."""
    if _forced_tiles:
        return _forced_tiles[-1]
    if runtime.interpreting() if interpreter is None else interpreter:
        bm, bn, bk_cap = _pow2_at_least(M, 16, 64), _pow2_at_least(N, 16, 128), 128
        return TileConfig(bm, bn, _largest_pow2_divisor(group_size, bk_cap))
    bm = _pow2_at_least(M, 16, 128)
    bn, bk_cap = (64 if M <= 64 else 128), 64
    # Every target this kernel serves is wave32 (gfx11 / gfx12). The 128 x 128 tile (M > 64) over 4 waves, 128
    # threads, holds a 128-VGPR fp32 accumulator per lane beside the dequantized weight tile: it spilled
    # hundreds of VGPRs to scratch on gfx1100, gfx1151 and gfx1201 (the compile lane's resource-fail,
    # docs/shipped-bugs.md). 8 waves give it the 256 threads a wave64 part has and compile without spills.
    num_warps = 8 if bm * bn > 64 * 64 else 4
    return TileConfig(bm, bn, _largest_pow2_divisor(group_size, bk_cap), num_warps)


def _check_operand_tensors(x, qweight, scales, zeros, group_size):
    require(x.dim() == 2, "x.shape", tuple(x.shape), "a 2-D tensor [M, K]")
    require(x.dtype in (torch.float16, torch.bfloat16), "x.dtype", x.dtype, "torch.float16 or torch.bfloat16")
    M, K = x.shape
    require(qweight.dim() == 2 and qweight.dtype == torch.int32, "qweight", (tuple(qweight.shape), qweight.dtype),
            "an int32 [N, K/8] tensor")
    N = qweight.shape[0]
    require(K % 8 == 0 and qweight.shape[1] == K // 8, "qweight.shape", tuple(qweight.shape), f"(N, K/8) with K={K}")
    require(group_size > 0 and K % group_size == 0, "group_size", group_size, f"a positive divisor of K={K}")
    G = K // group_size
    require(tuple(scales.shape) == (N, G), "scales.shape", tuple(scales.shape), f"(N, G) = {(N, G)}")
    require(scales.dtype == x.dtype, "scales.dtype", scales.dtype, f"the activation dtype {x.dtype}")
    if zeros is not None:
        if zeros.dtype == torch.int32:
            require(N % 8 == 0 and tuple(zeros.shape) == (N // 8, G), "zeros.shape", tuple(zeros.shape),
                    f"packed (N/8, G) = {(N // 8, G)}")
        else:
            require(zeros.dtype == x.dtype and tuple(zeros.shape) == (N, G), "zeros",
                    (tuple(zeros.shape), zeros.dtype), f"unpacked (N, G) = {(N, G)} in {x.dtype}, or packed int32")
    return M, N, K, G


def _skinny_impl(x, qweight, scales, zeros, group_size, zp_bias):
    check_x_device("rdna_hybrid_w4a16", x)
    M, N, K, G = _check_operand_tensors(x, qweight, scales, zeros, group_size)
    require(qweight.stride(1) == 1, "qweight.stride", qweight.stride(), "unit stride along K/8 (rows may be padded)")
    x = x if x.stride(1) == 1 else x.contiguous()
    scales = scales.contiguous()
    tiles = skinny_tiles(M, N, K, group_size)
    for name, v in (("BLOCK_M", tiles.block_m), ("BLOCK_N", tiles.block_n), ("BLOCK_K", tiles.block_k)):
        require(v >= 16 and v & (v - 1) == 0, name, v, "a power of two >= 16 (tl.dot)")
    require(group_size % tiles.block_k == 0, "BLOCK_K", tiles.block_k,
            f"a divisor of group_size={group_size}: a K tile must not straddle two groups")
    if zeros is None:
        zf, zarg = ZF_NONE, scales  # dummy pointer, never read
    elif zeros.dtype == torch.int32:
        zf, zarg = ZF_PACKED, zeros.contiguous()
    else:
        zf, zarg = ZF_UNPACKED, zeros.contiguous()
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (runtime.cdiv(M, tiles.block_m), runtime.cdiv(N, tiles.block_n))
    if M > 0:
        _skinny_w4a16_kernel[grid](
            x, qweight, scales, zarg, _shift_table(x.device), y,
            M, N, K, G, x.stride(0), qweight.stride(0), group_size,
            ZP_BIAS=zp_bias, ZERO_FORM=zf,
            BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, num_warps=tiles.num_warps)
    LAST_LAUNCH.clear()
    LAST_LAUNCH.update(path="triton", run_mode=triton_run_mode(), M=M, N=N, K=K, grid=grid, block_m=tiles.block_m,
                       block_n=tiles.block_n, block_k=tiles.block_k, num_warps=tiles.num_warps)
    return y


@torch.library.custom_op("conformance::rdna_hybrid_w4a16_skinny", mutates_args=())
def skinny_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                group_size: int, zp_bias: int) -> torch.Tensor:
    """Triton skinny GEMM: y [M, N] = x @ dequant(qweight [N, K/8], scales [N, G], zeros). Tiles follow runtime M."""
    return _skinny_impl(x, qweight, scales, zeros, group_size, zp_bias)


@skinny_gemm.register_fake
def _skinny_fake(x, qweight, scales, zeros, group_size, zp_bias):
    return x.new_empty((x.shape[0], qweight.shape[0]))


# ----------------------------------------------------------------------------------------------------------
# Plain-torch readings of the operands (the model), one per path's numerics
# ----------------------------------------------------------------------------------------------------------

def _read_operands(qweight, scales, zeros, group_size, zp_bias, device):
    """(q - z) as float32 [K, N] and scales [G, N] on `device`, read from the operands through the codecs."""
    _, ops = _codecs()
    q = ops.hybrid_unpack_qweight(qweight.cpu()).to(torch.int64)  # [K, N] logical
    K, N = q.shape
    if zeros is None:
        z = torch.full((K // group_size, N), zp_bias, dtype=torch.float32)
    elif zeros.dtype == torch.int32:
        z = ops.unpack_zeros_ng(zeros.cpu()).to(torch.float32)  # [G, N]
    else:
        z = zeros.cpu().t().to(torch.float32)
    qz = q.to(torch.float32) - z.repeat_interleave(group_size, dim=0)
    return qz.to(device), scales.t().to(device)


def gemv_model(x, qweight, scales, zeros, group_size, zp_bias):
    """The HIP GEMV's numerics: per group, fp32 dot of x with the exact integers (q - z), then times the scale
    in fp32, summed in fp32; one cast at the end."""
    M, N, K, G = _check_operand_tensors(x, qweight, scales, zeros, group_size)
    qz, s = _read_operands(qweight, scales, zeros, group_size, zp_bias, x.device)
    part = torch.einsum("mgk,gkn->mgn", x.float().reshape(M, G, group_size), qz.reshape(G, group_size, N))
    return (part * s.float()[None]).sum(dim=1).to(x.dtype)


def skinny_model(x, qweight, scales, zeros, group_size, zp_bias):
    """The Triton path's numerics: weights dequantized into the act dtype (one rounding), fp32 dot, one cast."""
    _check_operand_tensors(x, qweight, scales, zeros, group_size)
    qz, s = _read_operands(qweight, scales, zeros, group_size, zp_bias, x.device)
    w = qz.to(x.dtype) * s.repeat_interleave(group_size, dim=0)
    return (x.float() @ w.float()).to(x.dtype)


def _hybrid_apply_impl(x, qweight, scales, zeros, group_size, zp_bias):
    M, N, K, _ = _check_operand_tensors(x, qweight, scales, zeros, group_size)
    if not gemv_route(M, K):
        return _skinny_impl(x, qweight, scales, zeros, group_size, zp_bias)
    op = gemv_hip_op()
    if op is not None and x.is_cuda:
        cu = torch.cuda.get_device_properties(x.device).multi_processor_count
        # schema: (in_a weight, in_b activations, in_scale, in_zero_points?, in_bias?, CuCount, group_size)
        y = op(qweight, x, scales, zeros, None, cu, group_size)
        LAST_LAUNCH.clear()
        LAST_LAUNCH.update(path="gemv_hip", run_mode="device", M=M, N=N, K=K)
        return y
    y = gemv_model(x, qweight, scales, zeros, group_size, zp_bias)
    LAST_LAUNCH.clear()
    LAST_LAUNCH.update(path="gemv_model", run_mode="model", M=M, N=N, K=K)
    return y


@torch.library.custom_op("conformance::rdna_hybrid_w4a16_apply", mutates_args=())
def hybrid_apply(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                 group_size: int, zp_bias: int) -> torch.Tensor:
    """The hybrid kernel: GEMV (HIP, else its model) for M <= 5 and K*M <= 32768, Triton skinny GEMM else.
    Opaque to torch.compile so the route and tiles follow the runtime M."""
    return _hybrid_apply_impl(x, qweight, scales, zeros, group_size, zp_bias)


@hybrid_apply.register_fake
def _hybrid_apply_fake(x, qweight, scales, zeros, group_size, zp_bias):
    return x.new_empty((x.shape[0], qweight.shape[0]))


# ----------------------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------------------

@dataclass
class HybridOperands:
    """qweight int32 [N, K/8] (row stride may be padded); scales [N, G] act dtype; zeros None (zp_bias used),
    packed int32 [N/8, G] or unpacked [N, G] act dtype, holding raw z."""

    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    zero_form: str  # "packed", "unpacked" or "none"
    zp_bias: int
    group_size: int
    K: int
    N: int

    def args(self):
        return (self.qweight, self.scales, self.zeros, self.group_size, self.zp_bias)


@register_kernel
class RDNAHybridW4A16(Kernel):
    name = "rdna_hybrid_w4a16"
    family = "w4a16"
    priority = 20
    deterministic = True  # no atomics on either path
    gate_summary = ("ROCm gfx11/gfx12; uint4b8, uint4; group 32/64/128; K%16, K%group, N%8; fp16/bf16; no act-order."
                    " M<=5 and K*M<=32768: HIP wvSplitK_int4_g GEMV (model when absent), else Triton skinny GEMM")
    op = torch.ops.conformance.rdna_hybrid_w4a16_apply
    skinny_op = torch.ops.conformance.rdna_hybrid_w4a16_skinny
    zero_form = "packed"  # default form of the zero points that load() builds for uint4

    def can_implement(self, config, target):
        if target.kind != "rocm":
            return f"ROCm gfx11/gfx12 only; target is {target}"
        if target.gfx_family not in ("gfx11", "gfx12"):
            return f"RDNA gfx11/gfx12 only (wave32 HIP GEMV); target arch is {target.arch}"
        if config.weight_type not in SUPPORTED_WTYPES:
            return f"weight_type={config.weight_type} not supported; supported: {list(SUPPORTED_WTYPES)}"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype} not supported; float16 or bfloat16 activations only"
        if config.group_size not in SUPPORTED_GROUP_SIZES:
            what = "channelwise (-1)" if config.group_size == -1 else str(config.group_size)
            return f"group_size={what} not supported; supported: {list(SUPPORTED_GROUP_SIZES)}"
        if config.K % 16:
            return f"K={config.K} must be a multiple of 16"
        if config.K % config.group_size:
            return f"K={config.K} must be a multiple of group_size={config.group_size}"
        if config.N % 8:
            return f"N={config.N} must be a multiple of 8 (zero points packed 8 per int32 along N)"
        if config.act_order:
            return "act-order (g_idx) refused: the [N, K/8] layout has no row permutation"
        return None

    def availability(self, target):
        return triton_availability()

    def run_mode(self, target):
        """How the Triton path runs here (the route every M > 5 takes); see run_mode_for for a given call."""
        return "model" if triton_availability() is not None else triton_run_mode()

    def launch_config(self) -> dict:
        """The last call's dispatch path ('triton', 'gemv_hip', 'gemv_model'), run mode, shape and tiles."""
        return dict(LAST_LAUNCH)

    def run_mode_for(self, M: int, K: int, target) -> str:
        """How a call with M rows and K inputs runs here: GEMV route 'device' (HIP op) or 'model'; else Triton."""
        if gemv_route(M, K):
            return "device" if gemv_availability() is None else "model"
        return self.run_mode(target)

    def launch(self, config, M: int, target) -> Launch | None:
        """The HIP GEMV ("gemv_hip", no Triton program: compiled from vLLM's HIP source, not here) for
        M <= 5 and K*M <= 32768, else the Triton skinny GEMM ("skinny") with the tiles of `target` (cpu: the
        interpreter's), on the operands load builds (packed zeros for uint4, contiguous x)."""
        # the cpu target asks for the interpreter's choice (the plan's M rows on a CPU host): gated as gfx1100
        if self.can_implement(config, target if target.is_gpu else Target("rocm", "gfx1100")) is not None:
            return None
        N, K = config.N, config.K
        if gemv_route(M, K):
            return Launch("gemv_hip", dict(M=M))
        t = skinny_tiles(M, N, K, config.group_size, interpreter=target.is_cpu)
        act = Ptr(config.dtype)
        zf = ZF_PACKED if config.weight_type == "uint4" else ZF_NONE
        prog = triton_program(_skinny_w4a16_kernel, dict(
            x_ptr=act, w_ptr=Ptr("int32"), s_ptr=act, z_ptr=Ptr("int32") if zf == ZF_PACKED else act,
            shift_ptr=Ptr("int32"), y_ptr=act, M=M, N=N, K=K, G=K // config.group_size, stride_xm=K,
            stride_wn=K // 8, group_size=config.group_size, ZP_BIAS=0 if zf == ZF_PACKED else 8, ZERO_FORM=zf,
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k), dict(num_warps=t.num_warps))
        return Launch("skinny", dict(block_m=t.block_m, block_n=t.block_n, block_k=t.block_k,
                                     num_warps=t.num_warps), key=(self.name, prog.key), programs=(prog,))

    def load(self, source, config=None, zero_form: str | None = None, row_pad: int = 0):
        """Checkpoint -> HybridOperands. zero_form 'packed' ([N/8, G] int32) or 'unpacked' ([N, G] act dtype)
        for uint4; row_pad adds int32 words of padding to every qweight row (upstream's cache-cliff stride)."""
        zero_form = zero_form or self.zero_form
        require(zero_form in ZERO_FORMS, "zero_form", zero_form, f"one of {list(ZERO_FORMS)}")
        require(row_pad >= 0, "row_pad", row_pad, "a non-negative number of int32 words")
        codecs, ops = _codecs()
        w = codecs.decode(source)
        # a trivial g_idx (k // group_size, as GPTQ writes without desc_act) is no act-order
        require(w.g_idx is None or sorted_g_idx_is_contiguous(w.g_idx, w.gs), "g_idx", "a permutation (act-order)",
                "none or k // group_size: the [N, K/8] layout has no row permutation")
        dtype = source.act_dtype if config is None else act_dtype(config.dtype)
        q = ops.hybrid_pack_qweight(w.q)  # [N, K/8]
        if row_pad:
            padded = torch.zeros((w.N, w.K // 8 + row_pad), dtype=torch.int32)
            padded[:, : w.K // 8] = q
            q = padded[:, : w.K // 8]
        scales = w.scales.t().contiguous().to(dtype)
        if w.wtype.has_bias():
            zeros, form, bias = None, "none", w.wtype.bias
        elif zero_form == "packed":
            zeros, form, bias = ops.pack_zeros_ng(w.zeros), "packed", 0
        else:
            zeros, form, bias = w.zeros.t().contiguous().to(dtype), "unpacked", 0
        return HybridOperands(q, scales, zeros, form, bias, w.gs, w.K, w.N)

    def _prepare(self, operands: HybridOperands, x: torch.Tensor):
        """operands.args() on x's device; a padded qweight keeps its row stride there (.to alone would not)."""
        dev = x.device
        qweight, scales, zeros, gs, zp_bias = operands.args()
        if qweight.device != dev:
            k8, stride = qweight.shape[1], qweight.stride(0)
            buf = torch.zeros((qweight.shape[0], stride), dtype=torch.int32, device=dev)
            buf[:, :k8] = qweight.to(dev)
            qweight = buf[:, :k8]
        return qweight, scales.to(dev), None if zeros is None else zeros.to(dev), gs, zp_bias

    def apply(self, operands: HybridOperands, x: torch.Tensor):
        return self.op(x, *self._prepare(operands, x))

    def op_args(self, operands: HybridOperands, x: torch.Tensor) -> tuple:
        """Arguments for `op` (and `skinny_op`): (x, qweight, scales, zeros, group_size, zp_bias)."""
        return (x, *self._prepare(operands, x))

    def model(self, operands: HybridOperands, x: torch.Tensor):
        args = operands.args()
        if gemv_route(x.shape[0], x.shape[1]):
            return gemv_model(x, *args)
        return skinny_model(x, *args)

