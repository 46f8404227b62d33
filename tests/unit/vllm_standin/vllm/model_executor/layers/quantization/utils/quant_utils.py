"""Stand-in of vLLM's quant_utils: the fp8 limits of the current platform (224 on e4m3fnuz platforms)."""
import torch

from vllm.platforms import current_platform


def get_fp8_min_max() -> tuple[float, float]:
    if current_platform.is_fp8_fnuz():
        return -224.0, 224.0
    finfo = torch.finfo(current_platform.fp8_dtype())
    return finfo.min, finfo.max
