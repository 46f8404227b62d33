"""Stand-in of vllm.platforms: the CPU platform (no device capability)."""


class _CpuPlatform:
    device_name = "cpu"

    def is_cpu(self) -> bool:
        return True

    def is_cuda_alike(self) -> bool:
        return False

    def get_device_capability(self):
        return None


current_platform = _CpuPlatform()
