"""The Triton launches of the device fault kernels (fault_kernels.IllegalAddressApply, DeviceAssertApply): each leaves
the CUDA context of its process unusable, as a buggy kernel under development does. GPU only (a CPU host runs Triton
in its interpreter, where a stray store writes host memory): imported only where they fire."""
import torch
import triton
import triton.language as tl

STRAY_ELEMENTS = 1 << 38  # int32 elements past the buffer: 1 TiB, far outside anything the process has mapped


@triton.jit
def _store_at(ptr, offset):
    tl.store(ptr + offset, 1)


@triton.jit(debug=True)
def _assert_positive(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(ptr + offs, mask=offs < n, other=1)
    tl.device_assert(v > 0, "fault matrix: a failing device-side assert")


def stray_store(device) -> None:
    """Launch a store STRAY_ELEMENTS past a one-element buffer (asynchronous: the error shows at the next sync)."""
    buf = torch.zeros(1, dtype=torch.int32, device=device)
    _store_at[(1,)](buf, STRAY_ELEMENTS)


def failing_assert(device) -> None:
    """Launch a kernel whose device_assert fails on every element (zeros are not > 0). debug=True at the launch too:
    device asserts are compiled in only in debug mode (TRITON_DEBUG=1 would put every kernel of the run in it)."""
    buf = torch.zeros(4, dtype=torch.int32, device=device)
    _assert_positive[(1,)](buf, 4, BLOCK=4, debug=True)
