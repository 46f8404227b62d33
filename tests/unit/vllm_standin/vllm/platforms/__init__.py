"""Stand-in of vllm.platforms: like vLLM's, the machine's platform is CUDA where torch sees a CUDA device, else the
CPU platform (no device capability). vLLM resolves it the same way at first use; on a GPU host a gate asked for the
machine's own target is answered by this platform, as vLLM's real one would answer it."""
import torch

if torch.cuda.is_available() and torch.version.cuda:
    from .cuda import CudaPlatform

    _current_platform = CudaPlatform()
else:
    from .cpu import CpuPlatform

    _current_platform = CpuPlatform()
current_platform = _current_platform
