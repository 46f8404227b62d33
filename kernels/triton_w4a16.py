"""`triton_w4a16`: our Triton W4A16 GEMM on the upstream Triton operand contract, as a custom op.

y[M, N] = x[M, K] @ W, W[k, n] = (q[k, n] - z[k // gs, n]) * s[k // gs, n], dequantized into the
act dtype, accumulated in fp32. Split-K uses an fp32 workspace and a second pass that sums the
splits in a fixed order, so results are deterministic. Tiles come from a small table keyed by the
runtime M and the device kind; BLOCK_K is clamped so one K tile never straddles two groups.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch
import triton
import triton.language as tl

from conformance.registry import Kernel, register_kernel
from conformance.runtime import interpreting
from conformance.targets import Target
from references.errors import InvalidInput, require

from ._w4a16_common import (
    TritonW4A16Operands,
    load_triton_operands,
    model_triton_operands,
    to_device,
    triton_w4a16_gates,
)


@triton.jit
def _w4a16_gemm_kernel(
    a_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, group_size, tiles_per_split,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One (BLOCK_M x BLOCK_N) tile of c over the K tiles of split program_id(2).

    c is the output (act dtype) when there is one split, else the fp32 workspace [splits, M, N].
    The caller guarantees each K tile lies in one group (BLOCK_K divides gs, or a single group) and
    that the splits cover the K tiles exactly (every tile a program visits starts below K).
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    shift_n = (offs_n % 8) * 4  # sequential nibbles: column n sits at bits 4*(n % 8) of word n // 8
    act_ty = a_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, tiles_per_split):
        k0 = (pid_k * tiles_per_split + t) * BLOCK_K
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        words = tl.load(b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] // 8) * stride_bn,
                        mask=mask_k[:, None] & mask_n[None, :], other=0)
        q = (words >> shift_n[None, :]) & 0xF
        g = k0 // group_size
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_n, other=0.0)
        if HAS_ZP:
            zw = tl.load(z_ptr + g * stride_zg + (offs_n // 8) * stride_zn, mask=mask_n, other=0)
            z = (zw >> shift_n) & 0xF
            w = (q - z[None, :]).to(act_ty) * s[None, :]
        else:
            w = (q - ZP_BIAS).to(act_ty) * s[None, :]
        acc = tl.dot(a, w, acc)
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr, c_ptr, M, N, stride_ws, stride_wm, stride_wn, stride_cm, stride_cn,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """c = sum over splits of the fp32 workspace, in split order (deterministic), cast once."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for sk in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + sk * stride_ws + offs_m[:, None] * stride_wm + offs_n[None, :] * stride_wn,
                       mask=mask, other=0.0)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class TileConfig:
    """Launch parameters; `split_k` > 1 runs the K loop in that many programs plus a reduction."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 2


# (largest M served, tiles). The interpreter costs ~per (program x k-iteration), nearly independent
# of block size, so on CPU the largest tiles win. Small M still splits K so the decode path (split-K
# plus reduction) runs on CPU too. GPU entries are a sensible start, to be tuned on hardware.
TILE_TABLE = {
    "interpreter": [
        (16, TileConfig(16, 256, 128, split_k=2)),
        (32, TileConfig(32, 256, 128)),
        (None, TileConfig(64, 256, 128)),
    ],
    "gpu": [
        (16, TileConfig(16, 64, 128, split_k=4, num_warps=4, num_stages=3)),
        (64, TileConfig(32, 64, 64, num_warps=4, num_stages=3)),
        (None, TileConfig(64, 128, 64, num_warps=4, num_stages=3)),
    ],
}

_LAST_LAUNCH: dict = {}


def last_launch_config() -> dict:
    """The tile configuration (and M, N, K) of the last launch in this process; {} before any."""
    return dict(_LAST_LAUNCH)


def _pow2_floor(v: int) -> int:
    return 1 << (max(int(v), 1).bit_length() - 1)


def _k_tile_fits(block_k: int, group_size: int, K: int) -> bool:
    # one scale row per K tile: the tile must not straddle a group boundary
    return K // group_size == 1 or group_size % block_k == 0


def table_tiles(M: int, device_kind: str) -> TileConfig:
    """The table entry for runtime M on 'interpreter' or 'gpu'."""
    for max_m, cfg in TILE_TABLE[device_kind]:
        if max_m is None or M <= max_m:
            return cfg
    raise AssertionError("tile table has no catch-all row")


def fit_tiles(cfg: TileConfig, M: int, N: int, K: int, group_size: int) -> TileConfig:
    """Shrink a table entry to the problem: BLOCK_K clamped to divide the group (the vllm#39705 fix),
    blocks no larger than needed, split-K the largest divisor of the K tile count within the entry."""
    bk = cfg.block_k
    if K // group_size > 1:
        bk = min(bk, _pow2_floor(group_size))
        while bk > 16 and group_size % bk:
            bk //= 2
    else:
        bk = min(bk, max(16, triton.next_power_of_2(K)))
    require(bk >= 16 and _k_tile_fits(bk, group_size, K), "group_size", group_size,
            "a multiple of 16 when K has several groups (tl.dot needs BLOCK_K >= 16)")
    bm = min(cfg.block_m, max(16, triton.next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, triton.next_power_of_2(N)))
    k_tiles = triton.cdiv(K, bk)
    sk = max(d for d in range(1, min(cfg.split_k, k_tiles) + 1) if k_tiles % d == 0)
    return replace(cfg, block_m=bm, block_n=bn, block_k=bk, split_k=sk)


def _check_operands(x, b_q, scales, qzeros, group_size, zp_bias):
    require(x.dim() == 2, "x.dim()", x.dim(), "2 ([M, K])")
    require(x.dtype in (torch.float16, torch.bfloat16), "x.dtype", x.dtype, "torch.float16 or torch.bfloat16")
    require(b_q.dtype == torch.int32 and b_q.dim() == 2, "b_q", (b_q.dtype, tuple(b_q.shape)),
            "an int32 tensor [K, N/8]")
    K, N = b_q.shape[0], b_q.shape[1] * 8
    require(x.shape[1] == K, "x.shape", tuple(x.shape), f"[M, K] with K={K} (rows of b_q)")
    require(group_size > 0 and K % group_size == 0, "group_size", group_size,
            f"a positive divisor of K={K} (effective group size)")
    G = K // group_size
    require(scales.dtype == x.dtype, "scales.dtype", scales.dtype, f"the act dtype {x.dtype}")
    require(tuple(scales.shape) == (G, N), "scales.shape", tuple(scales.shape), f"(G, N) = {(G, N)}")
    require(zp_bias in (0, 8), "zp_bias", zp_bias, "0 (uint4, zeros from qzeros) or 8 (uint4b8)")
    if zp_bias == 0 and qzeros is not None:
        require(qzeros.dtype == torch.int32 and tuple(qzeros.shape) == (G, N // 8), "qzeros",
                (qzeros.dtype, tuple(qzeros.shape)), f"int32 [G, N/8] = {(G, N // 8)}")
    return K, N


def launch_w4a16_gemm(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                      group_size: int, zp_bias: int, tiles: TileConfig | None = None) -> torch.Tensor:
    """Run the GEMM on a 2-D x. `tiles` overrides the table entry (still fitted and clamped);
    with zp_bias != 0 the zeros are ignored (a biased type's zero point is its bias)."""
    K, N = _check_operands(x, b_q, scales, qzeros, group_size, zp_bias)
    M = x.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    kind = "interpreter" if (x.device.type == "cpu" or interpreting()) else "gpu"
    cfg = fit_tiles(tiles or table_tiles(M, kind), M, N, K, group_size)
    # the kernel reads one scale row per K tile; a straddling tile silently mixes groups
    assert _k_tile_fits(cfg.block_k, group_size, K), f"BLOCK_K={cfg.block_k} straddles group_size={group_size}"
    k_tiles = triton.cdiv(K, cfg.block_k)
    splits = cfg.split_k
    assert k_tiles % splits == 0, f"split_k={splits} does not divide the {k_tiles} K tiles"
    tiles_per_split = k_tiles // splits
    has_zp = zp_bias == 0 and qzeros is not None
    z = qzeros if has_zp else b_q  # placeholder pointer, never read when HAS_ZP is False
    grid = (triton.cdiv(M, cfg.block_m), triton.cdiv(N, cfg.block_n), splits)
    if splits == 1:
        c, scs = out, 0
    else:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        scs = c.stride(0)
    _w4a16_gemm_kernel[grid](
        x, b_q, scales, z, c,
        M, N, K, group_size, tiles_per_split,
        x.stride(0), x.stride(1), b_q.stride(0), b_q.stride(1), scales.stride(0), scales.stride(1),
        z.stride(0), z.stride(1), scs, c.stride(-2), c.stride(-1),
        ZP_BIAS=zp_bias, HAS_ZP=has_zp,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        _splitk_reduce_kernel[(grid[0], grid[1])](
            c, out, M, N, c.stride(0), c.stride(1), c.stride(2), out.stride(0), out.stride(1),
            SPLIT_K=splits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps,
        )
    _LAST_LAUNCH.clear()
    _LAST_LAUNCH.update(asdict(cfg), M=M, N=N, K=K, device_kind=kind)
    return out


def gemm_any_rank(x: torch.Tensor, fn) -> torch.Tensor:
    """Apply a 2-D GEMM `fn(x2d) -> [M, N]` to x of any rank >= 1 (leading dims flattened)."""
    lead = x.shape[:-1]
    y = fn(x.reshape(-1, x.shape[-1]))
    return y.reshape(*lead, y.shape[-1])


@torch.library.custom_op("conformance::triton_w4a16_gemm", mutates_args=())
def triton_w4a16_gemm(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                      group_size: int, zp_bias: int) -> torch.Tensor:
    """y = x @ dequant(b_q, scales, qzeros or zp_bias); x [..., K] fp16/bf16, y [..., N] contiguous."""
    return gemm_any_rank(x, lambda x2: launch_w4a16_gemm(x2.contiguous(), b_q, scales, qzeros,
                                                         group_size, zp_bias))


@triton_w4a16_gemm.register_fake
def _(x, b_q, scales, qzeros, group_size, zp_bias):
    return x.new_empty((*x.shape[:-1], b_q.shape[1] * 8))


def triton_availability(target: Target) -> str | None:
    """Why Triton kernels cannot run here for `target`, or None."""
    if target.is_cpu:
        return None if interpreting() else "Triton interpreter not enabled (TRITON_INTERPRET is not 1)"
    if interpreting():
        return f"target={target} needs a GPU but Triton runs in the interpreter here"
    from conformance.targets import detect_target

    here = detect_target()
    return None if here == target else f"target={target} is not this machine's device ({here})"


@register_kernel
class TritonW4A16(Kernel):
    name = "triton_w4a16"
    family = "w4a16"
    priority = 10
    deterministic = True  # split-K reduces through a workspace in a fixed order, no atomics
    gate_summary = ("cuda/rocm (upstream) and cpu (interpreter); fp16/bf16; uint4b8, uint4; "
                    "group -1/32/64/128/256 or K; N%8==0; K%group==0; no act-order")
    op = torch.ops.conformance.triton_w4a16_gemm.default

    def can_implement(self, config, target: Target) -> str | None:
        return triton_w4a16_gates(config, target, allow_act_order=False)

    def availability(self, target: Target) -> str | None:
        return triton_availability(target)

    def dequant_dtype(self, config) -> torch.dtype:
        return torch.float16 if config.dtype == "float16" else torch.bfloat16

    def accumulate_dtype(self, config) -> torch.dtype:
        return torch.float32

    @property
    def last_launch_config(self) -> dict:
        return last_launch_config()

    def load(self, checkpoint, config=None) -> TritonW4A16Operands:
        return load_triton_operands(checkpoint, allow_act_order=False)

    def apply(self, o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
        if o.perm is not None:
            raise InvalidInput("operands.perm", "set", "None (act-order operands belong to triton_w4a16_actorder)")
        o = to_device(o, x.device)
        return self.op(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias)

    def model(self, o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
        return model_triton_operands(o, x)
