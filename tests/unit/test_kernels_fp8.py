"""FP8 per-token-group quant kernels: bit-exact against references.fp8 under each kernel's declared
all-zero-group policy (Triton through the interpreter, or compiled on a GPU machine with its inputs on the GPU:
tests/unit/devices.py; models for the upstream ops absent here), gates, selection, input checks and the custom
op's fake."""
from __future__ import annotations

import itertools

import pytest
import torch

from conformance.cases.plan import all_pairs
from conformance.core import registry
from conformance.core.runtime import interpreting
from conformance.core.targets import detect_target, parse_target
from conformance.families.config import Fp8QuantConfig
from references.errors import InvalidInput
from references.fp8 import dequantize_fp8_groups, fp8_group_quant_reference, ue8m0_ambiguous
from tests.unit.devices import DEV, cpu

registry.load_all()

FP8_NAMES = ("float8_e4m3fn", "float8_e4m3fnuz")
IN_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
EXACT_KERNELS = ("fp8_group_quant_triton", "fp8_group_quant_native", "fp8_group_quant_cuda")
ROWS = {64: 70, 128: 37}  # force several row programs with a tail in the Triton kernel (BLOCK_M 64 / 32)


def _run(kernel, params, x, config=None):
    """apply where the kernel runs here (x on its device: the GPU for Triton on a GPU machine), serves `config`
    and claims exact bits there; else its model, on the CPU. Outputs on the CPU."""
    here = detect_target()
    runs = kernel.availability(here) is None and (config is None or kernel.can_implement(config, here) is None)
    if runs and not (here.is_gpu and kernel.numerics(None).device_inexact_reason):
        return cpu(kernel.apply(params, x.to(_device_of(kernel))))
    return kernel.model(params, x)


def _device_of(kernel):
    """Where a kernel's apply takes x here: DEV for the Triton kernel, the CPU for plain torch (native, which on a
    GPU would run torch's CUDA division: device_inexact_reason)."""
    return DEV if kernel.name == "fp8_group_quant_triton" else torch.device("cpu")


def _probe_input(M: int, K: int, group: int, dtype: torch.dtype, fp8_name: str, seed: int = 0) -> torch.Tensor:
    """Normal rows plus one of each hard case: an all-zero group, tiny groups (below the native floor 1/512,
    below the CUDA UE8M0 floor 448e-10), an outlier row (tiny fp8 results, subnormals), a group whose
    values land exactly on fp8 ties and on fp8_max, and mixed signs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g, dtype=torch.float64) * 4
    x[0, :group] = 0
    x[1, group:2 * group] *= 1e-4
    x[2, :group] *= 1e-9 if dtype != torch.float16 else 1e-6  # fp16 has nothing below 6e-8
    x[3, 7] = 3.0e4  # outlier: the rest of its group quantizes to tiny and subnormal fp8
    fp8_max = 448.0 if fp8_name == "float8_e4m3fn" else 224.0
    fp8 = torch.float8_e4m3fn if fp8_name == "float8_e4m3fn" else torch.float8_e4m3fnuz
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8).double()
    grid = codes[codes.isfinite() & (codes >= 0) & (codes <= fp8_max)].unique()
    ties = (grid[1:] + grid[:-1]) / 2
    row = torch.cat([ties, grid])[: group - 1]
    row = torch.cat([torch.tensor([fp8_max], dtype=torch.float64), row])
    signs = torch.where(torch.arange(group) % 3 == 0, -1.0, 1.0).double()
    x[4, -group:] = row * signs * 0.25  # scale s = fp8_max*0.25/fp8_max = 0.25: x / s is exact
    return x.to(dtype)


def _assert_bits_equal(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    bad = (got.view(torch.uint8) != want.view(torch.uint8)) if got.dtype.itemsize == 1 else (
        got.view(torch.int32) != want.view(torch.int32))
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} elements differ, first at {bad.nonzero()[0].tolist()}"


def _exact_grid() -> list:
    """(kernel, group, dtype, fp8, ue8m0, column_major): the whole grid for every kernel, except the Triton kernel
    in the interpreter (0.7 s a combination on 2 cores): every pair of values there (all_pairs), 6 of 48."""
    grid = list(itertools.product([64, 128], sorted(IN_DTYPES), FP8_NAMES, [False, True], [False, True]))
    out = []
    for name in EXACT_KERNELS:
        combos = all_pairs(grid) if name == "fp8_group_quant_triton" and interpreting() else grid
        out += [pytest.param(name, *c, id=f"{name}-{c[0]}-{c[1]}-{c[2]}-{'ue8m0' if c[3] else 'fp32scale'}-"
                             f"{'colmajor' if c[4] else 'rowmajor'}") for c in combos]
    return out


@pytest.mark.parametrize("name,group,dtype,fp8_name,ue8m0,column_major", _exact_grid())
def test_kernel_bit_exact_against_reference(name, group, dtype, fp8_name, ue8m0, column_major):
    kernel = registry.get_kernel(name)
    K = 2 * group
    cfg = Fp8QuantConfig(group, dtype, fp8_name, ue8m0, column_major, hidden=K)
    params = kernel.load(cfg)
    x = _probe_input(ROWS[group], K, group, IN_DTYPES[dtype], fp8_name)
    q, s = _run(kernel, params, x, cfg)
    rq, rs = fp8_group_quant_reference(x, group, fp8_name, ue8m0, column_major,
                                       zero_group_policy=kernel.zero_group_policy)
    assert q.dtype == rq.dtype and s.dtype == torch.float32
    _assert_bits_equal(q, rq, "q")
    _assert_bits_equal(s, rs, f"scales (policy {kernel.zero_group_policy})")
    assert s.stride() == rs.stride(), f"scale strides {s.stride()} != {rs.stride()}"
    deq = dequantize_fp8_groups(q, s, group)
    assert torch.equal(deq, dequantize_fp8_groups(rq, rs, group))
    assert bool((deq[0, :group] == 0).all())  # an all-zero group dequantizes to 0 under every policy


def test_triton_runs_through_the_interpreter_here():
    kernel = registry.get_kernel("fp8_group_quant_triton")
    if not interpreting():
        pytest.skip("Triton runs on a GPU here")
    assert kernel.run_mode(parse_target("cpu")) == "interpreter"
    from conformance.core import interpreter_fixes

    assert interpreter_fixes.status()["applied"], interpreter_fixes.status()


@pytest.mark.parametrize("M,block_m", [(1, 1), (3, 1), (300, 2), (2100, 8)])
def test_triton_tile_follows_runtime_rows(M, block_m):
    from conformance_kernels import fp8_group_quant_triton as mod

    kernel = registry.get_kernel("fp8_group_quant_triton")
    p = kernel.load(Fp8QuantConfig(64, "bfloat16", hidden=128))
    x = torch.randn(M, 128).bfloat16()
    q, s = cpu(kernel.apply(p, x.to(DEV)))
    cfg = mod.last_launch_config()
    # both groups of a row in one program; 1 row a program up to 256 tokens, 2 to 2048, then 8 (measured rule)
    assert (cfg["BLOCK_M"], cfg["GPP"]) == (block_m, 2) and cfg["grid"] == (-(-M // block_m), 1)
    rq, rs = fp8_group_quant_reference(x, 64)
    _assert_bits_equal(q, rq, "q")


@pytest.mark.parametrize("tile", [(1, 1, 4), (4, 2, 4), (2, 4, 1), (8, 8, 2)], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("column_major", [False, True], ids=["row_major_s", "col_major_s"])
def test_triton_tiles_with_group_and_row_tails(tile, column_major):
    """Any tile gives the reference bits: 5 groups (a tail for GPP 2/4/8), 7 rows (a tail for BLOCK_M 4/8)."""
    from conformance_kernels import fp8_group_quant_triton as mod

    x = torch.randn(7, 5 * 32, generator=torch.Generator().manual_seed(1)).bfloat16()
    x[2, 32:64] = 0  # an all-zero group
    q, s = cpu(mod.launch(x.to(DEV), 32, torch.float8_e4m3fn, 448.0, 1e-10, False, column_major, mod.Fp8Tile(*tile)))
    assert mod.last_launch_config()["GPP"] == tile[1]
    rq, rs = fp8_group_quant_reference(x, 32)
    _assert_bits_equal(q, rq, "q")
    _assert_bits_equal(s.contiguous(), rs, "s")


@pytest.mark.parametrize("name", ["fp8_group_quant_triton", "fp8_group_quant_native"])
def test_three_dim_input_and_empty_rows(name):
    kernel = registry.get_kernel(name)
    p = kernel.load(Fp8QuantConfig(64, "float16", hidden=128))
    x = torch.randn(2, 3, 128).half()
    q, s = cpu(kernel.apply(p, x.to(_device_of(kernel))))
    rq, rs = fp8_group_quant_reference(x, 64, zero_group_policy=kernel.zero_group_policy)
    _assert_bits_equal(q, rq, "q")
    _assert_bits_equal(s, rs, "scales")
    q0, s0 = kernel.apply(p, torch.empty(0, 128).half().to(_device_of(kernel)))
    assert q0.shape == (0, 128) and s0.shape == (0, 2)


def test_native_ue8m0_rounds_an_ambiguous_scale_down_and_saturates():
    """Upstream's fp32 exp2(ceil(log2 s)) rounds s = 2^-10 (1 + 2^-23) down to 2^-10, so the group's
    largest value lands at 2*fp8_max and clamps; the exact rounding (Triton kernel, reference) gives 2^-9."""
    s_raw = torch.tensor(2.0 ** -10 * (1 + 2.0 ** -23), dtype=torch.float32)
    amax = (s_raw * 448).item()
    x = torch.zeros(1, 64)
    x[0, 0], x[0, 1] = amax, amax / 3
    assert bool(ue8m0_ambiguous(torch.tensor([amax]) / 448).all())
    cfg = Fp8QuantConfig(64, "float32", ue8m0=True, hidden=64)
    native, triton_k = registry.get_kernel("fp8_group_quant_native"), registry.get_kernel("fp8_group_quant_triton")
    qn, sn = native.apply(native.load(cfg), x)
    qt, st = cpu(triton_k.apply(triton_k.load(cfg), x.to(DEV)))
    assert sn.item() == 2.0 ** -10 and st.item() == 2.0 ** -9
    assert qn.float()[0, 0].item() == 448.0  # saturated: amax / 2^-10 ~ 896
    assert qt.float()[0, 0].item() == 224.0  # amax / 2^-9, in range


def test_cuda_model_ue8m0_floor():
    """CUDA op: UE8M0 rounds max(s, 1e-10), so a zero or tiny group gets 2^-33 (Triton: 2^-42 / smaller)."""
    cuda = registry.get_kernel("fp8_group_quant_cuda")
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    x[1] = 1e-9
    s = cuda.model(cuda.load(Fp8QuantConfig(64, "bfloat16", ue8m0=True, hidden=64)), x)[1]
    assert s.flatten().tolist() == [2.0 ** -33, 2.0 ** -33]
    t = registry.get_kernel("fp8_group_quant_triton")
    st = t.model(t.load(Fp8QuantConfig(64, "bfloat16", ue8m0=True, hidden=64)), x)[1]
    assert st.flatten().tolist() == [2.0 ** -42, 2.0 ** -38]


# bf16 (amax, x) where fp8(x * fp32(1/s)) != fp8(x / s) for s = amax * fp32(1/fp8_max): found by search
RECIPROCAL_WITNESS = {"float8_e4m3fnuz": (1.015625, 6.198883056640625e-06),
                      "float8_e4m3fn": (1.03125, 1.5735626220703125e-05)}


@pytest.mark.parametrize("fp8_name,fp8_max", [("float8_e4m3fnuz", 240.0), ("float8_e4m3fn", 448.0)])
def test_aiter_model_multiplies_by_reciprocals(fp8_name, fp8_max):
    aiter = registry.get_kernel("fp8_group_quant_aiter")
    p = aiter.load(Fp8QuantConfig(128, "bfloat16", fp8_name, hidden=128))
    amax, v = RECIPROCAL_WITNESS[fp8_name]
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = amax, v
    q, s = aiter.model(p, x)
    f32 = torch.float32
    assert s.item() == (torch.tensor(amax, dtype=f32) * torch.tensor(1.0 / fp8_max, dtype=f32)).item()
    by_reciprocal = (torch.tensor(v) * (1.0 / s[0])).to(p.torch_fp8).view(torch.uint8)
    by_division = (torch.tensor(v) / s[0]).to(p.torch_fp8).view(torch.uint8)
    assert by_reciprocal != by_division  # the witness tells the two conventions apart
    assert q.view(torch.uint8)[0, 1] == by_reciprocal


@pytest.mark.parametrize("fp8_name,fp8_max", [("float8_e4m3fnuz", 240.0), ("float8_e4m3fn", 448.0)])
def test_aiter_model_conventions(fp8_name, fp8_max):
    """AITER: the dtype's max (240 on gfx942, not 224), eps 1e-10, reciprocal multiplies; dequantized
    values within half an fp8 step of x."""
    aiter = registry.get_kernel("fp8_group_quant_aiter")
    p = aiter.load(Fp8QuantConfig(128, "bfloat16", fp8_name, hidden=256))
    assert p.fp8_max == fp8_max and aiter.zero_group_policy == "aiter"
    x = _probe_input(9, 256, 128, torch.bfloat16, fp8_name)
    q, s = aiter.model(p, x)
    inv_max = torch.tensor(1.0 / fp8_max, dtype=torch.float32)
    assert s[0, 0].item() == (torch.tensor(1e-10, dtype=torch.float32) * inv_max).item()
    assert q.float().abs().amax().item() == fp8_max
    xf, deq = x.float(), dequantize_fp8_groups(q, s, 128)
    normal = q.float().abs() >= 2.0 ** -5  # above the fp8 subnormals: relative step 2^-3
    assert bool(((deq - xf).abs() <= xf.abs() * 2.0 ** -4 * 1.0001)[normal].all())
    want_q = (x.float().reshape(9, 2, 128) * (1.0 / s).unsqueeze(-1)).clamp(-fp8_max, fp8_max)
    _assert_bits_equal(q, want_q.reshape(9, 256).to(p.torch_fp8), "q")


def test_zero_group_scales_differ_by_policy():
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    got = {}
    for name in ("fp8_group_quant_triton", "fp8_group_quant_native", "fp8_group_quant_cuda"):
        k = registry.get_kernel(name)
        q, s = _run(k, k.load(Fp8QuantConfig(128, "bfloat16", ue8m0=True, hidden=128)), x)
        assert bool((q.view(torch.uint8) == 0).all())
        got[k.zero_group_policy] = s.item()
    assert got == {"triton": 2.0 ** -42, "native": torch.tensor(1 / (448 * 512), dtype=torch.float32).item(),
                   "ue8m0_cuda": 2.0 ** -33}


# ---------------------------------------------------------------------------------------- input checks

@pytest.mark.parametrize("name", ["fp8_group_quant_triton", "fp8_group_quant_native", "fp8_group_quant_cuda"])
def test_bad_inputs_name_the_field(name):
    k = registry.get_kernel(name)
    p = k.load(Fp8QuantConfig(64, "bfloat16", column_major_scales=True, hidden=128))
    run = k.apply if name != "fp8_group_quant_cuda" else k.model
    with pytest.raises(InvalidInput, match=r"x\.dtype"):
        run(p, torch.zeros(2, 128, dtype=torch.float64))
    with pytest.raises(InvalidInput, match=r"x\.shape\[-1\]=100"):
        run(p, torch.zeros(2, 100, dtype=torch.bfloat16))
    with pytest.raises(InvalidInput, match="column_major_scales"):
        run(p, torch.zeros(2, 2, 128, dtype=torch.bfloat16))


def test_params_refuse_nonpositive_eps():
    from conformance_kernels._fp8_common import Fp8QuantParams

    with pytest.raises(InvalidInput, match="eps=0"):
        Fp8QuantParams(64, "float8_e4m3fn", 448.0, eps=0)


# -------------------------------------------------------------------------------------------- custom op

@pytest.mark.parametrize("column_major", [False, True])
def test_triton_fake_matches_real_without_computing(column_major):
    from torch._subclasses.fake_tensor import FakeTensorMode

    k = registry.get_kernel("fp8_group_quant_triton")
    p = k.load(Fp8QuantConfig(64, "bfloat16", column_major_scales=column_major, hidden=192))
    x = torch.randn(5, 192).bfloat16().to(DEV)
    q, s = k.apply(p, x)
    with FakeTensorMode() as mode:
        fq, fs = k.apply(p, mode.from_tensor(x))
    for real, fake in ((q, fq), (s, fs)):
        assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride())
    assert s.stride() == ((1, 5) if column_major else (3, 1))


def test_triton_op_is_one_node_under_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx

    k = registry.get_kernel("fp8_group_quant_triton")
    p = k.load(Fp8QuantConfig(64, "float16", hidden=128))
    gm = make_fx(lambda x: k.apply(p, x), tracing_mode="fake")(torch.randn(3, 128).half())
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target == k.op]
    assert len(calls) == 1


def test_native_is_plain_torch_not_a_custom_op():
    from torch.fx.experimental.proxy_tensor import make_fx

    k = registry.get_kernel("fp8_group_quant_native")
    assert k.op is None
    p = k.load(Fp8QuantConfig(64, "bfloat16", hidden=128))
    gm = make_fx(lambda x: k.apply(p, x))(torch.randn(3, 128).bfloat16())
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"} - {"<built-in function getitem>"}
    assert all(t.startswith("aten.") for t in targets), targets  # matchable aten ops only
    assert {"aten.abs.default", "aten.max.dim", "aten.div.Tensor", "aten.clamp.default"} <= targets


# ------------------------------------------------------------------------------------ gates, selection

def _cfg(**kw):
    base = dict(group_size=128, dtype="bfloat16", fp8_dtype="float8_e4m3fn", hidden=1024)
    base.update(kw)
    return Fp8QuantConfig(**base)


@pytest.mark.parametrize("target,fp8_name,ok", [
    ("cpu", "float8_e4m3fn", True), ("cpu", "float8_e4m3fnuz", True),
    ("sm90", "float8_e4m3fn", True), ("sm89", "float8_e4m3fn", True), ("sm80", "float8_e4m3fn", False),
    ("sm90", "float8_e4m3fnuz", False), ("gfx942", "float8_e4m3fnuz", True), ("gfx942", "float8_e4m3fn", False),
    ("gfx950", "float8_e4m3fn", True), ("gfx950", "float8_e4m3fnuz", False), ("gfx1100", "float8_e4m3fn", True),
    ("gfx1201", "float8_e4m3fnuz", False),
])
def test_triton_and_native_fp8_dtype_gates(target, fp8_name, ok):
    for name in ("fp8_group_quant_triton", "fp8_group_quant_native"):
        reason = registry.get_kernel(name).can_implement(_cfg(fp8_dtype=fp8_name), parse_target(target))
        assert (reason is None) == ok, (name, reason)
        if not ok:
            assert f"fp8_dtype={fp8_name!r}" in reason and str(parse_target(target)) in reason


def test_triton_group_and_dtype_gates():
    k = registry.get_kernel("fp8_group_quant_triton")
    cpu = parse_target("cpu")
    assert k.can_implement(_cfg(group_size=96, hidden=960), cpu) is None  # non power of two: masked tile
    assert "group_size=2048" in k.can_implement(_cfg(group_size=2048, hidden=4096), cpu)
    bad = _cfg()
    object.__setattr__(bad, "dtype", "float64")  # the config refuses it; the gate must too
    assert "dtype='float64'" in k.can_implement(bad, cpu)
    object.__setattr__(bad, "dtype", "bfloat16")
    object.__setattr__(bad, "hidden", 1000)
    assert "hidden=1000" in k.can_implement(bad, cpu)


def test_upstream_adapter_gates():
    cuda, aiter = registry.get_kernel("fp8_group_quant_cuda"), registry.get_kernel("fp8_group_quant_aiter")
    assert cuda.can_implement(_cfg(ue8m0=True, column_major_scales=True), parse_target("sm90")) is None
    assert "target=cpu" in cuda.can_implement(_cfg(), parse_target("cpu"))
    assert "target=rocm:gfx942" in cuda.can_implement(_cfg(fp8_dtype="float8_e4m3fnuz"), parse_target("gfx942"))
    gfx942 = parse_target("gfx942")
    assert aiter.can_implement(_cfg(fp8_dtype="float8_e4m3fnuz"), gfx942) is None
    assert aiter.can_implement(_cfg(), parse_target("gfx950")) is None
    assert "group_size=64" in aiter.can_implement(_cfg(group_size=64, fp8_dtype="float8_e4m3fnuz"), gfx942)
    assert "ue8m0=True" in aiter.can_implement(_cfg(ue8m0=True, fp8_dtype="float8_e4m3fnuz"), gfx942)
    assert "column_major_scales=True" in aiter.can_implement(
        _cfg(column_major_scales=True, fp8_dtype="float8_e4m3fnuz"), gfx942)
    assert "dtype='float32'" in aiter.can_implement(_cfg(dtype="float32", fp8_dtype="float8_e4m3fnuz"), gfx942)
    assert "target=rocm:gfx1100" in aiter.can_implement(_cfg(), parse_target("gfx1100"))


def test_upstream_ops_say_why_they_are_absent():
    cpu = parse_target("cpu")
    for name in ("fp8_group_quant_cuda", "fp8_group_quant_aiter"):
        k = registry.get_kernel(name)
        assert "target=cpu" in k.availability(cpu) and k.run_mode(cpu) == "model"
    if not torch.cuda.is_available():
        assert "sm90" in registry.get_kernel("fp8_group_quant_cuda").availability(parse_target("sm90"))


@pytest.mark.parametrize("target,cfg_kw,chosen", [
    ("cpu", {}, "fp8_group_quant_triton"),
    ("sm90", {}, "fp8_group_quant_cuda"),
    ("sm80", {}, None),
    ("gfx942", {"fp8_dtype": "float8_e4m3fnuz"}, "fp8_group_quant_aiter"),
    ("gfx942", {"fp8_dtype": "float8_e4m3fnuz", "group_size": 64}, "fp8_group_quant_triton"),
    ("gfx1100", {}, "fp8_group_quant_triton"),
])
def test_selection(target, cfg_kw, chosen):
    ours = [k for k in registry.all_kernels("fp8_group_quant") if k.name.startswith("fp8_group_quant_")]
    sel = registry.select(_cfg(**cfg_kw), parse_target(target), kernels=ours)
    assert (sel.selected.name if sel.selected else None) == chosen, sel.refused
    for name, reason in sel.refused.items():
        assert "=" in reason, (name, reason)  # every refusal names a field and its value
    if chosen is None:
        assert {"fp8_group_quant_triton", "fp8_group_quant_native"} <= set(sel.refused)
