"""pytest plugin for subprocess tests (`-p fake_two_gpus`): torch reports two GPUs that are not initialized, so the
worker pinning (conformance.core.workers) narrows CUDA_VISIBLE_DEVICES on a CPU machine. torch.cuda.is_available()
is False, on a GPU machine too: nothing ever runs on a device, and nothing initializes CUDA (its lazy init checks
every device torch.cuda.device_count() names, and the second one does not exist on a one-GPU host)."""
import torch

torch.cuda.device_count = lambda: 2
torch.cuda.is_initialized = lambda: False
torch.cuda.is_available = lambda: False
