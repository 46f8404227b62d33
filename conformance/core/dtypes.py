"""Dtype names: the one table from the names used in configs, case ids and the CLI to torch dtypes.

Configs and case ids carry dtype names (strings), never torch dtypes, so they print, parse and hash plainly.
"""
from __future__ import annotations

import torch

from references.errors import require
from references.fp8 import FP8_DTYPES as _FP8

ACT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}  # W4A16 activations
INPUT_DTYPES = {**ACT_DTYPES, "float32": torch.float32}  # FP8 quant inputs
FP8_DTYPES = dict(_FP8)  # float8_e4m3fn (max 448), float8_e4m3fnuz (gfx94x, clamped at 224)
SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
         "float8_e4m3fn": "e4m3fn", "float8_e4m3fnuz": "e4m3fnuz"}  # as written in case ids
LONG = {v: k for k, v in SHORT.items()}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a name in INPUT_DTYPES or FP8_DTYPES; others raise InvalidInput."""
    table = {**INPUT_DTYPES, **FP8_DTYPES}
    require(name in table, "dtype", name, f"one of {list(table)}")
    return table[name]


def act_dtype(name: str) -> torch.dtype:
    """The torch dtype of a W4A16 activation dtype name (float16 or bfloat16)."""
    require(name in ACT_DTYPES, "dtype", name, f"one of {sorted(ACT_DTYPES)}")
    return ACT_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The name of a torch dtype in INPUT_DTYPES or FP8_DTYPES (the inverse of torch_dtype)."""
    names = {v: k for k, v in {**INPUT_DTYPES, **FP8_DTYPES}.items()}
    require(dtype in names, "dtype", dtype, f"one of {list(names)}")
    return names[dtype]
