"""Built-in kernels under test, one module each; importing this package registers them all.

Imported as `conformance_kernels` (see conformance.registry), never as `kernels`. When the repository root
is on sys.path (`python -m pytest` from the root), third-party code probing for the unrelated PyPI package
`kernels` (transformers does: find_spec, then import) finds this directory instead: under any other name
this package stays inert -- no imports, no registration, no `__version__` -- so such probes see
"not installed" and our kernels are never registered twice under two module names.
"""
import importlib
import pkgutil

if __name__ == "conformance_kernels":
    from conformance.core.runtime import configure_triton

    configure_triton()  # before any @triton.jit below is defined

    for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if not _m.startswith("_"):
            importlib.import_module(f"{__name__}.{_m}")
