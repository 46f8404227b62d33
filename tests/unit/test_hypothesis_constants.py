"""Draws must not depend on which local modules a process has imported (same seed, same cases on -n 1 and
-n 2): hypothesis would otherwise mix literal constants of imported local modules into its draws."""
import importlib
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.cases import profiles


def _draws() -> list[int]:
    out = []

    @settings(derandomize=True, max_examples=300, database=None, deadline=None)
    @given(st.integers(0, 10**12))
    def collect(v):
        out.append(v)

    collect()
    return out


def test_draws_ignore_constants_of_newly_imported_local_modules(tmp_path, monkeypatch):
    assert profiles.freeze_local_constants()
    before = _draws()
    magic = ", ".join(str(987654321 + i) for i in range(50))
    (tmp_path / "odd_constants_mod.py").write_text(f"MAGIC = [{magic}]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("odd_constants_mod")
    try:
        after = _draws()
    finally:
        sys.modules.pop("odd_constants_mod", None)
    assert before == after
    assert not any(987654321 <= v < 987654371 for v in after)
