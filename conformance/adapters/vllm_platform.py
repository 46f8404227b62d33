"""vLLM's own platform object for a target, standing in for the machine's platform inside a scope.

vLLM's kernels ask `vllm.platforms.current_platform` (bound into each kernel module by `from vllm.platforms import
current_platform`) and, on ROCm, the module-level arch flags of `vllm.platforms.rocm` (`on_gfx1x()`, ...). To ask a
gate as vLLM would run it on target T, `as_target(T)` swaps, for the duration of the block only:

- every loaded `vllm.*` module's `current_platform` (and `vllm.platforms._current_platform`) for vLLM's platform of T:
  ROCm `gfxNNNN`: `RocmPlatform` of a private copy of `vllm/platforms/rocm.py` executed with the GPU arch it reads at
  import (amdsmi, else `torch.cuda.get_device_properties(...).gcnArchName`) answered as T's arch, so its `_ON_*`
  flags, `on_gfx*()` and `get_device_capability()` are vLLM's own code for T (`num_compute_units()` answers from
  COMPUTE_UNITS); CUDA `smXY`: vLLM's `CudaPlatform` with
  `get_device_capability()` answering (X, Y), the one hardware query; `cpu`: vLLM's `CpuPlatform`;
- `sys.modules["vllm.platforms.rocm"]` for that copy (kernels import `on_gfx1x` and friends from it at call time).

On the machine's own GPU target nothing is swapped: vLLM's real current platform answers. Everything is restored on
exit, including modules first imported inside the block. Not thread-safe (one question at a time per process).

`ensure_compiled_placeholder()`: vLLM's compiled library (`vllm._C_stable_libtorch`, built for torch 2.14 in 0.33.0)
does not load here; `vllm.platforms.cuda` imports it unconditionally. An empty module stands in for it so vLLM's
Python imports; every op it would have registered stays absent, and `COMPILED_ABSENT` says why.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

COMPILED_LIB = "vllm._C_stable_libtorch"
COMPILED_ABSENT: str | None = None  # why vLLM's compiled library did not load here (None: it loaded or untried)
_PLATFORMS: dict = {}  # str(target) -> platform object
# the one other hardware query vLLM's kernels make (the hybrid passes it to its HIP GEMV, which runs here as our
# model, where it changes nothing): compute units of the flagship part of each arch
COMPUTE_UNITS = {"gfx90a": 110, "gfx942": 304, "gfx950": 256, "gfx1100": 96, "gfx1101": 60, "gfx1102": 32,
                 "gfx1150": 16, "gfx1151": 40, "gfx1200": 32, "gfx1201": 64}
_ROCM_COPIES: dict = {}  # arch -> private module copy of vllm/platforms/rocm.py


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def ensure_compiled_placeholder() -> str | None:
    """Load vLLM's compiled library; where it cannot load, put an empty placeholder module in its place (see the
    module docstring). Returns COMPILED_ABSENT. Runs before `import vllm` (whose import may already resolve the
    platform, and so import vllm.platforms.cuda): the library is found and loaded by file, not through vllm."""
    global COMPILED_ABSENT
    mod = sys.modules.get(COMPILED_LIB)
    if mod is not None:
        COMPILED_ABSENT = getattr(mod, "CONFORMANCE_PLACEHOLDER", None)  # the reason, kept on our placeholder
        return COMPILED_ABSENT
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None  # no vllm: import_vllm says so
    import pathlib

    libs = sorted(p for d in spec.submodule_search_locations for p in pathlib.Path(d).glob("_C_stable_libtorch*.so"))
    try:
        if not libs:
            raise ModuleNotFoundError(f"no {COMPILED_LIB} extension file in {list(spec.submodule_search_locations)}")
        lib_spec = importlib.util.spec_from_file_location(COMPILED_LIB, libs[0])
        lib = importlib.util.module_from_spec(lib_spec)
        lib_spec.loader.exec_module(lib)
        sys.modules[COMPILED_LIB] = lib
    except Exception as e:  # noqa: BLE001 - absent or built for another torch: both mean its ops are absent
        COMPILED_ABSENT = f"{COMPILED_LIB} did not load ({_why(e)})"
        placeholder = types.ModuleType(COMPILED_LIB)
        placeholder.__doc__ = f"conformance placeholder: {COMPILED_ABSENT}"
        placeholder.CONFORMANCE_PLACEHOLDER = COMPILED_ABSENT
        sys.modules[COMPILED_LIB] = placeholder
    return COMPILED_ABSENT


def _rocm_copy(arch: str):
    """A private copy of vllm/platforms/rocm.py executed as if the machine's GPU were `arch`."""
    if arch in _ROCM_COPIES:
        return _ROCM_COPIES[arch]
    import torch

    spec = importlib.util.find_spec("vllm.platforms.rocm")
    copy = importlib.util.module_from_spec(importlib.util.spec_from_file_location("vllm.platforms.rocm", spec.origin))
    real_props = torch.cuda.get_device_properties
    saved = sys.modules.get("vllm.platforms.rocm")
    torch.cuda.get_device_properties = lambda *_a, **_k: types.SimpleNamespace(gcnArchName=arch, name=arch)
    sys.modules["vllm.platforms.rocm"] = copy
    try:
        spec.loader.exec_module(copy)
    finally:
        torch.cuda.get_device_properties = real_props
        if saved is None:
            sys.modules.pop("vllm.platforms.rocm", None)
        else:
            sys.modules["vllm.platforms.rocm"] = saved
    if copy._GCN_ARCH != arch:
        raise RuntimeError(f"vllm.platforms.rocm read arch {copy._GCN_ARCH!r}, not the simulated {arch!r}")
    _ROCM_COPIES[arch] = copy
    return copy


def platform_for(target):
    """vLLM's platform object for `target` (cached): see the module docstring."""
    key = str(target)
    if key in _PLATFORMS:
        return _PLATFORMS[key]
    if target.kind == "rocm":
        base = _rocm_copy(target.arch).RocmPlatform
        cus = COMPUTE_UNITS.get(target.arch)

        def num_compute_units(cls, device_id: int = 0, _cus=cus, _arch=target.arch):
            if _cus is None:
                raise NotImplementedError(f"compute units of {_arch} unknown (conformance COMPUTE_UNITS)")
            return _cus

        cls = type(f"Simulated{base.__name__}_{target.arch}", (base,),
                   {"num_compute_units": classmethod(num_compute_units),
                    "__doc__": f"vLLM's {base.__name__} of {target.arch}, its compute-unit count answered"})
        plat = cls()
    elif target.kind == "cuda":
        ensure_compiled_placeholder()
        cuda = importlib.import_module("vllm.platforms.cuda")
        cap = importlib.import_module("vllm.platforms.interface").DeviceCapability(target.sm // 10, target.sm % 10)

        def get_device_capability(cls, device_id: int = 0, _cap=cap):
            return _cap

        cls = type(f"Simulated{cuda.CudaPlatform.__name__}_{target.arch}", (cuda.CudaPlatform,),
                   {"get_device_capability": classmethod(get_device_capability),
                    "__doc__": f"vLLM's {cuda.CudaPlatform.__name__}, device capability {target.arch}"})
        plat = cls()
    else:
        plat = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
    _PLATFORMS[key] = plat
    return plat


def _real_platform():
    return importlib.import_module("vllm.platforms").current_platform


def capability(platform) -> int | None:
    """The capability integer vLLM's kernel selection compares get_min_capability() with (major * 10 + minor)."""
    cc = platform.get_device_capability()
    return None if cc is None else cc[0] * 10 + cc[1]


def is_machine_target(target) -> bool:
    """True when `target` is this machine's GPU: vLLM's real platform answers for it."""
    from conformance.core.targets import detect_target

    return target.is_gpu and detect_target() == target


_HOLDERS: list = [0, []]  # [len(sys.modules) when scanned, the vllm modules that bind current_platform]


def _holders() -> list:
    """The loaded vllm.* modules with a global `current_platform` (rescanned when modules were imported)."""
    if _HOLDERS[0] != len(sys.modules):
        _HOLDERS[1] = [m for n, m in list(sys.modules.items()) if (n == "vllm" or n.startswith("vllm."))
                       and m is not None and "current_platform" in getattr(m, "__dict__", {})]
        _HOLDERS[0] = len(sys.modules)
    return _HOLDERS[1]


def reset() -> None:
    """Forget cached platform objects, module copies and the compiled-library verdict (a different vLLM is
    about to be imported: the adapter's register() calls it)."""
    global COMPILED_ABSENT, IMPORTED_UNDER
    _PLATFORMS.clear()
    _ROCM_COPIES.clear()
    _HOLDERS[:] = [0, []]
    COMPILED_ABSENT = None
    IMPORTED_UNDER = None
    set_import_platform(None)


IMPORT_DISPATCH_KEY = "CompositeExplicitAutograd"
IMPORTED_UNDER: str | None = None  # set by import_scope when vLLM's kernels were imported under a stand-in platform
_IMPORT_PLATFORM: list = [None]  # the platform vLLM's modules are imported under (import_scope sets it)


class _ImportTimeLoader:
    """A module loader that executes its module (and every module that one imports) with `vllm.platforms`'
    current platform set to the import-time platform, then binds the new modules to the platform answering at that
    moment (a simulated target's, inside as_target). Every other attribute is the wrapped loader's."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        pkg = sys.modules["vllm.platforms"]
        answering, importing = pkg._current_platform, _IMPORT_PLATFORM[0]
        before = set(sys.modules)
        pkg._current_platform = importing
        try:
            self._inner.exec_module(module)
        finally:
            pkg._current_platform = answering
            for name in set(sys.modules) - before | {module.__name__}:
                m = sys.modules.get(name)
                if name.startswith("vllm.") and m is not None and m.__dict__.get("current_platform") is importing:
                    m.current_platform = answering


class _ImportTimeFinder:
    """On sys.meta_path (set_import_platform): a vllm.* module first imported while another platform than the
    import-time one is current (vLLM imports some modules lazily, inside a call: 0.34.0's `replace_parameter`
    imports `vllm.model_executor.model_loader`, whose attention modules ask `current_platform.is_cuda()` at import
    and then import the compiled flash-attention extension) is loaded by _ImportTimeLoader."""

    def find_spec(self, name, path=None, target=None):
        pkg = sys.modules.get("vllm.platforms")
        if (not name.startswith("vllm.") or pkg is None or _IMPORT_PLATFORM[0] is None
                or pkg.__dict__.get("_current_platform") is _IMPORT_PLATFORM[0]):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ImportTimeLoader(spec.loader)
                return spec
        return None


def set_import_platform(platform) -> None:
    """From now on, a vLLM module first imported in this process runs its import-time code under `platform` (the one
    vLLM's kernel package was imported under), whatever platform is current then, as if it had been imported at
    startup; afterwards it answers to the current one like every other vLLM module. None: no longer."""
    _IMPORT_PLATFORM[0] = platform
    if platform is not None and not any(isinstance(f, _ImportTimeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportTimeFinder())


@contextlib.contextmanager
def import_scope():
    """Import vLLM's kernel package inside this block. Where vLLM's compiled library is absent (COMPILED_ABSENT) and
    the machine's platform is CUDA or ROCm, vLLM's own import path cannot run: at import it asks compiled ops
    (`CUTLASS_BLOCK_FP8_SUPPORTED = cutlass_block_fp8_supported()` calls `torch.ops._C...`, which raises) and imports
    the compiled flash-attention extension. So inside the block vLLM's platform is its CpuPlatform with the
    IMPORT_DISPATCH_KEY (vLLM registers its custom ops, `torch.ops.vllm.triton_w4a16_gemm`, under
    `current_platform.dispatch_key`: with CompositeExplicitAutograd they run on the machine's device and on CPU
    tensors alike; with the CpuPlatform's own key, CUDA tensors could not reach them); import-time answers are the CPU
    platform's (no compiled CUTLASS path: true, the compiled ops are absent). On exit every module that bound that
    stand-in is rebound to the machine's real platform, which answers every gate and every call from then on, and
    IMPORTED_UNDER says so. Elsewhere (vLLM's compiled library loaded, or a CPU machine) nothing is swapped. Either
    way the platform of the import is also the one every vLLM module imported later runs its import-time code under
    (set_import_platform), so a lazy import inside a simulated target's call is not a CUDA import on a CPU host."""
    global IMPORTED_UNDER
    IMPORTED_UNDER = None
    ensure_compiled_placeholder()  # before vllm.platforms resolves the machine's platform (cuda.py imports it)
    try:
        pkg = importlib.import_module("vllm.platforms")
        real = pkg.current_platform
    except Exception:  # noqa: BLE001 - no vllm, or no platform: the import inside the block fails and says why
        yield None
        return
    if COMPILED_ABSENT is None or not real.is_cuda_alike():
        set_import_platform(real)
        yield None
        return
    cpu = importlib.import_module("vllm.platforms.cpu").CpuPlatform
    # CompositeExplicitAutograd: one kernel for every backend key, so vLLM's ops run on the machine's device and
    # also on CPU tensors (a simulated target's run on this GPU host: a ROCm target's Triton path as its model);
    # their fake (Meta) kernels still win for meta and fake tensors
    cls = type(f"ImportOnly{cpu.__name__}", (cpu,), {
        "dispatch_key": IMPORT_DISPATCH_KEY,
        "__doc__": f"vLLM's {cpu.__name__} with the {IMPORT_DISPATCH_KEY} dispatch key, for the import only"})
    stand = cls()
    swapped = [m for m in _holders() if m.__dict__.get("current_platform") is real]
    for m in swapped:
        m.current_platform = stand
    pkg._current_platform = stand
    set_import_platform(stand)
    try:
        yield stand
    finally:
        pkg._current_platform = real
        for m in _holders():
            if m.__dict__.get("current_platform") is stand:
                m.current_platform = real
        IMPORTED_UNDER = (f"imported under vLLM's CpuPlatform with dispatch key {IMPORT_DISPATCH_KEY} (vLLM's import "
                          f"path on {type(real).__name__} needs its compiled extensions), then run under "
                          f"{type(real).__name__}")


@contextlib.contextmanager
def as_target(target):
    """Inside the block, vLLM's current platform is its platform for `target` (see the module docstring)."""
    if is_machine_target(target):
        yield _real_platform()
        return
    plat = platform_for(target)
    pkg = importlib.import_module("vllm.platforms")
    real = pkg.current_platform
    swapped = [m for m in _holders() if m.__dict__.get("current_platform") is real]
    n_modules = len(sys.modules)
    saved_rocm = sys.modules.get("vllm.platforms.rocm")
    for m in swapped:
        m.current_platform = plat
    pkg._current_platform = plat
    if target.kind == "rocm":
        sys.modules["vllm.platforms.rocm"] = _rocm_copy(target.arch)
    try:
        yield plat
    finally:
        pkg._current_platform = real
        for m in swapped:
            m.current_platform = real
        if target.kind == "rocm":
            if saved_rocm is None:
                sys.modules.pop("vllm.platforms.rocm", None)
            else:
                sys.modules["vllm.platforms.rocm"] = saved_rocm
        if len(sys.modules) != n_modules:  # modules imported inside the block bound the stand-in: rebind them
            for m in _holders():
                if m.__dict__.get("current_platform") is plat:
                    m.current_platform = real
