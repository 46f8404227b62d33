"""The releases of a package between two versions, oldest first: from the package index or a folder of wheels.

`list_releases(package, wheels=None)` asks the index through pip's own client (`pip index versions PACKAGE`, final
releases as pip lists them) or reads a folder of wheels (`NAME-VERSION-...whl`, one release per version). `span`
checks the two versions (both released, different, in the order the search direction needs) and returns the
releases from the first to the second, both included. Every refusal is InvalidInput: one line, exit 2.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from references.errors import InvalidInput

INDEX_TIMEOUT_S = 120
DIRECTIONS = ("break", "fix")


@dataclass(frozen=True)
class Release:
    """One release: its version as published and, from a folder, its wheel (None: fetched from the index)."""

    version: str
    wheel: Path | None = None


def _key(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        return None


def canonical(name: str) -> str:
    """PEP 503 name: `GemLite_x` -> `gemlite-x`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def from_folder(package: str, folder: Path) -> list[Release]:
    """The package's wheels in `folder`, one per version (the first by file name when several), oldest first."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if not folder.is_dir():
        raise InvalidInput("--wheels", str(folder), "a folder of wheels (NAME-VERSION-...whl)")
    found: dict[str, Release] = {}
    for f in sorted(folder.glob("*.whl")):
        try:
            name, version, _build, _tags = parse_wheel_filename(f.name)
        except InvalidWheelFilename:
            continue  # not a wheel name: not a release of anything
        if canonical(name) == canonical(package):
            found.setdefault(str(version), Release(str(version), f))
    if not found:
        names = sorted({canonical(f.name.split("-")[0]) for f in folder.glob("*.whl")})
        raise InvalidInput("--package", package, f"a package with wheels in {folder} (found: {names or 'none'})")
    return sorted(found.values(), key=lambda r: _key(r.version))


def parse_pip_index(text: str) -> list[str]:
    """The versions of `pip index versions` output ("Available versions: 0.6.0, 0.5.1, ..."), as listed."""
    m = re.search(r"^Available versions:\s*(.+)$", text, re.M)
    return [v.strip() for v in m.group(1).split(",") if v.strip()] if m else []


def from_index(package: str, python: str = sys.executable) -> list[Release]:
    """The package's releases on the configured index (pip's own client and configuration), oldest first."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", package):
        raise InvalidInput("--package", package, "a distribution name (letters, digits, '.', '_', '-')")
    try:
        out = subprocess.run([python, "-m", "pip", "index", "versions", package], capture_output=True, text=True,
                             timeout=INDEX_TIMEOUT_S, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    except subprocess.TimeoutExpired:
        raise InvalidInput("--package", package, f"a package whose releases the index lists within "
                           f"{INDEX_TIMEOUT_S} s (no answer: no network or index? use --wheels DIR)") from None
    versions = parse_pip_index(out.stdout)
    if out.returncode != 0 or not versions:
        said = " ".join((out.stderr or out.stdout).split())
        said = re.sub(r"WARNING: Location '[^']*' is ignored: it is neither a file nor a directory\. ?", "", said)
        if "No matching distribution" in said:
            raise InvalidInput("--package", package, "a package the index has (pip found no release of it)")
        raise InvalidInput("--package", package, f"a package on a reachable index, or --wheels DIR (pip index "
                           f"versions failed: {said[:300] or 'no output'})")
    return sorted((Release(v) for v in versions if _key(v) is not None), key=lambda r: _key(r.version))


def list_releases(package: str, wheels: Path | None = None) -> list[Release]:
    return from_folder(package, wheels) if wheels is not None else from_index(package)


def span(releases: list[Release], good: str, bad: str, direction: str, package: str) -> list[Release]:
    """The releases from the search's old end to its new end, both included. `break`: good is the older end
    (passes), bad the newer (fails); `fix`: bad is the older end (fails), good the newer (passes)."""
    if direction not in DIRECTIONS:
        raise InvalidInput("--find", direction, f"one of {list(DIRECTIONS)}")
    versions = [r.version for r in releases]
    allowed = f"a release of {package}: {', '.join(versions)}"
    for field, v in (("--good", good), ("--bad", bad)):
        if v not in versions:
            # "0.6" for "0.6.0": the same version spelt differently is that release
            match = [x for x in versions if _key(v) is not None and _key(x) == _key(v)]
            if not match:
                raise InvalidInput(field, v, allowed)
    good = next(x for x in versions if x == good or _key(x) == _key(good))
    bad = next(x for x in versions if x == bad or _key(x) == _key(bad))
    if good == bad:
        raise InvalidInput("--bad", bad, f"a release other than --good={good}")
    i, j = versions.index(good), versions.index(bad)
    if direction == "break" and i > j:
        raise InvalidInput("--good", good, f"a release older than --bad={bad} (searching for the break; "
                           "for the first release that fixes it, add --find fix)")
    if direction == "fix" and j > i:
        raise InvalidInput("--bad", bad, f"a release older than --good={good} (--find fix searches from a failing "
                           "release to a newer passing one)")
    lo, hi = min(i, j), max(i, j)
    return releases[lo:hi + 1]
