"""Argument helpers shared by the selection-facing commands (list, select, coverage)."""
from __future__ import annotations

from references.errors import InvalidInput


def add_target(parser, default: str = "auto", help_extra: str = "") -> None:
    parser.add_argument("--target", default=default, metavar="T",
                        help="cpu, auto, smNN / cuda:smNN, gfxNNNN / rocm:gfxNNNN (default: %(default)s)"
                        + help_extra)


def add_kernels(parser) -> None:
    parser.add_argument("--kernels", default=None, metavar="A,B,...",
                        help="only these registered kernels (comma-separated; default: all)")


def add_family(parser, default=None) -> None:
    # help text spelled out: importing the registry here would import torch just to build --help
    parser.add_argument("--family", default=default, metavar="F",
                        help="kernel family: w4a16 or fp8_group_quant" + (" (default: %(default)s)" if default else ""))


def check_family(family: str | None) -> str | None:
    from conformance.core.registry import FAMILIES

    if family is not None and family not in FAMILIES:
        raise InvalidInput("--family", family, f"one of {list(FAMILIES)}")
    return family


def parse_target(text: str, *, allow_unknown: bool = False, field: str = "--target"):
    """The Target named by --target; bad names raise InvalidInput listing the allowed forms (`allow_unknown`:
    a well-formed name of an architecture the project does not know yet is accepted with a warning)."""
    from conformance.core.targets import parse_target as _parse

    try:
        return _parse(text, allow_unknown=allow_unknown)
    except InvalidInput as e:
        raise InvalidInput(field, text, e.allowed) from None


def resolve_kernels(text: str | None):
    """Kernel objects named by --kernels (None: all registered); unknown or empty lists are errors."""
    from conformance.core import registry

    if text is None:
        return registry.all_kernels()
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = sorted(k.name for k in registry.all_kernels())
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise InvalidInput("--kernels", text, f"comma-separated names from {known}")
    return registry.resolve_kernels(names)


def parse_lane_target(text: str, field: str):
    """A GPU target the compile lane has a limits row for (the grammar of --target; the lane's targets)."""
    from conformance.core.target_limits import LANE_TARGETS, TABLE

    t = parse_target(text, field=field)
    if not (t.is_gpu and t.arch in TABLE):
        raise InvalidInput(field, text, f"a GPU target with a limits row: one of {sorted(TABLE)} (the lane's: "
                           f"{','.join(LANE_TARGETS)})")
    return t


def parse_sets(text: str, field: str) -> tuple:
    """Comma-separated compile-lane case sets (plan, catalogue, regressions)."""
    from conformance.compile.lane import SETS

    sets = tuple(s.strip() for s in text.split(",") if s.strip())
    if not sets or any(s not in SETS for s in sets):
        raise InvalidInput(field, text, f"a comma-separated subset of {list(SETS)}")
    return sets
