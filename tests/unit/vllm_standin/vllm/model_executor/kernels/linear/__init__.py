"""Stand-in of today's vllm.model_executor.kernels.linear: the kernels' per-platform preference lists."""
from vllm.platforms.interface import PlatformEnum

from .mixed_precision import Gfx1xOnlyLinearKernel, TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel

_POSSIBLE_KERNELS = {
    PlatformEnum.CUDA: [TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel],
    PlatformEnum.ROCM: [Gfx1xOnlyLinearKernel, TorchRefLinearKernel],
    PlatformEnum.CPU: [TorchRefLinearKernel, ZpAlwaysTransposedLinearKernel],
}
