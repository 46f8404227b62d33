"""What adapters share about where a kernel can run: the kernel an adapter registers when its third-party package
does not import (gate-only, every config refused with the reason, so `conformance list`, coverage and the suite's
skips say why the kernel is absent), and the availability rule of a kernel that runs only on this machine's GPU."""
from __future__ import annotations


def cuda_availability(target) -> str | None:
    """None when `target` is this machine's own CUDA device; else why a CUDA-only kernel cannot run for it."""
    import torch

    from conformance.api import detect_target

    if not torch.cuda.is_available():
        return f"target={target} needs a CUDA GPU; torch sees none here"
    here = detect_target()
    return None if here == target else f"target={target} is not this machine's device ({here})"


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
