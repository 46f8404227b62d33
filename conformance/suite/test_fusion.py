"""RMSNorm + FP8 group quant: every quant route of the layer is fused by the pass; the fused op is bit-exact."""
from __future__ import annotations

import pytest
import torch

from conformance.checks import fusion, guard
from conformance.checks.contracts import run_check
from conformance.checks.harness import _execution
from conformance.checks.quant_layer import RmsNormQuantLayer, fusion_routes, route_availability
from conformance.core import registry, results
from conformance.core.targets import detect_target
from conformance.families.config import Fp8QuantConfig
from references.fp8 import fp8_group_quant_reference

registry.load_all()
CONFIGS = [Fp8QuantConfig(group_size=64, dtype="bfloat16", hidden=256),
           Fp8QuantConfig(group_size=128, dtype="float16", hidden=256, ue8m0=True, column_major_scales=True)]
CFG_IDS = ["g64-bf16", "g128-fp16-ue8m0-colmajor"]


def _inputs(cfg, seed=0):
    return fusion.layer_inputs(cfg, fusion.TOKENS, seed)  # row 2's first group all zero: the policies differ there


ROUTE_OF = {kernel: route for route, kernel in fusion_routes().items()}  # every fusion_route kernel, plugins too


@pytest.mark.parametrize("kernel_name", sorted(ROUTE_OF))
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
def test_every_route_is_fused(kernel_name, cfg):
    """Every kernel declaring `fusion_route = True` (built-in routes and plugins) is fused by the RMSNorm + quant
    pass, and the fused graph gives the unfused layer's bits; a route whose op is absent here skips with why. The
    record carries the check id (`...check=fusion,...`) and its replay line."""
    route = ROUTE_OF[kernel_name]
    case_id = fusion.check_id(kernel_name, cfg, fusion.TOKENS, 0)
    why = route_availability(route)
    if why is not None:
        results.record(kernel_name, "fusion", "skip", run_mode="model", detail=why, case_id=case_id)
        pytest.skip(f"route={route}: {why}")
    x, w = _inputs(cfg)
    kernel = registry.get_kernel(kernel_name)
    mode = _execution(kernel, detect_target())[0] or "model"
    # the layer loads the kernel's params: inside the check, so a fault there is this check's record with its id
    run_check("fusion", kernel, lambda: fusion.check_fusion(RmsNormQuantLayer(cfg, w, fusion.NORM_EPS, route), x),
              run_mode=mode, case_id=case_id)


@pytest.mark.parametrize("policy", fusion.POLICIES)
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
def test_fused_op_bit_exact_vs_reference(cfg, policy):
    x, w = _inputs(cfg, seed=3)
    p = guard.call(registry.get_kernel("fp8_group_quant_triton"), "load", cfg)
    q, s = fusion.FUSED_OP(x, w, 1e-6, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0,
                           p.column_major_scales, policy)
    # The norm reference runs beside the op (hidden is a power of two, so its mean's division is exact on any
    # device). The quant reference divides by fp8_max through a CPU 0-dim tensor, which torch on CUDA turns into
    # a multiplication by the fp32 reciprocal (up to 1 ulp off): it is correctly rounded only on CPU, and the
    # triton policy (the Triton route divides with div_rn) is judged against it there. The native policy's route
    # divides by a Python scalar, so on CUDA its bits ARE that reciprocal multiplication (fp8_group_quant_native's
    # device_inexact_reason): its reference runs on the op's device, which is the CPU on a CPU machine.
    y_ref = fusion.reference_rms_norm(x, w, 1e-6)
    ref_dev = "cpu" if policy == "triton" else x.device
    qr, sr = fp8_group_quant_reference(y_ref.to(ref_dev), cfg.group_size, cfg.fp8_dtype, cfg.ue8m0,
                                       cfg.column_major_scales, eps=p.eps, zero_group_policy=policy)
    torch.testing.assert_close(q.cpu().view(torch.uint8), qr.cpu().view(torch.uint8), rtol=0, atol=0)
    torch.testing.assert_close(s.cpu(), sr.cpu(), rtol=0, atol=0)
    assert s.stride() == sr.stride()


def test_fused_op_fake_matches_real():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from conformance.checks.contracts import _meta

    cfg = CONFIGS[1]
    x, w = _inputs(cfg)
    p = guard.call(registry.get_kernel("fp8_group_quant_triton"), "load", cfg)
    args = (1e-6, p.group_size, p.torch_fp8, p.fp8_max, p.eps, p.ue8m0, p.column_major_scales, "triton")
    real = fusion.FUSED_OP(x, w, *args)
    with FakeTensorMode() as m:
        fake = fusion.FUSED_OP(m.from_tensor(x), m.from_tensor(w), *args)
    assert [_meta(t) for t in fake] == [_meta(t) for t in real]
