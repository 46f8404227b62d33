"""How the harness runs a kernel for a family's `run`: device, NaN-filled and guarded allocations, determinism,
tolerance.

Families sit below the checks (they may not import them), so the harness hands each `Family.run` one
`Execution`: everything about calling the kernel and the tolerance model the family's comparison uses.

Guard bands (`guarded_allocations`): while the kernel runs, torch.empty / empty_like / empty_strided /
Tensor.new_empty return views into a larger buffer with GUARD_BYTES of poison before and after (NaN for floating
dtypes, 0x5A bytes otherwise). After the call a changed band byte raises OutOfBoundsWrite, which the harness
turns into a FAIL verdict whose detail says how many elements past the end (or before the start) were written.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from conformance.checks import guard, tolerance
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
    _deterministic(True, warn_only=True)
    tud.fill_uninitialized_memory = True
    try:
        yield
    finally:
        tud.fill_uninitialized_memory = prev_fill
        _deterministic(prev_det, warn_only=prev_warn)


def _deterministic(mode: bool, *, warn_only: bool) -> None:
    """torch.use_deterministic_algorithms without its `import torch._inductor.config` (about 2.3 CPU s, once per
    process: most of a repro's cost): the ATen flag the allocator's NaN fill needs, plus inductor's own flag when
    inductor is already loaded (nothing compiles here otherwise)."""
    import sys

    cfg = sys.modules.get("torch._inductor.config")
    if cfg is not None:
        cfg.deterministic = mode
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


GUARD_BYTES = 512  # per side: a multiple of 128 (and of the CUDA caching allocator's 512-byte granule), so a
# guarded allocation starts exactly as aligned as a plain one
INT_POISON = 0x5A  # band byte of non-floating dtypes (floating ones get NaN)


class OutOfBoundsWrite(Exception):
    """The kernel wrote into a guard band: a FAIL verdict (the harness's detail is this message), not an error."""


@dataclass
class _Guarded:
    buf: torch.Tensor  # band + (elements the view spans) + band elements
    band: int  # elements per band
    poison: torch.Tensor  # one band's bytes (uint8, on the buffer's device)
    what: str  # dtype and shape, for the detail


def _poison(dtype: torch.dtype, n: int, device) -> torch.Tensor:
    """n elements' worth of band bytes: NaN for floating (and complex) dtypes, INT_POISON bytes otherwise."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.full((n,), float("nan"), dtype=torch.float32).to(dtype).view(torch.uint8).to(device)
    return torch.full((n * dtype.itemsize,), INT_POISON, dtype=torch.uint8, device=device)


def _changed(rec: _Guarded) -> tuple[torch.Tensor, torch.Tensor]:
    """Per band element, whether any of its bytes changed: (before [band], after [band])."""
    u8 = rec.buf.view(torch.uint8)
    nb = rec.band * rec.buf.element_size()
    per = rec.buf.element_size()
    before = (u8[:nb] != rec.poison).reshape(rec.band, per).any(1).cpu()
    after = (u8[u8.numel() - nb:] != rec.poison).reshape(rec.band, per).any(1).cpu()
    return before, after


def band_violation(rec: _Guarded) -> str | None:
    """The detail line for a guarded allocation whose bands changed ("wrote past the end of an output allocation:
    2 elements after the end, first at +0"; +0 is the element right after the last one, -1 the one right before
    the first), or None."""
    before, after = _changed(rec)
    if bool(after.any()):
        first = int(after.nonzero()[0])
        return (f"wrote past the end of an output allocation: {int(after.sum())} elements after the end, first at "
                f"+{first} ({rec.what})")
    if bool(before.any()):
        first = rec.band - int(before.nonzero()[-1])
        return (f"wrote before the start of an output allocation: {int(before.sum())} elements before the start, "
                f"first at -{first} ({rec.what})")
    return None


def _size(args, kwargs) -> tuple:
    s = kwargs.pop("size", None)
    if s is None:
        s = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    return tuple(int(v) for v in s)


@contextlib.contextmanager
def guarded_allocations():
    """torch.empty, empty_like, empty_strided and Tensor.new_empty return guarded views inside (strided, non-empty,
    not on meta, no out= / pin_memory / requires_grad: those fall through unguarded); on a normal exit a changed
    band raises OutOfBoundsWrite. The originals are restored either way."""
    orig = {"empty": torch.empty, "empty_like": torch.empty_like, "empty_strided": torch.empty_strided,
            "new_empty": torch.Tensor.new_empty}
    records: list[_Guarded] = []

    def guarded(size, stride, dtype, device):
        band = GUARD_BYTES // dtype.itemsize
        extent = 1 + sum((n - 1) * st for n, st in zip(size, stride))
        buf = orig["empty"](band + extent + band, dtype=dtype, device=device)
        poison = _poison(dtype, band, buf.device)
        u8 = buf.view(torch.uint8)
        u8[:poison.numel()] = poison
        u8[u8.numel() - poison.numel():] = poison
        records.append(_Guarded(buf, band, poison, f"{dtype} {list(size)}"))
        return buf.as_strided(size, stride, band)

    def plain(kwargs, device) -> bool:
        # out=, pin_memory=True, requires_grad=True, names=...: not guarded (requires_grad=False etc. are fine)
        extra = {k for k, v in kwargs.items() if k not in ("layout", "memory_format") and v is not None
                 and v is not False}
        return (not extra and kwargs.get("layout", torch.strided) == torch.strided
                and torch.device(device).type != "meta")

    def contiguous_strides(size) -> tuple:
        return orig["empty"](size, device="meta").stride() if size else ()

    def empty(*args, **kwargs):
        kw = dict(kwargs)
        size = _size(args, kw)
        fmt = kw.pop("memory_format", torch.contiguous_format)
        dtype, device = kw.pop("dtype", None) or torch.get_default_dtype(), kw.pop("device", None)
        device = torch.get_default_device() if device is None else device
        if fmt != torch.contiguous_format or not plain(kw, device) or 0 in size:
            return orig["empty"](*args, **kwargs)
        return guarded(size, contiguous_strides(size), dtype, device)

    def empty_strided(size, stride, **kwargs):
        kw = dict(kwargs)
        dtype, device = kw.pop("dtype", None) or torch.get_default_dtype(), kw.pop("device", None)
        device = torch.get_default_device() if device is None else device
        size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
        if not plain(kw, device) or 0 in size:
            return orig["empty_strided"](size, stride, **kwargs)
        return guarded(size, stride, dtype, device)

    def empty_like(t, **kwargs):
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.layout != torch.strided:
            return orig["empty_like"](t, **kwargs)
        kw = dict(kwargs)
        dtype, device = kw.pop("dtype", None) or t.dtype, kw.pop("device", None) or t.device
        if not plain(kw, device):
            return orig["empty_like"](t, **kwargs)
        meta = orig["empty_like"](t, dtype=dtype, device="meta", memory_format=kw.get("memory_format",
                                                                                        torch.preserve_format))
        return guarded(tuple(meta.shape), meta.stride(), dtype, device)

    def new_empty(self, *args, **kwargs):
        kw = dict(kwargs)
        size = _size(args, kw)
        dtype, device = kw.pop("dtype", None) or self.dtype, kw.pop("device", None) or self.device
        if not plain(kw, device) or 0 in size:
            return orig["new_empty"](self, *args, **kwargs)
        return guarded(size, contiguous_strides(size), dtype, device)

    torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty = (empty, empty_like, empty_strided,
                                                                                  new_empty)
    try:
        yield records
    finally:
        torch.empty, torch.empty_like, torch.empty_strided = orig["empty"], orig["empty_like"], orig["empty_strided"]
        torch.Tensor.new_empty = orig["new_empty"]
    if any(r.buf.is_cuda for r in records):
        torch.cuda.synchronize()  # kernels run asynchronously: their writes must land before the bands are read
    for rec in records:
        problem = band_violation(rec)
        if problem is not None:
            raise OutOfBoundsWrite(problem)


class KernelOutputError(TypeError):
    """The kernel returned something that is not a tensor with data (None, a number, a meta tensor): the case's
    error, said in one line instead of the AttributeError reading it would raise."""


def to_cpu(out):
    """The output (a tensor or a tuple/list of them) detached on the CPU; anything else raises KernelOutputError."""
    if isinstance(out, (tuple, list)):
        return type(out)(to_cpu(o) for o in out)
    if not isinstance(out, torch.Tensor):
        raise KernelOutputError(f"the kernel returned {type(out).__name__} ({str(out)[:60]}); allowed: a "
                                "torch.Tensor (or a tuple of them)")
    if out.device.type == "meta":
        raise KernelOutputError(f"the kernel returned a tensor on the meta device ({out.dtype} {list(out.shape)}: "
                                "no data); allowed: a tensor on the device it ran on, or the CPU")
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
    def reference_device(self) -> str:
        """Where a family computes the fp64 reference and the tolerance model's products: the GPU the kernel runs on,
        else the CPU. The same fp64 operations give the same values there (the exact tier's sums are exact in any
        order, each cast rounds once the same way; tests/unit/test_reference_device.py compares both on a GPU),
        and they cost milliseconds there instead of about a second of one host core per statistical case at
        M = N = K = 1024, with 16 workers sharing the host."""
        return self.device

    @property
    def ctx(self) -> RunContext:
        """The RunContext an API v2 kernel receives: target, device, run mode."""
        from conformance.core.targets import detect_target

        return RunContext(detect_target() if self.target is None else self.target, self.device, self.mode)

    def load(self, source, *v1_args):
        """The kernel's load: v2 load(source, ctx); v1 load(source, *v1_args), as v1 kernels were always called;
        one guarded call (conformance.checks.guard: the time limit, a stopped kernel refused at once)."""
        with guard.guarded(self.kernel, "load", mode=self.mode):
            return kernel_load(self.kernel, source, self.ctx if self.kernel.api_version != 1 else None, *v1_args)

    def call(self, operands, x):
        """The kernel's apply (or model, in model mode) under NaN-filled, guarded allocations (a write into a guard
        band raises OutOfBoundsWrite), as one guarded call (conformance.checks.guard: the per-case time limit, past
        it CaseTimeout; a kernel stopped in this run, by an earlier hang or crashes, refused at once); the raw
        output."""
        ctx = self.ctx if self.kernel.api_version != 1 else None
        what = "model" if self.mode == "model" else "apply"
        with nan_filled_allocations(), guarded_allocations(), guard.guarded(self.kernel, what, mode=self.mode):
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
