"""`triton_w4a16`: our Triton W4A16 GEMM on the upstream Triton operand contract, as a custom op.

y[M, N] = x[M, K] @ W, W[k, n] = (q[k, n] - z[k // gs, n]) * s[k // gs, n], dequantized into the
act dtype, accumulated in fp32. Split-K uses an fp32 workspace and a second pass that sums the
splits in a fixed order, so results are deterministic (no atomics). Tiles come from a small table
keyed by the device kind (interpreter, gpu, or a measured arch table such as sm90 loaded from
kernels/tiles/tiles_sm90.json) and the runtime M; BLOCK_K is clamped so one K tile never
straddles two groups. Paths, all selectable from the table: packed weight loads (each int32 word read
once, contiguous along N); a dot-free GEMV-style path for tiny M (exact fp32 dequant, tighter than the
declared act-dtype dequant); swap_ab (the dequantized tile as the wgmma register operand); `magic`
dequant (bit tricks instead of int -> float conversions, same values); `dequant_mm` for large M,
which dequantizes the whole weight into a transient [K, N] act-dtype buffer (2*K*N bytes per call)
and hands it to torch.mm (cuBLAS/hipBLAS) with fp32 reduction forced; and the planar decode path
(PLANAR_TABLE rows, M <= 64 on sm90 and in the interpreter), which reads the same weight in the planar
layout (b_planar) on tensor cores: q - z exact in the act dtype, products summed in fp32 per group, then
one fp32 multiply by the scale (tighter than the declared act-dtype dequant, like the GEMV path).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
import triton
import triton.language as tl

from conformance.core.launch import Launch, Ptr, Row, triton_program
from conformance.core.registry import Kernel, register_kernel
from conformance.core.runtime import cdiv, interpreting, next_power_of_2
from conformance.core.target_limits import compute_units
from conformance.core.targets import Target
from references.codecs.operands import PLANAR_BLOCK
from references.errors import InvalidInput, require

from ._device import check_x_device
from ._w4a16_common import (
    TritonW4A16Operands,
    load_triton_operands,
    model_triton_operands,
    to_device,
    triton_w4a16_gates,
)


@triton.jit
def _dequant_tile(
    b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size,
    stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr, FP32_OUT: tl.constexpr,
):
    """The dequantized weight tile W[k0:k0+BLOCK_K, pid_n*BLOCK_N:+BLOCK_N] (one group: the caller keeps
    the tile inside it). FP32_OUT=False: (q - z) * s rounded once into the act dtype (the scales' dtype),
    the declared dequant; FP32_OUT=True: the exact fp32 product (q - z) * s, never rounded (tighter than
    declared). MAGIC replaces the int -> float conversions (quarter-rate on NVIDIA) by bit tricks: OR-ing
    a nibble into the mantissa of MAGIC_BITS (1024.0 in fp16, 128.0 in bf16, 2^23 in fp32) gives the
    value MAGIC + q exactly, and (MAGIC + q) - (MAGIC + z) = q - z exactly. Out-of-range rows/columns
    read as q = 0, z = 0, s = 0."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_k = offs_k < K
    mask_n = offs_n < N
    shift_n = (offs_n % 8) * 4  # sequential nibbles: column n sits at bits 4*(n % 8) of word n // 8
    if PACKED_LOAD:
        offs_w = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)  # the words of this N tile
        w_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_w[None, :] * stride_bn
        if EVEN_K and EVEN_N:
            words = tl.load(w_ptrs)
        else:
            words = tl.load(w_ptrs, mask=mask_k[:, None] & (offs_w < N // 8)[None, :], other=0)
        # [BLOCK_K, BLOCK_N/8, 8] -> [BLOCK_K, BLOCK_N]: row-major reshape puts slot j of word w at
        # column 8*w + j, the sequential nibble order of the operand contract
        shift_j = tl.arange(0, 8) * 4
        q = tl.reshape((words[:, :, None] >> shift_j[None, None, :]) & 0xF, (BLOCK_K, BLOCK_N))
    else:
        w_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] // 8) * stride_bn
        if EVEN_K and EVEN_N:
            words = tl.load(w_ptrs)
        else:
            words = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        q = (words >> shift_n[None, :]) & 0xF
    g = k0 // group_size
    if EVEN_N:
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn)
    else:
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_n, other=0.0)
    if HAS_ZP:
        zw = tl.load(z_ptr + g * stride_zg + (offs_n // 8) * stride_zn, mask=mask_n, other=0)
        z = (zw >> shift_n) & 0xF
    else:
        z = tl.full((BLOCK_N,), ZP_BIAS, tl.int32)
    if FP32_OUT:
        if MAGIC:
            qf = (q | 0x4B000000).to(tl.float32, bitcast=True)
            zf = (z | 0x4B000000).to(tl.float32, bitcast=True)
            w = (qf - zf[None, :]) * s.to(tl.float32)[None, :]
        else:
            w = (q - z[None, :]).to(tl.float32) * s.to(tl.float32)[None, :]
    else:
        act_ty = s_ptr.dtype.element_ty
        if MAGIC:
            qh = (q | MAGIC_BITS).to(tl.int16).to(act_ty, bitcast=True)
            zh = (z | MAGIC_BITS).to(tl.int16).to(act_ty, bitcast=True)
            w = (qh - zh[None, :]) * s[None, :]
        else:
            w = (q - z[None, :]).to(act_ty) * s[None, :]
    return w


@triton.jit
def _w4a16_gemm_kernel(
    a_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, group_size, tiles_per_split,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, USE_DOT: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    SWAP_AB: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
):
    """One (BLOCK_M x BLOCK_N) tile of c over the K tiles of split program_id(2).

    c is the output (act dtype) when there is one split, else the fp32 workspace [splits, M, N].
    The caller guarantees each K tile lies in one group (BLOCK_K divides gs, or a single group) and
    that the splits cover the K tiles exactly (every tile a program visits starts below K).
    PACKED_LOAD reads each int32 word once ([BLOCK_K, BLOCK_N/8], contiguous along N, so loads can be
    16 bytes wide) and unpacks in registers; otherwise every column gathers its own word (8x the load
    instructions, same DRAM bytes). USE_DOT=False is the GEMV-style path for tiny M: exact fp32
    dequant, fp32 FMAs into a [BLOCK_M, BLOCK_K, BLOCK_N] accumulator summed over K once at the end
    (no cross-thread reduction inside the loop), no tensor cores, BLOCK_M may be 1.
    EVEN_K / EVEN_N (K, N multiples of the block) drop the weight and scale masks: a mask whose
    constancy the compiler cannot prove splits a 16-byte load into 4-byte ones.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    elif USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc3 = tl.zeros((BLOCK_M, BLOCK_K, BLOCK_N), dtype=tl.float32)
    for t in range(0, tiles_per_split):
        k0 = (pid_k * tiles_per_split + t) * BLOCK_K
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=mask_m[:, None] & (offs_k < K)[None, :], other=0.0)
        w = _dequant_tile(b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size,
                          stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
                          ZP_BIAS, HAS_ZP, BLOCK_N, BLOCK_K, PACKED_LOAD, EVEN_K, EVEN_N,
                          MAGIC, MAGIC_BITS, not USE_DOT)
        if SWAP_AB:
            # y^T = W^T x^T: with the dequantized tile as the first operand, Triton 3.6's sm90 code
            # stores it with stmatrix/16-byte stores instead of 2-byte ones (PTX compiled offline)
            acc_t = tl.dot(tl.trans(w), tl.trans(a), acc_t)
        elif USE_DOT:
            acc = tl.dot(a, w, acc)
        else:
            # fp32 products of fp16/bf16 x and the fp32 weight; summed over K after the loop
            acc3 += a.to(tl.float32)[:, :, None] * w[None, :, :]
    if SWAP_AB:
        acc = tl.trans(acc_t)
    elif not USE_DOT:
        acc = tl.sum(acc3, axis=1)
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _w4a16_dequant_kernel(
    b_ptr, s_ptr, z_ptr, w_ptr, N, K, group_size,
    stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn, stride_wk, stride_wn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
):
    """w[K, N] = the weight dequantized into the act dtype (the dequant_mm path's first pass)."""
    pid_k = tl.program_id(0)
    pid_n = tl.program_id(1)
    k0 = pid_k * BLOCK_K
    w = _dequant_tile(b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size,
                      stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
                      ZP_BIAS, HAS_ZP, BLOCK_N, BLOCK_K, PACKED_LOAD, EVEN_K, EVEN_N, MAGIC, MAGIC_BITS, False)
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn, w,
             mask=(offs_k < K)[:, None] & (offs_n < N)[None, :])


REDUCE_BLOCK_M, REDUCE_BLOCK_N = 16, 128  # the split-K reduce's blocks: 2048 fp32 values, 16 per thread at 4 warps


# One program for every split count and shape: the split count is a runtime loop bound and M is not specialized
# (neither changes the code), and the blocks are fixed (REDUCE_BLOCK_M x REDUCE_BLOCK_N), so a CI run compiles this
# kernel once per act dtype and N class instead of once per (split count, M, N) combination its cases meet (on an
# H200 the CI plan's cases made 19-29 reduce variants per kernel, each a fresh ~0.4 s compile).
@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def _splitk_reduce_kernel(
    ws_ptr, c_ptr, M, N, stride_ws, stride_wm, stride_wn, stride_cm, stride_cn, SPLIT_K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """c = sum over splits of the fp32 workspace, in split order (deterministic), cast once."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for sk in range(SPLIT_K):
        acc += tl.load(ws_ptr + sk * stride_ws + offs_m[:, None] * stride_wm + offs_n[None, :] * stride_wn,
                       mask=mask, other=0.0)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=mask)


# --- the planar decode path (M <= 64 on sm90): weights in the planar layout, tensor cores, fp32 per group -----
#
# b_planar (references/codecs/operands.py, planar_pack_qweight) read as int16 [Kb, N, R], R = PLANAR_BLOCK / 4:
# element (b, n, i) holds q[b*128 + j*R + i, n] at bits 4j. Plane j of a loaded [BLOCK_N, R] tile is one shift
# and mask away, in the tile's own register layout, so Triton keeps the whole dequant in the wgmma A-operand
# layout (the int16 tile goes global -> shared by cp.async -> registers by ldmatrix, no fp16 round trip through
# shared memory). y^T = W^T x^T per plane: W^T [BLOCK_N, R] (q - z, exact in the act dtype) is the register
# operand, x^T [R, BLOCK_M] the shared one; the fp32 product of one group is scaled once and added in fp32.
# On an NVIDIA GPU each plane is converted by inline PTX (lop3 + one fma per pair of values); everywhere else
# (the interpreter, ROCm) by the same shift/mask/magic-number steps written as Triton ops, bit for bit the same.

def _plane_asm_f16(j: int, zb: int) -> str:
    """PTX for plane j of two int16 words -> two fp16 values q - zb. Even planes: (w & 0x000F000F) | 0x6400 is
    1024 + q, minus (1024 + zb). Odd planes: (w & 0x00F000F0) | 0x6400 is 1024 + 16q; times 1/16, minus (64 + zb).
    Planes 2, 3 shift the word right by 8 first (the high half's bits fall into the masked-out byte)."""
    even = j % 2 == 0
    mask = "0x000F000F" if even else "0x00F000F0"
    mul = "0x3C003C00" if even else "0x2C002C00"  # 1.0 or 1/16 in both halves
    bias = (0xE400 | zb) if even else (0xD400 | (zb << 4))  # -(1024 + zb) or -(64 + zb) in fp16
    src = "mov.b32 t, $1;" if j < 2 else "shr.b32 t, $1, 8;"
    return ("{ .reg .b32 t, m, b; " + src + f" lop3.b32 t, t, {mask}, 0x64006400, 0xea; "
            f"mov.b32 m, {mul}; mov.b32 b, {hex((bias << 16) | bias)}; fma.rn.f16x2 $0, t, m, b; }}")


def _plane_asm_bf16(j: int, zb: int) -> str:
    """PTX for plane j -> two bf16 values q - zb: bf16 has 7 mantissa bits, so the nibble is shifted to bits 0-3,
    (w & 0x000F000F) | 0x4300 is 128 + q, and fma(v, 1, -(128 + zb)) removes the magic number."""
    bias = 0xC300 | zb  # -(128 + zb) in bf16
    src = "mov.b32 t, $1;" if j == 0 else f"shr.b32 t, $1, {4 * j};"
    return ("{ .reg .b32 t, m, b; " + src + " lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea; "
            f"mov.b32 m, 0x3F803F80; mov.b32 b, {hex((bias << 16) | bias)}; fma.rn.bf16x2 $0, t, m, b; }}")


# one tl.constexpr global per (dtype, zero-point bias, plane): a jit function can name globals, not build strings
_ASM_F16_0_0 = tl.constexpr(_plane_asm_f16(0, 0))
_ASM_F16_0_1 = tl.constexpr(_plane_asm_f16(1, 0))
_ASM_F16_0_2 = tl.constexpr(_plane_asm_f16(2, 0))
_ASM_F16_0_3 = tl.constexpr(_plane_asm_f16(3, 0))
_ASM_F16_8_0 = tl.constexpr(_plane_asm_f16(0, 8))
_ASM_F16_8_1 = tl.constexpr(_plane_asm_f16(1, 8))
_ASM_F16_8_2 = tl.constexpr(_plane_asm_f16(2, 8))
_ASM_F16_8_3 = tl.constexpr(_plane_asm_f16(3, 8))
_ASM_BF16_0_0 = tl.constexpr(_plane_asm_bf16(0, 0))
_ASM_BF16_0_1 = tl.constexpr(_plane_asm_bf16(1, 0))
_ASM_BF16_0_2 = tl.constexpr(_plane_asm_bf16(2, 0))
_ASM_BF16_0_3 = tl.constexpr(_plane_asm_bf16(3, 0))
_ASM_BF16_8_0 = tl.constexpr(_plane_asm_bf16(0, 8))
_ASM_BF16_8_1 = tl.constexpr(_plane_asm_bf16(1, 8))
_ASM_BF16_8_2 = tl.constexpr(_plane_asm_bf16(2, 8))
_ASM_BF16_8_3 = tl.constexpr(_plane_asm_bf16(3, 8))


@triton.jit
def _asm_pairs(h, ASM: tl.constexpr, BF16: tl.constexpr):
    """One pure elementwise asm over pairs of int16 (pack=2: one 32-bit register in, one out): Triton may
    hoist it into the dot-operand layout like any elementwise op."""
    if BF16:
        return tl.inline_asm_elementwise(ASM, "=r,r", [h], dtype=tl.bfloat16, is_pure=True, pack=2)
    else:
        return tl.inline_asm_elementwise(ASM, "=r,r", [h], dtype=tl.float16, is_pure=True, pack=2)


@triton.jit
def _planar_plane(h, J: tl.constexpr, ZB: tl.constexpr, BF16: tl.constexpr, USE_ASM: tl.constexpr):
    """Plane J of the int16 tile h as act-dtype values q - ZB (exact: small integers)."""
    if USE_ASM:
        if BF16:
            if ZB == 8:
                if J == 0:
                    return _asm_pairs(h, _ASM_BF16_8_0, True)
                elif J == 1:
                    return _asm_pairs(h, _ASM_BF16_8_1, True)
                elif J == 2:
                    return _asm_pairs(h, _ASM_BF16_8_2, True)
                else:
                    return _asm_pairs(h, _ASM_BF16_8_3, True)
            else:
                if J == 0:
                    return _asm_pairs(h, _ASM_BF16_0_0, True)
                elif J == 1:
                    return _asm_pairs(h, _ASM_BF16_0_1, True)
                elif J == 2:
                    return _asm_pairs(h, _ASM_BF16_0_2, True)
                else:
                    return _asm_pairs(h, _ASM_BF16_0_3, True)
        else:
            if ZB == 8:
                if J == 0:
                    return _asm_pairs(h, _ASM_F16_8_0, False)
                elif J == 1:
                    return _asm_pairs(h, _ASM_F16_8_1, False)
                elif J == 2:
                    return _asm_pairs(h, _ASM_F16_8_2, False)
                else:
                    return _asm_pairs(h, _ASM_F16_8_3, False)
            else:
                if J == 0:
                    return _asm_pairs(h, _ASM_F16_0_0, False)
                elif J == 1:
                    return _asm_pairs(h, _ASM_F16_0_1, False)
                elif J == 2:
                    return _asm_pairs(h, _ASM_F16_0_2, False)
                else:
                    return _asm_pairs(h, _ASM_F16_0_3, False)
    else:
        # the same magic numbers as Triton ops (the interpreter cannot run PTX): OR-ing the nibble into the
        # mantissa of 1024.0 (fp16) or 128.0 (bf16) gives the value magic + q exactly
        if BF16:
            q = ((h >> (4 * J)) & 0xF) | 0x4300
            return q.to(tl.bfloat16, bitcast=True) - (128.0 + ZB)
        else:
            q = ((h >> (4 * J)) & 0xF) | 0x6400
            return q.to(tl.float16, bitcast=True) - (1024.0 + ZB)


@triton.jit
def _w4a16_planar_kernel(
    x_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, G, group_size, KBT, kb_per_split,
    stride_xm, stride_xk, stride_bb, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZB: tl.constexpr, HAS_ZP: tl.constexpr, PG: tl.constexpr, R: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, USE_ASM: tl.constexpr,
):
    """c[pid_k] (or the output, with one split) = x[M tile] @ W for the K blocks [kb_lo, kb_hi) of split pid_k.

    b: int16 [KBT, N, R] (the planar layout), block = 4R rows of K. PG = planes per group (4 when a group spans
    whole blocks or G == 1, else group_size / R): the fp32 product of each group is multiplied by its scale row
    once. Columns n >= N, rows k >= K (the zero-padded last block) and groups g >= G read as zero."""
    BLOCK_K: tl.constexpr = 4 * R
    BF16: tl.constexpr = s_ptr.dtype.element_ty == tl.bfloat16
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = tl.arange(0, R)
    mask_n = offs_n < N
    mask_m = offs_m < M
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    kb_lo = pid_k * kb_per_split
    kb_hi = tl.minimum(kb_lo + kb_per_split, KBT)
    if PG == 4:  # one scale row per block: fetched a block ahead (only the weight tiles are pipelined by Triton)
        g_next = (kb_lo * BLOCK_K) // group_size
        s_next = tl.load(s_ptr + g_next * stride_sg + offs_n * stride_sn, mask=mask_n & ((offs_n * 0 + g_next) < G),
                         other=0.0)
    for kb in range(kb_lo, kb_hi):
        if PG == 4:
            s_blk = s_next
            g_next = (tl.minimum(kb + 1, kb_hi - 1) * BLOCK_K) // group_size
            s_next = tl.load(s_ptr + g_next * stride_sg + offs_n * stride_sn,
                             mask=mask_n & ((offs_n * 0 + g_next) < G), other=0.0)
        h_ptrs = b_ptr + kb * stride_bb + offs_n[:, None] * stride_bn + offs_r[None, :]
        if EVEN_N:
            h = tl.load(h_ptrs)
        else:
            h = tl.load(h_ptrs, mask=mask_n[:, None], other=0)
        for j in tl.static_range(4):
            k0 = kb * BLOCK_K + j * R
            g = (kb * BLOCK_K + (j - j % PG) * R) // group_size  # the group of this plane's first plane
            mask_g = mask_n & ((offs_n * 0 + g) < G)  # a group past the last one (the padded block) reads 0
            if j % PG == 0:
                accg = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
                if HAS_ZP:
                    # z broadcast over the tile's R columns by the pointers, so the subtraction stays elementwise
                    z = tl.load(z_ptr + g * stride_zg + offs_n[:, None] * stride_zn + 0 * offs_r[None, :],
                                mask=mask_g[:, None], other=0.0)
            xs = tl.load(x_ptr + offs_m[None, :] * stride_xm + (k0 + offs_r)[:, None] * stride_xk,
                         mask=mask_m[None, :] & ((k0 + offs_r) < K)[:, None], other=0.0)  # x^T [R, BLOCK_M]
            w = _planar_plane(h, j, ZB, BF16, USE_ASM)  # W^T [BLOCK_N, R]
            if HAS_ZP:
                w = w - z
            accg = tl.dot(w, xs, accg)
            if j % PG == PG - 1:
                if PG == 4:
                    s = s_blk
                else:
                    s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_g, other=0.0)
                acc += accg * s.to(tl.float32)[:, None]
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, tl.trans(acc).to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


AUTO_SPLIT_WAVES = 2  # split_k=0: programs >= this many per SM (decode is memory bound: keep loads in flight)


@dataclass(frozen=True)
class TileConfig:
    """Launch parameters; `split_k` > 1 runs the K loop in that many programs plus a reduction, 0 picks
    the split from the grid size (enough programs to fill the GPU, see fit_tiles). `packed_load` reads
    each weight word once; `use_dot=False` is the GEMV-style path for tiny M (BLOCK_M may be 1..8);
    `swap_ab` computes y^T = W^T x^T (the dequantized weight as the dot's first operand); `magic`
    dequantizes with bit tricks instead of int -> float conversions (same values); `dequant_mm` is the
    prefill path: one pass dequantizes the whole weight into the act dtype, then torch.mm (cuBLAS on a
    GPU) multiplies with fp32 accumulation (block_m, split_k, use_dot, swap_ab unused). `planar` is the decode
    path on the planar operand (b_planar): block_k is the layout's block (PLANAR_BLOCK), block_m >= 16, any
    split_k (the K blocks are shared out as evenly as possible); packed_load, use_dot, swap_ab, magic unused.
    `waves`: with split_k=0, split K until there are at least this many programs per SM."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 2
    packed_load: bool = False
    use_dot: bool = True
    swap_ab: bool = False
    magic: bool = False
    dequant_mm: bool = False
    planar: bool = False
    waves: int = AUTO_SPLIT_WAVES


# (largest M served, tiles). The interpreter costs ~per (program x k-iteration), nearly independent
# of block size, so on CPU the largest tiles win. Small M still splits K so the decode path (split-K
# plus reduction) runs on CPU too. "gpu" is the fallback for any GPU without a measured table; a
# measured table (benchmarks/sweep_triton_w4a16.py) is loaded under its arch key ("sm90") on first use.
TILE_TABLE = {
    # The interpreter mirrors the GPU paths (GEMV at M=1, magic swap_ab dot, dequant_mm) so CI runs each
    # of them: the CI profile draws M <= 40, so dequant_mm starts at 33 here (65 on the GPU). Interpreter
    # cost is ~per (program x k-iteration), so tiles are large; small M still splits K so the split-K
    # reduction runs on CPU too.
    "interpreter": [
        (1, TileConfig(1, 256, 128, split_k=2, packed_load=True, use_dot=False)),
        (16, TileConfig(16, 256, 128, split_k=2, packed_load=True, swap_ab=True, magic=True)),
        (32, TileConfig(32, 256, 128, packed_load=True, swap_ab=True, magic=True)),
        (None, TileConfig(64, 256, 128, packed_load=True, magic=True, dequant_mm=True)),
    ],
    # "gpu": any GPU without a measured table; the H200 sweep's winners (sweep run 6,
    # benchmarks/results/h200/sweep_sm90.json). GEMV register budget:
    # BLOCK_M*BLOCK_K*BLOCK_N / (32*num_warps) <= 64 fp32 per thread. Plain tl.dot paths stored the
    # dequantized tile to shared memory 2 bytes at a time
    # (triton 3.6 sm90 PTX); swap_ab puts it in registers as the wgmma A operand. Above M=64 the
    # dequant pass + library GEMM beats every fused tile measured (0.9-0.98x dense at M=4096 vs 0.48x).
    "gpu": [
        (1, TileConfig(1, 256, 64, split_k=0, num_warps=8, num_stages=3, packed_load=True, use_dot=False)),
        (16, TileConfig(16, 256, 64, split_k=0, num_warps=8, num_stages=3, packed_load=True, swap_ab=True,
                        magic=True)),
        (64, TileConfig(64, 64, 128, split_k=0, num_warps=4, num_stages=4, packed_load=True, swap_ab=True,
                        magic=True)),
        (None, TileConfig(1, 128, 64, num_warps=4, num_stages=1, packed_load=True, magic=True, dequant_mm=True)),
    ],
}
# Rows for calls that pass the planar operand (b_planar), tried before TILE_TABLE's; M above the last row, or a
# kind with no entry here ("gpu": any GPU without a measured table), takes TILE_TABLE. The interpreter sends
# M <= 64 through the planar path with sm90's block_m steps (16, 32, 64) so CI runs each (the PTX conversion
# replaced by the same steps as Triton ops); split_k=2 at M <= 16 so the split reduction runs too. A measured
# table adds its own under its arch key (kernels/tiles/tiles_sm90.json, "planar").
PLANAR_TABLE = {
    "interpreter": [
        (16, TileConfig(16, 256, PLANAR_BLOCK, split_k=2, planar=True)),
        (32, TileConfig(32, 256, PLANAR_BLOCK, planar=True)),
        (64, TileConfig(64, 256, PLANAR_BLOCK, planar=True)),
    ],
}
TILES_ENV = "CONFORMANCE_W4A16_TILES"  # path of a tile-table JSON that overrides the recorded one
TILES_DIR = Path(__file__).resolve().parent / "tiles"  # tiles_<arch>.json, package data beside this kernel
MAX_AUTO_SPLIT = 16
_TILE_FIELDS = {f.name for f in fields(TileConfig)}
_tried_arch: set[str] = set()
_arch_by_index: dict = {}
_sm_counts: dict = {}

_LAST_LAUNCH: dict = {}  # {"cfg": TileConfig, "M": ..., ...}: flattened only when asked (asdict costs ~10 us)


def last_launch_config() -> dict:
    """The tile configuration (and M, N, K) of the last launch in this process; {} before any."""
    extra = {k: v for k, v in _LAST_LAUNCH.items() if k != "cfg"}
    return {**asdict(_LAST_LAUNCH["cfg"]), **extra} if "cfg" in _LAST_LAUNCH else extra


def _pow2_floor(v: int) -> int:
    return 1 << (max(int(v), 1).bit_length() - 1)


def _k_tile_fits(block_k: int, group_size: int, K: int) -> bool:
    # one scale row per K tile: the tile must not straddle a group boundary
    return K // group_size == 1 or group_size % block_k == 0


def _row_config(row, where: str) -> tuple:
    """(max_m, TileConfig) of one table row, every field checked (a failure names the row and the field)."""
    require(isinstance(row, dict), where, row, "an object")
    unknown = sorted(set(row) - _TILE_FIELDS - {"max_m"})
    require(not unknown, f"{where} keys", unknown, f"only max_m and {sorted(_TILE_FIELDS)}")
    max_m = row.get("max_m")
    require(max_m is None or (isinstance(max_m, int) and max_m > 0), f"{where}.max_m", max_m,
            "a positive int or null (the catch-all row)")
    cfg = TileConfig(**{k: v for k, v in row.items() if k != "max_m"})
    for name in ("block_m", "block_n", "block_k"):
        v = getattr(cfg, name)
        require(isinstance(v, int) and v >= 1 and v & (v - 1) == 0, f"{where}.{name}", v, "a power of two")
    require(cfg.block_n >= 16 and cfg.block_k >= 16, f"{where} block_n/block_k", (cfg.block_n, cfg.block_k), ">= 16")
    require(not cfg.use_dot or cfg.dequant_mm or cfg.block_m >= 16, f"{where}.block_m", cfg.block_m,
            ">= 16 when use_dot (tl.dot needs 16 rows; dequant_mm has no M tile)")
    require(not cfg.planar or (cfg.block_m >= 16 and cfg.block_k == PLANAR_BLOCK and not cfg.dequant_mm),
            f"{where} planar row (block_m, block_k, dequant_mm)", (cfg.block_m, cfg.block_k, cfg.dequant_mm),
            f"block_m >= 16, block_k == {PLANAR_BLOCK}, dequant_mm false")
    require(isinstance(cfg.split_k, int) and cfg.split_k >= 0, f"{where}.split_k", cfg.split_k,
            "an int >= 0 (0 = auto)")
    require(cfg.num_warps in (1, 2, 4, 8, 16), f"{where}.num_warps", cfg.num_warps, "1, 2, 4, 8 or 16")
    require(isinstance(cfg.waves, int) and cfg.waves >= 1, f"{where}.waves", cfg.waves,
            "an int >= 1 (programs per SM that split_k=0 aims for)")
    require(isinstance(cfg.num_stages, int) and cfg.num_stages >= 1, f"{where}.num_stages", cfg.num_stages,
            "an int >= 1")
    return max_m, cfg


def tile_rows_from_json(doc: dict, source: str = "tile table") -> list:
    """[(max_m or None, TileConfig)] from {"table": [{"max_m": 16, "block_m": 16, ...}, ..., {"max_m": null}]};
    rows sorted by max_m, exactly one catch-all (max_m null), no planar row (those go in "planar"), every
    field checked."""
    rows = doc.get("table") if isinstance(doc, dict) else None
    require(isinstance(rows, list) and rows, f"{source}: table", type(rows).__name__, "a non-empty list of rows")
    out = [_row_config(row, f"{source}: table[{i}]") for i, row in enumerate(rows)]
    for i, (_, cfg) in enumerate(out):
        require(not cfg.planar, f"{source}: table[{i}].planar", True,
                "false (planar rows read another operand: they go in the 'planar' list)")
    catch_all = [r for r in out if r[0] is None]
    require(len(catch_all) == 1, f"{source}: catch-all rows", len(catch_all), "exactly one row with max_m null")
    return sorted(out, key=lambda r: (r[0] is None, r[0] or 0))


def planar_rows_from_json(doc: dict, source: str = "tile table") -> list:
    """[(max_m, TileConfig)] from the optional {"planar": [{"max_m": 16, "planar": true, ...}, ...]}: the rows for
    calls that pass the planar operand, sorted by max_m; an M above the last one takes the main table. [] when
    the document has none."""
    rows = doc.get("planar", []) if isinstance(doc, dict) else None
    require(isinstance(rows, list), f"{source}: planar", type(rows).__name__, "a list of rows (or absent)")
    out = [_row_config(row, f"{source}: planar[{i}]") for i, row in enumerate(rows)]
    for i, (max_m, cfg) in enumerate(out):
        require(max_m is not None and cfg.planar, f"{source}: planar[{i}] (max_m, planar)", (max_m, cfg.planar),
                "a positive max_m and planar true (M above the last row takes the main table)")
    return sorted(out, key=lambda r: r[0])


def load_tile_table(arch: str, path: str | os.PathLike | None = None) -> bool:
    """Install the measured tables for `arch` (e.g. "sm90") into TILE_TABLE and PLANAR_TABLE from `path`, else
    from $CONFORMANCE_W4A16_TILES, else kernels/tiles/tiles_<arch>.json. False when there is none.
    A file for another arch is refused (its tiles were measured elsewhere)."""
    p = Path(path) if path else Path(os.environ[TILES_ENV]) if os.environ.get(TILES_ENV) else \
        TILES_DIR / f"tiles_{arch}.json"
    if not p.is_file():
        return False
    doc = json.loads(p.read_text(encoding="utf-8"))
    require(doc.get("arch") == arch, f"{p}: arch", doc.get("arch"), f"{arch!r} (the device this process runs on)")
    rows, planar = tile_rows_from_json(doc, str(p)), planar_rows_from_json(doc, str(p))
    TILE_TABLE[arch] = rows
    PLANAR_TABLE[arch] = planar
    return True


def gpu_tile_kind(device: torch.device) -> str:
    """The TILE_TABLE key for a GPU: its arch ("sm90", "gfx942") when a measured table exists, else "gpu".
    A table file that cannot be used (malformed, another arch) is ignored with a warning naming why:
    the defaults are correct, only untuned."""
    if device.type != "cuda":
        return "gpu"
    index = device.index if device.index is not None else torch.cuda.current_device()
    arch = _arch_by_index.get(index)
    if arch is None:
        if getattr(torch.version, "hip", None):
            arch = torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]
        else:
            major, minor = torch.cuda.get_device_capability(index)
            arch = f"sm{major}{minor}"
        _arch_by_index[index] = arch
    return arch_tile_kind(arch)


def arch_tile_kind(arch: str) -> str:
    """The TILE_TABLE key for a GPU arch: the arch when a measured table exists for it (loaded on first ask),
    else "gpu"."""
    if arch not in TILE_TABLE and arch not in _tried_arch:
        _tried_arch.add(arch)
        try:
            load_tile_table(arch)
        except (InvalidInput, ValueError, TypeError) as e:
            warnings.warn(f"triton_w4a16: measured tile table for {arch} not used, defaults instead: {e}",
                          stacklevel=3)
    return arch if arch in TILE_TABLE else "gpu"


def target_tile_kind(target: Target) -> str:
    """The tile-table key a call on `target` reads: "interpreter" for the cpu target, else arch_tile_kind."""
    return "interpreter" if target.is_cpu else arch_tile_kind(target.arch)


def _row_of(M: int, kind: str, planar: bool) -> Row:
    """The selection row table_tiles picks for M (its threshold and unfitted blocks), for Launch.row."""
    rows = [*(PLANAR_TABLE.get(kind, ()) if planar else ()), *TILE_TABLE[kind]]
    for max_m, cfg in rows:
        if max_m is None or M <= max_m:
            return Row(max_m, cfg.block_m, cfg.block_n, cfg.block_k, not cfg.dequant_mm)
    raise AssertionError("tile table has no catch-all row")


def describe_launch(M: int, N: int, K: int, group_size: int, zp_bias: int, has_zp: bool, dtype: str, kind: str,
                    sm_count: int, planar: bool, use_asm: bool, fitted: TileConfig | None = None) -> Launch:
    """What launch_w4a16_gemm launches for x [M, K] (contiguous, `dtype`) on the operands load_triton_operands
    builds (b_q [K, N/8], scales [G, N], qzeros [G, N/8] when has_zp; b_planar where `planar`), for table `kind`
    and `sm_count` SMs: the path, the fitted tiles, the programs with the arguments the launch passes. Mirrors
    launch_w4a16_gemm line for line (tests/unit/test_compile_lane.py compares it with a recorded launch). `fitted`:
    tiles used as they are (no table, no fitting), for kernels built on this one that pick their own."""
    cfg = fitted or fit_tiles(table_tiles(M, kind, planar), M, N, K, group_size, sm_count)
    act = Ptr(dtype)
    splits = cfg.split_k
    out = act if splits == 1 else Ptr("float32")
    scs = 0 if splits == 1 else M * N
    progs = []
    if cfg.planar:
        R = PLANAR_BLOCK // 4
        k_blocks = cdiv(K, PLANAR_BLOCK)
        progs.append(triton_program(_w4a16_planar_kernel, dict(
            x_ptr=act, b_ptr=Ptr("int16"), s_ptr=act, z_ptr=act, c_ptr=out,
            M=M, N=N, K=K, G=K // group_size, group_size=group_size, KBT=k_blocks, kb_per_split=cdiv(k_blocks, splits),
            stride_xm=K, stride_xk=1, stride_bb=N * R, stride_bn=R, stride_sg=N, stride_sn=1,
            stride_zg=N, stride_zn=1, stride_cs=scs, stride_cm=N, stride_cn=1,
            ZB=zp_bias, HAS_ZP=has_zp, PG=planes_per_group(K, group_size), R=R, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, EVEN_N=N % cfg.block_n == 0, USE_ASM=use_asm),
            dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)))
        path = "planar"
    else:
        even_k, even_n = K % cfg.block_k == 0, N % cfg.block_n == 0
        common = dict(ZP_BIAS=zp_bias, HAS_ZP=has_zp, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                      PACKED_LOAD=cfg.packed_load, EVEN_K=even_k, EVEN_N=even_n, MAGIC=cfg.magic,
                      MAGIC_BITS=0x6400 if dtype == "float16" else 0x4300)
        strides = dict(stride_bk=N // 8, stride_bn=1, stride_sg=N, stride_sn=1, stride_zg=N // 8, stride_zn=1)
        if cfg.dequant_mm:
            progs.append(triton_program(_w4a16_dequant_kernel, dict(
                b_ptr=Ptr("int32"), s_ptr=act, z_ptr=Ptr("int32"), w_ptr=act, N=N, K=K, group_size=group_size,
                **strides, stride_wk=N, stride_wn=1, **common), dict(num_warps=cfg.num_warps, num_stages=1)))
            path = "dequant_mm"
        else:
            progs.append(triton_program(_w4a16_gemm_kernel, dict(
                a_ptr=act, b_ptr=Ptr("int32"), s_ptr=act, z_ptr=Ptr("int32"), c_ptr=out,
                M=M, N=N, K=K, group_size=group_size, tiles_per_split=cdiv(K, cfg.block_k) // splits,
                stride_am=K, stride_ak=1, **strides, stride_cs=scs, stride_cm=N, stride_cn=1,
                BLOCK_M=cfg.block_m, USE_DOT=cfg.use_dot, SWAP_AB=cfg.swap_ab and cfg.use_dot, **common),
                dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)))
            path = "dot" if cfg.use_dot else "gemv"
    if splits > 1 and not cfg.dequant_mm:
        progs.append(triton_program(_splitk_reduce_kernel, dict(
            ws_ptr=Ptr("float32"), c_ptr=act, M=M, N=N, stride_ws=M * N, stride_wm=N, stride_wn=1, stride_cm=N,
            stride_cn=1, SPLIT_K=splits, BLOCK_M=REDUCE_BLOCK_M, BLOCK_N=REDUCE_BLOCK_N), dict(num_warps=4)))
        path += "+splitk"
    tiles = dict(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, split_k=splits,
                 num_warps=cfg.num_warps, num_stages=cfg.num_stages, swap_ab=cfg.swap_ab and cfg.use_dot,
                 magic=cfg.magic, packed_load=cfg.packed_load)
    row = _row_of(M, kind, planar) if fitted is None else Row(None, cfg.block_m, cfg.block_n, cfg.block_k,
                                                                 not cfg.dequant_mm)
    return Launch(path, tiles, programs=progs, row=row)


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _sm_counts:
        _sm_counts[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _sm_counts[key]


def table_tiles(M: int, device_kind: str, planar: bool = False) -> TileConfig:
    """The table entry for runtime M on 'interpreter', 'gpu' or an arch key with a measured table. With
    `planar` (the call passes the planar operand) the kind's planar rows come first; M above them, or a kind
    without any, takes the main table."""
    if planar:
        for max_m, cfg in PLANAR_TABLE.get(device_kind, ()):
            if M <= max_m:
                return cfg
    for max_m, cfg in TILE_TABLE[device_kind]:
        if max_m is None or M <= max_m:
            return cfg
    raise AssertionError("tile table has no catch-all row")


def _auto_split(k_tiles: int, programs_mn: int, sm_count: int, waves: int = AUTO_SPLIT_WAVES) -> int:
    """Smallest divisor d of k_tiles with programs_mn * d >= waves * sm_count (capped)."""
    want = max(1, waves * max(sm_count, 1))
    divisors = [d for d in range(1, min(MAX_AUTO_SPLIT, k_tiles) + 1) if k_tiles % d == 0]
    for d in divisors:
        if programs_mn * d >= want:
            return d
    return divisors[-1]


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments; a launch re-fits the same few shapes
def fit_tiles(cfg: TileConfig, M: int, N: int, K: int, group_size: int, sm_count: int = 0) -> TileConfig:
    """Shrink a table entry to the problem: BLOCK_K clamped to divide the group (the vllm#39705 fix),
    blocks no larger than needed, split-K the largest divisor of the K tile count within the entry
    (split_k=0: the smallest divisor that gives cfg.waves programs per SM of `sm_count`); planar tiles: _fit_planar."""
    if cfg.planar:  # the layout fixes the K block; groups are handled per plane (planes_per_group)
        return _fit_planar(cfg, M, N, K, sm_count)
    bk = cfg.block_k
    if K // group_size > 1:
        bk = min(bk, _pow2_floor(group_size))
        while bk > 16 and group_size % bk:
            bk //= 2
    else:
        bk = min(bk, max(16, next_power_of_2(K)))
    require(bk >= 16 and _k_tile_fits(bk, group_size, K), "group_size", group_size,
            "a multiple of 16 when K has several groups (tl.dot needs BLOCK_K >= 16)")
    min_m = 16 if cfg.use_dot else 1  # tl.dot needs 16 rows; the GEMV path takes any power of two
    bm = min(cfg.block_m, max(min_m, next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, next_power_of_2(N)))
    k_tiles = cdiv(K, bk)
    if cfg.dequant_mm:  # one dequant pass then a library GEMM: no M tiles, no K splits
        return replace(cfg, block_m=1, block_n=bn, block_k=bk, split_k=1)
    if cfg.split_k == 0:
        sk = _auto_split(k_tiles, cdiv(M, bm) * cdiv(N, bn), sm_count, cfg.waves)
    else:
        sk = max(d for d in range(1, min(cfg.split_k, k_tiles) + 1) if k_tiles % d == 0)
    return replace(cfg, block_m=bm, block_n=bn, block_k=bk, split_k=sk)


def _fit_planar(cfg: TileConfig, M: int, N: int, K: int, sm_count: int) -> TileConfig:
    """The planar path's tiles: block_k is the layout's block; split_k = 0 gives enough programs for cfg.waves
    per SM (no divisor rule: any split works); a split count is then evened out (ceil(blocks / per-split)
    programs, none empty)."""
    bm = min(cfg.block_m, max(16, next_power_of_2(M)))
    bn = min(cfg.block_n, max(16, next_power_of_2(N)))
    k_blocks = cdiv(K, PLANAR_BLOCK)
    if cfg.split_k == 0:
        want = cdiv(cfg.waves * max(sm_count, 1), cdiv(M, bm) * cdiv(N, bn))
    else:
        want = cfg.split_k
    per = cdiv(k_blocks, max(1, min(want, k_blocks)))
    return replace(cfg, block_m=bm, block_n=bn, block_k=PLANAR_BLOCK, split_k=cdiv(k_blocks, per))


def planes_per_group(K: int, group_size: int) -> int:
    """Planes (PLANAR_BLOCK / 4 rows of K each) that share one scale row: 4 when a group spans whole blocks or
    there is one group, else group_size / (PLANAR_BLOCK / 4)."""
    R = PLANAR_BLOCK // 4
    if K // group_size == 1 or group_size % PLANAR_BLOCK == 0:
        return 4
    require(group_size % R == 0, "group_size", group_size,
            f"a multiple of {R} (one plane of the planar layout) when K has several groups")
    return group_size // R


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
                      group_size: int, zp_bias: int, tiles: TileConfig | None = None,
                      b_planar: torch.Tensor | None = None, zeros_act: torch.Tensor | None = None) -> torch.Tensor:
    """Run the GEMM on a 2-D x. `tiles` overrides the table entry (still fitted and clamped);
    with zp_bias != 0 the zeros are ignored (a biased type's zero point is its bias). A planar tile (the
    decode path) reads `b_planar` (the same weight in the planar layout) and, for explicit zero points,
    `zeros_act` ([G, N] in the act dtype) instead of b_q and qzeros."""
    check_x_device("triton_w4a16", x)
    K, N = _check_operands(x, b_q, scales, qzeros, group_size, zp_bias)
    M = x.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    kind = "interpreter" if (x.device.type == "cpu" or interpreting()) else gpu_tile_kind(x.device)
    cfg = fit_tiles(tiles or table_tiles(M, kind, b_planar is not None), M, N, K, group_size, _sm_count(x.device))
    if cfg.planar:
        _LAST_LAUNCH.clear()
        _LAST_LAUNCH.update(cfg=cfg, M=M, N=N, K=K, device_kind=kind, even_k=K % PLANAR_BLOCK == 0,
                            even_n=N % cfg.block_n == 0)
        return _launch_planar(x, b_planar, scales, zeros_act, group_size, zp_bias,
                              zp_bias == 0 and qzeros is not None, cfg, out)
    # the kernel reads one scale row per K tile; a straddling tile silently mixes groups
    assert _k_tile_fits(cfg.block_k, group_size, K), f"BLOCK_K={cfg.block_k} straddles group_size={group_size}"
    k_tiles = cdiv(K, cfg.block_k)
    splits = cfg.split_k
    assert k_tiles % splits == 0, f"split_k={splits} does not divide the {k_tiles} K tiles"
    tiles_per_split = k_tiles // splits
    has_zp = zp_bias == 0 and qzeros is not None
    z = qzeros if has_zp else b_q  # placeholder pointer, never read when HAS_ZP is False
    # unmasked weight/scale loads only where every tile is in bounds (a tail read is invisible in the
    # numbers, columns and rows past the end are never stored, but can fault on a GPU)
    even_k, even_n = K % cfg.block_k == 0, N % cfg.block_n == 0
    magic_bits = 0x6400 if x.dtype == torch.float16 else 0x4300  # 1024.0 in fp16, 128.0 in bf16
    _LAST_LAUNCH.clear()
    _LAST_LAUNCH.update(cfg=cfg, M=M, N=N, K=K, device_kind=kind, even_k=even_k, even_n=even_n)
    if cfg.dequant_mm:
        w = torch.empty((K, N), dtype=x.dtype, device=x.device)
        _w4a16_dequant_kernel[(k_tiles, cdiv(N, cfg.block_n))](
            b_q, scales, z, w, N, K, group_size,
            b_q.stride(0), b_q.stride(1), scales.stride(0), scales.stride(1), z.stride(0), z.stride(1),
            w.stride(0), w.stride(1),
            ZP_BIAS=zp_bias, HAS_ZP=has_zp, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            PACKED_LOAD=cfg.packed_load, EVEN_K=even_k, EVEN_N=even_n, MAGIC=cfg.magic, MAGIC_BITS=magic_bits,
            num_warps=cfg.num_warps, num_stages=1,
        )
        with fp32_gemm_reduction():
            return torch.mm(x, w, out=out)
    grid = (cdiv(M, cfg.block_m), cdiv(N, cfg.block_n), splits)
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
        PACKED_LOAD=cfg.packed_load, USE_DOT=cfg.use_dot, EVEN_K=even_k, EVEN_N=even_n,
        SWAP_AB=cfg.swap_ab and cfg.use_dot, MAGIC=cfg.magic, MAGIC_BITS=magic_bits,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        _reduce_splits(c, out, M, N, splits)
    return out


def planar_uses_asm(device: torch.device) -> bool:
    """Whether the planar path converts nibbles with inline PTX here (an NVIDIA GPU), else with Triton ops."""
    return PLANAR_ASM and device.type == "cuda" and not interpreting() and not getattr(torch.version, "hip", None)


PLANAR_ASM = True  # False: the Triton-op conversion on NVIDIA GPUs too (the probe checks both agree bit for bit)


def _check_planar(b_planar, zeros_act, scales, K: int, N: int, has_zp: bool) -> None:
    want = (cdiv(K, PLANAR_BLOCK), N, PLANAR_BLOCK // 8)
    require(b_planar is not None, "b_planar", None,
            "the planar weight (references.codecs.operands.planar_pack_qweight) when the tile is planar")
    require(b_planar.dtype == torch.int32 and tuple(b_planar.shape) == want and b_planar.is_contiguous(),
            "b_planar", (b_planar.dtype, tuple(b_planar.shape)), f"a contiguous int32 tensor {want}")
    if has_zp:
        require(zeros_act is not None and zeros_act.dtype == scales.dtype and zeros_act.shape == scales.shape,
                "zeros_act", None if zeros_act is None else (zeros_act.dtype, tuple(zeros_act.shape)),
                f"the zero points as a {scales.dtype} tensor {tuple(scales.shape)} (explicit zeros, planar tile)")


def _launch_planar(x, b_planar, scales, zeros_act, group_size: int, zp_bias: int, has_zp: bool,
                   cfg: TileConfig, out: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    N = out.shape[1]
    _check_planar(b_planar, zeros_act, scales, K, N, has_zp)
    h = b_planar.view(torch.int16)  # [Kb, N, R]: the kernel shifts 16-bit values (4 planes each)
    k_blocks = h.shape[0]
    splits = cfg.split_k
    per = cdiv(k_blocks, splits)
    assert cdiv(k_blocks, per) == splits, f"split_k={splits} leaves an empty split of {k_blocks} K blocks"
    z = zeros_act if has_zp else scales  # placeholder pointer, never read when HAS_ZP is False
    if splits == 1:
        c, scs = out, 0
    else:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        scs = c.stride(0)
    grid = (cdiv(N, cfg.block_n), splits, cdiv(M, cfg.block_m))
    _w4a16_planar_kernel[grid](
        x, h, scales, z, c,
        M, N, K, scales.shape[0], group_size, k_blocks, per,
        x.stride(0), x.stride(1), h.stride(0), h.stride(1), scales.stride(0), scales.stride(1),
        z.stride(0), z.stride(1), scs, c.stride(-2), c.stride(-1),
        ZB=zp_bias, HAS_ZP=has_zp, PG=planes_per_group(K, group_size), R=PLANAR_BLOCK // 4,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, EVEN_N=N % cfg.block_n == 0, USE_ASM=planar_uses_asm(x.device),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        _reduce_splits(c, out, M, N, splits)
    return out


def _reduce_splits(c: torch.Tensor, out: torch.Tensor, M: int, N: int, splits: int) -> None:
    # the reduction is a pure stream over the workspace: its own tile, ~2048 elements a program
    _splitk_reduce_kernel[(cdiv(M, REDUCE_BLOCK_M), cdiv(N, REDUCE_BLOCK_N))](
        c, out, M, N, c.stride(0), c.stride(1), c.stride(2), out.stride(0), out.stride(1), splits,
        BLOCK_M=REDUCE_BLOCK_M, BLOCK_N=REDUCE_BLOCK_N, num_warps=4,
    )


@contextlib.contextmanager
def fp32_gemm_reduction():
    """torch's default lets cuBLAS reduce fp16/bf16 split-K partials in the act dtype; the dequant_mm
    path declares fp32 accumulation, so it is switched off around the library GEMM (host-side flags,
    read when the GEMM is issued: graph capture sees the same choice). The flags are process-global: a
    GEMM another thread issues meanwhile also runs without reduced-precision reduction (only more
    precise, never less)."""
    m = torch.backends.cuda.matmul
    prev = (m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction)
    m.allow_fp16_reduced_precision_reduction = False
    m.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction = prev


def gemm_any_rank(x: torch.Tensor, fn) -> torch.Tensor:
    """Apply a 2-D GEMM `fn(x2d) -> [M, N]` to x of any rank >= 1 (leading dims flattened)."""
    lead = x.shape[:-1]
    y = fn(x.reshape(-1, x.shape[-1]))
    return y.reshape(*lead, y.shape[-1])


@torch.library.custom_op("conformance::triton_w4a16_gemm", mutates_args=())
def triton_w4a16_gemm(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                      group_size: int, zp_bias: int, b_planar: torch.Tensor | None = None,
                      zeros_act: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ dequant(b_q, scales, qzeros or zp_bias); x [..., K] fp16/bf16, y [..., N] contiguous. b_planar
    and zeros_act (the same weight and zero points for the planar decode path) are read where the tile table
    picks that path."""
    return gemm_any_rank(x, lambda x2: launch_w4a16_gemm(x2.contiguous(), b_q, scales, qzeros, group_size,
                                                         zp_bias, b_planar=b_planar, zeros_act=zeros_act))


@triton_w4a16_gemm.register_fake
def _(x, b_q, scales, qzeros, group_size, zp_bias, b_planar=None, zeros_act=None):
    return x.new_empty((*x.shape[:-1], b_q.shape[1] * 8))


def triton_availability(target: Target) -> str | None:
    """Why Triton kernels cannot run here for `target`, or None."""
    if target.is_cpu:
        return None if interpreting() else "Triton interpreter not enabled (TRITON_INTERPRET is not 1)"
    if interpreting():
        return f"target={target} needs a GPU but Triton runs in the interpreter here"
    from conformance.core.targets import detect_target

    here = detect_target()
    return None if here == target else f"target={target} is not this machine's device ({here})"


class TritonW4A16Base(Kernel):
    """What triton_w4a16 and triton_w4a16_actorder share (one GEMM, one operand layout); subclasses set
    `allow_act_order` and `apply`. Not registered itself."""
    family = "w4a16"
    deterministic = True  # split-K reduces through a workspace in a fixed order, no atomics
    allow_act_order = False

    def can_implement(self, config, target: Target) -> str | None:
        return triton_w4a16_gates(config, target, allow_act_order=self.allow_act_order)

    def availability(self, target: Target) -> str | None:
        return triton_availability(target)

    def dequant_dtype(self, config) -> torch.dtype:
        return torch.float16 if config.dtype == "float16" else torch.bfloat16

    def accumulate_dtype(self, config) -> torch.dtype:
        return torch.float32

    def launch_config(self) -> dict:
        return last_launch_config()

    planar_operand = False  # True: load builds b_planar, so a call may take the planar rows

    def launch(self, config, M: int, target: Target) -> Launch | None:
        """What a call with M rows launches on `target` (cpu: the interpreter's tiles; a GPU: its measured table
        or the "gpu" one, split-K sized for the target's reference SM count); None when the gate refuses."""
        if self.can_implement(config, target) is not None:
            return None
        sms = 0 if target.is_cpu else compute_units(target.arch, 1)
        return self._launch(config, M, target_tile_kind(target), sms, PLANAR_ASM and target.kind == "cuda")

    def _launch(self, config, M: int, kind: str, sm_count: int, use_asm: bool) -> Launch:
        gs = config.K if config.group_size == -1 else config.group_size
        zp_bias = 0 if config.weight_type == "uint4" else 8
        launch = describe_launch(M, config.N, config.K, gs, zp_bias, zp_bias == 0, config.dtype, kind, sm_count,
                                 self.planar_operand, use_asm)
        return replace(launch, key=(self.name, *launch.key))

    def compile_key(self, case):
        """The key of the launch the case's M picks on this device (its tile row, the constexprs that follow from
        the case, Triton's int classes of every int argument): equal keys compile the same programs. None in the
        interpreter, where nothing compiles."""
        from conformance.core.runtime import kernel_device

        dev = torch.device(kernel_device())
        if dev.type != "cuda":
            return None
        return self._launch(case.config(), case.M, gpu_tile_kind(dev), _sm_count(dev), planar_uses_asm(dev)).key

    def load(self, checkpoint, config=None) -> TritonW4A16Operands:
        return load_triton_operands(checkpoint, allow_act_order=self.allow_act_order)

    def model(self, o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
        return model_triton_operands(o, x)


@register_kernel
class TritonW4A16(TritonW4A16Base):
    name = "triton_w4a16"
    priority = 10
    gate_summary = ("cuda/rocm (upstream) and cpu (interpreter); fp16/bf16; uint4b8, uint4; "
                    "group -1/32/64/128/256 or K; N%8==0; K%group==0; no act-order")
    op = torch.ops.conformance.triton_w4a16_gemm.default
    planar_operand = True

    def load(self, checkpoint, config=None) -> TritonW4A16Operands:
        """b_q for every path, plus the planar operands the decode path reads (where the device's tile table has
        planar rows: the interpreter and sm90)."""
        return load_triton_operands(checkpoint, allow_act_order=False, planar=True)

    def apply(self, o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
        if o.perm is not None:
            raise InvalidInput("operands.perm", "set", "None (act-order operands belong to triton_w4a16_actorder)")
        o = to_device(o, x.device)
        return self.op(x, o.b_q, o.scales, o.qzeros, o.group_size, o.zp_bias, o.b_planar, o.zeros_act)
