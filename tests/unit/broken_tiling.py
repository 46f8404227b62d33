"""Test-only broken W4A16 kernels with ONE tiling bug in the Triton GEMM (a conformance plugin).

Each runs tests/unit/broken_mutant_gemm.py's copy of triton_w4a16 (every path: GEMV, swap_ab, dot, dequant_mm)
with one switch on: a K tail, a split-K remainder or a group index that a tile boundary gets wrong. Each shows only
on some shapes (a partial K tile; a K tile count the table's split does not divide; a group wider than BLOCK_K),
which the CI plan's boundary rows hold. Load and unload as tests/unit/broken_kernels.py says;
tests/unit/broken_registry.py lists every broken kernel.
"""
from __future__ import annotations

from conformance.core.registry import register_kernel
from tests.unit.broken_mutant_gemm import TritonLaunchMutant

PLUGIN = "tests.unit.broken_tiling"


@register_kernel
class KTailDropped(TritonLaunchMutant):
    """BUG: the K loop runs K // BLOCK_K tiles, so the last, partial K tile (one group spanning a K that is not a
    multiple of BLOCK_K, e.g. channelwise K = 136) never contributes; on the dequant_mm path its rows of the
    dequantized weight are never written."""

    name = "broken_k_tail_dropped"
    bug = "the last partial K tile dropped (K loop bound K // BLOCK_K)"
    bugs = ("drop_k_tail",)


@register_kernel
class SplitRemainderDropped(TritonLaunchMutant):
    """BUG: split-K uses the table's split count even when it does not divide the K tile count: each split runs
    tiles // splits tiles, so the remaining tiles (K not a multiple of BLOCK_K x split) are never summed."""

    name = "broken_split_remainder_dropped"
    bug = "split-K drops the K tiles past splits * (tiles // splits) when the split does not divide them"
    bugs = ("drop_split_remainder",)


@register_kernel
class GroupIndexRoundedUp(TritonLaunchMutant):
    """BUG: a K tile's group index is ceil(k0 / group_size) (clamped to the last group) instead of
    k0 // group_size: right for tiles that start on a group boundary, wrong for tiles inside a group (groups wider
    than BLOCK_K: group 256, channelwise, one group spanning K)."""

    name = "broken_group_index_rounded_up"
    bug = "a K tile's group index rounded up, wrong for tiles that start inside a group"
    bugs = ("group_round_up",)
