"""Where a suite process's startup goes before its first test: each phase a pytest-xdist worker pays, measured alone
in fresh processes, and the same collection run by N processes at once (how 16 workers start on a 16-core GPU host).

Usage (repo root): python benchmarks/probes/startup.py OUT.json [--procs 16] [--profile-top 30]

Phases (each a fresh `python -c` / `python -m pytest` process, wall seconds, median of 3):
  python            the interpreter alone
  torch             import torch
  triton            import torch, triton
  cuda_init         import torch; the first CUDA allocation and synchronize (skipped without a device)
  plugin            import torch, triton and the conformance pytest plugin's modules, load every kernel
  collect           python -m pytest conformance/suite --collect-only -q -p no:xdist (everything above + collection)
  collect_xN        the same collection in N processes started together (wall of the slowest)
and a cProfile of one collection (its top functions by cumulative time) and `-X importtime`'s slowest imports.
The record names the commit (CONFORMANCE_COMMIT / CONFORMANCE_TREE_CLEAN where the tree has no .git).
"""
from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import record_fields  # noqa: E402

PHASES = {
    "python": ["-c", "pass"],
    "torch": ["-c", "import torch"],
    "triton": ["-c", "import torch, triton"],
    "cuda_init": ["-c", "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"],
    "plugin": ["-c", "import torch, triton, conformance.pytest_plugin; from conformance.core import registry; "
                     "registry.load_all(())"],
    "collect": ["-m", "pytest", "conformance/suite", "--collect-only", "-q", "-p", "no:xdist",
                "-p", "no:cacheprovider"],
}


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep))
    return env


def timed(args: list, env: dict) -> tuple[float, int]:
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    return round(time.perf_counter() - t0, 3), rc


def together(args: list, n: int, env: dict) -> dict:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    ends = []
    for p in procs:
        p.wait()
        ends.append(time.perf_counter() - t0)
    return {"procs": n, "slowest_s": round(max(ends), 3), "median_s": round(statistics.median(ends), 3),
            "exit_codes": sorted({p.returncode for p in procs})}


def profile_collection(env: dict, top: int) -> list:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "collect.prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), *PHASES["collect"]], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not out.exists():
            return []
        st = pstats.Stats(str(out))
        rows = []
        for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():
            rows.append({"function": f"{os.path.relpath(file, ROOT) if file.startswith(str(ROOT)) else file}:"
                                     f"{line}({fn})", "calls": nc, "tottime_s": round(tt, 3),
                         "cumtime_s": round(ct, 3)})
        rows.sort(key=lambda r: -r["cumtime_s"])
        return rows[:top]


def slowest_imports(env: dict, top: int) -> list:
    r = subprocess.run([sys.executable, "-X", "importtime", *PHASES["plugin"]], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        try:
            rows.append({"module": parts[2], "self_us": int(parts[0]), "cumulative_us": int(parts[1])})
        except (ValueError, IndexError):
            continue
    rows.sort(key=lambda r: -r["self_us"])
    return rows[:top]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--profile-top", type=int, default=30)
    a = ap.parse_args(argv)
    env = _env()
    import torch

    has_cuda = torch.cuda.is_available()
    doc = {"what": __doc__.splitlines()[0], "command": "python benchmarks/probes/startup.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), **record_fields(), "device": torch.cuda.get_device_name(0)
        if has_cuda else "cpu", "torch": torch.__version__, "cpu_count": os.cpu_count(), "phases": {}}
    for name, args in PHASES.items():
        if name == "cuda_init" and not has_cuda:
            continue
        runs = [timed(args, env) for _ in range(3)]
        doc["phases"][name] = {"median_s": statistics.median(r[0] for r in runs), "runs_s": [r[0] for r in runs],
                               "exit_codes": sorted({r[1] for r in runs})}
    doc["phases"][f"collect_x{a.procs}"] = together(PHASES["collect"], a.procs, env)
    doc["collect_profile"] = profile_collection(env, a.profile_top)
    doc["slowest_imports"] = slowest_imports(env, a.profile_top)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["phases"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
