"""Stand-in of vllm.platforms.rocm: the GPU arch is read once, at import, as vLLM does."""
import re

import torch

from .interface import DeviceCapability, Platform, PlatformEnum

_GCN_ARCH = torch.cuda.get_device_properties("cuda").gcnArchName
_ON_GFX1X = any(a in _GCN_ARCH for a in ("gfx11", "gfx12"))
_ON_GFX1100 = "gfx1100" in _GCN_ARCH


def on_gfx1x() -> bool:
    return _ON_GFX1X


def on_gfx1100() -> bool:
    return _ON_GFX1100


class RocmPlatform(Platform):
    _enum = PlatformEnum.ROCM
    device_name = "rocm"
    dispatch_key = "CUDA"

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
        d = re.match(r"gfx(\d+)", _GCN_ARCH).group(1)
        return DeviceCapability(int(d[:2]), int(d[2])) if len(d) == 4 else DeviceCapability(int(d[0]), int(d[1]))

    @classmethod
    def is_fp8_fnuz(cls) -> bool:
        return "gfx94" in _GCN_ARCH

    @classmethod
    def fp8_dtype(cls) -> torch.dtype:
        return torch.float8_e4m3fnuz if cls.is_fp8_fnuz() else torch.float8_e4m3fn
