"""Shared pieces of the W4A16 kernels: upstream-style gate checks and checkpoint -> Triton operands.

Gate helpers return a refusal reason (naming the field and its value) or None. The Triton operand
contract (docs/formats.md, section 6): b_q int32 [K, N/8] packed along N (sequential nibbles), scales
[G, N] in the act dtype, qzeros int32 [G, N/8] or None, zp_bias = the type's bias (8 for uint4b8,
in which case zeros are ignored even if given). With `planar`, the same weight also in the planar layout
(b_planar, references.codecs.operands.planar_pack_qweight) and the zero points as act-dtype values [G, N]
(zeros_act), which the decode path reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.core.targets import Target
from conformance.families.config import ACT_DTYPES, W4A16Config
from references.errors import InvalidInput
from references.scalar_types import scalar_type

TRITON_GROUP_SIZES = (-1, 32, 64, 128, 256)
TRITON_WEIGHT_TYPES = ("uint4b8", "uint4")


def gate_target_gpu_or_cpu(target: Target) -> str | None:
    """Upstream: any CUDA or ROCm device. We also accept cpu, where Triton runs in the interpreter."""
    if target.kind in ("cuda", "rocm", "cpu"):
        return None
    return f"target={target} not supported (allowed: any cuda or rocm target, or cpu via the Triton interpreter)"


def gate_act_dtype(config) -> str | None:
    if config.dtype in ("float16", "bfloat16"):
        return None
    return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16)"


def gate_weight_type(config, allowed=TRITON_WEIGHT_TYPES) -> str | None:
    if config.weight_type in allowed:
        return None
    extra = " (8-bit types are not served by this kernel)" if scalar_type(config.weight_type).size_bits == 8 else ""
    return f"weight_type={config.weight_type!r} not supported (allowed: {', '.join(allowed)}){extra}"


def gate_group_size(config, allowed=TRITON_GROUP_SIZES) -> str | None:
    if config.group_size in allowed or config.group_size == config.K:
        return None
    return (f"group_size={config.group_size} not supported "
            f"(allowed: {', '.join(map(str, allowed))}, or == K={config.K})")


def gate_n_multiple_of_8(config) -> str | None:
    if config.N % 8 == 0:
        return None
    return f"N={config.N} not supported (must be a multiple of 8)"


def gate_k_multiple_of_group(config) -> str | None:
    if config.K % config.effective_group_size == 0:
        return None
    return f"K={config.K} not supported (must be a multiple of group_size={config.group_size})"


def gate_no_act_order(config) -> str | None:
    if not config.act_order:
        return None
    return "act_order=True not supported: act-order (g_idx) not supported"


def first_refusal(*reasons: str | None) -> str | None:
    """The first non-None reason (gates are checked in a fixed order so the reason is stable)."""
    for r in reasons:
        if r is not None:
            return r
    return None


def triton_w4a16_gates(config, target: Target, allow_act_order: bool) -> str | None:
    """The upstream Triton W4A16 gate (plus cpu), with act-order optionally allowed."""
    if not isinstance(config, W4A16Config):  # a config of another family
        return f"family={config.family!r} not supported (allowed: 'w4a16')"
    return first_refusal(
        gate_target_gpu_or_cpu(target),
        gate_act_dtype(config),
        gate_weight_type(config),
        None if allow_act_order else gate_no_act_order(config),
        gate_group_size(config),
        gate_n_multiple_of_8(config),
        gate_k_multiple_of_group(config),
    )


@dataclass
class TritonW4A16Operands:
    """Operands of the Triton W4A16 GEMM; `perm` (int64 [K]) is set by the act-order kernel only:
    then b_q holds the rows of q sorted by argsort(g_idx) and x's columns must be permuted alike."""

    b_q: torch.Tensor
    scales: torch.Tensor
    qzeros: torch.Tensor | None
    zp_bias: int
    group_size: int  # effective group size (K for channelwise)
    perm: torch.Tensor | None = None
    b_planar: torch.Tensor | None = None  # the weight in the planar layout (rows sorted like b_q), or None
    zeros_act: torch.Tensor | None = None  # z [G, N] in the act dtype (exact: 0..15), with b_planar and qzeros

    @property
    def K(self) -> int:
        return self.b_q.shape[0]

    @property
    def N(self) -> int:
        return self.b_q.shape[1] * 8


def _codecs():
    # imported lazily so the registry can list kernels while the codecs package is being written
    from references import codecs
    from references.codecs import operands

    return codecs, operands


def sorted_g_idx_is_contiguous(g_sorted: torch.Tensor, gs: int) -> bool:
    """True when sorted group indices equal k // gs, i.e. every K tile of <= gs rows lies in one group."""
    return bool(torch.equal(g_sorted.long(), torch.arange(g_sorted.numel()) // gs))


def load_triton_operands(checkpoint, allow_act_order: bool, device=None, planar: bool = False) -> TritonW4A16Operands:
    """Any checkpoint format -> Triton operands, through codecs.decode (the canonical weight).

    Without `allow_act_order`, a non-trivial g_idx is refused (a trivial one, k // group_size, as
    GPTQ writes for desc_act=False, is accepted and dropped). With it, K is sorted by argsort(g_idx).
    `planar` adds b_planar and zeros_act (the packed weight is then held twice: once per layout).
    """
    codecs, ops = _codecs()
    w = codecs.decode(checkpoint)
    gs = w.gs
    q = w.q
    perm = None
    if w.g_idx is not None:
        trivial = sorted_g_idx_is_contiguous(w.g_idx, gs)
        if not trivial:
            if not allow_act_order:
                raise InvalidInput("g_idx", "non-trivial (act-order)",
                                   "none or k // group_size: act-order (g_idx) not supported by this kernel")
            perm = torch.argsort(w.g_idx.long(), stable=True)
            # sorting makes the per-row groups monotonic: row k of the sorted weight is in group k // gs
            assert sorted_g_idx_is_contiguous(w.g_idx[perm], gs)
            q = q[perm]
    act = checkpoint.act_dtype
    if act not in ACT_DTYPES.values():
        raise InvalidInput("act_dtype", act, "torch.float16 or torch.bfloat16")
    b_q = ops.triton_pack_qweight(q.contiguous())
    if w.wtype.has_bias():
        qzeros, zp_bias = None, w.wtype.bias
    else:
        qzeros, zp_bias = ops.pack_zeros_gn(w.zeros.contiguous()), 0
    scales = w.scales.to(act).contiguous()
    out = TritonW4A16Operands(b_q, scales, qzeros, zp_bias, gs, perm)
    if planar:
        out.b_planar = ops.planar_pack_qweight(q.contiguous())
        out.zeros_act = None if qzeros is None else w.zeros.to(act).contiguous()
    if device is not None:
        out = to_device(out, device)
    return out


def to_device(o: TritonW4A16Operands, device) -> TritonW4A16Operands:
    """The same operands with every tensor on `device` (no copy when already there)."""
    def mv(t):
        return None if t is None else t.to(device)
    return TritonW4A16Operands(mv(o.b_q), mv(o.scales), mv(o.qzeros), o.zp_bias, o.group_size, mv(o.perm),
                               mv(o.b_planar), mv(o.zeros_act))


def check_planar_operands(o: TritonW4A16Operands, q: torch.Tensor, z: torch.Tensor | None) -> None:
    """The planar operands, when present, must hold the same q (and z) as b_q (and qzeros): the planar load step
    is then tested wherever the model runs, not only where the planar kernel does."""
    _, ops = _codecs()
    if o.b_planar is not None and not torch.equal(ops.planar_unpack_qweight(o.b_planar.cpu(), o.K), q):
        raise InvalidInput("b_planar", "a different weight from b_q", "the planar layout of the same q")
    if o.zeros_act is not None and (z is None or not torch.equal(o.zeros_act.cpu().long(), z)):
        raise InvalidInput("zeros_act", "different zero points from qzeros", "the same z in the act dtype")


def model_triton_operands(o: TritonW4A16Operands, x: torch.Tensor) -> torch.Tensor:
    """Plain-torch reading of Triton operands: unpack with the codec inverses, dequantize in the act
    dtype ((q - z) then * s, rounded once in act dtype), matmul with fp32 accumulation, cast to act.
    Planar operands are checked against b_q and qzeros (check_planar_operands)."""
    _, ops = _codecs()
    act = o.scales.dtype
    q = ops.triton_unpack_qweight(o.b_q.cpu()).long()  # [K, N]
    G = o.scales.shape[0]
    if o.zp_bias != 0 or o.qzeros is None:
        z = torch.full((G, o.N), o.zp_bias, dtype=torch.long)  # biased type: given zeros are ignored
        check_planar_operands(o, q.int(), None)
    else:
        z = ops.unpack_zeros_gn(o.qzeros.cpu()).long()
        check_planar_operands(o, q.int(), z)
    g = torch.arange(o.K) // o.group_size
    w = (q - z[g]).to(act) * o.scales.cpu()[g]
    if o.perm is not None:
        x = x.index_select(-1, o.perm.to(x.device))
    y = x.float() @ w.to(x.device).float()
    return y.to(act)
