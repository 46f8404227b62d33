"""Layer config types of every family, in one import (each is defined by its family module)."""
from conformance.core.dtypes import ACT_DTYPES, FP8_DTYPES, act_dtype
from conformance.families.fp8_group_quant import Fp8QuantConfig
from conformance.families.w4a16 import W4A16Config

__all__ = ["ACT_DTYPES", "FP8_DTYPES", "act_dtype", "W4A16Config", "Fp8QuantConfig"]
