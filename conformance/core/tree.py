"""Import the repository's own top-level directories under distinctive package names.

`kernels/` is imported as `conformance_kernels` and `benchmarks/` as `conformance_bench`: the plain names
belong to unrelated PyPI packages (`kernels` is a popular kernel hub) or are too generic to own. In a
checkout the directory beside this `conformance` package wins over any installed copy, so a bisect step or
a scratch copy never runs another checkout's code; in a non-editable install the installed package is used.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

TREE_PACKAGES = {"conformance_kernels": "kernels", "conformance_bench": "benchmarks"}
ROOT = Path(__file__).resolve().parents[2]  # the checkout; in a non-editable install, site-packages
# a checkout (or an editable install of one); site-packages has no pyproject.toml, and its `kernels/` or
# `benchmarks/` directory, if any, is another distribution (the PyPI `kernels` hub), never ours
IN_CHECKOUT = (ROOT / "pyproject.toml").is_file()


def import_tree_package(name: str):
    """The module `name` (a key of TREE_PACKAGES), loaded from the checkout's directory when there is one.

    `kernels/` has no `__init__.py` on purpose: a namespace portion, so that with the checkout's root on sys.path
    (`python -m pytest` from the root) `import kernels` finds the installed PyPI package `kernels` whenever there is
    one (a regular package anywhere on sys.path wins over a namespace portion), and otherwise an empty namespace
    that probes such as transformers' treat as not installed (no `__file__`, no version, no distribution). Here it
    becomes the package `conformance_kernels` (its modules are imported by conformance.core.registry), after
    `configure_triton()`: the interpreter is chosen before any of its modules defines a @triton.jit function."""
    if name in sys.modules:
        return sys.modules[name]
    if name == "conformance_kernels":
        from conformance.core.runtime import configure_triton

        configure_triton()
    d = ROOT / TREE_PACKAGES[name]
    if not IN_CHECKOUT or not d.is_dir():
        return importlib.import_module(name)
    init = d / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(d)])
    else:  # a namespace portion (kernels/)
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(d)]
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        if init.is_file():
            spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def cache_dir(*parts: str) -> Path:
    """A directory under the user's cache (`$CONFORMANCE_CACHE_DIR`, else `$XDG_CACHE_HOME` or ~/.cache, then
    `quant-kernel-conformance`): inductor's cache, the nightly example database. Never the install location,
    which may be read-only site-packages, and never the current directory, which may be anyone's checkout."""
    import os

    base = os.environ.get("CONFORMANCE_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "quant-kernel-conformance")
    return Path(base, *parts)
