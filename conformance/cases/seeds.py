"""Run seeds: one integer per test run that moves what the run explores, yet replays.

    seed, source = resolve_run_seed(explicit, profile, cwd)

Order: `explicit` (pytest --conformance-seed N, `validate --seed N`), else $CONFORMANCE_SEED, else for the ci
profile the commit under test ($GITHUB_SHA, $CI_COMMIT_SHA, else `git rev-parse HEAD` in `cwd`; seed = the int of
its first 8 hex digits), else 0 with source "no commit found"; the nightly and exhaustive profiles draw a random
seed unless one is given. The seed picks the CI plan's boundary placements and row data seeds
(conformance.cases.plan) and seeds the suite's hypothesis draws, so the same seed gives the same cases and another
commit gives others. A failing case id replays without it: its data seed is in the id.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess

from references.errors import InvalidInput

ENV = "CONFORMANCE_SEED"
COMMIT_ENVS = ("GITHUB_SHA", "CI_COMMIT_SHA")  # GitHub Actions, GitLab CI: the commit under test
SEED_MAX = 2 ** 64 - 1
ALLOWED = "a non-negative integer <= 2**64-1, decimal or 0x-hex (e.g. 1234 or 0x6b2ccc4)"
_SHA_RE = re.compile(r"[0-9a-fA-F]{8,64}")


def parse_seed(field: str, text) -> int:
    """The seed `text` names (an int, or its decimal / 0x-hex text); InvalidInput(field, text, allowed) else."""
    if isinstance(text, bool):
        raise InvalidInput(field, text, ALLOWED)
    if isinstance(text, int):
        value = text
    else:
        t = str(text).strip().lower()
        try:
            value = int(t, 16) if t.startswith("0x") else int(t, 10)
        except ValueError:
            raise InvalidInput(field, text, ALLOWED) from None
    if not 0 <= value <= SEED_MAX:
        raise InvalidInput(field, text, ALLOWED)
    return value


def commit_sha(cwd=None) -> str | None:
    """The commit under test: $GITHUB_SHA, $CI_COMMIT_SHA, else `git rev-parse HEAD` in cwd; None when none."""
    for name in COMMIT_ENVS:
        sha = os.environ.get(name, "").strip()
        if _SHA_RE.fullmatch(sha):
            return sha.lower()
    try:
        p = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = p.stdout.strip()
    return sha.lower() if p.returncode == 0 and _SHA_RE.fullmatch(sha) else None


def seed_from_commit(sha: str) -> int:
    """The run seed of a commit: the int of its first 8 hex digits."""
    return int(sha[:8], 16)


def resolve_run_seed(explicit, profile: str, cwd=None) -> tuple[int, str]:
    """(seed, source): `explicit` when not None, else $CONFORMANCE_SEED, else (ci) the commit's seed, else 0;
    (nightly, exhaustive) a random seed. source says which, e.g. "--conformance-seed", "CONFORMANCE_SEED",
    "commit 6b2ccc4...", "no commit found", "random (nightly)". Bad values raise InvalidInput naming where they
    came from (the option is the caller's `explicit` field name: pass it pre-parsed or catch and rename)."""
    if explicit is not None:
        return parse_seed("--conformance-seed", explicit), "--conformance-seed"
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        return parse_seed(ENV, env), ENV
    if profile == "ci":
        sha = commit_sha(cwd)
        if sha is None:
            return 0, "no commit found"
        return seed_from_commit(sha), f"commit {sha}"
    return secrets.randbits(32), f"random ({profile})"


def describe(seed: int, source: str) -> str:
    """The seed as the run's header and summary print it: `seed 0x6b2ccc4 (commit 6b2ccc4...)`."""
    return f"seed {seed:#x} ({source})"
