"""A bug-switchable copy of triton_w4a16's GEMM (registers no kernel): every path the shipped launch takes.

`_mutant_gemm_kernel`, `_mutant_dequant_tile`, `_mutant_dequant_kernel` and `_mutant_planar_kernel` are copies
of the shipped `_w4a16_gemm_kernel`, `_dequant_tile`, `_w4a16_dequant_kernel` and `_w4a16_planar_kernel` (every
path: the planar decode path, the dot-free GEMV, swap_ab, the plain tl.dot path, packed and gathered weight loads,
magic dequant, EVEN_K/EVEN_N, and the dequant_mm prefill path; the planar nibble conversion is the shipped
`_planar_plane` itself), and `launch_mutant` is a copy of `launch_w4a16_gemm` (the same tile tables, fit_tiles
and split-K reduction). Each bug is one switch (BUGS); with every switch off the copy is the shipped kernel bit for
bit on each path (tests/conformance/test_proof_of_power.py::test_mutant_kernel_copy_is_faithful), so a failure of
a broken kernel built on it is its one bug, and a change to the shipped kernel shows up there first.

`TritonLaunchMutant` is triton_w4a16 running launch_mutant with the bugs its subclass names; `resync_planar`
keeps the planar operands of a load-step mutant in step with its (wrong) b_q and zeros. Kernel modules import
this one; it is not a plugin itself (importing it registers nothing).
"""
from __future__ import annotations

import torch

from conformance.core import registry
from conformance.core.runtime import cdiv

registry.load_all()  # configures Triton (the interpreter on a CPU host) before any @triton.jit below is defined
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from conformance_kernels import triton_w4a16 as tw  # noqa: E402 - the built-in package exists after load_all

# every bug switch launch_mutant takes, with what it breaks (one line each)
BUGS = {
    "deq_via_fp16": "dequantizes through fp16 whatever the act dtype (bf16 scales outside fp16's range are lost)",
    "last_n_tile_off_by_one": "a partial last N tile bounds its scale loads by N - 1: the last column gets scale 0",
    "skip_m_tail": "rows past the last full BLOCK_M tile are never stored (the output keeps whatever memory held)",
    "group_round_up": "a K tile's group index is rounded up (ceil(k0 / group_size)), wrong for tiles inside a group",
    "drop_k_tail": "the K loop covers K // BLOCK_K tiles: the last, partial K tile is dropped",
    "no_block_k_clamp": "BLOCK_K is not clamped to the group size: a K tile straddling groups uses its first group",
    "drop_split_remainder": "split-K takes the table's split count as is: K tiles past splits * (tiles // splits) "
                            "are never summed",
    "gemv_scales_as_fp16": "the GEMV row (the dot-free program) reads bf16 scales as fp16: the same 16 bits, another "
                           "number",
}


@triton.jit
def _mutant_dequant_tile(
    b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size, G,
    stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr, FP32_OUT: tl.constexpr,
    DEQ_VIA_FP16: tl.constexpr, LAST_N_TILE_OFF_BY_ONE: tl.constexpr, GROUP_ROUND_UP: tl.constexpr,
):
    """triton_w4a16's _dequant_tile plus three bug switches (G: the number of groups, read by GROUP_ROUND_UP)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_k = offs_k < K
    mask_n = offs_n < N
    if LAST_N_TILE_OFF_BY_ONE:
        # BUG: a partial last N tile computes its column bound as N - 1
        mask_s = offs_n < tl.where((pid_n + 1) * BLOCK_N > N, N - 1, N)
    else:
        mask_s = mask_n
    shift_n = (offs_n % 8) * 4
    if PACKED_LOAD:
        offs_w = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        w_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_w[None, :] * stride_bn
        if EVEN_K and EVEN_N:
            words = tl.load(w_ptrs)
        else:
            words = tl.load(w_ptrs, mask=mask_k[:, None] & (offs_w < N // 8)[None, :], other=0)
        shift_j = tl.arange(0, 8) * 4
        q = tl.reshape((words[:, :, None] >> shift_j[None, None, :]) & 0xF, (BLOCK_K, BLOCK_N))
    else:
        w_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] // 8) * stride_bn
        if EVEN_K and EVEN_N:
            words = tl.load(w_ptrs)
        else:
            words = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        q = (words >> shift_n[None, :]) & 0xF
    if GROUP_ROUND_UP:
        # BUG: the tile's group rounded up (clamped to the last group, so no load leaves the scales)
        g = tl.minimum((k0 + group_size - 1) // group_size, G - 1)
    else:
        g = k0 // group_size
    if EVEN_N:
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn)
    else:
        s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_s, other=0.0)
    if HAS_ZP:
        zw = tl.load(z_ptr + g * stride_zg + (offs_n // 8) * stride_zn, mask=mask_n, other=0)
        z = (zw >> shift_n) & 0xF
    else:
        z = tl.full((BLOCK_N,), ZP_BIAS, tl.int32)
    if DEQ_VIA_FP16:
        # BUG: the scales pass through fp16 whatever the act dtype (exact in fp16 for fp16 layers)
        if FP32_OUT:
            w = (q - z[None, :]).to(tl.float32) * s.to(tl.float16).to(tl.float32)[None, :]
        else:
            w = ((q - z[None, :]).to(tl.float16) * s.to(tl.float16)[None, :]).to(s_ptr.dtype.element_ty)
    elif FP32_OUT:
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
def _mutant_gemm_kernel(
    a_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, group_size, G, tiles_per_split,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, USE_DOT: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    SWAP_AB: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
    DEQ_VIA_FP16: tl.constexpr, LAST_N_TILE_OFF_BY_ONE: tl.constexpr, GROUP_ROUND_UP: tl.constexpr,
    SKIP_M_TAIL: tl.constexpr, DROP_K_TAIL: tl.constexpr,
):
    """triton_w4a16's _w4a16_gemm_kernel (every path) plus the switches of _mutant_dequant_tile and two more."""
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
        if DROP_K_TAIL:
            # BUG: a K tile that does not fit whole below K contributes nothing (loop bound K // BLOCK_K)
            k_lim = tl.where(k0 + BLOCK_K <= K, K, k0)
        else:
            k_lim = K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=mask_m[:, None] & (offs_k < k_lim)[None, :], other=0.0)
        w = _mutant_dequant_tile(b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size, G,
                                 stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
                                 ZP_BIAS, HAS_ZP, BLOCK_N, BLOCK_K, PACKED_LOAD, EVEN_K, EVEN_N,
                                 MAGIC, MAGIC_BITS, not USE_DOT, DEQ_VIA_FP16, LAST_N_TILE_OFF_BY_ONE, GROUP_ROUND_UP)
        if SWAP_AB:
            acc_t = tl.dot(tl.trans(w), tl.trans(a), acc_t)
        elif USE_DOT:
            acc = tl.dot(a, w, acc)
        else:
            acc3 += a.to(tl.float32)[:, :, None] * w[None, :, :]
    if SWAP_AB:
        acc = tl.trans(acc_t)
    elif not USE_DOT:
        acc = tl.sum(acc3, axis=1)
    mask_m_store = mask_m
    if SKIP_M_TAIL:
        # BUG: rows past the last full BLOCK_M tile are never stored
        mask_m_store = offs_m < M - M % BLOCK_M
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m_store[:, None] & mask_n[None, :])


@triton.jit
def _mutant_dequant_kernel(
    b_ptr, s_ptr, z_ptr, w_ptr, N, K, group_size, G,
    stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn, stride_wk, stride_wn,
    ZP_BIAS: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_LOAD: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
    DEQ_VIA_FP16: tl.constexpr, LAST_N_TILE_OFF_BY_ONE: tl.constexpr, GROUP_ROUND_UP: tl.constexpr,
):
    """triton_w4a16's _w4a16_dequant_kernel (the dequant_mm path's first pass) plus the dequant tile's switches."""
    pid_k = tl.program_id(0)
    pid_n = tl.program_id(1)
    k0 = pid_k * BLOCK_K
    w = _mutant_dequant_tile(b_ptr, s_ptr, z_ptr, k0, pid_n, N, K, group_size, G,
                             stride_bk, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
                             ZP_BIAS, HAS_ZP, BLOCK_N, BLOCK_K, PACKED_LOAD, EVEN_K, EVEN_N, MAGIC, MAGIC_BITS, False,
                             DEQ_VIA_FP16, LAST_N_TILE_OFF_BY_ONE, GROUP_ROUND_UP)
    offs_k = k0 + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn, w,
             mask=(offs_k < K)[:, None] & (offs_n < N)[None, :])


@triton.jit
def _mutant_planar_kernel(
    x_ptr, b_ptr, s_ptr, z_ptr, c_ptr,
    M, N, K, G, group_size, KBT, kb_per_split,
    stride_xm, stride_xk, stride_bb, stride_bn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_cs, stride_cm, stride_cn,
    ZB: tl.constexpr, HAS_ZP: tl.constexpr, PG: tl.constexpr, R: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, USE_ASM: tl.constexpr,
    DEQ_VIA_FP16: tl.constexpr, LAST_N_TILE_OFF_BY_ONE: tl.constexpr, GROUP_ROUND_UP: tl.constexpr,
    SKIP_M_TAIL: tl.constexpr, DROP_K_TAIL: tl.constexpr,
):
    """triton_w4a16's _w4a16_planar_kernel (the planar decode path; its nibble conversion is the shipped
    _planar_plane itself) plus the switches of _mutant_gemm_kernel."""
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
    if LAST_N_TILE_OFF_BY_ONE:
        # BUG: a partial last N tile computes its column bound as N - 1 (its scale loads)
        mask_s = offs_n < tl.where((pid_n + 1) * BLOCK_N > N, N - 1, N)
    else:
        mask_s = mask_n
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    kb_lo = pid_k * kb_per_split
    kb_hi = tl.minimum(kb_lo + kb_per_split, KBT)
    if PG == 4:
        if GROUP_ROUND_UP:  # BUG: the block's group rounded up (clamped to the last group)
            g_next = tl.minimum((kb_lo * BLOCK_K + group_size - 1) // group_size, G - 1)
        else:
            g_next = (kb_lo * BLOCK_K) // group_size
        s_next = tl.load(s_ptr + g_next * stride_sg + offs_n * stride_sn, mask=mask_s & ((offs_n * 0 + g_next) < G),
                         other=0.0)
    for kb in range(kb_lo, kb_hi):
        if PG == 4:
            s_blk = s_next
            if GROUP_ROUND_UP:
                g_next = tl.minimum((tl.minimum(kb + 1, kb_hi - 1) * BLOCK_K + group_size - 1) // group_size, G - 1)
            else:
                g_next = (tl.minimum(kb + 1, kb_hi - 1) * BLOCK_K) // group_size
            s_next = tl.load(s_ptr + g_next * stride_sg + offs_n * stride_sn,
                             mask=mask_s & ((offs_n * 0 + g_next) < G), other=0.0)
        h_ptrs = b_ptr + kb * stride_bb + offs_n[:, None] * stride_bn + offs_r[None, :]
        if EVEN_N:
            h = tl.load(h_ptrs)
        else:
            h = tl.load(h_ptrs, mask=mask_n[:, None], other=0)
        if DROP_K_TAIL:
            # BUG: a K block that does not fit whole below K contributes nothing (loop bound K // BLOCK_K)
            k_lim = tl.where((kb + 1) * BLOCK_K <= K, K, 0)
        else:
            k_lim = K
        for j in tl.static_range(4):
            k0 = kb * BLOCK_K + j * R
            if GROUP_ROUND_UP:
                g = tl.minimum((kb * BLOCK_K + (j - j % PG) * R + group_size - 1) // group_size, G - 1)
            else:
                g = (kb * BLOCK_K + (j - j % PG) * R) // group_size
            mask_g = mask_n & ((offs_n * 0 + g) < G)
            if j % PG == 0:
                accg = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
                if HAS_ZP:
                    z = tl.load(z_ptr + g * stride_zg + offs_n[:, None] * stride_zn + 0 * offs_r[None, :],
                                mask=mask_g[:, None], other=0.0)
            xs = tl.load(x_ptr + offs_m[None, :] * stride_xm + (k0 + offs_r)[:, None] * stride_xk,
                         mask=mask_m[None, :] & ((k0 + offs_r) < k_lim)[:, None], other=0.0)
            w = tw._planar_plane(h, j, ZB, BF16, USE_ASM)
            if HAS_ZP:
                w = w - z
            accg = tl.dot(w, xs, accg)
            if j % PG == PG - 1:
                if PG == 4:
                    s = s_blk
                else:
                    s = tl.load(s_ptr + g * stride_sg + offs_n * stride_sn, mask=mask_g & mask_s, other=0.0)
                if DEQ_VIA_FP16:
                    acc += accg * s.to(tl.float16).to(tl.float32)[:, None]  # BUG: the scale through fp16
                else:
                    acc += accg * s.to(tl.float32)[:, None]
    mask_m_store = mask_m
    if SKIP_M_TAIL:
        mask_m_store = offs_m < M - M % BLOCK_M  # BUG: rows past the last full BLOCK_M tile are never stored
    c_ptrs = c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, tl.trans(acc).to(c_ptr.dtype.element_ty), mask=mask_m_store[:, None] & mask_n[None, :])


def fit_tiles_without_clamp(cfg: tw.TileConfig, M: int, N: int, K: int, group_size: int,
                            sm_count: int = 0) -> tw.TileConfig:
    """tw.fit_tiles minus the vllm#39705 fix: BLOCK_K stays the table's (capped at K), even across groups. It is
    fit_tiles for one group spanning K, the one case where fit_tiles has nothing to clamp."""
    return tw.fit_tiles(cfg, M, N, K, K, sm_count)


def launch_mutant(x: torch.Tensor, b_q: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor | None,
                  group_size: int, zp_bias: int, tiles: tw.TileConfig | None = None, planar: dict | None = None,
                  **bugs) -> torch.Tensor:
    """tw.launch_w4a16_gemm on the mutant kernels with the named bugs of BUGS switched on (all off: the shipped
    launch, bit for bit, on every path; `tiles` overrides the table entry as there). `planar`: {"b_planar",
    "zeros_act"}, the planar decode path's operands (as launch_w4a16_gemm's keywords); without b_planar the planar
    rows are skipped, as there."""
    unknown = sorted(set(bugs) - set(BUGS))
    assert not unknown, f"unknown bugs {unknown}; allowed: {sorted(BUGS)}"
    on = {b: bool(bugs.get(b, False)) for b in BUGS}
    K, N = tw._check_operands(x, b_q, scales, qzeros, group_size, zp_bias)
    M = x.shape[0]
    G = K // group_size
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    kind = "interpreter" if (x.device.type == "cpu" or tw.interpreting()) else tw.gpu_tile_kind(x.device)
    planar = planar or {}
    b_planar = planar.get("b_planar")
    entry = tiles or tw.table_tiles(M, kind, b_planar is not None)
    fit = fit_tiles_without_clamp if on["no_block_k_clamp"] else tw.fit_tiles
    cfg = fit(entry, M, N, K, group_size, tw._sm_count(x.device))
    if cfg.planar:
        tw._LAST_LAUNCH.clear()
        tw._LAST_LAUNCH.update(cfg=cfg, M=M, N=N, K=K, device_kind=kind, even_k=K % tw.PLANAR_BLOCK == 0,
                               even_n=N % cfg.block_n == 0, mutant=True)
        return _launch_planar(x, b_planar, scales, planar.get("zeros_act"), group_size, zp_bias,
                              zp_bias == 0 and qzeros is not None, cfg, entry, out, on)
    if not on["no_block_k_clamp"]:
        assert tw._k_tile_fits(cfg.block_k, group_size, K), f"BLOCK_K={cfg.block_k} straddles group_size={group_size}"
    k_tiles = cdiv(K, cfg.block_k)
    splits = cfg.split_k
    if on["drop_split_remainder"] and entry.split_k > 0 and not cfg.dequant_mm:
        splits = min(entry.split_k, k_tiles)  # BUG: not fitted to divide the K tiles
    else:
        assert k_tiles % splits == 0, f"split_k={splits} does not divide the {k_tiles} K tiles"
    tiles_per_split = k_tiles // splits
    has_zp = zp_bias == 0 and qzeros is not None
    z = qzeros if has_zp else b_q
    even_k, even_n = K % cfg.block_k == 0, N % cfg.block_n == 0
    magic_bits = 0x6400 if x.dtype == torch.float16 else 0x4300
    dequant_bugs = dict(DEQ_VIA_FP16=on["deq_via_fp16"], LAST_N_TILE_OFF_BY_ONE=on["last_n_tile_off_by_one"],
                        GROUP_ROUND_UP=on["group_round_up"])
    tw._LAST_LAUNCH.clear()
    tw._LAST_LAUNCH.update(cfg=cfg, M=M, N=N, K=K, device_kind=kind, even_k=even_k, even_n=even_n, mutant=True)
    if on["gemv_scales_as_fp16"] and not cfg.use_dot and not cfg.dequant_mm and scales.dtype == torch.bfloat16:
        scales = scales.view(torch.float16)  # BUG: the GEMV program's scale pointer typed fp16 (after the checks)
    if cfg.dequant_mm:
        w = torch.empty((K, N), dtype=x.dtype, device=x.device)
        # BUG drop_k_tail: the dequant grid covers K // BLOCK_K tiles (the partial tile's rows stay unwritten)
        grid_k = K // cfg.block_k if on["drop_k_tail"] else k_tiles
        if grid_k:
            _mutant_dequant_kernel[(grid_k, cdiv(N, cfg.block_n))](
                b_q, scales, z, w, N, K, group_size, G,
                b_q.stride(0), b_q.stride(1), scales.stride(0), scales.stride(1), z.stride(0), z.stride(1),
                w.stride(0), w.stride(1),
                ZP_BIAS=zp_bias, HAS_ZP=has_zp, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                PACKED_LOAD=cfg.packed_load, EVEN_K=even_k, EVEN_N=even_n, MAGIC=cfg.magic, MAGIC_BITS=magic_bits,
                num_warps=cfg.num_warps, num_stages=1, **dequant_bugs,
            )
        # BUG skip_m_tail: the library GEMM is called on whole M tiles of the table entry only
        rows = M - M % entry.block_m if on["skip_m_tail"] else M
        with tw.fp32_gemm_reduction():
            if rows == M:
                return torch.mm(x, w, out=out)
            if rows:
                out[:rows] = torch.mm(x[:rows], w)
            return out
    grid = (cdiv(M, cfg.block_m), cdiv(N, cfg.block_n), splits)
    if splits == 1:
        c, scs = out, 0
    else:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        scs = c.stride(0)
    _mutant_gemm_kernel[grid](
        x, b_q, scales, z, c,
        M, N, K, group_size, G, tiles_per_split,
        x.stride(0), x.stride(1), b_q.stride(0), b_q.stride(1), scales.stride(0), scales.stride(1),
        z.stride(0), z.stride(1), scs, c.stride(-2), c.stride(-1),
        ZP_BIAS=zp_bias, HAS_ZP=has_zp,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        PACKED_LOAD=cfg.packed_load, USE_DOT=cfg.use_dot, EVEN_K=even_k, EVEN_N=even_n,
        SWAP_AB=cfg.swap_ab and cfg.use_dot, MAGIC=cfg.magic, MAGIC_BITS=magic_bits,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        SKIP_M_TAIL=on["skip_m_tail"], DROP_K_TAIL=on["drop_k_tail"], **dequant_bugs,
    )
    if splits > 1:
        tw._reduce_splits(c, out, M, N, splits)
    return out


def _launch_planar(x, b_planar, scales, zeros_act, group_size: int, zp_bias: int, has_zp: bool, cfg, entry, out,
                   on: dict) -> torch.Tensor:
    """triton_w4a16's _launch_planar on _mutant_planar_kernel; the launch-level bugs: no_block_k_clamp (one scale
    row per 128-row block whatever the group: the planar path's form of a K tile straddling groups) and
    drop_split_remainder (the table's split count as is, blocks // splits per split)."""
    M, K = x.shape
    N = out.shape[1]
    tw._check_planar(b_planar, zeros_act, scales, K, N, has_zp)
    h = b_planar.view(torch.int16)
    k_blocks = h.shape[0]
    splits = cfg.split_k
    per = cdiv(k_blocks, splits)
    if on["drop_split_remainder"] and entry.split_k > 0:
        splits = min(entry.split_k, k_blocks)
        per = k_blocks // splits  # BUG: blocks past splits * per are never summed
    else:
        assert cdiv(k_blocks, per) == splits, f"split_k={splits} leaves an empty split of {k_blocks} K blocks"
    z = zeros_act if has_zp else scales
    if splits == 1:
        c, scs = out, 0
    else:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=x.device)
        scs = c.stride(0)
    grid = (cdiv(N, cfg.block_n), splits, cdiv(M, cfg.block_m))
    pg = 4 if on["no_block_k_clamp"] else tw.planes_per_group(K, group_size)
    _mutant_planar_kernel[grid](
        x, h, scales, z, c,
        M, N, K, scales.shape[0], group_size, k_blocks, per,
        x.stride(0), x.stride(1), h.stride(0), h.stride(1), scales.stride(0), scales.stride(1),
        z.stride(0), z.stride(1), scs, c.stride(-2), c.stride(-1),
        ZB=zp_bias, HAS_ZP=has_zp, PG=pg, R=tw.PLANAR_BLOCK // 4,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, EVEN_N=N % cfg.block_n == 0, USE_ASM=tw.planar_uses_asm(x.device),
        DEQ_VIA_FP16=on["deq_via_fp16"], LAST_N_TILE_OFF_BY_ONE=on["last_n_tile_off_by_one"],
        GROUP_ROUND_UP=on["group_round_up"], SKIP_M_TAIL=on["skip_m_tail"], DROP_K_TAIL=on["drop_k_tail"],
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if splits > 1:
        tw._reduce_splits(c, out, M, N, splits)
    return out


def resync_planar(o):
    """After a load-step bug changed b_q, qzeros or zp_bias: the planar operands (b_planar, zeros_act), where the
    shipped load makes them, re-derived from those, so the planar decode path reads the same (wrong) weight as
    every other path (and a symmetric layer turned asymmetric gets the act-dtype zeros that path needs)."""
    if o.b_planar is None:
        return o
    from references.codecs import operands as ops

    o.b_planar = ops.planar_pack_qweight(ops.triton_unpack_qweight(o.b_q))
    has_zp = o.zp_bias == 0 and o.qzeros is not None
    o.zeros_act = ops.unpack_zeros_gn(o.qzeros).to(o.scales.dtype).contiguous() if has_zp else None
    return o


def path_of(cfg: tw.TileConfig) -> str:
    """The shipped kernel's path a (fitted) tile entry takes: planar, gemv, swap_ab, dot or dequant_mm."""
    if cfg.dequant_mm:
        return "dequant_mm"
    if cfg.planar:
        return "planar"
    if not cfg.use_dot:
        return "gemv"
    return "swap_ab" if cfg.swap_ab else "dot"


class TritonLaunchMutant(type(registry.get_kernel("triton_w4a16"))):
    """triton_w4a16 whose apply runs launch_mutant with the bugs named in `bugs` switched on. Not registered
    itself: subclasses set `name`, `bug` and `bugs`."""

    bugs: tuple[str, ...] = ()

    def apply(self, o, x):
        from conformance_kernels._w4a16_common import to_device

        o = to_device(o, x.device)
        on = dict.fromkeys(self.bugs, True)
        planar = {"b_planar": o.b_planar, "zeros_act": o.zeros_act}
        return tw.gemm_any_rank(x, lambda x2: launch_mutant(x2.contiguous(), o.b_q, o.scales, o.qzeros,
                                                            o.group_size, o.zp_bias, planar=planar, **on))
