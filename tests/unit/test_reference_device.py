"""On a GPU the W4A16 family computes its fp64 reference and the tolerance model's products on the kernel's device
(Execution.reference_device), not on one host core. That is sound only while the device gives the CPU's values: the
exact tier's sums are exact in any order and each cast rounds once the same way, so there bit for bit; elsewhere
within fp64's own rounding of another summation order. Checked here against the CPU on the same inputs."""
from __future__ import annotations

import pytest
import torch

from conformance.checks import tolerance as tol
from conformance.checks.execution import Execution
from references.gemm import abs_bound, reference_gemm
from references.generators import random_activations, random_canonical

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA/HIP device here: the device's fp64 reference is compared "
                                               "with the CPU's on a GPU machine only")


def test_reference_device_is_the_cpu_for_the_model_and_without_a_gpu():
    assert Execution(kernel=None, mode="model").reference_device == "cpu"
    assert Execution(kernel=None, mode="device").reference_device == ("cuda" if GPU else "cpu")


@needs_gpu
@pytest.mark.parametrize("act_order", [False, True])
@pytest.mark.parametrize("wtype", ["uint4b8", "uint4"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("regime", ["exact", "normal"])
def test_device_reference_equals_the_cpus(regime, dtype, wtype, act_order):
    K, N, M, seed = 1024, 256, 96, 11
    w = random_canonical(K, N, 128, wtype, dtype, regime, seed, act_order=act_order)
    x = random_activations(M, K, dtype, regime, seed)
    wd, xd = w.to("cuda"), x.to("cuda")
    S = abs_bound(x, w)
    for args in ((), (2, dtype, None), (2, dtype, torch.float16)):
        cpu, dev = reference_gemm(x, w, *args), reference_gemm(xd, wd, *args).cpu()
        if regime == "exact":
            assert torch.equal(cpu, dev), args
        else:  # another summation order: within fp64's rounding of the magnitude |x| @ |W|
            assert bool(((cpu - dev).abs() <= 4 * K * 2.0 ** -53 * S).all()), args
        if regime == "exact":  # and the one cast of the exact tier rounds the same way
            assert torch.equal(cpu.to(dtype), dev.to(dtype)), args
    if regime == "exact":
        assert torch.equal(S, abs_bound(xd, wd).cpu())
    # the statistical verdict's metrics from the device products equal the CPU's (a kernel output one ulp off)
    y = reference_gemm(x, w).to(dtype)
    y = (y.view(torch.int16) ^ 1).view(dtype)
    model = tol.ErrorModel(dtype, dtype, torch.float32, block=128, outer_dtype=torch.float32)
    got = [tol.compare_statistical(yy, reference_gemm(xx, ww), abs_bound(xx, ww), model, K,
                                   R=tol.l2_bound(xx, ww.dequantize(torch.float64)),
                                   xw=(xx, ww.dequantize(torch.float64)))
           for yy, xx, ww in ((y, x, w), (y.cuda(), xd, wd))]
    assert got[0].ok == got[1].ok
    for key in ("max_ratio", "p99_ratio", "nmse", "max_abs_err"):
        assert got[1].metrics[key] == pytest.approx(got[0].metrics[key], rel=1e-9, abs=1e-300), key
