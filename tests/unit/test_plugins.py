"""External kernels: every loading route registers the example plugin; a broken plugin is a loud error."""
import json
import os
import sys
from pathlib import Path

import pytest

from conformance import cli
from conformance.core import registry
from tests import warm_python

ROOT = Path(__file__).resolve().parents[2]
UNIT = Path(__file__).resolve().parent
EXAMPLE = "example_dequant_w4a16"


@pytest.fixture
def plugin_path(monkeypatch):
    """tests/unit importable, and the example plugin forgotten again afterwards (the registry is global)."""
    monkeypatch.syspath_prepend(str(UNIT))
    monkeypatch.delenv(registry.PLUGIN_ENV, raising=False)
    yield
    registry.unregister_kernel(EXAMPLE)
    registry._loaded_plugins.difference_update({"example_plugin", "broken_plugin"})
    for mod in [m for m in sys.modules if m.split(".")[0] in ("example_plugin", "broken_plugin")]:
        del sys.modules[mod]


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text('raise ImportError("libexample_hip.so: cannot open shared object")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return "broken_plugin"


def _subprocess_env(*extra_paths, **env):
    e = {k: v for k, v in os.environ.items() if k != registry.PLUGIN_ENV}
    e["PYTHONPATH"] = os.pathsep.join([*map(str, extra_paths), str(ROOT)])
    e.update(env)
    return e


def test_not_loaded_unless_asked(plugin_path):
    assert EXAMPLE not in {k.name for k in registry.all_kernels()}


def test_env_var(plugin_path, monkeypatch):
    monkeypatch.setenv(registry.PLUGIN_ENV, " example_plugin , ")
    registry.load_all()
    k = registry.get_kernel(EXAMPLE)
    assert k.family == "w4a16" and k.priority == -10


def test_cli_plugin_option(plugin_path, capsys):
    assert cli.main(["--plugin", "example_plugin", "select", "--target", "gfx1100", "--weight-type", "uint4",
                     "--group-size", "128", "--kernels", f"triton_w4a16,{EXAMPLE}"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "selected: triton_w4a16"
    assert f"refused: {EXAMPLE}: weight_type='uint4' not supported (allowed: uint4b8)" in out


@pytest.mark.parametrize("route", ["cli", "env"])
def test_broken_plugin_is_exit_2_naming_the_module(plugin_path, broken_plugin, monkeypatch, capsys, route):
    argv = ["list"]
    if route == "cli":
        argv = ["--plugin", broken_plugin, *argv]
    else:
        monkeypatch.setenv(registry.PLUGIN_ENV, f"example_plugin,{broken_plugin}")
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"'{broken_plugin}' failed to import" in err and "libexample_hip.so" in err


def test_missing_plugin_module_is_an_error(plugin_path):
    with pytest.raises(registry.RegistryError, match="'no_such_conformance_plugin' failed to import"):
        registry.load_plugin("no_such_conformance_plugin")


def _fake_distribution(site: Path, entry: str) -> None:
    """What `pip install` of a plugin package leaves on sys.path: a dist-info with entry_points.txt."""
    d = site / "example_conformance_plugin-0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: example-conformance-plugin\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(f"[conformance.kernels]\nexample = {entry}\n")


def test_entry_point_of_an_installed_distribution(tmp_path):
    _fake_distribution(tmp_path / "site", "example_plugin")
    p = warm_python.run([sys.executable, "-m", "conformance", "list", "--json"], cwd=tmp_path, timeout=180,
                       capture_output=True, text=True, env=_subprocess_env(tmp_path / "site", UNIT))
    assert p.returncode == 0, p.stderr
    names = [k["name"] for k in json.loads(p.stdout)["kernels"]]
    assert EXAMPLE in names and "triton_w4a16" in names


def test_broken_entry_point_is_exit_2(tmp_path, broken_plugin):
    _fake_distribution(tmp_path / "site", "broken_plugin")
    p = warm_python.run([sys.executable, "-m", "conformance", "list"], cwd=tmp_path, timeout=180,
                       capture_output=True, text=True, env=_subprocess_env(tmp_path / "site", tmp_path))
    assert p.returncode == 2 and p.stdout == ""
    assert "entry point 'example' (broken_plugin) failed to load" in p.stderr and "libexample_hip.so" in p.stderr


def test_pytest_option(tmp_path):
    (tmp_path / "test_sees_plugin.py").write_text(
        "from conformance import registry\n\n"
        "def test_registered():\n"
        f"    assert registry.get_kernel({EXAMPLE!r}).priority == -10\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider",
           "--conformance-plugin", "example_plugin", str(tmp_path / "test_sees_plugin.py")]
    p = warm_python.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                       env=_subprocess_env(UNIT))
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr


def test_a_dist_info_in_the_current_directory_is_not_an_installation(tmp_path, monkeypatch):
    """`python -m` puts the current directory on sys.path; a stray *.dist-info there must not be imported."""
    _fake_distribution(tmp_path / "cwd", "example_plugin")
    _fake_distribution(tmp_path / "site", "example_plugin")
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.syspath_prepend("")
    monkeypatch.syspath_prepend(str(tmp_path / "cwd"))
    assert [ep.value for ep in registry.installed_entry_points()] == []
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    eps = registry.installed_entry_points()
    assert [(ep.name, ep.value) for ep in eps] == [("example", "example_plugin")]


def test_entry_point_discovery_can_be_turned_off(tmp_path, monkeypatch, plugin_path):
    _fake_distribution(tmp_path / "site", "example_plugin")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(registry.NO_ENTRY_POINTS_ENV, "1")
    registry.load_all()
    assert EXAMPLE not in {k.name for k in registry.all_kernels()}
    registry.load_all(entry_points=True)
    assert EXAMPLE in {k.name for k in registry.all_kernels()}
