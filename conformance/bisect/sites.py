"""Scratch sites: one directory per release holding that release alone, installed with no dependencies.

Layout under the cache folder (`--cache`, else $CONFORMANCE_BISECT_CACHE, else ~/.cache/conformance-bisect):

    wheels/NAME-VERSION-...whl        fetched once by `pip wheel --no-deps` (the index's wheel, or one built from its
                                      sdist); a --wheels folder is read in place
    sites/NAME-VERSION-...whl/        the wheel installed there: what `pip install --no-deps --target` leaves
    overlays/KEY/                     an installed package with one commit's kernel files placed over it

A wheel is a zip whose members are the installed files; `install` unpacks it (`NAME.data/purelib` and `platlib`
to the top, the other `.data` folders, scripts and headers, dropped: nothing here runs them) into a temporary
folder and renames it into place when complete, so an interrupted or failed install leaves no site behind, and
nothing is ever written to this Python's site-packages. Sites are reused while their `.complete` marker exists.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from references.errors import InvalidInput

CACHE_ENV = "CONFORMANCE_BISECT_CACHE"
MARKER = ".complete"
DOWNLOAD_TIMEOUT_S = 1800


def cache_dir(arg: str | None = None) -> Path:
    path = Path(arg or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "conformance-bisect")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidInput("--cache", str(path), f"a folder this user can create and write ({e})") from None
    return path


def wheel_for(package: str, release, cache: Path, python: str = sys.executable) -> Path:
    """The release's wheel: from its folder, from the cache, else downloaded into the cache."""
    from conformance.bisect.releases import canonical

    if release.wheel is not None:
        return release.wheel
    stem = canonical(package).replace("-", "_")
    wheels = cache / "wheels"
    for f in sorted(wheels.glob("*.whl")):
        if canonical(f.name.split("-")[0]) == canonical(package) and f.name.split("-")[1] == release.version:
            return f
    wheels.mkdir(parents=True, exist_ok=True)
    try:
        # pip wheel: the release's wheel where the index has one, else built from its sdist (GemLite publishes only
        # sdists); --no-deps either way
        out = subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                              str(wheels), f"{package}=={release.version}"], capture_output=True, text=True,
                             timeout=DOWNLOAD_TIMEOUT_S, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    except subprocess.TimeoutExpired:
        raise InvalidInput("--package", f"{package}=={release.version}", f"a wheel the index serves within "
                           f"{DOWNLOAD_TIMEOUT_S} s (no network? use --wheels DIR)") from None
    got = [f for f in wheels.glob(f"*-{release.version}-*.whl") if canonical(f.name.split("-")[0]) == stem
           .replace("_", "-")]
    if out.returncode != 0 or not got:
        said = " ".join((out.stderr or out.stdout).split())[-300:]
        raise InvalidInput("--package", f"{package}=={release.version}", "a release the index serves (pip wheel "
                           f"failed: {said or 'no wheel'}; no network? use --wheels DIR)")
    return got[0]


def _safe_members(zf: zipfile.ZipFile, wheel: Path) -> list[zipfile.ZipInfo]:
    members = []
    for info in zf.infolist():
        parts = Path(info.filename).parts
        if info.filename.startswith("/") or ".." in parts:
            raise InvalidInput("wheel", wheel.name, f"a wheel whose members stay inside it (member {info.filename!r})")
        members.append(info)
    return members


@contextlib.contextmanager
def _building(site: Path, marker: str):
    """A scratch directory beside `site` to build it in; when the block ends without error, MARKER (holding `marker`)
    is written and the directory replaces `site` at once (an incomplete site of an older run is removed first), so a
    cached site is either whole or absent. The scratch directory never outlives the block."""
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=site.parent))
    try:
        yield tmp
        (tmp / MARKER).write_text(f"{marker}\n")
        if site.exists():
            shutil.rmtree(site)
        os.replace(tmp, site)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def install(wheel: Path, cache: Path) -> Path:
    """The site holding `wheel` installed alone (cached): see the module docstring."""
    site = cache / "sites" / wheel.name
    if (site / MARKER).is_file():
        return site
    with _building(site, wheel.name) as tmp:
        try:
            zf = zipfile.ZipFile(wheel)
        except (zipfile.BadZipFile, OSError) as e:
            raise InvalidInput("wheel", str(wheel), f"a readable wheel (zip) file ({e})") from None
        with zf:
            for info in _safe_members(zf, wheel):
                parts = Path(info.filename).parts
                if parts[0].endswith(".data"):
                    if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                        continue  # scripts, headers, data: not importable code
                    parts = parts[2:]
                dest = tmp.joinpath(*parts)
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    return site


def top_level(site: Path) -> list[str]:
    """The importable top-level names a site provides (packages and modules; not dist-info)."""
    names = []
    for p in sorted(site.iterdir()):
        if p.name.startswith(".") or p.name.endswith((".dist-info", ".egg-info", ".data")) or p.name == "__pycache__":
            continue
        if p.is_dir():
            names.append(p.name)
        elif p.suffix in (".py", ".so", ".pyd"):
            names.append(p.name.split(".")[0])
    return names


def installed_site(top: str) -> Path:
    """The folder on this Python's path from which top-level package `top` imports (without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(top)
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise InvalidInput("--paths", top, f"files of a package importable here ({top!r} is not: install a release, "
                           "put it on PYTHONPATH, or name one with --over VERSION)")
    where = list(spec.submodule_search_locations or [])
    return Path(where[0]).parent if where else Path(spec.origin).parent


def overlay(base: Path, files: dict[str, bytes | None], cache: Path, label: str) -> Path:
    """A site that is `base`'s top-level packages named by `files` with `files` (site-relative path -> content,
    None: absent) in place of base's. Built from hard links (copies across file systems); a replaced file is a new
    file, so base is never written. Cached by base and content."""
    h = hashlib.sha256(str(base.resolve()).encode())
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + (b"-" if files[rel] is None else files[rel]) + b"\0")
    site = cache / "overlays" / f"{label}-{h.hexdigest()[:16]}"
    if (site / MARKER).is_file():
        return site
    with _building(site, f"{label} over {base}") as tmp:
        tops = sorted({Path(rel).parts[0] for rel in files})
        for top in tops:
            src = base / top
            if src.is_dir():
                try:
                    shutil.copytree(src, tmp / top, copy_function=os.link, ignore=shutil.ignore_patterns("__pycache__"))
                except OSError:
                    shutil.rmtree(tmp / top, ignore_errors=True)
                    shutil.copytree(src, tmp / top, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.is_file():
                shutil.copy2(src, tmp / top)
        for rel, data in files.items():
            dest = tmp / rel
            if dest.exists() or dest.is_symlink():
                dest.unlink()  # a hard link to base's file: unlinked, never written through
            if data is not None:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
    return site
