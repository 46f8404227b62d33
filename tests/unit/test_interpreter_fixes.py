"""The interpreter fixes: each bug shows without them, and with them bf16 dot, bf16 casts and fp8 casts
equal torch bit for bit (fp8 out of range: the GPU's saturation)."""
from __future__ import annotations

import warnings

import pytest
import torch

from conformance.core.runtime import configure_triton, interpreting

configure_triton()  # before the @triton.jit kernels below: they must be interpreted functions

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from conformance.core import interpreter_fixes as fixes  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not interpreting(), reason="Triton runs on a GPU here, not in the interpreter"),
    pytest.mark.skipif(triton.__version__ != fixes.PINNED_TRITON,
                       reason=f"interpreter fixes are pinned to triton {fixes.PINNED_TRITON}, "
                              f"installed {triton.__version__}"),
]

FP8 = {"float8_e4m3fn": (torch.float8_e4m3fn, tl.float8e4nv, 448.0),
       "float8_e4m3fnuz": (torch.float8_e4m3fnuz, tl.float8e4b8, 240.0)}
# a value whose rounding carries into the exponent, what the unfixed interpreter gives, what torch gives
CARRY = {"float8_e4m3fn": (126.3, 64.0, 128.0), "float8_e4m3fnuz": (63.3, 32.0, 64.0)}


@triton.jit
def _cast_kernel(x_ptr, y_ptr, n, DST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(DST), mask=mask)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def _cast(x: torch.Tensor, dst: torch.dtype, dst_tl) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=dst)
    block = 1024
    _cast_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), DST=dst_tl, BLOCK=block)
    return y


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    return int((_bits(got) != _bits(want)).sum())


def _fp8_probe_values(fp8: torch.dtype) -> torch.Tensor:
    """Every finite positive fp8 value, the ties between neighbours, one fp32 ulp either side of both,
    values below half the smallest subnormal, carries like 126.3, all with both signs (fp32)."""
    codes = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8).view(fp8).float()
    grid = codes[codes.isfinite() & (codes >= 0)].unique().double()
    mids = (grid[1:] + grid[:-1]) / 2  # exact ties in fp32
    base = torch.cat([grid, mids, torch.tensor([126.3, 247.9, 0.6 * grid[1].item(), 0.4 * grid[1].item()],
                                                dtype=torch.float64)]).float()
    bits = base.view(torch.int32)
    nudged = torch.cat([base, (bits + 1).view(torch.float32), (bits - 1).clamp(min=0).view(torch.float32)])
    fmax = grid.max().item()
    nudged = nudged[nudged <= fmax]
    return torch.cat([nudged, -nudged])


# ---------------------------------------------------------------------------------------------- status

def test_status_names_patches_and_links():
    st = fixes.status()
    assert st["applied"] is True, st
    assert st["triton"] == fixes.PINNED_TRITON
    names = " ".join(st["patches"])
    for method in ("create_dot", "cast_impl", "create_fp_to_fp"):
        assert method in names
    assert "triton-lang/triton/issues/11584" in fixes.__doc__
    assert "triton-lang/triton/issues/8322" in fixes.__doc__


def test_apply_is_idempotent():
    from triton.runtime.interpreter import InterpreterBuilder

    before = InterpreterBuilder.__dict__["create_dot"]
    assert fixes.apply()["applied"] is True
    assert fixes.apply()["applied"] is True
    assert InterpreterBuilder.__dict__["create_dot"] is before  # not wrapped twice


def test_unpinned_version_warns_and_patches_nothing(monkeypatch):
    from triton.runtime.interpreter import InterpreterBuilder

    with fixes.unpatched():
        original = InterpreterBuilder.__dict__["create_dot"]
        monkeypatch.setattr(triton, "__version__", "9.9.9")
        with pytest.warns(RuntimeWarning, match="9.9.9 is not the pinned"):
            st = fixes.apply()
        assert st["applied"] is False and "9.9.9" in st["reason"]
        assert InterpreterBuilder.__dict__["create_dot"] is original
        monkeypatch.setenv(fixes.ENV, "force")
        assert fixes.apply()["applied"] is True and "forced" in fixes.status()["reason"]
        fixes.remove()
        monkeypatch.undo()
    assert fixes.status()["applied"] is True


def test_disabled_by_env_and_off_interpreter(monkeypatch):
    with fixes.unpatched():
        monkeypatch.setenv(fixes.ENV, "off")
        assert fixes.apply()["applied"] is False
        monkeypatch.delenv(fixes.ENV)
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            st = fixes.apply()
        assert st["applied"] is False and "not running in the interpreter" in st["reason"]
        monkeypatch.undo()
    assert fixes.status()["applied"] is True


# ------------------------------------------------------------------------------------------- bf16 dot

def _bf16_dot_operands():
    g = torch.Generator().manual_seed(0)
    # small integers: every product and partial sum is exact in fp32, so any summation order agrees
    a = torch.randint(-8, 9, (16, 32), generator=g).to(torch.bfloat16)
    b = torch.randint(-8, 9, (32, 16), generator=g).to(torch.bfloat16)
    return a, b


def _dot(a, b):
    c = torch.empty(a.shape[0], b.shape[1], dtype=torch.float32)
    _dot_kernel[(1,)](a, b, c, M=a.shape[0], N=b.shape[1], K=a.shape[1])
    return c


def test_bf16_dot_bug_exists_without_fix():
    a, b = _bf16_dot_operands()
    with fixes.unpatched():
        c = _dot(a, b)
    assert c.abs().max() > 1e9  # raw 16-bit patterns multiplied


def test_bf16_dot_equals_torch():
    a, b = _bf16_dot_operands()
    assert _mismatches(_dot(a, b), a.float() @ b.float()) == 0


def test_fp16_dot_untouched():
    a, b = (t.to(torch.float16) for t in _bf16_dot_operands())
    assert _mismatches(_dot(a, b), a.float() @ b.float()) == 0


# ----------------------------------------------------------------------------------------- bf16 casts

def _bf16_probe_values() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2048, generator=g)
    ties = (torch.arange(1, 200, dtype=torch.int32) << 16 | 0x8000).view(torch.float32)  # exact bf16 ties
    sub = torch.tensor([1e-39, -3e-40, 9.2e-41, 1.0 + 3 * 2**-9, 126.3, 3.3895e38, -0.0])
    return torch.cat([x, ties, -ties, sub])


def test_fp32_to_bf16_truncates_without_fix():
    x = torch.tensor([1.0 + 3 * 2**-9])  # 0.75 ulp above 1: nearest even rounds up, truncation gives 1
    with fixes.unpatched():
        got = _cast(x, torch.bfloat16, tl.bfloat16)
    assert got.item() == 1.0 and x.to(torch.bfloat16).item() == 1.0 + 2**-7


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16])
def test_casts_to_bf16_equal_torch(src):
    x = _bf16_probe_values().to(src)
    assert _mismatches(_cast(x, torch.bfloat16, tl.bfloat16), x.to(torch.bfloat16)) == 0


def test_bf16_widening_equals_torch_for_every_pattern():
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    want = every.float()
    with fixes.unpatched():
        assert _mismatches(_cast(every, torch.float32, tl.float32), want) > 0  # subnormals widen wrongly
    got = _cast(every, torch.float32, tl.float32)
    finite = ~want.isnan()
    assert _mismatches(got[finite], want[finite]) == 0 and bool(got[~finite].isnan().all())


def test_int_to_bf16_equals_torch():
    x = torch.arange(-600, 600, dtype=torch.int32)
    assert _mismatches(_cast(x, torch.bfloat16, tl.bfloat16), x.to(torch.bfloat16)) == 0


# --------------------------------------------------------------------------------- bf16 elementwise ops

@triton.jit
def _bf16_ops_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + 0 * BLOCK + offs, x * y)
    tl.store(out_ptr + 1 * BLOCK + offs, x + y)
    tl.store(out_ptr + 2 * BLOCK + offs, x - y)
    tl.store(out_ptr + 3 * BLOCK + offs, tl.maximum(x, y))
    tl.store(out_ptr + 4 * BLOCK + offs, tl.where(x < y, x, y))
    tl.store(out_ptr + 5 * BLOCK + offs, -x)
    tl.store(out_ptr + 6 * BLOCK + offs, tl.clamp(x, -y.abs(), y.abs()))
    tl.store(out_ptr + 7 * BLOCK + offs, x / y)
    tl.store(out_ptr + 8 * BLOCK + offs, tl.clamp(x, -y.abs(), y.abs(), propagate_nan=tl.PropagateNan.ALL))
    tl.store(out_ptr + 9 * BLOCK + offs, tl.fma(x, y, x))


def _bf16_ops(x, y):
    out = torch.empty(10, x.numel(), dtype=torch.bfloat16)
    _bf16_ops_kernel[(1,)](x, y, out, BLOCK=x.numel())
    return out


def _bf16_ops_operands():
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(256, generator=g) * 3).bfloat16()
    y = (torch.randn(256, generator=g) * 3).bfloat16()
    y[y == 0] = 1
    return x, y


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")  # the buggy fma
def test_bf16_elementwise_bug_exists_without_fix():
    x, y = _bf16_ops_operands()
    with fixes.unpatched():
        got = _bf16_ops(x, y)
    assert _mismatches(got[0], x * y) > 200  # raw 16-bit patterns multiplied
    assert _mismatches(got[3], torch.maximum(x, y)) > 0  # negative values compare wrongly as uint16


def test_bf16_elementwise_equals_torch():
    x, y = _bf16_ops_operands()
    want = torch.stack([x * y, x + y, x - y, torch.maximum(x, y), torch.where(x < y, x, y), -x,
                        torch.clamp(x, -y.abs(), y.abs()), x / y, torch.clamp(x, -y.abs(), y.abs()),
                        (x.float() * y.float() + x.float()).bfloat16()])  # the fp32 product is exact
    got = _bf16_ops(x, y)
    for i in range(want.shape[0]):
        assert _mismatches(got[i], want[i]) == 0, f"op #{i}"


# ------------------------------------------------------------------------------------------ fp8 casts

@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_cast_bugs_exist_without_fix(name):
    fp8, fp8_tl, _ = FP8[name]
    x = _fp8_probe_values(fp8)
    with fixes.unpatched():
        got = _cast(x, fp8, fp8_tl)
        carry = _cast(torch.tensor([CARRY[name][0]]), fp8, fp8_tl).float().item()
    assert carry == CARRY[name][1]  # lost mantissa carry
    assert _mismatches(got, x.to(fp8)) > 0


@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_casts_equal_torch_in_range(name, src):
    fp8, fp8_tl, _ = FP8[name]
    x = _fp8_probe_values(fp8).to(src)
    want = x.float().to(fp8)
    value, _, rounded = CARRY[name]
    assert torch.tensor([value]).to(fp8).float().item() == rounded
    assert _cast(torch.tensor([value]).to(src), fp8, fp8_tl).float().item() == rounded
    assert _mismatches(_cast(x, fp8, fp8_tl), want) == 0


@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_out_of_range_saturates_like_the_gpu(name):
    """Finite out-of-range -> +-max; inf -> +-448 (e4m3fn) or NaN (e4m3fnuz: no inf); NaN -> NaN."""
    fp8, fp8_tl, fmax = FP8[name]
    x = torch.tensor([fmax * 1.01, 1e6, -1e6, 3e38, -fmax - 8, float("inf"), -float("inf"), float("nan")])
    got = _cast(x, fp8, fp8_tl).float()
    sat = [fmax, fmax, -fmax, fmax, -fmax]
    assert got[:5].tolist() == sat
    if name == "float8_e4m3fn":
        assert got[5:7].tolist() == [fmax, -fmax]
    else:
        assert bool(got[5:7].isnan().all())
    assert bool(got[7].isnan())


@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_widening_keeps_nan(name):
    fp8, _, _ = FP8[name]
    codes = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8).view(fp8)
    want = codes.float()
    with fixes.unpatched():
        assert not bool(_cast(codes, torch.float32, tl.float32)[want.isnan()].isnan().all())  # NaN -> 480
    got = _cast(codes, torch.float32, tl.float32)
    finite = ~want.isnan()
    assert _mismatches(got[finite], want[finite]) == 0 and bool(got[~finite].isnan().all())
