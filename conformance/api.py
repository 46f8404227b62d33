"""The plugin API: everything an external kernel needs, in one import.

    from conformance.api import Kernel, Numerics, RunContext, register_kernel, Target, W4A16Config, Fp8QuantConfig

Stable: names are added here, never removed or changed in meaning (docs/plugins.md). The v1 module paths
(`conformance.registry`, `conformance.targets`, `conformance.config`, `conformance.runtime`) stay valid too.
"""
from conformance.core.dtypes import ACT_DTYPES, FP8_DTYPES, INPUT_DTYPES, act_dtype, torch_dtype
from conformance.core.kernel import (
    API_VERSIONS,
    DEQUANT_ROUNDINGS,
    FP8_SCALE_CONVENTIONS,
    RUN_MODES,
    Intake,
    Kernel,
    Numerics,
    RunContext,
    kernel_call,
    kernel_load,
)
from conformance.core.registry import (
    NoKernelError,
    RegistryError,
    Selection,
    all_kernels,
    choose,
    get_kernel,
    load_all,
    register_kernel,
    select,
    unregister_kernel,
)
from conformance.core.runtime import cdiv, interpreting, kernel_device, next_power_of_2
from conformance.core.targets import CPU, Target, detect_target, parse_target
from conformance.families.fp8_group_quant import Fp8QuantConfig
from conformance.families.w4a16 import W4A16Config

__all__ = [
    "ACT_DTYPES", "FP8_DTYPES", "INPUT_DTYPES", "act_dtype", "torch_dtype",
    "RUN_MODES", "Kernel", "Numerics",
    "API_VERSIONS", "DEQUANT_ROUNDINGS", "FP8_SCALE_CONVENTIONS", "Intake", "RunContext", "kernel_call", "kernel_load",
    "NoKernelError", "RegistryError", "Selection", "all_kernels", "choose", "get_kernel", "load_all",
    "register_kernel", "select", "unregister_kernel",
    "cdiv", "interpreting", "kernel_device", "next_power_of_2",
    "CPU", "Target", "detect_target", "parse_target",
    "Fp8QuantConfig", "W4A16Config",
]
