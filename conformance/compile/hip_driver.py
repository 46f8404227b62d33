"""HIP sources in the compile lane: vLLM's RDNA3 GPTQ kernel (`csrc/rocm/q_gemm_rdna3.cu`, the kernel `rdna3_w4a16`
models) compiled for an AMD target by clang's AMDGPU backend on this machine, no GPU and no ROCm install needed.

    hip_program(source, function, template_args, threads) -> Program   # conformance.core.launch; a launch() declares it
    is_hip(program) -> bool
    unavailable(program) -> reason | None      # no clang with the AMDGPU backend, or no vLLM source: skip, said
    compile_program(program, lim) -> {"ok", "message", "resources", "seconds"}   # as triton_driver's
    empty_reason(resources) -> reason | None   # the compiled kernel cannot write its output

How: `clang -x hip --offload-arch=gfxNNNN --cuda-device-only -nogpulib -nogpuinc -O3 -S` of the whole translation
unit, with our header shim (conformance/compile/hip_shim/: the HIP runtime, fp16 and bf16 types with ROCm's
layouts, and declarations of the torch API the launcher names, which a device-only compile parses but never emits).
The launcher's kernel launches make clang emit every template instantiation the launcher can pick; each program
is found in the assembly by its mangled name and read like Triton's AMD output (.vgpr_count, .sgpr_count, spill
counts, .private_segment_fixed_size, .group_segment_fixed_size, `; Occupancy:`), plus its instruction count and
its global-memory writes. A kernel with no global write is an `empty-kernel` verdict: vLLM's RDNA3 kernels guard
their bodies with `#if defined(__gfx1100__)`, so for gfx1151 / gfx1201 they compile to `s_endpgm` alone
(docs/shipped-bugs.md).

Where things come from (first found wins):
- clang: `$CONFORMANCE_HIP_CLANG` (a name on PATH, or `ziglang`), else clang-20, clang-19, clang on PATH, else the
  clang of the `ziglang` wheel (`pip install ziglang`: LLVM 22), the first whose `--print-targets` lists amdgcn
  (Debian: `apt-get install clang-19 lld-19`; gfx950 needs LLVM 20). Resources depend on the LLVM version: a record
  carries its compiler's version line.
- vLLM's source tree (a directory holding csrc/rocm/): `configure(vllm_src=DIR)` (`compile --vllm-src DIR`),
  `$CONFORMANCE_VLLM_SRC`, else `<cache>/hip/vllm-0.33.0` (conformance.core.tree.cache_dir), e.g. the unpacked
  `vllm-0.33.0.tar.gz` from PyPI.
Each translation unit is compiled once per (source bytes, shim bytes, clang version, arch, defines) and its per-kernel
resources cached under `<cache>/compile/hip/`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.core.launch import Program, hip_program  # noqa: F401 - hip_program: the kernels declare with it (core), re-exported for the lane

SHIM_DIR = Path(__file__).parent / "hip_shim"
ENV_SRC = "CONFORMANCE_VLLM_SRC"
ENV_CLANG = "CONFORMANCE_HIP_CLANG"
VLLM_VERSION = "0.33.0"
CLANG_CANDIDATES = ("clang-20", "clang-19", "clang")
ZIGLANG = "ziglang"  # the last candidate, or $CONFORMANCE_HIP_CLANG=ziglang: the clang bundled by that PyPI wheel
FLAGS = ("-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-O3", "-S", "-std=c++17")
CACHE_VERSION = 1
# instructions that write global memory: a kernel without one cannot produce its output
_WRITE = re.compile(r"^\s+(global_store|global_atomic|buffer_store|buffer_atomic|flat_store|flat_atomic|"
                    r"scratch_store)\w*", re.M)
_INSTR = re.compile(r"^\s+[a-z_][a-z0-9_]*(?:\s|$)", re.M)

_settings: dict = {"vllm_src": None}


def configure(*, vllm_src: str | None = None) -> None:
    """Set the vLLM source tree for this process (`compile --vllm-src DIR`); None: the environment or the cache."""
    _settings["vllm_src"] = vllm_src


# ---- programs ---------------------------------------------------------------------------------------------------

def is_hip(program: Program) -> bool:
    return program.option("hip_source") is not None


def _mangle_arg(v) -> str:
    return f"Li{v}E" if isinstance(v, int) else f"{len(v)}{v}"


def mangled_prefix(program: Program) -> str:
    """The Itanium-mangled name of the instantiation up to its parameter list (`_ZN4vllm10gptq_rdna320gemm_q4_
    kernel_rdna3I6__halfLi1EEE`): template arguments are plain types and ints, so this is exact."""
    parts = dict(program.signature)["hip_function"].split("::")
    nested = "".join(f"{len(p)}{p}" for p in parts)
    args = "".join(_mangle_arg(v) for _, v in program.constexprs)
    return f"_ZN{nested}I{args}EE" if args else f"_ZN{nested}E"


def home_target(kernel, target):
    """The target whose launches the lane compiles for `target` where the kernel's gate refuses `target`: a kernel
    whose HIP source a multi-arch build compiles for every arch of its list once `hip_build_home` is in it (vLLM's
    RDNA3 kernels: gfx1100) is compiled for the other RDNA targets (gfx11*, gfx12*) as such a build does; else None."""
    from conformance.core.targets import parse_target

    home = getattr(kernel, "hip_build_home", None)
    if home is None or target.arch == home or not str(target.arch).startswith("gfx1"):
        return None
    return parse_target(home)


# ---- the compiler and the source --------------------------------------------------------------------------------

def find_clang() -> tuple[tuple | None, str]:
    """(the command that runs a clang with the AMDGPU backend, e.g. ("/usr/bin/clang-19",), or None; the reason
    when None)."""
    return _find_clang(os.environ.get(ENV_CLANG), os.environ.get("PATH", ""))


def _ziglang() -> tuple | None:
    """The clang inside the `ziglang` wheel (`python -m ziglang clang`: LLVM 22 in ziglang 0.17.1, every target
    built in), with its own builtin headers; None when the package is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return (sys.executable, "-m", "ziglang", "clang", "-resource-dir", str(lib))


@functools.lru_cache(maxsize=8)
def _find_clang(forced: str | None, _path: str) -> tuple[tuple | None, str]:
    names = [forced] if forced else [*CLANG_CANDIDATES, ZIGLANG]
    tried = []
    for name in names:
        if name == ZIGLANG:
            cmd = _ziglang()
        else:
            path = shutil.which(name)
            cmd = (path,) if path else None
        if cmd is None:
            tried.append(f"{name}: not found")
            continue
        try:
            out = subprocess.run([*cmd, "--print-targets"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as e:
            tried.append(f"{name}: {type(e).__name__}")
            continue
        if re.search(r"^\s*amdgcn\b", out, re.M):
            return cmd, ""
        tried.append(f"{name}: no amdgcn target")
    where = f"${ENV_CLANG}={forced}" if forced else "PATH"
    return None, (f"no clang with the AMDGPU backend on {where} ({'; '.join(tried)}); install one: "
                  "apt-get install clang-19 lld-19, or pip install ziglang")


@functools.lru_cache(maxsize=8)
def clang_version(clang: tuple) -> str:
    out = subprocess.run([*clang, "--version"], capture_output=True, text=True, timeout=60).stdout
    first = out.splitlines()[0].strip() if out else "unknown"
    return f"{first} (ziglang)" if ZIGLANG in clang else first


def vllm_source() -> tuple[Path | None, str]:
    """(the vLLM source tree, or None; the reason when None)."""
    from conformance.core.tree import cache_dir

    given = _settings["vllm_src"] or os.environ.get(ENV_SRC)
    if given:
        root = Path(given)
        if (root / "csrc" / "rocm").is_dir():
            return root, ""
        how = "--vllm-src" if _settings["vllm_src"] else f"${ENV_SRC}"
        return None, f"{how}={given} holds no csrc/rocm/ (a vLLM {VLLM_VERSION} source tree is expected)"
    root = cache_dir("hip", f"vllm-{VLLM_VERSION}")
    if (root / "csrc" / "rocm").is_dir():
        return root, ""
    return None, (f"no vLLM source: pass --vllm-src DIR or set {ENV_SRC}, or unpack vllm-{VLLM_VERSION}.tar.gz "
                  f"(pip download vllm=={VLLM_VERSION} --no-deps --no-binary :all:) to {root}")


def unavailable(program: Program) -> str | None:
    """Why this machine cannot compile `program` (no compiler, no source, the source file missing), else None."""
    clang, why = find_clang()
    if clang is None:
        return why
    root, why = vllm_source()
    if root is None:
        return why
    if not (root / program.option("hip_source")).is_file():
        return f"{root / program.option('hip_source')} is missing from the vLLM source tree"
    return None


# ---- compiling and reading the assembly ------------------------------------------------------------------------

def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode())
        h.update(Path(p).read_bytes())
    return h.hexdigest()


def _unit_cache(src: Path, arch: str, clang: str, defines: tuple):
    from conformance.core.tree import cache_dir

    deps = [src, *src.parent.glob("*.cuh"), *SHIM_DIR.rglob("*.h")]
    text = json.dumps([CACHE_VERSION, _digest(deps), clang_version(clang), arch, list(FLAGS), list(defines)])
    return cache_dir("compile", "hip") / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def compile_unit(src: Path, arch: str, *, defines: tuple = (), cache: bool = True) -> dict:
    """{"ok", "message" (clang's first error line), "kernels": {mangled name: resources}, "seconds", "clang"} of one
    translation unit compiled for `arch`; cached."""
    clang, why = find_clang()
    if clang is None:
        raise RuntimeError(why)
    path = _unit_cache(src, arch, clang, defines) if cache else None
    if path is not None and path.is_file():
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")), cached=True)
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "k.s"
        cmd = [*clang, *FLAGS, f"--offload-arch={arch}", "-I", str(SHIM_DIR), "-I", str(src.parent),
               *(f"-D{x}" for x in defines), str(src), "-o", str(out)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        asm = out.read_text(encoding="utf-8") if p.returncode == 0 and out.is_file() else ""
    raw = {"ok": bool(asm), "clang": clang_version(clang), "seconds": round(time.perf_counter() - t0, 3),
           "message": "" if asm else first_error(p.stderr), "kernels": kernels_of(asm) if asm else {}}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(raw), encoding="utf-8")
        os.replace(tmp, path)  # atomic: xdist workers may write the same entry
    return dict(raw, cached=False)


def first_error(stderr: str) -> str:
    """clang's first `error:` line (file name shortened), else its first line."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    err = next((ln for ln in lines if " error: " in ln or ln.startswith("error:")), lines[0] if lines else "")
    return re.sub(r"^\S*/", "", err.strip())[:400] or "clang failed with no message"


def kernels_of(asm: str) -> dict:
    """{mangled kernel name: resources} of clang's AMDGPU assembly: the code between a kernel's label and its
    `.Lfunc_end`, the comment block after it, and its entry in the `amdgpu_metadata` block."""
    out = {}
    meta = asm[asm.find(".amdgpu_metadata"):] if ".amdgpu_metadata" in asm else ""
    entries = re.split(r"^\s*-\s+\.args:", meta, flags=re.M)[1:]
    by_name = {}
    for e in entries:
        m = re.search(r"^\s*\.name:\s*(\S+)", e, re.M)
        if m:
            by_name[m.group(1)] = e
    for name, entry in by_name.items():
        def field(pat, default=0, text=entry):
            m = re.search(pat, text, re.M)
            return int(m.group(1)) if m else default

        start = re.search(rf"^{re.escape(name)}:\s*(?:;.*)?$", asm, re.M)
        end = asm.find(".Lfunc_end", start.end()) if start else -1
        body = asm[start.end():end] if start and end > 0 else ""
        code = "\n".join(ln for ln in body.splitlines() if not ln.lstrip().startswith((";", ".")))
        tail = asm[end:] if end > 0 else ""  # LLVM's comment block (codeLenInByte, Occupancy) follows the function
        out[name] = {
            "vgprs": field(r"^\s*\.vgpr_count:\s*(\d+)"), "sgprs": field(r"^\s*\.sgpr_count:\s*(\d+)"),
            "agprs": field(r"^\s*\.agpr_count:\s*(\d+)"),
            "vgpr_spills": field(r"^\s*\.vgpr_spill_count:\s*(\d+)"),
            "sgpr_spills": field(r"^\s*\.sgpr_spill_count:\s*(\d+)"),
            "scratch_bytes": field(r"^\s*\.private_segment_fixed_size:\s*(\d+)"),
            "lds_bytes": field(r"^\s*\.group_segment_fixed_size:\s*(\d+)"),
            "wave_size": field(r"^\s*\.wavefront_size:\s*(\d+)", None),
            "compiler_occupancy": field(r"^; Occupancy:\s*(\d+)", None, tail),
            "code_bytes": field(r"^; codeLenInByte = (\d+)", None, tail),
            "instructions": len(_INSTR.findall(code)), "global_writes": len(_WRITE.findall(code)),
        }
    return out


def compile_program(program: Program, lim, *, cache: bool = True) -> dict:
    """{"ok", "message", "resources", "seconds", "compiler"} of one HIP program for `lim.arch`, as
    triton_driver.compile_program gives for a Triton one (the unit is compiled, or read from the cache, once)."""
    root, why = vllm_source()
    if root is None:
        raise RuntimeError(why)
    defines = tuple(v for k, v in program.options if k == "hip_define")
    unit = compile_unit(root / program.option("hip_source"), lim.arch, defines=defines, cache=cache)
    base = {"seconds": unit["seconds"], "compiler": unit["clang"], "cached": unit.get("cached", False)}
    if not unit["ok"]:
        return dict(base, ok=False, message=unit["message"])
    prefix = mangled_prefix(program)
    found = [n for n in unit["kernels"] if n.startswith(prefix)]
    if len(found) != 1:
        return dict(base, ok=False, message=(f"{len(found)} kernels named {prefix}* in clang's output for "
                                             f"{lim.arch} (one expected): the launcher does not instantiate it"))
    res = dict(unit["kernels"][found[0]])
    threads = program.option("threads")
    res.update(symbol=found[0], threads=threads, num_warps=-(-threads // lim.wave_size))
    return dict(base, ok=True, message="", resources=res)


def empty_reason(res: dict, arch: str) -> str | None:
    """Why a compiled kernel cannot produce its output (it writes no global memory), else None."""
    if res.get("global_writes", 1) == 0:
        return (f"the kernel compiled for {arch} writes no global memory ({res.get('instructions')} instructions, "
                f"{res.get('code_bytes')} bytes of code): its body is compiled out for this target")
    return None
