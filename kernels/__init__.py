"""Built-in kernels under test, one module each; importing this package as `conformance_kernels` registers them.

Imported as `conformance_kernels` (see conformance.core.tree), never as `kernels`: that name belongs to the PyPI
package `kernels` (a kernel hub that transformers depends on). When the repository root is first on sys.path
(`python -m pytest` from the root) `import kernels` finds this directory before site-packages; then this file
hands the name on to the real package, found on the rest of sys.path, or raises ModuleNotFoundError when
there is none. So the real package wins whenever it is installed, "not installed" stays true when it is not,
and our kernels register exactly once, under `conformance_kernels`.
"""
import importlib
import pkgutil
import sys

if __name__ == "conformance_kernels":
    from conformance.core.runtime import configure_triton

    configure_triton()  # before any @triton.jit below is defined

    for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if not _m.startswith("_"):
            importlib.import_module(f"{__name__}.{_m}")
else:
    import importlib.machinery
    import importlib.util
    import os

    def _elsewhere() -> list:
        """sys.path without the directory that holds this one (the checkout's root, under any spelling)."""
        root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return [p for p in sys.path if os.path.realpath(p or os.curdir) != root]

    _spec = importlib.machinery.PathFinder.find_spec(__name__, _elsewhere())
    if _spec is None or _spec.origin is None or _spec.loader is None:  # none, or only a namespace directory
        raise ModuleNotFoundError(f"No module named {__name__!r}", name=__name__)
    _real = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _real  # the import statement returns what sys.modules holds once this file ends
    try:
        _spec.loader.exec_module(_real)
    except BaseException:
        sys.modules.pop(__name__, None)
        raise
