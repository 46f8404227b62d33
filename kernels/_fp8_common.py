"""Shared pieces of the FP8 per-token-group quant kernels: operands (params), input checks, scale buffers,
upstream-style gates, and the plain-torch group quant skeleton the models are written on.

Family interface: load(config) -> Fp8QuantParams; apply(params, x) -> (q, scales); model(params, x) ->
(q, scales). q has x's shape in the fp8 dtype; scales are float32 [*x.shape[:-1], K // group_size],
row-major, or for column_major_scales (2-D x only) strides (1, M) as upstream allocates them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.core.runtime import interpreting
from conformance.core.targets import Target
from conformance.families.config import FP8_DTYPES, Fp8QuantConfig
from references.errors import InvalidInput, require

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DEFAULT_EPS = 1e-10
# vLLM's clamp bound: 448 for e4m3fn; 224 (not the dtype's 240) for e4m3fnuz, where 240 hurt accuracy
VLLM_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 224.0}


@dataclass(frozen=True)
class Fp8QuantParams:
    """What a group-quant kernel needs besides x: the load step's output."""

    group_size: int
    fp8_dtype: str
    fp8_max: float
    ue8m0: bool = False
    column_major_scales: bool = False
    eps: float = DEFAULT_EPS

    def __post_init__(self):
        require(isinstance(self.group_size, int) and self.group_size > 0, "group_size", self.group_size,
                "a positive int")
        require(self.fp8_dtype in FP8_DTYPES, "fp8_dtype", self.fp8_dtype, f"one of {sorted(FP8_DTYPES)}")
        require(self.fp8_max > 0, "fp8_max", self.fp8_max, "a positive float")
        require(self.eps > 0, "eps", self.eps, "a positive float (an all-zero group would divide 0 by 0)")

    @property
    def torch_fp8(self) -> torch.dtype:
        return FP8_DTYPES[self.fp8_dtype]


def params_from_config(config: Fp8QuantConfig, fp8_max: dict | None = None,
                       eps: float = DEFAULT_EPS) -> Fp8QuantParams:
    """The load step shared by the family: config -> params (clamp bound per fp8 dtype from `fp8_max`)."""
    if not isinstance(config, Fp8QuantConfig):
        raise InvalidInput("config", type(config).__name__, "an Fp8QuantConfig")
    bounds = VLLM_FP8_MAX if fp8_max is None else fp8_max
    return Fp8QuantParams(config.group_size, config.fp8_dtype, bounds[config.fp8_dtype], config.ue8m0,
                          config.column_major_scales, eps)


def check_input(x: torch.Tensor, p: Fp8QuantParams) -> None:
    """Clear errors for inputs the family does not take."""
    require(isinstance(x, torch.Tensor) and x.dim() >= 1, "x.shape",
            tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__, "a tensor with at least 1 dim")
    require(x.dtype in INPUT_DTYPES, "x.dtype", x.dtype, "torch.float16, torch.bfloat16 or torch.float32")
    require(x.shape[-1] % p.group_size == 0, "x.shape[-1]", x.shape[-1], f"a multiple of group_size={p.group_size}")
    require(not p.column_major_scales or x.dim() == 2, "x.shape", tuple(x.shape),
            "a 2-D tensor [M, K] when column_major_scales=True (upstream allocates scales [G, M] transposed)")


def empty_scales(x_shape, group_size: int, column_major: bool, device) -> torch.Tensor:
    """Uninitialized float32 scales [*x_shape[:-1], G]; column-major: a [G, M] buffer transposed."""
    G = x_shape[-1] // group_size
    if column_major:
        return torch.empty((G, x_shape[0]), dtype=torch.float32, device=device).t()
    return torch.empty((*x_shape[:-1], G), dtype=torch.float32, device=device)


def to_column_major(scales: torch.Tensor) -> torch.Tensor:
    """Same values, strides (1, M): the layout column_major_scales asks for."""
    return scales.t().contiguous().t()


def quantize_groups(x: torch.Tensor, p: Fp8QuantParams, scale_of, divide: bool = True):
    """Plain-torch group quant on fp32: scales = scale_of(amax fp32 [*, G]); q = fp8(clamp(x / s)).

    `divide=False` multiplies by the fp32 reciprocal of the scale instead (AITER's convention).
    """
    check_input(x, p)
    G = x.shape[-1] // p.group_size
    xg = x.float().reshape(*x.shape[:-1], G, p.group_size)
    amax = xg.abs().amax(dim=-1) if xg.numel() else torch.zeros(xg.shape[:-1], device=x.device)
    s = scale_of(amax)
    scaled = xg / s.unsqueeze(-1) if divide else xg * (1.0 / s).unsqueeze(-1)
    q = scaled.clamp(-p.fp8_max, p.fp8_max).reshape(x.shape).to(p.torch_fp8)
    return q, (to_column_major(s) if p.column_major_scales else s)


def f32(v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float32)


def ue8m0_ceil(s: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 s) exactly for positive fp32 s, on the bits: a non-zero mantissa bumps the exponent."""
    bits = s.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    exp = exp + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exp << 23).view(torch.float32)


# ---------------------------------------------------------------------------------------------- gates

def first_refusal(*reasons) -> str | None:
    return next((r for r in reasons if r is not None), None)


def gate_fp8_dtype_for_target(config, target: Target) -> str | None:
    """e4m3fnuz only on gfx94x (MI300: vLLM's fp8 dtype there, Triton's fp8e4b8 only there); e4m3fn on every
    other ROCm target and on CUDA sm89+ (Triton's fp8e4nv); cpu (interpreter / torch) takes both."""
    fam = target.gfx_family
    if config.fp8_dtype == "float8_e4m3fnuz":
        if target.is_cpu or fam == "gfx94":
            return None
        return f"fp8_dtype='float8_e4m3fnuz' not supported on target={target} (allowed only on gfx94x, e.g. gfx942)"
    if fam == "gfx94":
        return f"fp8_dtype={config.fp8_dtype!r} not supported on target={target} (gfx94x uses 'float8_e4m3fnuz')"
    if target.kind == "cuda" and target.sm is not None and target.sm < 89:
        return f"fp8_dtype={config.fp8_dtype!r} not supported on target={target} (float8_e4m3fn needs sm89 or newer)"
    return None


def gate_input_dtype(config, allowed=("float16", "bfloat16", "float32")) -> str | None:
    if config.dtype in allowed:
        return None
    return f"dtype={config.dtype!r} not supported (allowed: {', '.join(allowed)})"


def gate_hidden_multiple(config) -> str | None:
    if config.hidden % config.group_size == 0:
        return None
    return f"hidden={config.hidden} not supported (allowed: a multiple of group_size={config.group_size})"


def gate_family(config) -> str | None:
    if isinstance(config, Fp8QuantConfig):
        return None
    return f"family={getattr(config, 'family', None)!r} not supported (allowed: 'fp8_group_quant')"


def device_availability(target: Target) -> str | None:
    """Why a device kernel cannot run here for a GPU `target` (None: it is this machine's device)."""
    if not target.is_gpu:
        return f"target={target} is not a GPU target"
    if interpreting():
        return f"target={target} needs a GPU but Triton runs in the interpreter here"
    from conformance.core.targets import detect_target

    here = detect_target()
    return None if here == target else f"target={target} is not this machine's device ({here})"


def triton_availability(target: Target) -> str | None:
    """Why a Triton kernel cannot run here for `target` (cpu: only through the interpreter)."""
    if target.is_cpu:
        return None if interpreting() else "Triton interpreter not enabled (TRITON_INTERPRET is not 1)"
    return device_availability(target)
