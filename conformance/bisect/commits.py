"""The commits of a local clone of a kernel library that touch the kernel's files, and those files' contents.

`touching(repo, good, bad, paths)`: `good`'s full sha, then every commit of `good..bad` that changes one of
`paths`, oldest first (`git rev-list --reverse --topo-order`: a linear history, as vLLM's and GemLite's
squash-merged main branches are, gives a monotonic order). Commits that do not touch the files are left out:
with the rest of the package fixed (the installed release under the overlay), their kernel files, and so their
verdict, are those of the last touching commit before them. `contents(repo, rev, paths)` reads the files at a
commit (`git show REV:PATH`; None where the file does not exist there); `worktree_contents` reads them from the
checkout, for `git bisect run`.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from references.errors import InvalidInput

GIT_TIMEOUT_S = 300


def _git(repo: Path, *args: str, binary: bool = False):
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise InvalidInput("--repo", str(repo), "a git clone (git is not installed here)") from None
    if out.returncode != 0:
        raise GitError(out.stderr.decode(errors="replace").strip())
    return out.stdout if binary else out.stdout.decode()


class GitError(RuntimeError):
    pass


def check_repo(repo: Path) -> Path:
    if not repo.is_dir():
        raise InvalidInput("--repo", str(repo), "a folder holding a git clone of the library")
    try:
        top = _git(repo, "rev-parse", "--show-toplevel").strip()
    except GitError as e:
        raise InvalidInput("--repo", str(repo), f"a git clone of the library ({e})") from None
    return Path(top)


def resolve(repo: Path, rev: str, field: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except GitError:
        raise InvalidInput(field, rev, f"a commit of {repo} (a sha, tag or branch)") from None


def touching(repo: Path, good: str, bad: str, paths: list[str], field_good: str = "--good",
             field_bad: str = "--bad") -> list[str]:
    g, b = resolve(repo, good, field_good), resolve(repo, bad, field_bad)
    if g == b:
        raise InvalidInput(field_bad, bad, f"a commit other than {field_good}={good}")
    if _git(repo, "merge-base", g, b).strip() != g:
        raise InvalidInput(field_good, good, f"an ancestor of {field_bad}={bad}")
    revs = _git(repo, "rev-list", "--reverse", "--topo-order", f"{g}..{b}", "--", *paths).split()
    if not revs:
        raise InvalidInput("--paths", ",".join(paths), f"files that change between {good} and {bad} (none of them "
                           "does: they cannot explain a different verdict)")
    return [g, *revs]


def contents(repo: Path, rev: str, paths: list[str]) -> dict[str, bytes | None]:
    out = {}
    for p in paths:
        try:
            out[p] = _git(repo, "show", f"{rev}:{p}", binary=True)
        except GitError:
            out[p] = None  # not in this commit
    return out


def worktree_contents(repo: Path, paths: list[str]) -> dict[str, bytes | None]:
    return {p: (repo / p).read_bytes() if (repo / p).is_file() else None for p in paths}


def subject(repo: Path, rev: str) -> str:
    return _git(repo, "log", "-1", "--format=%h %ad %s", "--date=short", rev).strip()


def diff(repo: Path, old: str, new: str, paths: list[str]) -> str:
    return _git(repo, "diff", old, new, "--", *paths)
