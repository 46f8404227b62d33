"""Conformance plugin for subprocess runs of validate: registers the test-only kernels."""
from validation_kernels import ALL

from conformance.core.registry import register_kernel

for _cls in ALL:
    register_kernel(_cls)
