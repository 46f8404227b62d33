"""The one registry of broken kernels (the proof of power, docs/proof-of-power.md): name -> class, base kernel,
the bug in one line, and the check that must kill it.

Numeric broken kernels (`kill == "ci_plan"`) must FAIL (a wrong answer, never an error) on a row of the CI plan
(conformance.cases.plan.ci_plan); contract mutants (`kill` = a contract check name of
conformance/checks/contracts.py CONTRACT_CHECKS) must fail that check. Each module is a conformance plugin; the
helper's own broken kernel (tests/unit/broken_accumulation.py) joins when that file exists.

    load() -> {name: Broken}   load every module as a plugin and (re-)register its kernels; call unload() after
    unload()                   unregister them all (other suites must never parametrize over them)
    contract_check(check, kernel) -> fn()   the contract check named `check`, ready to run on a kernel
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass

from conformance.core import registry

# the plugin modules, by kind (each registers its broken kernels on import)
MODULES = ("tests.unit.broken_kernels", "tests.unit.broken_layouts", "tests.unit.broken_actorder",
           "tests.unit.broken_tiling", "tests.unit.broken_paths", "tests.unit.broken_fp8",
           "tests.unit.broken_contract_kernels", "tests.unit.broken_contracts")
OPTIONAL_MODULES = ("tests.unit.broken_accumulation",)  # included when the file exists
CI_PLAN = "ci_plan"


EVERY_PATH = "every"  # a bug that every path of the kernel reads (the load step, a shared helper)


@dataclass(frozen=True)
class Broken:
    """One broken kernel: its registered `name`, class, plugin `module`, the shipped `base` kernel it is a copy of,
    its one `bug`, `kill`: "ci_plan" (numeric) or the contract check that must fail it, and `path`: the one path
    of the base kernel's launch the bug breaks (its class's `path`; "gemv" covers "gemv+splitk"), else "every";
    `formats` / `dtypes`: the checkpoint formats / act dtypes it breaks there (its class's; None: every one)."""

    name: str
    cls: type
    module: str
    base: str
    bug: str
    kill: str
    path: str = EVERY_PATH
    formats: tuple | None = None
    dtypes: tuple | None = None

    @property
    def numeric(self) -> bool:
        return self.kill == CI_PLAN

    def breaks(self, path: str | None) -> bool:
        """Whether a case on `path` (a launch path of the base kernel) runs the bug: every path, or the broken one
        and its "+" forms (the same program, then another step)."""
        return self.path == EVERY_PATH or (path is not None and path.split("+")[0] == self.path)

    @property
    def confined(self) -> bool:
        """Whether the bug is confined to one path, format or dtype (a hunt may leave out the rows it cannot
        reach: tests/conformance/test_proof_of_power.py checks the confinement on the kernel itself)."""
        return self.path != EVERY_PATH or self.formats is not None or self.dtypes is not None

    def reaches(self, row) -> bool:
        """Whether a plan row (conformance.cases.plan.PlanRow) runs the bug: its path, format and dtype."""
        c = row.case
        return self.breaks(row.path) and (self.formats is None or getattr(c, "format", None) in self.formats) and (
            self.dtypes is None or c.dtype in self.dtypes)


def modules() -> tuple[str, ...]:
    """MODULES plus the optional ones whose file exists."""
    return MODULES + tuple(m for m in OPTIONAL_MODULES if importlib.util.find_spec(m) is not None)


def _kernel_classes(mod) -> list[type]:
    """The registrable kernel classes a module defines (its own, named)."""
    return [c for _, c in inspect.getmembers(mod, inspect.isclass)
            if c.__module__ == mod.__name__ and issubclass(c, registry.Kernel) and "name" in c.__dict__]


def _register(mod) -> None:
    for fn in ("register_all", "register"):  # broken_kernels.py: register_all; broken_accumulation.py: register
        if callable(getattr(mod, fn, None)):
            getattr(mod, fn)()
            return
    for cls in _kernel_classes(mod):
        registry.register_kernel(cls)


def _base(cls: type) -> str:
    """The built-in kernel a broken class is a copy of: its nearest ancestor registered by conformance_kernels."""
    builtin = {k.name for k in registry.all_kernels() if registry.kernel_plugin(k.name) is None}
    for b in cls.__mro__[1:]:
        name = b.__dict__.get("name")
        if name in builtin:
            return name
    raise AssertionError(f"{cls.__name__}: no built-in kernel among its ancestors")


def _bug(cls: type) -> str:
    """The class's `bug` line, else its docstring's first sentence without the "BUG:" tag."""
    bug = cls.__dict__.get("bug") or (inspect.getdoc(cls) or "").split(". ")[0].removeprefix("BUG: ").rstrip(".")
    return " ".join(bug.split())


def load() -> dict[str, Broken]:
    """Load every broken-kernel module as a plugin, (re-)register its kernels, and return the registry."""
    registry.load_all()
    from tests.unit.broken_contracts import CONTRACT_BUGS

    out = {}
    for m in modules():
        registry.load_plugin(m)
        mod = importlib.import_module(m)
        _register(mod)
        for cls in _kernel_classes(mod):
            name = cls.__dict__["name"]
            module, bug, kill = CONTRACT_BUGS.get(name, (m, _bug(cls), CI_PLAN))
            out[name] = Broken(name, cls, module, _base(cls), bug, kill, getattr(cls, "path", EVERY_PATH),
                               getattr(cls, "formats", None), getattr(cls, "dtypes", None))
    return out


def unload() -> None:
    """Unregister every broken kernel load() registered."""
    for m in modules():
        mod = importlib.import_module(m)
        for cls in _kernel_classes(mod):
            registry.unregister_kernel(cls.__dict__["name"])


# the sample a contract check runs on (conformance.checks.contracts.build_sample), and the fusion check's layer
CONTRACT_SPEC = {"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
                 "act_order": False, "format": "gptq_v2", "seed": 2}


def contract_check(check: str, kernel):
    """fn() running the contract check `check` (a name of contracts.CONTRACT_CHECKS) on `kernel`; it raises
    ContractFailure when the contract is broken. fusion: the RMSNorm + FP8 quant layer routed through the kernel."""
    import torch

    from conformance.checks import contracts, fusion

    if check == "fusion":
        from conformance.checks.quant_layer import RmsNormQuantLayer
        from conformance.families.config import Fp8QuantConfig

        cfg = Fp8QuantConfig(group_size=64, dtype="bfloat16", hidden=256)
        layer = RmsNormQuantLayer(cfg, torch.ones(256, dtype=torch.bfloat16), 1e-6, "triton",
                                  kernel_override=kernel.name)
        x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        return lambda: fusion.check_fusion(layer, x)
    checks = {"fake_vs_real": contracts.check_fake_vs_real, "make_fx": contracts.check_make_fx,
              "opcheck": contracts.check_opcheck, "compile_boundary": contracts.check_compile_boundary}
    assert check in checks, f"contract check {check!r}: allowed {sorted(checks)} and 'fusion'"
    if check == "compile_boundary":
        contracts.inductor_dirs()
    return lambda: checks[check](kernel, contracts.build_sample(kernel, CONTRACT_SPEC))
