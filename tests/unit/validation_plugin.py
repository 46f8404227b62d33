"""Conformance plugin for subprocess runs of validate: registers the test-only kernels."""
from conformance.registry import register_kernel
from validation_kernels import ALL

for _cls in ALL:
    register_kernel(_cls)
