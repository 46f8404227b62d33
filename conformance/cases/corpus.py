"""A fixed, seeded corpus of small cases per config class: the same list on every run (no hypothesis).

Used by error profiles (drift of error ratios between runs) and by `validate --try-refused` (running
kernels on configs their gates refuse). A config class is the discrete part of a layer config; each
class gets a few cases with shapes small enough for the Triton interpreter and seeds derived from the
class label (crc32), so adding a class never changes another class's cases.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from conformance.cases.ids import Case

W4A16_WEIGHT_TYPES = ("uint4b8", "uint4")
W4A16_GROUPS = (-1, 32, 128, 256)  # -1 = channelwise
W4A16_DTYPES = ("float16", "bfloat16")
# formats rotated over a class's cases so every checkpoint codec feeds every kernel's load step
W4A16_FORMATS = ("gptq_v2", "compressed_tensors", "awq", "gptq_v1")
FP8_GROUPS = (64, 128)
FP8_DTYPES_IN = ("bfloat16", "float16", "float32")
FP8_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz")

# (M, N, K, tier, regime): decode row, odd multi-row tail, two N tiles; K = 512 gives group 256 two groups
W4A16_SHAPES = (
    (3, 64, 256, "exact", "exact"),
    (17, 64, 512, "statistical", "normal"),
    (1, 128, 256, "statistical", "outlier_channels"),
    (33, 64, 512, "statistical", "heavy_tailed"),
)
FP8_SHAPES = (
    (5, 256, "exact", "fp8_boundaries"),
    (17, 512, "statistical", "normal"),
    (1, 256, "statistical", "saturation"),
)


@dataclass(frozen=True)
class CorpusClass:
    """One config class: its family, a label, and the Case fields every case of the class shares."""

    family: str
    label: str
    fields: tuple  # ((name, value), ...)

    def cases(self, kernel: str, tier: str | None = None) -> list[Case]:
        """The class's fixed cases for `kernel` (optionally one tier only)."""
        seed0 = zlib.crc32(self.label.encode()) % 100_000
        f = dict(self.fields)
        out = []
        if self.family == "w4a16":
            for i, (M, N, K, t, regime) in enumerate(W4A16_SHAPES):
                fmt = "gptq_v2" if f["act_order"] else W4A16_FORMATS[(seed0 + i) % len(W4A16_FORMATS)]
                out.append(Case(family="w4a16", kernel=kernel, regime=regime, tier=t, seed=seed0 + i, M=M, N=N,
                                K=K, format=fmt, **f))
        else:
            for i, (T, H, t, regime) in enumerate(FP8_SHAPES):
                out.append(Case(family="fp8_group_quant", kernel=kernel, regime=regime, tier=t, seed=seed0 + i,
                                tokens=T, hidden=H, **f))
        return [c for c in out if tier is None or c.tier == tier]


def w4a16_classes() -> list[CorpusClass]:
    out = []
    for wt in W4A16_WEIGHT_TYPES:
        for g in W4A16_GROUPS:
            for ao in (False, True):
                if ao and g == -1:
                    continue  # one group spanning K: g_idx is all zeros, act-order changes nothing
                for dt in W4A16_DTYPES:
                    gl = "ch" if g == -1 else f"g{g}"
                    label = f"{wt} {gl} {'ao' if ao else 'noao'} {dt}"
                    out.append(CorpusClass("w4a16", label, (("weight_type", wt), ("group_size", g),
                                                             ("act_order", ao), ("dtype", dt))))
    return out


def fp8_classes() -> list[CorpusClass]:
    out = []
    for g in FP8_GROUPS:
        for dt in FP8_DTYPES_IN:
            for f8 in FP8_DTYPES:
                for ue in (False, True):
                    for cm in (False, True):
                        label = (f"g{g} {dt} {f8.removeprefix('float8_')}{' ue8m0' if ue else ''}"
                                 f"{' colmajor' if cm else ''}")
                        out.append(CorpusClass("fp8_group_quant", label, (
                            ("group_size", g), ("dtype", dt), ("fp8_dtype", f8), ("ue8m0", ue),
                            ("column_major_scales", cm))))
    return out


def classes(family: str) -> list[CorpusClass]:
    """Every corpus class of a family, in a fixed order."""
    return w4a16_classes() if family == "w4a16" else fp8_classes()


def gate_refusal(kernel, cls: CorpusClass, target) -> str | None:
    """The gate's reason for refusing the class's first case on `target` (None: accepted)."""
    case = cls.cases(kernel.name)[0]
    return kernel.can_implement(case.config(), target)


def accepted_cases(kernel, cls: CorpusClass, target, tier: str | None = None) -> list[Case]:
    """The class's cases the kernel's gate accepts on `target` (judged case by case: K differs)."""
    return [c for c in cls.cases(kernel.name, tier) if kernel.can_implement(c.config(), target) is None]
