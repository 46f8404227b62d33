"""`list`: every registered kernel with its family, priority, availability here (and why not) and gates.

The gate column is derived from each kernel's own `can_implement` (the family's `gate_summary` probes its config
space on a set of targets), so it cannot drift from the gate; the kernel's free-text `gate_note` follows it."""
from __future__ import annotations

import json

from conformance.cli import _args

NAME = "list"
HELP = "list registered kernels: family, priority, availability here, gate summary (derived from the gate)"


def add_arguments(parser) -> None:
    _args.add_family(parser)
    _args.add_target(parser, help_extra="; availability is judged for this target")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def kernel_rows(target, family=None) -> list[dict]:
    """One dict per registered kernel (priority order): what `list` prints."""
    from conformance.core import registry
    from conformance.families import get_family

    rows = []
    for k in registry.all_kernels(family):
        why = k.availability(target)
        rows.append({
            "name": k.name, "family": k.family, "priority": k.priority,
            "available": why is None, "unavailable_reason": why,
            "run_mode": k.run_mode(target), "deterministic": k.deterministic,
            "custom_op": k.op is not None, "gate_summary": get_family(k.family).gate_summary(k),
            "gate_note": k.gate_note,
        })
    return rows


def run(args) -> int:
    family = _args.check_family(args.family)
    target = _args.parse_target(args.target)
    rows = kernel_rows(target, family)
    if args.json:
        print(json.dumps({"target": str(target), "kernels": rows}, indent=2))
        return 0
    print(f"target: {target}   ({len(rows)} kernel{'s' if len(rows) != 1 else ''})")
    if not rows:
        return 0
    w = max(len(r["name"]) for r in rows)
    wf = max(len(r["family"]) for r in rows)
    print(f"{'KERNEL':<{w}}  {'FAMILY':<{wf}}  PRIO  RUNS HERE    GATES (derived from can_implement)")
    pad = " " * (w + wf + 23)
    for r in rows:
        print(f"{r['name']:<{w}}  {r['family']:<{wf}}  {r['priority']:>4}  {r['run_mode']:<11}  {r['gate_summary']}")
        if r["gate_note"]:
            print(f"{pad}note: {r['gate_note']}")
        if not r["available"]:
            # model mode still tests the load step; say why the real kernel cannot run
            print(f"{'':<{w}}  not available here: {r['unavailable_reason']}")
    return 0
