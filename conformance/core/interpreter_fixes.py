"""Test-time fixes for numeric bugs of the Triton 3.9.0 interpreter (TRITON_INTERPRET=1), so that a
kernel test run on a CPU fails only for the kernel's own bugs. Kernel sources stay unchanged.

What is wrong upstream (triton 3.9.0, triton/runtime/interpreter.py, class InterpreterBuilder):
  1. `tl.dot` on bf16 operands multiplies the raw 16-bit patterns (bf16 is stored as uint16), giving
     results near 3e11. https://github.com/triton-lang/triton/issues/11584 (fix declined: "we just
     don't support it yet").
  2. Casts to bf16 truncate instead of rounding to nearest even (`cast_impl` calls `_convert_float`
     with no rounding mode); fp64 -> bf16 and int -> bf16 return integer-converted bit patterns;
     bf16 subnormals widen wrongly.
  3. Casts to fp8 (`tl.float8e4nv` = float8_e4m3fn, `tl.float8e4b8` = float8_e4m3fnuz) round ties
     away from zero, lose the mantissa carry into the exponent (126.3 -> 64, not 128) and mangle
     values below the smallest normal; fp8 NaN codes widen to +-480.
     Related: https://github.com/triton-lang/triton/issues/8322

  4. Elementwise ops on bf16 tensors (add, mul, compares, min/max, clamp, neg, exp, fma, ...) apply numpy
     to the raw uint16 patterns, so x * y on bf16 is garbage and negative values compare wrongly.

What `apply()` patches (at the builder class, so `unpatched()` can restore the originals):
  - `create_dot`: bf16 operands are widened exactly to fp32 (bits << 16) before the matmul, as the
    GPU's bf16 MMA does (products exact, fp32 accumulation).
  - `cast_impl` (behind create_fp_trunc / create_fp_ext / int<->fp casts): any cast with bf16 on one
    side is done by torch (round to nearest even).
  - `create_fp_to_fp` with round-to-nearest-even: conversions between fp16/bf16/fp32/fp64 and
    e4m3fn / e4m3fnuz are done by torch, after saturating as Triton's GPU lowering does: finite
    out-of-range values become +-max (NVIDIA `cvt.rn.satfinite`, AMD's software path); inf becomes
    +-448 for e4m3fn and NaN for e4m3fnuz (the fnuz formats have no inf); NaN stays NaN. torch alone
    differs only out of range (its e4m3fnuz cast gives NaN above 240). Kernels that clamp before
    the cast, as the FP8 group quant kernels do, never reach that difference.

  - `binary_op`, `ternary_op` (clamp), `unary_op`, `create_fma` on bf16: computed on the values in fp32
    and rounded once to bf16, as torch's CPU bf16 ops do (exact for mul and compares; add/div/fma may
    round twice where a native bf16 GPU instruction rounds once).

Not fixed here (kernels must not rely on them under the interpreter): RTZ fp8 casts, other fp8 formats,
fp8 operands of dot with NaN, NaN payload bits, and fp64/int64 sources, which torch rounds via fp32
(twice; the GPU rounds once).

Pinned to triton 3.9.0. On another version `apply()` patches nothing and warns (RuntimeWarning); the
reason is in `status()`. Doing nothing rather than raising: the builder's internals change between
releases, so patching blindly could corrupt results silently, while raising would stop every import
of the kernels package (gates, coverage, CLI) on a machine that never runs the interpreter.
CONFORMANCE_INTERPRETER_FIXES=off disables the fixes; =force applies them on an unpinned version
(after checking the methods exist).
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings

PINNED_TRITON = "3.9.0"
ENV = "CONFORMANCE_INTERPRETER_FIXES"
UPSTREAM = {
    "bf16_dot": "https://github.com/triton-lang/triton/issues/11584",
    "fp8_casts": "https://github.com/triton-lang/triton/issues/8322",
}

_lock = threading.Lock()
_originals: dict[str, object] = {}
_status: dict = {"applied": False, "reason": "apply() not called", "patches": []}

_PATCHES = (
    ("create_dot", "bf16 dot operands widened to fp32 before the matmul (triton#11584)"),
    ("cast_impl", "casts to and from bf16 done by torch, round to nearest even"),
    ("create_fp_to_fp", "fp <-> float8e4nv/float8e4b8 casts done by torch after GPU-style saturation"),
    ("binary_op", "bf16 arithmetic, min/max and compares on values (fp32, then round to nearest even)"),
    ("ternary_op", "bf16 clamp on values"),
    ("unary_op", "bf16 neg/exp/log/sqrt/floor/... on values"),
    ("create_fma", "bf16 fma on values (fp32 fma, then round)"),
)


def interpreting() -> bool:
    """True when Triton kernels run in the interpreter (TRITON_INTERPRET=1). Defined here, below
    conformance.core.runtime (which re-exports it and calls apply()), so neither module imports the other back."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def status() -> dict:
    """What was patched, on which triton, and why not if not: a plain dict for reports."""
    with _lock:
        return {**_status, "patches": list(_status["patches"]), "pinned_triton": PINNED_TRITON,
                "upstream": dict(UPSTREAM)}


def _set_status(applied: bool, reason: str, patches=()) -> dict:
    _status.update(applied=applied, reason=reason, patches=list(patches))
    return dict(_status)


def apply() -> dict:
    """Patch the interpreter builder once (idempotent); a no-op off the interpreter. Returns status()."""
    with _lock:
        if _originals:
            return dict(_status)
        mode = os.environ.get(ENV, "").strip().lower()
        if mode in ("off", "0", "no", "false"):
            return _set_status(False, f"disabled by {ENV}={mode}")
        if not interpreting():
            return _set_status(False, "not applied: Triton is not running in the interpreter (TRITON_INTERPRET unset)")
        import triton

        version = triton.__version__
        _status["triton"] = version
        if version != PINNED_TRITON and mode != "force":
            reason = (f"not applied: triton {version} is not the pinned {PINNED_TRITON}; bf16 dot, bf16 and "
                      f"fp8 casts in the interpreter may be wrong (set {ENV}=force after checking the fixes)")
            warnings.warn(reason, RuntimeWarning, stacklevel=2)
            return _set_status(False, reason)
        from triton.runtime import interpreter as interp

        builder = interp.InterpreterBuilder
        missing = [name for name, _ in _PATCHES if not callable(getattr(builder, name, None))]
        if missing:
            raise RuntimeError(f"interpreter_fixes: triton {version} InterpreterBuilder lacks {missing}; "
                               f"the fixes were written for triton {PINNED_TRITON}")
        new = _make_patches(interp)
        for name, _ in _PATCHES:
            _originals[name] = builder.__dict__[name]
            setattr(builder, name, new[name])
        forced = "" if version == PINNED_TRITON else f" (forced on unpinned triton {version})"
        return _set_status(True, "applied" + forced, [f"InterpreterBuilder.{n}: {what}" for n, what in _PATCHES])


def remove() -> None:
    """Restore the original builder methods (status says so)."""
    with _lock:
        if not _originals:
            return
        from triton.runtime import interpreter as interp

        for name, fn in _originals.items():
            setattr(interp.InterpreterBuilder, name, fn)
        _originals.clear()
        _set_status(False, "removed by remove()")


@contextlib.contextmanager
def unpatched():
    """Temporarily run the interpreter with its original (buggy) methods; for tests that show the bugs."""
    was = bool(_originals)
    remove()
    try:
        yield
    finally:
        if was:
            apply()


def _make_patches(interp):
    """Build the replacement methods, closing over the interpreter module's own helpers."""
    import numpy as np
    import torch
    import triton.language as tl

    TensorHandle = interp.TensorHandle
    get_np_dtype = interp._get_np_dtype
    rtne = interp._ir.ROUNDING_MODE.RTNE
    orig_dot = interp.InterpreterBuilder.create_dot
    orig_cast = interp.InterpreterBuilder.cast_impl
    orig_fp_to_fp = interp.InterpreterBuilder.create_fp_to_fp

    # tl dtype -> (torch dtype, numpy dtype the interpreter stores it as, torch dtype with that storage)
    torch_of = {
        tl.float16: torch.float16, tl.float32: torch.float32, tl.float64: torch.float64,
        tl.bfloat16: torch.bfloat16, tl.int8: torch.int8, tl.int16: torch.int16, tl.int32: torch.int32,
        tl.int64: torch.int64, tl.uint8: torch.uint8,
        tl.float8e4nv: torch.float8_e4m3fn, tl.float8e4b8: torch.float8_e4m3fnuz,
    }
    storage_of = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8, torch.float8_e4m3fnuz: torch.uint8}
    fp8_sat = {tl.float8e4nv: (448.0, False), tl.float8e4b8: (240.0, True)}  # (max finite, inf -> NaN)
    wide_floats = (tl.float16, tl.bfloat16, tl.float32, tl.float64)

    def to_torch(handle, tl_dtype):
        arr = np.ascontiguousarray(handle.data)
        tdt = torch_of[tl_dtype]
        if tdt in storage_of:  # stored as raw bits: reinterpret, never convert
            store = storage_of[tdt]
            arr = arr.view({torch.int16: np.int16, torch.uint8: np.uint8}[store])
            return torch.from_numpy(arr.copy()).view(tdt)
        return torch.from_numpy(arr.copy())

    def from_torch(t, tl_dtype):
        if t.dtype in storage_of:
            t = t.view(storage_of[t.dtype])
        return t.numpy().view(get_np_dtype(tl_dtype))

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a32 = to_torch(a, a.dtype.scalar).float().numpy() if a.dtype.scalar == tl.bfloat16 else a.data
            b32 = to_torch(b, b.dtype.scalar).float().numpy() if b.dtype.scalar == tl.bfloat16 else b.data
            a = TensorHandle(a32, tl.float32)
            b = TensorHandle(b32, tl.float32)
        return orig_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        s, t = src.dtype.scalar, dst_type.scalar
        if s != t and tl.bfloat16 in (s, t) and s in torch_of and t in torch_of:
            out = to_torch(src, s).to(torch_of[t])
            return TensorHandle(from_torch(out, t).reshape(np.shape(src.data)), t)
        return orig_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        s, t = src.dtype.scalar, dst_type.scalar
        if t in fp8_sat and s in wide_floats and rounding_mode in (None, rtne):
            x = to_torch(src, s).to(torch.float32)
            fmax, inf_is_nan = fp8_sat[t]
            sat = x.clamp(-fmax, fmax)  # clamp keeps NaN
            if inf_is_nan:
                sat = torch.where(x.isinf(), torch.full_like(x, float("nan")), sat)
            out = sat.to(torch_of[t])
            return TensorHandle(from_torch(out, t).reshape(np.shape(src.data)), t)
        if s in fp8_sat and t in wide_floats:  # widening is exact in torch (NaN codes stay NaN)
            out = to_torch(src, s).to(torch_of[t])
            return TensorHandle(from_torch(out, t).reshape(np.shape(src.data)), t)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    # bf16 elementwise ops: the builder applies numpy ufuncs to the uint16 storage. Compute on the values in
    # fp32 and round once to bf16 (torch's CPU bf16 ops do the same; exact for mul and compares).
    float_binary = {np.add, np.multiply, np.divide, np.fmod, np.subtract, np.minimum, np.fmin, np.maximum,
                    np.fmax, np.less, np.greater, np.less_equal, np.greater_equal, np.equal, np.not_equal}
    float_unary = {np.negative, np.cos, np.sin, np.exp, np.exp2, np.log, np.log2, np.sqrt, np.floor, np.ceil}
    orig_binary, orig_ternary = interp.InterpreterBuilder.binary_op, interp.InterpreterBuilder.ternary_op
    orig_unary, orig_fma = interp.InterpreterBuilder.unary_op, interp.InterpreterBuilder.create_fma

    def bf16_values(data):
        return (np.asarray(data).astype(np.uint32) << np.uint32(16)).view(np.float32)

    def bf16_bits(values):
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().view(np.uint16).reshape(np.shape(values))

    def is_bf16(h):
        return h.dtype.scalar == tl.bfloat16

    def binary_op(self, lhs, rhs, op):
        if is_bf16(lhs) and is_bf16(rhs) and op in float_binary:
            out = op(bf16_values(lhs.data), bf16_values(rhs.data))
            return TensorHandle(out if out.dtype == np.bool_ else bf16_bits(out), lhs.dtype.scalar)
        return orig_binary(self, lhs, rhs, op)

    def ternary_op(self, lhs, rhs, other, op):
        if op is np.clip and is_bf16(lhs) and is_bf16(rhs) and is_bf16(other):
            out = np.clip(bf16_values(lhs.data), bf16_values(rhs.data), bf16_values(other.data))
            return TensorHandle(bf16_bits(out), other.dtype.scalar)
        return orig_ternary(self, lhs, rhs, other, op)

    def unary_op(self, arg, op):
        if is_bf16(arg) and op in float_unary:
            return TensorHandle(bf16_bits(op(bf16_values(arg.data))), arg.dtype.scalar)
        return orig_unary(self, arg, op)

    def create_fma(self, x, y, z):
        if is_bf16(x) and is_bf16(y) and is_bf16(z):
            args = np.broadcast_arrays(bf16_values(x.data), bf16_values(y.data), bf16_values(z.data))
            return TensorHandle(bf16_bits(interp._interpreter.fma_fp32(*args)), z.dtype.scalar)
        return orig_fma(self, x, y, z)

    return {"create_dot": create_dot, "cast_impl": cast_impl, "create_fp_to_fp": create_fp_to_fp,
            "binary_op": binary_op, "ternary_op": ternary_op, "unary_op": unary_op, "create_fma": create_fma}
