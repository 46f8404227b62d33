"""pytest plugin for subprocess tests (`-p fake_two_gpus`): torch reports two GPUs that are not initialized, so the
worker pinning (conformance.core.workers) narrows CUDA_VISIBLE_DEVICES on a CPU machine. torch.cuda.is_available()
stays False: nothing ever runs on a device."""
import torch

torch.cuda.device_count = lambda: 2
torch.cuda.is_initialized = lambda: False
