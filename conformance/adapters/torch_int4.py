"""torch's int4 weight-only GEMMs (what torchao's int4 weight-only path, gpt-fast and transformers' torchao backend
call) as two conformance kernels:

    python -m pytest conformance/suite -n auto --conformance-plugin conformance.adapters.torch_int4 \
        --conformance-kernels torch_int4_cpu                     # native, on any x86/arm CPU
    python -m pytest conformance/suite -n 8 --conformance-plugin conformance.adapters.torch_int4 \
        --conformance-kernels torch_int4_tinygemm                # needs a CUDA GPU sm80+

- `torch_int4_cpu`: `aten._weight_int4pack_mm_for_cpu(x, w, group_size, scales_and_zeros)` with `w =
  aten._convert_weight_to_int4pack_for_cpu(q [N, K] int32, 1)` (uint8 [N, K/2] in a CPU-ISA-specific order).
- `torch_int4_tinygemm`: `aten._weight_int4pack_mm(x, w, group_size, scales_and_zeros)` on CUDA with `w =
  aten._convert_weight_to_int4pack(uint8 [N, K/2], inner_k_tiles)`, the uint8 input holding k even in the high
  nibble (`references.packing.HIGH_NIBBLE_FIRST`, torchao's `(q[:, ::2] << 4) | q[:, 1::2]`); inner_k_tiles is the
  largest of 8, 4, 2 with K % (16 * inner_k_tiles) == 0 (torchao's default is 8).

Convention (both ops; checked on torch 2.13 CPU, read in int4mm.cu): `scales_and_zeros` [K/G, N, 2] holds s in
[..., 0] and a FLOAT zero z_f in [..., 1], and W[k, n] = (q[n, k] - 8) * s + z_f: not GPTQ's integer zero point.
`load` turns the checkpoint's (q, z, s) into z_f = (8 - z) * s, computed exactly and rounded once to the dtype the
op stores it in (the act dtype; bf16 for tinygemm), so W equals (q - z) * s only up to that rounding.

Numerics, from the sources (torch 2.13 aten/src/ATen/native/cpu/int4mm_kernel.cpp, cuda/int4mm.cu):
- CPU: s and z_f are read into fp32 and W = fma(q - 8, s, z_f) in fp32 (the AVX2 bf16 kernel computes
  fma(q, s, fma(s, -8, z_f)): the same value, every term being exact in fp32 for 16-bit s and z_f; the generic
  fp16/fp32 loop `b * scale + zero` is contracted to an fma on x86: measured bit for bit on one-hot x); the dot
  product is one fp32 fma chain over K per output. Declared: dequant fp32, `float_zero_dtype` = the act dtype,
  accumulation (fp32, None, fp32), deterministic.
- CUDA: int4 -> bf16 (q - 8) exactly, `__hfma2(q - 8, s, z_f)` in bf16 (one rounding), bf16 mma.sync m16n8k16 with
  fp32 accumulators, a fixed cross-warp reduction, bf16 output. Declared: dequant bf16, `float_zero_dtype` bf16,
  accumulation (fp32, None, fp32), deterministic.
On exact-tier data (power-of-two scales, small integers) z_f = (8 - z) * s is exact in every dtype, so W = (q - z)
* s bit for bit and the exact tier judges both ops bit for bit; elsewhere the float zero's rounding is charged
by the declared `float_zero_dtype` (docs/tolerance.md), not by a wider tolerance.

Gates are the ops' own checks, each refusal naming it: CPU: target cpu, x fp16/bf16 (the op also takes fp32,
which w4a16 cases never draw), qGroupSize in {32, 64, 128, 256} (channelwise only when K is one of those),
N % 16 == 0, K % 2 == 0; CUDA: target cuda sm80+, x bf16, the same group sizes (so K % 32 == 0: 16 * the
smallest inner_k_tiles divides K). Neither op has a g_idx (act-order is refused) nor takes 8-bit weights.
Where torch lacks an op, its kernel is registered gate-only with the reason. The tinygemm kernel has a model
(`model`): a plain-torch reading of the uint8 [N, K/2] weight and `scales_and_zeros` the load step built, so that
load step is tested on machines without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.adapters._gate_only import Unavailable, cuda_availability
from conformance.api import (
    Kernel,
    Numerics,
    W4A16Config,
    register_kernel,
    torch_dtype,
    unregister_kernel,
)
from references import codecs, packing

CPU_NAME = "torch_int4_cpu"
CUDA_NAME = "torch_int4_tinygemm"
PRIORITY = -35  # below every built-in kernel: loading the adapter never changes a built-in selection
WEIGHT_TYPES = ("uint4", "uint4b8")
GROUP_SIZES = (32, 64, 128, 256)  # both ops' qGroupSize check
CPU_DTYPES = ("float16", "bfloat16")  # _weight_int4pack_mm_cpu also takes float32, which w4a16 cases never draw
CPU_N_MULTIPLE = 16  # _convert_weight_to_int4pack_for_cpu: "expect N to be dividable by 16"
INNER_K_TILES = (8, 4, 2)  # _convert_weight_to_int4pack: innerKTiles 2, 4 or 8; K % (16 * innerKTiles) == 0
K_TILE = 16  # tinygemm's mma k-tile
MIN_SM = 80  # tinygemm is compiled for __CUDA_ARCH__ >= 800 (bf16 mma.sync)
CPU_OPS = ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu")
CUDA_OPS = ("_convert_weight_to_int4pack", "_weight_int4pack_mm")


def missing_ops(names) -> str | None:
    """Why this torch cannot run the ops (None: it has them all)."""
    absent = [n for n in names if not hasattr(torch.ops.aten, n)]
    return f"torch {torch.__version__} has no aten.{', aten.'.join(absent)}" if absent else None


def inner_k_tiles(K: int) -> int | None:
    """The inner_k_tiles the tinygemm load uses at K: the largest of 8, 4, 2 dividing K / 16 (None: none does)."""
    return next((t for t in INNER_K_TILES if K % (K_TILE * t) == 0), None)


def _common_refusal(config, kind: str) -> str | None:
    """The rules both ops share: a 4-bit W4A16Config without act-order whose group size the op takes."""
    if not isinstance(config, W4A16Config):
        return f"config={type(config).__name__} not supported (allowed: a W4A16Config)"
    if config.weight_type not in WEIGHT_TYPES:
        return f"weight_type={config.weight_type!r} not supported (allowed: {', '.join(WEIGHT_TYPES)}: int4 only)"
    if config.act_order:
        return f"act_order=True not supported ({kind} has no g_idx: a group is a run of consecutive K rows)"
    g = config.effective_group_size
    if g not in GROUP_SIZES:
        what = f"group_size={config.group_size}" + (f" (channelwise: one group of K={config.K})"
                                                    if config.group_size == -1 else "")
        return f"{what} not supported (allowed: qGroupSize in {GROUP_SIZES}: {kind}'s qGroupSize check)"
    if config.K % g:
        return f"K={config.K} not supported (allowed: a multiple of qGroupSize={g}: {kind}'s K % qGroupSize check)"
    return None


@dataclass
class Int4PackOperands:
    """What the op takes: the packed weight, the group size and scales_and_zeros [K/G, N, 2] = (s, z_f);
    `w_uint8` (tinygemm only) is the uint8 [N, K/2] weight its packing step takes (what `model` reads)."""

    packed: torch.Tensor | None
    group_size: int
    scales_and_zeros: torch.Tensor
    w_uint8: torch.Tensor | None = None
    inner_k_tiles: int | None = None


def float_zero_operands(ckpt, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(q [N, K] int32, scales_and_zeros [G, N, 2] in `dtype`, group size) from a checkpoint: z_f = (8 - z) * s
    computed in fp64 (exact) and rounded once to `dtype`, the dtype the op reads it in. Act-order is refused."""
    w = codecs.decode(ckpt)
    if w.g_idx is not None and not torch.equal(w.g_idx.long(), torch.arange(w.K) // w.gs):
        raise ValueError("act-order checkpoints are not supported (torch's int4pack ops have no g_idx)")
    s = w.scales.to(torch.float64).to(dtype)
    zf = w.zero_term(float_zero=True).to(dtype)
    return w.q.t().contiguous(), torch.stack([s, zf], dim=-1).contiguous(), w.gs


class TorchInt4Cpu(Kernel):
    """`aten._weight_int4pack_mm_for_cpu`; see the module docstring for the contract."""

    name = CPU_NAME
    family = "w4a16"
    priority = PRIORITY
    api_version = 2
    gate_note = "torch aten._weight_int4pack_mm_for_cpu (native CPU): fp16/bf16/fp32, int4, group 32-256, N % 16"

    def can_implement(self, config, target):
        why = _common_refusal(config, "_weight_int4pack_mm_for_cpu")
        if why:
            return why
        if not target.is_cpu:
            return f"target={target} not supported (allowed: cpu: the op is torch's CPU kernel)"
        if config.dtype not in CPU_DTYPES:
            return (f"dtype={config.dtype!r} not supported (allowed: {', '.join(CPU_DTYPES)}: "
                    "_weight_int4pack_mm_cpu's A dtype check)")
        if config.N % CPU_N_MULTIPLE:
            return (f"N={config.N} not supported (allowed: a multiple of {CPU_N_MULTIPLE}: "
                    "_convert_weight_to_int4pack_cpu's N check)")
        if config.K % 2:
            return f"K={config.K} not supported (allowed: even: _convert_weight_to_int4pack_cpu's K check)"
        return None

    def availability(self, target):
        return None if target.is_cpu else f"target={target} is not a CPU"

    def run_mode(self, target):
        return "device"  # the native op on its own hardware: no interpreter, no model

    def numerics(self, config, M=None):
        act = torch.float32 if config is None else torch_dtype(config.dtype)
        return Numerics(dequant_dtype=torch.float32, dequant_roundings=2, float_zero_dtype=act,
                        accumulation=(torch.float32, None, torch.float32))

    def load(self, ckpt, ctx=None) -> Int4PackOperands:
        q, sz, gs = float_zero_operands(ckpt, ckpt.act_dtype)
        return Int4PackOperands(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), gs, sz)

    def apply(self, ops: Int4PackOperands, x, ctx=None):
        # the op runs on CPU tensors only (a --conformance-target cpu run on a GPU machine hands x on the GPU)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.cpu().contiguous(), ops.packed, ops.group_size,
                                                         ops.scales_and_zeros)


class TorchInt4TinyGemm(Kernel):
    """CUDA `aten._weight_int4pack_mm` (tinygemm); see the module docstring for the contract."""

    name = CUDA_NAME
    family = "w4a16"
    priority = PRIORITY - 1
    api_version = 2
    has_model = True
    gate_note = "torch aten._weight_int4pack_mm (CUDA tinygemm, sm80+): bf16, int4, group 32-256, K % 32"

    def can_implement(self, config, target):
        why = _common_refusal(config, "_weight_int4pack_mm")
        if why:
            return why
        if not (target.kind == "cuda" and (target.sm or 0) >= MIN_SM):
            return f"target={target} not supported (allowed: cuda sm{MIN_SM}+: tinygemm's bf16 mma.sync build)"
        if config.dtype != "bfloat16":
            return f"dtype={config.dtype!r} not supported (allowed: bfloat16: _weight_int4pack_mm's A dtype check)"
        # K % (16 * innerKTiles) == 0 needs no rule of its own: K is a multiple of a group of at least 32
        return None

    def availability(self, target):
        return cuda_availability(target)

    def run_mode(self, target):
        return "device" if self.availability(target) is None else "model"

    def numerics(self, config, M=None):
        return Numerics(dequant_dtype=torch.bfloat16, dequant_roundings=2, float_zero_dtype=torch.bfloat16,
                        accumulation=(torch.float32, None, torch.float32))

    def load(self, ckpt, ctx=None) -> Int4PackOperands:
        """uint8 [N, K/2] (k even in the high nibble) and bf16 (s, z_f), packed by the op on the GPU; a model run
        stops before the CUDA-only packing op."""
        q, sz, gs = float_zero_operands(ckpt, torch.bfloat16)
        w_uint8 = packing.pack(q, dim=1, order=packing.HIGH_NIBBLE_FIRST).view(torch.uint8)  # [N, K/8] words
        ikt = inner_k_tiles(q.shape[1])
        device = ctx.device if ctx is not None else "cuda"
        if ctx is not None and ctx.mode == "model":
            return Int4PackOperands(None, gs, sz, w_uint8, ikt)
        w_dev = w_uint8.to(device)
        packed = torch.ops.aten._convert_weight_to_int4pack(w_dev, ikt)
        return Int4PackOperands(packed, gs, sz.to(device), w_dev, ikt)

    def apply(self, ops: Int4PackOperands, x, ctx=None):
        return torch.ops.aten._weight_int4pack_mm(x.contiguous(), ops.packed, ops.group_size, ops.scales_and_zeros)

    def model(self, ops: Int4PackOperands, x, ctx=None):
        """W = fma(q - 8, s, z_f) rounded once to bf16 from the load step's own uint8 weight and scales_and_zeros,
        then an fp32 GEMM rounded to bf16."""
        q = packing.unpack(ops.w_uint8.cpu().contiguous().view(torch.int32), dim=1,
                           order=packing.HIGH_NIBBLE_FIRST)  # [N, K]
        sz = ops.scales_and_zeros.cpu().double()
        g = torch.arange(q.shape[1]) // ops.group_size
        W = ((q.t().double() - 8) * sz[g, :, 0] + sz[g, :, 1]).to(torch.bfloat16)  # the exact sum, rounded once
        return (x.cpu().float() @ W.float()).to(x.dtype).to(x.device)


class TorchInt4CpuUnavailable(Unavailable, TorchInt4Cpu):
    """`torch_int4_cpu` where torch lacks the CPU int4pack ops: gate-only, every config refused with the reason."""


class TorchInt4TinyGemmUnavailable(Unavailable, TorchInt4TinyGemm):
    """`torch_int4_tinygemm` where torch lacks the CUDA int4pack ops: gate-only, the reason as the gate."""


UNAVAILABLE: dict[str, str] = {}  # kernel name -> why it is registered gate-only here


def register() -> list[str]:
    """(Re-)register both kernels: the adapter where torch has its ops, else the gate-only stand-in saying why."""
    UNAVAILABLE.clear()
    out = []
    for name, ops, real, stand_in in ((CPU_NAME, CPU_OPS, TorchInt4Cpu, TorchInt4CpuUnavailable),
                                      (CUDA_NAME, CUDA_OPS, TorchInt4TinyGemm, TorchInt4TinyGemmUnavailable)):
        unregister_kernel(name)
        why = missing_ops(ops)
        if why:
            UNAVAILABLE[name] = why
        register_kernel(stand_in(why) if why else real())
        out.append(name)
    return out


register()
