"""Compile results checked into the tree: what the compile lane's compilers said about every Triton program the
in-tree kernels launch for the lane's CI run on the nine targets, for one Triton version (the lock's), so that
CPU CI judges the whole lane in seconds instead of compiling for a quarter of an hour.

    lookup(entry_key) -> the compiler's result or None          # read by lane.raw_result after the user cache
    load(version) -> the file's document or None; path(version)

Checking the lane's CI run against it and writing it: conformance/compile/ci_lane.py.

The CI run: the in-tree kernels (module conformance_kernels.*), profile ci, sets plan + catalogue + regressions,
seed SEED. The seed is fixed, unlike the suite's (the commit's): another seed places the plan's shapes elsewhere
and so launches other integer specializations (about half of each seed's programs are new: 4 seeds give 2.4 times
one seed's), which no checked-in file could hold; one fixed set keeps every verdict reproducible and the file
small. The entries are keyed by `lane.entry_key` (the program's specialization, its source's hash, the target and
the Triton version): a kernel or plan change that launches a new program makes `check` list it as unrecorded, and
the CI test fails with the command that records it. Under another Triton there is no file: the test says so and
skips. HIP programs are compiled by clang and are not recorded.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

SEED = 0
PROFILE = "ci"
HERE = Path(__file__).resolve().parent / "recorded"
RECORD_COMMAND = "python -m conformance compile --record-verdicts"


def triton_version() -> str:
    import triton

    return triton.__version__


def path(version: str | None = None) -> Path:
    return HERE / f"triton-{version or triton_version()}.json"


@functools.lru_cache(maxsize=4)
def _load(p: str) -> dict | None:
    try:
        return json.loads(Path(p).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def load(version: str | None = None) -> dict | None:
    """The recorded file for `version` (default: the installed Triton), or None where there is none."""
    return _load(str(path(version)))


def lookup(key: str) -> dict | None:
    doc = load()
    return None if doc is None else doc["entries"].get(key)


def forget() -> None:
    """Drop the loaded files (after one was written)."""
    _load.cache_clear()
