"""Op families: each owns its config type, config space, case fields, inputs, reference and comparison.

`get_family(name)` returns the family object; `all_families()` every family, in `core.registry.FAMILIES` order.
"""
from __future__ import annotations

import importlib

from conformance.core.registry import FAMILIES as FAMILY_NAMES
from references.errors import require


def get_family(name: str):
    """The Family object named `name` (its module `conformance.families.<name>` defines FAMILY)."""
    require(name in FAMILY_NAMES, "family", name, f"one of {list(FAMILY_NAMES)}")
    return importlib.import_module(f"conformance.families.{name}").FAMILY


def all_families() -> list:
    return [get_family(n) for n in FAMILY_NAMES]
