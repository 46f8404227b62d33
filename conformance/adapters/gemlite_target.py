"""GemLite imported for a chosen GPU target on a machine without that GPU (or any): what the compile lane needs to
read off GemLite's launches for every target.

    with for_target(target) as gemlite:          # a fresh import of gemlite that sees `target`'s device
        programs = capture(lambda: ...)          # GemLite's own dispatch and tile choice, launches recorded

GemLite 0.6 reads the device at import and keeps it in module globals: `triton_kernels/utils.py` asks
`torch.cuda.get_device_capability()` (GPU_COMPUTE_CAPABILITY), the device's SM count and
`driver.active.get_current_target().backend` (IS_HIP, which picks its NVIDIA or AMD autotune tables), its pruner
asks the shared memory per block, and `core.get_default_cache_config` picks its tuned config file by the device
name (h100, a100, 5090, mi300x, ...). Inside `for_target(T)`, for the block only:

- those queries answer as T's reference part (conformance.core.target_limits: capability, part name, SM / CU count,
  LDS / shared memory per block, wave size); `torch.cuda.device_count()` answers 0, so the per-device workspaces
  GemLite allocates at import (MXFP / NVFP4 tables, not used by A16W4) are not made on a device that is absent;
- Triton's active driver is a stand-in answering T (current target, device properties); the real one is put back;
- gemlite's modules are imported afresh for T (each target's import is kept and reinstalled on the next entry), and
  its `torch.library` ops are plain functions there (a re-import would register `gemlite::forward_functional`
  twice, and the registered op would run the first import's module globals);
- `triton.set_allocator` (GemLite sets a CUDA allocator at import) changes nothing.

`capture(call)` records the launches of `call()` with `triton.autotune` resolved as GemLite's pruner resolves it
for T: every config the pruner leaves is launched (recorded), since which one the autotuner keeps is a timing on
the hardware; where GemLite's tuned file for the part has the shape, the pruner leaves exactly that one. Nothing
runs. Not thread-safe; everything is restored on exit, the sys.modules entries of gemlite too.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import types

_IMPORTS: dict = {}  # arch -> {module name: module} of gemlite imported for that target
VENDOR_PREFIX = {"nvidia": "NVIDIA ", "amd": "AMD "}


def capability(arch: str) -> tuple[int, int]:
    """What torch.cuda.get_device_capability answers on the target: CUDA (X, Y) of smXY; ROCm (major, minor) of
    the gfx name as HIP reports it (gfx942 -> (9, 4), gfx1201 -> (12, 0), gfx1151 -> (11, 5))."""
    if arch.startswith("sm"):
        digits = arch[2:]
        return int(digits[:-1]), int(digits[-1])
    digits = arch[3:]
    return int(digits[:-2]), int(digits[-2], 16)


def device_properties(arch: str) -> types.SimpleNamespace:
    """torch.cuda.get_device_properties of the target's reference part (the fields GemLite reads, and a few more)."""
    from conformance.core.target_limits import limits

    lim = limits(arch)
    major, minor = capability(arch)
    return types.SimpleNamespace(name=VENDOR_PREFIX[lim.vendor] + lim.part, major=major, minor=minor,
                                 multi_processor_count=lim.compute_units, gcnArchName=arch if lim.vendor == "amd"
                                 else "", warp_size=lim.wave_size, total_memory=0,
                                 shared_memory_per_block_optin=lim.lds_bytes)


class _Driver:
    """Triton's active driver as the target's would answer (the calls GemLite and Triton's launcher make)."""

    def __init__(self, arch: str):
        from triton.backends.compiler import GPUTarget

        from conformance.core.target_limits import limits

        lim = limits(arch)
        self.target = GPUTarget(lim.backend, int(arch[2:]) if lim.backend == "cuda" else arch, lim.wave_size)
        props = {"max_shared_mem": lim.lds_bytes, "multiprocessor_count": lim.compute_units,
                 "warpSize": lim.wave_size, "max_num_regs": lim.register_file}
        self.utils = types.SimpleNamespace(get_device_properties=lambda device=0: dict(props))

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def _gemlite_modules() -> dict:
    return {n: m for n, m in sys.modules.items() if n == "gemlite" or n.startswith("gemlite.")}


def _op_passthrough(real):
    """torch.library.custom_op / register_fake for gemlite's ops: the function itself (see the module docstring)."""
    def decorator_factory(name, fn=None, /, **kwargs):
        if not str(name).startswith("gemlite::"):
            return real(name, fn, **kwargs) if fn is not None else real(name, **kwargs)

        def deco(f):
            f.register_fake = lambda *_a, **_k: (lambda g: g)
            f.register_autograd = lambda *_a, **_k: None
            return f
        return deco(fn) if fn is not None else deco
    return decorator_factory


@contextlib.contextmanager
def _patched(obj, **attrs):
    saved = {k: getattr(obj, k) for k in attrs}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(obj, k, v)


@contextlib.contextmanager
def for_target(target, autotune: str | None = None):
    """gemlite imported for `target` (a Target or arch with a limits row); see the module docstring. `autotune`:
    GemLite's autotune mode for the import ("fast", "default", "max"; None: GemLite's own, "fast")."""
    import torch
    import triton
    from triton.runtime import driver

    from conformance.core.target_limits import limits

    arch = getattr(target, "arch", target)
    limits(arch)  # a target without a limits row is refused, naming those with one
    props = device_properties(arch)
    outside = _gemlite_modules()
    for n in outside:
        del sys.modules[n]
    saved_driver = driver._active  # None on a machine without a GPU: reset_active() would raise there
    driver.set_active(_Driver(arch))
    try:
        with _patched(torch.cuda, get_device_capability=lambda device=None: (props.major, props.minor),
                      get_device_properties=lambda device=None: props, device_count=lambda: 0,
                      get_device_name=lambda device=None: props.name), \
                _patched(torch.library, custom_op=_op_passthrough(torch.library.custom_op),
                         register_fake=_op_passthrough(torch.library.register_fake)), \
                _patched(triton, set_allocator=lambda fn: None):
            key = (arch, autotune)
            sys.modules.update(_IMPORTS.get(key, {}))
            mod = importlib.import_module("gemlite")
            if key not in _IMPORTS:
                if autotune is not None:
                    from gemlite.triton_kernels.config import reload_all_modules, set_autotune

                    set_autotune(autotune)
                    reload_all_modules()  # GemLite picks its config tables at import: re-import them in this mode
                _IMPORTS[key] = _gemlite_modules()
            yield mod
    finally:
        for n in _gemlite_modules():
            del sys.modules[n]
        sys.modules.update(outside)
        driver._active = saved_driver


def _autotuned_run(self, *args, **kwargs):
    """Autotuner.run with every config the pruner leaves launched in turn (no benchmark: launches are recorded)."""
    self.nargs = dict(zip(self.arg_names, args))
    configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
    try:
        for config in configs:
            self.fn.run(*args, **kwargs, **config.all_kwargs())
    finally:
        self.nargs = None


def capture(call) -> list:
    """The programs `call()` launches inside `for_target`, autotuned kernels resolved to every config GemLite's
    pruner leaves for the target (conformance.core.launch_capture records them, nothing runs)."""
    from triton.runtime.autotuner import Autotuner

    from conformance.core.launch_capture import capture_programs

    with _patched(Autotuner, run=_autotuned_run):
        return capture_programs(call)
