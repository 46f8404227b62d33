"""Conformance plugin for subprocess runs: registers the fault kernels named by FAULT_KERNELS (comma-separated;
default all)."""
import os

from fault_kernels import ALL, BY_NAME

from conformance.core.registry import register_kernel

_names = [n for n in os.environ.get("FAULT_KERNELS", "").split(",") if n]
for _cls in [BY_NAME[n] for n in _names] if _names else ALL:
    register_kernel(_cls)
