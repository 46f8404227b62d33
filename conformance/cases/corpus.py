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
from conformance.families import get_family


@dataclass(frozen=True)
class CorpusClass:
    """One config class: its family, a label, and the Case fields every case of the class shares."""

    family: str
    label: str
    fields: tuple  # ((name, value), ...)

    def cases(self, kernel: str, tier: str | None = None) -> list[Case]:
        """The class's fixed cases for `kernel` (optionally one tier only); the family sets shapes and regimes."""
        seed0 = zlib.crc32(self.label.encode()) % 100_000
        out = [Case(family=self.family, kernel=kernel, **kw)
               for kw in get_family(self.family).corpus_case_fields(dict(self.fields), seed0)]
        return [c for c in out if tier is None or c.tier == tier]


def classes(family: str) -> list[CorpusClass]:
    """Every corpus class of a family, in a fixed order (the family's `corpus_classes`)."""
    return [CorpusClass(family, label, fields) for label, fields in get_family(family).corpus_classes()]


def gate_refusal(kernel, cls: CorpusClass, target) -> str | None:
    """The gate's reason for refusing the class's first case on `target` (None: accepted)."""
    case = cls.cases(kernel.name)[0]
    return kernel.can_implement(case.config(), target)


def accepted_cases(kernel, cls: CorpusClass, target, tier: str | None = None) -> list[Case]:
    """The class's cases the kernel's gate accepts on `target` (judged case by case: K differs)."""
    return [c for c in cls.cases(kernel.name, tier) if kernel.can_implement(c.config(), target) is None]
