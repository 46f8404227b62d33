"""Contract checks over every registered kernel exposed as a custom op (kernel.op is not None)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from conformance.checks import contracts
from conformance.core import registry
from conformance.core.runtime import interpreting
from conformance.families import get_family

registry.load_all()
contracts.inductor_dirs()
OP_KERNELS = contracts.custom_op_kernels()
IDS = [k.name for k in OP_KERNELS]

FAKE_EXAMPLES = 8  # each example runs the real kernel once in the interpreter (~20-100 ms)


def specs_for(kernel):
    """Small specs the kernel's gate accepts (the family's `contract_specs`, filtered by the gate)."""
    return get_family(kernel.family).contract_specs().filter(lambda s: contracts.accepts(kernel, s))


def representative(kernel):
    """One fixed accepted spec per kernel (opcheck, compile boundary): the family's first the gate accepts."""
    specs = get_family(kernel.family).contract_representatives()
    for spec in specs:
        if contracts.accepts(kernel, spec):
            return spec
    spec = specs[-1]
    from conformance.core.runtime import kernel_device
    from conformance.core.targets import detect_target

    if kernel_device() != "cpu":  # on a GPU only the detected target counts (contracts.gate_target)
        here = detect_target()
        why = kernel.can_implement(contracts.config_for(kernel, spec), here)
        pytest.skip(f"kernel={kernel.name}: its gate accepts no representative spec on {here} ({why}); on a GPU "
                    "the real op runs only for this machine's target")
    pytest.fail(f"kernel={kernel.name}: no representative spec accepted by its gate")


def mode(kernel):
    """How the kernel's real op runs here (harness._execution for this machine): 'interpreter' for Triton on a CPU
    host, 'device' for plain torch or a GPU."""
    from conformance.checks.harness import _execution
    from conformance.core.targets import detect_target

    return _execution(kernel, detect_target())[0] or ("interpreter" if interpreting() else "device")


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_fake_vs_real(kernel):
    representative(kernel)  # skips with the gate's reason where no spec can run here (a ROCm kernel on CUDA)
    seen = []

    @settings(max_examples=FAKE_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(spec=specs_for(kernel))
    def prop(spec):
        seen.append(contracts.check_fake_vs_real(kernel, contracts.build_sample(kernel, spec)))

    contracts.run_check("fake_vs_real", kernel, lambda: (prop(), {"examples": len(seen)})[1], run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_make_fx_one_node(kernel):
    sample = contracts.build_sample(kernel, representative(kernel))
    contracts.run_check("make_fx", kernel, lambda: contracts.check_make_fx(kernel, sample), run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_opcheck(kernel):
    spec = representative(kernel)
    alternates = get_family(kernel.family).contract_alternates(spec, lambda s: contracts.accepts(kernel, s))
    samples = [contracts.build_sample(kernel, s) for s in [spec, *alternates]]
    contracts.run_check("opcheck", kernel, lambda: [contracts.check_opcheck(kernel, s) for s in samples],
                        run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_compile_boundary(kernel):
    sample = contracts.build_sample(kernel, representative(kernel))
    contracts.run_check("compile_boundary", kernel, lambda: contracts.check_compile_boundary(kernel, sample),
                        run_mode=mode(kernel))
