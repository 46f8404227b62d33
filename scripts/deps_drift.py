"""The latest-releases lane: install today's newest releases in a fresh venv (`CONFORMANCE_DEPS=latest bash
scripts/setup.sh`), run the README's test command there and in the locked environment, and write what moved to
benchmarks/results/deps_drift.json: package versions against requirements/lock.txt, and the tests whose verdict
changed. Run it by hand or on a schedule, never inside the tests (two setups and two full test runs).

    python scripts/deps_drift.py                        # both venvs made fresh in a temp dir
    python scripts/deps_drift.py --lock-venv .venv      # reuse a venv that setup.sh made from the lock
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LOCK = ROOT / "requirements" / "lock.txt"
OUT = ROOT / "benchmarks" / "results" / "deps_drift.json"
README_TESTS = ["-m", "pytest", "-n", "auto", "-q", "-p", "no:cacheprovider"]


def canonical(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict:
    """{canonical name: version} of the `name==version` lines of a pip-compile lock."""
    pins = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", line)
        if m:
            pins[canonical(m.group(1))] = m.group(2)
    return pins


def version_moves(locked: dict, installed: dict, local: dict | None = None) -> dict:
    """What moved from the lock: {"changed": {name: {"lock", "latest"}}, "added": {name: version}, "removed": [...]}.
    `installed`: what the venv sees (its own packages and the system's, under --system-site-packages); `local`: its
    own only (default: all of `installed`), the only place an added package can come from. Names are canonical;
    packages the lock leaves out on purpose (torch, triton, pip, the project) are not added."""
    installed = {canonical(k): v for k, v in installed.items()}
    local = installed if local is None else {canonical(k): v for k, v in local.items()}
    unlocked = {"torch", "triton", "pip", "quant-kernel-conformance"}
    return {
        "changed": {n: {"lock": v, "latest": installed[n]} for n, v in sorted(locked.items())
                    if n in installed and installed[n] != v},
        "added": {n: v for n, v in sorted(local.items()) if n not in locked and n not in unlocked},
        "removed": sorted(n for n in locked if n not in installed),
    }


def junit_verdicts(xml_text: str) -> dict:
    """{test id: "passed" | "failed" | "error" | "skipped"} from a pytest --junitxml file."""
    verdicts = {}
    for tc in ET.fromstring(xml_text).iter("testcase"):
        tid = f"{tc.get('classname', '')}::{tc.get('name', '')}"
        kinds = {child.tag for child in tc}
        verdicts[tid] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                         else "skipped" if "skipped" in kinds else "passed")
    return verdicts


def verdict_changes(lock: dict, latest: dict) -> list:
    """[{"test", "lock", "latest"}] for every test whose verdict differs, or that ran in one lane only."""
    return [{"test": t, "lock": lock.get(t, "absent"), "latest": latest.get(t, "absent")}
            for t in sorted(set(lock) | set(latest)) if lock.get(t) != latest.get(t)]


def _venv_env(venv: Path) -> dict:
    env = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    return env


def _setup(venv: Path, lane: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, env=dict(_venv_env(venv), CONFORMANCE_DEPS=lane),
                   check=True)
    return round(time.monotonic() - t0, 1)


def _installed(venv: Path, *flags: str) -> dict:
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", *flags],
                         capture_output=True, text=True, check=True, env=_venv_env(venv)).stdout
    return {p["name"]: p["version"] for p in json.loads(out)}


def _tests(venv: Path, junit: Path) -> dict:
    t0 = time.monotonic()
    r = subprocess.run([str(venv / "bin" / "python"), *README_TESTS, f"--junitxml={junit}"], cwd=ROOT,
                       env=_venv_env(venv), capture_output=True, text=True)
    verdicts = junit_verdicts(junit.read_text()) if junit.is_file() else {}
    counts = {k: sum(v == k for v in verdicts.values()) for k in ("passed", "failed", "error", "skipped")}
    return {"exit": r.returncode, "wall_s": round(time.monotonic() - t0, 1), "counts": counts,
            "tail": r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else [], "verdicts": verdicts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lock-venv", type=Path, help="a venv that `bash scripts/setup.sh` made from the lock")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    if a.lock_venv is not None and not (a.lock_venv / "bin" / "python").is_file():
        print(f"deps_drift: --lock-venv={a.lock_venv}: no bin/python there (allowed: a venv made by setup.sh)",
              file=sys.stderr)
        return 2
    from conformance.core.tree import import_tree_package

    import_tree_package("conformance_bench")
    from conformance_bench.provenance import code_identity

    ident = code_identity(ROOT)
    with tempfile.TemporaryDirectory(prefix="deps-drift-") as tmp:
        tmp = Path(tmp)
        setup_s = {}
        lock_venv = a.lock_venv
        if lock_venv is None:
            lock_venv = tmp / "lock"
            setup_s["lock"] = _setup(lock_venv, "lock")
        setup_s["latest"] = _setup(tmp / "latest", "latest")
        latest = tmp / "latest"
        moves = version_moves(read_lock(LOCK.read_text()), _installed(latest), _installed(latest, "--local"))
        runs = {lane: _tests(v, tmp / f"{lane}.xml") for lane, v in (("lock", lock_venv), ("latest", tmp / "latest"))}
    changes = verdict_changes(runs["lock"].pop("verdicts"), runs["latest"].pop("verdicts"))
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {"commit": ident["commit"], "clean": ident["clean"], "date": date,
           "python": sys.version.split()[0], "lock": str(LOCK.relative_to(ROOT)), "setup_s": setup_s,
           "packages": moves, "tests": runs, "changed_verdicts": changes}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    moved = len(moves["changed"]) + len(moves["added"]) + len(moves["removed"])
    print(f"deps_drift: {moved} package(s) moved from the lock, {len(changes)} test verdict(s) changed; "
          f"lock exit {runs['lock']['exit']}, latest exit {runs['latest']['exit']} -> {a.out}")
    return 0 if runs["latest"]["exit"] == 0 and not changes else 1


if __name__ == "__main__":
    sys.exit(main())
