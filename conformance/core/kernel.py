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
  for the compile-boundary check).

Plugins written against the first interface keep working: the attributes they set (`deterministic`,
`exact_tier_max_k`, `zero_group_policy`, `device_inexact_reason`, the methods `dequant_dtype`,
`accumulate_dtype`, `accumulation`, `last_launch_config`, and a `model` override) are read by the default
`numerics()` / `launch_config()` / `has_model`, so they still mean what they meant.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from typing import Any

import torch

from conformance.core.targets import Target

RUN_MODES = ("device", "interpreter", "model")


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
    """

    dequant_dtype: torch.dtype | None = None
    accumulation: tuple = (torch.float32, None, torch.float32)
    deterministic: bool = True
    exact_tier_max_k: int | None = None
    zero_group_policy: str | None = None
    device_inexact_reason: str | None = None

    @property
    def accumulate_dtype(self) -> torch.dtype:
        """The inner (per-block) accumulator dtype."""
        return self.accumulation[0]

    def replace(self, **changes) -> Numerics:
        return replace(self, **changes)


class Kernel(abc.ABC):
    """One kernel under test; see the module docstring for the contract of each member."""

    name: str = ""
    family: str = ""
    priority: int = 0  # higher is tried first by selection
    op: Any = None  # the torch.library op handle, for kernels exposed as custom ops
    has_model: bool = False  # True when `model` is implemented
    gate_note: str = ""  # optional free text shown beside the gate summary derived from can_implement

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

    # ---- the three abstract methods ----------------------------------------------------------------------
    @abc.abstractmethod
    def can_implement(self, config, target: Target) -> str | None:
        """None if this kernel serves `config` on `target`, else the refusal reason. Pure: no hardware."""

    # load and apply are abstract in the contract but not enforced at class creation: a gate-only kernel (one
    # that is listed, selected and swept for coverage but never run) was a valid v1 plugin and stays one
    def load(self, source, config=None):
        """The family's weight source (w4a16: a Checkpoint; fp8_group_quant: the config) -> operands."""
        raise NotImplementedError(f"kernel {self.name!r} implements no load (a gate-only kernel)")

    def apply(self, operands, x: torch.Tensor):
        """Run the real kernel on operands from `load`."""
        raise NotImplementedError(f"kernel {self.name!r} implements no apply (a gate-only kernel)")

    # ---- optional, declared --------------------------------------------------------------------------------
    def model(self, operands, x: torch.Tensor):
        """A plain-torch reading of the same operands; implement it and set `has_model = True`."""
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
        config None asks for the config-independent fields only (determinism, policies): dtypes stay default."""
        if config is None:
            return Numerics(deterministic=self.deterministic, exact_tier_max_k=self.exact_tier_max_k,
                            zero_group_policy=self.zero_group_policy, device_inexact_reason=self.device_inexact_reason)
        acc = self.accumulation(config)
        return Numerics(dequant_dtype=self.dequant_dtype(config), accumulation=tuple(acc),
                        deterministic=self.deterministic, exact_tier_max_k=self.exact_tier_max_k,
                        zero_group_policy=self.zero_group_policy, device_inexact_reason=self.device_inexact_reason)

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
