"""`git bisect run python -m conformance repro ID` names the commit that broke a kernel's load step.

A scratch repository gets the project's tracked files (commit 1), a harmless commit, a commit that
makes torch_dequant_w4a16's load step misread the checkpoint's qweight (a flipped low bit in every
packed word), then another harmless commit. Plain torch kernel, exact tier: every repro costs one
process start, no interpreter time.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASE = "w4a16/torch_dequant_w4a16/M=3,N=64,K=128,g=32,wt=uint4,ao=0,dt=fp16,fmt=gptq_v2,regime=exact,tier=exact,seed=1"

# Appended to kernels/torch_dequant_w4a16.py by the breaking commit: wraps the registered kernel's load
# (so it survives rewrites of that file) and reads every qweight word with bit 0 flipped.
BUG = '''

# --- bisect test: the breaking change ---------------------------------------------------------------
import dataclasses as _dc

from conformance.registry import get_kernel as _get_kernel

_original_load = type(_get_kernel("torch_dequant_w4a16")).load


def _load_misreading_qweight(self, checkpoint, config=None):
    tensors = dict(checkpoint.tensors, qweight=checkpoint.tensors["qweight"] ^ 1)
    return _original_load(self, _dc.replace(checkpoint, tensors=tensors), config)


type(_get_kernel("torch_dequant_w4a16")).load = _load_misreading_qweight
'''


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=bisect-test", "-c", "user.email=bisect@test",
                           "-c", "commit.gpgsign=false", *args], cwd=repo, check=True, capture_output=True,
                          text=True, timeout=120).stdout


def _commit(repo, msg):
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", msg)
    return _git(repo, "rev-parse", "HEAD").strip()


# directories never copied when the tree has no git index of its own (environments, caches, carried bundles)
_NOT_COPIED = {".git", ".venv", ".vllm", ".whl", ".gl", "out", "__pycache__", ".pytest_cache", ".hypothesis"}


def _tree_files() -> list[str]:
    """The checkout's files, relative to ROOT: git's tracked and untracked-not-ignored files when ROOT is its own
    repository; else (a copy of the tree without .git, as on the GPU machine, where `git ls-files` would answer for
    whatever repository lies above) every file outside _NOT_COPIED: `git add -A` in the scratch repo then applies
    the tree's own .gitignore."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == ROOT:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             check=True, capture_output=True, timeout=60).stdout.decode()
        return [f for f in out.split("\0") if f]
    files = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in _NOT_COPIED and not x.endswith(".egg-info")]
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return files


def _scratch_repo(dest: Path) -> Path:
    for f in _tree_files():
        src = ROOT / f
        if src.is_file():  # tracked but deleted in the working tree: leave out
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    _git(dest, "init", "-q")
    return dest


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CONFORMANCE_PLUGINS") and not k.startswith("GIT_")}
    env["CONFORMANCE_TRACEBACK"] = "1"  # an internal error in a bisect step prints its traceback into the log
    return env


def test_bisect_run_names_the_breaking_commit(tmp_path):
    repo = _scratch_repo(tmp_path / "repo")
    # the scratch checkout runs its own kernels (conformance.core.tree: the kernels/ beside its conformance/), not
    # those of an installed or editable checkout: otherwise no commit would fail and bisect would name HEAD below
    good = _commit(repo, "base: the project as it is")
    (repo / "NOTES.txt").write_text("harmless 1\n")
    _commit(repo, "harmless: notes")
    with open(repo / "kernels" / "torch_dequant_w4a16.py", "a") as f:
        f.write(BUG)
    bad = _commit(repo, "torch_dequant_w4a16: 'faster' qweight read")
    (repo / "NOTES.txt").write_text("harmless 2\n")
    _commit(repo, "harmless: notes 2")

    _git(repo, "bisect", "start", "HEAD", good)
    p = subprocess.run(["git", "bisect", "run", sys.executable, "-m", "conformance", "repro", CASE], cwd=repo,
                       env=_env(), capture_output=True, text=True, timeout=300)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log
    m = re.search(r"^([0-9a-f]{40}) is the first bad commit", log, re.M)
    assert m, log
    assert m.group(1) == bad, log
    # a numerical failure, not a crash: bisect would "find" a commit that broke imports just as well
    assert f"FAIL {CASE}" in log and "ERROR" not in log, log
