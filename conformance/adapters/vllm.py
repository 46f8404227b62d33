"""vLLM adapter: every mixed-precision linear kernel of the installed vLLM, and its FP8 per-token-group quant.

    pytest -p conformance.pytest_plugin --pyargs conformance.suite -n auto \
        --conformance-plugin conformance.adapters.vllm

Importing this module registers, for each concrete `MPLinearKernel` subclass the installed vLLM defines, one
w4a16 conformance kernel named `vllm_<kind>` (`ExllamaLinearKernel` -> `vllm_exllama`), plus
`vllm_fp8_group_quant` (vLLM's `per_token_group_quant_fp8`). If `import vllm` fails, it registers only the
gate-only kernel `vllm_unavailable`, whose gate refuses everything with "vllm not importable: ...", so
`conformance list` and the pytest skips say why.

Contract of each `vllm_<kind>` kernel (API v2):

- gate: `W4A16Config` -> vLLM's `MPLinearLayerConfig` (full = partition = (K, N), `scalar_types.<wt>`, act dtype,
  group size, `zero_points` = the type has no bias, `has_g_idx` = act-order, `checkpoint_format` when vLLM's
  config has that field); the answer is the kernel's own `can_implement`, after vLLM's selection rule
  `get_min_capability() <= capability of the target` (CUDA `smXY` -> XY; ROCm `gfxNNN` as torch reports it).
  AWQ is refused: the MPLinearKernel interface carries no AWQ nibble order (`intake`).
- load: the checkpoint's tensors registered on a `torch.nn.Module` as vLLM's GPTQ and compressed-tensors linear
  methods register them (vLLM parameter classes with `input_dim` / `output_dim` / `packed_dim`; see
  `register_checkpoint`), on the run device; then the kernel's `process_weights_after_loading(layer)`.
- apply: `kernel.apply_weights(layer, x, None)`.
- numerics: from our reading of each kernel's source where known (`KNOWN_NUMERICS`), else act-dtype dequant,
  fp32 accumulation, and no determinism claim.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

import torch

from conformance.adapters._gate_only import Unavailable
from conformance.api import (
    Fp8QuantConfig,
    Kernel,
    Numerics,
    W4A16Config,
    detect_target,
    kernel_device,
    register_kernel,
    torch_dtype,
    unregister_kernel,
)

MP_PACKAGE = "vllm.model_executor.layers.quantization.kernels.mixed_precision"
PARAMS_MODULE = "vllm.model_executor.parameter"
FP8_MODULE = "vllm.model_executor.layers.quantization.utils.fp8_utils"
FP8_FUNCTION = "per_token_group_quant_fp8"
PRIORITY = -20  # below every built-in kernel: loading the adapter never changes a built-in selection
# MPLinearLayerConfig.checkpoint_format as vLLM's GPTQ config passes it ("gptq" = v1 zero points z - 1)
VLLM_CHECKPOINT_FORMAT = {"gptq_v1": "gptq", "gptq_v2": "gptq_v2", "compressed_tensors": ""}
VLLM_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 224.0}  # vLLM clamps e4m3fnuz at 224


def _noop_loader(*_args, **_kw):
    """The weight_loader vLLM parameters require; the adapter fills the data itself."""


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _snake(name: str) -> str:
    base = re.sub(r"(LinearKernel|Kernel)$", "", name) or name
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", base).lower()


def import_vllm():
    """(the mixed-precision kernel package, None), or (None, "vllm not importable: ...")."""
    try:
        importlib.import_module("vllm")
        return importlib.import_module(MP_PACKAGE), None
    except Exception as e:  # noqa: BLE001 - any failure means there is nothing to adapt; say which
        return None, f"vllm not importable: {_why(e)}"


def discover_kernels(mp) -> tuple[list[type], dict[str, str]]:
    """The concrete, public (no leading `_`) MPLinearKernel subclasses of the installed vLLM in vLLM's preference
    order (its `_POSSIBLE_KERNELS` list or per-platform dict, then by name), and {submodule: why it failed to
    import}. Every submodule of the kernel package is imported first, so kernels vLLM does not list are found too."""
    base = getattr(mp, "MPLinearKernel", None) or importlib.import_module(MP_PACKAGE + ".MPLinearKernel").MPLinearKernel
    skipped = {}
    for info in pkgutil.iter_modules(getattr(mp, "__path__", [])):
        try:
            importlib.import_module(f"{MP_PACKAGE}.{info.name}")
        except Exception as e:  # noqa: BLE001 - a kernel whose module needs absent hardware is reported, not fatal
            skipped[info.name] = _why(e)
    found, todo = set(), list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    possible = getattr(mp, "_POSSIBLE_KERNELS", [])
    if isinstance(possible, dict):
        possible = [k for ks in possible.values() for k in ks]
    order = {cls: i for i, cls in reversed(list(enumerate(possible)))}
    concrete = [c for c in found if not inspect.isabstract(c) and not c.__name__.startswith("_")]
    return sorted(concrete, key=lambda c: (order.get(c, len(order)), c.__name__)), skipped


def target_capability(target) -> int | None:
    """vLLM's capability integer for a target: sm90 -> 90; gfx942 -> 94, gfx1100 -> 110 (torch's (major, minor)
    on ROCm); None for cpu."""
    if target.kind == "cuda" and target.sm is not None:
        return target.sm
    if target.kind == "rocm" and target.arch:
        d = target.arch[3:]
        major, minor = (d[:2], d[2]) if len(d) == 4 else (d[0], d[1])
        return int(major) * 10 + int(minor)
    return None


def _platform_availability(target) -> str | None:
    """Why vLLM code cannot run here for `target` (None: it can)."""
    if target.is_gpu:
        if not torch.cuda.is_available():
            return f"target={target} needs a GPU; torch sees none here"
        here = detect_target()
        return None if here == target else f"target={target} is not this machine's device ({here})"
    try:
        platform = importlib.import_module("vllm.platforms").current_platform
        if platform.is_cpu():
            return None
        return f"vLLM's current platform is {type(platform).__name__}, not CPU: its kernels run on that device"
    except Exception as e:  # noqa: BLE001
        return f"vllm.platforms.current_platform unavailable: {_why(e)}"


# ---------------------------------------------------------------------------------------------- numerics

# Declarations from our reading of each kernel's source (not measured): dequant dtype None = the act dtype.
KNOWN_NUMERICS = {
    # gptq_gemm_triton with split_k_iters=1: act-dtype dequant, tl.dot into fp32, one store
    "TritonLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    # CUTLASS mainloop, fp32 accumulators, no split-K reduction across CTAs by default
    "MacheteLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    # Marlin: fp32 accumulators; the cross-CTA reduction may use atomics (use_atomic_add) at small M
    "MarlinLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32), atomics=True),
    # exllama q_gemm: half2 dot products per 128-row K block, half atomicAdd of the block results
    "ExllamaLinearKernel": Numerics(dequant_dtype=torch.float16,
                                    accumulation=(torch.float16, 128, torch.float16), atomics=True),
}
DEFAULT_NUMERICS = Numerics(accumulation=(torch.float32, None, torch.float32), deterministic=False)


# ---------------------------------------------------------------------------------------------- registration

@dataclass
class VllmLinear:
    """Operands of a vLLM linear kernel: the kernel instance and the layer holding its processed parameters."""

    kernel: object
    layer: torch.nn.Module
    config: object


def _params():
    return importlib.import_module(PARAMS_MODULE)


def register_checkpoint(layer: torch.nn.Module, ckpt, device) -> tuple[str, str, str | None, str | None]:
    """Register `ckpt`'s tensors on `layer` the way vLLM's linear methods create them, and return the parameter
    names (w_q, w_s, w_zp, w_gidx) vLLM hands to the MPLinearKernel. pf = 32 // bits, G = K / group size.

    GPTQ v1/v2 (vLLM's GPTQ linear method): qweight [K/pf, N] int32 PackedvLLMParameter(input_dim=0, output_dim=1,
    packed_dim=0); scales [G, N] GroupQuantScaleParameter(input_dim=0, output_dim=1) (channelwise: [1, N]
    ChannelQuantScaleParameter(output_dim=1)); qzeros [G, N/pf] PackedvLLMParameter(input_dim=0, output_dim=1,
    packed_dim=1) as stored (v1: z - 1), registered for symmetric types too, as GPTQ checkpoints carry it;
    g_idx [K] int32 RowvLLMParameter(input_dim=0), `k // group_size` when the checkpoint has none.

    compressed-tensors (vLLM's WNA16 scheme): weight_packed [N, K/pf] PackedvLLMParameter(input_dim=1,
    output_dim=0, packed_dim=1); weight_scale [N, G] GroupQuantScaleParameter(input_dim=1, output_dim=0)
    (channelwise: ChannelQuantScaleParameter(output_dim=0)); weight_zero_point [N/pf, G]
    PackedvLLMParameter(input_dim=1, output_dim=0, packed_dim=0), asymmetric types only; weight_g_idx [K]
    RowvLLMParameter(input_dim=0), act-order only; weight_shape int64 [2] = (N, K), BasevLLMParameter.
    """
    P = _params()
    t = {k: v.to(device) for k, v in ckpt.tensors.items()}
    pf = 32 // ckpt.wtype.size_bits
    channelwise = ckpt.group_size == -1

    def reg(name, cls, data, **layout):
        layer.register_parameter(name, cls(data=data.contiguous(), weight_loader=_noop_loader, **layout))

    if ckpt.format in ("gptq_v1", "gptq_v2"):
        reg("qweight", P.PackedvLLMParameter, t["qweight"], input_dim=0, output_dim=1, packed_dim=0, packed_factor=pf)
        if channelwise:
            reg("scales", P.ChannelQuantScaleParameter, t["scales"], output_dim=1)
        else:
            reg("scales", P.GroupQuantScaleParameter, t["scales"], input_dim=0, output_dim=1)
        if "qzeros" in t:
            cls = P.PackedColumnParameter if channelwise else P.PackedvLLMParameter
            dims = {} if channelwise else {"input_dim": 0}
            reg("qzeros", cls, t["qzeros"], output_dim=1, packed_dim=1, packed_factor=pf, **dims)
        gs = ckpt.K if channelwise else ckpt.group_size
        g_idx = t.get("g_idx", torch.arange(ckpt.K, device=device, dtype=torch.int32) // gs)
        reg("g_idx", P.RowvLLMParameter, g_idx.to(torch.int32), input_dim=0)
        return "qweight", "scales", "qzeros", "g_idx"
    if ckpt.format == "compressed_tensors":
        reg("weight_packed", P.PackedvLLMParameter, t["weight_packed"], input_dim=1, output_dim=0, packed_dim=1,
            packed_factor=pf)
        if channelwise:
            reg("weight_scale", P.ChannelQuantScaleParameter, t["weight_scale"], output_dim=0)
        else:
            reg("weight_scale", P.GroupQuantScaleParameter, t["weight_scale"], input_dim=1, output_dim=0)
        if "weight_zero_point" in t and not ckpt.wtype.has_bias():
            cls = P.PackedColumnParameter if channelwise else P.PackedvLLMParameter
            dims = {} if channelwise else {"input_dim": 1}
            reg("weight_zero_point", cls, t["weight_zero_point"], output_dim=0, packed_dim=0, packed_factor=pf,
                **dims)
        if "weight_g_idx" in t:
            reg("weight_g_idx", P.RowvLLMParameter, t["weight_g_idx"].to(torch.int32), input_dim=0)
        reg("weight_shape", P.BasevLLMParameter, torch.tensor([ckpt.N, ckpt.K], dtype=torch.int64, device=device))
        return "weight_packed", "weight_scale", "weight_zero_point", "weight_g_idx"
    raise ValueError(f"format={ckpt.format!r} not supported (allowed: gptq_v1, gptq_v2, compressed_tensors)")


def _act_order(ckpt) -> bool:
    """True when the checkpoint's g_idx is not the trivial k // group_size."""
    g = ckpt.tensors.get("g_idx", ckpt.tensors.get("weight_g_idx"))
    if g is None:
        return False
    gs = ckpt.K if ckpt.group_size == -1 else ckpt.group_size
    return not torch.equal(g.long().cpu(), torch.arange(ckpt.K) // gs)


class VllmMPLinearAdapter(Kernel):
    """One installed vLLM MPLinearKernel class as a w4a16 conformance kernel (see the module docstring)."""

    family = "w4a16"
    api_version = 2
    intake = ("gptq_v1", "gptq_v2", "compressed_tensors")

    def __init__(self, vllm_cls: type, mp, priority: int = PRIORITY):
        self.vllm_cls, self.mp = vllm_cls, mp
        self.name = f"vllm_{_snake(vllm_cls.__name__)}"
        self.priority = priority
        self.gate_note = (f"vLLM {vllm_cls.__module__}.{vllm_cls.__name__}: gates are its can_implement "
                          f"(asked on this machine's vLLM platform) and get_min_capability")

    def layer_config(self, config):
        """The MPLinearLayerConfig vLLM builds for this layer."""
        C = self.mp.MPLinearLayerConfig
        scalar_types = importlib.import_module("vllm.scalar_type").scalar_types
        wtype = getattr(scalar_types, config.weight_type)
        kw = dict(full_weight_shape=(config.K, config.N), partition_weight_shape=(config.K, config.N),
                  weight_type=wtype, act_type=torch_dtype(config.dtype), group_size=config.group_size,
                  zero_points=not wtype.has_bias(), has_g_idx=bool(config.act_order))
        if "checkpoint_format" in {f.name for f in dataclasses.fields(C)}:
            kw["checkpoint_format"] = VLLM_CHECKPOINT_FORMAT.get(config.format, "")
        return C(**kw)

    def can_implement(self, config, target):
        if not isinstance(config, W4A16Config):
            return f"config={type(config).__name__} not supported (allowed: a W4A16Config)"
        cap = target_capability(target)
        need = self.vllm_cls.get_min_capability()
        if cap is not None and need > cap:
            return f"target={target} (capability {cap}) below {self.vllm_cls.__name__}.get_min_capability()={need}"
        if not hasattr(importlib.import_module("vllm.scalar_type").scalar_types, config.weight_type):
            return f"weight_type={config.weight_type!r} not in vllm.scalar_type.scalar_types"
        ok, why = self.vllm_cls.can_implement(self.layer_config(config))
        return None if ok else f"{self.vllm_cls.__name__}.can_implement: {why}"

    def availability(self, target):
        return _platform_availability(target)

    def run_mode(self, target):
        return "device"

    def numerics(self, config, M=None):
        return KNOWN_NUMERICS.get(self.vllm_cls.__name__, DEFAULT_NUMERICS)

    def load(self, ckpt, ctx=None):
        config = W4A16Config(weight_type=ckpt.wtype.name, group_size=ckpt.group_size, act_order=_act_order(ckpt),
                             dtype=str(ckpt.act_dtype).removeprefix("torch."), format=ckpt.format, N=ckpt.N,
                             K=ckpt.K)
        c = self.layer_config(config)
        layer = torch.nn.Module()
        names = _with_tp_group(lambda: register_checkpoint(layer, ckpt, ctx.device if ctx else kernel_device()))
        for attr, v in (("input_size_per_partition", ckpt.K), ("output_size_per_partition", ckpt.N),
                        ("input_size", ckpt.K), ("output_size", ckpt.N)):
            setattr(layer, attr, v)
        kernel = self.vllm_cls(c, *names)
        kernel.process_weights_after_loading(layer)
        return VllmLinear(kernel, layer, c)

    def apply(self, ops: VllmLinear, x, ctx=None):
        return ops.kernel.apply_weights(ops.layer, x, None)


def _with_tp_group(fn):
    """Run `fn`; vLLM parameters read the tensor-parallel rank at construction, so if that fails because no
    model-parallel group exists, create a single-rank one (vLLM's own helpers) and retry once."""
    try:
        return fn()
    except (AssertionError, RuntimeError, ValueError) as first:
        try:
            dist = importlib.import_module("vllm.distributed")
            if not torch.distributed.is_initialized():
                import socket

                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                dist.init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                                  distributed_init_method=f"tcp://127.0.0.1:{port}")
            dist.initialize_model_parallel(1)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            raise first from None
        return fn()


# ---------------------------------------------------------------------------------------------- fp8 group quant

@dataclass(frozen=True)
class VllmFp8Params:
    """What `per_token_group_quant_fp8` is called with; fp8_max and eps are read by the family's grade."""

    group_size: int
    fp8_dtype: str
    torch_fp8: torch.dtype
    fp8_max: float
    eps: float
    ue8m0: bool
    column_major_scales: bool


class VllmFp8GroupQuant(Kernel):
    """vLLM's `per_token_group_quant_fp8(x, group_size, eps, dtype, column_major_scales, use_ue8m0)`.

    Numerics: vLLM main forms the scale as max(amax, eps) * fp32(1 / fp8_max) (vllm#37833, `fp8_scale =
    "reciprocal"`), q = x / s clamped at fp8_max (224 for e4m3fnuz); an all-zero group gets eps / fp8_max
    (policy "triton"). Which implementation it dispatches to (CUDA op or Triton) is vLLM's choice."""

    name = "vllm_fp8_group_quant"
    family = "fp8_group_quant"
    priority = PRIORITY
    api_version = 2
    gate_note = f"vLLM {FP8_MODULE}.{FP8_FUNCTION}"

    def __init__(self, fn):
        self.fn = fn
        self.takes_ue8m0 = "use_ue8m0" in inspect.signature(fn).parameters

    def can_implement(self, config, target):
        if not isinstance(config, Fp8QuantConfig):
            return f"config={type(config).__name__} not supported (allowed: an Fp8QuantConfig)"
        if config.dtype not in ("float16", "bfloat16", "float32"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16, float32)"
        want = "float8_e4m3fnuz" if target.gfx_family == "gfx94" else "float8_e4m3fn"
        if config.fp8_dtype != want:
            return f"fp8_dtype={config.fp8_dtype!r} not supported on target={target} (vLLM uses {want} there)"
        if target.kind == "cuda" and target.sm is not None and target.sm < 89:
            return f"target={target} not supported (fp8 needs sm89 or newer)"
        if config.ue8m0 and not self.takes_ue8m0:
            return f"ue8m0=True not supported (this vLLM's {FP8_FUNCTION} has no use_ue8m0 argument)"
        return None

    def availability(self, target):
        return _platform_availability(target)

    def run_mode(self, target):
        return "device"

    def numerics(self, config, M=None):
        return Numerics(zero_group_policy="triton", fp8_scale="reciprocal")

    def load(self, config, ctx=None) -> VllmFp8Params:
        from conformance.api import FP8_DTYPES

        return VllmFp8Params(config.group_size, config.fp8_dtype, FP8_DTYPES[config.fp8_dtype],
                             VLLM_FP8_MAX[config.fp8_dtype], 1e-10, config.ue8m0, config.column_major_scales)

    def apply(self, p: VllmFp8Params, x, ctx=None):
        kw = {"use_ue8m0": p.ue8m0} if self.takes_ue8m0 else {}
        return self.fn(x.contiguous(), p.group_size, eps=p.eps, dtype=p.torch_fp8,
                       column_major_scales=p.column_major_scales, **kw)


# ---------------------------------------------------------------------------------------------- unavailable

class VllmUnavailable(Unavailable, Kernel):
    """Registered instead of the adapters when vLLM cannot be imported: a gate-only kernel whose gate says why."""

    name = "vllm_unavailable"
    family = "w4a16"
    priority = -1000

    def run_mode(self, target):
        return "device"


REGISTERED: list[str] = []  # names this module registered (register() replaces them)
SKIPPED: dict[str, str] = {}  # vLLM kernel submodules that failed to import, and why
UNAVAILABLE: str | None = None  # why vLLM is not adapted here, or None


def register() -> list[str]:
    """(Re-)discover the installed vLLM and register its adapters; returns the registered names."""
    global UNAVAILABLE
    for name in REGISTERED:
        unregister_kernel(name)
    REGISTERED.clear()
    SKIPPED.clear()
    mp, UNAVAILABLE = import_vllm()
    kernels: list[Kernel] = []
    if mp is None:
        kernels.append(VllmUnavailable(UNAVAILABLE))
    else:
        classes, skipped = discover_kernels(mp)
        SKIPPED.update(skipped)
        kernels += [VllmMPLinearAdapter(cls, mp, PRIORITY - i) for i, cls in enumerate(classes)]
        try:
            kernels.append(VllmFp8GroupQuant(getattr(importlib.import_module(FP8_MODULE), FP8_FUNCTION)))
        except Exception as e:  # noqa: BLE001
            SKIPPED[FP8_MODULE] = _why(e)
    for k in kernels:
        register_kernel(k)
        REGISTERED.append(k.name)
    return list(REGISTERED)


register()
