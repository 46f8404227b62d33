"""Stand-in of vllm.platforms.cuda: like vLLM's, it imports the compiled library first (absent in the stand-in)."""
import torch

import vllm._C_stable_libtorch  # noqa: F401 - as vLLM does; the adapter puts a placeholder where it cannot load

from .interface import DeviceCapability, Platform, PlatformEnum


class CudaPlatform(Platform):
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    dispatch_key = "CUDA"

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))
