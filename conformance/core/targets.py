"""Targets: `cpu`, `cuda:smNN`, `rocm:gfxNNNN`; detected for real runs, nameable for gate evaluation."""
from __future__ import annotations

import re
from dataclasses import dataclass

from references.errors import InvalidInput

KINDS = ("cpu", "cuda", "rocm")


@dataclass(frozen=True)
class Target:
    kind: str
    arch: str | None = None  # "sm90", "gfx1100"; None for cpu

    def __str__(self) -> str:
        return self.kind if self.arch is None else f"{self.kind}:{self.arch}"

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "rocm")

    @property
    def gfx_family(self) -> str | None:
        """'gfx11' for gfx1100/gfx1151, 'gfx12' for gfx1201, 'gfx94' for gfx942; None off ROCm."""
        if self.kind != "rocm" or not self.arch:
            return None
        return "gfx" + self.arch[3:5]

    @property
    def sm(self) -> int | None:
        if self.kind != "cuda" or not self.arch:
            return None
        return int(self.arch[2:])


CPU = Target("cpu")
_ALLOWED = "'cpu', 'auto', 'cuda:smNN' (or 'smNN'), 'rocm:gfxNNNN' (or 'gfxNNNN'), e.g. 'sm90', 'gfx1100'"


def parse_target(text: str) -> Target:
    """Parse a target name; 'auto' detects this machine's. Bad names raise InvalidInput."""
    t = text.strip().lower()
    if t == "auto":
        return detect_target()
    if t == "cpu":
        return CPU
    m = re.fullmatch(r"(?:cuda:)?(?:sm_?)(\d{2,3})[a]?", t) or re.fullmatch(r"cuda:(\d{2,3})", t)
    if m:
        return Target("cuda", f"sm{m.group(1)}")
    m = re.fullmatch(r"(?:rocm:)?(gfx[0-9a-f]{3,4})", t)
    if m:
        return Target("rocm", m.group(1))
    raise InvalidInput("target", text, _ALLOWED)


def detect_target() -> Target:
    """The target this process would run kernels on: the first visible GPU, else cpu."""
    import torch

    if torch.cuda.is_available():
        if getattr(torch.version, "hip", None):
            arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
            return Target("rocm", arch)
        major, minor = torch.cuda.get_device_capability(0)
        return Target("cuda", f"sm{major}{minor}")
    return CPU
