"""The compile lane's CI run: the in-tree kernels' plan, catalogue and regression cases on the nine targets at
the fixed seed of the recorded compile results (conformance/compile/recorded.py), judged offline from them in CPU
CI, and recorded by `python -m conformance compile --record-verdicts`.

    check(arch) -> lane.run_lane's result, offline ("unrecorded": programs with no recorded result)
    record(out=None, targets=None, progress=None) -> the file written
"""
from __future__ import annotations

import json
from pathlib import Path

from conformance.compile import lane, recorded


def in_tree_kernels() -> list:
    """The kernels this tree ships (not plugins, not test fixtures), by name."""
    from conformance.core import registry

    return sorted((k for k in registry.all_kernels() if type(k).__module__.startswith("conformance_kernels.")),
                  key=lambda k: k.name)


def check(arch: str) -> dict:
    """The lane's CI run on `arch` from the recorded results alone: lane.run_lane's result (records judged against
    the target's limits now; "unrecorded": the compile ids of programs with no recorded result)."""
    return lane.run_lane(in_tree_kernels(), [arch], seed=recorded.SEED, profile=recorded.PROFILE, offline=True)


def record(out: Path | None = None, targets=None, progress=None) -> Path:
    """Compile (through the user cache) every program of the lane's CI run on `targets` (default: the nine), and
    write their results, keyed by entry_key, to `out` (default: this Triton's file)."""
    import subprocess

    from conformance.compile import hip_driver
    from conformance.core.target_limits import LANE_TARGETS, limits
    from conformance.core.targets import parse_target

    entries = {}
    for arch in targets or LANE_TARGETS:
        target = parse_target(arch)
        for k in in_tree_kernels():
            specs, _errors = lane.specializations(k, target, seed=recorded.SEED, profile=recorded.PROFILE)
            for s in specs:
                if hip_driver.is_hip(s.program):
                    continue
                raw, _ = lane.raw_result(s)
                entries[lane.entry_key(s.program, limits(arch).arch)] = {
                    k2: v for k2, v in raw.items() if k2 in ("ok", "message", "resources")}
            if progress:
                progress(k.name, arch, len(entries))
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=str(recorded.HERE.parent)).stdout.strip() or None
    except OSError:
        commit = None
    doc = {"triton": recorded.triton_version(), "seed": recorded.SEED, "profile": recorded.PROFILE,
           "targets": list(targets or LANE_TARGETS),
           "kernels": [k.name for k in in_tree_kernels()], "recorded_at_commit": commit,
           "command": recorded.RECORD_COMMAND,
           "entries": dict(sorted(entries.items()))}
    out = out or recorded.path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=0) + "\n", encoding="utf-8")
    recorded.forget()
    return out
