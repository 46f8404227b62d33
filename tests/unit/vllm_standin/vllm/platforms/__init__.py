"""Stand-in of vllm.platforms: the machine's platform is the CPU platform (no device capability)."""
from .cpu import CpuPlatform

_current_platform = CpuPlatform()
current_platform = _current_platform
