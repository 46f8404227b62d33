"""triton_w4a16's compile_key: the plugin groups plan cases by it on a GPU (one worker loads or compiles each
specialization). Checked on CPU with the device faked: equal for cases Triton compiles alike, different where a
constexpr or an int class differs, None in the interpreter."""
import pytest

from conformance.cases.ids import parse_case_id
from conformance.core import registry, runtime

BASE = "w4a16/triton_w4a16/M=3,N=64,K=256,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"


def _key(monkeypatch, case_id, kind="gpu"):
    tw = pytest.importorskip("conformance_kernels.triton_w4a16")
    monkeypatch.setattr(runtime, "kernel_device", lambda *a, **k: "cuda:0")
    monkeypatch.setattr(tw, "gpu_tile_kind", lambda dev: kind)
    monkeypatch.setattr(tw, "_sm_count", lambda dev: 132)  # the device's SMs size split-K (an H200's here)
    return registry.get_kernel("triton_w4a16").compile_key(parse_case_id(case_id))


def test_equal_for_the_same_specialization_and_different_otherwise(monkeypatch):
    base = _key(monkeypatch, BASE)
    assert base is not None
    assert _key(monkeypatch, BASE.replace("seed=1", "seed=7").replace("regime=exact", "regime=exact_wide")) == base
    assert _key(monkeypatch, BASE.replace("M=3", "M=4")) == base  # same tile row, int classes
    assert _key(monkeypatch, BASE.replace("M=3", "M=5")) == base  # the split reduce's blocks no longer follow M
    for other in (BASE.replace("dt=fp16", "dt=bf16"), BASE.replace("wt=uint4", "wt=uint4b8"),
                  BASE.replace("M=3", "M=1"), BASE.replace("N=64", "N=72"), BASE.replace("K=256", "K=288")):
        assert _key(monkeypatch, other) != base, other


def test_none_in_the_interpreter():
    if runtime.kernel_device() != "cpu":
        pytest.skip("a GPU host: the interpreter's None is checked on CPU machines")
    assert registry.get_kernel("triton_w4a16").compile_key(parse_case_id(BASE)) is None
