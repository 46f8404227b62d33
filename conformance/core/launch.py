"""What a kernel launches for one call on one target: the one answer the plan, the GPU grouping and the compile
lane all ask for (`Kernel.launch(config, M, target) -> Launch | None`).

- `Launch.path`: the kernel's own name for the code path the call takes (triton_w4a16: "planar" decode,
  "gemv" at M = 1, "dot" tiles, "dequant_mm" dequantize-then-matmul; "+splitk" when K is split), so a plan can
  cross paths with formats and a report can say which path failed.
- `Launch.tiles`: the tile / config values the kernel's own selection picks for that M on that target.
- `Launch.key`: what the call compiles; equal keys share their compiled programs. The pytest plugin groups plan
  cases by it on a GPU (`Kernel.compile_key`), and the compile lane dedupes by its programs' keys.
- `Launch.programs`: the JIT programs the call launches, each with its signature, constexprs and options, as
  Triton specializes them; the compile lane (conformance/compile/) compiles exactly these for the target.
- `Launch.row`: the selection row the call comes from, `Row(max_m, block_m, block_n, block_k, m_tiled)`: the
  plan probes M and places its M menu on each row's threshold and BLOCK_M tails (None: the kernel has no M
  table the plan should read).

`triton_program(fn, args, options)` builds a Program from the values a launch passes, classifying them as
Triton's launcher does (pointers by dtype and 16-byte alignment, ints equal to 1 as constants, ints divisible by
16 as such, `tl.constexpr` parameters by value), so a kernel states its launch in the same words it launches.
Pure: nothing here imports torch or triton.
"""
from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

from references.errors import require

TRITON_SCALARS = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8",
                  "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
                  "float8_e4m3fn": "fp8e4nv", "float8_e4m3fnuz": "fp8e4b8", "float8_e5m2": "fp8e5"}


@dataclass(frozen=True)
class Ptr:
    """A tensor argument as Triton sees it: its element type ("fp16", "i32", a torch dtype name is translated),
    whether its address is 16-byte aligned (torch's allocations always are) and its storage under 2 GiB."""

    dtype: str
    aligned: bool = True
    small: bool = True  # the tensor's storage is under 2 GiB (AMD's buffer ops specialize on it)

    def __post_init__(self):
        name = str(self.dtype).removeprefix("torch.")
        object.__setattr__(self, "dtype", TRITON_SCALARS.get(name, name))


@dataclass(frozen=True)
class Row:
    """The selection row a launch comes from: the largest M it serves (None: every M above the other rows), its
    BLOCK_M / BLOCK_N / BLOCK_K before they are fitted to the problem, and whether M is tiled by BLOCK_M (False
    for paths without an M tile, e.g. dequantize-then-matmul)."""

    max_m: int | None
    block_m: int
    block_n: int
    block_k: int
    m_tiled: bool = True


@dataclass(frozen=True)
class Program:
    """One JIT program: `name` (module.function), the function itself (`fn`: the kernel module's @triton.jit object,
    an interpreter function on a CPU host; not compared), `signature` ((arg, Triton type) in order: "*fp16", "i32",
    "fp32", "constexpr"), `constexprs` ((arg, value)), `divisible` (the int / pointer args Triton assumes
    divisible by 16), `options` ((name, value): num_warps, num_stages, ...), `small` (the pointer args whose storage is
    under 2 GiB). `allow_spill`: the kernel declares
    register spills acceptable here; `min_occupancy`: waves per SIMD / programs per SM below which the lane warns."""

    name: str
    signature: tuple
    constexprs: tuple
    divisible: tuple = ()
    options: tuple = ()
    small: tuple = ()
    fn: Any = field(default=None, compare=False, hash=False, repr=False)
    allow_spill: bool = False
    min_occupancy: int | None = None

    @property
    def key(self) -> tuple:
        """What Triton compiles: equal keys give the same binary for one target."""
        return (self.name, self.signature, self.constexprs, self.divisible, self.options, self.small)

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class Launch:
    """What one call launches on one target; see the module docstring for each field. `key` None: derived from
    path, tiles and the programs' keys."""

    path: str
    tiles: tuple = ()
    key: Any = None
    programs: tuple = ()
    row: Row | None = None

    def __post_init__(self):
        require(isinstance(self.path, str) and bool(self.path), "Launch.path", self.path, "a non-empty string")
        if isinstance(self.tiles, dict):
            object.__setattr__(self, "tiles", tuple(self.tiles.items()))
        object.__setattr__(self, "programs", tuple(self.programs))
        require(all(isinstance(p, Program) for p in self.programs), "Launch.programs",
                [type(p).__name__ for p in self.programs], "a tuple of Program")
        if self.key is None:
            object.__setattr__(self, "key", (self.path, self.tiles, tuple(p.key for p in self.programs)))

    def tile(self, name: str, default=None):
        return dict(self.tiles).get(name, default)


def raw_function(fn):
    """The Python function under a @triton.jit object (JITFunction or the interpreter's InterpretedFunction)."""
    return getattr(fn, "fn", fn)


def program_name(fn) -> str:
    raw = raw_function(fn)
    return f"{raw.__module__}.{raw.__qualname__}"


@functools.lru_cache(maxsize=256)
def _params(raw) -> tuple:
    """((name, is constexpr), ...) of a Python function: inspect.signature is most of a launch description's cost
    (the plan asks each W4A16 kernel for the path of hundreds of (config, M) pairs), and a function's signature
    never changes."""
    sig = inspect.signature(raw)
    return tuple((n, p.annotation is not inspect.Parameter.empty and "constexpr" in str(p.annotation))
                 for n, p in sig.parameters.items())


def constexpr_params(fn) -> tuple:
    """The parameter names a @triton.jit function declares `tl.constexpr` (annotation objects or, under
    `from __future__ import annotations`, their text), as Triton's own KernelParam reads them."""
    return tuple(n for n, c in _params(raw_function(fn)) if c)


def param_names(fn) -> tuple:
    return tuple(n for n, _ in _params(raw_function(fn)))


def int_type(v: int) -> str:
    return "i32" if -2**31 <= v < 2**31 else "u64" if v >= 2**63 else "i64"


def triton_program(fn, args: dict, options: dict | None = None, *, do_not_specialize: tuple = (),
                   allow_spill: bool = False, min_occupancy: int | None = None) -> Program:
    """The Program a launch `fn[grid](**args, **options)` compiles: every parameter of `fn` must be in `args`
    (a missing one is an error naming it). Values: Ptr for tensors, int, float, bool, None, or any value for a
    constexpr parameter. Ints equal to 1 become constants and ints divisible by 16 are marked so (not for names
    in `do_not_specialize`, nor the function's own do_not_specialize), as Triton's launcher specializes them."""
    names = param_names(fn)
    missing = [n for n in names if n not in args]
    extra = [n for n in args if n not in names]
    require(not missing and not extra, f"{program_name(fn)} arguments", {"missing": missing, "unknown": extra},
            "exactly the function's parameters")
    cexpr = set(constexpr_params(fn))
    no_spec = set(do_not_specialize) | {names[i] if isinstance(i, int) else i
                                        for i in getattr(fn, "do_not_specialize", ()) or ()}
    kw = getattr(fn, "kwargs", None) or {}
    no_spec |= {names[i] if isinstance(i, int) else i for i in kw.get("do_not_specialize", ()) or ()}
    sig, consts, div, small = [], [], [], []
    for n in names:
        v = args[n]
        if n in cexpr or v is None:
            sig.append((n, "constexpr"))
            consts.append((n, v))
        elif isinstance(v, Ptr):
            sig.append((n, "*" + v.dtype))
            if v.aligned:
                div.append(n)
            if v.small:
                small.append(n)
        elif isinstance(v, bool):
            sig.append((n, "u1"))
        elif isinstance(v, int):
            if v == 1 and n not in no_spec:
                sig.append((n, "constexpr"))
                consts.append((n, 1))
            else:
                sig.append((n, int_type(v)))
                if v % 16 == 0 and n not in no_spec:
                    div.append(n)
        elif isinstance(v, float):
            sig.append((n, "fp32"))
        else:
            raise TypeError(f"{program_name(fn)}: argument {n}={v!r} ({type(v).__name__}) is not a Ptr, int, "
                            "float, bool or None")
    opts = tuple(sorted((options or {}).items()))
    return Program(program_name(fn), tuple(sig), tuple(consts), tuple(div), opts, tuple(small), fn=fn,
                   allow_spill=allow_spill, min_occupancy=min_occupancy)


HIP_NAME_PREFIX = "vllm_hip."  # a HIP program's name: the prefix, the template's short name, its arguments


def hip_program(source: str, function: str, template_args: tuple, threads: int, *,
                allow_spill: bool = False, min_occupancy: int | None = None) -> Program:
    """A HIP kernel template instantiation as a lane Program: `source` the file under the vLLM tree
    ("csrc/rocm/q_gemm_rdna3.cu"), `function` its qualified name ("vllm::gptq_rdna3::gemm_q4_kernel_rdna3"),
    `template_args` ((param, value)) with C++ type names ("__half", "__hip_bfloat16") or ints, `threads` the block
    size the launcher uses (occupancy needs it; the assembly does not carry it)."""
    short = function.rsplit("::", 1)[-1]
    if not re.fullmatch(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*", function):
        raise ValueError(f"hip_program: function={function!r} is not a qualified C++ name (ns::name)")
    for p, v in template_args:
        if not (isinstance(v, int) or (isinstance(v, str) and re.fullmatch(r"[A-Za-z_]\w*", v))):
            raise ValueError(f"hip_program {short}: template argument {p}={v!r} is not an int or a C++ type name")
    if not (isinstance(threads, int) and threads > 0):
        raise ValueError(f"hip_program {short}: threads={threads!r} is not a positive block size")
    # one short name per instantiation (a call may launch two of one template: M = 65 runs M_COUNT 8 and 1), the
    # name a compile id carries: gemm_q4_kernel_rdna3_half_8
    name = "_".join([short, *(str(v).strip("_").removeprefix("hip_") for _, v in template_args)])
    return Program(HIP_NAME_PREFIX + name, signature=(("hip_function", function),), constexprs=tuple(template_args),
                   options=(("hip_source", source), ("threads", threads)), allow_spill=allow_spill,
                   min_occupancy=min_occupancy)
