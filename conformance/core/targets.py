"""Targets: `cpu`, `cuda:smNN`, `rocm:gfxNNNN`; detected for real runs, nameable for gate evaluation."""
from __future__ import annotations

import re
import sys
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
# Architectures the project knows (kernels' gates are written against these). A well-formed name outside them
# is refused unless the caller asks for future chips (coverage sweeps), and then accepted with a warning.
KNOWN_ARCHS = {
    "cuda": ("sm70", "sm75", "sm80", "sm86", "sm87", "sm89", "sm90", "sm100", "sm101", "sm103", "sm110",
             "sm120", "sm121"),
    "rocm": ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1030",
             "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1200", "gfx1201"),
}
_ALLOWED = ("'cpu', 'auto', 'cuda:smNN' (or 'smNN'), 'rocm:gfxNNNN' (or 'gfxNNNN') for a known architecture: "
            + ", ".join(KNOWN_ARCHS["cuda"] + KNOWN_ARCHS["rocm"]))


def parse_target(text: str, *, allow_unknown: bool = False) -> Target:
    """Parse a target name; 'auto' detects this machine's. Bad or unknown names raise InvalidInput; with
    `allow_unknown` a well-formed name of an architecture not in KNOWN_ARCHS is accepted with a warning."""
    if not isinstance(text, str) or not text.isascii():
        raise InvalidInput("target", text, _ALLOWED)
    t = text.strip().lower()
    if t == "auto":
        return detect_target()
    if t == "cpu":
        return CPU
    target = None
    m = re.fullmatch(r"(?:cuda:)?(?:sm_?)([1-9][0-9]{1,2})a?", t) or re.fullmatch(r"cuda:([1-9][0-9]{1,2})", t)
    if m:
        target = Target("cuda", f"sm{m.group(1)}")
    m = re.fullmatch(r"(?:rocm:)?(gfx[1-9][0-9a-f]{2,3})", t)
    if m:
        target = Target("rocm", m.group(1))
    if target is None:
        raise InvalidInput("target", text, _ALLOWED)
    if target.arch not in KNOWN_ARCHS[target.kind]:
        if not allow_unknown:
            raise InvalidInput("target", text, _ALLOWED)
        print(f"warning: target {target} is not an architecture this project knows; gates judge it by its "
              "name pattern only", file=sys.stderr)
    return target


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
