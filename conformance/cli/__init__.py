"""`python -m conformance COMMAND ...`: one module per command in this package (`conformance.cli.<name>`).

Each command module defines `NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> int` (exit code).
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def _command_modules():
    mods = []
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not m.name.startswith("_"):
            mods.append(importlib.import_module(f"{__name__}.{m.name}"))
    return mods


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance",
                                description="Differential conformance suite for quantized LLM kernels.")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE to register external kernels (repeatable; also CONFORMANCE_PLUGINS)")
    p.add_argument("--no-entry-points", action="store_true",
                   help="do not load plugins from installed distributions' entry points "
                        "(also CONFORMANCE_NO_ENTRY_POINTS=1)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in _command_modules():
        sp = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from conformance.core import registry
    from references.errors import InvalidInput

    try:
        registry.load_all(args.plugin, entry_points=False if args.no_entry_points else None)
        return int(args._run(args) or 0)
    except (InvalidInput, registry.RegistryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
