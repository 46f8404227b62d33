"""Contract checks over every registered kernel exposed as a custom op (kernel.op is not None).

A failure's record and message carry the check id of the input it failed on (conformance.cases.check_ids) and its
replay line, `python -m conformance repro ID`."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from conformance.checks import contracts
from conformance.core import registry
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


mode = contracts.op_run_mode  # how the kernel's real op runs here: 'interpreter' or 'device'


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_fake_vs_real(kernel):
    representative(kernel)  # skips with the gate's reason where no spec can run here (a ROCm kernel on CUDA)
    seen = []

    # no shrinking: each example runs the real op in the interpreter, and shrinking a broken fake impl (wrong on
    # every spec) took over five minutes; the first failing example's check id replays it just as well
    @settings(max_examples=FAKE_EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=(Phase.explicit, Phase.reuse, Phase.generate),
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(spec=specs_for(kernel))
    def prop(spec):
        seen.append(contracts.check_fake_vs_real(kernel, contracts.build_sample(kernel, spec)))

    contracts.run_check("fake_vs_real", kernel, lambda: (prop(), {"examples": len(seen)})[1], run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_make_fx_one_node(kernel):
    spec = representative(kernel)
    sample = contracts.build_sample(kernel, spec)
    contracts.run_check("make_fx", kernel, lambda: contracts.check_make_fx(kernel, sample), run_mode=mode(kernel),
                        case_id=contracts.check_id("make_fx", kernel, spec))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_opcheck(kernel):
    spec = representative(kernel)
    alternates = get_family(kernel.family).contract_alternates(spec, lambda s: contracts.accepts(kernel, s))
    samples = [contracts.build_sample(kernel, s) for s in [spec, *alternates]]
    contracts.run_check("opcheck", kernel, lambda: [contracts.check_opcheck(kernel, s) for s in samples],
                        run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_compile_boundary(kernel):
    spec = representative(kernel)
    sample = contracts.build_sample(kernel, spec)
    contracts.run_check("compile_boundary", kernel, lambda: contracts.check_compile_boundary(kernel, sample),
                        run_mode=mode(kernel), case_id=contracts.check_id("compile_boundary", kernel, spec))
