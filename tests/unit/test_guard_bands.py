"""Guard bands: allocations made during a kernel call carry poisoned bands; a write into one is a FAIL verdict
("wrote past the end of an output allocation: ..."), for plain torch and for Triton in the interpreter, while a
correct kernel is unaffected."""
from __future__ import annotations

import pytest
import torch

from conformance.core.runtime import configure_triton

configure_triton()  # before any @triton.jit below: on a CPU host Triton runs in its interpreter

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from conformance.cases.ids import parse_case_id  # noqa: E402
from conformance.checks.execution import (  # noqa: E402
    GUARD_BYTES,
    INT_POISON,
    OutOfBoundsWrite,
    guarded_allocations,
)
from conformance.checks.harness import run_case  # noqa: E402
from conformance.core import registry  # noqa: E402
from conformance.core.targets import CPU  # noqa: E402

registry.load_all()
BASE = type(registry.get_kernel("torch_dequant_w4a16"))
CASE = "w4a16/{k}/M=3,N=16,K=64,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=7"


class PastTheEnd(BASE):
    """Writes its result into torch.empty, then one element past the end through an as_strided view."""

    name = "test_guard_past_end"

    def apply(self, w, x):
        y = super().apply(w, x)
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        out.copy_(y)
        torch.as_strided(out, (2,), (1,), out.storage_offset() + out.numel()).fill_(1.0)  # BUG: 2 past the end
        return out


class BeforeTheStart(BASE):
    """Writes one element before the start of its output (storage_offset - 1)."""

    name = "test_guard_before_start"

    def apply(self, w, x):
        y = super().apply(w, x)
        out = torch.empty_like(y)
        out.copy_(y)
        torch.as_strided(out, (1,), (1,), out.storage_offset() - 1).fill_(0.0)  # BUG
        return out


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr, OFF_BY_ONE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(src + offs, mask=offs < n, other=0.0)
    if OFF_BY_ONE:
        tl.store(dst + offs, v, mask=offs <= n)  # BUG: the store mask admits offs == n
    else:
        tl.store(dst + offs, v, mask=offs < n)


class TritonStore(BASE):
    """Copies its result into torch.empty with a Triton kernel (interpreter here); `off_by_one` breaks the mask."""

    name = "test_guard_triton_ok"
    off_by_one = False

    def apply(self, w, x):
        y = super().apply(w, x).contiguous()
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        n = y.numel()
        _copy_kernel[(triton.cdiv(n, 32),)](y, out, n, BLOCK=32, OFF_BY_ONE=self.off_by_one)
        return out


class TritonStoreOffByOne(TritonStore):
    name = "test_guard_triton_off_by_one"
    off_by_one = True


@pytest.fixture
def kernels(monkeypatch):
    from conformance.core import results

    monkeypatch.setattr(results, "record", lambda *a, **kw: None)
    ks = [PastTheEnd(), BeforeTheStart(), TritonStore(), TritonStoreOffByOne()]
    for k in ks:
        registry.register_kernel(k)
    yield
    for k in ks:
        registry.unregister_kernel(k.name)


def _run(name):
    return run_case(parse_case_id(CASE.format(k=name)), target=CPU, record=False)


def test_torch_write_past_the_end_fails(kernels):
    v = _run("test_guard_past_end")
    assert v.outcome == "fail", v.line()
    assert v.detail == ("wrote past the end of an output allocation: 2 elements after the end, first at +0 "
                        "(torch.float16 [3, 16])"), v.line()


def test_torch_write_before_the_start_fails(kernels):
    v = _run("test_guard_before_start")
    assert v.outcome == "fail", v.line()
    assert v.detail.startswith("wrote before the start of an output allocation: 1 elements before the start, "
                               "first at -1"), v.line()


def test_triton_store_mask_off_by_one_fails_in_the_interpreter(kernels):
    ok = _run("test_guard_triton_ok")
    assert ok.outcome == "pass" and ok.run_mode == "device" and ok.detail == "bit-exact", ok.line()
    v = _run("test_guard_triton_off_by_one")
    assert v.outcome == "fail", v.line()
    assert v.detail.startswith("wrote past the end of an output allocation: 1 elements after the end, "
                               "first at +0"), v.line()


def test_correct_kernels_are_unaffected():
    for name in ("torch_dequant_w4a16", "triton_w4a16"):
        v = _run(name)
        assert v.outcome == "pass" and v.detail.startswith("bit-exact"), v.line()  # GPU host: a model run


# ---- the context manager itself --------------------------------------------------------------------------------

def test_every_wrapped_allocator_is_guarded_and_restored():
    plain = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)
    src = torch.zeros(4, 6).t()  # non-contiguous: empty_like keeps its strides
    with guarded_allocations() as recs:
        a = torch.empty(3, 5, dtype=torch.float16)
        b = torch.empty_like(src)
        c = torch.empty_strided((2, 3), (1, 4), dtype=torch.int32)
        d = src.new_empty((7,), dtype=torch.uint8)
        e = torch.empty(size=(2, 2))
        for t in (a, b, c, d, e):
            t.fill_(1)  # every in-bounds element written: nothing trips
    assert (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty) == plain
    assert len(recs) == 5 and b.stride() == src.stride() and c.stride() == (1, 4)
    for t in (a, b, c, d, e):
        assert t.storage_offset() * t.element_size() == GUARD_BYTES  # aligned exactly as the buffer
    # bands: NaN for floats, INT_POISON bytes for ints
    assert torch.isnan(recs[0].buf[:GUARD_BYTES // 2]).all()
    assert (recs[2].buf.view(torch.uint8)[:GUARD_BYTES] == INT_POISON).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_a_changed_band_byte_raises(dtype):
    with pytest.raises(OutOfBoundsWrite, match=r"past the end .*: 3 elements after the end, first at \+4 "):
        with guarded_allocations():
            t = torch.empty(10, dtype=dtype)
            torch.as_strided(t, (3,), (2,), t.storage_offset() + 14).fill_(7)  # elements 14, 16, 18 -> +4, +6, +8


def test_unguarded_calls_fall_through():
    with guarded_allocations() as recs:
        torch.empty(0)  # empty tensors, meta tensors, out= / requires_grad: not guarded
        torch.empty(3, device="meta")
        torch.empty(3, requires_grad=True)
        torch.empty(3, out=torch.zeros(3))
    assert recs == []


def test_an_exception_inside_skips_the_check_and_restores():
    before = torch.empty
    with pytest.raises(ValueError):
        with guarded_allocations():
            t = torch.empty(4)
            torch.as_strided(t, (1,), (1,), t.storage_offset() + 4).fill_(0)
            raise ValueError("kernel raised")
    assert torch.empty is before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_tensors_are_guarded():
    with pytest.raises(OutOfBoundsWrite, match=r"1 elements after the end, first at \+0"):
        with guarded_allocations():
            t = torch.empty(33, device="cuda")
            torch.as_strided(t, (1,), (1,), t.storage_offset() + 33).fill_(0)
    with guarded_allocations() as recs:
        torch.empty(33, device="cuda").fill_(0)
    assert recs[0].buf.is_cuda
