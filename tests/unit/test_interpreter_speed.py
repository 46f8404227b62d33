"""The interpreter's overflow sanitizer is skipped (conformance.core.interpreter_speed) only where its asserts are
off, and skipping it changes no result: an int32 computation that overflows wraps the same way, and a
triton_w4a16 call gives the same bits."""
from __future__ import annotations

import contextlib

import pytest
import torch

from conformance.core.runtime import configure_triton, interpreting

configure_triton()  # before the @triton.jit kernel below: it must be an interpreted function

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from conformance.core import interpreter_speed as speed  # noqa: E402
from references.errors import InvalidInput  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreting(), reason="Triton runs on a GPU here, not in the interpreter")


@triton.jit
def _wrap_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 65536 + x - 7, mask=mask)  # int32: overflows for |x| >= 32768


@contextlib.contextmanager
def _sanitizer_kept():
    """The interpreter as upstream runs it (sanitizer on); the skip comes back afterwards."""
    speed.remove()
    try:
        yield
    finally:
        speed.apply()


def _options():
    from triton.runtime import interpreter as interp

    return interp.interpreter_builder.options


def test_applied_here_and_only_with_asserts_off():
    assert speed.status()["applied"], speed.status()
    assert _options().sanitize_overflow is False and _options().debug is False
    with _sanitizer_kept():
        assert _options().sanitize_overflow is True and not speed.status()["applied"]
    assert _options().sanitize_overflow is False


def test_overflowing_int32_wraps_the_same_with_and_without_the_sanitizer():
    x = torch.tensor([1, -3, 32767, 32768, 2**31 - 1, -(2**31), 123456789], dtype=torch.int32)
    want = (x.to(torch.int64) * 65537 - 7).remainder(2**32)
    want = torch.where(want >= 2**31, want - 2**32, want).to(torch.int32)  # two's complement wrap
    outs = []
    for ctx in (contextlib.nullcontext(), _sanitizer_kept()):
        y = torch.empty_like(x)
        with ctx:
            _wrap_kernel[(1,)](x, y, x.numel(), BLOCK=8)
        outs.append(y)
    assert torch.equal(outs[0], want) and torch.equal(outs[1], want), outs


def test_triton_w4a16_gives_the_same_bits_with_and_without_the_sanitizer():
    from conformance.core import registry
    from references import codecs
    from references.generators import random_activations, random_canonical

    registry.load_all()
    k = registry.get_kernel("triton_w4a16")
    w = random_canonical(160, 40, 32, "uint4", torch.float16, "normal", 5)  # an N tail, a K tail, 5 groups
    x = random_activations(3, 160, torch.float16, "normal", 5)
    p = k.load(codecs.encode(w, "gptq_v2"))
    fast = k.apply(p, x)
    with _sanitizer_kept():
        slow = k.apply(p, x)
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))


def test_the_variable_keeps_the_sanitizer_and_bad_values_are_refused(monkeypatch):
    with _sanitizer_kept():
        monkeypatch.setenv(speed.ENV, "on")
        assert not speed.apply()["applied"] and "kept by" in speed.status()["reason"]
        assert _options().sanitize_overflow is True
        monkeypatch.setenv(speed.ENV, "sometimes")
        with pytest.raises(InvalidInput, match=f"{speed.ENV}='sometimes' is invalid; allowed: on or off"):
            speed.apply()
        monkeypatch.delenv(speed.ENV)
