"""RMSNorm + FP8 per-token-group quant fusion: the ops, a real fx fusion pass, and the matchability check.

`conformance::rms_norm` is the norm a layer emits; `conformance::rms_norm_fp8_group_quant` is the fused
op (plain torch, fp32 math). The pass, built for one quant config like a compiler's fusion pass, knows
the quant implementations it can fuse (MATCHED_KERNELS): for each it traces "rms_norm then that quant"
at the graph's shapes and rewrites every occurrence to the fused op. A quant route that emits anything
else (even a wrapper computing the same numbers) is left unfused: check_fusion reports that.

The check's input is a quant config, a row count and a seed (`layer_inputs`); its check id
(`check_id`: `fp8_group_quant/KERNEL/check=fusion,T=7,H=256,...,seed=0`) replays it
(conformance.checks.check_replay).
"""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from conformance.core.kernel import kernel_call
from conformance.core.registry import get_kernel

TOKENS = 7  # rows of the layer input the suite's fusion check uses
NORM_EPS = 1e-6  # the RMSNorm eps of the layer the fusion check builds

# quant kernels whose graphs the pass fuses, with the zero-group policy the fused op must then follow
MATCHED_KERNELS = ("fp8_group_quant_triton", "fp8_group_quant_native", "fp8_group_quant_cuda",
                   "fp8_group_quant_aiter")
POLICIES = ("triton", "native")


@torch.library.custom_op("conformance::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight, in fp32, rounded once to x.dtype."""
    return _rms_fp32(x, weight, eps).to(x.dtype)


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rms_fp32(x, weight, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def _group_quant(y: torch.Tensor, group_size: int, fp8_dtype: torch.dtype, fp8_max: float, eps: float,
                 ue8m0: bool, policy: str):
    """Group quant of the fp32-read norm output with one of the upstream scale policies."""
    G = y.shape[-1] // group_size
    yg = y.float().reshape(*y.shape[:-1], G, group_size)
    amax = yg.abs().amax(dim=-1)
    if policy == "native":
        # as the native route writes it: a Python-scalar divisor, which torch's CUDA kernel turns into a
        # multiplication by the fp32 reciprocal (CPU divides); the fused op must reproduce its route's bits
        s = amax / fp8_max
    else:
        # the Triton route divides correctly rounded (div_rn); a 0-dim divisor on the tensor's own device keeps
        # torch from taking the CPU-scalar (reciprocal) path on CUDA
        fmax = torch.tensor(fp8_max, dtype=torch.float32, device=amax.device)
        s = torch.maximum(amax, torch.tensor(eps, dtype=torch.float32, device=amax.device)) / fmax
    if ue8m0:  # exact round-up to a power of two (frexp), 0 stays 0
        mant, exp = torch.frexp(s)
        s = torch.where(s > 0, torch.ldexp(torch.ones_like(s), torch.where(mant == 0.5, exp - 1, exp)), s)
    if policy == "native":
        s = torch.maximum(s, torch.tensor(1.0, dtype=torch.float32, device=s.device)
                          / torch.tensor(fp8_max * 512.0, dtype=torch.float32, device=s.device))
    q = (yg / s.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(fp8_dtype)
    return q.reshape(y.shape), s


@torch.library.custom_op("conformance::rms_norm_fp8_group_quant", mutates_args=())
def rms_norm_fp8_group_quant(x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                             fp8_dtype: torch.dtype, fp8_max: float, quant_eps: float, ue8m0: bool,
                             column_major_scales: bool, policy: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused RMSNorm + group quant: (q like x in fp8_dtype, fp32 scales [*x.shape[:-1], G]); the norm
    output is rounded to x.dtype first, exactly as the unfused pair materializes it."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r} is invalid; allowed: {POLICIES}")
    y = _rms_fp32(x, weight, eps).to(x.dtype)
    q, s = _group_quant(y, group_size, fp8_dtype, fp8_max, quant_eps, ue8m0, policy)
    if column_major_scales:
        s = s.t().contiguous().t()
    return q, s


@rms_norm_fp8_group_quant.register_fake
def _(x, weight, eps, group_size, fp8_dtype, fp8_max, quant_eps, ue8m0, column_major_scales, policy):
    G = x.shape[-1] // group_size
    q = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    if column_major_scales:
        return q, torch.empty((G, x.shape[0]), dtype=torch.float32, device=x.device).t()
    return q, torch.empty((*x.shape[:-1], G), dtype=torch.float32, device=x.device)


FUSED_OP = torch.ops.conformance.rms_norm_fp8_group_quant.default
RMS_OP = torch.ops.conformance.rms_norm.default


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Plain fp32 RMSNorm, written out for the fused op's bit-exact check (one rounding to x.dtype)."""
    x32 = x.to(torch.float32)
    ms = (x32 * x32).sum(dim=-1, keepdim=True) / x32.shape[-1]
    return (x32 / torch.sqrt(ms + eps) * weight.to(torch.float32)).to(x.dtype)


class RmsNormQuantFusionPass:
    """Rewrites rms_norm -> quant (any of MATCHED_KERNELS that can run here) into the fused op, for one
    quant config (`params`: the kernels' Fp8QuantParams) and one norm eps."""

    def __init__(self, params, eps: float, kernels=MATCHED_KERNELS):
        self.params, self.eps = params, eps
        self.kernels = [k for k in (get_kernel(n) for n in kernels) if _can_trace(k)]

    def _pattern(self, kernel, x, w):
        def search(x, w):
            return tuple(kernel_call(kernel, self.params, RMS_OP(x, w, self.eps)))  # API v1 or v2 alike
        return _clean(make_fx(search, tracing_mode="fake")(x, w))

    def _replacement(self, kernel, x, w):
        p = self.params

        def replace(x, w):
            return tuple(FUSED_OP(x, w, self.eps, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0,
                                  p.column_major_scales, _policy(kernel)))
        return _clean(make_fx(replace, tracing_mode="fake")(x, w))

    def __call__(self, gm: torch.fx.GraphModule) -> int:
        """Fuse in place; returns how many pairs were fused."""
        from torch.fx.subgraph_rewriter import replace_pattern

        fused = 0
        _clean(gm)  # a dead getitem (e.g. max's unused indices) would count as an outside user of the match
        for node in [n for n in gm.graph.nodes if n.op == "call_function" and n.target is RMS_OP]:
            x, w = node.args[0].meta.get("val"), node.args[1].meta.get("val")
            if x is None or w is None:
                continue
            xe, we = torch.empty(x.shape, dtype=x.dtype), torch.empty(w.shape, dtype=w.dtype)
            for kernel in self.kernels:
                try:
                    pat, rep = self._pattern(kernel, xe, we), self._replacement(kernel, xe, we)
                except Exception:  # noqa: BLE001 - a kernel that cannot take this shape cannot match it
                    continue
                fused += len(replace_pattern(gm, pat, rep))
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return fused


def _clean(gm):
    gm.graph.eliminate_dead_code()  # the subgraph matcher refuses patterns with dead nodes
    gm.recompile()
    return gm


def _policy(kernel) -> str:
    return "native" if (kernel.numerics(None).zero_group_policy or "triton") == "native" else "triton"


def _can_trace(kernel) -> bool:
    # upstream routes whose op is absent here (no vllm._C, no aiter) cannot be traced into a pattern
    from conformance.core.targets import detect_target

    return kernel.availability(detect_target()) is None


def graph_counts(gm) -> dict:
    """How many fused, rms_norm and other compute nodes the graph holds."""
    c = {"fused": 0, "rms_norm": 0, "other": []}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is FUSED_OP:
            c["fused"] += 1
        elif n.target is RMS_OP:
            c["rms_norm"] += 1
        elif n.target.__name__ != "getitem":
            c["other"].append(str(n.target))
    return c


def check_fusion(layer, x: torch.Tensor) -> dict:
    """Trace the layer (make_fx, fake), run the pass, assert one fused node and nothing left over, and that
    the fused graph computes the unfused layer's bits. Raises AssertionError (ContractFailure) on failure."""
    from conformance.checks.contracts import ContractFailure

    gm = make_fx(lambda x, w: layer(x, w), tracing_mode="fake")(x, layer.weight)
    before = graph_counts(gm)
    n = RmsNormQuantFusionPass(layer.params, layer.eps)(gm)
    after = graph_counts(gm)
    if n != 1 or after["fused"] != 1 or after["rms_norm"] or after["other"]:
        raise ContractFailure(f"route={layer.route}: fusion pass fused {n} pair(s); graph after: {after['fused']} "
                              f"fused, {after['rms_norm']} rms_norm, other ops {after['other']} "
                              f"(before: other ops {before['other']}): the quant route is not matchable")
    q_f, s_f = gm(x, layer.weight)
    q_u, s_u = layer(x)
    same = torch.equal(q_f.view(torch.uint8), q_u.view(torch.uint8)) and torch.equal(s_f, s_u)
    if not same:
        raise ContractFailure(f"route={layer.route}: the fused graph's (q, scales) differ from the unfused layer's")
    return {"route": layer.route, "fused_pairs": n, "ops_before": before["other"], "fused_equals_unfused": same}


def layer_inputs(config, tokens: int = TOKENS, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [tokens, hidden], norm weight [hidden]) for the fusion check, from the seed, on the kernels' device: x is
    3 * normal with its row 2's first group all zero (where the zero-group policies differ); weight in [0.5, 1.5)."""
    from conformance.core.dtypes import torch_dtype
    from conformance.core.runtime import kernel_device

    gen = torch.Generator().manual_seed(seed)
    dt = torch_dtype(config.dtype)
    x = (torch.randn((tokens, config.hidden), generator=gen) * 3).to(dt)
    if tokens > 2:
        x[2, :config.group_size] = 0
    w = (torch.rand(config.hidden, generator=gen) + 0.5).to(dt)
    dev = kernel_device()  # cuda on a GPU machine: the Triton route cannot take CPU tensors there
    return x.to(dev), w.to(dev)


def check_id(kernel_name: str, config, tokens: int = TOKENS, seed: int = 0) -> str:
    """The check id of the fusion check of `kernel_name` on layer_inputs(config, tokens, seed)."""
    from conformance.cases.check_ids import CheckCase

    return CheckCase.from_config("fusion", kernel_name, config, tokens, seed).id


__all__ = ["rms_norm", "rms_norm_fp8_group_quant", "reference_rms_norm", "RmsNormQuantFusionPass",
           "check_fusion", "graph_counts", "layer_inputs", "check_id", "FUSED_OP", "RMS_OP", "MATCHED_KERNELS"]
