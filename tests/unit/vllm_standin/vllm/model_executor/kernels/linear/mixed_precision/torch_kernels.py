"""Today's layout of the stand-in kernels: the same plain-torch code (the old layout's `_DequantOnce`), and one
kernel whose gate asks vLLM's platform as today's RDNA kernels do (`current_platform.is_rocm()`, `on_gfx1x()`)."""
from __future__ import annotations

from vllm.model_executor.layers.quantization.kernels.mixed_precision.torch_kernels import (
    _DequantOnce,
    _ZpAlwaysTransposed,
)
from vllm.platforms import current_platform

from .MPLinearKernel import MPLinearKernel


class TorchRefLinearKernel(_DequantOnce, MPLinearKernel):
    """Correct: every tensor is read through its declared layout."""


class ZpAlwaysTransposedLinearKernel(_ZpAlwaysTransposed, _DequantOnce, MPLinearKernel):
    """vllm#47159: the zero points are transposed as if every checkpoint were compressed-tensors."""


class Gfx1xOnlyLinearKernel(_DequantOnce, MPLinearKernel):
    """Correct numbers, gated like vLLM's RDNA kernels: ROCm gfx11/gfx12 only, asked of the current platform."""

    @classmethod
    def get_min_capability(cls) -> int:
        return 0

    @classmethod
    def can_implement(cls, c):
        if not current_platform.is_rocm():
            return False, "Gfx1xOnlyLinearKernel only targets ROCm"
        from vllm.platforms.rocm import on_gfx1x

        if not on_gfx1x():
            return False, "Gfx1xOnlyLinearKernel only targets gfx11/gfx12"
        return super().can_implement(c)
