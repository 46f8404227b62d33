"""Helpers of scripts/install-vllm.sh: a slim vLLM wheel, a check of an installed --target directory.

    python scripts/vllm_bundle.py slim WHEEL OUTDIR   # WHEEL without its compiled files -> OUTDIR/<same name>
    python scripts/vllm_bundle.py check SITE REQS     # SITE holds every pinned package, their pins agree
    python scripts/vllm_bundle.py size DIR            # bytes of the files under DIR, printed as MiB

`slim` drops every member that is an ELF file (the `.so` extensions and the `vllm-rs` binary: built for a torch
that is not the one here, they load nowhere we test) and the C/C++/CUDA sources and headers vLLM ships for its JIT
builds (`.h .hpp .cuh .cu .cpp .cc`, needed only by compiled code), and rewrites RECORD to match. What is left is
vLLM's Python: it installs with `pip install --no-deps --no-index`, and the adapter reports every kernel whose
compiled op is then absent. `check` reads each installed distribution's Requires-Dist (markers evaluated for this
interpreter, extras ignored) and fails, one line per conflict, when an installed package's version breaks a
requirement of another installed package; requirements on packages that are not installed (torch, the CUDA
wheels: `--no-deps` on purpose) are not checked.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import sys
import zipfile
from pathlib import Path

DROPPED_SUFFIXES = (".h", ".hpp", ".cuh", ".cu", ".cpp", ".cc")


def _is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def slim(wheel: Path, outdir: Path) -> Path:
    """Write `outdir/<wheel name>`: the wheel without compiled members; print what was dropped."""
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / wheel.name
    dropped, dropped_bytes, records = [], 0, []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename == record_name:
                continue
            data = src.read(info)
            if _is_elf(data) or info.filename.endswith(DROPPED_SUFFIXES):
                dropped.append(info.filename)
                dropped_bytes += len(data)
                continue
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append((info.filename, f"sha256={digest}", str(len(data))))
        records.append((record_name, "", ""))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(records)  # RECORD is CSV: names may hold commas
        dst.writestr(record_name, text.getvalue())
    elf = [n for n in dropped if not n.endswith(DROPPED_SUFFIXES)]
    print(f"slim: {wheel.name}: dropped {len(elf)} compiled files ({', '.join(Path(n).name for n in elf[:6])}"
          f"{', ...' if len(elf) > 6 else ''}) and {len(dropped) - len(elf)} C/C++/CUDA sources, "
          f"{dropped_bytes / 2**20:.0f} MiB uncompressed; {wheel.stat().st_size / 2**20:.1f} MiB -> "
          f"{out.stat().st_size / 2**20:.1f} MiB")
    return out


def _dists(site: Path) -> dict:
    from importlib.metadata import distributions

    return {d.metadata["Name"].lower().replace("_", "-"): d for d in distributions(path=[str(site)])}


def check(site: Path, reqs: Path) -> int:
    """0 when SITE holds every package pinned in REQS at its pinned version and no installed package breaks
    another's requirement; else print one line per problem and return 1."""
    from packaging.requirements import Requirement

    dists = _dists(site)
    problems = []
    for line in reqs.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        d = dists.get(req.name.lower().replace("_", "-"))
        if d is None:
            problems.append(f"{req.name}: pinned in {reqs.name} but not installed in {site}")
        elif not req.specifier.contains(d.version, prereleases=True):
            problems.append(f"{req.name}: installed {d.version}, pinned {req.specifier}")
    for name, d in sorted(dists.items()):
        for text in d.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = dists.get(req.name.lower().replace("_", "-"))
            if dep is not None and not req.specifier.contains(dep.version, prereleases=True):
                problems.append(f"{name} {d.version} requires {req}, installed {dep.metadata['Name']} {dep.version}")
    for p in problems:
        print(f"check: {p}", file=sys.stderr)
    print(f"check: {len(dists)} distributions in {site}, {len(problems)} problems")
    return 1 if problems else 0


def size(path: Path) -> None:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(f"size: {path}: {total / 2**20:.1f} MiB in {sum(1 for f in path.rglob('*') if f.is_file())} files")


def main(argv: list[str]) -> int:
    cmds = {"slim": 2, "check": 2, "size": 1}
    if not argv or argv[0] not in cmds or len(argv) != cmds[argv[0]] + 1:
        print(f"usage: vllm_bundle.py slim WHEEL OUTDIR | check SITE REQS | size DIR (got {argv!r})", file=sys.stderr)
        return 2
    cmd, args = argv[0], [Path(a) for a in argv[1:]]
    if cmd == "slim":
        slim(*args)
        return 0
    if cmd == "check":
        return check(*args)
    size(*args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
