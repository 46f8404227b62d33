"""Test helper: uniformly drawn canonical weights (full stored range, zero points 0 and max included)."""
from __future__ import annotations

import torch

from references.scalar_types import scalar_type
from references.weight import CanonicalWeight


def random_weight(seed: int, K: int, N: int, group_size: int, wtype, act_dtype=torch.float16,
                  act_order: bool = False, zeros_fill: int | None = None) -> CanonicalWeight:
    """Any q and z in the type's range, finite random scales, and (act_order) a random valid g_idx."""
    g = torch.Generator().manual_seed(seed)
    t = scalar_type(wtype)
    gs = K if group_size == -1 else group_size
    G = K // gs
    q = torch.randint(0, t.max + 1, (K, N), generator=g, dtype=torch.int32)
    z = None
    if not t.has_bias():
        z = torch.randint(0, t.max + 1, (G, N), generator=g, dtype=torch.int32)
        if zeros_fill is not None:
            z.fill_(zeros_fill)
    s = (torch.randn(G, N, generator=g, dtype=torch.float64) * 1e-2).to(act_dtype)
    g_idx = None
    if act_order:
        g_idx = (torch.arange(K) // gs)[torch.randperm(K, generator=g)].to(torch.int32)
    return CanonicalWeight(q=q, scales=s, zeros=z, g_idx=g_idx, group_size=group_size, wtype=t)


def random_words(seed: int, shape) -> torch.Tensor:
    """Arbitrary int32 words (every bit pattern possible)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(1 << 31), 1 << 31, tuple(shape), generator=g, dtype=torch.int64).to(torch.int32)
