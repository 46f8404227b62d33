"""Stand-in of vLLM's mixed-precision kernel package: the interface and its kernels in preference order."""
from .MPLinearKernel import MPLinearKernel, MPLinearLayerConfig
from .torch_kernels import TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel

_POSSIBLE_KERNELS = [TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel]

__all__ = ["MPLinearKernel", "MPLinearLayerConfig", "TorchRefLinearKernel", "ZpAlwaysTransposedLinearKernel"]
