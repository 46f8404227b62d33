"""Shared argument checks for the codecs: every failure names the field, the value and what is allowed."""
from __future__ import annotations

import torch

from ..errors import require


def int_tensor(t, field: str, shape: tuple | None = None, dtype=torch.int32) -> torch.Tensor:
    """Require a torch tensor of `dtype` (and `shape`, when given)."""
    require(isinstance(t, torch.Tensor), field, type(t).__name__, f"a torch.Tensor of {dtype}")
    require(t.dtype == dtype, f"{field}.dtype", t.dtype, str(dtype))
    if shape is not None:
        require(tuple(t.shape) == tuple(shape), f"{field}.shape", tuple(t.shape), f"{tuple(shape)}")
    return t


def ndim(t, field: str, n: int, what: str) -> torch.Tensor:
    """Require a torch tensor with `n` dimensions (`what` names them, e.g. '[K, N]')."""
    require(isinstance(t, torch.Tensor), field, type(t).__name__, f"a torch.Tensor {what}")
    require(t.dim() == n, f"{field}.shape", tuple(t.shape), f"a {n}-D tensor {what}")
    return t


def multiple(size: int, field: str, of: int) -> None:
    require(size % of == 0 and size > 0, field, size, f"a positive multiple of {of}")


def float_tensor(t, field: str, shape: tuple) -> torch.Tensor:
    """Require a floating tensor of `shape` (scales)."""
    require(isinstance(t, torch.Tensor), field, type(t).__name__, "a floating torch.Tensor")
    require(t.is_floating_point(), f"{field}.dtype", t.dtype, "a floating dtype")
    require(tuple(t.shape) == tuple(shape), f"{field}.shape", tuple(t.shape), f"{tuple(shape)}")
    return t


def bits_of(bits: int) -> int:
    require(bits in (4, 8), "bits", bits, "4 or 8")
    return bits


def tensors_present(tensors: dict, names, fmt: str) -> None:
    """Require every name in `names` among the checkpoint's tensors."""
    for name in names:
        require(name in tensors, f"tensors[{name!r}]", "missing", f"present in a {fmt} checkpoint "
                f"(got {sorted(tensors)})")


def groups(K: int, group_size: int) -> int:
    """G for a checkpoint's K and group_size (-1 = channelwise, one group)."""
    if group_size == -1:
        return 1
    require(isinstance(group_size, int) and group_size > 0 and K % group_size == 0, "group_size", group_size,
            f"-1 (channelwise) or a positive divisor of K={K}")
    return K // group_size
