"""Compile one `Program` (conformance.core.launch) for one GPU target with that target's own Triton backend, on any
machine: no GPU is needed (Triton's CUDA backend ships ptxas; its AMD backend carries LLVM's AMDGPU code
generator). Returns the verdict material: the compiler's error, or the binary's resources.

On a CPU host the suite runs Triton in its interpreter, so the kernel modules' @triton.jit objects (and Triton's own
library functions such as `tl.zeros`, defined when Triton was imported) are interpreter functions. `jit_view`
rebuilds a compilable JITFunction over the same Python function, with every interpreter function it names
replaced by its own view, and `_compilable_language()` does the same for Triton's language modules while one
compile runs (restored after), so the code compiled is the code the interpreter runs.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
import threading
import time
import types
from pathlib import Path

from conformance.core.launch import Program, raw_function
from conformance.core.target_limits import TargetLimits

_views: dict = {}
_lock = threading.RLock()


def _is_interpreted(v) -> bool:
    return type(v).__name__ == "InterpretedFunction"


def jit_view(fn):
    """A JITFunction over `fn`'s Python function (itself when it already is one), its globals' interpreter
    functions replaced by their views (recursively, cycles included)."""
    from triton.runtime.jit import JITFunction

    if isinstance(fn, JITFunction):
        return fn
    raw = raw_function(fn)
    with _lock:
        if raw in _views:
            return _views[raw]
        g = dict(raw.__globals__)
        new = types.FunctionType(raw.__code__, g, raw.__name__, raw.__defaults__, raw.__closure__)
        new.__qualname__, new.__module__ = raw.__qualname__, raw.__module__
        new.__annotations__, new.__kwdefaults__ = dict(raw.__annotations__), raw.__kwdefaults__
        new.__doc__ = raw.__doc__
        kw = dict(getattr(fn, "kwargs", None) or {})
        view = JITFunction(new, **{k: v for k, v in kw.items() if k in ("version", "do_not_specialize",
                                                                       "do_not_specialize_on_alignment", "debug",
                                                                       "noinline", "repr", "launch_metadata")})
        _views[raw] = view
        for name, v in list(g.items()):
            if _is_interpreted(v):
                g[name] = jit_view(v)
        return view


@contextlib.contextmanager
def _compilable_language():
    """Triton's language modules with their interpreter functions (tl.zeros, tl.sum's combine functions, ...)
    swapped for views while one compile runs; restored after."""
    import sys

    from conformance.core.runtime import pristine_language

    swapped = []
    with _lock, pristine_language():
        try:
            for name, mod in list(sys.modules.items()):
                if not name.startswith("triton.language") or mod is None:
                    continue
                for attr, v in list(vars(mod).items()):
                    if _is_interpreted(v):
                        swapped.append((mod, attr, v))
                        setattr(mod, attr, jit_view(v))
            yield
        finally:
            for mod, attr, v in swapped:
                setattr(mod, attr, v)


def gpu_target(lim: TargetLimits):
    from triton.backends.compiler import GPUTarget

    arch = int(lim.arch[2:]) if lim.vendor == "nvidia" else lim.arch
    return GPUTarget(lim.backend, arch, lim.wave_size)


def _ast_source(program: Program, lim: TargetLimits):
    import triton
    from triton import knobs

    fn = jit_view(program.fn)
    names = [n for n, _ in program.signature]
    consts = dict(program.constexprs)
    sig = dict(program.signature)
    cexpr = {(names.index(n),): v for n, v in consts.items()}
    attrs: dict = {}
    for n in program.divisible:
        attrs.setdefault((names.index(n),), []).append(["tt.divisibility", 16])
    buffer_ops = lim.vendor == "amd" and bool(getattr(getattr(knobs, "amd", None), "use_buffer_ops", False))
    if buffer_ops:  # the AMD launcher marks tensors under 2 GiB so buffer loads can be used (HIPBackend.parse_attr)
        for n in program.small:
            attrs.setdefault((names.index(n),), []).append(["tt.pointer_range", 32])
    return triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cexpr, attrs=attrs)


def first_line(e: BaseException) -> str:
    """The compiler's own message in one line: for a CompilationError the error under the caret with its source
    position ("at 38:14: Input shapes should have M >= 1, N >= 1 and K >= 16"), else the exception's first line."""
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    where = re.match(r"at (\d+:\d+):", lines[0]) if lines else None
    if where:
        caret = max((i for i, ln in enumerate(lines) if set(ln.strip()) == {"^"}), default=None)
        msg = " ".join(ln.strip() for ln in lines[caret + 1:]) if caret is not None else ""
        cause = e.__cause__
        if not msg and cause is not None:
            msg = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return f"{type(e).__name__} at {where.group(1)}: {msg or lines[-1]}"[:400]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def build(program: Program, lim: TargetLimits):
    """Triton's compiled kernel of `program` for `lim`'s target (raises what the compiler raises). The code is what
    the JIT compiles for the same launch, but not under the JIT's cache key (the JIT also lists empty attribute
    entries): to fill a cache for launches use the JIT's warmup (conformance/compile/prewarm.py)."""
    import triton

    with _compilable_language():
        src = _ast_source(program, lim)
        return triton.compile(src, target=gpu_target(lim), options=dict(program.options))


def compile_program(program: Program, lim: TargetLimits) -> dict:
    """{"ok": bool, "message": the compiler's first line when not ok, "resources": {...} when ok, "seconds"}."""
    t0 = time.perf_counter()
    try:
        ck = build(program, lim)
    except Exception as e:  # noqa: BLE001 - any refusal of the target's compiler is this program's verdict
        return {"ok": False, "message": first_line(e), "seconds": round(time.perf_counter() - t0, 3)}
    res = resources(ck, lim)
    return {"ok": True, "message": "", "resources": res, "seconds": round(time.perf_counter() - t0, 3)}


_DIGESTS: dict = {}  # id(fn) -> (fn, its digest): the fn kept alive, so its id is never another function's


def source_digest(program: Program) -> str:
    """The hash of the program's source and of every JIT function it calls (Triton's own cache key of the
    function), for the lane's compile cache. Once per function and process: a function's source does not change
    while it lives (a changed kernel module is new function objects), and the lane asks for the key of every
    specialization of the same few functions (hundreds per target)."""
    fn = program.fn
    hit = _DIGESTS.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    with _compilable_language():
        digest = jit_view(fn).cache_key
    _DIGESTS[id(fn)] = (fn, digest)
    return digest


# ---- resources of a compiled binary ---------------------------------------------------------------------------

def _cuobjdump() -> str | None:
    import triton

    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(p) if p.is_file() else None


def resources(ck, lim: TargetLimits) -> dict:
    """Registers, spills / scratch, shared memory (LDS) of a compiled kernel, as its binary says:
    AMD: the .amdgcn text (.vgpr_count, .agpr_count, .sgpr_count, spill counts, private segment (scratch),
    LLVM's `; Occupancy:` in waves per SIMD) plus Triton's dynamic LDS (metadata.shared);
    NVIDIA: `cuobjdump --dump-resource-usage` of the cubin (REG, LOCAL = local memory per thread: spills,
    STACK, static SHARED) plus Triton's dynamic shared memory (metadata.shared)."""
    md = ck.metadata
    shared = int(getattr(md, "shared", 0) or 0)
    out = {"num_warps": int(md.num_warps), "threads": int(md.num_warps) * lim.wave_size}
    if lim.vendor == "amd":
        asm = ck.asm.get("amdgcn", "")
        if isinstance(asm, bytes):
            asm = asm.decode()

        def field(pat, default=0):
            m = re.search(pat, asm, re.M)
            return int(m.group(1)) if m else default

        static_lds = field(r"^\s*\.group_segment_fixed_size:\s*(\d+)")
        out.update(vgprs=field(r"^\s*\.vgpr_count:\s*(\d+)"), agprs=field(r"^\s*\.agpr_count:\s*(\d+)"),
                   sgprs=field(r"^\s*\.sgpr_count:\s*(\d+)"),
                   vgpr_spills=field(r"^\s*\.vgpr_spill_count:\s*(\d+)"),
                   sgpr_spills=field(r"^\s*\.sgpr_spill_count:\s*(\d+)"),
                   scratch_bytes=field(r"^\s*\.private_segment_fixed_size:\s*(\d+)"),
                   lds_bytes=shared + static_lds, compiler_occupancy=field(r"^; Occupancy:\s*(\d+)", None))
    else:
        tool = _cuobjdump()
        usage = ""
        if tool is not None:
            with tempfile.TemporaryDirectory() as d:
                f = Path(d) / "k.cubin"
                f.write_bytes(ck.asm["cubin"])
                usage = subprocess.run([tool, "--dump-resource-usage", str(f)], capture_output=True, text=True,
                                       timeout=60).stdout

        def field(name):
            m = re.search(rf"\b{name}:(\d+)", usage)
            return int(m.group(1)) if m else None

        regs = field("REG")
        out.update(registers=regs, local_bytes=field("LOCAL"), stack_bytes=field("STACK"),
                   shared_bytes=shared + (field("SHARED") or 0))
        if regs is None:
            out["unreadable"] = "cuobjdump gave no resource usage (not shipped with this Triton?)"
    return out
