"""Our kernels/ directory, reached as `kernels` through the repo root on sys.path, must stay inert, so that
third-party probes for the PyPI `kernels` package (transformers imports it to read a version) neither
register our kernels twice nor mistake it for the real package."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_as_kernels_is_inert_and_registry_still_loads():
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import kernels\n"
        "assert not hasattr(kernels, '__version__')\n"
        "assert not [m for m in sys.modules if m.startswith('kernels.')], 'kernels.* submodules imported'\n"
        "from conformance import registry\n"
        "registry.load_all()\n"
        "names = [k.name for k in registry.all_kernels()]\n"
        "assert 'triton_w4a16' in names and 'torch_dequant_w4a16' in names, names\n"
        "assert all(type(k).__module__.startswith('conformance_kernels.') for k in registry.all_kernels()\n"
        "           if type(k).__module__.split('.')[0] in ('kernels', 'conformance_kernels'))\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_transformers_probe_sees_no_kernels_package():
    """transformers' is_kernels_available() must say False with our repo root first on sys.path."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "try:\n"
        "    from transformers.utils.import_utils import is_kernels_available\n"
        "except ImportError:\n"
        "    print('SKIP'); raise SystemExit(0)\n"
        "assert is_kernels_available() is False\n"
        "assert not [m for m in sys.modules if m.startswith('kernels.')]\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout or "SKIP" in r.stdout
