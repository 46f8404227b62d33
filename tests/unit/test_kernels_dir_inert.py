"""`import kernels` with the repository root first on sys.path (as `python -m pytest` puts it) gives the installed
PyPI package `kernels` when there is one (kernels/ is a namespace portion: no __init__.py) and an empty namespace,
which probes read as not installed, when there is none; our kernels/ directory still registers its kernels once,
under `conformance_kernels`. Checked with a scratch "real" package (always), with no
package at all (a scratch sys.path), and with the PyPI package itself where it is installed (the interop extra
brings it: compressed-tensors -> transformers -> kernels; transformers' own probe, is_kernels_available(), reads the
same import and the package's metadata, so importing transformers to ask it would only add seconds)."""
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_scratch_real_package_wins_and_registry_loads_once(tmp_path):
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("__version__ = 'scratch'\nfrom kernels import hub\n")
    (site / "kernels" / "hub.py").write_text("def get_kernel(name):\n    return name\n")
    code = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(site)!r}]\n"
        "import kernels\n"
        "assert kernels.__version__ == 'scratch', kernels.__file__\n"
        "assert kernels.hub.get_kernel('x') == 'x' and sys.modules['kernels'] is kernels\n"
        "from conformance import registry\n"
        "registry.load_all()\n"
        "names = [k.name for k in registry.all_kernels()]\n"
        "assert 'triton_w4a16' in names and 'torch_dequant_w4a16' in names, names\n"
        "assert len(names) == len(set(names)), names\n"
        "mods = {type(k).__module__ for k in registry.all_kernels()}\n"
        "assert not [m for m in mods if m.split('.')[0] == 'kernels'], mods\n"
        "assert sys.modules['kernels'] is kernels\n"
        "print('OK')\n"
    )
    r = _run(code)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_no_package_means_not_installed():
    """No site-packages (-S, -I): `import kernels` gives only our directory as an empty namespace portion, which
    probes read as not installed (transformers' _is_package_available: no distribution, then no __file__ and no
    __version__ means a namespace shadowing on sys.path), and none of our kernel modules is imported."""
    code = (
        f"import importlib.metadata, sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import kernels\n"
        "assert getattr(kernels, '__file__', None) is None and not hasattr(kernels, '__version__'), kernels\n"
        f"assert list(kernels.__path__) == [{str(ROOT / 'kernels')!r}], kernels.__path__\n"
        "assert not [m for m in sys.modules if m.startswith('kernels.')]\n"
        "try:\n"
        "    importlib.metadata.version('kernels')\n"
        "except importlib.metadata.PackageNotFoundError:\n"
        "    print('OK')\n"
    )
    r = _run(code, "-S", "-I")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_pypi_kernels_package_wins_where_installed():
    try:
        version = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the PyPI package `kernels` is not installed here (the interop extra brings it)")
    code = (
        f"import os, sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import kernels\n"
        # not our directory (the venv itself may sit inside the checkout: the README's .venv does)
        f"assert os.path.dirname(os.path.realpath(kernels.__file__)) != {str((ROOT / 'kernels').resolve())!r}\n"
        f"assert kernels.__version__ == {version!r}, kernels.__version__\n"
        "assert callable(kernels.get_kernel)\n"
        "print('OK')\n"
    )
    r = _run(code)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
