"""The op-family interface: everything the suite knows about one op family lives in one `Family` object.

Like PyTorch's OpInfo, a family object owns its config type, its one config space, its case-id fields, its
strategies, its input builder, its reference and its comparison. Outside `conformance.families` nothing
branches on a family name: code asks the family object (`conformance.families.get_family(name)`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CaseField:
    """One family-specific field of a case and of its id (`key=value` in the id).

    key: the key written in ids (short, stable: renaming it breaks stored ids);
    attr: the Case attribute / config field it fills;
    kind: int, bool, or a tuple of allowed string values;
    doc: one line for the docs' field table;
    fmt / parse: value <-> id text (default: str() / int() / "1"|"0" for bool / identity for strings);
    default: the value when an id omits the key (absent: the key is required).
    """

    key: str
    attr: str
    kind: Any
    doc: str
    fmt: Any = None
    parse: Any = None
    default: Any = ...

    @property
    def required(self) -> bool:
        return self.default is ...


class Family:
    """One op family. Subclasses set `name` and `config_type` and fill in the members below."""

    name: str = ""
    config_type: type = None
    case_fields: tuple = ()  # CaseField table: generates case ids, their parser and the docs' table
