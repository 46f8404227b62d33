"""The kernel interface: what the suite knows about one kernel under test.

A kernel is a subclass of `Kernel` that sets `name`, `family`, `priority` and implements three methods
(`can_implement` is abstract; `load` and `apply` raise until implemented, so a gate-only kernel still
registers): `can_implement(config, target)` (the gate: pure, no hardware), `load(source)` (the family's weight
source -> the kernel's operands: a `references.checkpoint.Checkpoint` for w4a16, the layer config for
fp8_group_quant, which has no weights) and `apply(operands, x)` (the real kernel). Everything else is
optional and declared, never detected:

- `has_model` + `model(operands, x)`: a plain-torch reading of the same operands, run where `apply` cannot
  run (no device, op not built), so the load step is tested everywhere;
- `availability(target)`, `run_mode(target)`, `run_mode_for(M, K, target)`: whether and how `apply` runs here;
- `numerics(config, M)`: one `Numerics` declaration that the exact tier, the statistical bound and the
  determinism check read;
- `op` (a torch.library op handle, for contract checks) and `launch_config()` (the tiles of the last call,
  for the compile-boundary check);
- `launch(config, M, target)`: what a call with M rows launches on `target` (a `conformance.core.launch.Launch`:
  the kernel's code path, its tiles, its compile key and the JIT programs with their signatures and constexprs);
  the plan places M on its rows, the GPU grouping and the compile lane read it. Default None: not declared;
- `compile_key(case)`: what a call on the case compiles (JIT kernels), so that cases sharing a specialization
  run on one pytest-xdist worker; by default the key of `launch` for this machine's target;
- `simulated_on_device` (default False): the kernel's `apply` is Triton code that runs on any Triton backend,
  so on a GPU host a simulated target's cases (another vendor's or generation's gate and tile choice) run its
  real code on this machine's device, as the interpreter runs it on a CPU host, instead of its model.

Plugins written against the first interface keep working: the attributes they set (`deterministic`,
`exact_tier_max_k`, `zero_group_policy`, `device_inexact_reason`, the methods `dequant_dtype`,
`accumulate_dtype`, `accumulation`, `last_launch_config`, and a `model` override) are read by the default
`numerics()` / `launch_config()` / `has_model`, so they still mean what they meant.

Kernel API v2 (`api_version = 2`): the harness calls `load(source, ctx)`, `apply(operands, x, ctx)` and
`model(operands, x, ctx)` with a `RunContext` (target, device, run mode), and x on ctx.device; v1 kernels
(`api_version = 1`, the default) are called exactly as before. Call kernels through `kernel_load` /
`kernel_call`, which pick the right form. `intake` (an `Intake`) declares the checkpoint formats and tensors
a w4a16 loader takes; formats outside it are refused before `can_implement` is asked.
"""
from __future__ import annotations

import abc
import functools
from dataclasses import dataclass, replace
from typing import Any

import torch

from conformance.core.targets import Target
from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import InvalidInput, require

RUN_MODES = ("device", "interpreter", "model")
API_VERSIONS = (1, 2)
# how an fp8 group scale and q are formed: the reference's IEEE division, vLLM main's multiply by the correctly
# rounded fp32 1/fp8_max (vllm#37833; q still x / s), an approximate reciprocal (no bit-exact reference), or the
# inverse scale (torchao's blockwise-training lhs quant: i = fp8_max / amax, q = x * i, stored s = 1 / i; no
# bit-exact reference here)
FP8_SCALE_CONVENTIONS = ("divide", "reciprocal", "fast_reciprocal", "inverse")
DEQUANT_ROUNDINGS = (1, 2)
# dtypes a float zero z_f (Numerics.float_zero_dtype) may be held in: the activation dtypes
FLOAT_ZERO_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Numerics:
    """How a kernel computes, as the checks need to know it. All fields have the plain-GEMM defaults.

    dequant_dtype: the dtype weights are dequantized into (the bound's u_deq); None: the act dtype.
    accumulation: (inner_dtype, block, outer_dtype): the dot product is summed in blocks of `block`
        consecutive K-terms in inner_dtype, each block partial rounded to outer_dtype and the partials added
        in outer_dtype in any order; block None: one sum over K in inner_dtype.
    deterministic: two calls on the same operands give identical bits (checked when True).
    exact_tier_max_k: the largest K at which the output is bit-exact on exact-tier data (None: any).
    zero_group_policy: fp8 only: the scale of an all-zero group (a `references.fp8.ZERO_GROUP_POLICIES` name,
        or the kernel's own, which leaves the exact tier unjudgeable).
    device_inexact_reason: why device runs are not bit-exact (exact tier then skipped on a GPU), or None.
    fp8_scale: fp8 only: "divide" (s = amax / fp8_max, q = x / s: the reference), "reciprocal" (s = amax *
        fp32(1/fp8_max), correctly rounded constant; q = x / s), "fast_reciprocal" (approximate: statistical only) or
        "inverse" (i = fp32(fp8_max / amax) correctly rounded, q = x * i, the stored scale fp32(1 / i):
        statistical only).
    dequant_roundings: 1 (W = (q - z) * s rounded once to the dequant dtype) or 2 (GemLite's fma(q, s, round(-z*s)):
        -z*s rounded to the dequant dtype first, then one fused multiply-add rounding).
    atomics: partials are added in any order (split-K atomics): determinism is then not claimed nor checked.
    float_zero_dtype: the float-zero dequant of torch's int4pack GEMMs, W = (q - 8) * s + z_f with z_f =
        (8 - z) * s rounded to this dtype when the weight is loaded (its storage dtype), then the exact sum rounded
        once to the dequant dtype (a fused multiply-add); declared with dequant_roundings = 2 (z_f's rounding and the
        fused one). This is not (q - z) * s rounded once: z_f errs by up to u(float_zero_dtype) * |(8 - z) * s|.
        None (default): an integer zero point, as dequant_roundings describes.
    Accumulation may depend on M: `Kernel.numerics(config, M)` returns the declaration for that M.
    """

    dequant_dtype: torch.dtype | None = None
    accumulation: tuple = (torch.float32, None, torch.float32)
    deterministic: bool = True
    exact_tier_max_k: int | None = None
    zero_group_policy: str | None = None
    device_inexact_reason: str | None = None
    fp8_scale: str = "divide"
    dequant_roundings: int = 1
    atomics: bool = False
    float_zero_dtype: torch.dtype | None = None

    def __post_init__(self):
        require(self.fp8_scale in FP8_SCALE_CONVENTIONS, "Numerics.fp8_scale", self.fp8_scale,
                f"one of {FP8_SCALE_CONVENTIONS}")
        require(type(self.dequant_roundings) is int and self.dequant_roundings in DEQUANT_ROUNDINGS,
                "Numerics.dequant_roundings", self.dequant_roundings, f"one of {DEQUANT_ROUNDINGS}")
        require(isinstance(self.atomics, bool), "Numerics.atomics", self.atomics, "True or False")
        require(self.float_zero_dtype is None or self.float_zero_dtype in FLOAT_ZERO_DTYPES,
                "Numerics.float_zero_dtype", self.float_zero_dtype, f"None or one of {FLOAT_ZERO_DTYPES}")
        require(self.float_zero_dtype is None or self.dequant_roundings == 2, "Numerics.dequant_roundings",
                self.dequant_roundings, "2 when float_zero_dtype is set (z_f is rounded, then the fused sum)")
        acc = self.accumulation
        require(isinstance(acc, (tuple, list)) and len(acc) == 3, "Numerics.accumulation", acc,
                "a tuple (inner_dtype, block or None, outer_dtype)")
        object.__setattr__(self, "accumulation", tuple(acc))  # frozen: a list declaration is kept as a tuple

    @property
    def accumulate_dtype(self) -> torch.dtype:
        """The inner (per-block) accumulator dtype."""
        return self.accumulation[0]

    @property
    def claims_determinism(self) -> bool:
        """True when two calls must give identical bits: declared deterministic and no atomics."""
        return self.deterministic and not self.atomics

    def replace(self, **changes) -> Numerics:
        return replace(self, **changes)


@dataclass(frozen=True)
class RunContext:
    """Where and how one kernel call runs (API v2): the target judged, the torch device operands and x live on,
    and the run mode ('device', 'interpreter' or 'model')."""

    target: Target
    device: str
    mode: str

    def __post_init__(self):
        require(self.mode in RUN_MODES, "RunContext.mode", self.mode, f"one of {RUN_MODES}")

    @classmethod
    def here(cls, kernel: Kernel, target: Target | None = None, mode: str | None = None) -> RunContext:
        """The context of a call on this machine: target default detected, mode default kernel.run_mode(target),
        device the CPU for a model run, else the device kernels run on here."""
        from conformance.core.runtime import kernel_device
        from conformance.core.targets import detect_target

        target = detect_target() if target is None else target
        mode = kernel.run_mode(target) if mode is None else mode
        return cls(target, "cpu" if mode == "model" else kernel_device(), mode)


@dataclass(frozen=True)
class Intake:
    """What a w4a16 kernel's `load` takes: the checkpoint formats, and the checkpoint tensor names it reads
    (None: every tensor the format carries). The suite feeds it only those."""

    formats: tuple = CHECKPOINT_FORMATS
    tensors: tuple | None = None

    def __post_init__(self):
        fmts = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        bad = [f for f in fmts if f not in CHECKPOINT_FORMATS]
        require(fmts and not bad, "Intake.formats", self.formats,
                f"a non-empty tuple of {list(CHECKPOINT_FORMATS)}")
        object.__setattr__(self, "formats", fmts)
        if self.tensors is not None:
            names = (self.tensors,) if isinstance(self.tensors, str) else tuple(self.tensors)
            require(names and all(isinstance(n, str) for n in names), "Intake.tensors", self.tensors,
                    "None or a non-empty tuple of checkpoint tensor names")
            object.__setattr__(self, "tensors", names)

    def refusal(self, config) -> str | None:
        """Why a config's checkpoint format is not fed to this loader (None: it is, or the config has no format)."""
        fmt = getattr(config, "format", None)
        if fmt is None or fmt in self.formats:
            return None
        return f"format={fmt!r} not in the kernel's intake (allowed: {', '.join(self.formats)})"

    def restrict(self, checkpoint):
        """The checkpoint holding only the declared tensors (all of them when `tensors` is None)."""
        if self.tensors is None:
            return checkpoint
        return replace(checkpoint, tensors={k: v for k, v in checkpoint.tensors.items() if k in self.tensors})


class Kernel(abc.ABC):
    """One kernel under test; see the module docstring for the contract of each member."""

    name: str = ""
    family: str = ""
    priority: int = 0  # higher is tried first by selection
    op: Any = None  # the torch.library op handle, for kernels exposed as custom ops
    has_model: bool = False  # True when `model` is implemented
    gate_note: str = ""  # optional free text shown beside the gate summary derived from can_implement
    api_version: int = 1  # 2: load(source, ctx), apply(operands, x, ctx), model(operands, x, ctx)
    intake: Intake = Intake()  # checkpoint formats / tensors the loader takes (w4a16); a tuple of formats is read
    # fp8_group_quant: True when the kernel is a quant route a model layer emits after RMSNorm; the fusion check
    # (conformance/checks/fusion.py) then requires the compiler's RMSNorm + quant pass to fuse it
    fusion_route: bool = False
    # True: on a GPU host, cases of a simulated target run `apply` on this device (its real Triton code with that
    # target's gate and tiles; the context carries the simulated target) instead of the model (harness._execution)
    simulated_on_device: bool = False

    # v1 declarations, read by the default numerics(); new kernels override numerics() instead
    deterministic: bool = True
    exact_tier_max_k: int | None = None
    zero_group_policy: str | None = None
    device_inexact_reason: str | None = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        # v1 plugins implemented `model` without declaring it; a class that defines `model` and says nothing
        # about `has_model` declares it by doing so (a subclass can still set has_model = False)
        if "model" in cls.__dict__ and "has_model" not in cls.__dict__:
            cls.has_model = True
        # v1 name of the free-text gate line
        if "gate_summary" in cls.__dict__ and "gate_note" not in cls.__dict__:
            cls.gate_note = cls.__dict__["gate_summary"]
        if cls.api_version not in API_VERSIONS:
            raise InvalidInput(f"{cls.__name__}.api_version", cls.api_version, f"one of {API_VERSIONS}")
        if "intake" in cls.__dict__ and not isinstance(cls.intake, Intake):
            cls.intake = Intake(formats=cls.intake)  # shorthand: intake = ("gptq_v2", "awq")
        # the intake is part of the gate: every consumer of can_implement (strategies, harness, select,
        # coverage, list) sees formats outside it refused, with the intake named as the reason
        gate = cls.__dict__.get("can_implement")
        if gate is not None and not getattr(gate, "__isabstractmethod__", False) \
                and not getattr(gate, "_intake_checked", False):
            @functools.wraps(gate)
            def can_implement(self, config, target, _gate=gate):
                return self.intake.refusal(config) or _gate(self, config, target)

            can_implement._intake_checked = True
            cls.can_implement = can_implement

    # ---- the three abstract methods ----------------------------------------------------------------------
    @abc.abstractmethod
    def can_implement(self, config, target: Target) -> str | None:
        """None if this kernel serves `config` on `target`, else the refusal reason. Pure: no hardware."""

    # load and apply are abstract in the contract but not enforced at class creation: a gate-only kernel (one
    # that is listed, selected and swept for coverage but never run) was a valid v1 plugin and stays one
    def load(self, source, config=None):
        """The family's weight source (w4a16: a Checkpoint; fp8_group_quant: the config) -> operands.
        API v2: `load(source, ctx)` with a RunContext in place of the optional config."""
        raise NotImplementedError(f"kernel {self.name!r} implements no load (a gate-only kernel)")

    def apply(self, operands, x: torch.Tensor, *ctx):
        """Run the real kernel on operands from `load` (API v2: `apply(operands, x, ctx)`, x on ctx.device)."""
        raise NotImplementedError(f"kernel {self.name!r} implements no apply (a gate-only kernel)")

    # ---- optional, declared --------------------------------------------------------------------------------
    def model(self, operands, x: torch.Tensor, *ctx):
        """A plain-torch reading of the same operands (API v2: `model(operands, x, ctx)`); implement it."""
        raise NotImplementedError(f"kernel {self.name!r} declares no model (has_model = False)")

    def availability(self, target: Target) -> str | None:
        """None if `apply` can run here for `target`, else why not (device absent, op not built)."""
        return None

    def run_mode(self, target: Target) -> str:
        """How `apply` would run here: 'device', 'interpreter' (Triton on CPU) or 'model'."""
        if self.availability(target) is not None:
            return "model"
        return "device" if target.is_gpu else "interpreter"

    def run_mode_for(self, M: int, K: int, target: Target) -> str:
        """How one call with M rows and reduction length K runs (kernels that dispatch on the runtime shape to
        code that runs differently here, e.g. a HIP path beside a Triton one, override it)."""
        return self.run_mode(target)

    def numerics(self, config, M: int | None = None) -> Numerics:
        """The numerics of a call on `config` with M rows (None: any M). Default: read the v1 declarations.
        config None asks for the config-independent fields only (determinism, policies): dtypes stay default.
        Override it to declare the v2 fields or an accumulation that depends on M (callers judging a call pass M)."""
        if config is None:
            return Numerics(deterministic=self.deterministic, exact_tier_max_k=self.exact_tier_max_k,
                            zero_group_policy=self.zero_group_policy, device_inexact_reason=self.device_inexact_reason)
        acc = self.accumulation(config)
        return Numerics(dequant_dtype=self.dequant_dtype(config), accumulation=tuple(acc),
                        deterministic=self.deterministic, exact_tier_max_k=self.exact_tier_max_k,
                        zero_group_policy=self.zero_group_policy, device_inexact_reason=self.device_inexact_reason)

    def launch(self, config, M: int, target: Target):
        """What a call on `config` with M rows launches on `target`: a `conformance.core.launch.Launch` (path,
        tiles, compile key, JIT programs, selection row), or None when the kernel does not say (the default:
        plugins written before this hook) or does not serve the config there. Pure: no hardware, no allocation;
        `target` may be any named target (the compile lane asks for targets this machine is not), and the cpu
        target means the interpreter's choice. One answer for the plan (its M rows), the GPU grouping
        (`compile_key`) and the compile lane (`python -m conformance compile`)."""
        return None

    def compile_key(self, case) -> Any:
        """What a call on `case` compiles, for a JIT kernel: equal keys share one compiled specialization (for
        Triton: every constexpr and the tile the case's M picks, the dtypes of the pointers, and for each int
        argument whether it is 1, divisible by 16 or neither: `triton_int_key`). Any hashable value with a stable
        repr. The pytest plugin puts the CI plan's cases with equal keys in one pytest-xdist group, so under
        `--dist loadgroup` one worker compiles each specialization once. Default: the key of `launch(case's config,
        M, this machine's target)` where kernels compile here (a GPU), else None: no grouping (kernels that compile
        nothing, the interpreter, and plugins that declare no launch)."""
        from conformance.core.runtime import kernel_device
        from conformance.core.targets import detect_target

        if type(self).launch is Kernel.launch or kernel_device() == "cpu":
            return None  # no launch declared (a plugin written before it): nothing to ask, the case is not read
        launch = self.launch(case.config(), case_rows(case), detect_target())
        return None if launch is None else launch.key

    def launch_config(self) -> dict | None:
        """The launch (tiles, path) of the most recent `apply`, for the compile-boundary check; None: not reported."""
        legacy = getattr(self, "last_launch_config", None)  # v1: a method or a property
        legacy = legacy() if callable(legacy) else legacy
        return None if legacy is None else dict(legacy)

    # ---- v1 numerics methods (still read by the default numerics()) ------------------------------------------
    def dequant_dtype(self, config) -> torch.dtype:
        """v1: the dtype the kernel dequantizes weights into. Default: the act dtype (fp32 for fp32 input)."""
        from conformance.core.dtypes import torch_dtype

        return torch_dtype(config.dtype)

    def accumulate_dtype(self, config) -> torch.dtype:
        """v1: the dtype of the kernel's dot-product accumulator."""
        return torch.float32

    def accumulation(self, config) -> tuple:
        """v1: (inner_dtype, block, outer_dtype); default one sum in accumulate_dtype."""
        acc = self.accumulate_dtype(config)
        return acc, None, acc

    def __repr__(self) -> str:
        return f"<kernel {self.name} family={self.family} priority={self.priority}>"


def case_rows(case) -> int | None:
    """The row count of one call on `case` (W4A16's M, FP8's tokens): the M that `Kernel.launch` takes."""
    m = getattr(case, "M", None)
    return getattr(case, "tokens", None) if m is None else m


def triton_int_key(n: int) -> int | str:
    """How Triton specializes an int kernel argument: 1, 16 (divisible by 16) or "n" (anything else), for
    `Kernel.compile_key`."""
    return 1 if n == 1 else 16 if n % 16 == 0 else "n"


def kernel_load(kernel: Kernel, source, ctx: RunContext | None = None, *v1_args):
    """Operands from `source`: v2 `kernel.load(source, ctx)` (ctx default: RunContext.here(kernel)); v1
    `kernel.load(source, *v1_args)`, the call v1 kernels always got."""
    if kernel.api_version == 1:
        return kernel.load(source, *v1_args)
    return kernel.load(source, RunContext.here(kernel) if ctx is None else ctx)


def kernel_call(kernel: Kernel, operands, x, ctx: RunContext | None = None, model: bool = False):
    """One call of apply (or model): v2 with ctx (default: RunContext.here(kernel)), v1 as (operands, x)."""
    fn = kernel.model if model else kernel.apply
    if kernel.api_version == 1:
        return fn(operands, x)
    if ctx is None:
        ctx = RunContext.here(kernel, mode="model" if model else None)
    return fn(operands, x, ctx)
