"""`python -m conformance COMMAND ...`: one module per command in this package (`conformance.cli.<name>`).

Each command module defines `NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> int` (exit code).

Errors reach the user as one line, never a Python traceback: bad input (InvalidInput, RegistryError) is
`error: FIELD=VALUE is invalid; allowed: ...` and exit 2; Ctrl-C is `interrupted` and exit 130; any other
exception is an internal error, `internal error: TYPE: MESSAGE` and exit 70 (EX_SOFTWARE), whose traceback
`--traceback` (or CONFORMANCE_TRACEBACK=1) prints.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

EXIT_USAGE, EXIT_INTERRUPTED, EXIT_INTERNAL = 2, 130, 70
TRACEBACK_ENV = "CONFORMANCE_TRACEBACK"


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
    p.add_argument("--traceback", action="store_true",
                   help="print the Python traceback of an internal error (also CONFORMANCE_TRACEBACK=1)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in _command_modules():
        sp = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def _one_line(e: BaseException) -> str:
    """The message on one line (line breaks become spaces; other characters, e.g. a repr'd value, are kept)."""
    return " ".join(str(e).splitlines())


def main(argv=None) -> int:
    """Run one command; returns its exit code (argparse errors: 2, with argparse's usage message)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): returned, so in-process callers get the code
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    show_tb = args.traceback or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    from conformance.core import registry
    from references.errors import InvalidInput

    try:
        registry.load_all(args.plugin, entry_points=False if args.no_entry_points else None)
        return int(args._run(args) or 0)
    except (InvalidInput, registry.RegistryError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - a bug of ours: one line unless the traceback is asked for
        if show_tb:
            raise
        print(f"internal error: {type(e).__name__}: {_one_line(e)[:500]} "
              f"(rerun with --traceback or {TRACEBACK_ENV}=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
