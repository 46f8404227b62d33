"""The vLLM adapter across releases, without a real vLLM: the lazy imports of 0.34.0 and the hybrid's GEMV rule of
0.26.0-0.34.0.

vllm_platform.set_import_platform: a vLLM module first imported inside a simulated target's call runs its
import-time code under the platform vLLM was imported under, then answers to the current one.

vLLM 0.34.0's `replace_parameter` imports `vllm.model_executor.model_loader` lazily, inside
`process_weights_after_loading`; its attention modules ask `current_platform.is_cuda()` at import and then import the
compiled flash-attention extension. Under a simulated sm90 on a CPU host that import failed every TritonW4A16 case of
the process that loaded first. A fake `vllm` package (written under tmp_path) stands in: no real vLLM is imported."""
from __future__ import annotations

import sys

import pytest

from conformance.adapters import vllm_platform

PLATFORMS = '''
_current_platform = None


def __getattr__(name):
    if name == "current_platform":
        return _current_platform
    raise AttributeError(name)
'''
# imported lazily: asks the platform at import (as vllm/v1/attention/backends/fa_utils.py does) and imports another
LAZY_OUTER = '''
from vllm.platforms import current_platform
SEEN_AT_IMPORT = current_platform
from vllm import lazy_inner  # noqa: E402,F401
'''
LAZY_INNER = '''
from vllm.platforms import current_platform
SEEN_AT_IMPORT = current_platform
'''


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    pkg = tmp_path / "vllm"
    (pkg / "platforms").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "platforms" / "__init__.py").write_text(PLATFORMS)
    (pkg / "lazy_outer.py").write_text(LAZY_OUTER)
    (pkg / "lazy_inner.py").write_text(LAZY_INNER)
    saved = {n: m for n, m in sys.modules.items() if n == "vllm" or n.startswith("vllm.")}
    for n in saved:
        del sys.modules[n]
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(vllm_platform, "_IMPORT_PLATFORM", [None])
    import vllm.platforms

    yield vllm.platforms
    for n in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[n]
    sys.modules.update(saved)


def test_lazy_import_runs_under_the_import_platform_then_answers_to_the_current_one(fake_vllm):
    importing, simulated = object(), object()
    vllm_platform.set_import_platform(importing)
    fake_vllm._current_platform = simulated  # inside as_target(sm90): the simulated platform is current
    import vllm.lazy_inner
    import vllm.lazy_outer

    assert vllm.lazy_outer.SEEN_AT_IMPORT is importing
    assert vllm.lazy_inner.SEEN_AT_IMPORT is importing  # imported by the lazy module, inside its import
    assert vllm.lazy_outer.current_platform is simulated  # from then on it answers as every other module does
    assert vllm.lazy_inner.current_platform is simulated
    assert fake_vllm._current_platform is simulated


def test_without_an_import_platform_nothing_is_wrapped(fake_vllm):
    simulated = object()
    fake_vllm._current_platform = simulated
    import vllm.lazy_outer

    assert vllm.lazy_outer.SEEN_AT_IMPORT is simulated
    assert not isinstance(vllm.lazy_outer.__loader__, vllm_platform._ImportTimeLoader)


def test_hybrid_gemv_route_follows_each_releases_rule(monkeypatch):
    """The hybrid's GEMV rule as each release writes it: K * M <= LDS_CAPACITY_ELEMENTS (0.26.0-0.31.0), the
    MEDIUM_SKINNY_LIMIT_ELEMENTS (0.32.0), plus every M <= 5 on gfx115x (0.33.0, `_on_gfx115x`)."""
    import types

    from conformance.adapters.vllm import VllmMPLinearAdapter

    def adapter_of(name, **consts):
        mod = types.ModuleType(name)
        vars(mod).update(MAX_SKINNY_BATCH_SIZE=5, **consts)
        cls = type("RDNAHybridW4A16LinearKernel", (), {"__module__": name})
        monkeypatch.setitem(sys.modules, name, mod)
        return types.SimpleNamespace(vllm_cls=cls)

    old = adapter_of("fake_hybrid_0_29", LDS_CAPACITY_ELEMENTS=100)
    assert VllmMPLinearAdapter._gemv_route(old, 5, 20, None) is True
    assert VllmMPLinearAdapter._gemv_route(old, 5, 21, None) is False
    assert VllmMPLinearAdapter._gemv_route(old, 6, 1, None) is False
    medium = adapter_of("fake_hybrid_0_32", LDS_CAPACITY_ELEMENTS=100, MEDIUM_SKINNY_LIMIT_ELEMENTS=120)
    assert VllmMPLinearAdapter._gemv_route(medium, 5, 24, None) is True
    assert VllmMPLinearAdapter._gemv_route(medium, 5, 25, None) is False
