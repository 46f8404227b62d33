"""Triton per-token-group FP8 quant (vLLM's per_token_group_quant_fp8 conventions), as an opaque custom op.

Per row and group of `group_size` along the last dim: s = max(amax, eps) / fp8_max, UE8M0 optionally
rounds s up to a power of two on its bits (exact, unlike exp2(ceil(log2 s)) in fp32), q = fp8(clamp(x / s)).
The division is correctly rounded (div_rn): Triton's `/` is approximate on NVIDIA GPUs. All-zero groups
get s = eps / fp8_max (policy "triton"). Tiles are picked from the runtime shape, so the op is a
torch.library.custom_op with a fake that computes nothing (triton_op does not work under the interpreter).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from conformance.core.launch import Launch, Ptr, triton_program
from conformance.core.registry import Kernel, register_kernel
from conformance.core.runtime import cdiv, next_power_of_2
from conformance.core.targets import Target

from ._device import check_x_device
from ._fp8_common import (
    Fp8QuantParams,
    check_input,
    empty_scales,
    f32,
    first_refusal,
    gate_family,
    gate_fp8_dtype_for_target,
    gate_hidden_multiple,
    gate_input_dtype,
    params_from_config,
    quantize_groups,
    triton_availability,
    ue8m0_ceil,
)

MAX_GROUP_SIZE = 1024  # one group is one tile row
_TILE_ELEMS = 4096  # elements per program at large token counts: BLOCK_M rows x GPP groups x next_pow2(group)


@triton.jit
def _fp8_group_quant_kernel(x_ptr, q_ptr, s_ptr, M, K, G, stride_xm, stride_sm, stride_sg, eps, fp8_max,
                            GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
                            GPP: tl.constexpr, UE8M0: tl.constexpr):
    """BLOCK_M rows x GPP consecutive groups per program: a [BLOCK_M, GPP, BLOCK_G] tile, each row's
    GPP * GROUP elements contiguous in memory, one scale per (row, group)."""
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = pid_g * GPP + tl.arange(0, GPP)
    cols = tl.arange(0, BLOCK_G)
    row_ok = rows < M
    rg_ok = row_ok[:, None] & (groups < G)[None, :]
    mask = rg_ok[:, :, None] & (cols < GROUP)[None, None, :]
    rows64 = rows.to(tl.int64)
    col = groups[None, :, None] * GROUP + cols[None, None, :]
    x = tl.load(x_ptr + rows64[:, None, None] * stride_xm + col, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=2)
    s = tl.math.div_rn(tl.maximum(amax, eps), fp8_max)  # `/` is approximate (div.full.f32) on NVIDIA GPUs
    if UE8M0:
        bits = s.to(tl.int32, bitcast=True)
        exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        s = (exp << 23).to(tl.float32, bitcast=True)
    q = tl.clamp(tl.math.div_rn(x, s[:, :, None]), -fp8_max, fp8_max)
    tl.store(q_ptr + rows64[:, None, None] * K + col, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows64[:, None] * stride_sm + groups[None, :] * stride_sg, s, mask=rg_ok)


@dataclass(frozen=True)
class Fp8Tile:
    """Rows and consecutive groups per program, and warps. Values: powers of two (GPP tails are masked)."""
    block_m: int
    groups_per_program: int = 1
    num_warps: int = 4


_last_launch: dict = {}


def last_launch_config() -> dict:
    """Grid and tile of the most recent launch (for tests that the tile follows the runtime M)."""
    return dict(_last_launch)


def default_tile(M: int, G: int, block_g: int) -> Fp8Tile:
    """Measured on an H200 (benchmarks/results/h200/sweep_fp8.json, run 8, 7168 hidden, group 128): one
    row of 8 consecutive groups a program up to 256 tokens (more programs in flight), 2 rows to 2048,
    then 8 rows x 4 groups (~_TILE_ELEMS elements); each within 3% of the best of 16 tiles there and
    faster than torch.compile of the plain-torch route at every token count measured (1..8192)."""
    if M <= 2048:
        gpp = max(1, min(next_power_of_2(G), 1024 // block_g))
        return Fp8Tile(1 if M <= 256 else 2, gpp, 4)
    gpp = max(1, min(next_power_of_2(G), _TILE_ELEMS // (8 * block_g)))
    return Fp8Tile(max(1, min(8, _TILE_ELEMS // (gpp * block_g))), gpp, 4)


def launch(x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype, fp8_max: float, eps: float,
           ue8m0: bool, column_major_scales: bool, tile: Fp8Tile | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernel on x [..., K] (last dim contiguous after reshape); returns (q, scales).
    `tile` overrides default_tile (sweeps and tests)."""
    check_x_device("fp8_group_quant_triton", x)
    q = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    s = empty_scales(x.shape, group_size, column_major_scales, x.device)
    if x.numel() == 0:
        return q, s
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M, G = x2.shape[0], K // group_size
    s2 = s if column_major_scales else s.view(M, G)
    block_g = next_power_of_2(group_size)
    t = tile or default_tile(M, G, block_g)
    grid = (cdiv(M, t.block_m), cdiv(G, t.groups_per_program))
    _last_launch.clear()
    _last_launch.update(grid=grid, BLOCK_M=t.block_m, BLOCK_G=block_g, GPP=t.groups_per_program,
                        num_warps=t.num_warps, M=M)
    _fp8_group_quant_kernel[grid](x2, q, s2, M, K, G, x2.stride(0), s2.stride(0), s2.stride(1), eps, fp8_max,
                                  GROUP=group_size, BLOCK_M=t.block_m, BLOCK_G=block_g,
                                  GPP=t.groups_per_program, UE8M0=ue8m0, num_warps=t.num_warps)
    return q, s


@torch.library.custom_op("conformance::fp8_group_quant_triton", mutates_args=())
def fp8_group_quant_triton_op(x: torch.Tensor, group_size: int, fp8_dtype: torch.dtype, fp8_max: float,
                              eps: float, ue8m0: bool, column_major_scales: bool
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(q like x in fp8_dtype, float32 scales [*x.shape[:-1], K / group_size], row- or column-major)."""
    return launch(x, group_size, fp8_dtype, fp8_max, eps, ue8m0, column_major_scales)


@fp8_group_quant_triton_op.register_fake
def _(x, group_size, fp8_dtype, fp8_max, eps, ue8m0, column_major_scales):
    return (torch.empty(x.shape, dtype=fp8_dtype, device=x.device),
            empty_scales(x.shape, group_size, column_major_scales, x.device))


def triton_gates(config, target: Target) -> str | None:
    if target.kind not in ("cuda", "rocm", "cpu"):
        return f"target={target} not supported (allowed: any cuda or rocm target, or cpu via the interpreter)"
    group = None
    if not 0 < config.group_size <= MAX_GROUP_SIZE:
        group = f"group_size={config.group_size} not supported (allowed: 1..{MAX_GROUP_SIZE}, one group per tile row)"
    return first_refusal(gate_family(config), group, gate_hidden_multiple(config), gate_input_dtype(config),
                         gate_fp8_dtype_for_target(config, target))


@register_kernel
class Fp8GroupQuantTriton(Kernel):
    name = "fp8_group_quant_triton"
    fusion_route = True  # a quant route of the RMSNorm + quant layer (the fusion check)
    family = "fp8_group_quant"
    priority = 10
    deterministic = True
    zero_group_policy = "triton"  # all-zero group: scale eps / fp8_max (UE8M0: rounded up, 2^-42)
    gate_summary = ("cuda (e4m3fn, sm89+)/rocm (e4m3fnuz on gfx94x, e4m3fn elsewhere)/cpu (interpreter); "
                    f"fp16/bf16/fp32 in; group 1..{MAX_GROUP_SIZE}; hidden%group==0; UE8M0; column-major scales")
    op = torch.ops.conformance.fp8_group_quant_triton.default

    def can_implement(self, config, target: Target) -> str | None:
        return triton_gates(config, target)

    def availability(self, target: Target) -> str | None:
        return triton_availability(target)

    def load(self, config, _unused=None) -> Fp8QuantParams:
        return params_from_config(config)

    def launch(self, config, M: int, target: Target) -> Launch | None:
        """One path, "group_tile": rows x consecutive groups per program (default_tile, the same on every target),
        on x [M, hidden] contiguous; None where the gate refuses."""
        if self.can_implement(config, target) is not None:
            return None
        K, g = config.hidden, config.group_size
        G, block_g = K // g, next_power_of_2(g)
        t = default_tile(M, G, block_g)
        p = params_from_config(config)
        s_strides = (1, M) if config.column_major_scales else (G, 1)
        prog = triton_program(_fp8_group_quant_kernel, dict(
            x_ptr=Ptr(config.dtype), q_ptr=Ptr(config.fp8_dtype), s_ptr=Ptr("float32"), M=M, K=K, G=G, stride_xm=K,
            stride_sm=s_strides[0], stride_sg=s_strides[1], eps=float(p.eps), fp8_max=float(p.fp8_max), GROUP=g,
            BLOCK_M=t.block_m, BLOCK_G=block_g, GPP=t.groups_per_program, UE8M0=config.ue8m0),
            dict(num_warps=t.num_warps))
        return Launch("group_tile", dict(block_m=t.block_m, groups_per_program=t.groups_per_program,
                                         block_g=block_g, num_warps=t.num_warps), key=(self.name, prog.key),
                      programs=(prog,))

    def launch_config(self) -> dict:
        """The last launch's grid and tile (rows x groups per program), for the compile-boundary check."""
        return last_launch_config()

    def apply(self, p: Fp8QuantParams, x: torch.Tensor):
        check_input(x, p)
        return self.op(x, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0, p.column_major_scales)

    def model(self, p: Fp8QuantParams, x: torch.Tensor):
        def scale(amax):
            s = torch.maximum(amax, f32(p.eps)) / f32(p.fp8_max)
            return ue8m0_ceil(s) if p.ue8m0 else s

        return quantize_groups(x, p, scale)
