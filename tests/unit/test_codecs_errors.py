"""Bad input to every codec gets InvalidInput naming the field, the value, and what is allowed."""
from __future__ import annotations

import pytest
import torch
from codec_weights import random_weight

from references import codecs
from references.checkpoint import Checkpoint
from references.codecs import awq, gptq
from references.codecs import compressed_tensors as ct
from references.codecs import operands as ops
from references.errors import InvalidInput

I32 = torch.int32
q88 = torch.zeros(8, 8, dtype=I32)


def w4(**kw):
    return random_weight(3, 32, 24, 16, "uint4", zeros_fill=kw.pop("zeros_fill", 5), **kw)


def with_tensor(fmt, name, value, **enc):
    """A valid checkpoint of `fmt` (K=32, N=24, G=2) with tensor `name` replaced (None deletes it)."""
    ck = codecs.encode(w4(), fmt, **enc)
    if value is None:
        del ck.tensors[name]
    else:
        ck.tensors[name] = value
    return ck


def config(fmt, **kw):
    """A valid checkpoint of `fmt` with a config field replaced."""
    ck = codecs.encode(w4(), fmt)
    for k, v in kw.items():
        setattr(ck, k, v)
    return ck


CASES = [
    # (id, call, field, value text that must appear in the message)
    ("q 1-D", lambda: gptq.pack_qweight(torch.zeros(8, dtype=I32)), "q.shape", "(8,)"),
    ("q int64", lambda: gptq.pack_qweight(torch.zeros(8, 8, dtype=torch.int64)), "q.dtype", "torch.int64"),
    ("q value 16", lambda: gptq.pack_qweight(torch.full((8, 8), 16, dtype=I32)), "values", "16"),
    ("q value -1", lambda: awq.pack_qweight(torch.full((8, 8), -1, dtype=I32)), "values", "-1"),
    ("8-bit value 256", lambda: gptq.pack_qweight(torch.full((4, 8), 256, dtype=I32), bits=8), "values", "256"),
    ("bits 3", lambda: gptq.pack_qweight(q88, bits=3), "bits", "3"),
    ("gptq K % 8", lambda: gptq.pack_qweight(torch.zeros(12, 8, dtype=I32)), "K", "12"),
    ("awq N % 8", lambda: awq.pack_qweight(torch.zeros(8, 12, dtype=I32)), "N", "12"),
    ("ct K % 8", lambda: ct.pack_weight(torch.zeros(12, 8, dtype=I32)), "K", "12"),
    ("triton N % 8", lambda: ops.triton_pack_qweight(torch.zeros(8, 4, dtype=I32)), "N", "4"),
    ("zeros_gn N % 8", lambda: ops.pack_zeros_gn(torch.zeros(2, 10, dtype=I32)), "N", "10"),
    ("zeros_ng N % 8", lambda: ops.pack_zeros_ng(torch.zeros(2, 10, dtype=I32)), "N", "10"),
    ("exllama K % 8", lambda: ops.exllama_shuffle(torch.zeros(4, 8, dtype=I32)), "K", "4"),
    ("hybrid K % 8", lambda: ops.hybrid_pack_qweight(torch.zeros(20, 8, dtype=I32)), "K", "20"),
    ("qweight float", lambda: ops.triton_unpack_qweight(torch.zeros(2, 2)), "qweight.dtype", "torch.float32"),
    ("exllama g_idx length", lambda: ops.exllama_shuffle(q88, torch.zeros(4, dtype=I32)), "g_idx.shape", "(4,)"),
    ("exllama q_perm not a permutation",
     lambda: ops.exllama_unshuffle(torch.zeros(1, 8, dtype=I32), torch.zeros(8, dtype=torch.int64)),
     "q_perm", "not a permutation"),
    ("hybrid int8 view width", lambda: ops.hybrid_unpack_qweight(torch.zeros(2, 6, dtype=torch.int8)),
     "qweight.shape", "(2, 6)"),
    ("v1 zero point 0 refused", lambda: codecs.encode(w4(zeros_fill=0), "gptq_v1"), "zeros",
     "0 at [group 0, column 0]"),
    ("bad v1 policy", lambda: codecs.encode(w4(), "gptq_v1", v1_zero_policy="wrap"), "v1_zero_policy", "wrap"),
    ("bad version", lambda: gptq.encode(w4(), version="v3"), "version", "v3"),
    ("awq act-order", lambda: codecs.encode(w4(act_order=True), "awq"), "g_idx", "act-order"),
    ("awq 8-bit", lambda: codecs.encode(random_weight(0, 16, 8, 8, "uint8"), "awq"), "wtype", "uint8"),
    ("unknown format", lambda: codecs.encode(w4(), "gguf"), "format", "gguf"),
    ("unknown policy", lambda: codecs.encode(w4(), "awq", v1_zero_policy="borrow"), "policy", "v1_zero_policy"),
    ("version via policy", lambda: codecs.encode(w4(), "gptq_v1", version="v2"), "policy", "version"),
    ("not a weight", lambda: codecs.encode(q88, "gptq_v2"), "weight", "Tensor"),
    ("not a checkpoint", lambda: codecs.decode(q88), "ckpt", "Tensor"),
    # decode: tensors that do not match the checkpoint's config
    ("gptq qweight shape", lambda: codecs.decode(with_tensor("gptq_v2", "qweight", torch.zeros(24, 4, dtype=I32))),
     "qweight.shape", "(24, 4)"),
    ("gptq qweight dtype", lambda: codecs.decode(with_tensor("gptq_v2", "qweight", torch.zeros(4, 24))),
     "qweight.dtype", "torch.float32"),
    ("gptq scales int", lambda: codecs.decode(with_tensor("gptq_v2", "scales", torch.zeros(2, 24, dtype=I32))),
     "scales.dtype", "torch.int32"),
    ("gptq scales shape", lambda: codecs.decode(with_tensor("gptq_v2", "scales", torch.zeros(24, 2))),
     "scales.shape", "(24, 2)"),
    ("gptq qzeros missing", lambda: codecs.decode(with_tensor("gptq_v1", "qzeros", None)), "tensors['qzeros']",
     "missing"),
    ("gptq qzeros in ct layout [N/8, G]",
     lambda: codecs.decode(with_tensor("gptq_v2", "qzeros", torch.zeros(3, 2, dtype=I32))), "qzeros.shape", "(3, 2)"),
    ("gptq g_idx float", lambda: codecs.decode(with_tensor("gptq_v2", "g_idx", torch.zeros(32))), "g_idx.dtype",
     "torch.float32"),
    ("gptq K % group", lambda: codecs.decode(config("gptq_v2", group_size=24)), "group_size", "24"),
    ("gptq N % 8", lambda: codecs.decode(config("gptq_v2", N=12)), "N", "12"),
    ("awq g_idx present", lambda: codecs.decode(with_tensor("awq", "g_idx", torch.zeros(32, dtype=I32))),
     "tensors['g_idx']", "present"),
    ("awq qweight shape", lambda: codecs.decode(with_tensor("awq", "qweight", torch.zeros(3, 32, dtype=I32))),
     "qweight.shape", "(3, 32)"),
    # the compressed-tensors zero point given in GPTQ layout [G, N/8] instead of [N/8, G]
    ("ct zero point in gptq layout [G, N/8]",
     lambda: codecs.decode(with_tensor("compressed_tensors", "weight_zero_point", torch.zeros(2, 3, dtype=I32))),
     "weight_zero_point.shape", "(2, 3)"),
    ("ct weight_shape",
     lambda: codecs.decode(with_tensor("compressed_tensors", "weight_shape", torch.tensor([32, 24]))),
     "weight_shape", "[32, 24]"),
    ("ct scale not transposed",
     lambda: codecs.decode(with_tensor("compressed_tensors", "weight_scale", torch.zeros(2, 24, dtype=torch.float16))),
     "weight_scale.shape", "(2, 24)"),
    ("ct packed missing", lambda: codecs.decode(with_tensor("compressed_tensors", "weight_packed", None)),
     "tensors['weight_packed']", "missing"),
]


@pytest.mark.parametrize("call, field, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_field_and_value(call, field, text):
    with pytest.raises(InvalidInput) as e:
        call()
    assert e.value.field == field, str(e.value)
    assert text in str(e.value), str(e.value)
    assert "allowed:" in str(e.value)


def test_inconsistent_g_idx_in_a_checkpoint_is_refused():
    ck = codecs.encode(w4(), "gptq_v2")
    ck.tensors["g_idx"] = torch.full((32,), 7, dtype=I32)  # group 7 does not exist (G = 2)
    with pytest.raises(InvalidInput) as e:
        codecs.decode(ck)
    assert e.value.field == "g_idx"


def test_unknown_checkpoint_format_is_refused_at_construction():
    with pytest.raises(ValueError, match="format='gguf'"):
        Checkpoint("gguf", {}, "uint4", -1, 8, 8, torch.float16)
