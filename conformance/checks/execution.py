"""How the harness runs a kernel for a family's `run`: device, NaN-filled allocations, determinism, tolerance.

Families sit below the checks (they may not import them), so the harness hands each `Family.run` one
`Execution`: everything about calling the kernel and the tolerance model the family's comparison uses.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from conformance.checks import timeout, tolerance
from conformance.core.bits import bits_equal
from conformance.core.kernel import RunContext, kernel_call, kernel_load
from conformance.core.targets import Target

NOT_DETERMINISTIC = "; NOT DETERMINISTIC: two runs on the same operands differ in bits (kernel declares deterministic)"


@contextlib.contextmanager
def nan_filled_allocations():
    """torch.empty & co. return NaN-filled memory (ints: max value) inside; previous settings restored."""
    import torch.utils.deterministic as tud

    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = tud.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    tud.fill_uninitialized_memory = True
    try:
        yield
    finally:
        tud.fill_uninitialized_memory = prev_fill
        torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)


def to_cpu(out):
    """The output (a tensor or a tuple/list of them) detached on the CPU."""
    if isinstance(out, (tuple, list)):
        return type(out)(to_cpu(o) for o in out)
    return out.detach().cpu()


@dataclass
class Execution:
    """One kernel in one run mode ('device', 'interpreter' or 'model'); check_determinism: run twice when the
    kernel declares itself deterministic. `tolerance` is conformance.checks.tolerance (the error model)."""

    kernel: object
    mode: str
    check_determinism: bool = True
    target: Target | None = None  # the target judged (None: this machine's); API v2 kernels see it in ctx
    tolerance = tolerance

    @property
    def device(self) -> str:
        """Where inputs go: the CPU for a model run, else the device the kernels run on here."""
        from conformance.core.runtime import kernel_device

        return "cpu" if self.mode == "model" else kernel_device()

    @property
    def ctx(self) -> RunContext:
        """The RunContext an API v2 kernel receives: target, device, run mode."""
        from conformance.core.targets import detect_target

        return RunContext(detect_target() if self.target is None else self.target, self.device, self.mode)

    def load(self, source, *v1_args):
        """The kernel's load: v2 load(source, ctx); v1 load(source, *v1_args), as v1 kernels were always called."""
        return kernel_load(self.kernel, source, self.ctx if self.kernel.api_version != 1 else None, *v1_args)

    def call(self, operands, x):
        """The kernel's apply (or model, in model mode) under NaN-filled allocations and the per-case time limit
        (conformance.checks.timeout: past it, CaseTimeout is raised); the raw output."""
        ctx = self.ctx if self.kernel.api_version != 1 else None
        with nan_filled_allocations(), timeout.deadline():
            return kernel_call(self.kernel, operands, x, ctx, model=self.mode == "model")

    to_cpu = staticmethod(to_cpu)

    def determinism(self, operands, x, first, config=None, M=None) -> tuple[bool, str]:
        """(same, note): a second call's output equals `first` bit for bit (skipped: (True, ""))."""
        # atomics (partials added in any order) withdraw the claim even when `deterministic` is left True
        if not (self.check_determinism and self.kernel.numerics(config, M).claims_determinism):
            return True, ""
        if bits_equal(first, to_cpu(self.call(operands, x))):
            return True, ""
        return False, NOT_DETERMINISTIC
