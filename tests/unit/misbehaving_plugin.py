"""Conformance plugin for subprocess runs: registers the misbehaving kernels named by MISBEHAVING_KERNELS
(comma-separated; default all)."""
import os

from misbehaving_kernels import ALL, BY_NAME

from conformance.core.registry import register_kernel

_names = [n for n in os.environ.get("MISBEHAVING_KERNELS", "").split(",") if n]
for _cls in [BY_NAME[n] for n in _names] if _names else ALL:
    register_kernel(_cls)
