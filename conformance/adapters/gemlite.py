"""GemLite adapter: GemLite's A16W4 path (`gemlite.helper.A16Wn` -> `GemLiteLinearTriton`) as `gemlite_a16w4`.

    pytest conformance/suite -n 8 --conformance-plugin conformance.adapters.gemlite --conformance-kernels gemlite_a16w4

GemLite 0.6 imports only where torch sees a CUDA device (`gemlite.triton_kernels.utils` asks for the device
capability at import). When `import gemlite` fails but gemlite is installed (a CPU machine), `gemlite_a16w4` is
registered compile-only: GemLite's gate, nothing run here (availability says why), and its launches declared for
any compile-lane target through conformance.adapters.gemlite_target (gemlite imported with the target's device
answers), so `compile` compiles GemLite's Triton programs without a GPU. Where gemlite is not installed, it is
gate-only: its gate refuses every config with "gemlite not importable: ...", which `conformance list` and the
pytest skips print.

Facts from gemlite 0.6.0.post2's source (core.py, helper.py, bitpack.py, triton_kernels/):

- load: `A16Wn(device, dtype).from_weights(W_q, scales, zeros, W_nbits=4, group_size)` takes W_q uint8 [N, K]
  (unpacked), scales and zeros [N, G]; it casts zeros to the act dtype and calls `GemLiteLinearTriton.pack` with
  `fma_mode=True`: `W_q` becomes int32 [K/8, N], 8 consecutive K rows per word, low nibble first (the GPTQ
  qweight layout), contiguous; `scales` [G, N]; `zeros` [G, N] = (-z * s) computed in fp32 and rounded to the
  act dtype (`W_group_mode = 4`).
- dequant: `tl.fma(q, s, zeros)` in the act dtype: W = rnd(q*s + rnd(-z*s)), two roundings
  (`Numerics.dequant_roundings = 2`). One group (G = 1: channelwise or group_size = K) takes another path
  (`channel_scale_mode = 1`, scales applied after the GEMM), which this adapter refuses.
- dispatch on M (`get_matmul_type`, 4-bit): M <= 4 GEMV_REVSPLITK, 5 <= M < 64 GEMM_SPLITK, M >= 64 GEMM.
  GEMV_REVSPLITK sums each program's 2*BLOCK_SIZE_K (>= 16) products in fp32, then `tl.atomic_add`s the partial,
  cast to the output dtype (fp16, or bf16 where native), into a zeroed output: fp16 partials added in any order.
  GEMM_SPLITK accumulates in fp32 per split and, when its autotuned SPLIT_K > 1, atomically adds fp16 partials
  the same way. GEMM: fp32 accumulators, one store. Accumulation is therefore declared per M:
  (fp32, 16, act dtype) with atomics for M < 64, (fp32, None, fp32) deterministic for M >= 64.
- paths (`launch`): the program `get_matmul_type` picks for M, named in lower case (gemv_revsplitk, gemm_splitk,
  gemm), asked of the installed GemLite itself; each reads the packed operands its own way, so the CI plan crosses
  each with the checkpoint formats. No tiles are declared: GemLite autotunes them at run time.
- constraints: in_features % 32 == 0 and % group_size == 0, group_size >= 16; fp16 / bf16 / fp32 inputs.

The model (`model`) reads the packed module's own `W_q`, `scales` and `zeros` with `references.packing` and
computes fma(q, s, zeros) with one rounding, so GemLite's load step is tested wherever gemlite imports.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys

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
from conformance.core.launch import Launch
from references import codecs, packing

NAME = "gemlite_a16w4"
PRIORITY = -30  # below every built-in kernel: loading the adapter never changes a built-in selection
WEIGHT_TYPES = ("uint4", "uint4b8")
GEMM_MIN_M = 64  # get_matmul_type: batch >= 64 -> GEMM (no split-K atomics)
REVSPLITK_MIN_BLOCK = 16  # smallest K run one GEMV_REVSPLITK program sums before its atomic add (2 * 8)


def import_gemlite():
    """(the gemlite module, None), or (None, "gemlite not importable: ...")."""
    try:
        return importlib.import_module("gemlite"), None
    except Exception as e:  # noqa: BLE001 - any failure (no CUDA, no triton) means GemLite cannot run here
        return None, f"gemlite not importable: {type(e).__name__}: {' '.join(str(e).split())[:300]}"


def a16wn_takes_dtype() -> bool:
    """True when the installed GemLite's A16Wn takes `dtype` (0.4.8 and later; earlier releases pack fp16 only).
    Where gemlite does not import here (compile-only), its installed version says."""
    if "gemlite.helper" not in sys.modules and UNAVAILABLE is not None:
        from importlib.metadata import version

        from packaging.version import Version

        return Version(version("gemlite")) >= Version("0.4.8")
    from gemlite.helper import A16Wn

    return "dtype" in inspect.signature(A16Wn.__init__).parameters


def installed() -> bool:
    return importlib.util.find_spec("gemlite") is not None


class GemLiteA16W4(Kernel):
    """GemLite's grouped A16W4 GEMM; see the module docstring for the contract."""

    name = NAME
    family = "w4a16"
    priority = PRIORITY
    api_version = 2
    has_model = True
    gate_note = "GemLite A16Wn (GemLiteLinearTriton, W_nbits=4, fma_mode): CUDA sm80+ or ROCm gfx94x/gfx95x"

    def can_implement(self, config, target):
        if not isinstance(config, W4A16Config):
            return f"config={type(config).__name__} not supported (allowed: a W4A16Config)"
        if not (target.kind == "cuda" and (target.sm or 0) >= 80) and target.gfx_family not in ("gfx94", "gfx95"):
            return (f"target={target} not supported (allowed: cuda sm80+ or rocm gfx94x/gfx95x: "
                    "GemLite is Triton on GPU)")
        if config.weight_type not in WEIGHT_TYPES:
            return f"weight_type={config.weight_type!r} not supported (allowed: {', '.join(WEIGHT_TYPES)})"
        if config.dtype not in ("float16", "bfloat16"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16)"
        if config.dtype != "float16" and not a16wn_takes_dtype():
            return (f"dtype={config.dtype!r} not supported by this GemLite release (allowed: float16; its A16Wn has "
                    "no dtype and packs fp16, as GemLite before 0.4.8 does)")
        if config.act_order:
            return "act_order=True not supported (GemLite has no g_idx)"
        if config.group_size == -1 or config.group_size >= config.K:
            return (f"group_size={config.group_size} not supported (allowed: K/group_size >= 2; one group takes "
                    "GemLite's post-scale channelwise path, not adapted)")
        if config.group_size < 16 or config.K % 32:
            return f"group_size={config.group_size}, K={config.K} not supported (allowed: group >= 16, K % 32 == 0)"
        return None

    def availability(self, target):
        return cuda_availability(target)

    def run_mode(self, target):
        return "device"

    def numerics(self, config, M=None):
        act = torch.float32 if config is None else torch_dtype(config.dtype)
        if M is not None and M >= GEMM_MIN_M:
            return Numerics(dequant_roundings=2, accumulation=(torch.float32, None, torch.float32))
        # M unknown or < 64: split-K / rev-split-K partials cast to the output dtype and added atomically
        return Numerics(dequant_roundings=2, accumulation=(torch.float32, REVSPLITK_MIN_BLOCK, act), atomics=True)

    def load(self, ckpt, ctx=None):
        """Decode the checkpoint and pack it with GemLite's own A16Wn on the run device (the CPU for a model run:
        GemLite's packing then uses its plain-torch bit packer)."""
        from gemlite.helper import A16Wn

        w = codecs.decode(ckpt)
        if w.g_idx is not None and not torch.equal(w.g_idx.long(), torch.arange(w.K) // w.gs):
            raise ValueError(f"{NAME}: act-order checkpoints are not supported (GemLite has no g_idx)")
        device = ctx.device if ctx is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        act = ckpt.act_dtype
        # GemLite before 0.4.8: A16Wn(device) packs fp16 only (the gate refuses bf16 there) and bias is required
        a16wn = A16Wn(device=device, dtype=act) if a16wn_takes_dtype() else A16Wn(device=device)
        return a16wn.from_weights(
            W_q=w.q.t().contiguous().to(torch.uint8), scales=w.scales.t().contiguous().to(act),
            zeros=w.zero_points().t().contiguous().to(act), W_nbits=4, group_size=w.gs, bias=None)

    def apply(self, lin, x, ctx=None):
        return lin(x)

    def launch(self, config, M, target):
        """What GemLite launches for M rows on `target`. The path is the program its own dispatch picks,
        `gemlite.core.get_matmul_type(M, 4)` in lower case (0.6: gemv_revsplitk up to M = 4, gemm_splitk below 64,
        gemm above; each reads the packed W_q / scales / zeros its own way), so the plan crosses each with the
        formats. The programs are read off a real call under gemlite imported for that target
        (conformance.adapters.gemlite_target: its NVIDIA or AMD config table, its pruner for the target's shared
        memory): a small seeded checkpoint packed by A16Wn on the CPU, applied on zeros with the launches recorded.
        An autotuned kernel launches every config the pruner leaves (the autotuner's pick is a timing on the
        hardware). Autotune mode: $CONFORMANCE_GEMLITE_AUTOTUNE, else GemLite's own. None where the gate refuses or
        the target is not a GPU target with a limits row. Cached per (config, M, arch, autotune mode)."""
        from conformance.core.target_limits import TABLE

        if self.can_implement(config, target) is not None or target.arch not in TABLE:
            return None
        key = (config, M, target.arch, os.environ.get(AUTOTUNE_ENV))
        cache = self.__dict__.setdefault("_launches", {})
        if key not in cache:
            cache[key] = self._launch_for(config, M, target)
        return cache[key]

    def _launch_for(self, config, M, target):
        from conformance.adapters import gemlite_target

        with gemlite_target.for_target(target, os.environ.get(AUTOTUNE_ENV) or None):
            from gemlite.core import get_matmul_type

            path = get_matmul_type(M, 4).lower()
            progs = self._programs(config, M, target)
        return Launch(path, {"M": M, "configs": len(progs)}, key=(self.name, path, tuple(p.key for p in progs)),
                      programs=progs)

    def _programs(self, config, M, target) -> list:
        """The Triton programs one call launches (inside gemlite_target.for_target(target))."""
        from conformance.adapters import gemlite_target
        from conformance.core.kernel import RunContext
        from conformance.core.launch_capture import checkpoint_for

        ctx = RunContext(target, "cpu", "interpreter")
        lin = GemLiteA16W4.load(self, checkpoint_for(config), ctx)
        x = torch.zeros((M, config.K), dtype=torch_dtype(config.dtype))
        return gemlite_target.capture(lambda: self.apply(lin, x, ctx))

    def model(self, lin, x, ctx=None):
        """fma(q, s, zeros) from the module's packed operands, rounded once to the act dtype, fp32 GEMM."""
        q = packing.unpack(lin.W_q.detach().cpu().to(torch.int32).contiguous(), dim=0, bits=4)  # [K, N]
        K, N = q.shape
        s = lin.scales.detach().cpu().reshape(-1, N)
        zf = lin.zeros.detach().cpu().reshape(-1, N)
        gs = K // s.shape[0]
        deq = q.double() * s.double().repeat_interleave(gs, 0) + zf.double().repeat_interleave(gs, 0)
        W = deq.to(s.dtype)  # the exact q*s + zeros rounded once: the fused multiply-add
        return (x.float() @ W.float().to(x.device)).to(x.dtype)


class GemLiteUnavailable(Unavailable, GemLiteA16W4):
    """`gemlite_a16w4` where gemlite does not import: gate-only, every config refused with the reason."""


class GemLiteCompileOnly(GemLiteA16W4):
    """`gemlite_a16w4` where gemlite is installed but does not import here (it asks for a CUDA device at import):
    GemLite's own gate, its launches declared for any lane target (`launch`, through gemlite_target), nothing run
    here (availability says why), so the compile lane compiles its programs on a CPU machine."""

    has_model = False

    def __init__(self, why: str):
        self.why = why

    def availability(self, target):
        return f"{self.why} (compile-only here: its launches are declared for the compile lane)"


UNAVAILABLE: str | None = None  # why GemLite is not adapted here, or None
# GemLite autotunes every new shape ("fast" by default) and picks a launch config per process, so a failure found
# under autotuning may not replay in a fresh process. "default" pins GemLite's one default config per shape:
# deterministic replays, and no autotune cost per drawn shape (the nightly profile draws a new shape per case).
AUTOTUNE_ENV = "CONFORMANCE_GEMLITE_AUTOTUNE"
AUTOTUNE_MODES = ("fast", "default", "max")


def configure_autotune(mode: str | None) -> None:
    """Set GemLite's autotune mode for every matmul type (None: leave GemLite's own setting)."""
    if mode is None:
        return
    if mode not in AUTOTUNE_MODES:
        raise ValueError(f"{AUTOTUNE_ENV}={mode!r} is invalid; allowed: one of {list(AUTOTUNE_MODES)}")
    from gemlite.triton_kernels.config import set_autotune

    set_autotune(mode)


def register() -> str:
    """(Re-)register `gemlite_a16w4`: the adapter if gemlite imports, else the gate-only stand-in that says why."""
    global UNAVAILABLE
    unregister_kernel(NAME)
    mod, UNAVAILABLE = import_gemlite()
    if mod is not None:
        configure_autotune(os.environ.get(AUTOTUNE_ENV) or None)
    if mod is not None:
        register_kernel(GemLiteA16W4())
    elif installed():  # installed but needs a device at import: compiled by the lane, never run here
        register_kernel(GemLiteCompileOnly(UNAVAILABLE))
    else:
        register_kernel(GemLiteUnavailable(UNAVAILABLE))
    return NAME


register()
