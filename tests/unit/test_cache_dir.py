"""Files the suite writes for itself (nightly example database, inductor cache) go under the user cache dir,
never into the current directory or the install location."""
from pathlib import Path

from hypothesis import settings

from conformance.cases import profiles
from conformance.core.tree import cache_dir


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir("x") == tmp_path / "c" / "x"
    monkeypatch.delenv("CONFORMANCE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "quant-kernel-conformance"


def test_nightly_example_database_lives_in_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path))
    try:
        profiles.register_hypothesis_profiles()
        for name in ("nightly", "exhaustive"):
            db = settings.get_profile(profiles.get_profile(name).hypothesis_profile).database
            assert Path(db.path).resolve() == (tmp_path / "hypothesis").resolve(), (name, db.path)
        assert settings.get_profile(profiles.get_profile("ci").hypothesis_profile).database is None
    finally:
        monkeypatch.delenv("CONFORMANCE_CACHE_DIR")
        profiles.register_hypothesis_profiles()
