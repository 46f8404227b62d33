"""Five fake releases of `toykern`, a toy kernel library, as pure-Python wheels, and a scratch git clone of it.

Releases 0.1.0 and 0.2.0 dequantize right; 0.3.0 breaks `dequant` (the zero point read one too high: every
weight one scale step off), 0.4.0 keeps the bug, 0.5.0 fixes it. The break is in `toykern/dequant.py`; the other
file, `toykern/__init__.py`, changes in every release (its version), so a diff that names only the kernel's file
is the bisect's doing. `git_clone` commits the same five states, with a commit between them that touches only
README, to a fresh repository.
"""
from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

GOOD = """import torch


def dequant(q, z, s, group_size):
    \"\"\"W [K, N] = (q - z[g(k)]) * s[g(k)] in float64 ({note}).\"\"\"
    g = torch.arange(q.shape[0]) // group_size
    return (q.long() - z.long()[g]).double() * s.double()[g]
"""
BROKEN = """import torch


def dequant(q, z, s, group_size):
    \"\"\"W [K, N] = (q - z[g(k)]) * s[g(k)] in float64 ({note}).\"\"\"
    g = torch.arange(q.shape[0]) // group_size
    zq = z.long()[g] + 1  # "v1 checkpoints store z - 1"
    return (q.long() - zq).double() * s.double()[g]
"""
# a release whose bug shows in some processes only (as GemLite's NaN, which depends on the autotuner's pick): the
# n-th import of it (counted in the file $TOYKERN_FLAKY_COUNTER) is broken when n % 3 == 2
FLAKY = """import os
from pathlib import Path

import torch

_counter = Path(os.environ["TOYKERN_FLAKY_COUNTER"])
_n = int(_counter.read_text()) + 1 if _counter.is_file() else 1
_counter.write_text(str(_n))
BROKEN_HERE = _n % 3 == 2


def dequant(q, z, s, group_size):
    \"\"\"W [K, N] = (q - z[g(k)]) * s[g(k)] in float64 ({note}), one scale step off in some processes.\"\"\"
    g = torch.arange(q.shape[0]) // group_size
    zq = z.long()[g] + (1 if BROKEN_HERE else 0)
    return (q.long() - zq).double() * s.double()[g]
"""
RELEASES = {"0.1.0": (GOOD, "first release"), "0.2.0": (GOOD, "docs"), "0.3.0": (BROKEN, "v1 offset"),
            "0.4.0": (BROKEN, "still offset"), "0.5.0": (GOOD, "offset fixed")}
FIRST_BAD, FIRST_FIXED = "0.3.0", "0.5.0"
KERNEL_FILE = "toykern/dequant.py"
CASE = "w4a16/toy_dequant_w4a16/M=3,N=64,K=128,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"
PLUGIN = "tests.unit.toykern_plugin"


def files(version: str) -> dict[str, str]:
    src, note = RELEASES[version]
    return {"toykern/__init__.py": f'__version__ = "{version}"\nfrom .dequant import dequant  # noqa: F401\n',
            KERNEL_FILE: src.format(note=note)}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(folder: Path, version: str, members: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel of toykern `version` (members: path -> text, default `files(version)`)."""
    members = dict(files(version) if members is None else members)
    info = f"toykern-{version}.dist-info"
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: toykern\nVersion: {version}\n"
    members[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: toykern-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{n},{_digest(t.encode())},{len(t.encode())}" for n, t in members.items()] + [f"{info}/RECORD,,"]
    members[f"{info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"toykern-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def wheel_folder(folder: Path) -> Path:
    for v in RELEASES:
        write_wheel(folder, v)
    return folder


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=toy", "-c", "user.email=toy@test", "-c", "commit.gpgsign=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def git_clone(repo: Path) -> dict[str, str]:
    """Commit the five releases' files (and a README-only commit after each) to a new repository at `repo`;
    returns {version: sha of the commit that made that release's files}."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    shas = {}
    for v in RELEASES:
        for rel, text in files(v).items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"toykern {v}")
        shas[v] = _git(repo, "rev-parse", "HEAD")
        (repo / "README").write_text(f"notes after {v}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"notes after {v}")
    return shas
