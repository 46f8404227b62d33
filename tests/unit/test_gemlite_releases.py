"""The GemLite adapter on GemLite releases before 0.4.8, whose A16Wn(device) takes no dtype and packs fp16 only (the
release bisect of GemLite's bf16 NaN walks them): the gate refuses bf16 there with the reason (a skip, not a
failure), and fp16 loads call A16Wn without dtype and with bias=None (a required argument then). Fake `gemlite`
modules stand in: GemLite itself imports only on a CUDA machine."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from conformance.api import W4A16Config, parse_target


def _fake_gemlite(monkeypatch, init_params: str, calls: list):
    helper = types.ModuleType("gemlite.helper")
    ns: dict = {}
    body = "    calls.append(('init', device, locals().get('dtype')))\n"
    exec(f"def __init__(self, {init_params}):\n{body}", {"calls": calls}, ns)

    def from_weights(self, W_q, scales, zeros, W_nbits, group_size, bias):
        calls.append(("from_weights", scales.dtype, bias))
        return "packed"

    helper.A16Wn = type("A16Wn", (), {"__init__": ns["__init__"], "from_weights": from_weights})
    monkeypatch.setitem(sys.modules, "gemlite", types.ModuleType("gemlite"))
    monkeypatch.setitem(sys.modules, "gemlite.helper", helper)


CFG = dict(weight_type="uint4", group_size=128, act_order=False, format="gptq_v2", N=64, K=256)


@pytest.mark.parametrize("init_params, bf16_ok", [
    ("device='cuda:0', post_scale=False", False),                               # 0.4.3 .. 0.4.7
    ("device='cuda:0', dtype=None, packing_bitwidth=None, post_scale=False", True),  # 0.4.8 and later
])
def test_bf16_is_refused_where_a16wn_has_no_dtype(monkeypatch, init_params, bf16_ok):
    from conformance.adapters.gemlite import GemLiteA16W4

    calls: list = []
    _fake_gemlite(monkeypatch, init_params, calls)
    k, t = GemLiteA16W4(), parse_target("sm90")
    assert k.can_implement(W4A16Config(dtype="float16", **CFG), t) is None
    why = k.can_implement(W4A16Config(dtype="bfloat16", **CFG), t)
    assert (why is None) if bf16_ok else why.startswith("dtype='bfloat16' not supported by this GemLite release"), why


def test_fp16_load_without_dtype_and_with_bias_none(monkeypatch):
    from conformance.adapters.gemlite import GemLiteA16W4
    from references import codecs
    from references.generators import random_canonical

    calls: list = []
    _fake_gemlite(monkeypatch, "device='cuda:0', packing_bitwidth=32, post_scale=False", calls)  # 0.4.0
    w = random_canonical(256, 64, 128, "uint4", torch.float16, "exact", 1)
    assert GemLiteA16W4().load(codecs.encode(w, "gptq_v2")) == "packed"
    assert calls[0][0] == "init" and calls[0][2] is None  # no dtype passed
    assert calls[1] == ("from_weights", torch.float16, None)
