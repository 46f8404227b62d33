"""A broken plugin: registers a kernel whose name is only whitespace (registration must refuse it)."""
from misbehaving_kernels import TorchDequant

from conformance.core.registry import register_kernel


@register_kernel
class BlankName(TorchDequant):
    name = "   "
