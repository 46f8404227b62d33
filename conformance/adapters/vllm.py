"""vLLM adapter: every mixed-precision linear kernel of the installed vLLM, and its FP8 per-token-group quant.

    pytest -p conformance.pytest_plugin --pyargs conformance.suite -n auto \
        --conformance-plugin conformance.adapters.vllm

Importing this module registers, for each concrete `MPLinearKernel` subclass the installed vLLM defines, one
w4a16 conformance kernel named `vllm_<kind>` (`TritonW4A16LinearKernel` -> `vllm_triton_w4a16`), plus two FP8
kernels over vLLM's `per_token_group_quant_fp8`. If vLLM or its kernel package does not import, it registers only
the gate-only kernel `vllm_unavailable`, whose gate refuses everything with the reason.

Layouts (`LAYOUTS`): the kernel package is `vllm.model_executor.kernels.linear.mixed_precision` (vLLM >= vllm#34055,
e.g. 0.33.0) or the older `vllm.model_executor.layers.quantization.kernels.mixed_precision`; `describe()` (shown by
`python -m conformance --plugin conformance.adapters.vllm list`) names the one found and the vLLM version.

Contract of each `vllm_<kind>` kernel (API v2):

- gate, asked as vLLM would run it on the target T (`vllm_platform.as_target`: vLLM's platform object for T stands
  in for the machine's, for the question only): the kernel must be in vLLM's preference list for T's platform
  (`_POSSIBLE_KERNELS[platform]`, when vLLM keeps one per platform), `get_min_capability() <= ` T's capability as
  vLLM's platform reports it, then the kernel's own `can_implement(MPLinearLayerConfig)`. The layer config is the
  one vLLM's linear methods build: full = partition = (K, N), `scalar_types.<wt>`, act dtype, group size,
  `zero_points` = the type has no bias, and `has_g_idx` / `checkpoint_format` where the installed config has those
  fields. Where it has neither (0.33.0): act-order is refused (vLLM 0.33.0 refuses desc_act checkpoints) and a GPTQ
  v1 checkpoint with zero points too (v1 stores z - 1 and no field tells the kernel; 0.33.0's GPTQ method accepts
  symmetric types only, whose zeros are ignored). AWQ is not fed (`intake`): vLLM converts it before its kernels.
- load: the checkpoint's tensors registered on a `torch.nn.Module` as vLLM's GPTQ and compressed-tensors linear
  methods register them (`register_checkpoint`), then `process_weights_after_loading(layer)`, under T's platform.
- apply: `apply_weights(layer, x, None)` under T's platform, the layer's processed parameters as the operands.
- how it runs (`ROUTES`, from the kernel module's source): `triton` kernels run natively on this machine's GPU and
  in Triton's interpreter for a simulated target; `hybrid` (RDNAHybridW4A16) runs its Triton path the same way and
  its HIP GEMV (M <= 5) where `torch.ops._rocm_C.wvSplitK_int4_g` is absent as our model of that GEMV
  (`conformance_kernels.rdna_hybrid_w4a16.gemv_model`, on vLLM's own processed operands); `compiled` kernels (they
  call vLLM's compiled ops) run only where vLLM's compiled library loaded, and are listed unavailable otherwise;
  `torch` kernels run anywhere.
- contract checks: a kernel whose module registers a vLLM custom op (`torch.ops.vllm.triton_w4a16_gemm` for
  TritonW4A16) exposes it as `op`, and `launch_config()` reports the tiles of its last Triton launch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

import torch

from conformance.adapters import vllm_platform
from conformance.adapters._gate_only import Unavailable
from conformance.api import (
    Fp8QuantConfig,
    Kernel,
    Numerics,
    W4A16Config,
    kernel_device,
    register_kernel,
    torch_dtype,
    unregister_kernel,
)
from conformance.core.launch import Launch
from conformance.core.runtime import configure_triton, interpreting

# (kernel package, where vLLM keeps its per-platform preference lists, label), newest first
LAYOUTS = (
    ("vllm.model_executor.kernels.linear.mixed_precision", "vllm.model_executor.kernels.linear",
     "kernels.linear.mixed_precision (vllm#34055 and later)"),
    ("vllm.model_executor.layers.quantization.kernels.mixed_precision", None,
     "layers.quantization.kernels.mixed_precision (before vllm#34055)"),
)
PARAMS_MODULE = "vllm.model_executor.parameter"
FP8_MODULES = ("vllm.model_executor.layers.quantization.utils.fp8_utils",)
FP8_FUNCTION = "per_token_group_quant_fp8"
FP8_LIMITS = ("vllm.model_executor.layers.quantization.utils.quant_utils", "get_fp8_min_max")
PRIORITY = -20  # below every built-in kernel: loading the adapter never changes a built-in selection
# MPLinearLayerConfig.checkpoint_format as vLLM's GPTQ config passed it, where the field exists ("gptq" = v1)
VLLM_CHECKPOINT_FORMAT = {"gptq_v1": "gptq", "gptq_v2": "gptq_v2", "compressed_tensors": ""}
FP8_ROW_PAD = 16  # elements of padding per row: vLLM takes its Triton route for an x that is not contiguous


def _noop_loader(*_args, **_kw):
    """The weight_loader vLLM parameters require; the adapter fills the data itself."""


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


# class names the generic split spells badly
SNAKE_NAMES = {"RDNA3W4A16": "rdna3_w4a16", "CPUWNA16": "cpu_wna16", "XPUW4A8Int": "xpu_w4a8_int",
               "XPUwNa16": "xpu_wna16", "ZentorchWNA16": "zentorch_wna16"}


def _snake(name: str) -> str:
    """TritonW4A16LinearKernel -> triton_w4a16, RDNAHybridW4A16LinearKernel -> rdna_hybrid_w4a16."""
    base = re.sub(r"(LinearKernel|Kernel)$", "", name) or name
    if base in SNAKE_NAMES:
        return SNAKE_NAMES[base]
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", base).lower()


def _has_op(namespace: str, name: str) -> bool:
    try:
        return hasattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False


# ---------------------------------------------------------------------------------------------- discovery

@dataclass
class Found:
    """What import_vllm found: the kernel package, its layout label, where the per-platform lists live, version."""

    mp: object
    layout: str
    lists_module: str | None
    version: str


def import_vllm() -> tuple[Found | None, str | None]:
    """(Found, None), or (None, "vllm not importable: ..." naming every layout tried)."""
    try:
        vllm_platform.ensure_compiled_placeholder()
        vllm = importlib.import_module("vllm")
    except Exception as e:  # noqa: BLE001 - any failure means there is nothing to adapt; say which
        return None, f"vllm not importable: {_why(e)}"
    tried = []
    for package, lists, label in LAYOUTS:
        try:
            mp = importlib.import_module(package)
        except ModuleNotFoundError as e:
            if e.name and package.startswith(e.name + ".") or e.name == package:
                tried.append(f"{package}: {_why(e)}")
                continue
            return None, f"vllm not importable: {package}: {_why(e)}"
        except Exception as e:  # noqa: BLE001
            return None, f"vllm not importable: {package}: {_why(e)}"
        return Found(mp, label, lists, getattr(vllm, "__version__", "unknown")), None
    return None, "vllm not importable: no known kernel package layout: " + "; ".join(tried)


def discover_kernels(found: Found) -> tuple[list[type], dict[str, str]]:
    """The concrete, public (no leading `_`) MPLinearKernel subclasses of the installed vLLM in vLLM's preference
    order (ROCm's list first, then CUDA's, then the rest by name), and {submodule: why it failed to import}. Every
    submodule of the kernel package is imported first, so kernels vLLM lists nowhere are found too."""
    mp = found.mp
    base = getattr(mp, "MPLinearKernel", None)
    if base is None:
        base = importlib.import_module(mp.__name__ + ".MPLinearKernel").MPLinearKernel
    skipped = {}
    for info in pkgutil.iter_modules(getattr(mp, "__path__", [])):
        try:
            importlib.import_module(f"{mp.__name__}.{info.name}")
        except Exception as e:  # noqa: BLE001 - a kernel whose module needs absent hardware is reported, not fatal
            skipped[info.name] = _why(e)
    seen, todo = set(), list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            todo.extend(cls.__subclasses__())
    order: dict = {}
    for cls in _preference_lists(found, ordered=True):
        order.setdefault(cls, len(order))
    concrete = [c for c in seen if not inspect.isabstract(c) and not c.__name__.startswith("_")]
    return sorted(concrete, key=lambda c: (order.get(c, len(order)), c.__name__)), skipped


def possible_kernels(found: Found):
    """vLLM's `_POSSIBLE_KERNELS`: a {PlatformEnum: [classes]} dict, a flat list (older vLLM), or None."""
    if not hasattr(found, "_lists"):
        found._lists = _find_possible_kernels(found)
    return found._lists


def _find_possible_kernels(found: Found):
    for name in filter(None, (found.lists_module, found.mp.__name__)):
        try:
            lists = getattr(importlib.import_module(name), "_POSSIBLE_KERNELS", None)
        except Exception:  # noqa: BLE001 - no list: no platform filter
            lists = None
        if lists is not None:
            return lists
    return None


def _preference_lists(found: Found, ordered: bool = False) -> list:
    lists = possible_kernels(found)
    if isinstance(lists, dict):
        # ROCm first: on ROCm vLLM prefers its Triton kernel to Conch/Exllama, on CUDA the other way round; a
        # registry priority is one number, so selection follows ROCm's order where the two disagree
        keys = sorted(lists, key=lambda k: (str(k).split(".")[-1] != "ROCM", str(k).split(".")[-1] != "CUDA", str(k)))
        return [c for k in keys for c in lists[k]]
    return list(lists or [])


def kernel_route(cls: type) -> str:
    """How a vLLM kernel class runs (see the module docstring), read from its module's source: 'hybrid' (Triton
    and a HIP op by M), 'compiled' (calls vLLM's compiled ops), 'triton' (only Triton kernels) or 'torch'."""
    try:
        src = inspect.getsource(inspect.getmodule(cls))
    except (OSError, TypeError):
        return "compiled"
    compiled = "_custom_ops" in src or "torch.ops._C" in src or "torch.ops._rocm_C" in src
    triton = "@triton.jit" in src
    if compiled and triton:
        return "hybrid"
    return "compiled" if compiled else ("triton" if triton else "torch")


def compiled_absent() -> str | None:
    """Why vLLM's compiled ops are absent here, or None when its compiled library loaded."""
    absent = vllm_platform.COMPILED_ABSENT
    return None if absent is None else f"vLLM's compiled ops are absent: {absent}"


# ---------------------------------------------------------------------------------------------- numerics

# From our reading of each kernel's source (not measured): dequant dtype None = the act dtype.
KNOWN_NUMERICS = {
    # (q - z) exact in the act dtype, times the scale (one rounding), tl.dot into one fp32 accumulator
    "TritonW4A16LinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    "RDNAHybridW4A16LinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    "TritonLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    "MacheteLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32)),
    # Marlin: fp32 accumulators; the cross-CTA reduction may use atomics (use_atomic_add) at small M
    "MarlinLinearKernel": Numerics(accumulation=(torch.float32, None, torch.float32), atomics=True),
    # exllama q_gemm: half2 dot products per 128-row K block, half atomicAdd of the block results
    "ExllamaLinearKernel": Numerics(dequant_dtype=torch.float16,
                                    accumulation=(torch.float16, 128, torch.float16), atomics=True),
}
# the HIP GEMV of the hybrid kernel, as our model computes it: per group an fp32 dot with the exact (q - z),
# times the scale in fp32, summed in fp32
HYBRID_GEMV_NUMERICS = Numerics(dequant_dtype=torch.float32, accumulation=(torch.float32, None, torch.float32))
DEFAULT_NUMERICS = Numerics(accumulation=(torch.float32, None, torch.float32), deterministic=False)


# ---------------------------------------------------------------------------------------------- registration

@dataclass
class VllmLinear:
    """Operands of a vLLM linear kernel: the kernel instance, the layer vLLM processed, and that layer's tensors
    (`params`: what apply hands the kernel, and what the contract checks swap for traced tensors)."""

    kernel: object
    layer: torch.nn.Module
    config: object
    params: dict


def _params():
    return importlib.import_module(PARAMS_MODULE)


def _fresh(data: torch.Tensor) -> torch.Tensor:
    """`data` in a fresh row-major buffer, as vLLM's create_weights allocates a parameter and its loader copies the
    checkpoint in (a `.contiguous()` view keeps odd strides on size-1 dims, which vLLM's own layers never see)."""
    out = torch.empty(data.shape, dtype=data.dtype, device=data.device)
    out.copy_(data)
    return out


def register_checkpoint(layer: torch.nn.Module, ckpt, device, g_idx: bool = True) -> tuple[str, str, str | None,
                                                                                              str | None]:
    """Register `ckpt`'s tensors on `layer` the way vLLM's linear methods create them, and return the parameter
    names (w_q, w_s, w_zp, w_gidx) vLLM hands to the MPLinearKernel. pf = 32 // bits, G = K / group size.
    `g_idx` False (vLLM without act-order plumbing): no g_idx tensor is registered, w_gidx is None.

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
        layer.register_parameter(name, cls(data=_fresh(data), weight_loader=_noop_loader, **layout))

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
        if not g_idx:
            return "qweight", "scales", "qzeros", None
        gs = ckpt.K if channelwise else ckpt.group_size
        gi = t.get("g_idx", torch.arange(ckpt.K, device=device, dtype=torch.int32) // gs)
        reg("g_idx", P.RowvLLMParameter, gi.to(torch.int32), input_dim=0)
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
        if "weight_g_idx" in t and g_idx:
            reg("weight_g_idx", P.RowvLLMParameter, t["weight_g_idx"].to(torch.int32), input_dim=0)
        reg("weight_shape", P.BasevLLMParameter, torch.tensor([ckpt.N, ckpt.K], dtype=torch.int64, device=device))
        return "weight_packed", "weight_scale", "weight_zero_point", "weight_g_idx" if g_idx else None
    raise ValueError(f"format={ckpt.format!r} not supported (allowed: gptq_v1, gptq_v2, compressed_tensors)")


def _act_order(ckpt) -> bool:
    """True when the checkpoint's g_idx is not the trivial k // group_size."""
    g = ckpt.tensors.get("g_idx", ckpt.tensors.get("weight_g_idx"))
    if g is None:
        return False
    gs = ckpt.K if ckpt.group_size == -1 else ckpt.group_size
    return not torch.equal(g.long().cpu(), torch.arange(ckpt.K) // gs)


class _LaunchRecorder:
    """Stands in for one of vLLM's @triton.jit kernels in its module: `kernel[grid](...)` records the launch's
    constexpr tiles, then launches the real kernel unchanged (an observer for the compile-boundary check)."""

    def __init__(self, jit, sink: dict, path: str):
        self.jit, self.sink, self.path = jit, sink, path

    def __getitem__(self, grid):
        launch = self.jit[grid]

        def run(*args, **kw):
            self.sink.clear()
            self.sink.update({k: v for k, v in kw.items() if k.startswith("BLOCK_") or k in ("num_warps",
                                                                                              "PACKED_DEQUANT")})
            self.sink["path"] = self.path
            return launch(*args, **kw)
        return run

    def __getattr__(self, name):
        return getattr(self.jit, name)


# vLLM custom ops a kernel class's module registers, exposed as `op` for the contract checks; the @triton.jit
# kernels whose launches `launch_config()` reports
KERNEL_OPS = {"TritonW4A16LinearKernel": ("triton_w4a16_gemm", ("triton_w4a16_gemm_kernel",))}
HYBRID_TRITON = "_triton_w4a16_skinny_fmt_kernel"
# boolean constexprs that switch a vLLM Triton kernel to another code path, named in Launch.path when set: the
# hybrid's PACKED_DEQUANT (gfx1151, fp16: two nibbles per instruction via the 1024 + nibble trick; its wrapper sets
# it for symmetric layers only up to M = 128/256, so which formats take it depends on the layer)
PATH_CONSTEXPRS = ("PACKED_DEQUANT",)


def program_path(name: str) -> str:
    """A launch path's name for a vLLM Triton kernel (`..._triton_w4a16_skinny_fmt_kernel` ->
    `triton_w4a16_skinny_fmt`)."""
    return name.rsplit(".", 1)[-1].strip("_").removesuffix("_kernel")


def launch_path(programs) -> str:
    """The path of a captured launch: its programs' names joined by "+", each followed by "+<constexpr, lower case>"
    for every PATH_CONSTEXPRS flag it sets."""
    parts = []
    for p in programs:
        flags = dict(p.constexprs)
        parts += [program_path(p.name), *(c.lower() for c in PATH_CONSTEXPRS if flags.get(c))]
    return "+".join(parts) or "no_launch"


class VllmMPLinearAdapter(Kernel):
    """One installed vLLM MPLinearKernel class as a w4a16 conformance kernel (see the module docstring)."""

    family = "w4a16"
    api_version = 2
    intake = ("gptq_v1", "gptq_v2", "compressed_tensors")

    def __init__(self, vllm_cls: type, found: Found, priority: int = PRIORITY):
        self.vllm_cls, self.found, self.mp = vllm_cls, found, found.mp
        self.name = f"vllm_{_snake(vllm_cls.__name__)}"
        self.priority = priority
        self.route = kernel_route(vllm_cls)
        self.has_model = self.route == "hybrid"
        # vLLM's Triton code runs on any Triton backend: on a GPU host a simulated target (the hybrid's gfx1100)
        # runs it on this device, under that target's platform, instead of the model (harness._execution)
        self.simulated_on_device = self.route in ("triton", "hybrid")
        fields = {f.name for f in dataclasses.fields(self.mp.MPLinearLayerConfig)}
        self.has_g_idx_field = "has_g_idx" in fields
        self.checkpoint_format_field = "checkpoint_format" in fields
        self.takes_gidx = "w_gidx_param_name" in inspect.signature(vllm_cls.__init__).parameters
        self._launch: dict = {}
        self._launches: dict = {}
        self._capture_layers: dict = {}  # (config, target) -> the loaded layer launch() captures calls on
        self._gates: dict = {}
        self.op = None
        self._expose_op()
        self.gate_note = (f"vLLM {found.version}, layout {found.layout}: {vllm_cls.__module__}."
                          f"{vllm_cls.__name__} ({self.route}): its "
                          "_POSSIBLE_KERNELS list, get_min_capability and can_implement, asked under vLLM's "
                          "platform for the target")

    def _expose_op(self):
        """`op` = the vLLM custom op the kernel's module registered (when listed in KERNEL_OPS and registered), and
        launch recorders on the module's Triton kernels."""
        module = inspect.getmodule(self.vllm_cls)
        op_name, jits = KERNEL_OPS.get(self.vllm_cls.__name__, (None, ()))
        if self.route == "hybrid":
            jits = (HYBRID_TRITON,)
        for j in jits:
            jit = getattr(module, j, None)
            if jit is not None and not isinstance(jit, _LaunchRecorder):
                setattr(module, j, _LaunchRecorder(jit, self._launch, "triton"))
            elif isinstance(jit, _LaunchRecorder):
                jit.sink = self._launch
        if op_name and _has_op("vllm", op_name):
            self.op = getattr(torch.ops.vllm, op_name).default

    # ---- gate ----
    def layer_config(self, config):
        """The MPLinearLayerConfig vLLM builds for this layer."""
        C = self.mp.MPLinearLayerConfig
        wtype = getattr(importlib.import_module("vllm.scalar_type").scalar_types, config.weight_type)
        kw = dict(full_weight_shape=(config.K, config.N), partition_weight_shape=(config.K, config.N),
                  weight_type=wtype, act_type=torch_dtype(config.dtype), group_size=config.group_size,
                  zero_points=not wtype.has_bias())
        if self.has_g_idx_field:
            kw["has_g_idx"] = bool(config.act_order)
        if self.checkpoint_format_field:
            kw["checkpoint_format"] = VLLM_CHECKPOINT_FORMAT.get(config.format, "")
        return C(**kw)

    def _interface_refusal(self, config, wtype) -> str | None:
        """What the installed vLLM's kernel interface cannot carry (see the module docstring), or None."""
        if config.act_order and not self.has_g_idx_field:
            return (f"act_order=True not supported: vLLM {self.found.version}'s MPLinearLayerConfig has no "
                    "has_g_idx (it refuses desc_act checkpoints)")
        if config.format == "gptq_v1" and not wtype.has_bias() and not self.checkpoint_format_field:
            return (f"format='gptq_v1' with weight_type={config.weight_type!r} not supported: vLLM "
                    f"{self.found.version}'s MPLinearLayerConfig has no checkpoint_format, so nothing tells the "
                    "kernel that v1 zero points are stored as z - 1 (its GPTQ method takes symmetric types only)")
        return None

    def can_implement(self, config, target):
        if not isinstance(config, W4A16Config):
            return f"config={type(config).__name__} not supported (allowed: a W4A16Config)"
        key = (config, str(target))  # gates are pure: coverage and list ask the same question many times
        if key not in self._gates:
            self._gates[key] = self._gate(config, target)
        return self._gates[key]

    def _gate(self, config, target):
        scalar_types = importlib.import_module("vllm.scalar_type").scalar_types
        if not hasattr(scalar_types, config.weight_type):
            return f"weight_type={config.weight_type!r} not in vllm.scalar_type.scalar_types"
        why = self._interface_refusal(config, getattr(scalar_types, config.weight_type))
        if why:
            return why
        name = self.vllm_cls.__name__
        try:
            scope = vllm_platform.as_target(target)
            plat = scope.__enter__()
        except Exception as e:  # noqa: BLE001 - no platform object for the target: the question cannot be asked
            return f"vLLM's platform for target={target} unavailable: {_why(e)}"
        try:
            lists = possible_kernels(self.found)
            if isinstance(lists, dict):
                enum = getattr(plat, "_enum", None)
                if self.vllm_cls not in lists.get(enum, []):
                    return f"{name} is not in vLLM's _POSSIBLE_KERNELS[{getattr(enum, 'name', enum)}] ({target})"
            cap = vllm_platform.capability(plat)
            need = self.vllm_cls.get_min_capability()
            if cap is not None and need > cap:
                return f"target={target} (capability {cap}) below {name}.get_min_capability()={need}"
            ok, why = self.vllm_cls.can_implement(self.layer_config(config))
            return None if ok else f"{name}.can_implement on {type(plat).__name__}({target}): {why}"
        finally:
            scope.__exit__(None, None, None)

    # ---- how it runs ----
    def availability(self, target):
        if target.is_gpu and torch.cuda.is_available() and not vllm_platform.is_machine_target(target):
            from conformance.core.targets import detect_target

            return f"target={target} is not this machine's device ({detect_target()})"
        if self.route in ("triton", "hybrid"):
            if torch.cuda.is_available() or interpreting():
                return None
            return "no GPU and TRITON_INTERPRET is off: vLLM's Triton kernel cannot run"
        if self.route == "compiled":
            return compiled_absent()
        return None

    def run_mode(self, target):
        if self.route in ("triton", "hybrid") and not torch.cuda.is_available():
            return "interpreter"
        return "device"

    def _gemv_route(self, M: int, K: int, target) -> bool:
        """True when vLLM's hybrid sends a call of M rows to its HIP GEMV on `target` (its own rule)."""
        mod = inspect.getmodule(self.vllm_cls)
        # the rule changed across releases: 0.26.0-0.31.0 K * M <= LDS_CAPACITY_ELEMENTS; 0.32.0 a MEDIUM limit;
        # 0.33.0 also every M <= 5 on gfx115x (_on_gfx115x)
        limit = getattr(mod, "MEDIUM_SKINNY_LIMIT_ELEMENTS", None) or mod.LDS_CAPACITY_ELEMENTS
        gfx115x = False
        if target is not None and hasattr(mod, "_on_gfx115x"):
            with vllm_platform.as_target(target):
                gfx115x = mod._on_gfx115x()
        return M <= mod.MAX_SKINNY_BATCH_SIZE and (K * M <= limit or gfx115x)

    def gemv_absent(self) -> str | None:
        if _has_op("_rocm_C", "wvSplitK_int4_g"):
            return None
        return "torch.ops._rocm_C.wvSplitK_int4_g (vLLM's HIP GEMV) is absent" + (
            f" ({compiled_absent()})" if compiled_absent() else "")

    def run_mode_for(self, M: int, K: int, target) -> str:
        if self.route == "hybrid" and self._gemv_route(M, K, target) and self.gemv_absent():
            return "model"
        return self.run_mode(target)

    def numerics(self, config, M=None):
        if self.route == "hybrid" and config is not None and M is not None and self._gemv_route(M, config.K, _T):
            return HYBRID_GEMV_NUMERICS
        return KNOWN_NUMERICS.get(self.vllm_cls.__name__, DEFAULT_NUMERICS)

    def launch_config(self) -> dict | None:
        return dict(self._launch) if self._launch else None

    def launch(self, config, M, target):
        """What vLLM's wrapper launches for M rows on `target`, read off a real call (vLLM's own tile choice, made
        under its platform for the target): load a small seeded checkpoint of `config`, apply on zeros with the
        Triton launch recorded, not run (conformance.core.launch_capture). Path: the Triton kernel's name
        ("triton_w4a16_gemm", the hybrid's "triton_w4a16_skinny_fmt", "+packed_dequant" where its wrapper sets
        PACKED_DEQUANT: `launch_path`), or "gemv_hip" where the hybrid sends M to its HIP GEMV.
        None for kernels that are not Triton code, or where the gate refuses."""
        if self.route not in ("triton", "hybrid") or self.can_implement(config, target) is not None:
            return None
        if self.route == "hybrid" and self._gemv_route(M, config.K, target):
            return Launch("gemv_hip", dict(M=M))
        key = (config, M, str(target))
        if key not in self._launches:
            self._launches[key] = self._capture(config, M, target)
        return self._launches[key]

    def route_path(self) -> str:
        """The path of the Triton kernel this class's dispatch reaches for a Triton call (the hybrid's skinny-format
        kernel above its GEMV rows; TritonW4A16's GEMM), named as `launch_path` names it."""
        jits = (HYBRID_TRITON,) if self.route == "hybrid" else KERNEL_OPS.get(self.vllm_cls.__name__, (None, ()))[1]
        return "+".join(program_path(j) for j in jits) or "no_launch"

    def _capture(self, config, M, target):
        """The launch, read off a real call. Where vLLM's own wrapper raises before it launches (the hybrid's shape
        assertion on a symmetric GPTQ layer's qzeros when N/8 != G: docs/shipped-bugs.md), the call still takes the
        route's Triton path: the Launch names it with no tiles or programs, so the plan gives that cell a case (which
        fails, loudly, as vLLM does) instead of the plan failing to build."""
        from conformance.core.kernel import RunContext
        from conformance.core.launch_capture import capture_programs, checkpoint_for

        ctx = RunContext(target, "cpu", "interpreter")
        # one load per (config, target): the plan's path probe asks up to ~15 M of one config, and the load (vLLM's
        # process_weights_after_loading) is most of a capture; apply reads the layer, never writes it
        layer_key = (config, str(target))
        if layer_key not in self._capture_layers:
            self._capture_layers[layer_key] = self.load(checkpoint_for(config), ctx)
        ops = self._capture_layers[layer_key]
        x = torch.zeros((M, config.K), dtype=torch_dtype(config.dtype))
        try:
            progs = capture_programs(lambda: self.apply(ops, x, ctx))
        except AssertionError as e:  # vLLM's wrapper refused the call's operands (its asserts): raised, not launched
            return Launch(self.route_path(), key=(self.name, "raises", f"AssertionError: {e}"))
        tiles = {n: v for p in progs for n, v in p.constexprs if n.startswith("BLOCK_")}
        return Launch(launch_path(progs), tiles, key=(self.name, tuple(p.key for p in progs)), programs=progs)

    # ---- load / apply ----
    def load(self, ckpt, ctx=None):
        config = W4A16Config(weight_type=ckpt.wtype.name, group_size=ckpt.group_size, act_order=_act_order(ckpt),
                             dtype=str(ckpt.act_dtype).removeprefix("torch."), format=ckpt.format, N=ckpt.N,
                             K=ckpt.K)
        c = self.layer_config(config)
        layer = torch.nn.Module()
        device = ctx.device if ctx else kernel_device()
        names = _with_tp_group(lambda: register_checkpoint(layer, ckpt, device, g_idx=self.takes_gidx))
        for attr, v in (("input_size_per_partition", ckpt.K), ("output_size_per_partition", ckpt.N),
                        ("input_size", ckpt.K), ("output_size", ckpt.N)):
            setattr(layer, attr, v)
        kernel = self.vllm_cls(c, *(names if self.takes_gidx else names[:3]))
        with _vllm_config_scope(), vllm_platform.as_target(_target(ctx)):
            kernel.process_weights_after_loading(layer)
        params = {n: p.data for n, p in layer.named_parameters(recurse=False)}
        return VllmLinear(kernel, layer, c, params)

    def apply(self, ops: VllmLinear, x, ctx=None):
        layer = _Layer(ops.params)
        if torch.compiler.is_compiling():  # traced: the op is opaque, its impl asks the platform when it runs
            return ops.kernel.apply_weights(layer, x, None)
        with vllm_platform.as_target(_target(ctx)):
            return ops.kernel.apply_weights(layer, x, None)

    def model(self, ops: VllmLinear, x, ctx=None):
        """The hybrid's HIP GEMV where its op is absent (our model), its Triton path otherwise, on vLLM's operands."""
        if not self._gemv_route(x.shape[0], x.shape[1], _target(ctx)):
            return self.apply(ops, x, ctx)
        from conformance.core.tree import import_tree_package

        import_tree_package("conformance_kernels")
        gemv_model = importlib.import_module("conformance_kernels.rdna_hybrid_w4a16").gemv_model
        c = ops.kernel.config
        w_q, w_s, w_zp = (ops.params.get(n) for n in (ops.kernel.w_q_name, ops.kernel.w_s_name,
                                                      ops.kernel.w_zp_name or ""))
        gs = c.group_size if c.group_size != -1 else c.partition_weight_shape[0]
        bias = c.weight_type.bias if c.weight_type.has_bias() else 0
        self._launch.clear()
        self._launch.update(path="gemv_model", M=x.shape[0])
        dev = x.device
        return gemv_model(x, w_q.view(torch.int32).to(dev), w_s.to(dev), None if w_zp is None else w_zp.to(dev),
                          gs, bias)


class _Layer:
    """What apply_weights reads its tensors from: the processed parameters as attributes (a plain object, so
    torch.compile traces through it)."""

    def __init__(self, params: dict):
        for name, t in params.items():
            setattr(self, name, t)


_T = None  # numerics() has no target: the hybrid's gfx115x GEMV rule is asked for the default (non-gfx115x) case


def _target(ctx):
    from conformance.core.targets import detect_target

    return ctx.target if ctx is not None else detect_target()


_DEFAULT_CONFIG: list = []  # the default VllmConfig built once for _vllm_config_scope


@contextlib.contextmanager
def _vllm_config_scope():
    """Inside the block vLLM has a current config, as in a model's load: where none is set, a default `VllmConfig`
    built on this machine's platform (once). vLLM 0.34.0's RDNAHybrid `process_weights_after_loading` reads
    `get_current_vllm_config().kernel_config` (its prefill dequant switch, default "disable"), which asserts when no
    config is set; 0.33.0 never asks."""
    try:
        config = importlib.import_module("vllm.config")
    except ModuleNotFoundError as e:  # a vLLM without a config module (the CI stand-in) never asks for one
        if e.name not in ("vllm.config", "vllm"):
            raise
        yield
        return
    current = getattr(config, "get_current_vllm_config_or_none", None)
    if not hasattr(config, "set_current_vllm_config") or (current is not None and current() is not None):
        yield
        return
    if not _DEFAULT_CONFIG:
        from conformance.core.targets import detect_target

        with vllm_platform.as_target(detect_target()):
            _DEFAULT_CONFIG.append(config.VllmConfig())
    with config.set_current_vllm_config(_DEFAULT_CONFIG[0]):
        yield


def _with_tp_group(fn):
    """Run `fn`; vLLM parameters read the tensor-parallel rank at construction, so if that fails because no
    model-parallel group exists, create a single-rank one (vLLM's own helpers, gloo, inside a default VllmConfig
    built on this machine's platform) and retry once."""
    try:
        return fn()
    except (AssertionError, RuntimeError, ValueError) as first:
        try:
            from conformance.core.targets import detect_target

            dist = importlib.import_module("vllm.distributed")
            config = importlib.import_module("vllm.config")
            with vllm_platform.as_target(detect_target()):
                vllm_config = config.VllmConfig()
            with config.set_current_vllm_config(vllm_config):
                if not torch.distributed.is_initialized():
                    import socket

                    with socket.socket() as s:
                        s.bind(("127.0.0.1", 0))
                        port = s.getsockname()[1]
                    dist.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                      distributed_init_method=f"tcp://127.0.0.1:{port}")
                dist.initialize_model_parallel(1, backend="gloo")
        except Exception as e:  # noqa: BLE001 - the original error is the one to report, with why the fix failed
            raise RuntimeError(f"{_why(first)} (creating a single-rank group failed: {_why(e)})") from None
        return fn()


@contextlib.contextmanager
def _triton_visible_to_vllm():
    """vLLM replaces Triton by a placeholder when Triton reports no active GPU driver (always on a CPU host),
    except when CUDA_VISIBLE_DEVICES is set and empty (its allowance for Ray workers whose devices come later). On
    a host without a GPU, with Triton's interpreter on, it is set empty while vLLM imports (and restored after),
    so vLLM's @triton.jit kernels are real Triton kernels, which the interpreter runs."""
    import os

    if torch.cuda.is_available() or not interpreting() or "CUDA_VISIBLE_DEVICES" in os.environ:
        yield
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]


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
    """vLLM's `per_token_group_quant_fp8(x, group_size, eps, dtype, column_major_scales, use_ue8m0)`, called as a
    model layer calls it (x contiguous): vLLM's own dispatch picks its compiled op
    `torch.ops._C.per_token_group_fp8_quant` on CUDA/ROCm platforms and its Triton kernel elsewhere.

    Numerics (its Triton kernel): s = max(amax, eps) * (1.0 / fp8_max) (vllm#37833, `fp8_scale = "reciprocal"`),
    q = clamp(x / s) at vLLM's fp8 limits (`get_fp8_min_max`: 224 on e4m3fnuz platforms); UE8M0 rounds s up to a
    power of two; an all-zero group gets eps / fp8_max (policy "triton")."""

    name = "vllm_fp8_group_quant"
    family = "fp8_group_quant"
    priority = PRIORITY
    api_version = 2
    route = "dispatch"

    def __init__(self, fn):
        self.fn = fn
        self._gates: dict = {}
        self._launches: dict = {}
        self.takes_ue8m0 = "use_ue8m0" in inspect.signature(fn).parameters
        self.gate_note = (f"vLLM {fn.__module__}.{FP8_FUNCTION}, as a model layer calls it: fp8 dtype and limits "
                          "from vLLM's platform for the target")

    def can_implement(self, config, target):
        if not isinstance(config, Fp8QuantConfig):
            return f"config={type(config).__name__} not supported (allowed: an Fp8QuantConfig)"
        key = (config, str(target))
        if key not in self._gates:
            self._gates[key] = self._gate(config, target)
        return self._gates[key]

    def _gate(self, config, target):
        if config.dtype not in ("float16", "bfloat16", "float32"):
            return f"dtype={config.dtype!r} not supported (allowed: float16, bfloat16, float32)"
        try:
            with vllm_platform.as_target(target) as plat:
                want = str(plat.fp8_dtype()).removeprefix("torch.")
        except Exception as e:  # noqa: BLE001
            return f"vLLM's platform for target={target} unavailable: {_why(e)}"
        if config.fp8_dtype != want:
            return f"fp8_dtype={config.fp8_dtype!r} not supported on target={target} (vLLM's platform uses {want})"
        if target.kind == "cuda" and target.sm is not None and target.sm < 89:
            return f"target={target} not supported (Triton's fp8e4nv needs sm89 or newer)"
        if config.ue8m0 and not self.takes_ue8m0:
            return f"ue8m0=True not supported (this vLLM's {FP8_FUNCTION} has no use_ue8m0 argument)"
        return None

    def _dispatches_to_compiled(self, target) -> bool:
        with vllm_platform.as_target(target) as plat:
            return bool(plat.is_cuda_alike() or plat.is_xpu())

    def availability(self, target):
        if target.is_gpu and torch.cuda.is_available() and not vllm_platform.is_machine_target(target):
            from conformance.core.targets import detect_target

            return f"target={target} is not this machine's device ({detect_target()})"
        if self.route == "dispatch":
            if not self._dispatches_to_compiled(target):
                # vLLM's own dispatch is then its Triton route: judged as vllm_fp8_group_quant_triton, and kept off
                # here so the harness never runs this kernel's cpu path for a simulated GPU target
                return (f"on {target} vLLM dispatches every x to its Triton route: judged as "
                        "vllm_fp8_group_quant_triton")
            if not _has_op("_C", "per_token_group_fp8_quant"):
                return (f"on {target} vLLM dispatches a contiguous x to torch.ops._C.per_token_group_fp8_quant, "
                        f"which is absent ({compiled_absent() or 'not registered'}); vllm_fp8_group_quant_triton "
                        "judges its Triton route")
        if not torch.cuda.is_available() and not interpreting():
            return "no GPU and TRITON_INTERPRET is off: vLLM's Triton kernel cannot run"
        return None

    def run_mode(self, target):
        return "interpreter" if not torch.cuda.is_available() else "device"

    def numerics(self, config, M=None):
        return Numerics(zero_group_policy="triton", fp8_scale="reciprocal")

    def launch(self, config, M, target):
        """What vLLM's Triton route launches for M tokens on `target`, read off a real call (launch recorded, not
        run): path "per_token_group_quant". None for the dispatching kernel on CUDA / ROCm targets (vLLM's compiled
        op, not Triton code) and where the gate refuses."""
        if self.can_implement(config, target) is not None:
            return None
        if self.route == "dispatch" and target.is_gpu:
            return None
        key = (config, M, str(target))
        if key not in self._launches:
            from conformance.core.kernel import RunContext
            from conformance.core.launch_capture import capture_programs

            ctx = RunContext(target, "cpu", "interpreter")
            p = self.load(config, ctx)
            x = torch.zeros((M, config.hidden), dtype=torch_dtype(config.dtype))
            progs = capture_programs(lambda: self.apply(p, x, ctx))
            tiles = {n: v for q in progs for n, v in q.constexprs if n.isupper()}
            self._launches[key] = Launch("per_token_group_quant", tiles,
                                         key=(self.name, tuple(q.key for q in progs)), programs=progs)
        return self._launches[key]

    def load(self, config, ctx=None) -> VllmFp8Params:
        from conformance.api import FP8_DTYPES

        mod, fn = FP8_LIMITS
        with vllm_platform.as_target(_target(ctx)):
            _, fp8_max = getattr(importlib.import_module(mod), fn)()
        return VllmFp8Params(config.group_size, config.fp8_dtype, FP8_DTYPES[config.fp8_dtype], float(fp8_max),
                             1e-10, config.ue8m0, config.column_major_scales)

    def _x(self, x):
        return x.contiguous()

    def apply(self, p: VllmFp8Params, x, ctx=None):
        kw = {"use_ue8m0": p.ue8m0} if self.takes_ue8m0 else {}
        with vllm_platform.as_target(_target(ctx)):
            return self.fn(self._x(x), p.group_size, eps=p.eps, dtype=p.torch_fp8,
                           column_major_scales=p.column_major_scales, **kw)


class VllmFp8GroupQuantTriton(VllmFp8GroupQuant):
    """The same function on an x whose rows are padded (stride(0) = H + FP8_ROW_PAD, groups contiguous): vLLM's own
    dispatch sends a non-contiguous x to its Triton kernel on every platform, so this is the route its Triton code
    takes on CUDA/ROCm (and every call takes on a CPU platform)."""

    name = "vllm_fp8_group_quant_triton"
    route = "triton"

    def _x(self, x):
        # a 1-row view is contiguous whatever its row stride (vLLM would send it to its compiled op): a 1-row x is
        # quantized as row 0 of a 2-row padded batch (rows are independent), and row 0 of the outputs returned
        rows = max(x.shape[0], 2)
        buf = torch.empty((rows, x.shape[-1] + FP8_ROW_PAD), dtype=x.dtype, device=x.device)
        view = buf[:, : x.shape[-1]]
        view.copy_(x.expand(rows, -1) if x.shape[0] == 1 else x)
        return view

    def apply(self, p: VllmFp8Params, x, ctx=None):
        q, s = super().apply(p, x, ctx)
        if x.shape[0] != 1:
            return q, s
        # row 0's scales in a fresh (1, G) buffer, as vLLM allocates them for one row (a slice of the 2-row scales
        # keeps the batch's strides, and `.contiguous()` leaves a (1, 1) slice as it is)
        s1 = torch.empty((1, s.shape[-1]), dtype=s.dtype, device=s.device)
        s1.copy_(s[:1])
        return q[:1], s1


# ---------------------------------------------------------------------------------------------- unavailable

class VllmUnavailable(Unavailable, Kernel):
    """Registered instead of the adapters when vLLM cannot be imported: a gate-only kernel whose gate says why."""

    name = "vllm_unavailable"
    family = "w4a16"
    priority = -1000

    def run_mode(self, target):
        return "device"


REGISTERED: list[str] = []  # names this module registered (register() replaces them)
SKIPPED: dict[str, str] = {}  # vLLM kernel submodules (and the FP8 module) that failed to import, and why
UNAVAILABLE: str | None = None  # why vLLM is not adapted here, or None
FOUND: Found | None = None


def find_fp8():
    """vLLM's per_token_group_quant_fp8, from the first of FP8_MODULES that has it."""
    errors = []
    for name in FP8_MODULES:
        try:
            return getattr(importlib.import_module(name), FP8_FUNCTION)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {_why(e)}")
    raise ImportError(f"{FP8_FUNCTION} not found: " + "; ".join(errors))


def register() -> list[str]:
    """(Re-)discover the installed vLLM and register its adapters; returns the registered names."""
    global UNAVAILABLE, FOUND
    for name in REGISTERED:
        unregister_kernel(name)
    REGISTERED.clear()
    SKIPPED.clear()
    vllm_platform.reset()
    configure_triton()  # TRITON_INTERPRET must be set before vLLM defines its @triton.jit kernels
    kernels: list[Kernel] = []
    with _triton_visible_to_vllm(), vllm_platform.import_scope():
        FOUND, UNAVAILABLE = import_vllm()
        if FOUND is None:
            kernels.append(VllmUnavailable(UNAVAILABLE))
        else:
            classes, skipped = discover_kernels(FOUND)
            SKIPPED.update(skipped)
            kernels += [VllmMPLinearAdapter(cls, FOUND, PRIORITY - i) for i, cls in enumerate(classes)]
            try:
                fn = find_fp8()
                kernels += [VllmFp8GroupQuant(fn), VllmFp8GroupQuantTriton(fn)]
            except Exception as e:  # noqa: BLE001
                SKIPPED[FP8_FUNCTION] = _why(e)
    for k in kernels:
        register_kernel(k)
        REGISTERED.append(k.name)
    return list(REGISTERED)


def describe() -> str:
    """One line: the vLLM version and kernel package layout found (or why none), and what did not load."""
    if FOUND is None:
        return f"vLLM adapter: {UNAVAILABLE}"
    parts = [f"vLLM adapter: vllm {FOUND.version}, kernel package {FOUND.mp.__name__} (layout "
             f"{FOUND.layout}), {len(REGISTERED)} kernels"]
    if compiled_absent():
        parts.append(compiled_absent())
    if vllm_platform.IMPORTED_UNDER:
        parts.append(f"kernel package {vllm_platform.IMPORTED_UNDER}")
    if SKIPPED:
        parts.append("not imported: " + "; ".join(f"{k} ({v})" for k, v in sorted(SKIPPED.items())))
    return "; ".join(parts)


register()
