"""Cases and case ids: one frozen Case per (kernel, layer config, data regime, tier, seed); its id is one
shell-safe line that parses back to the same Case.

Id grammar (fields joined by '-', so no field value contains '-'):
  w4a16/KERNEL/M<m>-N<n>-K<k>-g<group|ch>-<weight_type>-<ao|noao>-<fp16|bf16>-<format>-<regime>-<tier>-s<seed>
  fp8_group_quant/KERNEL/T<tokens>-H<hidden>-g<group>-<fp16|bf16|fp32>-<e4m3fn|e4m3fnuz>-<ue8m0|f32scale>
      -<rowmajor|colmajor>-<regime>-<tier>-s<seed>
e.g. w4a16/triton_w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from conformance.families.config import Fp8QuantConfig, W4A16Config
from references.checkpoint import CHECKPOINT_FORMATS
from references.errors import InvalidInput, require
from references.scalar_types import SCALAR_TYPES

FAMILIES = ("w4a16", "fp8_group_quant")
TIERS = ("exact", "statistical")
# Data regimes: references.generators.DATA_REGIMES for weights and activations, plus fp8-only regimes
# (activation values placed to stress fp8 quantization). Kept here so ids parse without importing torch data.
W4A16_REGIMES = ("exact", "normal", "heavy_tailed", "outlier_channels", "all_zero_groups", "extreme_scales")
FP8_ONLY_REGIMES = ("saturation", "fp8_boundaries")
FP8_REGIMES = W4A16_REGIMES + FP8_ONLY_REGIMES
REGIMES = {"w4a16": W4A16_REGIMES, "fp8_group_quant": FP8_REGIMES}

_DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_DTYPE_LONG = {v: k for k, v in _DTYPE_SHORT.items()}
_FP8_SHORT = {"float8_e4m3fn": "e4m3fn", "float8_e4m3fnuz": "e4m3fnuz"}
_FP8_LONG = {v: k for k, v in _FP8_SHORT.items()}
_KERNEL_RE = re.compile(r"[A-Za-z0-9_.]+")


@dataclass(frozen=True)
class Case:
    """One replayable check. W4A16 fields: M, N, K, group_size (-1 = channelwise), weight_type, act_order,
    dtype, format. FP8 fields: tokens, hidden, group_size, dtype, fp8_dtype, ue8m0, column_major_scales.
    Fields of the other family stay at their defaults (None / False). Validated on construction."""

    family: str
    kernel: str
    regime: str
    tier: str
    seed: int
    group_size: int
    dtype: str
    # w4a16
    M: int | None = None
    N: int | None = None
    K: int | None = None
    weight_type: str | None = None
    act_order: bool = False
    format: str | None = None
    # fp8_group_quant
    tokens: int | None = None
    hidden: int | None = None
    fp8_dtype: str | None = None
    ue8m0: bool = False
    column_major_scales: bool = False

    def __post_init__(self):
        require(self.family in FAMILIES, "family", self.family, f"one of {list(FAMILIES)}")
        require(isinstance(self.kernel, str) and bool(_KERNEL_RE.fullmatch(self.kernel)), "kernel", self.kernel,
                "a registered kernel name (letters, digits, '_' and '.')")
        require(self.tier in TIERS, "tier", self.tier, f"one of {list(TIERS)}")
        require(self.regime in REGIMES[self.family], "regime", self.regime,
                f"one of {list(REGIMES[self.family])} for family {self.family}")
        # W4A16's exact tier needs exact-regime data (every partial sum exact in fp32); fp8 group quant is
        # bit-exact on any data, so its exact tier takes every regime
        require(self.family != "w4a16" or self.tier != "exact" or self.regime == "exact", "regime", self.regime,
                "'exact' when family='w4a16' and tier='exact' (only exact-regime data is exactly representable)")
        require(isinstance(self.seed, int) and self.seed >= 0, "seed", self.seed, "a non-negative int")
        if self.family == "w4a16":
            self._check_w4a16()
        else:
            self._check_fp8()

    def _check_w4a16(self):
        for f in ("M", "N", "K"):
            v = getattr(self, f)
            require(isinstance(v, int) and v > 0, f, v, "a positive int")
        require(self.N % 8 == 0, "N", self.N, "a positive multiple of 8")
        require(self.group_size == -1 or (isinstance(self.group_size, int) and self.group_size > 0),
                "group_size", self.group_size, "-1 (channelwise, written 'gch') or a positive int")
        require(self.group_size == -1 or self.K % self.group_size == 0, "K", self.K,
                f"a multiple of group_size={self.group_size}")
        require(self.weight_type in SCALAR_TYPES, "weight_type", self.weight_type, f"one of {sorted(SCALAR_TYPES)}")
        require(self.dtype in ("float16", "bfloat16"), "dtype", self.dtype, "float16 or bfloat16 (fp16, bf16)")
        require(self.format in CHECKPOINT_FORMATS, "format", self.format, f"one of {list(CHECKPOINT_FORMATS)}")
        require(not (self.act_order and self.format == "awq"), "act_order", self.act_order,
                "False for format='awq' (AWQ checkpoints have no g_idx)")
        for f in ("tokens", "hidden", "fp8_dtype"):
            require(getattr(self, f) is None, f, getattr(self, f), "None for family w4a16")
        require(not self.ue8m0 and not self.column_major_scales, "ue8m0/column_major_scales",
                (self.ue8m0, self.column_major_scales), "False for family w4a16")

    def _check_fp8(self):
        for f in ("tokens", "hidden", "group_size"):
            v = getattr(self, f)
            require(isinstance(v, int) and v > 0, f, v, "a positive int")
        require(self.hidden % self.group_size == 0, "hidden", self.hidden,
                f"a multiple of group_size={self.group_size}")
        require(self.dtype in _DTYPE_SHORT, "dtype", self.dtype, f"one of {list(_DTYPE_SHORT)}")
        require(self.fp8_dtype in _FP8_SHORT, "fp8_dtype", self.fp8_dtype, f"one of {list(_FP8_SHORT)}")
        for f in ("M", "N", "K", "weight_type", "format"):
            require(getattr(self, f) is None, f, getattr(self, f), "None for family fp8_group_quant")
        require(not self.act_order, "act_order", self.act_order, "False for family fp8_group_quant")

    @property
    def id(self) -> str:
        """The one-line case id (see the module docstring); parse_case_id(case.id) == case."""
        if self.family == "w4a16":
            g = "ch" if self.group_size == -1 else str(self.group_size)
            body = [f"M{self.M}", f"N{self.N}", f"K{self.K}", f"g{g}", self.weight_type,
                    "ao" if self.act_order else "noao", _DTYPE_SHORT[self.dtype], self.format]
        else:
            body = [f"T{self.tokens}", f"H{self.hidden}", f"g{self.group_size}", _DTYPE_SHORT[self.dtype],
                    _FP8_SHORT[self.fp8_dtype], "ue8m0" if self.ue8m0 else "f32scale",
                    "colmajor" if self.column_major_scales else "rowmajor"]
        body += [self.regime, self.tier, f"s{self.seed}"]
        return f"{self.family}/{self.kernel}/" + "-".join(body)

    def __str__(self) -> str:
        return self.id

    def config(self):
        """The W4A16Config / Fp8QuantConfig a kernel's gate judges (M is not part of a layer config)."""
        if self.family == "w4a16":
            return W4A16Config(weight_type=self.weight_type, group_size=self.group_size, act_order=self.act_order,
                               dtype=self.dtype, format=self.format, N=self.N, K=self.K)
        return Fp8QuantConfig(group_size=self.group_size, dtype=self.dtype, fp8_dtype=self.fp8_dtype,
                              ue8m0=self.ue8m0, column_major_scales=self.column_major_scales, hidden=self.hidden)

    def with_kernel(self, kernel: str) -> Case:
        """The same case for another kernel (same data, same seed)."""
        return replace(self, kernel=kernel)

    def replace(self, **changes) -> Case:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _int_field(tok: str, prefix: str, field: str, allowed: str) -> int:
    m = re.fullmatch(re.escape(prefix) + r"(0|[1-9][0-9]*)", tok)
    if not m:
        raise InvalidInput(field, tok, allowed)
    return int(m.group(1))


def _choice(tok: str, field: str, table: dict):
    if tok not in table:
        raise InvalidInput(field, tok, f"one of {list(table)}")
    return table[tok]


_W4A16_SHAPE = "M<m>-N<n>-K<k>-g<group|ch>-<weight_type>-<ao|noao>-<fp16|bf16>-<format>-<regime>-<tier>-s<seed>"
_FP8_SHAPE = ("T<tokens>-H<hidden>-g<group>-<fp16|bf16|fp32>-<e4m3fn|e4m3fnuz>-<ue8m0|f32scale>-<rowmajor|colmajor>"
              "-<regime>-<tier>-s<seed>")


def parse_case_id(text: str) -> Case:
    """Parse a case id; any bad part raises InvalidInput naming the field, the value and what is allowed."""
    require(isinstance(text, str), "case id", text, "a string")
    s = text.strip()
    parts = s.split("/")
    require(len(parts) == 3, "case id", text, "FAMILY/KERNEL/FIELDS, e.g. " + EXAMPLE_ID)
    family, kernel, body = parts
    require(family in FAMILIES, "family", family, f"one of {list(FAMILIES)}")
    toks = body.split("-")
    shape = _W4A16_SHAPE if family == "w4a16" else _FP8_SHAPE
    require(len(toks) == 11 if family == "w4a16" else len(toks) == 10, "case id fields", body,
            f"{shape} ({shape.count('-') + 1} fields joined by '-')")
    regime, tier = toks[-3], toks[-2]
    seed = _int_field(toks[-1], "s", "seed", "s<non-negative int>, e.g. s1234")
    regimes = REGIMES[family]
    require(regime in regimes, "regime", regime, f"one of {list(regimes)}")
    require(tier in TIERS, "tier", tier, f"one of {list(TIERS)}")
    if family == "w4a16":
        M = _int_field(toks[0], "M", "M", "M<positive int>, e.g. M3")
        N = _int_field(toks[1], "N", "N", "N<positive multiple of 8>, e.g. N64")
        K = _int_field(toks[2], "K", "K", "K<positive int>, e.g. K256")
        g = -1 if toks[3] == "gch" else _int_field(toks[3], "g", "group_size",
                                                   "g<positive int> or gch (channelwise), e.g. g128")
        wt = toks[4]
        require(wt in SCALAR_TYPES, "weight_type", wt, f"one of {sorted(SCALAR_TYPES)}")
        ao = _choice(toks[5], "act_order", {"ao": True, "noao": False})
        dt = _choice(toks[6], "dtype", {"fp16": "float16", "bf16": "bfloat16"})
        fmt = toks[7]
        require(fmt in CHECKPOINT_FORMATS, "format", fmt, f"one of {list(CHECKPOINT_FORMATS)}")
        return Case(family=family, kernel=kernel, regime=regime, tier=tier, seed=seed, group_size=g, dtype=dt,
                    M=M, N=N, K=K, weight_type=wt, act_order=ao, format=fmt)
    T = _int_field(toks[0], "T", "tokens", "T<positive int>, e.g. T5")
    H = _int_field(toks[1], "H", "hidden", "H<positive int>, e.g. H512")
    g = _int_field(toks[2], "g", "group_size", "g<positive int>, e.g. g128")
    dt = _choice(toks[3], "dtype", _DTYPE_LONG)
    f8 = _choice(toks[4], "fp8_dtype", _FP8_LONG)
    ue = _choice(toks[5], "ue8m0", {"ue8m0": True, "f32scale": False})
    cm = _choice(toks[6], "column_major_scales", {"colmajor": True, "rowmajor": False})
    return Case(family=family, kernel=kernel, regime=regime, tier=tier, seed=seed, group_size=g, dtype=dt,
                tokens=T, hidden=H, fp8_dtype=f8, ue8m0=ue, column_major_scales=cm)


EXAMPLE_ID = "w4a16/triton_w4a16/M3-N64-K256-g32-uint4-ao-fp16-gptq_v1-exact-exact-s1234"
EXAMPLE_FP8_ID = ("fp8_group_quant/fp8_group_quant_native/"
                  "T5-H512-g128-bf16-e4m3fn-f32scale-rowmajor-normal-statistical-s7")
