"""Our kernels/ directory must never be imported as `kernels`: that name belongs to a popular PyPI package.

A fake `kernels` package placed first on sys.path marks itself (a file) and raises when imported; loading
every built-in kernel must neither touch it nor need it.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, sys
    from conformance import registry
    registry.load_all()
    import conformance.cli, conformance.reports.coverage  # the CLI path too
    ours = sorted(n for n, m in sys.modules.items()
                  if (getattr(m, "__file__", None) or "").startswith(sys.argv[1]))
    print(json.dumps({"kernels": [k.name for k in registry.all_kernels()], "modules": ours,
                      "kernels_in_sys_modules": sorted(n for n in sys.modules
                                                       if n == "kernels" or n.startswith("kernels."))}))
""")


def test_fake_kernels_package_first_on_path_is_never_imported(tmp_path):
    fake = tmp_path / "site" / "kernels"
    fake.mkdir(parents=True)
    marker = tmp_path / "fake_kernels_was_imported"
    (fake / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "raise ImportError('this is the PyPI kernels hub, not the conformance suite')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(ROOT)]))
    env.pop("CONFORMANCE_PLUGINS", None)
    # cwd is not the repo, so nothing but PYTHONPATH decides what `kernels` would mean
    p = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "kernels")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert not marker.exists(), "the fake PyPI `kernels` package was imported"
    assert out["kernels_in_sys_modules"] == []
    assert {"triton_w4a16", "torch_dequant_w4a16"} <= set(out["kernels"])
    # every module loaded from our kernels/ directory lives under the distinctive name
    assert out["modules"] and all(m.split(".")[0] == "conformance_kernels" for m in out["modules"]), out["modules"]
