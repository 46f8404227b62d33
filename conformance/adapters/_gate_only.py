"""The kernel an adapter registers when its third-party package does not import: gate-only, every config
refused with the reason, so `conformance list`, coverage and the suite's skips say why the kernel is absent."""
from __future__ import annotations


class Unavailable:
    """Mix in before the adapter's Kernel class: `Unavailable(why)`; the gate and availability return `why`."""

    has_model = False

    def __init__(self, why: str):
        self.why = why
        self.gate_note = why

    def can_implement(self, config, target):
        return self.why

    def availability(self, target):
        return self.why
