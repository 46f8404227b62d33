"""Test-only broken kernels whose bug only a compile for the target can catch (the compile lane's proof of power,
docs/proof-of-power.md). Each is triton_w4a16 with its `apply` unchanged, so it passes every CPU numeric check
(the interpreter runs the interpreter's tiles, and the interpreter checks neither LDS sizes nor tl.dot's shape
rules); only its launch on one kind of target is wrong:

- `broken_lds_row_gfx1201`: gfx1201's tile row is 64 x 256 x 128, used unfitted: where a K tile of 128 fits the
  group, its tl.dot tiles need more LDS than the 64 KiB a gfx1201 work-group has. The lane gives resource-fail there.
- `broken_dot_k8_cuda`: on CUDA targets BLOCK_K is clamped to the group size without Triton's tl.dot rule (K >= 16),
  the shipped vLLM bug of docs/shipped-bugs.md; a channelwise K = 8 layer launches a tl.dot with K = 8, which the
  CUDA backend refuses (compile-error). AMD targets accept that dot; the interpreter does not check it.

Not registered on import: tests build the instances they need (they never join the registry's kernels, so no
other suite parametrizes over them).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.core import registry
from conformance.core.runtime import next_power_of_2

registry.load_all()
from conformance_kernels import triton_w4a16 as tw  # noqa: E402 - the built-in package exists after load_all

TritonW4A16 = type(registry.get_kernel("triton_w4a16"))


class LdsRowTooLarge(TritonW4A16):
    name = "broken_lds_row_gfx1201"
    bug = "gfx1201's tile row (64 x 256 x 128, unfitted) needs more LDS than a gfx1201 work-group's 64 KiB"
    ROW = tw.TileConfig(64, 256, 128, split_k=1, num_warps=8, num_stages=2, packed_load=True, magic=True)

    def launch(self, config, M, target):
        good = super().launch(config, M, target)
        if good is None or target.arch != "gfx1201" or good.path.split("+")[0] not in ("dot", "gemv"):
            return good
        gs = config.K if config.group_size == -1 else config.group_size
        bk = tw.fit_tiles(self.ROW, M, config.N, config.K, gs).block_k  # one group per K tile, as the kernel needs
        zp = 0 if config.weight_type == "uint4" else 8
        return tw.describe_launch(M, config.N, config.K, gs, zp, zp == 0, config.dtype, "gfx1201", 0, False, False,
                                  fitted=replace(self.ROW, block_k=bk))


class DotK8OnCuda(TritonW4A16):
    name = "broken_dot_k8_cuda"
    bug = "BLOCK_K clamped to the group size on CUDA without tl.dot's K >= 16 rule (channelwise K = 8)"

    def launch(self, config, M, target):
        good = super().launch(config, M, target)
        if good is None or target.kind != "cuda":
            return good
        gs = config.K if config.group_size == -1 else config.group_size
        row = tw.table_tiles(M, tw.target_tile_kind(target), planar=False)
        if row.dequant_mm or not row.use_dot:
            return good
        fitted = replace(row, block_m=max(16, min(row.block_m, next_power_of_2(M))),
                         block_n=min(row.block_n, max(16, next_power_of_2(config.N))),
                         block_k=min(row.block_k, gs), split_k=1)  # BUG: no max(16, ...) for tl.dot
        zp = 0 if config.weight_type == "uint4" else 8
        return tw.describe_launch(M, config.N, config.K, gs, zp, zp == 0, config.dtype, "gpu", 0, False, True,
                                  fitted=fitted)


BROKEN = {"broken_lds_row_gfx1201": (LdsRowTooLarge, "gfx1201", "resource-fail"),
          "broken_dot_k8_cuda": (DotK8OnCuda, "sm90", "compile-error")}
