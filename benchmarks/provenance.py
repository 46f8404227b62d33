"""Which code a recorded figure came from: the commit, whether the tree was clean, and a digest of the kernel
sources, for every bench JSON/markdown and suite summary.

On the GPU machine the working-tree copy has no .git, so the commit and the clean flag come from the
environment when set (the lead passes them with the command), else from git, else "unknown":

    CONFORMANCE_COMMIT=<sha> CONFORMANCE_TREE_CLEAN=1 bash benchmarks/run_gpu.sh final
    python -m conformance_bench.provenance        # prints those two assignments for this checkout

The kernel digest hashes what sets the kernels' speed and numbers (kernels/**/*.py and the tile tables
kernels/tiles/*.json), so a figure can be checked against the current kernels without git.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from references.errors import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
COMMIT_ENV = "CONFORMANCE_COMMIT"
CLEAN_ENV = "CONFORMANCE_TREE_CLEAN"
UNKNOWN = "unknown"
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def kernel_digest(root: Path = ROOT) -> str:
    """sha256 (16 hex digits) over kernels/**/*.py and kernels/tiles/*.json, by relative path and content."""
    h = hashlib.sha256()
    files = [*(root / "kernels").rglob("*.py"), *(root / "kernels" / "tiles").glob("*.json")]
    for p in sorted(f for f in files if "__pycache__" not in f.parts):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _clean_from_env(text: str) -> bool:
    v = text.strip().lower()
    if v in _TRUE or v in _FALSE:
        return v in _TRUE
    raise InvalidInput(CLEAN_ENV, text, f"one of {_TRUE + _FALSE} (1: `git status --porcelain` was empty)")


def code_identity(root: Path = ROOT, environ=None) -> dict:
    """{"commit", "clean", "from"}: `from` is "env" (CONFORMANCE_COMMIT, and CONFORMANCE_TREE_CLEAN if set),
    "git" (rev-parse HEAD; clean = `git status --porcelain` empty), or "unknown" (commit "unknown", clean None)."""
    env = os.environ if environ is None else environ
    commit = env.get(COMMIT_ENV, "").strip()
    if commit:
        clean = env.get(CLEAN_ENV)
        return {"commit": commit, "clean": None if clean is None else _clean_from_env(clean), "from": "env"}
    head = _git(root, "rev-parse", "HEAD")
    if head:
        status = _git(root, "status", "--porcelain")
        return {"commit": head.strip(), "clean": None if status is None else status.strip() == "", "from": "git"}
    return {"commit": UNKNOWN, "clean": None, "from": UNKNOWN}


def record_fields(root: Path = ROOT) -> dict:
    """What every recorded run carries: commit, clean, commit_from (env, git or unknown) and kernel_digest."""
    ident = code_identity(root)
    return {"commit": ident["commit"], "clean": ident["clean"], "commit_from": ident["from"],
            "kernel_digest": kernel_digest(root)}


def describe(identity: dict) -> str:
    """One phrase for report headers: 'commit 1a2b3c4d5e6f (clean tree)', '... (uncommitted changes)',
    '... (tree state unknown)', or 'commit unknown (no .git and no CONFORMANCE_COMMIT)'."""
    commit = identity.get("commit") or UNKNOWN
    if commit == UNKNOWN:
        return f"commit unknown (no .git and no {COMMIT_ENV})"
    state = {True: "clean tree", False: "uncommitted changes", None: "tree state unknown"}[identity.get("clean")]
    return f"commit {commit[:12]} ({state})"


def env_assignments(root: Path = ROOT) -> str:
    """`CONFORMANCE_COMMIT=<sha> CONFORMANCE_TREE_CLEAN=<0|1>` for this checkout (what a device command prefixes)."""
    ident = code_identity(root, environ={})
    if ident["commit"] == UNKNOWN:
        raise InvalidInput("checkout", str(root), "a git checkout (git rev-parse HEAD failed)")
    return f"{COMMIT_ENV}={ident['commit']} {CLEAN_ENV}={int(bool(ident['clean']))}"


if __name__ == "__main__":
    print(env_assignments())
    sys.exit(0)
