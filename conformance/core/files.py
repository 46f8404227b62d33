"""Output files: check a path is writable BEFORE any work starts, and write it atomically afterwards.

    out = writable_file("--out", path)        # InvalidInput naming the option when it cannot be written
    d = writable_dir("--out", path)           # creates the directory (and parents), checks it is writable
    atomic_write_text(path, text, field)      # temp file in the same directory, then os.replace

Every error is an InvalidInput (one line: the option, the path, what is allowed), never a traceback.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from references.errors import InvalidInput


def _probe(directory: Path, field: str, value, allowed: str) -> None:
    """Create and remove a temporary file in `directory`: the only reliable writability test (/proc, read-only
    mounts, ACLs, root)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".conformance-probe-", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise InvalidInput(field, str(value), f"{allowed} ({e.strerror or type(e).__name__})") from None


def writable_dir(field: str, path, *, create: bool = True) -> Path:
    """`path` as a directory this process can write files in (created with its parents when `create`)."""
    p = Path(path)
    allowed = "a directory path this process can create and write in"
    if str(path).strip() == "":
        raise InvalidInput(field, str(path), allowed)
    if p.exists() and not p.is_dir():
        raise InvalidInput(field, str(path), f"{allowed} (it is an existing file)")
    if create:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInput(field, str(path), f"{allowed} ({e.strerror or type(e).__name__})") from None
    elif not p.is_dir():
        raise InvalidInput(field, str(path), f"{allowed} (it does not exist)")
    _probe(p, field, path, allowed)
    return p


def writable_file(field: str, path) -> Path:
    """`path` as a file this process can (re)place atomically: not a directory, its directory writable (created
    with its parents when missing). Nothing is written at `path` itself."""
    p = Path(path)
    allowed = "a file path in a directory this process can write"
    if str(path).strip() == "" or str(path).endswith(os.sep):
        raise InvalidInput(field, str(path), allowed)
    if p.is_dir():
        raise InvalidInput(field, str(path), f"{allowed} (it is a directory)")
    if p.exists() and not os.access(p, os.W_OK):
        raise InvalidInput(field, str(path), f"{allowed} (the existing file is read-only)")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise InvalidInput(field, str(path), f"{allowed} ({parent} is a file)")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInput(field, str(path), f"{allowed} ({e.strerror or type(e).__name__})") from None
    _probe(parent, field, path, allowed)
    return p


def atomic_write_text(path, text: str, field: str = "output") -> Path:
    """Write `text` to `path` through a temporary file in the same directory and os.replace: readers see the old
    file or the new one, never a torn one; an interrupted write leaves no stray file."""
    p = Path(path)
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise InvalidInput(field, str(path), f"a writable file path ({e.strerror or type(e).__name__})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return p


def atomic_move(src, dst, field: str = "output") -> Path:
    """os.replace(src, dst) (same filesystem), else copy to a temp file beside dst and replace: atomic at dst."""
    src, dst = Path(src), Path(dst)
    try:
        os.replace(src, dst)
        return dst
    except OSError:
        pass
    atomic_write_text(dst, src.read_text(encoding="utf-8"), field)
    src.unlink(missing_ok=True)
    return dst
