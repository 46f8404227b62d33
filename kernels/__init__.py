"""Built-in kernels under test, one module each; importing this package registers them all.

Imported as `conformance_kernels` (see conformance.registry), never as `kernels`.
"""
import importlib
import pkgutil

from conformance.runtime import configure_triton

configure_triton()  # before any @triton.jit below is defined

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _m.startswith("_"):
        importlib.import_module(f"{__name__}.{_m}")
