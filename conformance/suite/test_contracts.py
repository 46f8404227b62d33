"""Contract checks over every registered kernel exposed as a custom op (kernel.op is not None)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.checks import contracts
from conformance.core import registry
from conformance.core.runtime import interpreting

registry.load_all()
contracts.inductor_dirs()
OP_KERNELS = contracts.custom_op_kernels()
IDS = [k.name for k in OP_KERNELS]

FAKE_EXAMPLES = 8  # each example runs the real kernel once in the interpreter (~20-100 ms)


def specs_for(kernel):
    """Small specs the kernel's gate accepts: multi-tile N, split-K decode rows, odd M tails."""
    if kernel.family == "w4a16":
        base = st.fixed_dictionaries({
            "M": st.sampled_from([1, 3, 17, 33]), "K": st.sampled_from([128, 256]), "N": st.sampled_from([64, 264]),
            "group_size": st.sampled_from([32, 64, 128, -1]), "wtype": st.sampled_from(["uint4b8", "uint4"]),
            "dtype": st.sampled_from(["float16", "bfloat16"]), "act_order": st.booleans(),
            "format": st.sampled_from(["gptq_v2", "awq", "compressed_tensors"]), "seed": st.integers(0, 2**16)})
    else:
        base = st.fixed_dictionaries({
            "M": st.sampled_from([1, 3, 17]), "K": st.sampled_from([128, 256]),
            "group_size": st.sampled_from([64, 128]),
            "dtype": st.sampled_from(["float16", "bfloat16", "float32"]),
            "fp8_dtype": st.sampled_from(["float8_e4m3fn", "float8_e4m3fnuz"]), "ue8m0": st.booleans(),
            "column_major": st.booleans(), "seed": st.integers(0, 2**16)})
    # AWQ stores no g_idx: act-order AWQ is not a checkpoint that exists
    return base.filter(lambda s: not (s.get("act_order") and s.get("format") == "awq")
                       and contracts.accepts(kernel, s))


def representative(kernel):
    """One fixed accepted spec per kernel (opcheck, compile boundary)."""
    if kernel.family == "w4a16":
        for spec in ({"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
                      "act_order": False, "format": "gptq_v2", "seed": 1},
                     {"M": 5, "K": 256, "N": 256, "group_size": 128, "wtype": "uint4", "dtype": "float16",
                      "act_order": True, "format": "gptq_v2", "seed": 1}):
            if contracts.accepts(kernel, spec):
                return spec
    else:
        spec = {"M": 5, "K": 256, "group_size": 128, "dtype": "bfloat16", "fp8_dtype": "float8_e4m3fn",
                "ue8m0": False, "column_major": False, "seed": 1}
        if contracts.accepts(kernel, spec):
            return spec
    from conformance.core.runtime import kernel_device
    from conformance.core.targets import detect_target

    if kernel_device() != "cpu":  # on a GPU only the detected target counts (contracts.gate_target)
        here = detect_target()
        why = kernel.can_implement(contracts.config_for(kernel, spec), here)
        pytest.skip(f"kernel={kernel.name}: its gate accepts no representative spec on {here} ({why}); on a GPU "
                    "the real op runs only for this machine's target")
    pytest.fail(f"kernel={kernel.name}: no representative spec accepted by its gate")


def mode(kernel):
    return "interpreter" if interpreting() else "device"


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
    samples = [contracts.build_sample(kernel, spec)]
    if kernel.family == "fp8_group_quant":  # column-major scales have their own strides
        samples.append(contracts.build_sample(kernel, dict(spec, column_major=True, ue8m0=True)))
    elif kernel.family == "w4a16":  # the other dtype and the no-zeros (uint4b8) path
        alt = dict(spec, dtype="bfloat16", wtype="uint4b8", M=1)
        if contracts.accepts(kernel, alt):
            samples.append(contracts.build_sample(kernel, alt))
    contracts.run_check("opcheck", kernel, lambda: [contracts.check_opcheck(kernel, s) for s in samples],
                        run_mode=mode(kernel))


@pytest.mark.parametrize("kernel", OP_KERNELS, ids=IDS)
def test_compile_boundary(kernel):
    sample = contracts.build_sample(kernel, representative(kernel))
    contracts.run_check("compile_boundary", kernel, lambda: contracts.check_compile_boundary(kernel, sample),
                        run_mode=mode(kernel))
