"""RDNA3 W4A16 (upstream RDNA3W4A16LinearKernel): vLLM's HIP GPTQ kernel `gptq_gemm_rdna3`, gfx1100 only.

Operands: qweight int32 [K/8, N] after the exllama shuffle (`gptq_shuffle`: with act-order the K rows are
first sorted by q_perm = argsort(g_idx)); scales [G, N] in the act dtype; qzeros int32 [G, N/8] packed
sequentially along N in the GPTQ v1 convention (stored z - 1: upstream hard-codes use_v2_format=False, so the
kernel adds 1); for uint4b8 the prep synthesises the stored value bias - 1 = 7; q_perm int32 [K] or None.
Act-order: accepted. Upstream's kernel takes the permutation as `b_g_idx` (reads a[m, q_perm[k]]) and its prep
passes argsort(g_idx); later upstream versions dropped the argument, and apply refuses act-order operands there.
Numerics of the scalar HIP path: fp32 dot per 256-row K split (BLOCK_KN_SIZE), each split's partial cast to
the act dtype and atomically added into the act-dtype output: not deterministic (vllm#50603) and, for
K > 256, rounded once per split.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.core.launch import Launch
from conformance.core.registry import Kernel, register_kernel
from conformance.families.config import act_dtype
from references.errors import require

from ._w4a16_common import _codecs, sorted_g_idx_is_contiguous

GATED_ARCH = "gfx1100"
SPLIT_K = 256  # BLOCK_KN_SIZE of the scalar HIP kernel: K rows per atomically-added partial
# vLLM 0.33.0's csrc/rocm/q_gemm_rdna3.cu, the launcher the compile lane builds (conformance/compile/hip_driver.py)
HIP_SOURCE = "csrc/rocm/q_gemm_rdna3.cu"
HIP_THREADS = 256  # THREADS_X: the block size of both kernels of the scalar path
HIP_TILE_M = 64  # rows per launch of launch_gemm_q4_deterministic
WMMA_MIN_M = 12  # gptq_gemm_rdna3 sends M >= 12 (K, N multiples of 16) to q_gemm_rdna3_wmma.cu
HIP_TYPES = {"float16": "__half", "bfloat16": "__hip_bfloat16"}
OP_NAMESPACES = ("_rocm_C", "_C")  # newer vLLM registers it in _rocm_C, older in _C


def hip_op():
    """The HIP op handle (torch.ops.<ns>.gptq_gemm_rdna3), or None where it is not built."""
    if getattr(torch.version, "hip", None) is None:
        return None
    for ns in OP_NAMESPACES:
        op = getattr(getattr(torch.ops, ns, None), "gptq_gemm_rdna3", None)
        if op is not None:
            return op
    return None


def op_takes_g_idx(op) -> bool:
    """True for the 6-argument schema (a, b_q_weight, b_qzeros, b_scales, b_g_idx, use_v2_format)."""
    return any(a.name == "b_g_idx" for a in op.default._schema.arguments)


def mcount_for_rows(rows: int) -> int:
    """The M_COUNT template the HIP launcher picks for a row tile (q_gemm_rdna3.cu `mcount_for_rows`)."""
    return 1 if rows == 1 else 2 if rows <= 3 else 4 if rows <= 7 else 8


def hip_programs(config, M: int) -> tuple:
    """The HIP kernels vLLM 0.33.0's `gptq_gemm_rdna3` launches for one call on the scalar path (M < 12):
    `gemm_q4_kernel_rdna3<T, M_COUNT>` per 64-row tile and, for bf16 with K split (K > 256), the fixed-order
    `reduce_partials_rdna3<T>`. () for the WMMA path (M >= 12 with K and N multiples of 16: another translation
    unit, not compiled by the lane)."""
    from conformance.core.launch import hip_program

    if M >= WMMA_MIN_M and config.K % 16 == 0 and config.N % 16 == 0:
        return ()
    T = HIP_TYPES[config.dtype]
    mcounts = sorted({mcount_for_rows(min(HIP_TILE_M, M - r0)) for r0 in range(0, M, HIP_TILE_M)})
    progs = [hip_program(HIP_SOURCE, "vllm::gptq_rdna3::gemm_q4_kernel_rdna3", (("T", T), ("M_COUNT", m)),
                         HIP_THREADS) for m in mcounts]
    if config.dtype == "bfloat16" and -(-config.K // SPLIT_K) > 1:
        progs.append(hip_program(HIP_SOURCE, "vllm::gptq_rdna3::reduce_partials_rdna3", (("T", T),), HIP_THREADS))
    return tuple(progs)


@dataclass
class RDNA3Operands:
    """qweight int32 [K/8, N] exllama-shuffled; qzeros int32 [G, N/8] holding z - 1; scales [G, N] act dtype;
    q_perm int32 [K] (argsort of g_idx) or None."""

    qweight: torch.Tensor
    qzeros: torch.Tensor
    scales: torch.Tensor
    q_perm: torch.Tensor | None
    group_size: int
    K: int
    N: int


@register_kernel
class RDNA3W4A16(Kernel):
    name = "rdna3_w4a16"
    family = "w4a16"
    priority = 30
    deterministic = False  # split-K partials are CAS-atomically added in the act dtype (vllm#50603)
    exact_tier_max_k = SPLIT_K  # above one split, partials are rounded to the act dtype before they are added
    # vLLM's CMake builds the HIP source into _rocm_C whenever gfx1100 is in the build's arch list, for every arch of
    # that list: the compile lane compiles this kernel's gfx1100 launches for the other RDNA targets too
    hip_build_home = GATED_ARCH
    gate_summary = ("ROCm gfx1100 only (garbage on gfx1151: lemonade-sdk/vllm-rocm#24); uint4b8 only; group > 0;"
                    " K%group; N%8; fp16/bf16; act-order via q_perm")

    @property
    def op(self):
        """The HIP op handle when built (resolved at use: vLLM may load _rocm_C after this module)."""
        return hip_op()

    def can_implement(self, config, target):
        if target.kind != "rocm":
            return f"ROCm gfx1100 only; target is {target}"
        if target.arch == "gfx1151":
            return ("gfx1100 only: on gfx1151 the kernel runs but returns garbage "
                    "(lemonade-sdk/vllm-rocm#24); the gfx1100-only gate is what protects users")
        if target.arch != GATED_ARCH:
            return f"gfx1100 only (upstream on_gfx1100 gate); target arch is {target.arch}"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype} not supported; float16 or bfloat16 activations only"
        if config.weight_type != "uint4b8":
            return (f"weight_type={config.weight_type} not supported; uint4b8 only (the kernel applies the GPTQ v1"
                    " zero convention, use_v2_format=False hard-coded)")
        if config.group_size <= 0:
            return f"group_size={config.group_size}: channelwise quantization not supported (group size > 0 only)"
        if config.K % config.group_size:
            return f"K={config.K} must be a multiple of group_size={config.group_size}"
        if config.N % 8:
            return f"N={config.N} must be a multiple of 8 (qzeros packing, 64-bit atomic output writes)"
        return None

    def availability(self, target):
        if getattr(torch.version, "hip", None) is None:
            return "needs a ROCm build of torch (torch.version.hip is None)"
        if hip_op() is None:
            return "torch.ops._rocm_C.gptq_gemm_rdna3 is not built (load vLLM's _rocm_C extension)"
        if not torch.cuda.is_available():
            return "no ROCm device visible"
        return None

    def accumulate_dtype(self, config):
        """fp32 within a 256-row K split; for K > 256 the splits are summed in the act dtype."""
        return torch.float32 if config.K <= SPLIT_K else act_dtype(config.dtype)

    def accumulation(self, config):
        """fp32 dot per 256-row K split (kernel's K order, q_perm-sorted with act-order), each split rounded to the
        act dtype and atomically added in the act dtype."""
        return torch.float32, SPLIT_K, act_dtype(config.dtype)

    def launch(self, config, M: int, target) -> Launch | None:
        """vLLM's HIP GPTQ kernel `gptq_gemm_rdna3` ("hip_gptq_rdna3"): its HIP kernels (`hip_programs`), which the
        compile lane builds from vLLM's source with clang (conformance/compile/hip_driver.py)."""
        if self.can_implement(config, target) is not None:
            return None
        return Launch("hip_gptq_rdna3", dict(split_k=SPLIT_K), programs=hip_programs(config, M))

    def load(self, source, config=None):
        """Checkpoint -> RDNA3Operands (the kernel's prep: exllama shuffle, v1 zeros, act-dtype scales)."""
        codecs, ops = _codecs()
        w = codecs.decode(source)
        require(w.group_size > 0, "group_size", w.group_size, "a positive group size (no channelwise)")
        dtype = source.act_dtype if config is None else act_dtype(config.dtype)
        # The kernel adds 1 to every stored zero (v1). Stored z - 1 must fit a nibble, so z = 0 cannot be held.
        z = w.zero_points()
        require(int(z.min()) >= 1, "zero points", int(z.min()),
                "values >= 1: the kernel adds 1 to the stored zero (GPTQ v1), so z = 0 is not representable")
        qzeros = ops.pack_zeros_gn(z - 1)
        # a trivial g_idx (k // group_size, as GPTQ writes without desc_act) is no act-order: no permutation
        g_idx = None if w.g_idx is None or sorted_g_idx_is_contiguous(w.g_idx, w.gs) else w.g_idx
        qweight, q_perm = ops.exllama_shuffle(w.q, g_idx)
        q_perm = None if g_idx is None else q_perm.to(torch.int32).contiguous()
        return RDNA3Operands(qweight, qzeros, w.scales.to(dtype).contiguous(), q_perm, w.gs, w.K, w.N)

    def apply(self, operands: RDNA3Operands, x: torch.Tensor):
        op = hip_op()
        require(op is not None, "gptq_gemm_rdna3", None, "a built HIP op (see availability())")
        dev = x.device
        qw, qz, sc = operands.qweight.to(dev), operands.qzeros.to(dev), operands.scales.to(dev)
        use_v2_format = False  # hard-coded upstream: the operands hold v1 zeros
        if op_takes_g_idx(op):
            perm = (operands.q_perm.to(dev) if operands.q_perm is not None
                    else torch.empty((0,), dtype=torch.int32, device=dev))
            return op(x, qw, qz, sc, perm, use_v2_format)
        require(operands.q_perm is None, "q_perm", "an act-order permutation",
                "None: this build's gptq_gemm_rdna3 has no b_g_idx argument (act-order removed upstream)")
        return op(x, qw, qz, sc, use_v2_format)

    def model(self, operands: RDNA3Operands, x: torch.Tensor):
        """Plain-torch reading of the operands the way the scalar kernel reads them: rows in q_perm order,
        zero = stored + 1, fp16 dequant rounded to fp16 (bf16: exact in fp32), fp32 dot per 256-row K split,
        each split cast to the act dtype and summed in the act dtype."""
        require(x.dim() == 2 and x.shape[1] == operands.K, "x.shape", tuple(x.shape), f"(M, K={operands.K})")
        gs = operands.group_size
        _, ops = _codecs()
        q = ops.exllama_unshuffle(operands.qweight.cpu(), None).to(torch.float32)  # [K, N], kernel (sorted) order
        z = ops.unpack_zeros_gn(operands.qzeros.cpu()).to(torch.float32) + 1  # the kernel's +1 (v1)
        s = operands.scales.cpu()
        qz = q - z.repeat_interleave(gs, dim=0)
        s_rows = s.repeat_interleave(gs, dim=0)
        w = (qz.to(s.dtype) * s_rows).float() if s.dtype == torch.float16 else qz * s_rows.float()
        w = w.to(x.device)
        xs = x if operands.q_perm is None else x[:, operands.q_perm.long().to(x.device)]
        y = torch.zeros((x.shape[0], operands.N), dtype=x.dtype, device=x.device)
        for k0 in range(0, operands.K, SPLIT_K):
            y = y + (xs[:, k0:k0 + SPLIT_K].float() @ w[k0:k0 + SPLIT_K]).to(x.dtype)
        return y
