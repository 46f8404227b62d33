"""Stand-in of today's mixed-precision kernel package (vllm#34055 moved it here)."""
from .MPLinearKernel import MPLinearKernel, MPLinearLayerConfig
from .torch_kernels import Gfx1xOnlyLinearKernel, TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel

__all__ = ["MPLinearKernel", "MPLinearLayerConfig", "Gfx1xOnlyLinearKernel", "TorchRefLinearKernel",
           "ZpAlwaysTransposedLinearKernel"]
