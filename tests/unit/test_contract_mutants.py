"""Each contract check fails on the broken kernel built to break it, and passes on the real kernel."""
from __future__ import annotations

import pytest
import torch

from conformance.checks import contracts, fusion
from conformance.checks.quant_layer import RmsNormQuantLayer
from conformance.core import registry
from conformance.families.config import Fp8QuantConfig

PLUGIN = "tests.unit.broken_contract_kernels"
SPEC = {"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
        "act_order": False, "format": "gptq_v2", "seed": 2}


@pytest.fixture(scope="module")
def mutants():
    registry.load_all()
    registry.load_plugin(PLUGIN)
    import tests.unit.broken_contract_kernels as mod

    for n in mod.MUTANT_NAMES:  # re-register if an earlier module-scope teardown removed them
        registry.register_kernel(getattr(mod, {"mutant_fake_wrong_n": "FakeWrongN",
                                               "mutant_plain_python_op": "PlainPythonOp",
                                               "mutant_frozen_tiles": "FrozenTiles",
                                               "mutant_wrapped_quant": "WrappedQuant"}[n]))
    yield {n: registry.get_kernel(n) for n in mod.MUTANT_NAMES}
    for n in mod.MUTANT_NAMES:
        registry.unregister_kernel(n)


def _sample(kernel):
    return contracts.build_sample(kernel, SPEC)


def test_fake_wrong_n_is_caught(mutants):
    k = mutants["mutant_fake_wrong_n"]
    with pytest.raises(contracts.ContractFailure, match="shape"):
        contracts.check_fake_vs_real(k, _sample(k))
    real = registry.get_kernel("triton_w4a16")
    contracts.check_fake_vs_real(real, _sample(real))


def test_plain_python_op_is_caught(mutants):
    k = mutants["mutant_plain_python_op"]
    s = _sample(k)
    for check in (contracts.check_fake_vs_real, contracts.check_make_fx, contracts.check_opcheck):
        with pytest.raises(contracts.ContractFailure, match="not a torch.library"):
            check(k, s)
    real = registry.get_kernel("triton_w4a16")
    contracts.check_make_fx(real, _sample(real))


def test_frozen_tiles_are_caught(mutants):
    contracts.inductor_dirs()
    k = mutants["mutant_frozen_tiles"]
    with pytest.raises(contracts.ContractFailure, match="traced and frozen"):
        contracts.check_compile_boundary(k, _sample(k))
    real = registry.get_kernel("triton_w4a16")
    detail = contracts.check_compile_boundary(real, _sample(real))
    assert detail["tiles_distinguish_prefill_decode"]


def test_unmatched_quant_wrapper_is_caught(mutants):
    cfg = Fp8QuantConfig(group_size=64, dtype="bfloat16", hidden=256)
    x = torch.randn(4, 256).to(torch.bfloat16)
    w = torch.ones(256, dtype=torch.bfloat16)
    bad = RmsNormQuantLayer(cfg, w, 1e-6, "triton", kernel_override="mutant_wrapped_quant")
    with pytest.raises(contracts.ContractFailure, match="not matchable"):
        fusion.check_fusion(bad, x)
    fusion.check_fusion(RmsNormQuantLayer(cfg, w, 1e-6, "triton"), x)
