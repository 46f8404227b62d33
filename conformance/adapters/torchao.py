"""torchao's Triton FP8 1x128 activation quant kernels (torchao 0.18.0) as conformance kernels:

    PYTHONPATH=/path/to/torchao-target python -m pytest conformance/suite -n 2 \
        --conformance-plugin conformance.adapters.torchao --conformance-kernels torchao_fp8_act_quant
    (torchao beside our torch without touching it: pip install --no-deps --target DIR torchao==0.18.0)

- `torchao_fp8_act_quant`: `torchao.kernel.blockwise_quantization.fp8_blockwise_act_quant(x, block_size, dtype)`
  (the inference path ported from DeepSeek-V3). One program per group: amax = max |x| in fp32, s = amax / 448.0
  (the constant 448 for every fp8 dtype; torchao asserts e4m3fn or e5m2, and the family has no e5m2), no eps,
  q = x / s cast to fp8 without a clamp, row-major fp32 scales [..., K/block]. Declared: `fp8_scale="divide"`
  (IEEE fp32 division in the interpreter; on NVIDIA Triton's `/` is div.full.f32: `device_inexact_reason`),
  zero-group policy `torchao_no_eps`: an all-zero group gets s = 0 (then q = 0 / 0).
- `torchao_fp8_act_quant_lhs`: `torchao.prototype.blockwise_fp8_training.kernels.triton_fp8_blockwise_act_quant_lhs(
  x, block_size, dtype)` (the training path; 2-D x). amax = max |x| clamped below at EPS = 1e-12, the inverse
  scale i = fp8_max / amax formed in fp64 and rounded to fp32 (a correctly rounded fp32 quotient), q = clamp(x * i,
  -fp8_max, fp8_max), fp8_max = torch.finfo(dtype).max (448 for e4m3fn, 240 for e4m3fnuz: not vLLM's 224), and the
  stored scale is div_rn(1, i) in a column-major [M, K/block] buffer, strides (1, M). Declared:
  `fp8_scale="inverse"`, zero-group policy `torchao_lhs` (an all-zero group gets s = 1 / (fp8_max / 1e-12)).
Neither convention has a bit-exact reference here (docs/fp8.md, section 5), so both are judged in the statistical
tier against the divided scale at their declared fp8_max and eps (`Fp8Params.fp8_max`, `.eps`): scales within 4
fp32 ulp, q within one fp8 step of x / s, NaN and Inf always failures.

Gates (each refusal names its rule): an Fp8QuantConfig; target cpu (the Triton interpreter) or cuda sm89+
(Triton's fp8e4nv); a power-of-two group (tl.arange(0, BLOCK_SIZE)); no UE8M0; act_quant: fp8 e4m3fn and
row-major scales; lhs: e4m3fn or e4m3fnuz (e4m3fnuz on cpu only: Triton lowers it for AMD) and column-major
scales (the only layout it writes).

Running on a CPU host, two things are patched, both only under the Triton interpreter (TRITON_INTERPRET=1) and
both scoped:
- torchao builds `fp8_blockwise_act_quant`'s kernels only if `torch.utils._triton.has_triton()`, which is False
  without a GPU ("unsupported without triton"); `build_act_quant()` makes it read True while torchao builds them
  once (torchao caches the result), then restores it.
- the lhs kernel is `@triton.autotune`d over 45 configs (NUM_GROUPS 2..128, warps, stages) and the autotuner's
  benchmark needs a GPU driver; `pinned_config()` hands it one config per call, NUM_GROUPS rotated by the row
  count through its values that launch at most 8 programs along the rows (every value up to 16 tokens), so the
  suite's row counts exercise the row tilings the GPU autotuner may pick at an interpreter's cost, then restores
  the list. warps and stages mean nothing to the interpreter.
On a GPU neither patch applies. Like the built-in Triton kernels, registration first calls
`conformance.core.runtime.configure_triton()` (the interpreter where torch sees no GPU, with its numeric fixes)
before torchao defines its @triton.jit kernels. Where torchao (or a kernel) does not import, the kernel is
registered gate-only with the reason.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass

import torch

from conformance.adapters._gate_only import Unavailable, cuda_availability
from conformance.api import (
    FP8_DTYPES,
    Fp8QuantConfig,
    Kernel,
    Numerics,
    interpreting,
    register_kernel,
    unregister_kernel,
)

VERSION = "0.18.0"  # the torchao release these facts were read from
ACT_NAME = "torchao_fp8_act_quant"
LHS_NAME = "torchao_fp8_act_quant_lhs"
PRIORITY = -40  # below every built-in kernel: loading the adapter never changes a built-in selection
ACT_MODULE, ACT_FUNCTION = "torchao.kernel.blockwise_quantization", "fp8_blockwise_act_quant"
LHS_MODULE, LHS_FUNCTION = "torchao.prototype.blockwise_fp8_training.kernels", "triton_fp8_blockwise_act_quant_lhs"
LHS_KERNEL = "triton_fp8_blockwise_act_quant_lhs_kernel"  # the autotuned @triton.jit kernel the function launches
ACT_FP8_MAX = 448.0  # the kernel's literal `/ 448.0`
LHS_EPS = 1e-12  # torchao.prototype.blockwise_fp8_training.kernels.EPS
MIN_SM = 89  # Triton's fp8e4nv conversions need sm89+
ACT_FP8 = ("float8_e4m3fn",)
LHS_FP8 = ("float8_e4m3fn", "float8_e4m3fnuz")
NUM_GROUPS = (2, 16, 32, 64, 128)  # the lhs autotuner's NUM_GROUPS values, rotated by the row count in the interpreter
MAX_ROW_PROGRAMS = 8  # ... among those that launch at most this many programs along the rows
_lock = threading.Lock()


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


@dataclass
class Fp8Params:
    """What a call needs: the group (block) size, the fp8 dtype, and the declared fp8_max and eps the statistical
    tier compares against."""

    group_size: int
    fp8_dtype: str
    torch_fp8: torch.dtype
    fp8_max: float
    eps: float


@contextlib.contextmanager
def triton_reported_present():
    """Under the interpreter only: torch.utils._triton.has_triton() reads True inside the block, then is restored."""
    import torch.utils._triton as tt

    if not interpreting():
        yield
        return
    original = tt.has_triton
    tt.has_triton = lambda: True
    try:
        yield
    finally:
        tt.has_triton = original


def build_act_quant(module):
    """torchao's act-quant kernel table built (under triton_reported_present on a CPU host); raises with torchao's
    own message when it still cannot build them."""
    with _lock, triton_reported_present():
        impls = module._get_triton_impls()
    if not impls.available:
        raise RuntimeError(f"{ACT_MODULE}._get_triton_impls() reports no Triton ('unsupported without triton')")
    return impls


@contextlib.contextmanager
def pinned_config(autotuner, tokens: int):
    """Under the interpreter only: the autotuner holds one config inside the block, so it launches without
    benchmarking (the benchmark needs a GPU driver); the list is restored after. NUM_GROUPS rotates by `tokens`
    over the values that keep at most MAX_ROW_PROGRAMS programs along the rows (all five up to 16 tokens)."""
    if not interpreting():
        yield
        return
    # rows per program the interpreter can afford: at most MAX_ROW_PROGRAMS programs along M (NUM_GROUPS = 2 at
    # 195 tokens and hidden 2176 launched 1666 programs and ran past the 300 s case limit)
    fits = [g for g in NUM_GROUPS if -(-tokens // g) <= MAX_ROW_PROGRAMS] or [NUM_GROUPS[-1]]
    want = fits[tokens % len(fits)]
    with _lock:
        original = autotuner.configs
        chosen = [c for c in original if c.kwargs.get("NUM_GROUPS") == want][:1]
        if not chosen:
            raise RuntimeError(f"{LHS_KERNEL} has no config with NUM_GROUPS={want} (torchao changed its autotune "
                               f"list; this adapter was written for torchao {VERSION})")
        autotuner.configs = chosen
        try:
            yield
        finally:
            autotuner.configs = original


class _TorchaoFp8(Kernel):
    """What both kernels share: the target gate, availability and run mode of a Triton kernel."""

    family = "fp8_group_quant"
    api_version = 2
    allowed_fp8: tuple = ()

    def _refusal(self, config, target, fn: str) -> str | None:
        if not isinstance(config, Fp8QuantConfig):
            return f"config={type(config).__name__} not supported (allowed: an Fp8QuantConfig)"
        if not (target.is_cpu or (target.kind == "cuda" and (target.sm or 0) >= MIN_SM)):
            return (f"target={target} not supported (allowed: cpu, in the Triton interpreter, or cuda sm{MIN_SM}+: "
                    "Triton's fp8e4nv conversions)")
        if config.fp8_dtype not in self.allowed_fp8:
            return (f"fp8_dtype={config.fp8_dtype!r} not supported (allowed: {', '.join(self.allowed_fp8)}: "
                    f"{fn}'s dtype assert, within the family's fp8 dtypes)")
        g = config.group_size
        if g & (g - 1):
            return f"group_size={g} not supported (allowed: a power of two: the kernel's tl.arange(0, BLOCK_SIZE))"
        if config.ue8m0:
            return f"ue8m0=True not supported (allowed: False: {fn} writes plain fp32 scales)"
        return None

    def availability(self, target):
        if target.is_cpu:
            return None if interpreting() else "target=cpu needs the Triton interpreter (TRITON_INTERPRET=1)"
        return cuda_availability(target)

    def run_mode(self, target):
        if self.availability(target) is not None:
            return "model"  # no model: the harness reports the availability reason
        return "interpreter" if target.is_cpu else "device"


class TorchaoFp8ActQuant(_TorchaoFp8):
    """`fp8_blockwise_act_quant`; see the module docstring for the contract."""

    name = ACT_NAME
    priority = PRIORITY
    allowed_fp8 = ACT_FP8
    gate_note = f"torchao {VERSION} {ACT_MODULE}.{ACT_FUNCTION}: e4m3fn, scale amax/448, row-major; cpu or sm89+"

    def __init__(self, module):
        self.module = module
        self.fn = getattr(module, ACT_FUNCTION)

    def can_implement(self, config, target):
        why = self._refusal(config, target, ACT_FUNCTION)
        if why is None and config.column_major_scales:
            why = f"column_major_scales=True not supported (allowed: False: {ACT_FUNCTION} writes row-major scales)"
        return why

    def numerics(self, config, M=None):
        return Numerics(zero_group_policy="torchao_no_eps", fp8_scale="divide",
                        device_inexact_reason="Triton's fp32 `/` on NVIDIA GPUs is div.full.f32 (approximate)")

    def load(self, config, ctx=None) -> Fp8Params:
        build_act_quant(self.module)
        return Fp8Params(config.group_size, config.fp8_dtype, FP8_DTYPES[config.fp8_dtype], ACT_FP8_MAX, 0.0)

    def apply(self, p: Fp8Params, x, ctx=None):
        return self.fn(x.contiguous(), p.group_size, p.torch_fp8)


class TorchaoFp8ActQuantLhs(_TorchaoFp8):
    """`triton_fp8_blockwise_act_quant_lhs`; see the module docstring for the contract."""

    name = LHS_NAME
    priority = PRIORITY - 1
    allowed_fp8 = LHS_FP8
    gate_note = (f"torchao {VERSION} {LHS_MODULE}.{LHS_FUNCTION}: e4m3fn/e4m3fnuz (dtype max), inverse scale, "
                 "column-major scales; cpu or sm89+")

    def __init__(self, module):
        self.module = module
        self.fn = getattr(module, LHS_FUNCTION)
        self.autotuner = getattr(module, LHS_KERNEL)

    def can_implement(self, config, target):
        why = self._refusal(config, target, LHS_FUNCTION)
        if why is None and not config.column_major_scales:
            why = (f"column_major_scales=False not supported (allowed: True: {LHS_FUNCTION} always writes its scales "
                   "column-major, strides (1, M))")
        if why is None and config.fp8_dtype == "float8_e4m3fnuz" and not target.is_cpu:
            why = (f"fp8_dtype='float8_e4m3fnuz' not supported on target={target} (allowed there: float8_e4m3fn: "
                   "Triton lowers fp8e4b8 for AMD only)")
        return why

    def numerics(self, config, M=None):
        return Numerics(zero_group_policy="torchao_lhs", fp8_scale="inverse")

    def load(self, config, ctx=None) -> Fp8Params:
        f8 = FP8_DTYPES[config.fp8_dtype]
        return Fp8Params(config.group_size, config.fp8_dtype, f8, float(torch.finfo(f8).max), LHS_EPS)

    def apply(self, p: Fp8Params, x, ctx=None):
        x = x.contiguous()
        with pinned_config(self.autotuner, x.shape[0]):
            return self.fn(x, p.group_size, p.torch_fp8)


class TorchaoFp8ActQuantUnavailable(Unavailable, TorchaoFp8ActQuant):
    """`torchao_fp8_act_quant` where torchao or the kernel does not import: gate-only, the reason as the gate."""


class TorchaoFp8ActQuantLhsUnavailable(Unavailable, TorchaoFp8ActQuantLhs):
    """`torchao_fp8_act_quant_lhs` where torchao or the kernel does not import: gate-only, the reason as the gate."""


UNAVAILABLE: dict[str, str] = {}  # kernel name -> why it is registered gate-only here


def _import(module: str, *attrs: str):
    """(module, None) when it imports and has every attribute, else (None, 'torchao ... not importable: ...')."""
    try:
        mod = importlib.import_module(module)
        missing = [a for a in attrs if not hasattr(mod, a)]
        if missing:
            raise AttributeError(f"{module} has no {', '.join(missing)}")
        return mod, None
    except Exception as e:  # noqa: BLE001 - any failure (no torchao, no triton, an API change) means not adapted
        return None, f"torchao not importable ({module}): {_why(e)}"


def register() -> list[str]:
    """(Re-)register both kernels: the adapter where its torchao kernel imports, else a gate-only stand-in."""
    from conformance.core.runtime import configure_triton

    configure_triton()  # before torchao defines its @triton.jit kernels (TRITON_INTERPRET is read at definition)
    UNAVAILABLE.clear()
    out = []
    for name, module, attrs, real, stand_in in (
            (ACT_NAME, ACT_MODULE, (ACT_FUNCTION, "_get_triton_impls"), TorchaoFp8ActQuant,
             TorchaoFp8ActQuantUnavailable),
            (LHS_NAME, LHS_MODULE, (LHS_FUNCTION, LHS_KERNEL), TorchaoFp8ActQuantLhs,
             TorchaoFp8ActQuantLhsUnavailable)):
        unregister_kernel(name)
        mod, why = _import(module, *attrs)
        if why:
            UNAVAILABLE[name] = why
        register_kernel(stand_in(why) if why else real(mod))
        out.append(name)
    return out


register()
